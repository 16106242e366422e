"""RunRecord: what one training run produced, stored next to the config that produced it; the
layout of its metrics and probes, declared once (``Probe``, the metric names, ``probe_of``); and
the trained model it describes (``trained_model``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TypedDict

import torch
from torch import nn

from normsys.training.config import RunConfig
from normsys.training.models import build_model, prepare_model

# the metrics a record holds (NaN for a diverged run): losses at init and at the end of training
# (mean of the last 10 steps); classification: accuracy and mean loss on the first
# train.eval_train_rows training rows and on the held-out rows; language models: mean loss on
# fixed windows of the train and validation text
INIT_LOSS, FINAL_LOSS = "init_loss", "final_loss"
TRAIN_ACC, TEST_ACC, TRAIN_LOSS, TEST_LOSS, VAL_LOSS = (
    "train_acc", "test_acc", "train_loss", "test_loss", "val_loss")


class Spectrum(TypedDict):
    """A probed hidden state's spectrum (rows = batch x tokens)."""

    singular_values: list[float]
    erank: float        # effective rank (Roy & Vetterli 2007)
    rho: float          # erank / d
    stable_rank: float
    mean_norm: float    # mean row norm


class Probe(Spectrum, total=False):
    """What a run measures of one probed module (train.probe) on its fixed probe batch."""

    unit_corr: float     # mean |off-diagonal| correlation of hidden units
    token_cosine: float  # (B, T, d) states: mean cosine of distinct tokens
    nonpad: Spectrum     # encoder: the spectrum without the padding rows


def probe_of(probes: dict[str, Probe], layer: str, rows: str = "all") -> Probe | Spectrum:
    """The probe of ``layer`` in a run's probes (RunRecord.probes, or measure.at_init's): over all
    rows, or ``rows="nonpad"`` without the encoder's padding rows."""
    if layer not in probes:
        raise KeyError(f"no probe of {layer!r}; probed: {sorted(probes) or 'none (diverged?)'}")
    return probes[layer] if rows == "all" else probes[layer][rows]


@dataclass
class RunRecord:
    config: dict                      # the resolved RunConfig as a dict
    fingerprint: str                  # RunConfig.fingerprint()
    version: str                      # normsys version that produced it
    metrics: dict[str, float]         # by the metric names above
    curves: dict[str, list[float]]    # per step: loss, grad_norm, batch_acc; per epoch:
                                      # train_acc_running
    probes: dict[str, Probe]          # module name -> its Probe
    init_grad_norms: dict[str, float]  # ||dL/dW|| per parameter on the first batch, at init
    diverged: bool                    # a non-finite loss ended the run early
    steps: int                        # optimizer steps taken
    wall_time: float                  # seconds of training and measurement
    env: dict[str, str]               # torch, device, commit, normsys version
    data_source: str                  # which real rows (and how many) the run used
    extra: dict = field(default_factory=dict)
    state_path: str | None = None     # the trained weights (torch.save), when kept

    @property
    def run_config(self) -> RunConfig:
        return RunConfig.from_dict(self.config)

    def to_json(self) -> str:
        return json.dumps(asdict(self), allow_nan=True)

    @classmethod
    def from_json(cls, text: str) -> RunRecord:
        return cls(**json.loads(text))


def snapshot_key(epoch: int, name: str) -> str:
    """Where a snapshot's weight sits in a run's stored state."""
    return f"snapshot@{epoch}/{name}"


def trained_model(record: RunRecord, learning_rule: bool = True, device: str = "cpu",
                  epoch: int | None = None) -> nn.Module:
    """The model of a run with its trained weights, in eval mode. ``learning_rule=False`` loads
    the weights into a plain model, whose backward is autograd's through the true weights (an FA
    net's feedback matrices left out): what a diagnostic of the net itself measures. ``epoch``:
    the weights after that epoch instead (one of the config's train.snapshots)."""
    cfg = record.run_config
    if not cfg.train.keep_state:
        raise FileNotFoundError(f"run {record.fingerprint} kept no weights: its config has "
                                f"train.keep_state=False; set it True and rerun")
    if record.state_path is None:
        raise FileNotFoundError(f"run {record.fingerprint} has no weights stored with its record: "
                                f"the run cache stores them (normsys.claims.cache.cached_runs); a "
                                f"record trained outside it, or whose disk took no weights (a "
                                f"full disk), has none")
    if not Path(record.state_path).is_file():
        raise FileNotFoundError(f"run {record.fingerprint}'s weights are gone from "
                                f"{record.state_path} (removed, or kept by a process that has "
                                f"ended); rerun it")
    stored = torch.load(record.state_path, map_location=device)
    if epoch is not None and epoch not in cfg.train.snapshots:
        raise ValueError(f"run {record.fingerprint} kept no weights after epoch {epoch}; "
                         f"train.snapshots={cfg.train.snapshots}")
    prefix = snapshot_key(epoch, "") if epoch is not None else None
    state = {k.removeprefix(prefix): v for k, v in stored.items() if k.startswith(prefix)} \
        if prefix else {k: v for k, v in stored.items() if not k.startswith("snapshot@")}
    if learning_rule:
        model = prepare_model(cfg)
    else:
        model = build_model(cfg.model)
        state = {k: v for k, v in state.items() if not k.endswith(".feedback")}
    model.load_state_dict(state)
    return model.to(device).eval()
