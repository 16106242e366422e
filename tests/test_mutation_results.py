"""The mutation-testing results: the page is what the recorded results make, the equivalent
survivors are reviewed ones of this record, and the record reads mutmut's state as mutmut does."""

from __future__ import annotations

import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent / "mutation"
spec = importlib.util.spec_from_file_location("mutation_results", HERE / "mutation_results.py")
mr = importlib.util.module_from_spec(spec)
sys.modules["mutation_results"] = mr
spec.loader.exec_module(mr)


def test_the_page_is_what_the_results_and_the_review_make():
    assert mr.PAGE.read_text() == mr.docs(), \
        "docs/mutation.md is stale: run python tests/mutation/mutation_results.py docs"


def test_every_reviewed_survivor_is_a_survivor_of_the_record_and_has_a_stated_reason():
    """A reviewed survivor stays reviewed while its mutant waits to run again (not checked since
    its module's results were reset); one a run killed, or of code gone, is a stale review."""
    results = json.loads(mr.RESULTS.read_text())
    equivalent = json.loads(mr.EQUIVALENT.read_text())
    assert set(equivalent["mutants"]) <= set(results["survived"]) | set(results["not checked"])
    assert set(equivalent["mutants"].values()) <= set(equivalent["reasons"])


def test_score_counts_timeouts_as_killed_over_what_ran():
    assert mr.score({"killed": 6, "timeout": 2, "survived": 1, "no tests": 1,
                     "not checked": 90}) == 0.8
    assert math.isnan(mr.score({"not checked": 3}))
    assert mr.percent(mr.score({"not checked": 3})) == "-" and mr.percent(0.8) == "80.0%"


def test_record_reads_each_mutants_exit_code_as_mutmut_names_it(tmp_path):
    (tmp_path / "normsys").mkdir()
    meta = {"exit_code_by_key": {"normsys.a.x_f__mutmut_1": 1, "normsys.a.x_f__mutmut_2": 0,
                                 "normsys.a.x_f__mutmut_3": None, "normsys.a.x_f__mutmut_4": -24,
                                 "normsys.b.x_g__mutmut_1": 33}}
    (tmp_path / "normsys" / "a.py.meta").write_text(json.dumps(meta))
    got = mr.record(tmp_path, "an hour")
    assert got["modules"] == {"a": {"killed": 1, "not checked": 1, "survived": 1, "timeout": 1},
                              "b": {"no tests": 1}}
    assert got["survived"] == ["normsys.a.x_f__mutmut_2"] and got["time"] == "an hour"
    assert got["not checked"] == ["normsys.a.x_f__mutmut_3"]
    assert got["no tests"] == ["normsys.b.x_g__mutmut_1"]
    with pytest.raises(ValueError, match="no mutmut state"):
        mr.record(tmp_path / "empty", "")


def test_a_run_over_some_modules_replaces_theirs_and_keeps_the_others():
    """A run of mutmut over the claim files (``record --only 'claims.test_*'``): their modules and
    mutants as that run has them, every library module as recorded before."""
    old = {"tool": "m 1", "date": "d0", "commit": "c0", "time": "t0",
           "modules": {"claims.cache": {"killed": 3}, "claims.test_a": {"killed": 1}},
           "survived": ["normsys.claims.cache.x_f__mutmut_1", "claims.test_a.x_g__mutmut_2"],
           "no tests": [], "not checked": ["claims.test_a.x_g__mutmut_3"]}
    new = {"tool": "m 2", "date": "d1", "commit": "c1", "time": "t1",
           "modules": {"claims.test_a": {"killed": 2}, "claims.test_b": {"no tests": 1},
                       "claims.cache": {"not checked": 4}},
           "survived": [], "no tests": ["claims.test_b.x_h__mutmut_1"],
           "not checked": ["normsys.claims.cache.x_f__mutmut_9"]}
    got = mr.merged(old, new, ["claims.test_*"], {"claims.cache", "claims.test_a",
                                                                "claims.test_b"})
    assert got["modules"] == {"claims.cache": {"killed": 3}, "claims.test_a": {"killed": 2},
                              "claims.test_b": {"no tests": 1}}
    assert got["survived"] == ["normsys.claims.cache.x_f__mutmut_1"]
    assert got["no tests"] == ["claims.test_b.x_h__mutmut_1"] and got["not checked"] == []
    assert (got["tool"], got["commit"], got["time"]) == ("m 2", "c1", "t1")


def test_a_module_no_longer_mutated_leaves_the_record_with_its_mutants():
    """Code moved to another module: the old module's results and mutants go; the new one's come
    from the run that checked it."""
    old = {"tool": "m 1", "date": "d0", "commit": "c0", "time": "t0",
           "modules": {"claims.gone": {"killed": 3, "survived": 1}, "claims.kept": {"killed": 1}},
           "survived": ["normsys.claims.gone.x_f__mutmut_1"], "no tests": [], "not checked": []}
    new = {"tool": "m 2", "date": "d1", "commit": "c1", "time": "t1",
           "modules": {"claims.moved": {"killed": 4}}, "survived": [], "no tests": [],
           "not checked": []}
    got = mr.merged(old, new, ["claims.moved", "claims.other"], {"claims.kept", "claims.moved"})
    assert got["modules"] == {"claims.kept": {"killed": 1}, "claims.moved": {"killed": 4}}
    assert got["survived"] == []


def test_the_record_holds_every_module_mutmut_mutates_and_no_other():
    """A module renamed, merged or added since the last run is in the record under its name
    now, or the page shows results of code that no longer exists."""
    results = json.loads(mr.RESULTS.read_text())
    mutated = mr.mutated_modules()
    assert {"claims.verdict", "training.train", "claims.test_literature"} <= mutated
    assert set(results["modules"]) == mutated


def test_every_test_the_mutation_run_deselects_exists():
    """A deselected test that was renamed would run under mutmut again: the worker-pool tests
    there start processes that die as they start, without end."""
    import re

    root = HERE.parents[1]
    config = (root / "pyproject.toml").read_text().split("[tool.mutmut]", 1)[1]
    deselected = re.findall(r'"--deselect=([^":]+)::(\w+)"', config)
    assert len(deselected) >= 7
    missing = [f"{path}::{name}" for path, name in deselected
               if f"def {name}(" not in (root / path).read_text()]
    assert missing == []
