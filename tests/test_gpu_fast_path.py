"""The CUDA fast path keeps results within numerical tolerance of plain fp32 (bf16 autocast,
fused attention and torch.compile must not change results beyond numerical tolerance).

GPU cases are marked gpu (skipped without CUDA). The CPU case checks the comparison itself: it must
tell a genuinely different run apart, or the GPU cases could not fail.
"""

from __future__ import annotations

import time

import pytest
import torch

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


# (preset, method, norm, seeds stacked): the families on the paper tier's critical path, each
# learning rule, per-step batchnorm and stacked seeds, then every other family; sizes cut so that
# every run captures after its warm-up, and the MNIST and AG News runs end each epoch on a short
# batch (run eager between replays)
CAPTURED = [("lstm", "bp", "layernorm", 1), ("lstm", "bp", "batchnorm", 5),
            ("lstm", "bp", "none", 1), ("resmlp", "bp", "layernorm", 1),
            ("resmlp", "fa", "layernorm", 1), ("resmlp", "dfa", "rmsnorm", 1),
            ("resmlp", "fa", "layernorm", 3), ("resmlp", "dfa", "layernorm", 3),
            ("resmlp", "bp", "l2", 3), ("encoder", "bp", "layernorm", 2),
            ("encoder", "bp", "dyt", 1), ("vit", "bp", "layernorm", 1),
            ("char_gpt", "bp", "layernorm", 1), ("tblock", "bp", "scaled_l2", 1),
            ("mlp", "bp", "l2_affine", 1), ("cnn", "bp", "batchnorm", 1),
            ("ffn_stack", "bp", "none", 1)]
MNIST_SMALL = {"data.n_train": 1000, "data.n_test": 500, "train.epochs": 2}
CAPTURE_SIZES = {"lstm": {"train.steps": 120}, "char_gpt": {"train.steps": 40},
                 "ffn_stack": {"train.steps": 40}, "encoder": MNIST_SMALL,
                 **dict.fromkeys(("resmlp", "vit", "tblock", "mlp", "cnn"), MNIST_SMALL)}


@pytest.mark.gpu
@pytest.mark.parametrize("name,method,norm,seeds", CAPTURED)
def test_a_captured_step_trains_as_the_eager_step(data_env, no_cache, monkeypatch, name, method,
                                                  norm, seeds):
    """train.compile=auto captures a short CUDA run's step as a CUDA graph and replays it: the run
    ends where the same run with the eager step (train.compile=off) ends, within the tolerances
    of bf16 above (the per-step gap is printed: the graph replays the eager step's kernels)."""
    from benchmarks.bench import CAPTURED_VS_EAGER  # the line the benchmark table reads back

    from normsys.training import train as train_module
    from normsys.training.train import compile_mode, fit

    replays = []
    real = train_module.CapturedStep.__call__
    monkeypatch.setattr(train_module.CapturedStep, "__call__", lambda self, x, y: (
        replays.append(self.graph is not None), real(self, x, y))[1])
    cfgs = [preset(name, **{"train.device": "cuda", "train.method": method, "model.norm": norm,
                            "train.seed": s, **CAPTURE_SIZES[name]}) for s in range(seeds)]
    start = time.perf_counter()
    eager = [record for record, _ in fit([c.override(**{"train.compile": "off"}) for c in cfgs])]
    middle = time.perf_counter()
    captured = [record for record, _ in fit(cfgs)]
    walls = {"captured": time.perf_counter() - middle, "eager": middle - start}
    steps = len(captured[0].curves["loss"])
    assert compile_mode(cfgs[0], torch.device("cuda"), steps) == "capture"
    assert sum(replays) > steps // 2, (sum(replays), steps)  # most steps were replays
    for a, b in zip(captured, eager, strict=True):
        assert a.steps == b.steps and a.diverged == b.diverged is False
        gaps = {k: abs(a.metrics[k] - b.metrics[k]) / max(abs(b.metrics[k]), 1e-12)
                for k in ("final_loss", "val_loss") if k in b.metrics}
        same = a.curves["loss"] == b.curves["loss"] and a.metrics == b.metrics
        worst = max(abs(x - y) / max(abs(y), 1e-12)
                    for x, y in zip(a.curves["loss"], b.curves["loss"], strict=True))
        print(CAPTURED_VS_EAGER.format(
            run=f"{name}/{method}/{norm}/x{seeds}", seed=a.config["train"]["seed"], steps=steps,
            replays=sum(replays), same=same, gaps=gaps, worst=worst, **walls))
        assert all(g < LOSS_REL for g in gaps.values()), gaps
        if "test_acc" in b.metrics:
            assert abs(a.metrics["test_acc"] - b.metrics["test_acc"]) < ACC_ABS
