"""Every paper-tier code path runs on CPU at tiny size (the real paper tier needs a GPU): the
tier's presets, and the measurements claims take of their runs."""

from __future__ import annotations

import pytest
import torch

from normsys.declarations.shared.protocol import (
    direction_stability,
    disjoint_batches,
    hidden_and_grads,
    layernorm_gradients,
    ln_vjp_errors,
    mnist_report,
)
from normsys.orchestration.runs import Runs
from normsys.training.config import preset
from normsys.training.data import mnist, tiny_shakespeare
from normsys.training.record import trained_model
from normsys.training.tasks import lm_batch

TINY_TRAIN = {"train.steps": 2, "train.batch_size": 8}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))


def test_encoder_paper_tier_settings_and_tiny_run(data_env, cache):
    cfg = preset("encoder", "paper", **{"model.norm": "l2"})
    assert (cfg.model.d, cfg.model.seq_len, cfg.train.lr, cfg.train.batch_size,
            cfg.train.epochs, cfg.data.tier) == (128, 128, 2e-4, 256, 15, "paper")
    tiny = cfg.override(**TINY_TRAIN, **{"data.n_train": 32, "data.n_test": 16,
                                         "train.probe_batch": 4})
    record = Runs().run(tiny)
    assert "FALLBACK" in record.data_source and record.steps == 2
    assert set(record.probes) == {"blocks.0", "blocks.2", "blocks.5"}


def test_tanh_mlp_paper_tier(cache):
    record = Runs().run(preset("tanh_mlp", "paper", **{"model.residual": True}))
    here = "cuda" if torch.cuda.is_available() else "cpu"  # the paper tier's device=auto
    assert record.env["device"].startswith(here) and len(record.init_grad_norms) == 20


def test_char_gpt_paper_tier_fa_and_ln_captures(data_env, cache):
    cfg = preset("char_gpt", "paper", **{"model.attention": "sigmoid", "train.method": "fa",
                                         "train.steps": 2, "train.batch_size": 4})
    record = Runs().run(cfg)
    batch = lm_batch(tiny_shakespeare()[1], 64, 4, torch.Generator().manual_seed(0))
    captures = layernorm_gradients(trained_model(record), *batch)
    assert len(captures) == 9 and max(ln_vjp_errors(captures)) < 1e-4


@pytest.mark.parametrize("method,frozen", [("dfa", False), ("bp", True)])
def test_fa_protocol_paper_tier(method, frozen, data_env, cache):
    cfg = preset("resmlp", "paper", **{"train.method": method, "train.frozen_blocks": frozen})
    record = Runs().run(cfg.override(**TINY_TRAIN, **{"data.n_train": 64, "data.n_test": 64}))
    model = trained_model(record, learning_rule=False)
    report = mnist_report(model, n_batches=2, size=16)
    assert len(report["residual_norms"]) == 5 and report["layer"] == 2
    split = mnist()
    means = [hidden_and_grads(model, *batch)[1][2].mean(0)
             for batch in disjoint_batches(split.x_test, split.y_test, n=2, size=16)]
    assert report["stability"] == pytest.approx(direction_stability(means), abs=1e-12)
