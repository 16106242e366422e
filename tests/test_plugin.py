"""End-to-end tests of the claims plugin with pytester."""

from __future__ import annotations

import json

import pytest

pytest_plugins = ["pytester"]

CLAIMS = '''
import pytest
from normsys.plugin import refuted, tiers
from normsys.stats import Rule

KAPPA = Rule("kappa", ">=", 0.8)

@pytest.mark.claim("c-supported", statement="big is big", source="test")
def test_supported(claim):
    claim.record(note="fine")
    claim.check([0.91, 0.92, 0.93], KAPPA)

@refuted(KAPPA, "mean 0.31, CI [0.29, 0.33]")
@pytest.mark.claim("c-refuted", statement="small is big", source="test")
def test_refuted(claim):
    claim.check([0.30, 0.31, 0.32], KAPPA)

@pytest.mark.claim("c-refuted-unrecorded", statement="small is big", source="test")
def test_refuted_unrecorded(claim):
    claim.check([0.30, 0.31, 0.32], KAPPA)

@pytest.mark.claim("c-inconclusive", statement="noise", source="test")
def test_inconclusive(claim):
    claim.check_paired([0.5, 0.9, 0.1], [0.5, 0.5, 0.5], Rule("a - b", ">", 0.0))

@refuted(KAPPA, "a recorded refutation must not hide broken code")
@pytest.mark.claim("c-error", statement="breaks", source="test")
def test_error(claim):
    raise KeyError("bug in the claim")

@pytest.mark.parametrize("tier", tiers())
@pytest.mark.claim("c-tiers", statement="tiers", source="test")
def test_tiers(claim, tier):
    claim.check([1.0 + 0.01 * s for s in claim.seeds], Rule("x", ">", 0.5))
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
from normsys.stats import Rule

RULE = Rule("x", ">=", 0.8)

@refuted(RULE, "was refuted last time")
@pytest.mark.claim("c-flip", statement="s", source="t")
def test_flip(claim):
    claim.check([0.9, 0.91, 0.92], RULE)
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


def test_claims_list_ids_match_k_and_unknown_marker_arguments_are_errors(run_claims):
    """--claims-list prints every claim and runs none; -k selects by claim id; a misspelt marker
    argument is an error, not silently ignored."""
    listed = run_claims.runpytest("--claims-list", "-p", "no:cacheprovider")
    assert listed.ret == 0
    out = listed.stdout.str()
    assert "c-supported  [cpu]  big is big  (test)" in out and "c-tiers  [paper]" in out
    assert "6 claims, 7 claim-tier pairs" in out and "passed" not in out
    picked = run_claims.runpytest("-k", "c-refuted-unr", "-p", "no:cacheprovider",
                                  "--claims-report", "rep")
    picked.assert_outcomes(failed=1)
    run_claims.makepyfile(test_typo='''
import pytest

@pytest.mark.claim("c-typo", statement="s", source="t", seed=4)
def test_typo(claim):
    pass
''')
    typo = run_claims.runpytest("test_typo.py", "-p", "no:cacheprovider")
    assert typo.ret != 0 and "got unknown ['seed']" in typo.stdout.str() + typo.stderr.str()


def test_variant_tiers_record_refutations_per_tier_and_variant():
    """A refutation measured on one tier and variant marks that parameter alone."""
    from normsys.plugin import variant_tiers
    from normsys.stats import Rule

    rule = Rule("x", ">", 1.0)
    params = {p.id: p for p in variant_tiers(("", "-x"), rule, refuted_cpu={"": "cpu numbers"},
                                             refuted_paper={"-x": "gpu numbers"}, slow=("-x",))}
    reasons = {pid: [m.kwargs.get("reason") for m in p.marks if m.name == "xfail"]
               for pid, p in params.items()}
    assert reasons == {"cpu": ["refuted: cpu numbers; rule > 1"], "paper": [], "cpu-x": [],
                       "paper-x": ["refuted: gpu numbers; rule > 1"]}
    assert all(any(m.name == "gpu" for m in params[i].marks) for i in ("paper", "paper-x"))
    assert [m.name for m in params["cpu-x"].marks] == ["slow"]


def test_claims_with_runs_of_their_own_start_first_longest_first():
    """Under xdist one worker trains the claims whose runs nobody else needs while the others
    share the common runs: they are collected first, longest first (claims/conftest.py)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-m", "pytest", "claims", "--collect-only", "-q",
                          "-p", "no:cacheprovider"], cwd=root, capture_output=True, text=True)
    ids = [line.split("::")[1] for line in out.stdout.splitlines() if "::" in line]
    assert ids[:2] == ["test_layernorm_helps_lstm[cpu]", "test_layernorm_helps_lstm[paper]"]
    assert ids.index("test_analytic_matches_autograd[cpu]") < ids.index("test_none_memorizes[cpu]")


def test_a_partial_run_merges_into_the_report_which_opens_with_its_provenance(run_claims):
    run_claims.runpytest("--claims-report", "rep", "-p", "no:cacheprovider")
    first = json.loads((run_claims.path / "rep" / "claims.json").read_text())
    run_claims.runpytest("--claims-report", "rep", "-k", "c-tiers", "-p", "no:cacheprovider")
    report = json.loads((run_claims.path / "rep" / "claims.json").read_text())
    assert {(c["id"], c["tier"]) for c in report["claims"]} == \
        {(c["id"], c["tier"]) for c in first["claims"]}  # nothing erased
    assert all(c["measured"] and c["commit"] for c in report["claims"])
    assert {"normsys", "commit", "torch", "device", "seeds", "seed_offset", "data",
            "data_sha256", "date"} <= set(report["provenance"])
    assert report["provenance"]["data_sha256"]["mnist/train-labels-idx1-ubyte.gz"].startswith("3552")
    md = (run_claims.path / "rep" / "claims.md").read_text()
    assert '"note": "fine"' in md and "Measured " in md  # evidence whole, as JSON
