"""Statistics behind verdicts: t quantiles, intervals, and the three-way decisions, each through
the one decision path (normsys.claims.verdict.decide)."""

from __future__ import annotations

import math

import pytest

from normsys.claims.verdict import (
    INCONCLUSIVE,
    REFUTED,
    SUPPORTED,
    Rule,
    Verdict,
    decide,
    t_cdf_two_sided,
    t_quantile,
)


def on(values, side: str, threshold: float, confidence: float = 0.95, family: int = 1) -> Verdict:
    """The verdict of ``v <side> threshold`` on one arm's per-seed values (one comparison of a
    ``family`` that must all hold)."""
    return decide(Rule("v", side, threshold), values, confidence, family=family)


def paired(a, b, side: str, threshold: float, confidence: float = 0.95) -> Verdict:
    """The verdict of ``v(a) - v(b) <side> threshold`` on two arms' per-seed values."""
    return decide(Rule("v(a) - v(b)", side, threshold), {"a": a, "b": b}, confidence)


def within(values, low: float, high: float) -> Verdict:
    """The verdict of ``v within (low, high)``."""
    return decide(Rule("v", "within", (low, high)), values)


def summary(values, confidence: float = 0.95) -> Verdict:
    """A verdict read for its interval only."""
    return on(values, ">", 0.0, confidence)


def all_of(parts: dict, side: str, threshold: float, confidence: float = 0.95) -> Verdict:
    """The verdict on per-seed values of several parts (``{part: per-seed values}``), as a claim
    whose reading gives one value per part a seed decides it."""
    seeds = [dict(zip(parts, seed, strict=True)) for seed in zip(*parts.values(), strict=True)]
    return decide(Rule("v", side, threshold), seeds, confidence)

# Two-sided 95% critical values from standard tables.
T_TABLE = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 9: 2.2622, 30: 2.0423}


@pytest.mark.parametrize("df,expected", T_TABLE.items())
def test_t_quantile_matches_tables(df, expected):
    assert t_quantile(df, 0.95) == pytest.approx(expected, abs=1e-4)


def test_t_cdf_limits_and_bad_df():
    assert t_cdf_two_sided(0.0, 5) == 0.0
    assert t_cdf_two_sided(1e6, 5) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_cdf_two_sided(1.0, 0)


def test_summary_interval():
    s = summary([1.0, 2.0, 3.0])
    assert (s.mean, s.std, s.n) == (2.0, 1.0, 3)
    half = 4.302652729749459 / math.sqrt(3)
    assert s.low == pytest.approx(2 - half) and s.high == pytest.approx(2 + half)


def test_one_seed_gives_infinite_interval_and_inconclusive():
    s = summary([0.7])
    assert s.n == 1 and math.isinf(s.low) and math.isinf(s.high)
    assert on([0.7], ">", 0.5).verdict == INCONCLUSIVE


def test_zero_variance_gives_point_interval_and_decides_on_the_mean():
    s = summary([0.9, 0.9, 0.9])
    assert s.low == s.high == pytest.approx(0.9)
    assert on([0.9] * 3, ">=", 0.8).verdict == SUPPORTED
    assert on([0.7] * 3, ">=", 0.8).verdict == REFUTED
    assert on([0.8] * 3, ">=", 0.8).verdict == SUPPORTED  # boundary is on the claimed side
    assert on([0.8] * 3, ">", 0.8).verdict == REFUTED


def test_nan_makes_the_verdict_inconclusive_and_is_reported():
    d = on([0.9, float("nan"), 0.95], ">", 0.5)
    assert d.verdict == INCONCLUSIVE and d.n_nan == 1 and "diverged" in d.reason


@pytest.mark.parametrize("values,side,threshold,verdict", [
    ([0.30, 0.32, 0.31], "<", 0.5, SUPPORTED),
    ([0.70, 0.72, 0.71], "<", 0.5, REFUTED),
    ([0.10, 0.90, 0.50], "<", 0.5, INCONCLUSIVE),
    ([0.91, 0.93, 0.92], ">=", 0.8, SUPPORTED),
    ([0.61, 0.62, 0.63], "<=", 0.5, REFUTED),
])
def test_three_way_decision(values, side, threshold, verdict):
    d = on(values, side, threshold)
    assert d.verdict == verdict and d.rule == f"{side} {threshold:g}"


def test_paired_decision_uses_per_seed_differences():
    a, b = [0.80, 0.70, 0.90], [0.70, 0.60, 0.80]  # unpaired intervals overlap, differences don't
    assert paired(a, b, ">", 0.05).verdict == SUPPORTED
    assert paired(b, a, ">", 0.05).verdict == REFUTED
    with pytest.raises(ValueError, match="one value per seed"):
        paired([1.0, 2.0], [1.0], ">", 0)


@pytest.mark.parametrize("values,verdict", [
    ([0.001, -0.002, 0.003], SUPPORTED),
    ([0.10, 0.11, 0.12], REFUTED),
    ([0.0, 0.04, -0.03], INCONCLUSIVE),
])
def test_equivalence_decision(values, verdict):
    assert within(values, -0.02, 0.02).verdict == verdict


def test_bad_rule_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="valid sides"):
        on([1.0, 2.0], "=>", 0)
    with pytest.raises(ValueError, match="low < high"):
        within([1.0, 2.0], 0.1, -0.1)
    with pytest.raises(ValueError, match="at least one value"):
        summary([])
    with pytest.raises(ValueError, match="pairs two arms at most"):
        decide(Rule("v", ">", 0), {"a": [1.0], "b": [1.0], "c": [1.0]})
    with pytest.raises(ValueError, match="no arm's values"):
        decide(Rule("v", ">", 0), {})


@pytest.mark.parametrize("side,near,far", [
    (">", [2.2, 2.3, 2.25], [5.0, 5.1, 4.9]),    # > 2: the nearer comparison has the lower values
    ("<", [0.75, 0.8, 0.7], [0.1, 0.12, 0.11]),  # < 1: the nearer one has the higher values
])
def test_all_of_shows_the_weakest_comparison_on_either_side(side, near, far):
    """The verdict of an 'all of' rule rests on its weakest comparison: the one whose interval
    lies nearest the threshold, whichever side the rule claims."""
    threshold = 2.0 if side == ">" else 1.0
    for order in ((near, far), (far, near)):
        result = all_of({f"c{i}": v for i, v in enumerate(order)}, side, threshold)
        weakest = "c0" if order[0] is near else "c1"
        assert result.verdict == SUPPORTED and result.reason.startswith(f"deciding: {weakest}.")
        assert result.values == tuple(near)


def test_all_of_shows_the_most_refuted_comparison():
    result = all_of({"slightly": [0.9, 0.95, 0.92], "clearly": [0.1, 0.12, 0.11],
                     "holds": [3.0, 3.1, 3.2]}, ">", 1.0)
    assert result.verdict == REFUTED and result.reason.startswith("deciding: clearly.")
