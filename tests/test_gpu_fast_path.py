"""The CUDA fast path keeps results within numerical tolerance of plain fp32 (bf16 autocast,
fused attention and torch.compile must not change results beyond numerical tolerance).

GPU cases are marked gpu (skipped without CUDA). The CPU case checks the comparison itself: it must
tell a genuinely different run apart, or the GPU cases could not fail.
"""

from __future__ import annotations

import pytest

from normsys.training.config import preset
from normsys.training.record import RunRecord
from normsys.training.train import train

# bf16 keeps 8 mantissa bits: per-op relative error ~4e-3, and training trajectories then drift
# apart like two nondeterministic runs. Bounds at the scale of seed-to-seed spread at the CPU tier
# (LayerNorm encoder test acc 0.80-0.81, erank(block 6) 43-47).
LOSS_REL, ACC_ABS, ERANK_REL = 0.05, 0.03, 0.05


def differences(a: RunRecord, b: RunRecord) -> dict[str, float]:
    """Relative gap of the final training loss (mean of the last 10 steps), absolute gap of test
    accuracy, relative gap of the effective rank at the last block."""
    ea, eb = a.probes["blocks.5"]["erank"], b.probes["blocks.5"]["erank"]
    la, lb = a.metrics["final_loss"], b.metrics["final_loss"]
    return {"loss": abs(la - lb) / lb,
            "test_acc": abs(a.metrics["test_acc"] - b.metrics["test_acc"]),
            "erank": abs(ea - eb) / eb}


def within_tolerance(diff: dict[str, float]) -> bool:
    return diff["loss"] < LOSS_REL and diff["test_acc"] < ACC_ABS and diff["erank"] < ERANK_REL


COMPILE_MODES = ["auto", "on", "cudagraphs"]  # auto: eager for a run this short


@pytest.mark.gpu
@pytest.mark.parametrize("compile_mode", COMPILE_MODES)
def test_bf16_autocast_and_compile_match_fp32_on_the_seed_encoder(data_env, no_cache, compile_mode):
    cfg = preset("encoder", **{"train.device": "cuda", "train.epochs": 2})
    fast = train(cfg.override(**{"train.compile": compile_mode}))  # bf16, compiled, fused Adam, SDPA
    plain = train(cfg.override(**{"train.amp": "off", "train.compile": "off"}))
    diff = differences(fast, plain)
    assert within_tolerance(diff), diff


@pytest.mark.gpu
@pytest.mark.parametrize("compile_mode", COMPILE_MODES)
def test_seed_stacked_pass_matches_separate_runs_on_cuda(data_env, no_cache, compile_mode):
    """Two seeds trained as one stacked model on CUDA (the paper tier's way: folded batch through
    the [CLS]-only attention of the last block, bf16) end where separate fp32 runs end."""
    from normsys.training.batched import train_seeds

    cfgs = [preset("encoder", **{"train.device": "cuda", "train.epochs": 2, "train.seed": s,
                                 "train.compile": compile_mode}) for s in (0, 1)]
    for cfg, (stacked, _) in zip(cfgs, train_seeds(cfgs), strict=True):
        plain = train(cfg.override(**{"train.amp": "off", "train.compile": "off"}))
        diff = differences(stacked, plain)
        assert within_tolerance(diff), diff


def test_the_tolerance_check_tells_a_different_run_apart(data_env, no_cache):
    """CPU: the same run is within tolerance of itself; a run at a 30x learning rate is not."""
    cfg = preset("encoder", **{"data.n_train": 512, "data.n_test": 256, "train.epochs": 1,
                               "train.device": "cpu"})
    same = train(cfg)
    assert within_tolerance(differences(same, train(cfg)))
    assert not within_tolerance(differences(train(cfg.override(**{"train.lr": 3e-2})), same))
