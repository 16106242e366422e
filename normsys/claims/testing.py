"""Helpers shared by the tests, benchmarks and claims: seeded tensors and the tolerance table.

Hypothesis draws shapes, scales and seeds; a seeded torch generator fills the tensor (element-wise
draws shrink to constant rows, where eps dominates a norm).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from normsys.claims.verdict import INCONCLUSIVE, apart
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


def on_seed_sets(experiment, fetch, first_seeds, other_seeds, variant: str = "") -> dict:
    """Per arm of ``experiment``, each seed's value: its first arm's on ``first_seeds``, every
    other arm's on ``other_seeds``, paired by position (an A/A case's values)."""
    first, *others = experiment.arms
    values = {**replace(experiment, arms={first: experiment.arms[first]}).values(
                  fetch, first_seeds, variant=variant),
              **replace(experiment, arms={arm: experiment.arms[arm] for arm in others}).values(
                  fetch, other_seeds, variant=variant)}
    return {arm: values[arm] for arm in experiment.arms}


def alike_on_disjoint_seeds(declared, alike, fetch, family: int, variant: str = ""):
    """A claim's A/A case, one of a family of ``family`` comparisons decided together (normsys.
    declarations.aa_family): ``alike``, its experiment with the arms made alike (``Experiment.
    overridden``), its first arm on the seeds past the claim's (``unread_seeds``) and every other
    arm on the claim's own first seeds, paired by position. The arms then differ in their seeds
    alone: the values must differ (a reading that cannot tell two runs apart decides exact
    zeros, whatever the arms), and they must not lie apart from the value alike arms give
    (``Experiment.alike_value``), in either direction, at the family's level (verdict.apart).
    An arm given an edge the claim does not name (trained longer, read elsewhere) shows here.
    Each side's runs are ones the claim or its controls train already. Where the arms lie apart,
    the case is read once more on seeds neither side has read (the first arm's three past
    those, the others' three past that), and fails only if they lie apart again. The
    comparisons' verdicts, of the second reading where there was one."""
    def read(first_seeds, other_seeds) -> dict:
        values = on_seed_sets(alike, fetch, first_seeds, other_seeds, variant)
        comparisons = apart(values, alike.alike_value, family, alike.combine)
        for name, decision in comparisons.items():
            assert decision.std > 0, f"{declared.id}: the A/A case's per-seed values " \
                f"{name and f'of {name} '}are all alike or undefined ({decision.values}): " \
                f"the reading does not tell runs apart"
        return comparisons

    def lying_apart(comparisons: dict) -> str:
        return "; ".join(f"{name or 'values'} {d.interval}" for name, d in comparisons.items()
                         if d.verdict != INCONCLUSIVE)

    first_read = read(unread_seeds(declared), CONTROL_SEEDS)
    if not (found := lying_apart(first_read)):
        return first_read
    fresh = unread_seeds(declared, 9)
    again = lying_apart(second_read := read(fresh[3:6], fresh[6:9]))
    assert not again, f"{declared.id}: its arms, alike but for their seeds, lie apart from " \
                      f"{alike.alike_value} at the A/A family's level, twice: {found}; on fresh " \
                      f"seeds {again}"
    return second_read


def arm_changed(declared, arm: str, settings: dict):
    """A claim's (its Declaration's) experiment with ``settings`` set in ``arm`` alone."""
    exp = declared.experiment
    return replace(exp, arms={**exp.arms, arm: exp.arms[arm].changed(settings)})


# A run left at its initialization: learning rate 0, for one step. Any number of steps at rate 0
# leaves the model where it started (each update is the rate times the optimizer's moments), so
# the run measures the same model as a full-length run at rate 0 would, for the price of its
# evaluation (a claim's encoder or char GPT at rate 0 for its full length: 1-2 minutes a run).
# A model with BatchNorm keeps one batch's share (its momentum, 0.1) in its running statistics:
# still an untrained model, but not the one a full-length run at rate 0 would evaluate.
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
