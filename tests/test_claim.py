"""A claim decided without pytest (normsys.claims.claim.Claim): its looks over its experiment, the
seeds it leaves for the evidence, the row with where it was measured, and its record's judgement
of that row (the session's Ledgers), as a claim's test and the plugin use them."""

from __future__ import annotations

import math

import pytest

from normsys.claims.claim import Claim, ClaimUsageError
from normsys.claims.declaration import Declaration
from normsys.claims.session import Ledgers
from normsys.claims.verdict import INCONCLUSIVE, REFUTED, SUPPORTED, Rule, levels
from tests.test_declaration import VALUES, fetch_values, two_arms

RULE = Rule("v", ">", 0.3)
OPEN_THEN_SUPPORTED = [0.9, 0.1, 0.5, 0.8, 0.85, 0.9, 0.88, 0.86]  # open at 3 and 5, not at 8


def test_check_decides_the_declared_experiment_on_the_fetched_runs_with_each_side_as_evidence():
    above = Rule("v", ">", 0.0)
    declared = Declaration("c-x", above, "t", "{rule}", experiment=two_arms(), role="test")
    claim = Claim("c-x", "cpu", (3,), declared)
    decided = claim.check(fetch_values)
    differences = [VALUES[8][s] - VALUES[9][s] for s in range(3)]
    assert decided.values == pytest.approx(differences) and decided.verdict == SUPPORTED
    assert claim.evidence == {"a": [1.0, 1.2, 1.1], "b": [0.4, 0.5, 0.7]}
    assert claim.seeds == [0, 1, 2] and claim.rule == declared.rule
    row = claim.row()
    assert (row.id, row.tier, row.statistic, row.role) == ("c-x", "cpu", "v(a) - v(b)", "test")
    assert row.seeds == (0, 1, 2) and row.plan == (3,) and row.looks == ()  # one look: none kept
    assert row.mean == pytest.approx(decided.mean) and row.evidence == claim.evidence


def test_the_looks_run_in_one_call_until_decisive_and_leave_the_last_looks_seeds():
    asked = []

    def values_of(seeds):
        asked.append(list(seeds))
        return [OPEN_THEN_SUPPORTED[s] for s in seeds]

    claim = Claim("c-open", "paper", (3, 5, 8), offset=0)
    assert claim.seeds == [0, 1, 2]  # the first look's, before it is decided
    decided = claim.check_values(values_of, Rule("x", ">", 0.2))
    assert asked == [[0, 1, 2], [0, 1, 2, 3, 4], list(range(8))]
    assert decided.verdict == SUPPORTED and claim.seeds == list(range(8))
    assert [look["verdict"] for look in claim.looks] == [INCONCLUSIVE, INCONCLUSIVE, SUPPORTED]
    assert [look["confidence"] for look in claim.looks] == pytest.approx(levels((3, 5, 8)))
    row = claim.row()
    assert len(row.looks) == 3 and row.open_note == "" and row.seeds == tuple(range(8))


def test_an_open_claim_at_its_last_look_says_what_it_lacks_and_a_decisive_first_look_stops():
    claim = Claim("c-never", "paper", (3, 5), offset=4)
    claim.check_values(lambda seeds: [(-1) ** s * 1.0 for s in seeds], Rule("x", ">", 0.0))
    assert claim.seeds == [4, 5, 6, 7, 8] and claim.row().open_note.startswith("open at its last")
    asked = []
    early = Claim("c-early", "paper", (3, 5))
    early.check_values(lambda seeds: asked.append(seeds) or [0.1, 0.11, 0.12], Rule("x", ">", 1))
    assert early.decision.verdict == REFUTED and asked == [[0, 1, 2]]


def test_a_claim_decided_the_wrong_way_is_one_error_naming_what_to_do():
    declared = Declaration("c-x", RULE, "t", "{rule}", experiment=two_arms())
    with pytest.raises(ClaimUsageError, match="declares its experiment: decide through it"):
        Claim("c-x", "cpu", (3,), declared).check_values([1.0, 1.0, 1.0])
    with pytest.raises(ClaimUsageError, match="declares no experiment"):
        Claim("c-y", "cpu", (3,), Declaration("c-y", RULE, "t", "{rule}")).check(fetch_values)
    with pytest.raises(ClaimUsageError, match="has no declared rule"):
        Claim("c-z", "cpu", (3,)).check_values([1.0, 1.0, 1.0])
    bare = Declaration("c-w", RULE, "t", "{rule}")
    with pytest.raises(ClaimUsageError, match="decided by the rule x > 0.3, but the claim"):
        Claim("c-w", "cpu", (3,), bare).check_values([1.0, 1.1, 1.2], Rule("x", ">", 0.3))
    with pytest.raises(ClaimUsageError, match=r"looks at \[3, 5\] seeds: give its values as a "
                                              r"function of the seeds"):
        Claim("c-v", "paper", (3, 5)).check_values([1.0, 1.1, 1.2], RULE)
    twice = Claim("c-u", "cpu", (3,))
    twice.check_values([1.0, 1.1, 1.2], RULE)
    with pytest.raises(ClaimUsageError, match="decided twice"):
        twice.check_values([1.0, 1.1, 1.2], RULE)
    with pytest.raises(ClaimUsageError, match="its test decided nothing"):
        Claim("c-t", "cpu", (3,)).row()


def test_the_row_says_where_it_was_measured_and_its_record_judges_it(tmp_path):
    claim = Claim("c-new", "cpu", (3,), statement="s", source="t", nodeid="x.py::test")
    claim.check_values([0.5, 0.6, 0.7], RULE)
    row = claim.row()
    assert row.device and row.threads and row.torch and row.commit is not None
    assert len(row.code) == 12 and row.measured and row.settings == {}  # no run fetched
    assert math.isclose(row.mean, 0.6) and row.nodeid == "x.py::test" and row.statement == "s"
    judged, judgement = Ledgers(tmp_path).judged(row)
    assert judgement.status == "new" and judged.ledger == "new" and judged.replication == ""
    updated, said = Ledgers(tmp_path, update=True).judged(row)
    assert said.status == "updated" and updated.ledger == "updated"
