"""End-to-end tests of the claims plugin with pytester."""

from __future__ import annotations

import json

import pytest

pytest_plugins = ["pytester"]

CLAIMS = '''
import pytest
from normsys.plugin import refuted, tiers

@pytest.mark.claim("c-supported", statement="big is big", source="test")
def test_supported(claim):
    claim.record(note="fine")
    claim.check([0.91, 0.92, 0.93], ">=", 0.8, statistic="kappa")

@refuted("mean 0.31, CI [0.29, 0.33] < 0.8")
@pytest.mark.claim("c-refuted", statement="small is big", source="test")
def test_refuted(claim):
    claim.check([0.30, 0.31, 0.32], ">=", 0.8, statistic="kappa")

@pytest.mark.claim("c-refuted-unrecorded", statement="small is big", source="test")
def test_refuted_unrecorded(claim):
    claim.check([0.30, 0.31, 0.32], ">=", 0.8)

@pytest.mark.claim("c-inconclusive", statement="noise", source="test")
def test_inconclusive(claim):
    claim.check_paired([0.5, 0.9, 0.1], [0.5, 0.5, 0.5], ">", 0.0)

@refuted("a recorded refutation must not hide broken code")
@pytest.mark.claim("c-error", statement="breaks", source="test")
def test_error(claim):
    raise KeyError("bug in the claim")

@pytest.mark.parametrize("tier", tiers())
@pytest.mark.claim("c-tiers", statement="tiers", source="test")
def test_tiers(claim, tier):
    claim.check([1.0 + 0.01 * s for s in claim.seeds], ">", 0.5)
'''


@pytest.fixture
def run_claims(pytester):
    pytester.makeconftest('pytest_plugins = ["normsys.plugin"]\n'
                          'def pytest_configure(config):\n'
                          '    config.addinivalue_line("markers", "claim: c")\n'
                          '    config.addinivalue_line("markers", "gpu: g")\n')
    pytester.makepyfile(test_claims=CLAIMS)
    return pytester


def test_outcomes_table_and_json(run_claims):
    result = run_claims.runpytest("--claims-report", "rep", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, xfailed=1, failed=2, skipped=1)
    out = result.stdout.str()
    assert "normsys claims" in out and "c-supported" in out and "REFUTED" in out
    assert "1 error" in out and "inconclusive" in out
    data = json.loads((run_claims.path / "rep" / "claims.json").read_text())
    by_id = {(c["id"], c["tier"]): c for c in data["claims"]}
    assert by_id[("c-supported", "cpu")]["verdict"] == "supported"
    assert by_id[("c-supported", "cpu")]["evidence"] == {"note": "fine"}
    assert by_id[("c-refuted", "cpu")]["verdict"] == "refuted"
    assert by_id[("c-refuted-unrecorded", "cpu")]["verdict"] == "refuted"  # fails: must be recorded
    assert by_id[("c-inconclusive", "cpu")]["verdict"] == "inconclusive"
    assert by_id[("c-error", "cpu")]["verdict"] == "error"  # never a verdict
    assert "bug in the claim" in by_id[("c-error", "cpu")]["reason"]
    assert by_id[("c-tiers", "paper")]["seeds"] == [0, 1, 2, 3, 4]
    md = (run_claims.path / "rep" / "claims.md").read_text()
    assert "| c-supported | cpu | supported |" in md


def test_seed_options(run_claims):
    result = run_claims.runpytest("--claims-seeds", "4", "--claims-seed-offset", "10",
                                  "--claims-report", "rep", "-k", "tiers", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    data = json.loads((run_claims.path / "rep" / "claims.json").read_text())
    assert all(c["seeds"] == [10, 11, 12, 13] for c in data["claims"])


def test_strict_xfail_fails_when_the_verdict_flips(pytester):
    pytester.makeconftest('pytest_plugins = ["normsys.plugin"]')
    pytester.makepyfile('''
import pytest
from normsys.plugin import refuted

@refuted("was refuted last time")
@pytest.mark.claim("c-flip", statement="s", source="t")
def test_flip(claim):
    claim.check([0.9, 0.91, 0.92], ">=", 0.8)
''')
    result = pytester.runpytest("-p", "no:cacheprovider", "--claims-report", "rep")
    result.assert_outcomes(failed=1)
    assert "XPASS(strict)" in result.stdout.str()


def test_results_reach_the_table_under_xdist(run_claims):
    result = run_claims.runpytest("-n", "2", "--claims-report", "rep", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, xfailed=1, failed=2, skipped=1)
    data = json.loads((run_claims.path / "rep" / "claims.json").read_text())
    assert len(data["claims"]) == 7
    assert "c-inconclusive" in result.stdout.str()


def test_claims_with_runs_of_their_own_are_scheduled_first_longest_first(pytester):
    pytester.makeconftest('pytest_plugins = ["normsys.plugin"]')
    pytester.makepyfile('''
import pytest

def test_plain():
    pass

@pytest.mark.claim("c-shared", statement="s", source="t")
def test_shared(claim):
    pass

@pytest.mark.claim("c-short", statement="s", source="t", solo_minutes=2)
def test_short(claim):
    pass

@pytest.mark.claim("c-long", statement="s", source="t", solo_minutes=9)
def test_long(claim):
    pass
''')
    result = pytester.runpytest("--collect-only", "-q", "-p", "no:cacheprovider")
    names = [line.split("::")[1] for line in result.outlines if "::" in line]
    assert names == ["test_long", "test_short", "test_plain", "test_shared"]


def test_variant_tiers_record_refutations_per_tier_and_variant():
    """A refutation measured on one tier and variant marks that parameter alone."""
    from normsys.plugin import variant_tiers

    params = {p.id: p for p in variant_tiers(("", "-x"), refuted_cpu={"": "cpu numbers"},
                                             refuted_paper={"-x": "gpu numbers"}, slow=("-x",))}
    reasons = {pid: [m.kwargs.get("reason") for m in p.marks if m.name == "xfail"]
               for pid, p in params.items()}
    assert reasons == {"cpu": ["refuted: cpu numbers"], "paper": [], "cpu-x": [],
                       "paper-x": ["refuted: gpu numbers"]}
    assert all(any(m.name == "gpu" for m in params[i].marks) for i in ("paper", "paper-x"))
    assert [m.name for m in params["cpu-x"].marks] == ["slow"]
