"""End-to-end tests of the claims plugin with pytester."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from normsys.claims import ledger
from normsys.claims.declaration import Declaration
from normsys.claims.verdict import decide
from normsys.orchestration.cache import code_digest
from normsys.training import provenance
from normsys.training.provenance import numeric_environment

CLAIM_FILES = Path(__file__).parents[1] / "claims"  # the claim test files

pytest_plugins = ["pytester"]

CLAIMS = '''
import pytest
from normsys.claims.declaration import Arm, Declaration, Experiment, metric
from normsys.claims.verdict import Rule

KAPPA = Rule("kappa", ">=", 0.8)

@pytest.mark.claim("c-supported", statement="big is big", source="test")
def test_supported(claim):
    claim.record(note="fine")
    claim.check_values([0.91, 0.92, 0.93], KAPPA)

@pytest.mark.claim("c-refuted", statement="small is big", source="test")
def test_refuted(claim):
    claim.check_values([0.30, 0.31, 0.32], KAPPA)

class Record:
    def __init__(self, value):
        self.metrics = {"v": value}

BN = [0.5, 0.9, 0.1]
NOISE = Declaration("c-inconclusive", Rule("val", ">", 0.0), own_test=True, source="test",
                    statement="noise", experiment=Experiment(
                        {"BN": Arm("tanh_mlp", {"model.d": 8}),
                         "LN": Arm("tanh_mlp", {"model.d": 9})}, metric("v")))

@NOISE.mark
def test_inconclusive(claim):  # BN's value of a seed from BN, LN's 0.5
    claim.check(lambda configs: [Record(BN[c.train.seed % 3] if c.model.d == 8 else 0.5)
                                 for c in configs])

@pytest.mark.claim("c-error", statement="breaks", source="test")
def test_error(claim):
    raise KeyError("bug in the claim")

@pytest.mark.parametrize("tier", ["cpu", "paper"])  # no gpu mark: its paper tier runs here
@pytest.mark.claim("c-tiers", statement="tiers", source="test")
def test_tiers(claim, tier):
    claim.check_values(lambda seeds: [1.0 + 0.001 * s for s in seeds], Rule("x", ">", 0.5))
'''

@pytest.fixture(autouse=True)
def cache_of_its_own(monkeypatch, tmp_path):
    """The claims sessions these tests run keep their runs and claim indexes in a cache of the
    test's own: never in the user's, whose indexes price the claims and controls it holds."""
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path / "cache"))


def records(pytester) -> Path:
    return pytester.path / "claims" / "ledger"


def recorded(pytester, cid: str, tier: str = "cpu") -> dict:
    """The claim's one entry of ``tier`` in its record, as JSON."""
    body = json.loads((records(pytester) / f"{cid}.json").read_text())
    entries = [e for e in body["entries"].values() if e["tier"] == tier]
    assert len(entries) == 1, entries
    return entries[0]


@pytest.fixture
def run_claims(pytester):
    pytester.makepyfile(test_claims=CLAIMS)
    return pytester


def run(pytester, *args):
    return pytester.runpytest("--claims-report", "rep", "-p", "no:cacheprovider", *args)


def test_outcomes_table_and_json_without_a_ledger(run_claims):
    """No record of any claim: every verdict is reported as new, a refutation
    as a (non-strict) xfail; an error is never a verdict."""
    result = run(run_claims)
    result.assert_outcomes(passed=3, xfailed=1, failed=1, skipped=1)
    out = result.stdout.str()
    assert "normsys claims" in out and "c-supported" in out and "REFUTED" in out
    assert "1 error" in out and "inconclusive" in out and "new" in out
    data = json.loads((run_claims.path / "rep" / "claims.json").read_text())
    by_id = {(c["id"], c["tier"]): c for c in data["claims"]}
    assert by_id[("c-supported", "cpu")]["verdict"] == "supported"
    assert by_id[("c-supported", "cpu")]["evidence"] == {"note": "fine"}
    assert by_id[("c-refuted", "cpu")]["verdict"] == "refuted"
    assert by_id[("c-inconclusive", "cpu")]["verdict"] == "inconclusive"
    assert by_id[("c-error", "cpu")]["verdict"] == "error"  # never a verdict
    assert "bug in the claim" in by_id[("c-error", "cpu")]["reason"]
    assert by_id[("c-tiers", "paper")]["seeds"] == [0, 1, 2, 3, 4]
    assert {c["ledger"] for c in data["claims"] if c["verdict"] != "error"} == {"new"}
    md = (run_claims.path / "rep" / "claims.md").read_text()
    assert "| c-supported | cpu |  | supported |" in md  # no declaration, so no role


def test_update_writes_the_ledger_and_the_next_run_holds_to_it(run_claims):
    updated = run(run_claims, "--claims-update")
    updated.assert_outcomes(passed=3, xfailed=1, failed=1, skipped=1)
    assert updated.stdout.str().count("ledger: wrote ") == 5  # c-tiers at both tiers
    texts = {p: p.read_text() for p in records(run_claims).iterdir()}
    same = run(run_claims, "--claims-update")  # the same numbers: no record changes
    assert same.stdout.str().count("ledger: unchanged ") == 5 and "ledger: wrote" not in \
        same.stdout.str()
    assert {p: p.read_text() for p in records(run_claims).iterdir()} == texts
    assert sorted(p.name for p in records(run_claims).iterdir()) == [
        "c-inconclusive.json", "c-refuted.json", "c-supported.json", "c-tiers.json"]
    text = (records(run_claims) / "c-refuted.json").read_text()
    assert text == json.dumps(json.loads(text), indent=1, sort_keys=True) + "\n"  # sorted keys
    entry = recorded(run_claims, "c-refuted")
    assert entry["verdict"] == "refuted" and entry["values"] == [0.30, 0.31, 0.32]
    assert entry["seeds"] == [0, 1, 2] and entry["rule"] == ">= 0.8" and entry["plan"] == [3]
    assert entry["device"] == provenance.numeric_environment()["device"]
    assert entry["code"] == code_digest()
    assert {"measured", "commit", "normsys", "torch", "data", "mean", "low", "high"} <= set(entry)
    assert json.loads(text)["registered"] == "kappa >= 0.8 (1.75% a side)"
    assert recorded(run_claims, "c-tiers", "paper")["seeds"] == [0, 1, 2, 3, 4]

    again = run(run_claims, "--claims-strict", "-rxs")
    again.assert_outcomes(passed=3, xfailed=1, failed=1, skipped=1)  # the recorded refutation
    out = again.stdout.str()
    assert "ledger: refuted 0.31 [0.28, 0.34] seeds 0-2" in out  # the strict xfail's reason
    data = json.loads((run_claims.path / "rep" / "claims.json").read_text())
    assert {c["ledger"] for c in data["claims"] if c["verdict"] != "error"} == {"same"}


SWITCH = '''
import json, pytest
from normsys.claims.verdict import Rule

@pytest.mark.claim("c-switch", statement="s", source="t")
def test_switch(claim):
    claim.check_values(json.load(open("values.json")), Rule("x", ">", 0.5))
'''
VALUES = {"supported": [0.9, 0.91, 0.92], "refuted": [0.1, 0.11, 0.12],
          "inconclusive": [0.1, 0.9, 0.5]}


@pytest.fixture
def switch(pytester):
    pytester.makepyfile(test_switch=SWITCH)
    return pytester


@pytest.mark.parametrize("old,new", [(a, b) for a in VALUES for b in VALUES if a != b])
def test_every_change_of_verdict_fails_with_the_ledger_line(switch, old, new):
    (switch.path / "values.json").write_text(json.dumps(VALUES[old]))
    run(switch, "--claims-update")
    (switch.path / "values.json").write_text(json.dumps(VALUES[new]))
    result = run(switch)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "[c-switch/cpu] record (cpu (" in out and f"): {old} " in out
    assert f"; now: {new} " in out and "per-seed values differ at " in out
    assert "review, then record it: pytest claims -k c-switch --claims-update" in out
    assert "CHANGED" in out  # the verdict table's ledger column
    run(switch, "--claims-update")  # the update restores agreement
    run(switch).assert_outcomes(**{"supported": {"passed": 1}, "refuted": {"xfailed": 1},
                                   "inconclusive": {"skipped": 1}}[new])


DECIDED_UNDER = '''
import json, pytest
from normsys.training.config import preset
from normsys.claims.verdict import Rule

S = json.load(open("settings.json"))

@pytest.mark.claim("c-under", statement="s", source="t", seeds=S["seeds"])
def test_under(claim, run):
    for seed in claim.seeds:
        run(preset("ffn_stack", **{"train.steps": S["steps"], "model.d": 16, "train.seed": seed,
                                   "data.batch_shape": (4, 5, 16)}))
    claim.check_values([1.0 + 0.01 * s for s in claim.seeds], Rule(S["statistic"], ">", S["threshold"]))
'''
UNDER = {"seeds": 3, "steps": 3, "statistic": "x", "threshold": 0.5}


CHANGES = [({"threshold": 0.6}, "decided by 'x > 0.6 (1.75% a side)', but the record holds "
                                "'x > 0.5 (1.75% a side)': a changed rule is an amendment"),
           ({"statistic": "y"}, "decided by 'y > 0.5 (1.75% a side)', but the record holds "
                                "'x > 0.5 (1.75% a side)'"),
           ({"seeds": 4}, "seeds: recorded 0-2, now 0-3"),
           ({"steps": 4}, "settings: train.steps 3 -> 4")]


def test_a_claim_decided_under_other_rules_or_settings_fails_naming_the_change(
        pytester, monkeypatch, tmp_path):
    """The same verdict under a moved threshold, another statistic, other seeds or other run
    settings is not the recorded verdict: each fails like a changed verdict, naming what changed.
    (In subprocesses: training imports parts of torch that cannot be imported twice.)"""
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path / "cache"))
    pytester.makepyfile(test_under=DECIDED_UNDER)
    (pytester.path / "settings.json").write_text(json.dumps(UNDER))

    def run_under(*args):
        return pytester.runpytest_subprocess("--claims-report", "rep", "-p", "no:cacheprovider",
                                             *args)

    run_under("--claims-update").assert_outcomes(passed=1)
    entry = recorded(pytester, "c-under")
    assert entry["settings"]["train.steps"] == "3" and entry["settings"]["model.d"] == "16"
    assert entry["settings"]["model.family"] == "ffn_stack"
    assert len(entry["settings_fingerprint"]) == 16
    for change, says in CHANGES:
        (pytester.path / "settings.json").write_text(json.dumps({**UNDER, **change}))
        result = run_under()
        result.assert_outcomes(failed=1)
        out = result.stdout.str()
        assert "[c-under/cpu] " in out and says in out, says
        if "settings" in says or "seeds" in says:
            assert "supported 1.01 [0.98, 1.04] seeds 0-2" in out, says
            assert f"; {says}; review, then record it: pytest claims -k c-under " \
                   f"--claims-update" in out, says
    (pytester.path / "settings.json").write_text(json.dumps(UNDER))
    run_under("--claims-strict").assert_outcomes(passed=1)  # as recorded: the same


def test_a_replication_leaves_the_index_of_the_runs_the_tier_decides_on(pytester, monkeypatch,
                                                                         tmp_path):
    """A claim's index in the cache (what run-times and --claims-list read) keeps the runs of its
    tier's own plan: a run on other seeds (--claims-seed-offset) or more (--claims-seeds) does
    not overwrite it. (In subprocesses: training imports parts of torch that cannot be imported
    twice.)"""
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path / "cache"))
    pytester.makepyfile(test_under=DECIDED_UNDER)
    (pytester.path / "settings.json").write_text(json.dumps(UNDER))
    index = tmp_path / "cache" / "claims" / "c-under-cpu.json"

    def run_under(*args):
        return pytester.runpytest_subprocess("--claims-report", "rep", "-p", "no:cacheprovider",
                                             *args)

    run_under()
    own = index.read_text()
    run_under("--claims-seed-offset", "3")
    run_under("--claims-seeds", "4")
    assert index.read_text() == own
    index.unlink()
    run_under()
    assert index.read_text() == own


CONTROLLED = '''
import pytest
from normsys.claims.declaration import Arm, Declaration, Experiment, metric
from normsys.claims.testing import unread_seeds
from normsys.claims.verdict import REFUTED, Rule

def ffn(norm):
    return Arm("ffn_stack", {"train.steps": 3, "model.d": 16, "model.norm": norm,
                             "data.batch_shape": (4, 5, 16)})

LOSS = Declaration("c-controlled", Rule("loss", "<", -10.0), own_test=True, source="t",
                   statement="{rule}", experiment=Experiment(
                       {"LN": ffn("layernorm"), "none": ffn("none")},
                       metric("final_loss"), evidence={"RMS": ffn("rmsnorm")}))

@LOSS.mark
def test_claim(claim, runs):
    claim.check(runs)

@pytest.mark.control("c-controlled")
def test_control_on_its_claims_runs_swapped(runs):
    values = LOSS.experiment.values(runs, range(3), "cpu")
    assert LOSS.verdict({"LN": values["none"], "none": values["LN"]}).verdict == REFUTED

@pytest.mark.control("c-controlled")
def test_control_where_the_arms_differ_in_nothing(runs):
    same = LOSS.experiment.overridden({"model.norm": "none"})
    assert LOSS.verdict(same.values(runs, unread_seeds(LOSS), "cpu")).verdict == REFUTED

@pytest.mark.control("c-controlled")
def test_control_on_its_claims_evidence_runs(runs):
    same = LOSS.experiment.overridden({"model.norm": "rmsnorm"})
    assert LOSS.verdict(same.values(runs, range(3), "cpu")).verdict == REFUTED
'''


def test_a_control_that_reads_only_its_claims_runs_fails(pytester, monkeypatch, tmp_path):
    """A control deciding its claim's own runs in another order can only fail when the claim
    does: it fails, naming why; one that makes the arms differ in nothing, on seeds the claim
    does not read, passes (its runs are its own: the overridden arm, seeds 3-5), and so does one
    on the claim's own seeds that reads its evidence arm, trained to be drawn, never decided
    on."""
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path / "cache"))
    pytester.makepyfile(test_controlled=CONTROLLED)
    result = pytester.runpytest_subprocess("--claims-report", "rep", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, xfailed=1, errors=1)
    out = result.stdout.str()
    assert "test_control_on_its_claims_runs_swapped: a control of c-controlled reads only runs " \
           "its claim reads (6)" in out
    assert "ERROR test_controlled.py::test_control_on_its_claims_runs_swapped" in out


def test_a_value_that_moved_with_its_verdict_fails_and_an_amendment_records_a_new_rule(switch):
    """Any per-seed value that differs from this environment's entry fails, the verdict held or
    not; a changed rule is recorded only as an amendment, with its reason."""
    (switch.path / "values.json").write_text(json.dumps([0.9, 0.91, 0.92]))
    run(switch, "--claims-update")
    (switch.path / "values.json").write_text(json.dumps([0.95, 0.96, 0.97]))  # still supported
    result = run(switch)
    result.assert_outcomes(failed=1)
    assert "per-seed values differ at 3 seed(s), the largest seed 0: 0.9 -> 0.95" in \
        result.stdout.str()
    switch.makepyfile(test_switch=SWITCH.replace('Rule("x", ">", 0.5)', 'Rule("x", ">", 0.6)'))
    refused = run(switch, "--claims-update")
    refused.assert_outcomes(failed=1)
    assert "a changed rule is an amendment, recorded with --claims-update --claims-amend" in \
        refused.stdout.str()
    assert run(switch, "--claims-amend", "why").ret == pytest.ExitCode.USAGE_ERROR
    run(switch, "--claims-update", "--claims-amend", "the source's threshold").assert_outcomes(
        passed=1)
    body = json.loads((records(switch) / "c-switch.json").read_text())
    amendment, = body["amendments"]
    assert (amendment["old"], amendment["new"], amendment["reason"]) == (
        "x > 0.5 (1.75% a side)", "x > 0.6 (1.75% a side)", "the source's threshold")
    run(switch, "--claims-strict").assert_outcomes(passed=1)
    assert "amended" in json.loads((switch.path / "rep" / "claims.json").read_text())[
        "claims"][0]["amendments"][0]


def test_a_claim_missing_from_the_ledger_is_new_and_fails_under_strict(switch):
    (switch.path / "values.json").write_text(json.dumps([0.9, 0.91, 0.92]))
    run(switch, "--claims-update")
    switch.makepyfile(test_more=SWITCH.replace("c-switch", "c-more"))
    lenient = run(switch)
    lenient.assert_outcomes(passed=2)
    assert "new" in lenient.stdout.str()
    strict = run(switch, "--claims-strict")
    strict.assert_outcomes(passed=1, failed=1)
    assert "[c-more/cpu] new: no record of the cpu tier" in strict.stdout.str()


def with_entry_of_a_removed_claim(switch) -> Path:
    """The record of a passing claim, plus the record of a claim ("c-removed") no file defines."""
    (switch.path / "values.json").write_text(json.dumps([0.9, 0.91, 0.92]))
    run(switch, "--claims-update")
    body = json.loads((records(switch) / "c-switch.json").read_text())
    path = records(switch) / "c-removed.json"
    path.write_text(json.dumps({**body, "claim": "c-removed"}))
    return path


def test_a_ledger_entry_of_a_claim_no_longer_defined_fails_under_strict(switch):
    """A renamed or removed claim leaves its verdict in the ledger, where nothing checks it: said
    on every run that collects every claim, a failure under --claims-strict (serial and under
    xdist), dropped by --claims-update."""
    path = with_entry_of_a_removed_claim(switch)
    line = f"ledger: {path}: the record of a claim no longer defined; review, then " \
           f"--claims-update deletes it"
    lenient = run(switch)
    lenient.assert_outcomes(passed=1)
    assert lenient.ret == pytest.ExitCode.OK and line in lenient.stdout.str()
    strict = run(switch, "--claims-strict")
    strict.assert_outcomes(passed=1)  # the claim itself holds; the session fails
    assert strict.ret == pytest.ExitCode.TESTS_FAILED
    assert line + " (fails under --claims-strict)" in strict.stdout.str()
    # -k deselects after collection: the id is still known to be gone
    assert run(switch, "--claims-strict", "-k", "nothing").ret == pytest.ExitCode.TESTS_FAILED
    updated = run(switch, "--claims-update")
    assert f"deleted {path}: no claim c-removed is defined" in updated.stdout.str()
    assert not path.exists() and (records(switch) / "c-switch.json").is_file()
    assert run(switch, "--claims-strict").ret == pytest.ExitCode.OK


def test_stale_ledger_entries_found_by_xdist_workers_fail_the_session(switch):
    """Under pytest-xdist the workers collect; what they find reaches the controller."""
    path = with_entry_of_a_removed_claim(switch)
    strict = run(switch, "--claims-strict", "-n", "2")
    strict.assert_outcomes(passed=1)
    assert strict.ret == pytest.ExitCode.TESTS_FAILED
    assert f"ledger: {path}: the record of a claim no longer defined" in strict.stdout.str()


def test_a_session_that_collects_part_of_the_claims_does_not_call_the_rest_stale(switch):
    with_entry_of_a_removed_claim(switch)
    for narrowed in (["test_switch.py"], ["test_switch.py::test_switch"],
                     ["--deselect", "test_switch.py::test_switch"], ["--ignore", "test_more.py"]):
        result = run(switch, "--claims-strict", *narrowed)
        assert "no longer defined" not in result.stdout.str(), narrowed
        assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED), narrowed


def test_a_corrupt_ledger_is_a_clear_error_naming_the_file(switch):
    (switch.path / "values.json").write_text(json.dumps([0.9, 0.91, 0.92]))
    folder = switch.path / "claims" / "ledger"
    folder.mkdir(parents=True)
    (folder / "c-switch.json").write_text("{not json")
    result = run(switch)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "c-switch.json cannot be read" in err and "--claims-update" in err


def test_seed_options_have_entries_of_their_own(run_claims):
    result = run(run_claims, "--claims-seeds", "4", "--claims-seed-offset", "10", "-k", "tiers",
                 "--claims-update")
    result.assert_outcomes(passed=2)
    data = json.loads((run_claims.path / "rep" / "claims.json").read_text())
    assert all(c["seeds"] == [10, 11, 12, 13] for c in data["claims"])
    keys = json.loads((records(run_claims) / "c-tiers.json").read_text())["entries"]
    assert sorted(k.rpartition(" | ")[2] for k in keys) == ["seeds 10+, looks 4",
                                                            "seeds 10+, looks 4,5,8,13,21"]
    assert [p.name for p in records(run_claims).iterdir()] == ["c-tiers.json"]


def test_results_reach_the_table_and_the_ledger_under_xdist(run_claims):
    result = run(run_claims, "-n", "2", "--claims-update")
    result.assert_outcomes(passed=3, xfailed=1, failed=1, skipped=1)
    data = json.loads((run_claims.path / "rep" / "claims.json").read_text())
    assert len(data["claims"]) == 6
    assert "c-inconclusive" in result.stdout.str()
    assert len(list(records(run_claims).glob("*.json"))) == 4


def test_a_verdict_stays_one_object_in_its_process_and_crosses_xdist_as_json(run_claims):
    """Alone, the session gathers the very row the claim reported (no JSON on the way); a
    pytest-xdist worker sends it as JSON, made a Row again with the same fields."""
    from normsys.claims.report import PROPERTY, Row

    alone = run_claims.inline_run("--claims-report", "rep", "-p", "no:cacheprovider",
                                  "-p", "no:xdist")
    sent = [v for r in alone.getreports("pytest_runtest_logreport") if r.when == "call"
            for k, v in r.user_properties if k == PROPERTY]
    assert len(sent) == 6 and all(isinstance(v, Row) for v in sent)
    decided = [v for v in sent if v.id == "c-supported"][0]
    assert decided.values == (0.91, 0.92, 0.93) and decided.looks == ()
    first = json.loads((run_claims.path / "rep" / "claims.json").read_text())["claims"]
    run(run_claims, "-n", "2")
    again = json.loads((run_claims.path / "rep" / "claims.json").read_text())["claims"]
    moving = {"seconds", "measured"}
    assert [{k: v for k, v in r.items() if k not in moving} for r in again] == \
        [{k: v for k, v in r.items() if k not in moving} for r in first]


def test_claims_list_ids_match_k_and_unknown_marker_arguments_are_errors(run_claims):
    """--claims-list prints every claim and runs none; -k selects by claim id; a misspelt marker
    argument is an error, not silently ignored."""
    listed = run_claims.runpytest("--claims-list", "-p", "no:cacheprovider")
    assert listed.ret == 0
    out = listed.stdout.str()
    assert "c-supported  [cpu]  big is big  (test)" in out and "c-tiers  [paper]" in out
    assert "5 claims, 6 claim-tier pairs; 5 without declared runs, none timed yet, so the " \
           "training they take is not known until they run once" in out
    assert "the cpu tier's claims in all: 6 runs (0 cached; the others never timed, so their " \
           "price is not known until they run once)" in out
    assert "passed" not in out
    narrowed = run_claims.runpytest("--claims-list", "-k", "c-refuted or c-tiers", "-p",
                                    "no:cacheprovider")
    assert narrowed.ret == 0
    lines = [line for line in narrowed.stdout.lines if "  [" in line]
    assert [line.split("  ")[:2] for line in lines] == [
        ["c-refuted", "[cpu]"], ["c-tiers", "[cpu]"], ["c-tiers", "[paper]"]]  # -k, as a run
    assert "2 claims, 3 claim-tier pairs" in narrowed.stdout.str()
    assert "no claim or test matches" not in narrowed.stdout.str()
    picked = run(run_claims, "-k", "c-refuted")
    picked.assert_outcomes(xfailed=1)
    run_claims.makepyfile(test_typo='''
import pytest

@pytest.mark.claim("c-typo", statement="s", source="t", seed=4)
def test_typo(claim):
    pass
''')
    typo = run_claims.runpytest("test_typo.py", "-p", "no:cacheprovider")
    assert typo.ret != 0 and "got unknown ['seed']" in typo.stdout.str() + typo.stderr.str()


DECLARED = '''
import pytest

from normsys.claims.declaration import Arm, Declaration, Experiment, metric
from normsys.claims.verdict import Rule

BIG = Declaration("c-declared", Rule("kappa", ">=", 0.8), own_test=True, source="test",
                  statement="kappa stays big: {rule}.")
PAIRED = Declaration("c-declared-paired", Rule("val", ">", 0.1), own_test=True, source="test",
                     statement="a beats b: {rule}, paired.", seeds=4, experiment=Experiment(
                         {"a": Arm("tanh_mlp", {"model.d": 8}),
                          "b": Arm("tanh_mlp", {"model.d": 9})}, metric("v")))
OTHER = Declaration("c-declared-other", Rule("kappa", ">=", 0.8), own_test=True, source="test",
                    statement="{rule}")

@BIG.mark
def test_by_the_declared_rule(claim):
    claim.check_values([0.90 + 0.01 * s for s in claim.seeds])

@PAIRED.mark
def test_paired_by_the_declared_rule(claim):
    claim.check(fetch)

@OTHER.mark
def test_by_another_rule(claim):
    claim.check_values([0.90, 0.91, 0.92], Rule("kappa", ">=", 0.5))

@pytest.mark.claim("c-undeclared", statement="s", source="t")
def test_without_a_rule(claim):
    claim.check_values([0.9, 0.9, 0.9])

class Record:
    def __init__(self, value):
        self.metrics = {"v": value}

def fetch(configs):  # a's value of a seed 1 + seed / 100, b's 0.5
    return [Record(1.0 + 0.01 * c.train.seed if c.model.d == 8 else 0.5) for c in configs]

ARMS = {"a": Arm("tanh_mlp", {"model.d": 8}), "b": Arm("tanh_mlp", {"model.d": 9})}
TRAINED = Declaration("c-trained", Rule("v", ">", 0.1), own_test=True, source="test",
                      statement="a beats b: {rule}.", experiment=Experiment(ARMS, metric("v")))
READ_ASIDE = Declaration("c-read-aside", Rule("v", ">", 0.1), own_test=True, source="test",
                         statement="{rule}", experiment=Experiment(ARMS, metric("v")))

@TRAINED.mark
def test_through_its_experiment(claim):
    claim.check(fetch)

@READ_ASIDE.mark
def test_on_values_read_aside(claim):
    claim.check_values([0.5, 0.51, 0.52])
'''


def test_a_declared_claim_is_decided_by_its_rule_and_by_no_other(run_claims):
    """A test marked with its claim's Declaration decides by the declared rule (the statement
    and the seeds come from the declaration too); a test that passes another rule fails naming
    both, and a claim declared without a rule must pass one. A claim that declares its
    experiment is decided through it; deciding on values its test read aside fails."""
    run_claims.makepyfile(test_declared=DECLARED)
    listed = run_claims.runpytest("test_declared.py", "--claims-list", "-p", "no:cacheprovider")
    assert "c-declared  [cpu]  role: regression  kappa stays big: kappa >= 0.8.  (test)" in \
        listed.stdout.str()
    done = run(run_claims, "test_declared.py")
    done.assert_outcomes(passed=3, failed=3)
    out = done.stdout.str()
    assert "[c-read-aside/cpu] decided on values its test read, but the claim declares its " \
           "experiment: decide through it" in out
    assert "[c-declared-other/cpu] decided by the rule kappa >= 0.5, but the claim declares " \
           "kappa >= 0.8: decide by the declared rule" in out
    assert "claim c-undeclared has no declared rule" in out
    results = {r["id"]: r for r in json.loads((run_claims.path / "rep" / "claims.json")
                                              .read_text())["claims"]}
    assert (results["c-declared"]["statistic"], results["c-declared"]["rule"]) == \
        ("kappa", ">= 0.8")
    assert (results["c-declared-paired"]["statistic"], results["c-declared-paired"]["rule"]) == \
        ("val(a) - val(b)", "> 0.1")
    assert results["c-declared-paired"]["seeds"] == [0, 1, 2, 3]
    assert results["c-declared-paired"]["statement"] == "a beats b: val(a) - val(b) > 0.1, paired."
    trained = results["c-trained"]
    assert (trained["verdict"], trained["values"]) == ("supported", pytest.approx([0.5, 0.51, 0.52]))
    assert trained["evidence"] == {"a": [1.0, 1.01, 1.02], "b": [0.5, 0.5, 0.5]}
    with pytest.raises(TypeError, match="claim c-x: its rule must be a verdict.Rule, got str"):
        Declaration("c-x", "kappa >= 0.8", source="t", statement="{rule}")


def test_variant_tiers_mark_the_paper_tier_gpu_and_slow_variants_slow():
    from normsys.claims.params import variant_tiers

    params = {p.id: p for p in variant_tiers(("", "-x"), slow=("", "-x"))}
    assert set(params) == {"cpu", "paper", "paper-x"}  # the CPU tier runs no variants
    assert all([m.name for m in params[i].marks] == ["gpu"] for i in ("paper", "paper-x"))
    assert [m.name for m in params["cpu"].marks] == ["slow"]


def test_a_declared_claims_parameters_are_its_variants_marked_as_its_declaration_says():
    """tiers_of and variant_tiers_of read the declaration's variants and slow ones; the generic
    test's parameters (declared_params) carry each claim's marker besides, a Statistic's with the
    statistic, and ids that hold the claim id."""
    from normsys.claims.declaration import Arm, Experiment, Statistic, metric
    from normsys.claims.params import declared_params, tiers_of, variant_tiers_of
    from normsys.claims.verdict import Rule

    arm = Arm("encoder", variants={"": {}, "-masked": {"model.pad_mask": True}})
    varied = Declaration("c-v", Rule("v", ">", 0), "t", "{rule}",
                         experiment=Experiment({"a": arm}, metric("v")),
                         variants=("", "-masked"), slow=("-masked",))
    slow = Declaration("c-s", Rule("v", ">", 0), "t", "{rule}", slow=("",))
    assert [m.name for m in tiers_of(slow)[0].marks] == ["slow"]
    assert [[m.name for m in p.marks] for p in variant_tiers_of(varied)] == \
        [[], ["gpu"], ["gpu"]]  # -masked at the paper tier alone
    with pytest.raises(ValueError, match="claim c-v has variants \\('-masked',\\): parametrize"):
        tiers_of(varied)
    stat = Statistic("s", "c-stat", Rule("v", ">", 0), Arm("mlp"), metric("v"))
    params = declared_params([varied, stat])
    assert [p.id for p in params] == ["c-v-cpu", "c-v-paper", "c-v-paper-masked",
                                      "c-stat-cpu", "c-stat-paper"]
    claim_marks = [next(m for m in p.marks if m.name == "claim") for p in params]
    assert [m.args[0] for m in claim_marks] == ["c-v"] * 3 + ["c-stat"] * 2
    assert claim_marks[-1].kwargs["statistic"] is stat
    assert [p.values[0].id for p in params] == [m.args[0] for m in claim_marks]
    assert [str(p.values[1]) for p in params[:3]] == ["", "", "-masked"]
    assert [m.name for m in params[2].marks if m.name != "claim"] == ["gpu"]


class ClaimItems:
    """A plugin that keeps, in the order a session runs them, each claim test's claim id, tier and
    the declaration its marker carries."""

    def __init__(self):
        self.items = []

    def pytest_collection_finish(self, session) -> None:
        from normsys.claims.items import claim_id, claim_marker, claim_tier

        for item in session.items:
            if (marker := claim_marker(item)) is not None:
                self.items.append((claim_id(item, marker), claim_tier(item),
                                   marker.kwargs["declared"]))


@pytest.fixture(scope="module")
def claim_items():
    """The claims a session of the claim files collects (collected once, nothing run)."""
    kept = ClaimItems()
    assert pytest.main([str(CLAIM_FILES), "--collect-only", "-q", "-p", "no:cacheprovider",
                        "-p", "no:xdist", "--rootdir", str(CLAIM_FILES.parent)], plugins=[kept]) == 0
    return kept.items


def test_claims_start_longest_first_by_their_recorded_run_times(claim_items):
    """Under xdist the workers split the long groups of runs early: claims are collected longest
    first by the training time claims/run-times-cpu.json records (normsys.claims.plugin)."""
    from normsys.orchestration import runtimes

    recorded = runtimes.read("cpu")["claims"]
    in_order = [cid for cid, tier, _ in claim_items if tier == "cpu" and cid in recorded]
    seconds = [recorded[c]["seconds"] for c in in_order]
    assert len(in_order) > 30 and seconds == sorted(seconds, reverse=True)
    assert seconds[0] > 10 * seconds[-1]


def test_every_declared_claim_runs_once_at_each_variant_and_tier_with_its_declaration(claim_items):
    """Each claim the package declares (normsys.declarations), at each of its variants and both
    tiers, is one test of the claim files: its own, or test_declared's. The marker of that test
    carries the very declaration the package holds (equal, for a Statistic's, which makes it
    anew), so the catalog, the scorecard and the claims run read one claim."""
    from normsys import declarations

    declared = {d.id: d for d in declarations.claims()}
    run = [(cid, tier) for cid, tier, _ in claim_items]
    assert sorted(run) == sorted((cid, t) for cid, tiers in declarations.tiers_run().items()
                                 for t in tiers)
    assert ("dm-l2-isotropic-masked", "paper") in run  # a variant: at the paper tier alone
    assert ("dm-l2-isotropic-masked", "cpu") not in run
    assert all(made == declared[made.id] for _, _, made in claim_items)


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


def test_a_recorded_refutation_does_not_hide_broken_code(run_claims):
    """A claim the ledger records as refuted that raises anything but its refutation fails."""

    run(run_claims, "--claims-update")
    refuted = ledger.read(records(run_claims) / "c-refuted.json")
    refuted.claim = "c-error"
    ledger.write(records(run_claims) / "c-error.json", refuted)
    result = run(run_claims, "-k", "c-error")
    result.assert_outcomes(failed=1)
    assert "KeyError" in result.stdout.str()


@pytest.mark.parametrize("make", ["file", "under_a_file", "special_file_system"])
def test_a_report_path_that_cannot_be_written_is_a_usage_error_before_any_claim_runs(
        run_claims, make):
    """Also where the permissions allow it but the file system does not (/proc, even as root)."""
    (run_claims.path / "f").write_text("")
    target = {"file": "f", "under_a_file": "f/rep", "special_file_system": "/proc/rep"}[make]
    if make == "special_file_system" and not Path("/proc").is_dir():
        pytest.skip("no /proc here")
    result = run_claims.runpytest("--claims-report", target, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"--claims-report {target}" in result.stderr.str()
    assert "normsys claims" not in result.stdout.str()  # nothing ran


def test_a_session_says_at_the_start_what_its_selected_claims_would_train(run_claims,
                                                                          monkeypatch):
    """Once, before the first claim: the claim-tier pairs -k selected (skipped ones left out) and
    the training their runs not cached take at most."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):  # this test's own worker
        monkeypatch.delenv(name, raising=False)
    for extra in ([], ["-n", "2"]):
        result = run_claims.runpytest_subprocess("--claims-report", "rep", "-p",
                                                 "no:cacheprovider", "-k", "c-tiers", *extra)
        said = [line for line in result.stderr.lines if "claim-tier pairs selected" in line]
        assert said == ["normsys: 2 claim-tier pairs selected; none timed yet, so the training "
                        "they take is not known until they run once"], \
            result.stderr.str()  # cpu and paper: nothing skips here


def test_a_k_that_matches_nothing_points_to_the_claims_list(run_claims):
    result = run(run_claims, "-k", "no-such-claim")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert "no claim or test matches -k 'no-such-claim'" in result.stdout.str()
    assert "--claims-list" in result.stdout.str()


def test_collect_only_with_a_k_that_matches_is_not_called_a_k_that_matches_nothing(run_claims):
    result = run(run_claims, "-k", "c-tiers", "--collect-only")
    assert result.ret == pytest.ExitCode.OK
    assert "no claim or test matches" not in result.stdout.str()


def test_ctrl_c_before_a_result_is_not_called_a_k_that_matches_nothing(pytester):
    pytester.makepyfile(test_stop='''
import pytest
from normsys.claims.verdict import Rule

@pytest.mark.claim("c-stopped", statement="s", source="t")
def test_stopped(claim):
    raise KeyboardInterrupt

def test_other():
    pass
''')
    result = pytester.runpytest_subprocess("--claims-report", "rep", "-p", "no:cacheprovider",
                                           "-k", "c-stopped")  # Ctrl-C ends its own process
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert "no claim or test matches" not in result.stdout.str()


def test_paired_evidence_is_named_by_the_arms_and_the_report_reads_plainly(run_claims):
    run(run_claims)
    data = json.loads((run_claims.path / "rep" / "claims.json").read_text())
    by_id = {(c["id"], c["tier"]): c for c in data["claims"]}
    assert by_id[("c-inconclusive", "cpu")]["evidence"] == {"BN": [0.5, 0.9, 0.1],
                                                            "LN": [0.5, 0.5, 0.5]}
    md = (run_claims.path / "rep" / "claims.md").read_text()
    assert "- normsys: 0." in md and '`"0.' not in md  # plain values, not JSON strings
    assert "seeds of the rows below (each row lists its own" in md


def test_claims_list_shows_what_each_claim_costs(tmp_path):
    """--claims-list shows the runs a claim's first look trains with the session's seed options,
    how many are cached, and the training the others take as the committed run times record
    (another seed of a recorded config costs what it cost)."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**__import__("os").environ, "NORMSYS_CACHE": str(tmp_path / "cache")}

    def pytest_claims(*args):
        return subprocess.run([sys.executable, "-m", "pytest", "claims", "-p", "no:cacheprovider",
                               "-k", "tc-residual-preserves-gradients and cpu", *args],
                              cwd=root, env=env, capture_output=True, text=True)

    def listed() -> str:
        out = pytest_claims("--claims-list").stdout
        return next(line for line in out.splitlines()
                    if line.startswith("tc-residual-preserves-gradients  [cpu]"))

    from normsys.orchestration import runtimes

    recorded = f"min of training as recorded on {runtimes.read('cpu')['device']})"
    assert listed().endswith(f" cost: 10 runs (0 cached; the others ~0.0 {recorded}")
    # its controls, the arms made alike on seeds it does not read and its A/A case (the first arm
    # on those seeds, the other on the claim's own), read three runs besides the claim's
    controls = "the 2 negative controls selected: 3 runs besides the claims' ("
    with_control = ("--claims-list", "-k", "tc-residual-preserves-gradients and not paper")
    assert controls + "0 cached; the others ~0.0 min of training as recorded)" in \
        pytest_claims(*with_control).stdout
    ran = pytest_claims("--claims-report", str(tmp_path / "rep"))
    assert ran.returncode == 0, ran.stdout[-2000:]
    assert listed().endswith("cost: 10 runs (10 cached)")  # five seeds, with and without residual
    next((tmp_path / "cache" / "runs").glob("*.json")).unlink()
    assert listed().endswith(f" cost: 10 runs (9 cached; the others ~0.0 {recorded}")
    eight = next(line for line in pytest_claims("--claims-list", "--claims-seeds", "8")
                 .stdout.splitlines() if line.startswith("tc-residual-preserves-gradients  [cpu]"))
    assert eight.endswith(f" cost: 16 runs (9 cached; the others ~0.0 {recorded}")

    # looking to 8 seeds, the claim plans 5 unless this machine's ledgers show it open after 5
    from dataclasses import replace


    folder = tmp_path / "ledger"
    folder.mkdir()
    looking = ("--claims-list", "--claims-max-seeds", "8", "--claims-ledger", str(folder))

    def looked() -> str:
        return next(line for line in pytest_claims(*looking).stdout.splitlines()
                    if line.startswith("tc-residual-preserves-gradients  [cpu]"))

    assert looked().endswith("cost: 10 runs (9 cached; the others ~0.0 " + recorded)
    cid = "tc-residual-preserves-gradients"
    was = ledger.read(root / "claims" / "ledger" / f"{cid}.json")
    reference = was.entries[was.reference["cpu"]]
    values = [0.5, 1.5, 0.8, 1.3, 1.0]  # open after 5 seeds, in this environment
    d = decide(ledger.parse_rule(reference.rule), values)
    here = numeric_environment()
    open_after_5 = replace(reference, verdict=d.verdict, values=values, seeds=list(range(5)),
                           mean=d.mean, low=d.low, high=d.high,
                           plan=[5], device=here["device"], threads="1", code="")
    assert open_after_5.verdict == "inconclusive"
    ledger.write(folder / f"{cid}.json", ledger.recorded(ledger.Record(cid), open_after_5))
    assert looked().endswith(f" cost: 16 runs (9 cached; the others ~0.0 {recorded}")
    session = pytest_claims(*looking[1:], "--claims-report", str(tmp_path / "rep8"))
    assert "normsys: planned: 16 runs, 7 of them not cached" in session.stderr, session.stderr
    assert "then the negative controls: 0 runs besides the claims' (0 cached)" in session.stderr
    # the control's own runs (seeds 5-7 without residuals) are the eight-seed look's: cached now
    assert controls + "3 cached)" in pytest_claims(*with_control).stdout


SEQUENTIAL = '''
import pytest

from normsys.claims.verdict import Rule

VALUES = [0.9, 0.1, 0.5, 0.8, 0.85, 0.9, 0.88, 0.86]
SEEN = []

def values_of(seeds):
    SEEN.append(len(seeds))
    return [VALUES[s] for s in seeds]

@pytest.mark.claim("c-open", statement="s", source="t")
def test_open(claim):
    claim.check_values(values_of, Rule("x", ">", 0.2))
    assert claim.seeds == list(range(SEEN[-1]))  # the last look's, for the evidence after it

@pytest.mark.claim("c-never", statement="s", source="t")
def test_never(claim):
    claim.check_values(lambda seeds: [(-1) ** s * 1.0 for s in seeds], Rule("x", ">", 0.0))

def test_seen():
    assert SEEN == [3, 5, 8]
'''


def test_max_seeds_adds_seeds_at_the_looks_until_a_verdict(pytester):
    """c-open is inconclusive on 3 and 5 seeds and supported on 8; c-never stays inconclusive
    through every look; the report shows each look, its seeds and its level."""
    pytester.makepyfile(test_seq=SEQUENTIAL)
    result = run(pytester, "--claims-max-seeds", "8")
    result.assert_outcomes(passed=2, skipped=1)
    data = json.loads((pytester.path / "rep" / "claims.json").read_text())
    by_id = {c["id"]: c for c in data["claims"]}
    looks = by_id["c-open"]["looks"]
    assert [(x["seeds"], x["verdict"]) for x in looks] == [
        (3, "inconclusive"), (5, "inconclusive"), (8, "supported")]
    assert [round(x["confidence"], 5) for x in looks] == [0.99942, 0.99292, 0.97266]
    assert by_id["c-open"]["seeds"] == list(range(8))
    assert [x["seeds"] for x in by_id["c-never"]["looks"]] == [3, 5, 8]
    assert (pytester.path / "claims" / "ledger").exists() is False  # no update asked
    plain = run(pytester, "-k", "c-open")
    plain.assert_outcomes(skipped=1)  # without the option: 3 seeds at 95%, inconclusive


BRANCH_CLAIMS = '''
import pytest
from normsys.claims.params import Variant
from normsys.claims.verdict import Rule
from tests_sequential_branches import BRANCHES

NAMES = {Variant(f"-{i}"): branch for i, branch in enumerate(BRANCHES)}

@pytest.mark.parametrize("variant", list(NAMES))
@pytest.mark.claim("c-branch", statement="s", source="t")
def test_branch(claim, variant):
    claim.record(branch=NAMES[variant])
    claim.check_values(lambda seeds: BRANCHES[NAMES[variant]][0][:len(seeds)], Rule("x", ">", 0.2))
'''


def test_every_branch_of_the_sequential_design_through_a_claim(pytester):
    """The values of each branch (tests/test_sequential.py) decided by a claim under
    --claims-max-seeds 8: each stops at the look where it decides, with that verdict."""
    from tests.test_sequential import BRANCHES

    pytester.makepyfile(tests_sequential_branches=f"BRANCHES = {BRANCHES!r}\n",
                        test_branches=BRANCH_CLAIMS)
    result = run(pytester, "--claims-max-seeds", "8")
    result.assert_outcomes(passed=1, xfailed=3, skipped=1)  # refuted, unrecorded: xfail
    rows = json.loads((pytester.path / "rep" / "claims.json").read_text())["claims"]
    by_branch = {r["evidence"]["branch"]: r for r in rows}
    assert set(by_branch) == set(BRANCHES)
    for branch, (_, verdicts) in BRANCHES.items():
        row = by_branch[branch]
        assert [look["verdict"] for look in row["looks"]] == verdicts, branch
        assert row["verdict"] == verdicts[-1] and len(row["seeds"]) == [3, 5, 8][len(verdicts) - 1]


ONCE = '''
import pytest

from normsys.claims.verdict import Rule

BODIES = []

@pytest.mark.claim("c-once", statement="s", source="t")
def test_once(claim):
    BODIES.append(1)
    claim.check_values(lambda seeds: [0.9, 0.1, 0.5, 0.8, 0.85, 0.9, 0.88, 0.86][:len(seeds)],
                       Rule("x", ">", 0.2))

@pytest.mark.claim("c-nothing", statement="s", source="t")
def test_nothing(claim):
    pass

@pytest.mark.claim("c-values", statement="s", source="t")
def test_values_at_looks(claim):
    claim.check_values([1.0, 1.1, 1.2], Rule("x", ">", 0.5))

def test_bodies():
    assert BODIES == [1]
'''


def test_a_claims_test_runs_once_whatever_its_looks_and_one_that_decides_nothing_fails(pytester):
    """Under --claims-max-seeds a claim's looks are taken inside its check, the body running
    once; a claim test that ends without deciding, or gives values for one look to a plan of
    several, fails in one line saying what to do."""
    pytester.makepyfile(test_once=ONCE)
    result = run(pytester, "--claims-max-seeds", "8")
    result.assert_outcomes(passed=2, failed=2)
    out = result.stdout.str()
    assert "[c-nothing/cpu] its test decided nothing: end it with claim.check(runs)" in out
    assert "claim c-values looks at [3, 5, 8] seeds: give its values as a function" in out
    rows = {r["id"]: r for r in json.loads((pytester.path / "rep" / "claims.json").read_text())[
        "claims"]}
    assert [look["seeds"] for look in rows["c-once"]["looks"]] == [3, 5, 8]
    assert rows["c-nothing"]["verdict"] == "error" and rows["c-values"]["verdict"] == "error"


def test_the_plugin_registers_its_own_markers(pytester):
    """A project that loads normsys.claims.plugin and nothing else can use @pytest.mark.claim under
    --strict-markers."""
    pytester.makeconftest('pytest_plugins = ["normsys.claims.plugin"]\n')
    pytester.makepyfile(test_one='''
import pytest

from normsys.claims.verdict import Rule, decide

@pytest.mark.claim("c-one", statement="s", source="t")
def test_one(claim):
    claim.check_values([1.0, 1.1, 1.2], Rule("x", ">", 0.5))

@pytest.mark.control("c-one")
def test_control():
    assert decide(Rule("x", ">", 0.5), [0.1, 0.2, 0.1]).verdict == "refuted"
''')
    result = run(pytester, "--strict-markers")
    result.assert_outcomes(passed=2)


def test_n_auto_starts_several_workers_a_gpu_and_leaves_the_cpu_to_xdist(pytester, monkeypatch):
    import torch

    from normsys.orchestration import workers

    config = pytester.parseconfigure()
    ask = lambda: config.hook.pytest_xdist_auto_num_workers(config=config)  # noqa: E731
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    from xdist.plugin import pytest_xdist_auto_num_workers as xdist_own

    assert workers.auto_workers() is None and ask() == xdist_own(config)  # a worker a core
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert ask() == 2 * workers.WORKERS_PER_GPU == 16


@pytest.mark.parametrize("worker", [None, ("gw0", "1"), ("gw1", "2")])
def test_every_run_on_a_cpu_trains_on_one_thread_in_or_out_of_xdist(monkeypatch, worker):
    """A CPU run's numbers depend on its thread count, and the ledgers hold one-thread runs: one
    process alone, or one of fewer workers than cores, trains on RUN_THREADS all the same."""
    import torch

    from normsys.orchestration import workers

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(workers.os, "cpu_count", lambda: 8)
    if worker is None:
        monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    else:
        monkeypatch.setenv("PYTEST_XDIST_WORKER", worker[0])
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", worker[1])
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        workers.share_the_machine()
        assert torch.get_num_threads() == workers.RUN_THREADS == 1
    finally:
        torch.set_num_threads(threads)


def test_a_run_the_command_line_caches_trains_on_one_thread(monkeypatch, tmp_path, capsys):
    """``python -m normsys train`` caches its run for the claims to read: it trains as they do."""
    import torch

    from normsys.__main__ import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path / "cache"))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        assert main(["train", "--model", "ffn_stack", "--set", "train.steps=2", "--set",
                     "model.d=16", "--set", "data.batch_shape=4,5,16", "--json",
                     str(tmp_path / "r.json")]) == 0
    finally:
        torch.set_num_threads(threads)
    assert json.loads((tmp_path / "r.json").read_text())["env"]["threads"] == "1"


@pytest.mark.parametrize("args,said", [
    (("--claims-seeds", "0"), "--claims-seeds 0: a verdict needs >= 2 seeds"),
    (("--claims-max-seeds", "2"), "--claims-max-seeds 2: below the first look of c-supported "
                                  "[cpu], 3 seeds; give at least 3"),
    (("--claims-seeds", "4", "--claims-max-seeds", "3"), "--claims-max-seeds 3: below the first "
                                                         "look of c-supported [cpu], 4 seeds"),
    (("--claims-ledger", "nowhere"), "--claims-ledger nowhere: no such folder"),
    (("--claims-seed-offset", "99999999999999999999"), "--claims-seed-offset "
                                                       "99999999999999999999: seeds are below 2**62"),
    (("--claims-seed-offset", str(2**62 - 3), "--claims-max-seeds", "8"), "(up to 8 seeds from "
                                                                          "the offset)")])
def test_options_that_would_be_ignored_or_misread_are_usage_errors(run_claims, args, said):
    result = run(run_claims, "-k", "supported", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR and said in result.stderr.str()


def test_max_seeds_at_the_first_look_and_a_new_ledger_folder_under_update_are_accepted(
        run_claims):
    assert run(run_claims, "-k", "supported", "--claims-max-seeds", "3").ret == 0
    result = run(run_claims, "-k", "supported", "--claims-ledger", "fresh", "--claims-update")
    assert result.ret == 0 and (run_claims.path / "fresh" / "c-supported.json").is_file()


def test_a_cpu_without_an_entry_of_its_own_is_held_to_the_reference_by_its_bound(switch,
                                                                                monkeypatch):
    """--claims-strict on a CPU whose kernels no entry records: judged against the reference
    within the claim's bound (one environment recorded: the seeds' own spread), a verdict that
    moves to inconclusive within it fails (that bound is wider than the reference interval's
    distance to the threshold: rounding and a bug cannot be told apart there), a decisive flip
    fails, nothing is written."""
    values = switch.path / "values.json"
    monkeypatch.setattr(provenance, "cpu_kernels", lambda: "AVX512")
    monkeypatch.setattr(provenance, "cpu_vendor", lambda: "AMD")
    values.write_text(json.dumps([0.9, 0.91, 0.92]))
    run(switch, "--claims-update")
    before = (records(switch) / "c-switch.json").read_text()
    monkeypatch.setattr(provenance, "cpu_kernels", lambda: "SVE256")
    values.write_text(json.dumps([0.9, 0.91, 0.9205]))  # rounding: within the bound
    same = run(switch, "--claims-strict")
    same.assert_outcomes(passed=1)
    row = json.loads((switch.path / "rep" / "claims.json").read_text())["claims"][0]
    assert row["ledger"] == "across" and row["ledger_note"].startswith("reference (cpu (AVX512")
    assert row["device"] == "cpu (SVE256, AMD)" and row["threads"]
    assert row["replication"] == "unreplicated"
    values.write_text(json.dumps(VALUES["inconclusive"]))
    moved = run(switch, "--claims-strict", "-rs")
    moved.assert_outcomes(failed=1)
    assert "within its bound" in moved.stdout.str() and "wider than the reference's distance " \
        "to the threshold" in moved.stdout.str()
    values.write_text(json.dumps(VALUES["refuted"]))
    flip = run(switch, "--claims-strict")
    flip.assert_outcomes(failed=1)
    assert "a decisive flip" in flip.stdout.str() or "beyond this claim's bound" in \
        flip.stdout.str()
    assert (records(switch) / "c-switch.json").read_text() == before  # nothing written


def test_a_new_claim_recorded_on_a_cpu_no_record_knows_lands_and_others_still_pass(switch,
                                                                                 monkeypatch):
    """Recorded from a machine kind that records nothing else: its record is its own, and
    another claim's record, made elsewhere, still judges that claim."""
    values = switch.path / "values.json"
    monkeypatch.setattr(provenance, "cpu_kernels", lambda: "AVX512")
    values.write_text(json.dumps([0.9, 0.91, 0.92]))
    run(switch, "--claims-update")
    monkeypatch.setattr(provenance, "cpu_vendor", lambda: "Intel")
    switch.makepyfile(test_more=SWITCH.replace("c-switch", "c-more"))
    run(switch, "--claims-update", "-k", "c-more").assert_outcomes(passed=1)
    assert sorted(p.name for p in records(switch).iterdir()) == ["c-more.json", "c-switch.json"]
    strict = run(switch, "--claims-strict")
    strict.assert_outcomes(passed=2)
    rows = {r["id"]: r for r in json.loads((switch.path / "rep" / "claims.json").read_text())[
        "claims"]}
    assert rows["c-more"]["ledger"] == "same" and rows["c-switch"]["ledger"] == "across"


def test_a_refutation_recorded_here_is_a_strict_xfail_whatever_the_reference_says(switch,
                                                                                  monkeypatch):
    """The entry a run is compared with is this environment's own where it has one: refuted
    here, supported on the reference's CPU, the claim is the strict xfail of its refutation."""
    values = switch.path / "values.json"
    monkeypatch.setattr(provenance, "cpu_kernels", lambda: "AVX512")
    values.write_text(json.dumps(VALUES["supported"]))
    run(switch, "--claims-update")
    monkeypatch.setattr(provenance, "cpu_kernels", lambda: "SVE256")
    values.write_text(json.dumps(VALUES["refuted"]))
    run(switch, "--claims-update")
    result = run(switch, "--claims-strict", "-rx")
    result.assert_outcomes(xfailed=1)
    assert "ledger: refuted 0.11 [" in result.stdout.str()
    row = json.loads((switch.path / "rep" / "claims.json").read_text())["claims"][0]
    assert row["ledger"] == "same" and row["replication"] == "CONTRADICTED"


def test_an_update_over_a_record_it_cannot_read_fails_the_claim_and_writes_nothing(switch):
    (switch.path / "values.json").write_text(json.dumps([0.9, 0.91, 0.92]))
    path = records(switch) / "c-switch.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    result = run(switch, "--claims-update")
    result.assert_outcomes(failed=1)
    assert "c-switch.json cannot be read" in result.stdout.str()
    assert "git checkout -- " in result.stdout.str()
    assert path.read_text() == "{not json"


def test_a_hub_that_takes_no_connection_makes_the_session_offline(monkeypatch):
    """Without a network the datasets library would retry the Hub for ~30 s, printing each retry:
    a host that takes no connection sets HF_HUB_OFFLINE=1 at once; one that does, nothing."""
    import socket

    from normsys.claims.session import offline_without_hub

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "https://normsys-no-such-host.invalid")
    offline_without_hub()
    assert os.environ.get("HF_HUB_OFFLINE") == "1"
    monkeypatch.delenv("HF_HUB_OFFLINE")
    with socket.create_server(("127.0.0.1", 0)) as server:
        monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
        offline_without_hub()
    assert "HF_HUB_OFFLINE" not in os.environ


def test_a_write_check_leaves_nothing_behind(tmp_path):
    from normsys.claims.report import write_check

    assert write_check(tmp_path / "a" / "b") == "" and list(tmp_path.iterdir()) == []
    (tmp_path / "f").write_text("")
    assert write_check(tmp_path / "f" / "rep") != "" and [p.name for p in tmp_path.iterdir()] == ["f"]


def test_claims_id_selects_a_claim_exactly_where_k_selects_every_id_it_begins():
    """-k matches substrings, so -k dm-l2-isotropic also selects its -masked and -nonpad
    variants; --claims-id selects the claim and its controls alone, and an id no claim has is
    said, not an empty run."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]

    def collected(*args) -> tuple[int, set[str], str]:
        done = subprocess.run([sys.executable, "-m", "pytest", "claims", "--collect-only", "-q",
                               "-p", "no:cacheprovider", *args], cwd=root, capture_output=True,
                              text=True)
        return done.returncode, {line for line in done.stdout.splitlines() if "::" in line}, \
            done.stdout + done.stderr

    _, by_k, _ = collected("-k", "dm-l2-isotropic")
    rc, exact, _ = collected("--claims-id", "dm-l2-isotropic")
    assert rc == 0 and exact and exact <= by_k
    assert any("masked" in n or "nonpad" in n for n in by_k)
    assert not any("masked" in n or "nonpad" in n for n in exact)
    assert any("test_control" in n for n in exact)  # its controls come with it
    rc, _, said = collected("--claims-id", "dm-l2-iso")
    assert rc != 0 and "--claims-id dm-l2-iso: no claim collected has that id" in said


def test_an_installed_normsys_is_a_pytest_plugin_in_any_folder(tmp_path):
    """Registered by its pytest11 entry point, the plugin needs no conftest: a claim file copied
    into a folder of its own lists, with its controls, as in the checkout."""
    import shutil
    import subprocess
    import sys
    from importlib.metadata import entry_points
    from pathlib import Path

    assert [ep.value for ep in entry_points(group="pytest11")
            if ep.name == "normsys.claims.plugin"] == ["normsys.claims.plugin"]
    claims = Path(__file__).resolve().parents[1] / "claims"
    shutil.copy(claims / "test_transformer_components.py", tmp_path)
    env = {**__import__("os").environ, "NORMSYS_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "pytest", "--claims-list", "-p",
                           "no:cacheprovider"], cwd=tmp_path, env=env, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "tc-residual-preserves-gradients  [cpu]" in done.stdout
    assert "control: test_control_gradient_rule_is_refuted_where_neither_arm_has_residuals" \
        in done.stdout


TWICE = '''
from normsys.claims.declaration import Arm, Declaration, Experiment, metric
from normsys.claims.params import declared_params
from normsys.claims.verdict import Rule
import pytest

GENERIC = Declaration("c-generic", Rule("v", ">", 0.1), source="t", statement="{rule}",
                      experiment=Experiment({"a": Arm("tanh_mlp")}, metric("v")))

@pytest.mark.parametrize("declared,variant,tier", declared_params([GENERIC]))
def test_declared(claim, declared, variant, tier):
    claim.check_values([0.5, 0.5, 0.5])

@GENERIC.mark
def test_its_own(claim):
    claim.check_values([0.5, 0.5, 0.5])
'''


def test_a_claim_decided_by_two_tests_is_refused_at_collection(pytester):
    """A test marked with a claim the generic test decides too (its declaration says no test of
    its own) would decide it twice, with two verdicts for one record: refused, naming both."""
    pytester.makepyfile(test_twice=TWICE)
    result = pytester.runpytest("--claims-list", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "claim c-generic at the cpu tier is decided by two tests, " \
           "test_twice.py::test_declared[c-generic-cpu] and test_twice.py::test_its_own: a " \
           "claim is one test (one with a test of its own declares own_test=True" in \
           result.stderr.str()


def test_the_plugin_skips_what_is_marked_gpu_without_cuda_wherever_it_is_installed(pytester,
                                                                                     monkeypatch):
    """A folder with no conftest of its own: the installed plugin registers the gpu marker and
    skips its items, with the reason, on a machine without CUDA."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    pytester.makepyfile(test_any='''
import pytest

@pytest.mark.gpu
def test_on_a_gpu():
    raise AssertionError("ran without CUDA")

def test_anywhere():
    pass
''')
    result = pytester.runpytest("-rs", "-p", "no:cacheprovider", "--strict-markers")
    result.assert_outcomes(passed=1, skipped=1)
    assert "gpu marker: no CUDA device on this machine" in result.stdout.str()
