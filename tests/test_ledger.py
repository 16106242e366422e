"""The claims' records: their files, how an entry follows from itself, amendments, the judgement of
a fresh measurement on this and on another environment, the noise bounds and the verdict page
(the plugin's use of them: test_plugin)."""

from __future__ import annotations

import json
import math
import os
import pickle
import re
import subprocess
import sys
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np
import pytest

from normsys.__main__ import main
from normsys.claims import across, ledger, report, verdict
from normsys.claims.session import Ledgers
from normsys.claims.verdict import Rule
from normsys.training.config import preset

ROOT = Path(__file__).parents[1]
COMMITTED = ROOT / "claims" / "ledger"
SMALL = preset("ffn_stack", **{"train.steps": 3, "model.d": 16, "data.batch_shape": (4, 5, 16)})
SETTINGS, PRINT = ledger.run_settings([SMALL.override(**{"train.seed": s}) for s in range(3)])
AVX2, INTEL = "cpu (AVX2, AMD)", "cpu (AVX512, Intel)"


def entry(values=(0.92, 0.91, 0.93), rule=">= 0.8", device=AVX2, seeds=None, plan=None,
          code="c0de", alpha=verdict.INTERVAL_ALPHA, **changes) -> verdict.Verdict:
    """An entry whose verdict, mean and interval are what ``rule`` decides on ``values`` at the
    level of its look at ``alpha``."""
    seeds = list(seeds if seeds is not None else range(len(values)))
    plan = list(plan or [len(values)])
    level = verdict.levels(plan, alpha)[plan.index(len(values))]
    d = verdict.decide(ledger.parse_rule(rule), list(values), level)
    fields = dict(tier="cpu", verdict=d.verdict, statistic="kappa", rule=rule, seeds=seeds,
                  values=list(values), mean=d.mean, low=d.low,
                  high=d.high, plan=plan, alpha=alpha, measured="2026-11-23 10:00",
                  commit="a59fd79c0ffee", normsys="0.2.0", torch="2.13.0+cpu", device=device,
                  threads="1", autocast="off", data="abc", code=code, settings=SETTINGS,
                  settings_fingerprint=PRINT)
    return ledger.Entry.of_entry({**fields, **changes})


def record(*entries: verdict.Verdict, claim: str = "c-1") -> ledger.Record:
    r = ledger.Record(claim)
    for e in entries:
        r = ledger.recorded(r, e)
    return r


def laid_out(*entries: verdict.Verdict) -> ledger.Record:
    """A record holding ``entries`` as they are, the first the reference: plans over the same
    seeds that recording refuses (one error budget per seed set), as older records hold them."""
    return ledger.Record("c-1", {e.key: e for e in entries}, {"cpu": entries[0].key},
                          entries[0].full_rule)


# ----------------------------------------------------------------------------- files


def test_write_then_read_round_trips_with_sorted_keys(tmp_path):
    r = record(entry(), entry(device=INTEL))
    path = tmp_path / "c-1.json"
    ledger.write(path, r)
    assert ledger.read(path) == r
    text = path.read_text()
    assert text == json.dumps(json.loads(text), indent=1, sort_keys=True) + "\n"
    assert text.index(f'"cpu | {AVX2}') < text.index(f'"cpu | {INTEL}')
    assert ledger.read(tmp_path / "c-2.json") == ledger.Record("c-2")
    assert json.loads(text)["about"].startswith("normsys claim record: written by `pytest claims "
                                                "--claims-update`, never by hand")


def test_numbers_that_are_not_python_floats_are_written_as_numbers(tmp_path):
    """A reader may hand back numpy scalars (float32 is no float subclass): written as floats."""
    e = entry()
    r = record(replace(e, values=tuple(np.float32(v) for v in e.values)))
    ledger.write(tmp_path / "c-1.json", r)
    (written,) = json.loads((tmp_path / "c-1.json").read_text())["entries"].values()
    assert written["values"] == [float(np.float32(v)) for v in e.values]


def test_an_entry_is_keyed_by_tier_environment_and_seed_plan():
    e = entry(plan=[3, 5, 8], seeds=[4, 5, 6])
    assert e.key == "cpu | cpu (AVX2, AMD), 1 thread(s), torch 2.13.0+cpu | seeds 4+, looks 3,5,8"
    assert e.environment == "cpu (AVX2, AMD), 1 thread(s), torch 2.13.0+cpu"
    assert ledger.label(e) == "cpu (AVX2, AMD), seeds 4+ up to 8"
    assert ledger.label(entry()) == "cpu (AVX2, AMD), seeds 0+"
    amp = entry(device="NVIDIA H200", autocast="bfloat16", tier="paper")
    assert amp.key.startswith("paper | NVIDIA H200, 1 thread(s), torch 2.13.0+cpu, bfloat16 "
                              "autocast | ")


@pytest.mark.parametrize("content", ["{not json", '{"format": 2, "claim": "c-1"}', "[1, 2]"])
def test_a_damaged_file_is_an_error_naming_it(tmp_path, content):
    path = tmp_path / "c-1.json"
    path.write_text(content)
    with pytest.raises(ledger.LedgerError, match=r"c-1\.json.*--claims-update"):
        ledger.read(path)


def test_a_record_of_another_format_name_or_short_entry_is_one_clear_line(tmp_path):
    path = tmp_path / "c-1.json"
    ledger.write(path, record(entry()))
    body = json.loads(path.read_text())
    path.write_text(json.dumps({**body, "format": 1}))
    with pytest.raises(ledger.LedgerError, match="is format 1; this normsys .* reads format 2"):
        ledger.read(path)
    path.write_text(json.dumps({**body, "claim": "c-2"}))
    with pytest.raises(ledger.LedgerError, match="holds claim 'c-2': a record's file is named"):
        ledger.read(path)
    for other in ({"a": 1}, {k: v for k, v in body.items() if k != "format"}):  # no record
        path.write_text(json.dumps(other))
        with pytest.raises(ledger.LedgerError, match=f"^{path} is no claim record \\(a record "
                                                      f"names its format, claim and entries\\)"):
            ledger.read(path)
    (k, e), = body["entries"].items()
    del e["values"]
    path.write_text(json.dumps(body))
    with pytest.raises(ledger.LedgerError, match=f"entry '{k}' lacks values"):
        ledger.read(path)


# ----------------------------------------------------------------------------- an entry follows


def test_every_committed_record_follows_from_itself():
    recs = ledger.records(COMMITTED)
    assert len(recs) >= 47 and all(r.reference.get("cpu") for r in recs.values())
    assert all(r.registered and r.of("cpu") for r in recs.values())


@pytest.mark.parametrize("edit,says", [
    (dict(verdict="supported"), "verdict recorded supported, its values decide inconclusive"),
    (dict(rule=">= 0.25"), "verdict recorded inconclusive, its values decide supported"),
    (dict(mean=0.5), "mean recorded 0.5, recomputed 0.6"),
    (dict(low=0.1), "low recorded 0.1, recomputed 0.2996"),
    (dict(high=0.9), "high recorded 0.9, recomputed 0.9004"),
    (dict(values=[0.5, 0.6, 0.71]), "mean recorded 0.6, recomputed 0.6033"),
    (dict(seeds=[0, 1]), "2 seeds but 3 values"),
    (dict(plan=[5]), "3 seeds, a look its plan [5] does not take"),
])
def test_an_entry_that_does_not_follow_from_itself_is_an_error_naming_it(tmp_path, edit, says):
    """A verdict, threshold, mean or value edited by hand no longer follows from the rest."""
    e = entry((0.5, 0.6, 0.7), ">= 0.55")
    assert e.verdict == "inconclusive" and ledger.follows(e) == ""
    bad = replace(e, **edit)
    assert says in ledger.follows(bad)
    both = ledger.follows(replace(e, verdict="supported", mean=0.5))  # the verdict said first
    assert both.startswith("verdict recorded supported, its values decide inconclusive; mean ")
    r = ledger.Record("c-1", {bad.key: bad}, {"cpu": bad.key}, bad.full_rule)
    with pytest.raises(ledger.LedgerError, match=r"entry '.*' of c-1 does not follow"):
        ledger.verify(r, tmp_path / "c-1.json")


def test_an_entry_under_another_key_or_a_reference_to_another_tiers_entry_is_an_error(tmp_path):
    e = entry()
    moved = ledger.Record("c-1", {"cpu | elsewhere": e}, {"cpu": "cpu | elsewhere"},
                           e.full_rule)
    with pytest.raises(ledger.LedgerError, match=f"entry 'cpu | elsewhere' is of '{e.key}'"):
        ledger.verify(moved, tmp_path / "c-1.json")
    for reference in ({"paper": e.key}, {"cpu": "cpu | absent"}):
        r = ledger.Record("c-1", {e.key: e}, reference, e.full_rule)
        with pytest.raises(ledger.LedgerError, match=f"the {next(iter(reference))} tier's "
                                                      f"reference .* is not one of its entries"):
            ledger.verify(r, tmp_path / "c-1.json")


def test_an_entry_that_took_more_looks_than_its_values_needed_does_not_follow():
    """Decided at 8 seeds, yet its values decide at the look of 5: seeds were added past a
    decision (the earlier look's level: verdict.levels)."""
    values = [1.0, 1.3, 0.7, 1.0, 1.01, 1.0, 0.99, 1.02]
    decided = entry(values[:5], "> 0.5", plan=[3, 5, 8])
    assert decided.verdict == "supported" and ledger.follows(decided) == ""
    late = entry(values, "> 0.5", plan=[3, 5, 8])
    assert ledger.follows(late).endswith("its values decide at the look of 5 seeds, yet it "
                                         "took 8")


@pytest.mark.parametrize("text,rule", [
    ("> 0.05", Rule("", ">", 0.05)), ("<= -1e-05", Rule("", "<=", -1e-5)),
    ("within (-0.1, 0.1)", Rule("", "within", (-0.1, 0.1))),
    ("all of 3: >= 0.5", Rule("", ">=", 0.5)), ("all of 2 (Holm): < 1", Rule("", "<", 1.0))])
def test_an_entry_rule_reads_back_as_the_rule_that_wrote_it(text, rule):
    assert ledger.parse_rule(text) == rule
    assert ledger.parse_rule(text).text == re.sub(r"^all of \d+( \(Holm\))?: ", "", text)


def test_an_all_of_entry_follows_at_its_family_level_only_when_its_rule_says_holm():
    """Refuted at 95% but not at 97.5%: an entry of the old all-of rule (each comparison at its
    own level) follows as refuted; under Holm the same values are open. (Entries of 95% looks,
    recorded before the intervals' skew correction.)"""
    values = [1.7, 1.8, 1.9]  # mean 1.8, sd 0.1: 95% [1.552, 2.048], 97.5% [1.442, 2.158]
    at95 = verdict.decide(Rule("", "<", 1.5), values, 0.95)
    at975 = verdict.decide(Rule("", "<", 1.5), values, 0.95, family=2)
    assert at95.verdict == "refuted" and at975.verdict == "inconclusive"
    old = entry(values, "all of 2: < 1.5", alpha=verdict.FIRST_ALPHA)
    holm = entry(values, "all of 2 (Holm): < 1.5", verdict="refuted", low=at95.low,
                 high=at95.high, alpha=verdict.FIRST_ALPHA)
    assert ledger.family(old.rule) == 1 and ledger.family(holm.rule) == 2
    assert ledger.follows(old) == ""
    assert ledger.follows(holm) == "verdict recorded refuted, its values decide inconclusive"


def test_an_unknown_rule_text_is_an_error():
    with pytest.raises(ledger.LedgerError, match="not a rule normsys writes"):
        ledger.parse_rule("about 3")


# ----------------------------------------------------------------------------- amendments


def test_a_claims_first_entry_registers_its_rule_and_a_changed_rule_needs_an_amendment():
    r = record(entry())
    at, to = "kappa >= 0.8 (1.75% a side)", "kappa >= 0.9 (1.75% a side)"
    assert r.registered == at and r.rule == at and not r.amendments
    moved = entry(rule=">= 0.9", device=INTEL)
    with pytest.raises(ledger.LedgerError, match="a changed rule is an amendment"):
        ledger.recorded(r, moved)
    amended = ledger.recorded(r, moved, amend="the paper's own threshold")
    a, = amended.amendments
    assert (a.old, a.new, a.reason) == (at, to, "the paper's own threshold")
    assert amended.rule == to and amended.registered == at
    assert a.line() == f"amended {a.date}: {at} -> {to} (the paper's own threshold)"
    assert re.fullmatch(r"20\d\d-[01]\d-[0-3]\d", a.date)  # the day it was amended


def test_intervals_at_another_alpha_are_another_rule_and_old_entries_keep_their_level():
    """An entry recorded before the skew correction (no alpha: 95% at one look) reads its rule
    without a level; deciding the claim at the intervals' 1.75% a side is a change of method,
    recorded as an amendment, after which only the new entry is current. The old entry still
    follows from itself at its own level, and a verdict it reached at 95% that 96.5% does not
    reach stays what it was."""
    values = (0.85, 0.9, 0.95)  # mean 0.9, sd 0.05: 95% [0.776, 1.024], 96.5% [0.754, 1.046]
    old = entry(values, "> 0.77", alpha=verdict.FIRST_ALPHA)
    assert old.confidence == 0.95 and old.verdict == "supported" and old.full_rule == "kappa > 0.77"
    assert ledger.follows(old) == ""
    new = entry(values, "> 0.77", device=INTEL)
    assert new.confidence == pytest.approx(0.965) and new.verdict == "inconclusive"
    assert new.full_rule == "kappa > 0.77 (1.75% a side)"
    r = record(old)
    with pytest.raises(ledger.LedgerError, match="a changed rule is an amendment"):
        ledger.recorded(r, new)
    amended = ledger.recorded(r, new, amend="skew")
    assert [(a.old, a.new) for a in amended.amendments] == [
        ("kappa > 0.77", "kappa > 0.77 (1.75% a side)")]
    assert amended.current("cpu", 0) == [new]
    assert ledger.Entry.of_entry(old.entry) == old and "alpha" in old.entry
    legacy = {k: v for k, v in old.entry.items() if k != "alpha"}
    assert ledger.Entry.of_entry(legacy) == old  # an entry without alpha is a 95% one


def test_a_second_plan_of_looks_over_the_seeds_an_entry_decided_on_is_refused():
    """More looks over seeds already decided on (one look at 3, then a plan of 3, 5, 8 from the
    same seed) would spend a fresh error budget on values already seen: refused, naming the
    fresh seeds to replicate on. The same plan again, another environment, or fresh seeds are
    entries of their own."""
    r = record(entry())
    more = entry(values=(0.92, 0.91, 0.93, 0.9, 0.94), plan=[3, 5, 8])
    with pytest.raises(ledger.LedgerError, match=re.escape(
            "c-1: its record holds cpu | cpu (AVX2, AMD), 1 thread(s), torch 2.13.0+cpu | seeds "
            "0+, looks 3, decided on seeds 0-2; a second plan of looks over the same seeds (seeds "
            "0+, looks 3,5,8) would spend a fresh error budget on values already seen. Replicate "
            "on fresh seeds instead (--claims-seed-offset 3), an entry judged on its own")):
        ledger.recorded(r, more)
    again = ledger.recorded(r, entry(code="n3w"))
    elsewhere = ledger.recorded(r, entry(device=INTEL))
    fresh = ledger.recorded(r, entry(seeds=[3, 4, 5, 6, 7], plan=[3, 5, 8],
                                     values=(0.92, 0.91, 0.93, 0.9, 0.94)))
    assert (len(again.entries), len(elsewhere.entries), len(fresh.entries)) == (1, 2, 2)


def test_a_second_plan_over_seeds_decided_in_another_environment_is_refused():
    """One error budget per seed set, whatever machine spends it: seeds 0-2 decided on one CPU
    under the rule in force cannot be looked at again under another plan from another CPU or
    GPU; the message names the fresh seeds. An entry under an earlier rule (another level) does
    not hold its seeds against a plan under the rule in force."""
    r = record(entry())
    with pytest.raises(ledger.LedgerError, match=re.escape(
            "decided on seeds 0-2; a second plan of looks over the same seeds (seeds 0+, looks "
            "3,5,8) would spend a fresh error budget on values already seen. Replicate on fresh "
            "seeds instead (--claims-seed-offset 3)")):
        ledger.recorded(r, entry(device=INTEL, plan=[3, 5, 8]))
    longer = record(entry(values=(0.92, 0.7, 0.9, 0.91, 0.93), plan=[3, 5, 8]))
    with pytest.raises(ledger.LedgerError, match=r"seeds 0-4; .*--claims-seed-offset 5\)"):
        ledger.recorded(longer, entry(device=INTEL))
    old = record(entry(alpha=verdict.FIRST_ALPHA))  # decided at 95%, before the amendment
    amended = ledger.recorded(old, entry(device=INTEL, plan=[3, 5, 8]), amend="the level")
    assert len(amended.entries) == 2


def test_a_rule_neither_registered_nor_amended_is_an_error(tmp_path):
    """The threshold edited in the claim and its record by hand, with no amendment."""
    e = entry()
    edited = entry(rule=">= 0.7")
    r = ledger.Record("c-1", {edited.key: edited}, {"cpu": edited.key}, e.full_rule)
    with pytest.raises(ledger.LedgerError, match="neither the registered rule .* nor an "
                                                 "amendment's: a changed rule is recorded with "
                                                 "--claims-amend"):
        ledger.verify(r, tmp_path / "c-1.json")
    chain = ledger.Record("c-1", {e.key: e}, {"cpu": e.key}, e.full_rule,
                          [ledger.Amendment("2026-11-27", "kappa >= 0.7", "kappa >= 0.9", "x")])
    with pytest.raises(ledger.LedgerError, match=re.escape(
            "starts from 'kappa >= 0.7', but the rule before it is 'kappa >= 0.8 (1.75% a side)'")):
        ledger.verify(chain, tmp_path / "c-1.json")


def test_a_fresh_run_under_a_rule_other_than_the_records_fails_naming_the_amendment():
    judged = across.judge(record(entry()), entry(rule=">= 0.7"))
    assert judged.fails and "but the record holds 'kappa >= 0.8 (1.75% a side)': a changed " \
                            "rule is an " \
                             "amendment, recorded with --claims-update --claims-amend" \
        in judged.message


def registered_at_first_commit(path: Path) -> str | None:
    """The rule a record was registered with in the first commit that added it (None: not
    committed, or no git history here)."""
    try:
        first = subprocess.run(["git", "-C", str(ROOT), "log", "--diff-filter=A", "--format=%H",
                                "--", str(path.relative_to(ROOT))], capture_output=True,
                               text=True, timeout=30, check=True).stdout.split()
        if not first:
            return None
        text = subprocess.run(["git", "-C", str(ROOT), "show",
                               f"{first[-1]}:{path.relative_to(ROOT)}"], capture_output=True,
                              text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return json.loads(text)["registered"]


def test_no_records_registered_rule_was_edited_since_it_was_first_committed():
    """Pre-registration: a record's registered rule stays what it was committed with; a rule
    changes only by an amendment, which keeps the old one beside it."""
    seen = {p: registered_at_first_commit(p) for p in sorted(COMMITTED.glob("*.json"))}
    if not any(v is not None for v in seen.values()):
        pytest.skip("no git history of claims/ledger here")
    edited = [p.stem for p, first in seen.items()
              if first is not None and first != ledger.read(p).registered]
    assert not edited, f"registered rules edited after their first commit: {edited}"


# ----------------------------------------------------------------------------- judging here


def test_the_same_per_seed_values_here_are_the_same():
    judged = across.judge(record(entry()), entry())
    assert judged.status == "same" and not judged.fails
    assert judged.message == "record (cpu (AVX2, AMD), 1 thread(s), torch 2.13.0+cpu): " \
                             "supported 0.92 [0.89, 0.95] seeds 0-2 (2026-11-23, a59fd79); " \
                             "the same per-seed values"


def test_one_value_moved_by_a_thousandth_fails_naming_the_largest_change_and_the_command():
    """A reader's value times 1.001 on the machine kind that recorded the claim."""
    r = record(entry((0.82, 0.81, 0.83)))
    judged = across.judge(r, entry((0.82 * 1.001, 0.81 * 1.001, 0.83)))
    assert judged.fails and judged.status == "changed"
    assert f"per-seed values differ at 2 seed(s), the largest seed 0: 0.82 -> {0.82 * 1.001!r}" \
        in judged.message
    assert judged.message.endswith("review, then record it: pytest claims -k c-1 "
                                   "--claims-update")
    # the smallest change a float can make
    nudged = entry((math.nextafter(0.82, 1), 0.81, 0.83))
    assert across.judge(r, nudged).fails


def test_changed_values_are_listed_a_diverged_seed_first_then_by_the_size_of_the_change():
    listed = ledger.value_changes(entry((1.0, math.nan, 3.0, 4.0)),
                                   entry((1.1, 2.0, 3.5, math.nan)))
    assert listed == ["seed 1: nan -> 2.0", "seed 3: 4.0 -> nan", "seed 2: 3.0 -> 3.5",
                      "seed 0: 1.0 -> 1.1"]
    # a later look of the same plan holds more seeds: the ones both hold are compared
    assert ledger.value_changes(entry((1.0, 2.0, 3.0), plan=[3, 5]),
                                 entry((1.0, 2.5, 3.0, 4.0, 5.0), plan=[3, 5])) == \
        ["seed 1: 2.0 -> 2.5"]


def test_what_a_claim_was_decided_under_is_part_of_it():
    """Another statistic is another rule; other run settings on the same key fail naming them;
    other seeds are another key, not recorded."""
    r = record(entry())
    assert across.judge(r, entry(statistic="kappa_2")).fails
    longer, _ = ledger.run_settings([SMALL.override(**{"train.steps": 12})])
    judged = across.judge(r, entry(settings=longer, settings_fingerprint="f" * 16))
    assert judged.fails and "settings: train.steps 3 -> 12" in judged.message
    wider, _ = ledger.run_settings([SMALL.override(**{"train.steps": 12, "train.lr": 0.5})])
    both = across.judge(r, entry(settings=wider, settings_fingerprint="f" * 16)).message
    assert f"settings: train.lr {SETTINGS['train.lr']} -> 0.5, train.steps 3 -> 12" in both
    assert ledger.changes(entry(), entry(statistic="kappa_2", rule="> 0.8")) == [
        "statistic: recorded kappa, now kappa_2", "rule: recorded >= 0.8, now > 0.8"]
    assert across.judge(r, entry(seeds=[3, 4, 5])).status == "unrecorded"


def test_a_verdict_moved_with_its_values_says_both():
    r = record(entry())
    judged = across.judge(r, entry((0.92, 0.7, 0.9)))
    assert judged.fails and "now: inconclusive" in judged.message
    assert "verdict recorded supported" in judged.message


# ----------------------------------------------------------------------------- judging across


def two_environments(shift: float = 0.0):
    """A record of two environments whose per-seed values differ by a little (noise 0.005)."""
    here = entry((0.90, 0.92, 0.94), "> 0.5", device="cpu (AVX512, AMD)")
    there = entry((0.905, 0.915, 0.945), "> 0.5", device="cpu (DEFAULT, Intel)")
    return record(here, there)


def test_another_environment_is_held_to_the_reference_within_the_claims_own_bound():
    r = two_environments()
    nz = across.noise(r, "cpu")
    assert nz.measured and nz.df == 3 and nz.sd == pytest.approx(math.sqrt(
        (3 * 2 * 0.0025 ** 2) / 3))
    bound = nz.bound(3)
    assert bound == pytest.approx(verdict.t_quantile(3, 1 - across.ALPHA_ACROSS) * nz.sd *
                                  math.sqrt(2 / 3))
    near = across.judge(r, entry((0.901, 0.921, 0.939), "> 0.5", device=AVX2))
    assert near.status == "across" and not near.fails
    assert near.message.startswith("reference (cpu (AVX512, AMD), 1 thread(s), torch "
                                   "2.13.0+cpu): supported")
    far = across.judge(r, entry(tuple(v + 1.2 * bound for v in (0.90, 0.92, 0.94)), "> 0.5",
                                device=AVX2))
    assert far.fails and "beyond this claim's bound across environments" in far.message


def test_across_a_decisive_flip_fails_and_a_move_to_inconclusive_within_the_bound_passes():
    wide = record(entry((0.1, 0.9, 0.5), "> 0.45", device="cpu (AVX512, AMD)"))  # seeds' spread
    assert not across.noise(wide, "cpu").measured
    moved = across.judge(wide, entry((0.1, 0.9, 0.52), "> 0.45", device=AVX2))
    assert moved.status in ("across", across.MOVED) and not moved.fails
    flip_base = record(entry((0.7, 0.72, 0.74), "> 0.45", device="cpu (AVX512, AMD)"))
    flipped = across.judge(flip_base, entry((0.2, 0.21, 0.22), "> 0.45", device=AVX2))
    assert across.noise(flip_base, "cpu").bound(3) > 0.5  # within the bound: the flip decides
    assert flipped.fails and "a decisive flip" in flipped.message


def test_an_entry_stands_for_its_environment_until_a_run_there_gives_other_values():
    """Values decide, code is provenance: after a training edit that moved the numbers, this
    environment's entry fails exactly where it is (whatever code made it), and an environment
    without one is judged across against the reference, whatever code made that; only the
    environment that records again moves on."""
    old_here = entry((0.90, 0.92, 0.94), "> 0.5", code="old")
    old_there = entry((0.905, 0.915, 0.945), "> 0.5", device=INTEL, code="old")
    r = record(old_here, old_there)
    moved_here = across.judge(r, entry((0.911, 0.929, 0.951), "> 0.5", code="new"))
    assert moved_here.status == "changed" and "per-seed values differ at 3 seed(s)" in \
        moved_here.message
    elsewhere = across.judge(r, entry((0.901, 0.921, 0.94), "> 0.5", device="cpu (DEFAULT, AMD)",
                                      code="new"))
    assert elsewhere.status in ("across", across.MOVED) and not elsewhere.fails
    assert elsewhere.message.startswith(f"reference ({old_here.environment})")
    assert across.judge(r, entry((0.905, 0.915, 0.945), "> 0.5", device=INTEL,
                                 code="new")).status == "same"
    # recorded here after review: this entry alone moves; the other stands, its code as it was
    again = ledger.recorded(r, entry((0.911, 0.929, 0.951), "> 0.5", code="new"))
    assert again.entries[old_here.key].code == "new" and again.entries[old_there.key].code == "old"
    assert again.reference == {"cpu": old_here.key}
    assert across.judge(again, entry((0.911, 0.929, 0.951), "> 0.5", code="new")).status == "same"
    assert len(again.in_force("cpu")) == 2  # both stand for the claim


def test_a_training_edit_that_changes_no_number_unrecords_nothing():
    """This environment's entry made by other training code is compared value for value: the
    same values are `same` (and say that recording stamps the code in force); one value off, a
    rounding's worth, fails. The stamp is provenance: the entry stands for the claim, and pairs
    with other environments' entries for the noise, by whatever code."""
    old_here = entry((0.90, 0.92, 0.94), "> 0.5", code="old")
    same = across.judge(record(old_here), entry((0.90, 0.92, 0.94), "> 0.5", code="new"))
    assert same.status == "same" and not same.fails and "--claims-update stamps" in same.message
    off = across.judge(record(old_here), entry((0.90, 0.92, 0.94 + 1e-12), "> 0.5", code="new"))
    assert off.fails and "per-seed values differ at 1 seed(s)" in off.message
    assert record(old_here).in_force("cpu") == [old_here]
    again = entry((0.90, 0.92, 0.94), "> 0.5", code="new", measured="2026-12-02 09:00",
                  commit="b0b0b0b")
    stamped = ledger.recorded(record(old_here), again)
    assert [e.code for e in stamped.in_force("cpu")] == ["new old"]
    # the entry stays as it was measured: the same values again rewrite no date or commit
    assert stamped.entries[old_here.key] == replace(old_here, code="new old")
    assert ledger.recorded(stamped, again) == stamped  # by the same code, nothing changes
    assert across.judge(stamped, entry((0.90, 0.92, 0.94), "> 0.5", code="new")).status == "same"
    # other values are no stamp: the entry is this code's alone
    moved = ledger.recorded(record(old_here), entry((0.90, 0.92, 0.95), "> 0.5", code="new"))
    assert [e.code for e in moved.in_force("cpu")] == ["new"]
    # entries of one experiment pair for the noise whatever code made them
    there = entry((0.90, 0.92, 0.9400001), "> 0.5", device=INTEL, code="old")
    alone = ledger.recorded(record(old_here, there), entry((0.90, 0.92, 0.95), "> 0.5", code="new"))
    assert across.noise(alone, "cpu").measured and across.noise(alone, "cpu").df == 3
    # a second environment's entry stamped leaves the reference where it was
    ref = ledger.recorded(record(old_here, there), entry((0.90, 0.92, 0.94), "> 0.5", code="new"))
    restamped = ledger.recorded(ref, entry((0.90, 0.92, 0.9400001), "> 0.5", device=INTEL,
                                           code="new"))
    assert restamped.entries[there.key].code == "new old"
    assert restamped.reference == ref.reference == {"cpu": old_here.key}


def test_an_entry_of_other_run_settings_is_history_once_the_new_ones_are_recorded():
    """A tier resized and recorded on one environment: another environment's entry of the old
    settings is no longer what its runs measure, so it is judged across against the entries of
    the settings in force (saying so), not failed on settings its machine never reran; and the
    noise pairs only entries of one experiment. Before any environment records the new settings,
    they fail everywhere as unreviewed."""
    longer, _ = ledger.run_settings([SMALL.override(**{"train.steps": 12})])
    old_here = entry((0.90, 0.92, 0.94), "> 0.5")
    old_there = entry((0.905, 0.915, 0.945), "> 0.5", device=INTEL)
    unreviewed = across.judge(record(old_here, old_there),
                              entry((0.95, 0.96, 0.97), "> 0.5", device=INTEL, settings=longer,
                                    settings_fingerprint="f" * 16))
    assert unreviewed.fails and "settings: train.steps 3 -> 12" in unreviewed.message
    assert unreviewed.message.startswith(f"record ({old_there.environment})")
    resized = ledger.recorded(record(old_here, old_there),
                              entry((0.95, 0.96, 0.97), "> 0.5", settings=longer,
                                    settings_fingerprint="f" * 16))
    assert resized.reference == {"cpu": old_here.key}
    assert [e.device for e in resized.in_force("cpu")] == [AVX2]  # the reference's settings
    there = across.judge(resized, entry((0.951, 0.961, 0.969), "> 0.5", device=INTEL,
                                        settings=longer, settings_fingerprint="f" * 16))
    assert there.status in ("across", across.MOVED) and not there.fails
    assert "this environment's entry is of other run settings: train.steps 12 -> 3" in \
        there.message or "train.steps 3 -> 12" in there.message
    assert not across.noise(resized, "cpu").measured  # one environment of the settings in force


def test_the_entry_a_claim_is_held_to_is_of_the_run_settings_its_plan_reads(tmp_path):
    """What a session marks a claim by before it runs (a strict xfail where it is refuted) is
    the entry its judgement will pick: this environment's own only where it is of the settings
    the claim's plan reads, else the entry of those settings in force (the reference here)."""
    longer, _ = ledger.run_settings([SMALL.override(**{"train.steps": 12})])
    ref = entry((0.1, 0.2, 0.15), "> 0.5", settings=longer, settings_fingerprint="f" * 16)
    stale_here = entry((0.4, 0.6, 0.9), "> 0.5", device=INTEL)  # the old settings: open
    ledger.write(ledger.path_of(tmp_path, "c-1"), laid_out(ref, stale_here))
    ledgers = Ledgers(tmp_path)
    like = ledger.Entry(verdict="", tier="cpu", statistic="kappa", settings=longer)
    assert ledgers.recorded("c-1", "cpu", stale_here.key, 0) == stale_here  # settings unknown
    held = ledgers.recorded("c-1", "cpu", stale_here.key, 0, like)
    assert held == ref and held.verdict == "refuted"
    same = ledger.Entry(verdict="", tier="cpu", statistic="kappa", settings=SETTINGS)
    assert ledgers.recorded("c-1", "cpu", stale_here.key, 0, same) == stale_here
    assert across.judge(ledgers.record("c-1"), entry((0.1, 0.2, 0.15), "> 0.5", device=INTEL,
                                                     settings=longer,
                                                     settings_fingerprint="f" * 16)).status \
        != "changed"  # judged against the reference too


def test_another_environment_decided_under_other_settings_fails_against_the_reference():
    """Held to the reference, a run on another CPU under other run settings fails naming them,
    with the reference and what it measured now; no entry of its own to call stale."""
    r = record(entry())
    longer, _ = ledger.run_settings([SMALL.override(**{"train.steps": 12})])
    judged = across.judge(r, entry(device=INTEL, settings=longer, settings_fingerprint="f" * 16))
    ref = entry()
    assert judged.status == "changed" and judged.fails
    assert judged.message == f"reference ({ref.environment}): {ref.line()}; now: supported " \
                             f"0.92 [0.89, 0.95]; settings: train.steps 3 -> 12; review, " \
                             f"then record it: pytest claims -k c-1 --claims-update"


def test_no_record_of_the_tier_is_new_and_other_seeds_are_unrecorded():
    assert across.judge(ledger.Record("c-1"), entry()).status == "new"
    other = across.judge(record(entry()), entry(seeds=[3, 4, 5], device=INTEL))
    assert other.status == "unrecorded" and "on seeds 3+" in other.message


def test_a_claim_recorded_on_one_environment_is_bounded_by_its_seeds_spread():
    one = record(entry((0.5, 0.6, 0.7), "> 0.1"))
    nz = across.noise(one, "cpu")
    assert not nz.measured and nz.df == 2 and nz.sd == pytest.approx(0.1)
    identical = record(entry((0.5, 0.6, 0.7), "> 0.1"), entry((0.5, 0.6, 0.7), "> 0.1",
                                                               device=INTEL))
    zero = across.noise(identical, "cpu")
    assert zero.measured and zero.sd == 0 and zero.bound(3) == pytest.approx(0.7e-6)
    pair = across.noise(record(entry((0.5, 0.7), "> 0.1")), "cpu")  # two seeds: one df
    assert not pair.measured and pair.df == 1 and pair.sd == pytest.approx(math.sqrt(0.02))
    assert pair.bound(3) == pytest.approx(verdict.t_quantile(1, 1 - across.ALPHA_ACROSS)
                                          * math.sqrt(0.02) * math.sqrt(2 / 3))
    single = across.noise(record(entry((0.5,), "> 0.1")), "cpu")  # one seed: no spread at all
    assert single.df == 0 and math.isnan(single.sd) and single.bound(3) == math.inf
    assert (single.scale, single.measured) == (0.5, False)
    diverged = across.noise(record(entry((math.nan,) * 3, "> 0.1")), "cpu")
    assert (diverged.df, diverged.scale, diverged.bound(3)) == (0, 0.0, math.inf)
    # entries only on later seeds set no reference: no spread stands in, nothing bounds them
    later = across.noise(record(entry((0.5, 0.6, 0.7), "> 0.1", seeds=[3, 4, 5])), "cpu")
    assert (later.df, later.measured, later.bound(3)) == (0, False, math.inf)


def test_the_looks_a_claim_took_here_are_its_entries_of_this_device_threads_and_torch(tmp_path):
    """What a session reads to plan a claim's looks (verdict.expected): its entries of the tier
    on this device, threads and torch, on seeds from the session's first, whatever their plan;
    none of another tier, device, thread count, torch or first seed."""
    here = {"device": AVX2, "threads": "1", "torch": "2.13.0+cpu"}
    mine = entry((0.9, 0.92, 0.91, 0.95, 0.93), plan=[3, 5, 8])
    others = [entry(device=INTEL), entry(threads="2"), entry(torch="2.12.0+cpu"),
              entry(seeds=[3, 4, 5]), entry(tier="paper", plan=[3, 5])]
    r = ledger.Record("c-1", {e.key: e for e in (mine, *others)}, registered=mine.full_rule)
    ledger.write(tmp_path / "c-1.json", r)
    ledgers = Ledgers(tmp_path)
    assert ledgers.history("c-1", "cpu", here, 0) == [mine]
    assert ledgers.history("c-1", "cpu", here, 3) == [others[3]]
    assert ledgers.history("c-1", "cpu", {**here, "threads": "2"}, 0) == [others[1]]
    assert ledgers.history("c-1", "paper", here, 0) == [others[4]]


# ----------------------------------------------------------------------------- the committed records


def test_the_false_alarm_rate_of_a_whole_cpu_tier_run_on_a_new_cpu_is_at_most_one_percent():
    recs = ledger.records(COMMITTED)
    assert len(recs) * across.ALPHA_ACROSS <= 0.01  # the union bound: up to 100 claims
    assert report.false_alarm(recs, "cpu") <= 0.01
    assert report.false_alarm_resampled(recs, "cpu") <= 0.01


def test_differences_pair_each_two_environments_of_one_experiment_once_on_shared_seeds():
    held = [entry((0.5, 0.6, 0.7), "> 0.1"),
            entry((0.5, 0.65, math.nan), "> 0.1", device=INTEL),
            # another plan over the same seeds (laid_out)
            entry((0.52, 0.6, 0.7, 0.8), "> 0.1", device="cpu (DEFAULT, Intel)", plan=[4]),
            entry((0.9, 0.9, 0.9), "> 0.1", device="cpu (AVX2, Intel)", settings={"x": "1"}),
            entry((0.4, 0.4, 0.4), "> 0.1", tier="paper", device="NVIDIA H200")]
    r = laid_out(*held)
    # AVX2 AMD -> AVX512 Intel (seeds 0-1: seed 2 is NaN there), AVX2 AMD -> DEFAULT Intel
    # (seeds 0-2), AVX512 Intel -> DEFAULT Intel (seeds 0-1), in the environments' order; the
    # other run settings' and the other tier's entries add none
    assert report.differences(r, "cpu") == pytest.approx([0.0, 0.05, 0.02, 0.0, 0.0, 0.02, -0.05])


def test_an_alarm_is_a_mean_difference_beyond_the_bound_of_any_claim_with_a_reference():
    """The rate over runs of every claim: claims without a reference of the tier are skipped,
    not the end of the loop; a shift exactly on the bound is no alarm."""
    recs = {"c-0": record(entry(tier="paper"), claim="c-0"),
            "c-1": record(entry((0.5, 0.6, 0.7), "> 0.1"), claim="c-1")}
    bound = across.noise(recs["c-1"], "cpu").bound(3)
    on_bound = lambda gen, r, nz, n: np.array([bound, -bound, 2 * bound, 0.0])  # noqa: E731
    assert report.alarm_rate(recs, "cpu", on_bound, 4, 0) == 0.25


def test_resampled_false_alarms_come_from_the_recorded_differences():
    """One claim, a one-seed reference; two other environments share 100 seeds, equal but on one
    seed: of its 102 recorded differences one lies beyond its bound, so a run resampling one
    difference alarms 1 time in 102."""
    r = laid_out(entry((0.5,), "> 0.1"),
                 entry([0.5] * 100, "> 0.1", device=INTEL),
                 entry([0.5] * 7 + [0.6] + [0.5] * 92, "> 0.1", device="cpu (DEFAULT, Intel)"))
    assert len(report.differences(r, "cpu")) == 102
    assert across.noise(r, "cpu").bound(1) < 0.1
    assert report.false_alarm_resampled({"c-1": r}, "cpu") == pytest.approx(1 / 102, abs=0.003)


def test_a_claim_of_one_degree_of_freedom_across_environments_adds_its_false_alarms():
    """Two environments sharing one seed: a spread with one degree of freedom, drawn (heavy
    tailed) rather than left out."""
    r = record(entry((0.5,), "> 0.1"), entry((0.5001,), "> 0.1", device=INTEL))
    assert across.noise(r, "cpu").df == 1
    rate = report.false_alarm({"c-1": r}, "cpu", reps=1_000_000)  # ~100 alarms expected
    assert 0.5 * across.ALPHA_ACROSS <= rate <= 1.5 * across.ALPHA_ACROSS


def test_the_stated_detectable_shift_is_detected_95_percent_of_the_time():
    """For every CPU claim, simulated apart from the page's own draws: a shift of its mean by
    the stated amount is found beyond its bound 95% of the time; half of it far less often."""
    recs = ledger.records(COMMITTED)
    gen = np.random.default_rng(1)
    for cid, r in recs.items():
        ref = r.entries[r.reference["cpu"]]
        nz, n = across.noise(r, "cpu"), len(ref.seeds)
        shift = nz.detectable(n)
        draws = gen.normal(0, nz.sd * math.sqrt(2 / n), 20_000)
        found = np.mean(np.abs(draws + shift) > nz.bound(n))
        assert 0.94 <= found <= 0.96 or (nz.sd == 0 and found == 1), cid


def test_a_one_line_bug_on_another_cpu_fails_whenever_beyond_the_claims_bound():
    """The reader's values times 1.001 on a CPU with no entry: judged across, it fails wherever
    the shift of the mean lies beyond the claim's bound, and elsewhere only by a decisive flip."""
    caught = 0
    for r in ledger.records(COMMITTED).values():
        ref = r.entries[r.reference["cpu"]]
        values = [v * 1.001 for v in ref.values]
        d = verdict.decide(ledger.parse_rule(ref.rule), values, ref.confidence)
        bug = replace(ref, values=values, verdict=d.verdict, mean=d.mean, low=d.low, high=d.high,
                      device="cpu (AVX2, Intel)", code=ref.code.split()[0],  # the newest code
                      parts={k: [v * 1.001 for v in vs] for k, vs in ref.parts.items()})
        shift = abs(math.fsum(b - a for a, b in zip(ref.values, values, strict=True)) /
                    len(values))
        judged = across.judge(r, bug)
        if shift > across.noise(r, "cpu").bound(len(values)):
            assert judged.fails and "beyond this claim's bound" in judged.message, r.claim
            caught += 1
        else:
            assert judged.fails == ("a decisive flip" in judged.message), r.claim
    assert caught >= 10  # the claims whose values no other CPU moved beyond rounding


def test_the_verdict_page_is_what_the_committed_records_make():
    """The page is the committed records' alone: whatever code runs the test (mutation testing
    runs the training modules rewritten), it reads the same."""
    for name, text in report.docs(COMMITTED).items():
        assert (ROOT / "docs" / name).read_text() == text, \
            f"docs/{name} is stale: run python -m normsys tables"


def test_the_verdict_page_stays_short_and_tells_each_amendment_once():
    """The page a reader scans: at most 200 lines, each amendment's reason told once however
    many claims it amended, the protocol's diagnostics on their own page."""
    page = (ROOT / "docs" / "verdicts.md").read_text()
    recs = report.records(COMMITTED)
    reasons = {a.reason for r in recs.values() for a in r.amendments}
    assert len(page.splitlines()) <= 200
    assert all(page.count(reason) == 1 for reason in reasons)
    assert "## What CI on another CPU detects" not in page and \
        "## What CI on another CPU detects" in (ROOT / "docs" / "diagnostics.md").read_text()


# ----------------------------------------------------------------------------- session, page, CLI


def test_a_session_writes_each_claims_record_and_deletes_those_of_gone_claims(tmp_path):
    def Result(cid, e):  # a session's result: the claim's verdict, to be recorded
        return report.Row(**asdict(e), id=cid, ledger="updated")

    ledgers = Ledgers(tmp_path, update=True)
    ledger.write(tmp_path / "c-gone.json", record(entry(), claim="c-gone"))
    ledgers.stale = ledger.stale(tmp_path, {"c-1", "c-2"})
    assert ledgers.stale == ["c-gone"]
    lines = ledgers.write([Result("c-1", entry()), Result("c-2", entry(device=INTEL))])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c-1.json", "c-2.json"]
    assert lines[0] == f"deleted {tmp_path / 'c-gone.json'}: no claim c-gone is defined"
    assert lines[1] == f"wrote {tmp_path / 'c-1.json'} ({entry().key})"
    assert ledgers.record("c-2") == ledger.read(tmp_path / "c-2.json")  # read as written
    ledgers.stale = ["c-gone"]  # a record deleted already (by another session): no error
    assert ledgers.write([])[0].startswith("deleted")
    assert ledger.read(tmp_path / "c-2.json").reference == {"cpu": entry(device=INTEL).key}
    # a second environment adds its entry beside the first; the reference stays
    ledgers.write([Result("c-1", entry(device=INTEL))])
    r = ledger.read(tmp_path / "c-1.json")
    assert len(r.entries) == 2 and r.reference == {"cpu": entry().key}


def test_replication_counts_independent_seed_sets_and_environments_with_numbers_of_their_own():
    replication = across.replication
    one = replication(record(entry()), "cpu")
    assert one.word == across.UNREPLICATED and (one.environments, one.seed_sets) == (1, 1)
    # another CPU kind giving the same values bit for bit: the same numbers, one environment
    same = replication(record(entry(), entry(device=INTEL)), "cpu")
    assert same.word == across.UNREPLICATED and (same.environments, same.seed_sets) == (1, 1)
    other = replication(record(entry(), entry((0.92, 0.9101, 0.93), device=INTEL)), "cpu")
    assert other.word == across.REPRODUCED and (other.environments, other.seed_sets) == (2, 1)
    fresh = replication(record(entry(), entry((0.93, 0.92, 0.94), seeds=[3, 4, 5])), "cpu")
    assert fresh.word == across.REPLICATED and (fresh.environments, fresh.seed_sets) == (1, 2)
    fragile = replication(record(entry(), entry((0.92, 0.7, 0.9), device=INTEL)), "cpu")
    assert fragile.word == across.FRAGILE
    assert fragile.line() == "fragile (1 independent seed set, 2 numeric environments): " \
                             "supported (cpu (AVX2, AMD), seeds 0+), inconclusive " \
                             "(cpu (AVX512, Intel), seeds 0+)"
    contra = replication(record(entry(), entry((0.1, 0.11, 0.12), seeds=[3, 4, 5])),
                                "cpu")
    assert contra.word == across.CONTRADICTED and contra.seed_sets == 2
    opened = replication(record(entry((0.92, 0.7, 0.9)), entry((0.9, 0.7, 0.92),
                                                                       seeds=[3, 4, 5])), "cpu")
    assert opened.word == across.OPEN and opened.seed_sets == 2
    assert replication(record(entry()), "paper") is None


def test_replication_counts_only_the_entries_of_the_rule_and_settings_in_force():
    """An entry of a rule since amended, or of other run settings than the reference's, says
    what was measured then: it neither replicates nor makes fragile the verdict that stands now.
    The code that made an entry is provenance: it counts whatever code made it."""
    replication = across.replication
    now = entry()
    other_code = entry((0.93, 0.92, 0.94), seeds=[3, 4, 5], code="old")
    assert replication(record(now, other_code), "cpu").word == across.REPLICATED
    longer, _ = ledger.run_settings([SMALL.override(**{"train.steps": 12})])
    other_settings = entry((0.93, 0.92, 0.94), seeds=[3, 4, 5], settings=longer)
    assert replication(record(now, other_settings), "cpu").word == across.UNREPLICATED
    old_rule = entry((0.92, 0.7, 0.9), device=INTEL, alpha=verdict.FIRST_ALPHA)
    r = ledger.recorded(record(old_rule), now, amend="the level")
    assert replication(r, "cpu").verdicts == {"cpu (AVX2, AMD), seeds 0+": "supported"}
    both = ledger.recorded(r, entry((0.93, 0.92, 0.94), seeds=[3, 4, 5]))
    assert replication(both, "cpu").word == across.REPLICATED
    assert replication(record(old_rule), "cpu").word == across.OPEN


@pytest.mark.parametrize("sets,independent", [
    ([[0, 1, 2]], 1), ([[0, 1, 2], [0, 1, 2]], 1), ([[0, 1, 2], [3, 4, 5]], 2),
    ([[0, 1, 2], [3, 4, 5], list(range(8))], 2), ([list(range(8)), [3, 4, 5], [0, 1, 2]], 2),
    ([[0, 1, 2], [2, 3, 4], [5, 6, 7]], 2), ([[0, 1], [2, 3], [4, 5], [1, 2, 3, 4]], 3),
    ([list(range(8)), [1, 2], [3, 4]], 2), ([], 0)])
def test_independent_seed_sets_are_the_most_that_share_no_seed(sets, independent):
    assert across.independent_seed_sets(sets) == independent


def small_records(tmp_path):
    for cid, es in {"c-1": [entry(), entry(device=INTEL)],
                    "c-2": [entry((0.1, 0.11, 0.12)), entry(device=INTEL)],
                    "c-only-a": [entry()]}.items():
        ledger.write(tmp_path / f"{cid}.json", record(*es, claim=cid))
    return tmp_path


def test_compare_counts_agreement_and_decisive_flips(tmp_path):
    recs = ledger.records(small_records(tmp_path))
    header, rows, line = report.compare(recs, "cpu")
    assert header == ["claim", "cpu (AVX2, AMD), seeds 0+: verdict", "mean [CI] (level)", "seeds",
                      "cpu (AVX512, Intel), seeds 0+: verdict", "mean [CI] (level)", "seeds"]
    assert rows[0] == ["c-1", "supported", "0.92 [0.89, 0.95] (96.5%)", "0-2",
                       "supported", "0.92 [0.89, 0.95] (96.5%)", "0-2"]
    older = ledger.Record("c-9", {(e := entry(alpha=verdict.FIRST_ALPHA)).key: e},
                           {"cpu": e.key}, e.full_rule)  # decided before the skew correction
    assert report.compare({"c-9": older}, "cpu")[1][0][2].endswith(" (95%)")
    assert rows[-1][4:] == ["-", "", ""]
    assert line == "1 of 2 agree; 1 decisive flips (c-2); 1 claims not in every column"
    with pytest.raises(ledger.LedgerError, match="no entries of the cpu tier under nope, nah; "
                                                  "the columns there: cpu .*, seeds 0\\+; cpu "):
        report.compare(recs, "cpu", ["nope", "nah"])
    # a claim with no entry of the tier is left out, not the end of the table
    recs = {"c-0": record(entry(tier="paper"), claim="c-0"), **recs,
            "c-3": record(entry((0.1, 0.11, 0.12)), entry(device=INTEL), claim="c-3")}
    header, rows, line = report.compare(recs, "cpu")
    assert [r[0] for r in rows] == ["c-1", "c-2", "c-3", "c-only-a"]
    assert line == "1 of 3 agree; 2 decisive flips (c-2, c-3); 1 claims not in every column"


def test_columns_come_most_used_first_a_reference_counting_twice():
    other = "cpu (DEFAULT, Intel)"
    recs = {"c-1": record(entry(), claim="c-1"),  # AVX2 once, as the reference: 2
            **{f"c-{i}": record(entry(device=other), entry(device=INTEL), claim=f"c-{i}")
               for i in (2, 3, 4)}}  # DEFAULT three times as the reference, Intel three times
    assert report.columns(recs, "cpu") == [f"{other}, seeds 0+", f"{INTEL}, seeds 0+",
                                           f"{AVX2}, seeds 0+"]


def test_a_text_table_pads_each_column_to_its_widest_cell():
    assert report.as_text(["claim", "v"], [["c-1", "supported"], ["c-22", "x"]]) == \
        "claim  v\n-----  ---------\nc-1    supported\nc-22   x"
    assert report.as_text(["a", "bb"], [["abc", "1"]]) == "a    bb\n---  --\nabc  1"
    assert report.as_text(["a", "bb"], []) == "a  bb\n-  --"


def test_compare_command_prints_the_table_and_markdown(tmp_path, capsys):
    folder = str(small_records(tmp_path))
    assert main(["compare", "--ledger", folder]) == 0
    out = capsys.readouterr().out
    assert "c-only-a" in out and out.rstrip().endswith("1 claims not in every column")
    assert main(["compare", "--ledger", folder, "--markdown", "cpu (AVX2, AMD), seeds 0+"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("| claim | cpu (AVX2, AMD), seeds 0+: verdict |")
    assert "| `c-2` | REFUTED |" in md
    assert main(["compare", "--ledger", folder, "nope"]) == 2
    assert "no entries of the cpu tier under nope" in capsys.readouterr().err


def test_tables_write_the_page_and_its_figure_and_check_it(tmp_path, capsys):
    folder = small_records(tmp_path / "ledger")
    out = tmp_path / "verdicts.md"
    common = ["tables", "--ledger", str(folder), "--out", str(out)]
    assert main([*common, "--check"]) == 1
    assert "verdicts.md is stale: run python -m normsys tables" in capsys.readouterr().err
    pages = report.docs(folder)
    assert main(common) == 0 and out.read_text() == pages["verdicts.md"]
    assert (tmp_path / "diagnostics.md").read_text() == pages["diagnostics.md"]
    assert (tmp_path / "verdicts.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main([*common, "--check"]) == 0
    (tmp_path / "diagnostics.md").write_text("edited by hand")
    assert main([*common, "--check"]) == 1
    assert "diagnostics.md is stale: run python -m normsys tables" in capsys.readouterr().err
    page = out.read_text()
    assert "![Every claim's interval against its threshold](verdicts.png)" in page
    assert "| `c-only-a` |" in page
    assert "## What CI on another CPU detects" in pages["diagnostics.md"]
    assert main(["tables", "--ledger", str(tmp_path / "none")]) == 2


def test_the_page_numbers_a_claims_amendments_and_tells_each_below(tmp_path):
    r = ledger.recorded(record(entry()), entry(rule=">= 0.81", device=INTEL), amend="why not")
    ledger.write(tmp_path / "c-1.json", r)
    page = report.docs(tmp_path)["verdicts.md"]
    date = r.amendments[0].date
    assert "| `c-1` | `kappa >= 0.81 (1.75% a side)` |  | supported 0.92 [0.89, 0.95] |" \
        in page
    assert page.split("\n| `c-1` |")[1].split("\n")[0].endswith(" | 1 |")
    assert f"1. {date}, 1 claim (`c-1` was `kappa >= 0.8 (1.75% a side)`): why not" in page
    twice = ledger.recorded(r, entry(rule=">= 0.82", device="cpu (DEFAULT, Intel)"),
                             amend="and again")
    ledger.write(tmp_path / "c-1.json", twice)
    page = report.docs(tmp_path)["verdicts.md"]
    assert page.split("\n| `c-1` |")[1].split("\n")[0].endswith(" | 1, 2 |")
    assert f"2. {date}, 1 claim (`c-1` was `kappa >= 0.81 (1.75% a side)`): and again" in page


def test_the_glance_table_marks_a_tier_without_entries_or_without_a_reference():
    recs = {"c-1": record(entry(), claim="c-1"),  # cpu only
            "c-2": record(entry(seeds=[3, 4, 5]), claim="c-2"),  # no reference: later seeds
            "c-3": record(entry(tier="paper", device="NVIDIA H200"), claim="c-3")}
    recs["c-4"] = record(entry(code="old"), claim="c-4")  # made by other training code
    roles = {"c-1": "test", "c-2": "regression"}
    page = report.glance_section(recs, ["cpu", "paper"], roles)
    table = page.split("\n")
    rule = "`kappa >= 0.8 (1.75% a side)`"
    once = "unreplicated (1 independent seed set, 1 numeric environment)"
    assert f"| `c-1` | {rule} | test | supported 0.92 [0.89, 0.95] | {once} | - |  |  |" \
        in table
    assert f"| `c-2` | {rule} | regression | - | unrecorded: no entry on the claim's own seeds " \
           f"(1 on others) | - |  |  |" in table
    assert f"| `c-3` | {rule} |  | - |  | supported 0.92 [0.89, 0.95] | {once} |  |" in table
    # the usual reference is told once; a reference made elsewhere names where in its cell
    assert "the cpu tier's references were made on cpu (AVX2, AMD), seeds 0+, code c0de; the " \
           "paper tier's references were made on NVIDIA H200, seeds 0+, code c0de" in \
           " ".join(table)
    assert f"| `c-4` | {rule} |  | supported 0.92 [0.89, 0.95] (cpu (AVX2, AMD), seeds 0+, " \
           f"code old) | {once} | - |  |  |" in table
    assert "Replication: cpu: 1 unrecorded, 2 unreplicated; paper: 1 unreplicated." in table
    # an identity is listed with its role and left out of the counts
    table = report.glance_section(recs, ["cpu", "paper"], {**roles, "c-1": "identity"})
    assert f"| `c-1` | {rule} | identity | supported 0.92 [0.89, 0.95] | {once} | - |  |  |" \
        in table.split("\n")
    assert "cpu: 1 unrecorded, 1 unreplicated; paper: 1 unreplicated (the 1 identities left " \
           "out: c-1)." in table


def test_a_reference_of_an_earlier_rule_shows_its_verdict_and_what_the_rule_in_force_makes_of_it():
    """Every entry of a tier decided before an amendment: the reference's verdict stands on the
    page with its level, and the cell says what the rule in force decides of its values at the
    look they stopped at, the same or otherwise."""
    values = (0.85, 0.9, 0.95)  # 95% [0.776, 1.024], 96.5% [0.754, 1.046]
    kept = entry(values, "> 0.7", tier="paper", device="NVIDIA H200", alpha=verdict.FIRST_ALPHA)
    moved = entry(values, "> 0.77", tier="paper", device="NVIDIA H200", alpha=verdict.FIRST_ALPHA)
    amend = entry(device=INTEL)  # the amendment, recorded at the CPU tier
    recs = {cid: ledger.recorded(record(e, claim=cid), replace(amend, rule=e.rule), amend="level")
            for cid, e in (("c-1", kept), ("c-2", moved))}
    table = report.glance_section(recs, ["cpu", "paper"]).split("\n")
    row = next(line for line in table if line.startswith("| `c-1`"))
    assert "| supported 0.9 [0.7758, 1.024] (95%) | earlier rule: the rule in force decides " \
           "these values supported too, at 3 seeds (96.5%) |" in row
    row = next(line for line in table if line.startswith("| `c-2`"))
    assert "| supported 0.9 [0.7758, 1.024] (95%) | earlier rule: **the rule in force decides " \
           "these values inconclusive**, at 3 seeds (96.5%) |" in row
    assert "paper: 2 earlier rule" in "\n".join(table)


def test_no_recorded_paper_entry_reads_unrecorded_on_the_verdict_page():
    page = (ROOT / "docs" / "verdicts.md").read_text()
    recs = report.records(COMMITTED)
    with_paper = [cid for cid, r in recs.items() if r.reference.get("paper")]
    assert len(with_paper) >= 40
    table = page.split("## Every claim")[1].split("\n## ")[0]  # the first table on the page
    for cid in with_paper:
        row = next(line for line in table.split("\n") if line.startswith(f"| `{cid}` |"))
        paper = row.split(" | ")[5:7]
        assert paper[0] != "-" and "unrecorded" not in " ".join(paper), cid


def test_the_detection_table_lists_each_claim_with_a_reference_and_says_where_one_environment_spreads():
    recs = {"c-0": record(entry(seeds=[3, 4, 5]), claim="c-0"),  # no reference: not listed
            "c-1": record(entry((0.5, 0.6, 0.7), "> 0.1"), claim="c-1"),
            "c-2": record(entry((0.5, 0.6, 0.7), "> 0.1"),
                          entry((0.5, 0.61, 0.7), "> 0.1", device=INTEL), claim="c-2")}
    header, rows = report.detection_table(report.detections(recs, "cpu"))
    assert [r[0] for r in rows] == ["c-1", "c-2"]
    assert rows[0][1] == "0.1 (2), seeds' own: one environment"
    assert rows[1][1] == f"{verdict.num(across.noise(recs['c-2'], 'cpu').sd)} (3)"


def test_the_page_names_the_claims_blind_off_their_recorded_kinds():
    """A claim whose kernels move its values as much as its seeds do (detected shift a half
    interval or more) is named blind; one whose kernels agree to a rounding is not."""
    recs = {"c-1": record(entry((0.5, 0.6, 0.7), "> 0.1"),
                          entry((0.5, 0.6000001, 0.7), "> 0.1", device=INTEL), claim="c-1"),
            "c-2": record(entry((0.5, 0.6, 0.7), "> 0.1"),
                          entry((0.6, 0.5, 0.75), "> 0.1", device=INTEL), claim="c-2")}
    found = report.detections(recs, "cpu")
    _, rows = report.detection_table(found)
    assert float(rows[0][-1]) < 1 <= float(rows[1][-1])
    assert [d.blind for d in found] == [False, True]
    line = report.blind_line(found)
    assert line.startswith("**Blind off their recorded kinds: 1 of 2 claims**")
    assert "`c-2`" in line and "`c-1`" not in line
    alone = report.blind_line(found[:1])
    assert "0 of 1 claims**" in alone and ": none." in alone
    flat = [report.Detection("c-3", 0.0, 9, True, 1e-12, 1e-12, 0.0),  # intervals of no width
            report.Detection("c-4", math.nan, 0, False, math.inf, math.inf, 0.0)]
    assert "1 of 2 claims**" in report.blind_line(flat) and "`c-4`" in report.blind_line(flat)
    assert report.detection_table(flat)[1][0][-1] == "-"


def test_scaled_puts_every_threshold_at_zero_with_the_claimed_side_right():
    above = entry((0.9, 1.0, 1.1), "> 0.5")
    mid, lo, hi = report.scaled(above)
    assert mid == pytest.approx(1.0) and lo < mid < hi
    below = entry((0.2, 0.3, 0.25), "< 0.5")
    assert report.scaled(below)[0] == pytest.approx(0.5)
    band = entry((0.0, 0.01, -0.01), "within (-0.1, 0.1)")
    mid, lo, hi = report.scaled(band)
    assert mid == pytest.approx(1.0) and hi == 1.0 and 0 < lo < 1
    zero = entry((0.2, 0.3, 0.25), "> 0")
    assert report.scaled(zero)[0] == pytest.approx(0.25)
    # the interval's ends on the same scale, the lower end first whichever the side
    assert report.scaled(above)[1:] == pytest.approx(((above.low - 0.5) / 0.5,
                                                      (above.high - 0.5) / 0.5))
    assert report.scaled(below)[1:] == pytest.approx(((0.5 - below.high) / 0.5,
                                                      (0.5 - below.low) / 0.5))
    assert report.scaled(zero)[1:] == pytest.approx((zero.low, zero.high))
    assert report.scaled(band)[1] == pytest.approx(min(1 - abs(band.low) / 0.1,
                                                       1 - abs(band.high) / 0.1))
    # a band's interval that misses its centre: its best point is its end nearer the centre
    # an inclusive side is scaled as its strict twin; a band off zero about its own centre
    assert report.scaled(entry((0.9, 1.0, 1.1), ">= 0.5")) == report.scaled(above)
    shifted = entry((0.1, 0.11, 0.12), "within (0, 0.2)")
    assert report.scaled(shifted)[0] == pytest.approx(1 - 0.01 / 0.1)
    off = entry((0.05, 0.06, 0.07), "within (-0.1, 0.1)")
    assert report.scaled(off) == pytest.approx((1 - 0.06 / 0.1, 1 - off.high / 0.1,
                                                1 - off.low / 0.1))


def test_the_figure_draws_each_entrys_scaled_interval_in_its_verdicts_colour(tmp_path):
    """One panel per tier with entries; each entry's bar and mean at its claim's row, offset by
    its column (none where a tier has one column), in its verdict's colour."""
    folder = small_records(tmp_path / "ledger")
    ledger.write(folder / "c-only-b.json", record(entry(device=INTEL), claim="c-only-b"))
    ledger.write(folder / "c-paper.json",
                  record(entry((0.5, 0.6, 0.7), "> 0.9", tier="paper", device="NVIDIA H200"),
                         claim="c-paper"))
    recs = ledger.records(folder)
    fig = report.figure(recs, tmp_path / "verdicts.png")
    ids = sorted(recs)
    assert len(fig.axes) == 2  # cpu, then paper
    for ax, tier in zip(fig.axes, ("cpu", "paper"), strict=True):
        cols = report.columns(recs, tier)
        offsets = np.linspace(-0.3, 0.3, len(cols)) if len(cols) > 1 else [0.0]
        want = set()
        for i, cid in enumerate(ids):
            for e in recs[cid].of(tier):
                mid, lo, hi = report.scaled(e)
                y = i + offsets[cols.index(ledger.label(e))]
                want.add(((lo, hi), (y, y), report.COLOURS[e.verdict]))
                want.add(((mid,), (y,), report.COLOURS[e.verdict]))
        drawn = {(tuple(line.get_xdata()), tuple(line.get_ydata()), line.get_color())
                 for line in ax.lines if line.get_color() != "black"}
        assert drawn == want, tier
        assert ax.get_xscale() == "symlog"
        (zero,) = [line for line in ax.lines if line.get_color() == "black"]
        assert tuple(zero.get_xdata()) == (0, 0)
    assert len(fig.axes[0].lines) == 2 * 6 + 1 and len(fig.axes[1].lines) == 2 + 1
    assert fig.axes[0].yaxis_inverted()
    assert [t.get_text() for t in fig.axes[0].get_yticklabels()] == ids


def test_stale_records_are_those_of_claims_no_longer_defined(tmp_path):
    small_records(tmp_path)
    assert ledger.stale(tmp_path, {"c-1", "c-2"}) == ["c-only-a"]
    assert ledger.stale(tmp_path, {"c-1", "c-2", "c-only-a", "c-3"}) == []


def test_run_settings_name_every_field_once_with_the_values_the_runs_take():
    norms = [SMALL.override(**{"model.norm": n, "train.seed": s})
             for n in ("rmsnorm", "layernorm") for s in (0, 1, 2)]
    settings, fingerprint = ledger.run_settings(norms)
    assert settings["model.norm"] == "layernorm | rmsnorm"  # distinct, sorted
    assert settings["train.steps"] == "3" and settings["model.d"] == "16"
    assert settings["data.batch_shape"] == "4,5,16" and settings["train.probe"] == ""
    assert "train.seed" not in settings  # the seeds are the entry's own field
    assert set(settings) == set(SMALL.flat()) - {"train.seed"}
    assert list(settings) == sorted(settings)
    assert ledger.run_settings([norms[5], norms[1]])[1] == fingerprint  # layernorm s2, rmsnorm s1
    assert ledger.run_settings([SMALL.override(**{"model.norm": "layernorm"})])[1] != fingerprint
    assert len(fingerprint) == 16 and ledger.run_settings([])[0] == {}


def test_settings_that_pair_otherwise_fail_by_their_fingerprint():
    pairs = lambda *p: ledger.run_settings(  # noqa: E731
        [SMALL.override(**{"model.norm": n, "train.steps": t}) for n, t in p])
    before, after = pairs(("layernorm", 3), ("rmsnorm", 4)), pairs(("layernorm", 4), ("rmsnorm", 3))
    assert before[0] == after[0] and before[1] != after[1]
    judged = across.judge(record(entry(settings=before[0], settings_fingerprint=before[1])),
                          entry(settings=after[0], settings_fingerprint=after[1]))
    assert judged.fails and (f"settings: the runs pair the same values otherwise (run configs "
                             f"recorded {before[1]}, now {after[1]})") in judged.message
    # an entry that predates recorded settings is compared on the rest
    older = record(entry(settings={}, settings_fingerprint=""))
    assert across.judge(older, entry()).status == "same"


def test_setting_changes_list_the_first_few_and_count_the_rest():
    recorded = {f"train.f{i}": "1" for i in range(6)}
    now = {**{f"train.f{i}": "2" for i in range(6)}, "train.new": "x"}
    del now["train.f5"]
    assert ledger.setting_changes(recorded, now) == [
        "train.f0 1 -> 2", "train.f1 1 -> 2", "train.f2 1 -> 2", "train.f3 1 -> 2", "3 more"]
    assert ledger.setting_changes(recorded, now, most=9)[-2:] == ["train.f5 1 -> absent",
                                                                  "train.new absent -> x"]
    assert len(ledger.setting_changes(recorded, now, most=7)) == 7  # all seven, none "more"


def test_seed_spans_and_numbers():
    assert verdict.seed_span([0, 1, 2]) == "0-2" and verdict.seed_span([3]) == "3"
    assert verdict.seed_span([4, 5]) == "4-5"
    assert verdict.seed_span([0, 2, 5]) == "0,2,5" and verdict.seed_span([]) == "-"
    assert verdict.num(float("nan")) == "nan" and verdict.num(None) == "nan"
    assert verdict.num(0.123456) == "0.1235"


def test_under_the_same_plan_the_look_a_claim_decided_at_is_no_change():
    values = [1.0, 1.01, 0.99, 1.0, 1.01]
    early = entry(values[:3], "> 0.99", plan=[3, 5, 8])
    later = entry(values, "> 0.99", plan=[3, 5, 8])
    assert ledger.changes(early, later) == []
    assert ledger.changes(entry(values[:3], "> 0.99"), later) == ["seeds: recorded 0-2, now 0-4"]


def test_entries_of_unknown_code_stand_as_any_other():
    """Moved entries carry no digest: their values are compared like any entry's, and recording
    the same values again stamps the code in force on them."""
    old_a, old_b = entry(code=""), entry((0.93, 0.9, 0.94), device=INTEL, code="")
    r = record(old_a, old_b)
    assert across.judge(r, entry(code="now")).status == "same"
    assert across.judge(r, entry((0.93, 0.9, 0.94), device=INTEL, code="now")).status == "same"
    r = ledger.recorded(r, entry(code="now"))  # recorded again here, the same values
    assert r.reference["cpu"] == entry().key and r.entries[entry().key].code == "now"
    assert across.judge(r, entry((0.9301, 0.9, 0.94), device=INTEL, code="now")).fails

def test_an_entry_read_takes_its_seed_count_and_the_level_of_its_look_from_itself(tmp_path):
    e = entry((0.5, 0.6, 0.7, 0.65, 0.55), ">= 0.55", plan=[3, 5])
    read = ledger.Entry.of_entry(e.entry)
    assert read.n == 5 and read.confidence == verdict.levels((3, 5))[1] and read == e
    planless = ledger.Entry.of_entry({**e.entry, "plan": []})  # one look: the protocol's level
    assert planless.confidence == verdict.LEVEL and planless.n == 5
    off_plan = ledger.Entry.of_entry({**e.entry, "plan": [3, 8]})  # 5 seeds: no look of it
    assert math.isnan(off_plan.confidence)
    path = tmp_path / "c-1.json"
    ledger.write(path, record(e))
    body = json.loads(path.read_text())  # the entry, with its key, as a plan that took 3 and 8
    moved = {**body["entries"].pop(e.key), "plan": [3, 8]}
    body["entries"][off_plan.key] = moved
    body["reference"]["cpu"] = off_plan.key
    path.write_text(json.dumps(body))
    with pytest.raises(ledger.LedgerError, match=r"5 seeds, a look its plan \[3, 8\] does not take"):
        ledger.read(path)


# ----------------------------------------------------------------------------- what a reader is told


def test_a_record_that_is_not_an_object_names_what_it_holds_and_how_to_restore_it(tmp_path):
    path = tmp_path / "c-1.json"
    path.write_text("[1, 2]")
    with pytest.raises(ledger.LedgerError) as err:
        ledger.read(path)
    assert str(err.value) == (
        f"record {path} cannot be read (TypeError: a JSON list, not an object); restore it from "
        f"git (git checkout -- {path}), or delete it and record the claim again with `pytest "
        f"claims --claims-update` (every environment's entries go with it)")


def test_an_entry_lacking_fields_names_them_all_and_one_that_does_not_follow_names_the_file(
        tmp_path):
    path = tmp_path / "c-1.json"
    ledger.write(path, record(entry()))
    body = json.loads(path.read_text())
    (k, e), = body["entries"].items()
    short = {**body, "entries": {k: {f: v for f, v in e.items() if f not in ("mean", "values")}}}
    path.write_text(json.dumps(short))
    with pytest.raises(ledger.LedgerError) as err:
        ledger.read(path)
    assert str(err.value) == f"record {path}: entry {k!r} lacks mean, values; {ledger.again(path)}"
    path.write_text(json.dumps({**body, "entries": {k: {**e, "verdict": "refuted"}}}))
    with pytest.raises(ledger.LedgerError, match=re.escape(f"record {path}: entry {k!r} of c-1 "
                                                            f"does not follow from itself")):
        ledger.read(path)


def test_across_the_messages_name_the_shift_its_bound_and_a_flip():
    r = two_environments()
    ref = r.entries[r.reference["cpu"]]
    bound = across.noise(r, "cpu").bound(3)
    head = f"reference ({ref.environment}): {ref.line()}"
    update = "review, then record it: pytest claims -k c-1 --claims-update"

    def shift_of(fresh):
        return math.fsum(b - a for a, b in zip(ref.values, fresh.values, strict=True)) / 3

    near = entry((0.901, 0.921, 0.939), "> 0.5", device=AVX2)
    assert across.judge(r, near).message == \
        f"{head}; moved {verdict.num(shift_of(near))} on average, within its bound " \
        f"({verdict.num(bound)})"
    far = entry(tuple(v + 1.2 * bound for v in (0.90, 0.92, 0.94)), "> 0.5", device=AVX2)
    now = f"now: supported {verdict.interval(far.mean, far.low, far.high)}"
    assert across.judge(r, far).message == \
        f"{head}; {now}; the per-seed values moved by {verdict.num(shift_of(far))} on average " \
        f"over 3 seeds, beyond this claim's bound across environments ({verdict.num(bound)}); " \
        f"{update}"
    base = record(entry((0.7, 0.72, 0.74), "> 0.45", device="cpu (AVX512, AMD)"))
    flip = entry((0.2, 0.21, 0.22), "> 0.45", device=AVX2)
    old = base.entries[base.reference["cpu"]]
    assert across.judge(base, flip).message == \
        f"reference ({old.environment}): {old.line()}; now: refuted " \
        f"{verdict.interval(flip.mean, flip.low, flip.high)}; a decisive flip; {update}"


def test_a_shift_exactly_on_the_bound_is_within_it(monkeypatch):
    r = two_environments()
    ref = r.entries[r.reference["cpu"]]
    fresh = entry((0.91, 0.93, 0.95), "> 0.5", device=AVX2)
    shift = math.fsum(b - a for a, b in zip(ref.values, fresh.values, strict=True)) / 3
    monkeypatch.setattr(across, "noise", lambda record, tier: across.Noise(0.0, 1, 1.0, True))
    monkeypatch.setattr(across.Noise, "bound", lambda self, n: abs(shift))
    assert across.judge(r, fresh).status == "across"
    monkeypatch.setattr(across.Noise, "bound", lambda self, n: abs(shift) * (1 - 1e-12))
    assert across.judge(r, fresh).status == "changed"


def test_a_reference_that_took_a_later_look_is_compared_over_the_seeds_both_have():
    """Another environment decided at 5 seeds of the plan 3, 5, 8 (open at 3); this one at 3:
    the mean shift is over seeds 0-2."""
    ref = entry((0.8, 0.9, 0.7, 0.8, 0.8), "> 0.5", device="cpu (AVX512, AMD)", plan=[3, 5, 8])
    assert ref.verdict == "supported" and ledger.follows(ref) == ""
    fresh = entry((0.8, 0.8001, 0.7999), "> 0.5", device=AVX2, plan=[3, 5, 8])
    assert fresh.verdict == "supported"
    judged = across.judge(record(ref), fresh)
    shift = ((0.8 - 0.8) + (0.8001 - 0.9) + (0.7999 - 0.7)) / 3
    assert judged.status == "across" and f"moved {verdict.num(shift)} on average" in judged.message


def test_a_sessions_records_judge_without_writing_amending_or_failing_unless_asked(tmp_path):
    ledgers = Ledgers(tmp_path)
    assert (ledgers.update, ledgers.strict, ledgers.amend) == (False, False, "")
    assert ledgers.judge("c-1", entry()).status == "new"
    ledger.write(tmp_path / "c-1.json", record(entry()))
    writing = Ledgers(tmp_path, update=True)
    assert writing.judge("c-1", entry(device=INTEL)) == across.Judgement(
        "updated", f"recorded from this run in {tmp_path / 'c-1.json'}")
    changed = writing.judge("c-1", entry(rule=">= 0.7", device=INTEL))  # no reason given
    with pytest.raises(ledger.LedgerError) as err:
        ledger.recorded(writing.record("c-1"), entry(rule=">= 0.7", device=INTEL))
    assert changed == across.Judgement("changed", str(err.value))


def test_the_entry_a_measurement_is_compared_with_is_its_own_else_the_current_reference(tmp_path):
    there = entry(device=INTEL)
    ledger.write(tmp_path / "c-1.json", record(there))
    ledgers = Ledgers(tmp_path)
    here = entry().key
    assert ledgers.recorded("c-1", "cpu", here, 0) == there
    assert ledgers.recorded("c-1", "cpu", there.key, 0) == there  # its own
    assert ledgers.recorded("c-1", "cpu", here, 3) is None  # on other seeds
    assert ledgers.recorded("c-1", "paper", here, 0) is None


def test_an_unreadable_record_says_nothing_of_its_claim(tmp_path):
    (tmp_path / "c-bad.json").write_text("{not json")
    said = Ledgers(tmp_path).said("c-bad")
    assert said == ledger.Record("c-bad") and said.claim == "c-bad"


def test_an_all_of_entrys_earlier_looks_are_decided_at_its_familys_level():
    """Plan 3, 5 under Holm: at 3 seeds the deciding comparison is refuted at one comparison's
    level but open at its family's, so the entry rightly took the look of 5."""
    values = [2.26, 2.36, 2.46, 2.36, 2.36]
    first = verdict.levels((3, 5))[0]
    rule = ledger.parse_rule("all of 2 (Holm): < 1.5")
    assert verdict.decide(rule, values[:3], first).verdict == "refuted"
    assert verdict.decide(rule, values[:3], first, family=2).verdict == "inconclusive"
    e = entry(values, "all of 2 (Holm): < 1.5", plan=[3, 5])
    assert e.verdict == "refuted" and ledger.follows(e) == ""


def test_resampled_false_alarms_of_a_claim_without_differences_are_drawn_normal(monkeypatch):
    """A claim recorded on one environment has no differences to resample: its mean difference
    is drawn normal with its seeds' spread (sd * sqrt(2 / n)). Under a bound of 1.96 of those,
    5% of runs alarm."""
    r = record(entry((0.5, 0.6, 0.7), "> 0.1"))
    assert report.differences(r, "cpu") == [] and not across.noise(r, "cpu").measured
    monkeypatch.setattr(across.Noise, "bound",
                        lambda self, n: 1.959964 * self.sd * math.sqrt(2 / n))
    assert report.false_alarm_resampled({"c-1": r}, "cpu") == pytest.approx(0.05, abs=0.006)


def test_resampled_differences_each_take_a_sign_of_their_own(monkeypatch):
    """Every recorded difference 0.1, three seeds, a bound between 0.1 / 3 and 0.1: a run alarms
    only when its three resampled differences share a sign, 2 runs in 8."""
    r = record(entry((0.5, 0.6, 0.7), "> 0.1"),
               entry((0.6, 0.7, 0.8), "> 0.1", device=INTEL))
    assert report.differences(r, "cpu") == pytest.approx([0.1, 0.1, 0.1])
    monkeypatch.setattr(across.Noise, "bound", lambda self, n: 0.05)
    assert report.false_alarm_resampled({"c-1": r}, "cpu") == pytest.approx(0.25, abs=0.01)


def test_the_page_states_the_cpu_tiers_resampled_false_alarm_rate(tmp_path):
    r = laid_out(entry((0.5,), "> 0.1"),
                 entry([0.5] * 100, "> 0.1", device=INTEL),
                 entry([0.5] * 7 + [0.6] + [0.5] * 92, "> 0.1", device="cpu (DEFAULT, Intel)"))
    ledger.write(tmp_path / "c-1.json", r)
    rate = report.false_alarm_resampled({"c-1": r}, "cpu")
    assert rate > 0.005 and \
        f"{rate:.3%} with the differences resampled" in report.docs(tmp_path)["diagnostics.md"]


def test_an_old_entrys_earlier_looks_are_decided_at_its_own_alpha():
    """An entry of the 95% plan 3, 5 whose first 3 values decided at that plan's first look, yet
    it took 5: it does not follow, though the stricter first look of 1.75% a side would have
    left those 3 values open."""
    values = [1.02, 1.12, 1.22, 1.12, 1.12]
    rule = Rule("x", ">", 0.5)
    assert verdict.decide(rule, values[:3], verdict.levels((3, 5), 0.025)[0]).verdict == "supported"
    assert verdict.decide(rule, values[:3], verdict.levels((3, 5))[0]).verdict == "inconclusive"
    late = entry(values, "> 0.5", plan=[3, 5], alpha=verdict.FIRST_ALPHA)
    assert ledger.follows(late).endswith("its values decide at the look of 3 seeds, yet it took 5")


@pytest.mark.parametrize("rule,values,verdict_,distance", [
    ("> 0.5", (0.60, 0.62, 0.64), "supported", lambda e: e.low - 0.5),
    ("> 0.5", (0.30, 0.32, 0.34), "refuted", lambda e: 0.5 - e.high),
    ("< 0.5", (0.30, 0.32, 0.34), "supported", lambda e: 0.5 - e.high),
    ("<= 0.5", (0.60, 0.62, 0.64), "refuted", lambda e: e.low - 0.5),
    ("within (-0.1, 0.1)", (0.01, 0.02, 0.03), "supported", lambda e: 0.1 - e.high),
    ("within (-0.1, 0.1)", (-0.01, -0.02, -0.03), "supported", lambda e: e.low + 0.1),
    ("within (-0.1, 0.1)", (0.31, 0.32, 0.33), "refuted", lambda e: e.low - 0.1),
    ("within (-0.1, 0.1)", (-0.31, -0.32, -0.33), "refuted", lambda e: -0.1 - e.high),
    ("> 0.5", (0.1, 0.9, 0.5), "inconclusive", lambda e: 0.0)])
def test_reach_is_the_distance_from_the_deciding_interval_to_the_threshold(rule, values, verdict_,
                                                                           distance):
    e = entry(values, rule)
    assert e.verdict == verdict_
    assert across.reach(e) == pytest.approx(distance(e), abs=1e-12) and across.reach(e) >= 0
    # moved by less than its reach either way its values keep their verdict; by more, toward
    # the threshold, they lose it
    rule_ = ledger.parse_rule(rule)

    def moved(by: float) -> set[str]:
        return {verdict.decide(rule_, [v + sign * by for v in values]).verdict
                for sign in (1, -1)}

    if verdict_ != "inconclusive":
        assert moved(0.9999 * across.reach(e)) == {verdict_}
        assert "inconclusive" in moved(1.0001 * across.reach(e))


def test_a_holm_refutation_reaches_only_as_far_as_its_familys_wider_interval():
    e = entry((1.00, 0.94, 0.81), "all of 2 (Holm): > 2")
    assert e.verdict == "refuted"
    plain = 2 - e.high  # the one-comparison interval reaches further than the family's
    assert 0 < across.reach(e) < plain
    half = verdict.t_quantile(2, 1 - (1 - e.confidence) / 2) * np.std(e.values, ddof=1) / \
        math.sqrt(3)
    assert across.reach(e) == pytest.approx(2 - (e.mean + half))


def test_across_a_move_to_inconclusive_fails_where_the_bound_is_wider_than_the_reach():
    """A decisive reference whose bound across environments is wider than its interval's
    distance to the threshold cannot tell rounding from a bug that carries its verdict to
    inconclusive: such a move fails and asks for this environment's own entry; where the bound
    is narrower, the move is reported and passes."""
    near = record(entry((0.60, 0.62, 0.64), "> 0.5", device="cpu (AVX512, AMD)"))
    ref = near.entries[near.reference["cpu"]]
    bound = across.noise(near, "cpu").bound(3)
    assert ref.verdict == "supported" and bound > across.reach(ref)
    bugged = entry((0.55, 0.60, 0.62), "> 0.5", device=AVX2)  # within the bound, inconclusive
    assert bugged.verdict == "inconclusive"
    judged = across.judge(near, bugged)
    assert judged.fails and judged.status == "changed"
    assert f"within its bound ({verdict.num(bound)}), but that bound is wider than the " \
           f"reference's distance to the threshold ({verdict.num(across.reach(ref))})" \
        in judged.message and judged.message.endswith("pytest claims -k c-1 --claims-update")
    far = two_environments()  # noise 0.005 measured: a bound far inside the reach
    ref = far.entries[far.reference["cpu"]]
    spread = entry((0.50, 0.92, 1.34), "> 0.5", device=AVX2)  # the same mean, a wide interval
    assert spread.verdict == "inconclusive"
    assert across.noise(far, "cpu").bound(3) < across.reach(ref)
    assert across.judge(far, spread).status == across.MOVED
    back = record(entry((0.1, 0.9, 0.5), "> 0.45", device="cpu (AVX512, AMD)"))  # open: no reach
    assert across.judge(back, entry((0.1, 0.9, 0.52), "> 0.45", device=AVX2)).status == "across"


def test_a_configurations_values_are_raw_one_per_seed_over_its_entries():
    """A seed's value is read once (another environment's value of it is the same draw again),
    fresh seeds join their configuration, each part of an all-of rule is a configuration of its
    own, a NaN is no value, and an identity is no sample."""
    first = entry((0.5, 0.6, 0.9))
    again = entry((0.5000001, 0.6, 0.9), device=INTEL)  # the same seeds elsewhere
    fresh = entry((0.7, 0.8, float("nan")), seeds=[3, 4, 5])
    parted = replace(entry((0.1, 0.2, 0.4)), parts={"a": [0.1, 0.2, 0.4], "b": [1.0, 2.0, 4.0]})
    recs = {"c-1": laid_out(first, again, fresh), "c-2": laid_out(parted),
            "c-3": laid_out(entry((1.0, 2.0, 3.0)))}
    found = report.configurations(recs, identities=frozenset({"c-3"}))
    assert len(found) == 3 and not any(k.startswith("c-3") for k in found)
    own = next(v for k, v in found.items() if k.startswith("c-1"))
    assert own.tolist() == [0.5, 0.6, 0.9, 0.7, 0.8]  # not standardized, not twice, no NaN
    assert sorted(v.tolist() for k, v in found.items() if k.startswith("c-2")) == \
        [[0.1, 0.2, 0.4], [1.0, 2.0, 4.0]]


def drawn(skew: float, sizes: list[int], seed: int = 5) -> list[np.ndarray]:
    gen = np.random.default_rng(seed)
    return [3.0 + 0.1 * report.gamma_values(gen, skew, (n,)) for n in sizes]


SIZES = [5] * 44 + [6] * 107 + [8] * 20 + [10] * 36 + [13] * 2 + [21] * 9  # the records' own


def test_the_skew_check_fires_on_skewed_raw_values_and_not_on_normal_ones():
    """On configurations of the records' sizes: values of skewness 1.5 lie beyond what 0.35
    gives, normal values do not, and each estimate lies near the truth; the check's power rises
    with the skewness and fires at 0.75 at least half the time, so it measures. Read from each
    configuration's values standardized three at a time, as the page once read them, the same
    skewed values would not lie beyond: a triplet's skewness cannot pass 0.71."""
    skewed, normal = report.skew_check(drawn(1.5, SIZES)), report.skew_check(drawn(0.0, SIZES))
    assert skewed.fires and not normal.fires
    assert abs(skewed.estimate - 1.5) <= 0.3 and normal.estimate <= 0.3 <= skewed.upper
    power = list(normal.power.values())
    assert power == sorted(power) and power[0] < 0.05 and normal.measures
    assert abs(normal.power[verdict.SKEW_TOLERATED] - 0.05) < 0.025  # its critical value's 95%
    assert (skewed.configurations, skewed.values) == (len(SIZES), sum(SIZES))
    triplets = [np.concatenate([(t - t.mean()) / t.std(ddof=1) for t in np.split(x[:n], n // 3)])
                for x in drawn(1.5, SIZES) if (n := len(x) - len(x) % 3) >= 6]
    assert not report.skew_check(triplets).fires


def test_the_skew_words_say_what_the_check_can_and_cannot_tell():
    said = report.skew_words(report.skew_check(drawn(0.0, SIZES)))
    assert "does not lie beyond it" in said and "218 configurations" in said
    few = report.skew_check(drawn(0.0, SIZES[::2]))  # half the records: fires on 1.0, not 0.75
    assert not few.measures and few.power[1.0] > 0.5
    assert "The records cannot measure skew" in report.skew_words(few)
    assert "lies beyond it" in report.skew_words(report.skew_check(drawn(1.5, SIZES)))
    with pytest.raises(ValueError, match="no configuration holds 5 values"):
        report.skew_check([np.array([1.0, 2.0, 3.0])])


def test_the_multiplicity_line_counts_questions_and_what_chance_gives_at_the_threshold():
    before = entry(alpha=verdict.FIRST_ALPHA)  # decided under a rule since amended
    amended = ledger.Amendment("2026-11-28", before.full_rule, entry().full_rule, "the level")
    recs = {"c-1": record(entry(code="old")), "c-2": record(entry((0.5, 0.9, 0.7))),
            "c-3": ledger.Record("c-3", {before.key: before}, {"cpu": before.key},
                                 before.full_rule, [amended]),
            "c-4": record(entry(), entry((0.93, 0.92, 0.94), seeds=[3, 4, 5])),
            "c-4-masked": record(entry())}  # a variant: the question c-4 asks
    questions = {cid: cid.removesuffix("-masked") for cid in recs}
    assert report.multiplicity(recs, "cpu", questions=questions) == (
        "cpu: 3 questions decided under the rule in force (variants with their base), 2 decisive "
        "in every entry, 1 of them replicated. Were every effect exactly on its threshold, the "
        "reference entries would still give about 0.15 wrong-side decisive verdicts (3 x 2 x "
        "2.5%; 95% of the time 0 to 1), and the replicated ones about 0.0013 (each 2 x 2.5% to "
        "the power of its independent seed sets)")
    assert report.multiplicity(recs, "paper") == \
        "paper: no claim decided under the rule in force"
    assert report.multiplicity(recs, "cpu", frozenset({"c-2"}), questions).startswith(
        "cpu: 2 questions decided under the rule in force (variants with their base, the 1 "
        "identities left out), 2 decisive in every entry, 1 of them replicated")
    assert report.multiplicity({"c-3": recs["c-3"]}, "cpu") == \
        "cpu: no claim decided under the rule in force (1 under an earlier rule alone)"


@pytest.mark.parametrize("n,p", [(1, 0.05), (3, 0.05), (40, 0.05), (100, 0.05), (20, 0.5)])
def test_the_binomial_range_holds_the_central_95_percent(n, p):
    lo, hi = report.binomial_range(n, p)
    draws = np.random.default_rng(0).binomial(n, p, 400_000)
    assert (lo, hi) == tuple(int(q) for q in np.quantile(draws, [0.025, 0.975], method="inverted_cdf"))


def all_of_entry(parts: dict, device=AVX2, **changes) -> verdict.Verdict:
    """An all-of entry as a claim records it: decided on its parts, keeping them."""
    d = verdict.decide(ledger.parse_rule("> 2"), verdict.by_seed(parts), verdict.LEVEL)
    fields = {**entry(device=device).entry, "verdict": d.verdict, "rule": d.rule,
              "values": list(d.values), "mean": d.mean, "low": d.low, "high": d.high,
              "parts": parts, **changes}
    return ledger.Entry.of_entry(fields)


def test_an_all_of_entry_keeps_every_part_and_follows_from_them(tmp_path):
    parts = {"6 blocks": [1.03, 0.94, 0.81], "12 blocks": [1.2, 1.1, 1.3]}
    e = all_of_entry(parts)
    assert e.rule == "all of 2 (Holm): > 2" and e.values == (1.03, 0.94, 0.81)
    assert ledger.follows(e) == "" and e.entry["parts"] == parts
    ledger.write(tmp_path / "c-1.json", record(e))
    assert ledger.read(tmp_path / "c-1.json").entries[e.key].parts == parts
    swapped = replace(e, parts={"6 blocks": [1.2, 1.1, 1.3], "12 blocks": [1.2, 1.1, 1.3]})
    assert ledger.follows(swapped).startswith("its parts decide refuted on [1.2, 1.1, 1.3], "
                                               "but it records refuted on [1.03, 0.94, 0.81]")


def test_an_all_of_claims_noise_pairs_each_part_with_itself_whichever_decided():
    """Two environments a hair apart whose weakest comparison differs (one decided on 6 blocks,
    the other on 12): each part is compared with itself, so the bound is of the order of the
    rounding, not of the distance between the parts; without parts (older entries) the deciding
    values of different parts would be paired."""
    six, narrow = [1.0, 1.1, 1.2], [1.05, 1.1, 1.15]  # the narrower part moved to tie margins
    low = {name: verdict.decide(ledger.parse_rule("> 2"), v).low
           for name, v in (("six", six), ("narrow", narrow))}
    tied = [v + low["six"] - low["narrow"] for v in narrow]
    here = {"6 blocks": six, "12 blocks": [v + 1e-7 for v in tied]}
    there = {"6 blocks": six, "12 blocks": [v - 1e-7 for v in tied]}
    a, b = all_of_entry(here), all_of_entry(there, device=INTEL)
    assert a.values == tuple(six) and b.values == tuple(there["12 blocks"])  # others decided
    nz = across.noise(record(a, b), "cpu")
    assert nz.measured and nz.df == 6 and nz.sd < 2e-7
    moved = all_of_entry({"6 blocks": six, "12 blocks": [v + 0.5 for v in tied]},
                         device="cpu (DEFAULT, Intel)")
    n, shift = across.shift_of(a, moved)
    assert n == 3 and shift == pytest.approx(0.5 - 1e-7)  # the part that moved most
    assert across.judge(record(a, b), moved).fails


def test_an_all_of_entry_without_its_parts_pairs_only_with_the_part_it_matches():
    """Entries recorded before parts were kept hold the deciding comparison's values alone: one
    is paired with the part of a newer entry it matches within SAME_PART (here 1e-7 apart), and
    two of them that decided on different comparisons are not paired at all."""
    six, twelve = [1.0, 1.1, 1.2], [0.5, 0.7, 0.6]
    new = all_of_entry({"6 blocks": six, "12 blocks": twelve})
    assert new.values == tuple(twelve)
    old = replace(all_of_entry({"6 blocks": six, "12 blocks": [v + 1e-7 for v in twelve]},
                               device=INTEL), parts={})
    nz = across.noise(laid_out(new, old), "cpu")
    assert nz.measured and nz.df == 3 and nz.sd == pytest.approx(math.sqrt(2) / 2 * 1e-7)
    apart = replace(all_of_entry({"6 blocks": six, "12 blocks": [v + 1 for v in twelve]},
                                 device="cpu (DEFAULT, Intel)"), parts={})
    assert apart.values == tuple(six)  # decided on the other comparison
    assert not across.noise(laid_out(old, apart), "cpu").measured  # nothing paired: own spread
    plain = replace(old, rule="> 2")  # a rule of one comparison pairs by seed, as always
    assert across.values_by_environment([plain])[(plain.environment,
                                                  ledger.experiment(plain))] == \
        dict(enumerate(plain.values))


def test_leaving_one_environment_out_judges_each_entry_in_force_against_the_others():
    """Three kernel sets a rounding apart: every fold passes. One environment far off: its fold,
    and the folds judged against it, raise alarms beyond the bound. Entries of other run
    settings than the reference's, and a claim one environment records, make no fold."""
    emulated = "cpu (AVX2 emulated on AVX512, AMD)"
    close = record(entry((0.92, 0.91, 0.93)), entry((0.92, 0.91, 0.9300001), device=INTEL),
                   entry((0.9200002, 0.91, 0.93), device=emulated), claim="c-1")
    far = record(entry((0.92, 0.91, 0.93)), entry((0.92, 0.9100001, 0.93), device=INTEL),
                 entry((0.99, 0.98, 0.995), device=emulated), claim="c-2")
    alone = record(entry(), claim="c-3")
    longer, _ = ledger.run_settings([SMALL.override(**{"train.steps": 12})])
    older = laid_out(entry(), entry(device=INTEL, settings=longer))
    assert report.left_out({"c-1": close, "c-3": alone, "c-4": older}, "cpu") == (3, [])
    folds, alarms = report.left_out({"c-2": far}, "cpu")
    assert folds == 3 and alarms and all("beyond its bound" in a for a in alarms)
    assert any(a.startswith(f"`c-2` without {emulated}") for a in alarms)
    line = report.left_out_line({"c-1": close}, "cpu")
    assert "3 folds, 0 alarm(s)." in line


def test_the_differences_across_environments_come_in_an_order_of_their_own():
    """The simulations draw from each claim's differences in the order ``differences`` gives
    them: an all-of claim's seeds are keyed with their part's name, so an order taken from a set
    would follow the process's string hashing and the page would change from run to run."""
    seeds = [0, 1, 2]
    parts = {f"{n} blocks": [0.3 + n / 100 + s / 10 for s in seeds] for n in (6, 12, 24)}
    there = {p: [v + 1e-7 * (i + 1) for i, v in enumerate(vs)] for p, vs in parts.items()}
    r = record(entry((0.36, 0.46, 0.56), "all of 3 (Holm): > 0.1", parts=parts),
               entry((0.36, 0.46, 0.56), "all of 3 (Holm): > 0.1", parts=there, device=INTEL))
    code = ("import json, pickle, sys; from normsys.claims import report; "
            "print(json.dumps(report.differences(pickle.loads(sys.stdin.buffer.read()), 'cpu')))")
    runs = [subprocess.run([sys.executable, "-c", code], input=pickle.dumps(r), capture_output=True,
                           env={**os.environ, "PYTHONHASHSEED": str(h)}) for h in (1, 2, 3)]
    assert all(run.returncode == 0 for run in runs), runs[0].stderr
    assert len({run.stdout for run in runs}) == 1 and len(json.loads(runs[0].stdout)) == 9


# ----------------------------------------------------------------------------- the committed records


def in_force_entries() -> list[tuple[ledger.Record, verdict.Verdict]]:
    """Every committed entry a fresh run of its environment and seed plan is compared with: of a
    tier, under the rule in force, of the experiment a run now would measure (the reference's)."""
    recs = report.records(COMMITTED)
    return [(r, e) for r in recs.values() for tier in ("cpu", "paper") for e in r.in_force(tier)]


def test_a_training_edit_that_changes_no_number_passes_every_claim_on_every_recorded_kind():
    """``_PROBE = 1`` in a training module: a new code digest, the same per-seed values. Every
    claim's every entry in force is then `same`, on every kind it was recorded on: nothing is
    unrecorded, nothing fails, and nobody re-records."""
    found = in_force_entries()
    assert len({r.claim for r, _ in found}) >= 40
    for r, e in found:
        judged = across.judge(r, replace(e, code="0b5e55ed0000"))
        assert judged.status == "same" and not judged.fails, (r.claim, e.key, judged.message)


def test_a_training_edit_that_moves_a_number_fails_exactly_where_an_entry_of_that_kind_holds_it():
    """A one-line numeric change: every claim whose entry of this kind it moves (its values off in
    the last place) fails here, naming the value; a kind without an entry of its own is judged
    across the reference within the claim's bound, never unrecorded."""
    for r, e in in_force_entries():
        moved = tuple(np.nextafter(v, np.inf) if i == 0 else v for i, v in enumerate(e.values))
        nudged = replace(e, code="0b5e55ed0000", values=moved,
                         parts={k: [moved[i] if list(v) == list(e.values) else x
                                    for i, x in enumerate(v)] for k, v in e.parts.items()})
        judged = across.judge(r, nudged)
        assert judged.fails and "per-seed values differ at 1 seed(s)" in judged.message, \
            (r.claim, e.key, judged.message)
    for r in report.records(COMMITTED).values():
        if (ref := r.entries.get(r.reference.get("cpu", ""))) is None or ref not in r.in_force("cpu"):
            continue
        elsewhere = replace(ref, device="cpu (AVX512, Intel)", code="0b5e55ed0000")
        assert across.judge(r, elsewhere).status in ("across", across.MOVED), r.claim


def amended_record(claim: str, reason: str) -> ledger.Record:
    before = entry(alpha=verdict.FIRST_ALPHA)
    now = entry()
    amendment = ledger.Amendment("2026-11-28", before.full_rule, now.full_rule, reason)
    return ledger.Record(claim, {now.key: now}, {"cpu": now.key}, before.full_rule, [amendment])


def test_a_corrected_reason_keeps_the_rule_and_is_made_once(tmp_path, capsys):
    """amend-reason adds an amendment that keeps the rule in force where its reason says the
    words given, and nothing where none does (said, not silent)."""
    for claim in ("c-1", "c-2"):
        ledger.write(tmp_path / f"{claim}.json", amended_record(claim, "skewed (median 0.31)"))
    ledger.write(tmp_path / "c-3.json", amended_record("c-3", "another reason"))
    args = ["amend-reason", "--of", "median 0.31", "--reason", "read again, raw",
            "--ledger", str(tmp_path)]
    assert main(args) == 0 and "corrected the reason of 2 of 3 records" in capsys.readouterr().out
    for claim in ("c-1", "c-2"):
        after = ledger.read(tmp_path / f"{claim}.json")
        last = after.amendments[-1]
        assert after.rule == amended_record(claim, "").rule == last.old == last.new
        assert last.line() == f"reason corrected {last.date}: {after.rule} (read again, raw)"
    assert len(ledger.read(tmp_path / "c-3.json").amendments) == 1
    assert main(args) == 2 and "no record's rule in force" in capsys.readouterr().err
    with pytest.raises(ledger.LedgerError, match="must say why"):
        ledger.reason_corrected(amended_record("c-1", "median 0.31"), "median", " ")


def test_the_verdict_table_tells_each_amendments_reason_once():
    recs = {"c-1": amended_record("c-1", "a new alpha"), "c-2": amended_record("c-2", "a new alpha"),
            "c-3": amended_record("c-3", "a statistic renamed")}
    recs["c-3"] = ledger.reason_corrected(recs["c-3"], "renamed", "renamed, read again")
    page = report.glance_section(recs, ["cpu"])
    rows = [line for line in page.split("\n") if line.startswith("| `c-")]
    assert [row.rsplit(" | ", 1)[1] for row in rows] == ["1 |", "1 |", "2, 3 |"]
    assert page.count("a new alpha") == 1 and page.count("a statistic renamed") == 1
    first = recs["c-1"].amendments[0]
    gained = first.new[len(first.old):]
    assert gained and f"1. {first.date}, 2 claims (each rule gained `{gained}`): a new alpha" in page
    assert f"2. {first.date}, 1 claim (the rule gained `{gained}`): a statistic renamed" in page
    assert "(the rule kept, its reason corrected): renamed, read again" in page


def test_the_page_counts_each_tiers_verdicts_from_the_reference_entries():
    recs = {"c-1": record(entry(), claim="c-1"),  # supported
            "c-2": record(entry((0.5, 0.52, 0.51)), claim="c-2"),  # refuted
            "c-3": record(entry((0.1, 0.9, 0.85)), claim="c-3"),  # inconclusive
            "c-4": amended_record("c-4", "a new alpha"),  # supported, its rule amended since
            "c-5": record(entry(seeds=[3, 4, 5]), claim="c-5"),  # no reference: later seeds
            "c-6": record(entry(), claim="c-6")}  # a claim that no longer runs at the tier
    recs["c-4"] = replace(recs["c-4"], amendments=[
        *recs["c-4"].amendments, ledger.Amendment("2026-12-01", recs["c-4"].rule,
                                                  "kappa >= 0.9 (1.75% a side)", "stricter")])
    said = report.verdict_counts(recs, ["cpu"], {"c-6": ("paper",)})
    assert said.endswith("- cpu: 5 claims, 2 supported, 1 refuted, 1 inconclusive (1 of them "
                         "under an earlier rule); 1 without an entry on the claim's own seeds")


def test_the_disagreements_show_only_the_claims_whose_verdicts_differ_with_their_rule():
    recs = {"c-1": record(entry(), entry(device=INTEL), claim="c-1"),  # both supported
            "c-2": record(entry(), entry((0.5, 0.6, 0.9), device=INTEL), claim="c-2"),
            "c-3": record(entry(), claim="c-3")}  # in one column only
    page = report.disagreements_section(recs, ["cpu", "paper"])
    assert "- cpu (AVX512, Intel), seeds 0+: 1 of 2 agree; 0 decisive flips; 1 claims not in " \
           "every column" in page
    rows = [line for line in page.split("\n") if line.startswith("| `")]
    assert rows == ["| `c-2` | `kappa >= 0.8 (1.75% a side)` | supported 0.92 [0.89, 0.95] | "
                    "cpu (AVX512, Intel), seeds 0+ | inconclusive 0.6667 [0.04124, 1.292] |"]
    assert "The paper tier: 0 columns of entries in force, nothing to set beside it." in page
