"""RunRecord: what one training run produced, stored next to the config that produced it."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from normsys.config import RunConfig


@dataclass
class RunRecord:
    config: dict                      # the resolved RunConfig as a dict
    fingerprint: str                  # RunConfig.fingerprint()
    version: str                      # normsys version that produced it
    metrics: dict[str, float]         # train_acc, test_acc, train_loss, test_loss / val_loss ...
    curves: dict[str, list[float]]    # per step: loss, grad_norm; per epoch: train_acc_running
    probes: dict[str, dict]           # module name -> singular_values, erank, stable_rank, norms
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
