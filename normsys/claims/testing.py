"""Helpers shared by the tests, benchmarks and claims: seeded tensors and the tolerance table.

Hypothesis draws shapes, scales and seeds; a seeded torch generator fills the tensor (element-wise
draws shrink to constant rows, where eps dominates a norm).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from normsys.training.config import preset
from normsys.training.tiers import DEFAULT, tier

# (dtype, atol, rtol, reason): one row per dtype used in parity checks against torch's own ops.
TOLERANCES: dict[torch.dtype, tuple[float, float, str]] = {
    torch.float64: (1e-12, 1e-10, "same formula, different reduction order: ~1e-15 relative"),
    torch.float32: (1e-5, 1e-5, "relaxed: torch's kernels use Welford / fused rsqrt, "
                                "rounding differs by a few ulp at d ~ 1e3"),
    torch.bfloat16: (2e-2, 2e-2, "relaxed: 8-bit mantissa, ~4e-3 relative per rounding"),
}


def seeded_randn(shape: tuple[int, ...], seed: int, dtype: torch.dtype = torch.float64,
                 scale: float = 1.0, device: str = "cpu") -> torch.Tensor:
    """A standard normal tensor of ``shape`` times ``scale`` from a generator seeded with ``seed``."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(device, dtype)


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    """``atol``/``rtol`` keyword arguments for torch.testing.assert_close at ``dtype``."""
    atol, rtol, _ = TOLERANCES[dtype]
    return {"atol": atol, "rtol": rtol}


# The seeds every claim of the CPU tier reads first. A control's case whose configuration a claim
# trains already (one arm of its claim's experiment left as it is, or the experiment given the norm
# of another claim's arm) reads it on these, so its runs train once for both: what lets the case
# fail is the verdict its design fixes (an untrained arm cannot match a trained one, an l2
# encoder's rank collapses), not which seeds it reads. Cases on a configuration of their own take
# ``unread_seeds``, and so does the A/A case, whose arms must differ in their seeds.
CONTROL_SEEDS = (0, 1, 2)


def unread_seeds(declared, n: int = 3) -> range:
    """``n`` seeds past those a claim (its Declaration) reads at the CPU tier's first look, for a
    control's case on a configuration no claim trains, or the A/A case's first arm: its runs are
    then never the claim's first look read again."""
    first = tier(DEFAULT).first_look(declared.seeds)
    return range(first, first + n)


def alike_on_disjoint_seeds(declared, alike, fetch, variant: str = ""):
    """A claim's A/A case: ``alike``, its experiment with the arms made alike
    (``Experiment.overridden``), its first arm on the seeds past the claim's (``unread_seeds``)
    and every other arm on the claim's own first seeds, paired by position; decided by the
    claim's reading and rule. The arms then differ in their seeds alone, so the rule sees
    values with their seed spread and no effect: it must not come out on the claim's side, and
    the values must differ (a reading that cannot tell two runs apart decides exact zeros). An arm
    given an edge the claim does not name (trained longer, read elsewhere) shows here too. Each
    side's runs are ones the claim or its controls train already, where the arms differ in
    what ``alike`` sets alone."""
    from normsys.claims.verdict import SUPPORTED

    first, *others = alike.arms
    later = replace(alike, arms={first: alike.arms[first]})
    earlier = replace(alike, arms={arm: alike.arms[arm] for arm in others})
    values = {**later.values(fetch, unread_seeds(declared), variant=variant),
              **earlier.values(fetch, CONTROL_SEEDS, variant=variant)}
    decision = declared.verdict(values)
    assert decision.std > 0, f"{declared.id}: the A/A case's per-seed values are all alike " \
                             f"({decision.values}): the reading does not tell runs apart"
    assert decision.verdict != SUPPORTED, f"{declared.id}: supported with no effect between " \
                                          f"its arms: {decision.reason}"
    return decision


def arm_changed(declared, arm: str, settings: dict):
    """A claim's (its Declaration's) experiment with ``settings`` set in ``arm`` alone."""
    exp = declared.experiment
    return replace(exp, arms={**exp.arms, arm: exp.arms[arm].changed(settings)})


# A run left at its initialization: learning rate 0, for one step. Any number of steps at rate 0
# leaves the model where it started (each update is the rate times the optimizer's moments), so
# the run measures the same model as a full-length run at rate 0 would, for the price of its
# evaluation (a claim's encoder or char GPT at rate 0 for its full length: 1-2 minutes a run).
# Not for a model with BatchNorm, whose running statistics move with every step at any rate.
AT_INIT = {"train.lr": 0.0, "train.steps": 1}


def left_untrained(declared, arm: str):
    """A claim's experiment with ``arm`` left at its initialization (``AT_INIT``): for an
    equivalence claim, a case where the two arms cannot match."""
    return arm_changed(declared, arm, AT_INIT)


# a small classifier that learns in seconds: 2,000 MNIST rows, one epoch of the deep-dive MLP
SMALL_CLASSIFIER = {"data.n_train": 2000, "data.n_test": 1000, "train.eval_train_rows": 1000,
                    "train.probe": ()}


def trained_and_untrained(run, cfg, seeds=CONTROL_SEEDS) -> tuple[list, list]:
    """Records of ``cfg`` trained, and of the same config at learning rate 0 (its model never
    leaves its initialization), per seed: a pair with the effect of training present and absent,
    which the metric-difference controls compare. Fetched with ``run`` (the claims' fixture)."""
    trained = [run(cfg.override(**{"train.seed": s})) for s in seeds]
    untrained = [run(cfg.override(**{"train.seed": s, "train.lr": 0.0})) for s in seeds]
    return trained, untrained


def small_classifier_accuracies(run, seeds=CONTROL_SEEDS) -> tuple[list[float], list[float]]:
    """Test accuracy of the small classifier trained and untrained, per seed (``run``: the claims'
    fixture)."""
    trained, untrained = trained_and_untrained(run, preset("mlp", **SMALL_CLASSIFIER), seeds)
    return ([r.metrics["test_acc"] for r in trained], [r.metrics["test_acc"] for r in untrained])
