"""Statistics behind verdicts: t quantiles, summaries, and the three-way decisions."""

from __future__ import annotations

import math

import pytest

from normsys.claims import stats
from normsys.claims.stats import INCONCLUSIVE, REFUTED, SUPPORTED

# Two-sided 95% critical values from standard tables.
T_TABLE = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 9: 2.2622, 30: 2.0423}


@pytest.mark.parametrize("df,expected", T_TABLE.items())
def test_t_quantile_matches_tables(df, expected):
    assert stats.t_quantile(df) == pytest.approx(expected, abs=1e-4)


def test_t_cdf_limits_and_bad_df():
    assert stats.t_cdf_two_sided(0.0, 5) == 0.0
    assert stats.t_cdf_two_sided(1e6, 5) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="degrees of freedom"):
        stats.t_cdf_two_sided(1.0, 0)


def test_summary_interval():
    s = stats.summarize([1.0, 2.0, 3.0])
    assert (s.mean, s.std, s.n) == (2.0, 1.0, 3)
    half = 4.302652729749459 / math.sqrt(3)
    assert s.low == pytest.approx(2 - half) and s.high == pytest.approx(2 + half)


def test_one_seed_gives_infinite_interval_and_inconclusive():
    s = stats.summarize([0.7])
    assert s.n == 1 and math.isinf(s.low) and math.isinf(s.high)
    assert stats.decide([0.7], ">", 0.5).verdict == INCONCLUSIVE


def test_zero_variance_gives_point_interval_and_decides_on_the_mean():
    s = stats.summarize([0.9, 0.9, 0.9])
    assert s.low == s.high == pytest.approx(0.9)
    assert stats.decide([0.9] * 3, ">=", 0.8).verdict == SUPPORTED
    assert stats.decide([0.7] * 3, ">=", 0.8).verdict == REFUTED
    assert stats.decide([0.8] * 3, ">=", 0.8).verdict == SUPPORTED  # boundary is on the claimed side
    assert stats.decide([0.8] * 3, ">", 0.8).verdict == REFUTED


def test_nan_makes_the_verdict_inconclusive_and_is_reported():
    d = stats.decide([0.9, float("nan"), 0.95], ">", 0.5)
    assert d.verdict == INCONCLUSIVE and d.summary.n_nan == 1 and "diverged" in d.reason


@pytest.mark.parametrize("values,side,threshold,verdict", [
    ([0.30, 0.32, 0.31], "<", 0.5, SUPPORTED),
    ([0.70, 0.72, 0.71], "<", 0.5, REFUTED),
    ([0.10, 0.90, 0.50], "<", 0.5, INCONCLUSIVE),
    ([0.91, 0.93, 0.92], ">=", 0.8, SUPPORTED),
    ([0.61, 0.62, 0.63], "<=", 0.5, REFUTED),
])
def test_three_way_decision(values, side, threshold, verdict):
    d = stats.decide(values, side, threshold)
    assert d.verdict == verdict and d.rule == f"{side} {threshold:g}"


def test_paired_decision_uses_per_seed_differences():
    a, b = [0.80, 0.70, 0.90], [0.70, 0.60, 0.80]  # unpaired intervals overlap, differences don't
    assert stats.decide_paired(a, b, ">", 0.05).verdict == SUPPORTED
    assert stats.decide_paired(b, a, ">", 0.05).verdict == REFUTED
    with pytest.raises(ValueError, match="one value per seed"):
        stats.decide_paired([1.0, 2.0], [1.0], ">", 0)


@pytest.mark.parametrize("values,verdict", [
    ([0.001, -0.002, 0.003], SUPPORTED),
    ([0.10, 0.11, 0.12], REFUTED),
    ([0.0, 0.04, -0.03], INCONCLUSIVE),
])
def test_equivalence_decision(values, verdict):
    assert stats.decide_equivalence(values, -0.02, 0.02).verdict == verdict


def test_bad_rule_arguments_are_clear_errors():
    with pytest.raises(ValueError, match="valid sides"):
        stats.decide([1.0, 2.0], "=>", 0)
    with pytest.raises(ValueError, match="low < high"):
        stats.decide_equivalence([1.0, 2.0], 0.1, -0.1)
    with pytest.raises(ValueError, match="at least one value"):
        stats.summarize([])


@pytest.mark.parametrize("side,near,far", [
    (">", [2.2, 2.3, 2.25], [5.0, 5.1, 4.9]),    # > 2: the nearer comparison has the lower values
    ("<", [0.75, 0.8, 0.7], [0.1, 0.12, 0.11]),  # < 1: the nearer one has the higher values
])
def test_all_of_shows_the_weakest_comparison_on_either_side(side, near, far):
    """The verdict of an 'all of' rule rests on its weakest comparison: the one whose interval
    lies nearest the threshold, whichever side the rule claims."""
    threshold = 2.0 if side == ">" else 1.0
    for order in ((near, far), (far, near)):
        decisions = {f"c{i}": stats.decide(v, side, threshold) for i, v in enumerate(order)}
        result = stats.decide_all(decisions)
        weakest = "c0" if order[0] is near else "c1"
        assert result.verdict == SUPPORTED and result.reason.startswith(f"deciding: {weakest}.")
        assert result.summary.values == tuple(near)


def test_all_of_shows_the_most_refuted_comparison():
    decisions = {"slightly": stats.decide([0.9, 0.95, 0.92], ">", 1.0),
                 "clearly": stats.decide([0.1, 0.12, 0.11], ">", 1.0),
                 "holds": stats.decide([3.0, 3.1, 3.2], ">", 1.0)}
    result = stats.decide_all(decisions)
    assert result.verdict == REFUTED and result.reason.startswith("deciding: clearly.")
