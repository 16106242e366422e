"""The batched multi-seed pass gives the same per-seed results as separate runs."""

from __future__ import annotations

import pytest

from normsys.batched import train_seeds
from normsys.config import preset
from normsys.train import train_with_state

TINY_ENCODER = {"data.n_train": 96, "data.n_test": 32, "model.seq_len": 16, "model.d": 16,
                "train.epochs": 2, "train.batch_size": 32, "train.probe_batch": 8}


def close(a, b, rel=2e-4, abs_=1e-6):
    return all(abs(x - y) <= abs_ + rel * abs(y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("name,changes", [
    ("ffn_stack", {"train.steps": 6, "model.d": 16, "data.batch_shape": (4, 5, 16)}),
    ("encoder", TINY_ENCODER),
])
def test_batched_seeds_match_separate_runs(name, changes, data_env, no_cache):
    cfgs = [preset(name, **changes, **{"train.seed": s}) for s in (0, 1, 2)]
    batched = train_seeds(cfgs)
    for cfg, (rec_b, _) in zip(cfgs, batched, strict=True):
        rec_s, _ = train_with_state(cfg)
        assert rec_b.fingerprint == rec_s.fingerprint and rec_b.steps == rec_s.steps
        assert close(rec_b.curves["loss"], rec_s.curves["loss"])
        assert close(rec_b.curves["grad_norm"], rec_s.curves["grad_norm"], rel=1e-3)
        for key, value in rec_s.metrics.items():
            assert abs(rec_b.metrics[key] - value) <= 1e-3 * max(1.0, abs(value)), key
        for layer, probe in rec_s.probes.items():
            assert abs(rec_b.probes[layer]["erank"] - probe["erank"]) <= 1e-2


def test_compiled_paths_match_eager_runs(no_cache, monkeypatch, light_compile):
    """The CUDA path compiles the model (one run) and the vmapped loss (batched seeds); forced on
    here on the CPU, both must give the eager runs' losses."""
    cfgs = [preset("ffn_stack", **{"train.steps": 6, "model.d": 16, "data.batch_shape": (4, 5, 16),
                                   "train.seed": s}) for s in (0, 1)]
    eager = [train_with_state(c)[0] for c in cfgs]
    monkeypatch.setattr("normsys.train.compile_on", lambda device: True)
    single = train_with_state(cfgs[0])[0]
    batched = [record for record, _ in train_seeds(cfgs)]
    for fast, ref in zip([single, *batched], [eager[0], *eager], strict=True):
        assert fast.steps == ref.steps and close(fast.curves["loss"], ref.curves["loss"])


def test_batched_seeds_reject_what_they_cannot_do():
    base = preset("ffn_stack", **{"train.steps": 2})
    with pytest.raises(ValueError, match="differ only in train.seed"):
        train_seeds([base, base.override(**{"train.lr": 0.1})])
    with pytest.raises(ValueError, match="bp only"):
        train_seeds([preset("resmlp", **{"train.method": "fa"})])
    with pytest.raises(ValueError, match="batchnorm"):
        train_seeds([preset("ffn_stack", **{"model.norm": "batchnorm"})])
