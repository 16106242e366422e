"""The verdict ledger's files, judgements and comparisons (the plugin's use of it: test_plugin)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from normsys.__main__ import main
from normsys.claims import ledger
from normsys.training import provenance
from normsys.training.config import preset

SMALL = preset("ffn_stack", **{"train.steps": 3, "model.d": 16, "data.batch_shape": (4, 5, 16)})
SETTINGS, PRINT = ledger.run_settings([SMALL.override(**{"train.seed": s}) for s in range(3)])


def entry(verdict: str = "supported", mean: float = 0.82, low: float = 0.80, high: float = 0.84,
          seeds=(0, 1, 2), **changes) -> ledger.Entry:
    fields = dict(verdict=verdict, statistic="kappa", rule=">= 0.8", seeds=list(seeds),
                  values=[mean] * len(seeds), mean=mean, low=low, high=high,
                  measured="2026-11-23 10:00", commit="a59fd79c0ffee", normsys="0.2.0",
                  torch="2.13.0+cpu", device="cpu", data="abc", settings=SETTINGS,
                  settings_fingerprint=PRINT)
    return ledger.Entry(**{**fields, **changes})


def on_a_cpu(monkeypatch, kernels: str, vendor: str) -> None:
    """This process as one on a CPU of ``kernels`` made by ``vendor``."""
    monkeypatch.setattr(provenance, "device_name", lambda _=None: "cpu")
    monkeypatch.setattr(provenance, "cpu_kernels", lambda: kernels)
    monkeypatch.setattr(provenance, "cpu_vendor", lambda: vendor)


def test_file_names_per_tier_device_and_seed_set():
    assert ledger.file_name("cpu", "cpu") == "cpu.json"
    assert ledger.file_name("cpu", "NVIDIA H100 80GB HBM3") == "cpu.json"
    assert ledger.file_name("paper", "NVIDIA H100 80GB HBM3") == "paper-NVIDIA-H100-80GB-HBM3.json"
    assert ledger.file_name("cpu", "cpu", seed_offset=3) == "cpu-seeds-3-5.json"
    assert ledger.file_name("paper", "NVIDIA H200", seed_offset=5) == "paper-NVIDIA-H200-seeds-5-9.json"
    assert ledger.file_name("cpu", "cpu", seed_offset=0, seeds=8) == "cpu-seeds-0-7.json"


def test_the_cpu_tier_on_a_cpu_of_other_kernels_has_a_ledger_of_its_own():
    """A CPU whose kernels round otherwise (AVX2 against the AVX-512 of cpu.json) measures other
    numbers: its verdicts go to cpu-<kernels>.json, read as the CPU tier's."""
    assert ledger.file_name("cpu", "cpu", kernels=ledger.CPU_TIER_KERNELS) == "cpu.json"
    assert ledger.file_name("cpu", "cpu", kernels="AVX2") == "cpu-AVX2.json"
    assert ledger.file_name("cpu", "cpu", seed_offset=3, kernels="AVX2") == "cpu-AVX2-seeds-3-5.json"
    assert ledger.file_name("paper", "NVIDIA H200", kernels="AVX2") == "paper-NVIDIA-H200.json"
    assert ledger.tier_of(Path("cpu-AVX2.json")) == ledger.tier_of(Path("cpu-AVX2-seeds-3-5.json")) \
        == "cpu"


@pytest.mark.parametrize("device,kernels,vendor,cpu_file,paper_file", [
    ("cpu", "AVX512", "AMD", "cpu.json", "paper-cpu.json"),
    ("cpu", "AVX2", "AMD", "cpu-AVX2.json", "paper-cpu.json"),
    ("cpu", "AVX512", "Intel", "cpu-AVX512-Intel.json", "paper-cpu.json"),  # MKL rounds otherwise
    ("cpu", "DEFAULT", "aarch64", "cpu-DEFAULT-aarch64.json", "paper-cpu.json"),
    ("NVIDIA H200", "AVX2", "Intel", "cpu.json", "paper-NVIDIA-H200.json")])  # a GPU host
def test_a_session_reads_the_ledger_of_its_cpus_kernels(monkeypatch, tmp_path, device, kernels,
                                                        vendor, cpu_file, paper_file):
    monkeypatch.setattr(provenance, "device_name", lambda _=None: device)
    monkeypatch.setattr(provenance, "cpu_kernels", lambda: kernels)
    monkeypatch.setattr(provenance, "cpu_vendor", lambda: vendor)
    ledgers = ledger.Ledgers(tmp_path)
    assert (ledgers.path("cpu"), ledgers.path("paper")) == (tmp_path / cpu_file,
                                                           tmp_path / paper_file)
    assert provenance.numeric_environment()["device"] == \
        (f"cpu ({kernels}, {vendor})" if device == "cpu" else device)


def test_this_machines_kernels_are_torchs():
    import torch

    assert provenance.cpu_kernels() == torch.backends.cpu.get_cpu_capability()


def test_write_then_read_round_trips_with_sorted_keys(tmp_path):
    path = tmp_path / "cpu.json"
    ledger.write(path, {"b": entry(), "a": entry("refuted", 0.1, 0.0, 0.2)})
    assert ledger.read(path) == {"a": entry("refuted", 0.1, 0.0, 0.2), "b": entry()}
    text = path.read_text()
    assert text.index('"a"') < text.index('"b"') and text.endswith("}\n")
    assert ledger.read(tmp_path / "absent.json") == {}


@pytest.mark.parametrize("content", ["{not json", '{"claims": [1, 2]}', '{"other": 1}'])
def test_a_damaged_file_is_an_error_naming_it(tmp_path, content):
    path = tmp_path / "cpu.json"
    path.write_text(content)
    with pytest.raises(ledger.LedgerError, match=r"cpu\.json cannot be read.*--claims-update"):
        ledger.read(path)


def test_judgements():
    recorded = entry()
    same = ledger.judge(recorded, entry(mean=0.821, low=0.80, high=0.84), True)
    assert same.status == "same" and not same.fails
    assert same.message == "ledger: supported 0.82 [0.8, 0.84] seeds 0-2 (2026-11-23, a59fd79)"
    # moved by more than a tenth of the recorded half-width (0.002) with the verdict unchanged
    assert ledger.judge(recorded, entry(mean=0.83, low=0.81, high=0.85), True).status == "drift"
    changed = ledger.judge(recorded, entry("inconclusive", 0.79, 0.74, 0.84), True)
    assert changed.fails and changed.message == (
        "ledger: supported 0.82 [0.8, 0.84] seeds 0-2 (2026-11-23, a59fd79); now: inconclusive "
        "0.79 [0.74, 0.84]; review, then rerun with --claims-update")
    assert ledger.judge(None, recorded, True).status == "new"
    assert ledger.judge(None, recorded, False).status == "unrecorded"
    zero_width = entry(mean=0.0, low=0.0, high=0.0)
    assert ledger.judge(zero_width, entry(mean=1e-12, low=0, high=0), True).status == "same"
    assert ledger.judge(zero_width, entry(mean=1e-6, low=0, high=0), True).status == "drift"


def test_run_settings_name_every_field_once_with_the_values_the_runs_take():
    norms = [SMALL.override(**{"model.norm": n, "train.seed": s})
             for n in ("rmsnorm", "layernorm") for s in (0, 1, 2)]
    settings, fingerprint = ledger.run_settings(norms)
    assert settings["model.norm"] == "layernorm | rmsnorm"  # distinct, sorted
    assert settings["train.steps"] == "3" and settings["model.d"] == "16"
    assert settings["data.batch_shape"] == "4,5,16" and settings["train.probe"] == ""
    assert settings["train.lr"] == "0.001" and settings["model.residual"] == "True"
    assert "train.seed" not in settings  # the seeds are the entry's own field
    assert set(settings) == set(SMALL.flat()) - {"train.seed"}
    assert list(settings) == sorted(settings)
    # the seeds and the order of the runs do not change the fingerprint; a setting does
    assert ledger.run_settings([norms[5], norms[1]])[1] == fingerprint  # layernorm s2, rmsnorm s1
    assert ledger.run_settings([SMALL.override(**{"model.norm": "layernorm"})])[1] != fingerprint
    assert len(fingerprint) == 16 and ledger.run_settings([])[0] == {}


def test_judgements_name_each_kind_of_change_and_fail():
    """What a verdict was decided under is part of it: statistic, rule, seeds, run settings."""
    recorded = entry()
    longer, _ = ledger.run_settings([SMALL.override(**{"train.steps": 12})])
    cases = {
        "rule: recorded >= 0.8, now >= 0.9": entry(rule=">= 0.9"),
        "statistic: recorded kappa, now kappa_2": entry(statistic="kappa_2"),
        "seeds: recorded 0-2, now 0-4": entry(seeds=range(5)),
        "settings: train.steps 3 -> 12": entry(settings=longer, settings_fingerprint="f" * 16),
    }
    for says, fresh in cases.items():
        judged = ledger.judge(recorded, fresh, True)
        assert judged.fails and judged.status == "changed", says
        assert judged.message == (f"ledger: supported 0.82 [0.8, 0.84] seeds 0-2 (2026-11-23, "
                                  f"a59fd79); now: supported 0.82 [0.8, 0.84]; {says}; review, "
                                  f"then rerun with --claims-update"), says
    both = ledger.judge(recorded, entry("refuted", 0.1, 0.0, 0.2, rule="> 1"), True)
    assert both.message == ("ledger: supported 0.82 [0.8, 0.84] seeds 0-2 (2026-11-23, a59fd79); "
                            "now: refuted 0.1 [0, 0.2]; rule: recorded >= 0.8, now > 1; review, "
                            "then rerun with --claims-update")


def test_settings_that_pair_otherwise_and_settings_not_recorded():
    """Runs (a, x), (b, y) against (a, y), (b, x): each field takes the same values, the set of
    run configs differs, and only the fingerprint can tell."""
    pairs = lambda *p: ledger.run_settings(  # noqa: E731
        [SMALL.override(**{"model.norm": n, "train.steps": t}) for n, t in p])
    before, after = pairs(("layernorm", 3), ("rmsnorm", 4)), pairs(("layernorm", 4), ("rmsnorm", 3))
    assert before[0] == after[0] and before[1] != after[1]
    judged = ledger.judge(entry(settings=before[0], settings_fingerprint=before[1]),
                          entry(settings=after[0], settings_fingerprint=after[1]), True)
    assert judged.fails and (f"settings: the runs pair the same values otherwise (run configs "
                             f"recorded {before[1]}, now {after[1]})") in judged.message
    older = ledger.judge(entry(settings={}, settings_fingerprint=""), entry(), True)
    assert older.status == "no-settings" and not older.fails
    assert older.message.endswith("its run settings are not recorded: review, then rerun with "
                                  "--claims-update")
    # an older entry still fails on what it does record
    assert ledger.judge(entry(settings={}, settings_fingerprint=""), entry(rule="> 2"), True).fails


def test_setting_changes_list_the_first_few_and_count_the_rest():
    recorded = {f"train.f{i}": "1" for i in range(6)}
    now = {**{f"train.f{i}": "2" for i in range(6)}, "train.new": "x"}
    del now["train.f5"]
    assert ledger.setting_changes(recorded, now) == [
        "train.f0 1 -> 2", "train.f1 1 -> 2", "train.f2 1 -> 2", "train.f3 1 -> 2", "3 more"]
    assert ledger.setting_changes(recorded, now, most=9)[-2:] == ["train.f5 1 -> absent",
                                                                  "train.new absent -> x"]
    assert ledger.setting_changes(recorded, recorded) == []


def small_ledgers(tmp_path):
    a, b = tmp_path / "cpu.json", tmp_path / "cpu-seeds-3-5.json"
    ledger.write(a, {"c-1": entry(), "c-2": entry("refuted", 0.1, 0.0, 0.2),
                     "c-3": entry("inconclusive", 0.5, 0.1, 0.9), "c-only-a": entry()})
    ledger.write(b, {"c-1": entry(seeds=(3, 4, 5)), "c-2": entry("supported", seeds=(3, 4, 5)),
                     "c-3": entry("supported", seeds=(3, 4, 5))})
    return a, b


def test_compare_counts_agreement_and_decisive_flips(tmp_path):
    header, rows, line = ledger.compare(small_ledgers(tmp_path))
    assert header[0] == "claim" and header[1] == "cpu: verdict" and len(header) == 7
    assert rows[0] == ["c-1", "supported", "0.82 [0.8, 0.84]", "0-2",
                       "supported", "0.82 [0.8, 0.84]", "3-5"]
    assert rows[-1][4:] == ["-", "", ""]
    assert line == "1 of 3 agree; 1 decisive flips (c-2); 1 claims not in every ledger"


def test_compare_command_prints_the_table_and_markdown(tmp_path, capsys):
    a, b = small_ledgers(tmp_path)
    assert main(["compare", str(a), str(b)]) == 0
    out = capsys.readouterr().out
    assert "c-only-a" in out and out.rstrip().endswith("1 claims not in every ledger")
    assert main(["compare", str(a), str(b), "--markdown"]) == 0
    md = capsys.readouterr().out
    assert md.startswith("| claim | cpu: verdict |") and "| `c-2` | REFUTED |" in md
    assert main(["compare", str(a), str(tmp_path / "nope.json")]) == 2
    assert "nope.json does not exist" in capsys.readouterr().err


def test_import_report_from_a_claims_json_and_from_a_printed_table(tmp_path, capsys):
    report = tmp_path / "claims.json"
    report.write_text(json.dumps({"claims": [
        {"id": "c-1", "tier": "paper", "verdict": "refuted", "statistic": "k", "rule": "> 1",
         "seeds": [0, 1], "values": [0.1, 0.2], "mean": 0.15, "low": -0.48, "high": 0.78,
         "commit": "a90082bc (the enclosing repository's)", "measured": "2026-11-22 10:00"},
        {"id": "c-err", "tier": "paper", "verdict": "error", "statistic": "", "rule": "",
         "seeds": [], "values": [], "mean": None, "low": None, "high": None}]}))
    table = tmp_path / "table.txt"
    table.write_text(
        "claim  tier   verdict       statistic  mean   95% CI            rule           seeds  time\n"
        "-----  -----  ------------  ---------  -----  ----------------  -------------  -----  ----\n"
        "c-2    paper  REFUTED       a - b      -0.01  [-0.02, -0.005]   all of 3: > 0  5      3s\n"
        "1 refuted\n")
    folder = tmp_path / "ledger"
    common = ["--ledger", str(folder), "--device", "NVIDIA H100 80GB HBM3", "--commit", "1f572e4",
              "--torch", "2.11.0+cu130", "--normsys", "0.2.0", "--measured", "2026-11-23"]
    assert main(["import-report", str(report), *common]) == 0
    assert main(["import-report", str(table), *common]) == 0
    entries = ledger.read(folder / "paper-NVIDIA-H100-80GB-HBM3.json")
    assert sorted(entries) == ["c-1", "c-2"]  # the error is not a verdict
    # what the importer says of the run wins over the report's own commit and time
    assert entries["c-1"].values == [0.1, 0.2] and entries["c-1"].commit == "1f572e4"
    assert entries["c-1"].measured == "2026-11-23"
    assert entries["c-2"].verdict == "refuted" and entries["c-2"].seeds == [0, 1, 2, 3, 4]
    assert entries["c-2"].rule == "all of 3: > 0" and entries["c-2"].high == -0.005
    given = dict(measured="2026-11-23", commit="1f572e4", normsys="0.2.0", torch="2.11.0+cu130",
                 device="NVIDIA H100 80GB HBM3", data="")
    assert entries["c-1"] == ledger.Entry("refuted", "k", "> 1", [0, 1], [0.1, 0.2], 0.15,
                                          -0.48, 0.78, **given)
    assert entries["c-2"] == ledger.Entry("refuted", "a - b", "all of 3: > 0", [0, 1, 2, 3, 4],
                                          [], -0.01, -0.02, -0.005, **given)


def test_a_report_row_brings_its_run_settings_and_every_verdict_kind(tmp_path):
    """Rows of a report that carry their ledger entry bring its settings; inconclusive rows are
    verdicts too (any case), errors and rows not run are not, and none stops the rest."""
    settings = {"model.norm": "l2 | none", "train.epochs": "4"}
    rows = [{"id": f"c-{v}", "tier": "cpu", "verdict": v, "statistic": "s", "rule": "> 0",
             "seeds": [0, 1, 2], "values": [1.0, 2.0, 3.0], "mean": 2.0, "low": 0.5, "high": 3.5,
             "entry": {"settings": settings, "settings_fingerprint": "f00d"}}
            for v in ("error", "INCONCLUSIVE", "not run", "supported")]
    report = tmp_path / "claims.json"
    report.write_text(json.dumps({"claims": rows}))
    got = ledger.from_report(report, dict(measured="m", commit="c", normsys="n", torch="t",
                                          device="d", data="sums"))
    assert sorted(got) == [("c-INCONCLUSIVE", "cpu"), ("c-supported", "cpu")]
    entry = got["c-INCONCLUSIVE", "cpu"]
    assert entry.verdict == "inconclusive" and entry.data == "sums"
    assert entry.settings == settings and entry.settings_fingerprint == "f00d"
    assert (entry.mean, entry.low, entry.high, entry.statistic) == (2.0, 0.5, 3.5, "s")
    older = ledger.from_report(report, dict(measured="m", commit="c", normsys="n", torch="t",
                                            device="d"))  # an importer that knows no data
    assert older["c-supported", "cpu"].data == ""
    (tmp_path / "bad.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(ledger.LedgerError, match=r"bad.json: neither a claims report "
                                                 r"\(claims.json\) nor a verdict table$"):
        ledger.from_report(tmp_path / "bad.json", {})


def test_a_printed_table_is_read_from_its_header_to_its_last_row():
    text = ("collected 3 items\n"
            "claim  tier  verdict  statistic  mean  95% CI        rule  seeds  time\n"
            "-----  ----  -------  ---------  ----  ------------  ----  -----  ----\n"
            "c-1    cpu   supported  x        0.5   [0.4, 0.6]    > 0   3      1s\n"
            "c-2    cpu   REFUTED  x          -0.5  [-0.6, -0.4]  > 0   3\n"  # no time: still a row
            "c-x    cpu   REFUTED  x          -0.5  [-0.6, -0.4]  > 0\n"  # two cells short: the end
            "c-3    cpu   REFUTED  x          -0.5  [-0.6, -0.4]  > 0   3      1s\n")
    rows = ledger.table_rows(text)
    assert [r["id"] for r in rows] == ["c-1", "c-2"]  # the table ends at its first short line
    assert rows[0] == {"id": "c-1", "tier": "cpu", "verdict": "supported", "statistic": "x",
                       "mean": "0.5", "low": "0.4", "high": "0.6", "rule": "> 0",
                       "seeds": [0, 1, 2]}
    with pytest.raises(ledger.LedgerError, match=r"^no verdict table \(a line 'claim  tier  "
                                                 r"verdict \.\.\.'\) found$"):
        ledger.table_rows("nothing here\n")


def test_compare_prints_exactly_this_table_in_text_and_markdown(tmp_path):
    header, rows, line = ledger.compare(small_ledgers(tmp_path))
    assert ledger.as_text(header, rows) == "\n".join([
        "claim     cpu: verdict  mean [95% CI]     seeds  cpu-seeds-3-5: verdict  mean [95% CI]"
        "     seeds",
        "--------  ------------  ----------------  -----  ----------------------  ----------------"
        "  -----",
        "c-1       supported     0.82 [0.8, 0.84]  0-2    supported               0.82 [0.8, 0.84]"
        "  3-5",
        "c-2       REFUTED       0.1 [0, 0.2]      0-2    supported               0.82 [0.8, 0.84]"
        "  3-5",
        "c-3       inconclusive  0.5 [0.1, 0.9]    0-2    supported               0.82 [0.8, 0.84]"
        "  3-5",
        "c-only-a  supported     0.82 [0.8, 0.84]  0-2    -"])  # trailing blanks cut
    assert ledger.as_markdown(header, rows) == "\n".join([
        "| claim | cpu: verdict | mean [95% CI] | seeds | cpu-seeds-3-5: verdict | mean [95% CI] "
        "| seeds |",
        "|---|---|---|---|---|---|---|",
        "| `c-1` | supported | 0.82 [0.8, 0.84] | 0-2 | supported | 0.82 [0.8, 0.84] | 3-5 |",
        "| `c-2` | REFUTED | 0.1 [0, 0.2] | 0-2 | supported | 0.82 [0.8, 0.84] | 3-5 |",
        "| `c-3` | inconclusive | 0.5 [0.1, 0.9] | 0-2 | supported | 0.82 [0.8, 0.84] | 3-5 |",
        "| `c-only-a` | supported | 0.82 [0.8, 0.84] | 0-2 | - |  |  |"])
    assert line == "1 of 3 agree; 1 decisive flips (c-2); 1 claims not in every ledger"
    assert ledger.as_text(["claim", "x"], []) == "claim  x\n-----  -"
    a, _ = small_ledgers(tmp_path)
    b = tmp_path / "same.json"
    ledger.write(b, {"c-1": entry(), "c-3": entry("inconclusive", 0.5, 0.1, 0.9)})
    assert ledger.compare([b, b])[2] == "2 of 2 agree; 0 decisive flips"  # all in both


def test_compare_names_every_decisive_flip_in_order(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    ledger.write(a, {"x": entry(), "y": entry("refuted", 0.1, 0.0, 0.2), "z": entry()})
    ledger.write(b, {"x": entry("refuted", 0.1, 0.0, 0.2), "y": entry(), "z": entry()})
    assert ledger.compare([a, b])[2] == "1 of 3 agree; 2 decisive flips (x, y)"


def test_seed_spans_and_numbers():
    assert ledger.seed_span([]) == "-"
    assert ledger.seed_span([4]) == "4"  # one seed is not a span
    assert ledger.seed_span([0, 1]) == "0-1" and ledger.seed_span(range(3, 8)) == "3-7"
    assert ledger.seed_span([0, 2, 3]) == "0,2,3" and ledger.seed_span([1, 0]) == "1,0"
    assert ledger.num(None) == "nan" and ledger.num(float("nan")) == "nan"
    assert ledger.num(0.123456) == "0.1235" and ledger.num(3) == "3"
    assert ledger.interval(0.5, float("nan"), 1.0) == "0.5 [nan, 1]"


def test_file_names_with_seed_counts_on_tiers_of_their_own():
    assert ledger.file_name("paper", "NVIDIA H200", max_seeds=13) == \
        "paper-NVIDIA-H200-max-seeds-13.json"
    assert ledger.file_name("cpu", "cpu", seed_offset=3, max_seeds=8) == \
        "cpu-seeds-3-5-max-seeds-8.json"
    assert ledger.file_name("paper", "NVIDIA H200", seed_offset=2) == \
        "paper-NVIDIA-H200-seeds-2-6.json"  # the paper tier's own 5 seeds
    # the tier's own most seeds (params.MAX_SEEDS) is the plain file; a single look at 5 is not
    assert ledger.file_name("paper", "NVIDIA H200", max_seeds=21) == "paper-NVIDIA-H200.json"
    assert ledger.file_name("paper", "NVIDIA H200", max_seeds=5) == \
        "paper-NVIDIA-H200-max-seeds-5.json"


def test_the_written_file_is_exactly_this(tmp_path):
    path = tmp_path / "cpu.json"
    import numpy as np

    ledger.write(path, {"c": entry(values=[np.float32(0.5)], seeds=[0], settings={"a.b": "1"},
                                   settings_fingerprint="f")})
    assert path.read_text() == (
        '{\n "about": "normsys verdict ledger: written by `pytest claims --claims-update`, never '
        'by hand; every claims run is checked against it",\n "claims": {\n  "c": {\n'
        '   "autocast": "",\n   "commit": "a59fd79c0ffee",\n   "data": "abc",\n   "device": "cpu",\n'
        '   "high": 0.84,\n   "looks": [],\n   "low": 0.8,\n   "mean": 0.82,\n'
        '   "measured": "2026-11-23 10:00",\n'
        '   "normsys": "0.2.0",\n   "rule": ">= 0.8",\n   "seeds": [\n    0\n   ],\n'
        '   "settings": {\n    "a.b": "1"\n   },\n   "settings_fingerprint": "f",\n'
        '   "statistic": "kappa",\n   "threads": "",\n   "torch": "2.13.0+cpu",\n'
        '   "values": [\n    0.5\n   ],\n'
        '   "verdict": "supported"\n  }\n },\n "format": 1\n}\n')


def test_a_damaged_entry_names_the_error_and_its_type(tmp_path):
    path = tmp_path / "cpu.json"
    path.write_text('{"claims": {"x": 5}}')
    with pytest.raises(ledger.LedgerError, match=r"cannot be read \(TypeError: "):
        ledger.read(path)


def test_a_ledger_of_another_format_or_with_entries_short_of_fields_is_one_clear_line(tmp_path):
    """The format is recorded in every file (a file without it predates the field: format 1); an
    entry lacking the fields this version needs names them instead of a constructor's error."""
    import dataclasses
    import json

    path = tmp_path / "cpu.json"
    ledger.write(path, {"c": entry()})
    body = json.loads(path.read_text())
    assert body["format"] == ledger.FORMAT == 1
    del body["format"]
    path.write_text(json.dumps(body))
    assert ledger.read(path) == {"c": entry()}
    path.write_text(json.dumps({**body, "format": 2}))
    with pytest.raises(ledger.LedgerError) as err:
        ledger.read(path)
    assert str(err.value) == (f"ledger {path} is format 2; this normsys ({ledger.__version__}) "
                              f"reads format 1: use the normsys version that wrote it, or rewrite "
                              f"it with `pytest claims --claims-update`")
    path.write_text("[]")  # JSON, but no object: a format this version cannot read either
    with pytest.raises(ledger.LedgerError, match=r"^ledger .*cpu.json is format None; this"):
        ledger.read(path)
    short = dataclasses.asdict(entry())
    del short["mean"], short["torch"]
    path.write_text(json.dumps({"claims": {"c": short}}))
    with pytest.raises(ledger.LedgerError, match=r"^ledger .*cpu.json: the entry of c lacks mean, "
                                                 r"torch \(written by another normsys version\?\)"):
        ledger.read(path)


def test_drift_is_a_move_past_a_tenth_of_the_half_interval_and_says_by_how_much():
    """Recorded 1 [0, 2.5]: half-width 1.25, tolerance 0.125 (binary-exact numbers)."""
    recorded = entry(mean=1.0, low=0.0, high=2.5)
    assert ledger.judge(recorded, entry(mean=1.125, low=0.0, high=2.5), True).status == "same"
    drift = ledger.judge(recorded, entry(mean=1.25, low=0.0, high=2.5), True)
    assert drift.status == "drift" and not drift.fails
    assert drift.message == ("ledger: supported 1 [0, 2.5] seeds 0-2 (2026-11-23, a59fd79); now: "
                             "supported 1.25 [0, 2.5] (mean moved 0.25)")
    assert ledger.judge(recorded, entry(mean=0.85, low=0.0, high=2.5), True).status == "drift"
    assert ledger.judge(entry(mean=1.0, low=0.9, high=1.1), entry(mean=1.015), True).status == \
        "drift"  # 0.015 > 0.01: a tenth of the half-width, not of the width
    assert ledger.judge(entry(mean=1.0, low=0.9, high=1.1), entry(mean=1.0075), True).status == \
        "same"  # 0.0075 < 0.01, though more than a third of a tenth of the half-width
    endless = entry(mean=1.0, low=float("-inf"), high=float("inf"))
    assert ledger.judge(endless, entry(mean=9.0), True).status == "same"
    unrecorded = ledger.judge(None, entry(), False)
    assert unrecorded.message == ("no ledger for this tier and device: run with --claims-update "
                                  "to start one")
    assert ledger.judge(None, entry(), True).message == \
        "new: not in the ledger; review, then rerun with --claims-update"


def test_run_settings_fingerprint_is_of_the_seed_zero_configs_sorted_and_joined_by_spaces():
    import hashlib

    cfgs = [SMALL.override(**{"train.seed": 7, "model.norm": n}) for n in ("rmsnorm", "none")]
    prints = sorted(c.override(**{"train.seed": 0}).fingerprint() for c in cfgs)
    expected = hashlib.sha256(" ".join(prints).encode()).hexdigest()[:16]
    assert ledger.run_settings(cfgs)[1] == expected
    settings = ledger.setting_changes({f"f{i}": "1" for i in range(4)},
                                      {f"f{i}": "2" for i in range(4)})
    assert settings == [f"f{i} 1 -> 2" for i in range(4)]  # four: no "more"
    two = ledger.changes(entry(settings={"a": "1", "b": "1"}, settings_fingerprint="x"),
                         entry(settings={"a": "2", "b": "2"}, settings_fingerprint="y"))
    assert two == ["settings: a 1 -> 2, b 1 -> 2"]


def test_stale_entries_are_those_of_ids_no_longer_defined_in_every_file_of_the_tier(tmp_path):
    ledger.write(tmp_path / "cpu.json", {"a": entry(), "b": entry(), "gone": entry()})
    ledger.write(tmp_path / "cpu-seeds-3-5.json", {"a": entry(), "old": entry()})
    ledger.write(tmp_path / "paper-NVIDIA-H200.json", {"z": entry()})
    assert [ledger.tier_of(tmp_path / n) for n in ("cpu.json", "cpu-max-seeds-8.json",
                                                   "paper-NVIDIA-H200.json")] == \
        ["cpu", "cpu", "paper"]
    assert ledger.stale(tmp_path, {"cpu": {"a", "b"}}) == {
        tmp_path / "cpu-seeds-3-5.json": ["old"], tmp_path / "cpu.json": ["gone"]}
    assert ledger.stale(tmp_path, {"cpu": {"a", "b", "gone", "old"}, "paper": {"z"}}) == {}
    assert ledger.stale(tmp_path, {"paper": set()}) == {tmp_path / "paper-NVIDIA-H200.json": ["z"]}


def test_the_ledger_readme_is_what_the_committed_ledgers_make():
    root = Path(__file__).parents[1]
    assert (root / "docs" / "verdicts.md").read_text() == ledger.docs(root / "claims" / "ledger"), \
        "docs/verdicts.md is stale: run python -m normsys tables"


def test_tables_put_the_cpu_tier_beside_every_gpu_and_every_seed_set(tmp_path, capsys):
    small_ledgers(tmp_path)
    ledger.write(tmp_path / "paper-GPU-A.json", {"c-1": entry(), "c-2": entry("refuted")})
    ledger.write(tmp_path / "paper-GPU-B.json", {"c-1": entry(), "c-2": entry("supported")})
    ledger.write(tmp_path / "cpu-AVX2.json", {"c-1": entry()})
    page = ledger.docs(tmp_path)
    sections = [line for line in page.splitlines() if line.startswith("## ")]
    assert sections == ["## Replication: every claim at a glance",
                        "## The CPU tier and the paper tier on each GPU",
                        "## Seeds: `cpu-seeds-3-5` beside `cpu`",
                        "## CPU kernels: `cpu-AVX2` beside `cpu` (AVX512)"]
    (tmp_path / "cpu-AVX2.json").unlink()
    page = ledger.docs(tmp_path)
    assert "`cpu.json`, `paper-GPU-A.json`, `paper-GPU-B.json`: 1 of 2 agree; 1 decisive flips " \
           "(c-2); 2 claims not in every ledger; the GPUs among themselves: 1 of 2 agree; 1 " \
           "decisive flips (c-2)\n" in page
    assert "| claim | cpu: verdict | mean [95% CI] | seeds | paper-GPU-A: verdict |" in page
    assert "`cpu.json`, `cpu-seeds-3-5.json`: 1 of 3 agree" in page
    (tmp_path / "paper-GPU-B.json").unlink()  # one GPU: nothing to agree with
    assert "among themselves" not in ledger.docs(tmp_path)
    assert "`cpu.json`, `paper-GPU-A.json`: 2 of 2 agree; 0 decisive flips; 2 claims not in " \
           "every ledger\n" in ledger.docs(tmp_path)
    ledger.write(tmp_path / "paper-GPU-B.json", {"c-1": entry(), "c-2": entry("supported")})
    common = ["tables", "--ledger", str(tmp_path), "--out", str(tmp_path / "verdicts.md")]
    assert main([*common, "--check"]) == 1
    assert "verdicts.md is stale: run python -m normsys tables" in capsys.readouterr().err
    assert main(common) == 0 and (tmp_path / "verdicts.md").read_text() == page
    assert main([*common, "--check"]) == 0
    assert main(["tables", "--ledger", str(tmp_path / "nowhere")]) == 2
    assert "no cpu.json there" in capsys.readouterr().err


def test_replication_says_robust_fragile_contradicted_or_unreplicated_for_each_claim(tmp_path):
    small_ledgers(tmp_path)  # c-1 supported twice, c-2 refuted/supported, c-3 open/supported
    ledger.write(tmp_path / "cpu-AVX2.json", {"c-1": entry(), "c-2": entry("refuted")})
    ledger.write(tmp_path / "paper-GPU-A.json", {"c-1": entry()})
    assert [p.name for p in ledger.tier_files(tmp_path, "cpu")] == \
        ["cpu.json", "cpu-AVX2.json", "cpu-seeds-3-5.json"]  # the reference first
    cpu = ledger.replications(tmp_path, "cpu")
    assert {cid: r.word for cid, r in cpu.items()} == {
        "c-1": ledger.ROBUST, "c-2": ledger.CONTRADICTED, "c-3": ledger.FRAGILE,
        "c-only-a": ledger.UNREPLICATED}
    assert cpu["c-3"].line() == "fragile: inconclusive (cpu), supported (cpu-seeds-3-5)"
    assert cpu["c-1"].behind["cpu-seeds-3-5"] == "seeds 3-5, cpu, torch 2.13.0+cpu"
    assert ledger.replications(tmp_path, "paper")["c-1"].word == ledger.UNREPLICATED
    assert [ledger.replicates(v) for v in (["refuted", "inconclusive"], ["inconclusive"] * 3,
                                           ["supported", "inconclusive", "refuted"])] == \
        [ledger.FRAGILE, ledger.ROBUST, ledger.CONTRADICTED]
    table = ledger.replication_table(tmp_path)
    assert "| `c-3` | inconclusive (`cpu`) | **fragile**: supported in `cpu-seeds-3-5` | - |  |" \
        in table
    assert "| `c-2` | REFUTED (`cpu`) | **CONTRADICTED**: supported in `cpu-seeds-3-5` |" in table
    assert "cpu: 1 CONTRADICTED, 1 fragile, 1 robust, 1 unreplicated; paper: 1 unreplicated" \
        in table


# ----------------------------------------------------------------------------- another environment


def test_across_environments_a_flip_a_robust_move_a_shift_or_a_new_rule_fails():
    recorded = entry(mean=0.82, low=0.80, high=0.84)  # half-interval 0.02
    across = ledger.judge_across
    same = across(recorded, entry(mean=0.835, low=0.8, high=0.87, device="cpu (DEFAULT)"),
                  ledger.ROBUST)
    assert same.status == "same" and not same.fails
    assert same.message.startswith("reference (cpu, torch 2.13.0+cpu): supported 0.82")
    shifted = across(recorded, entry(mean=0.845, low=0.81, high=0.88), ledger.ROBUST)
    assert shifted.fails and "drift: the mean moved 0.025, beyond 1 of the half-interval (0.02)" \
        in shifted.message
    assert across(recorded, entry(mean=0.8395), ledger.ROBUST).status == "same"  # at the edge
    flip = across(recorded, entry("refuted", 0.5, 0.4, 0.6), ledger.FRAGILE)
    assert flip.fails and "a decisive flip" in flip.message  # fragile or not
    robust_move = across(recorded, entry("inconclusive", 0.81, 0.7, 0.92), ledger.ROBUST)
    assert robust_move.fails and "record it as robust" in robust_move.message
    assert across(recorded, entry("inconclusive", 0.81, 0.7, 0.92), ledger.UNREPLICATED).fails
    moved = across(recorded, entry("inconclusive", 0.81, 0.7, 0.92), ledger.FRAGILE)
    assert moved.status == ledger.MOVED and not moved.fails
    assert across(recorded, entry(rule="> 0.9"), ledger.ROBUST).fails  # as on its own kernels
    assert across(None, entry(), ledger.ROBUST).status == "new"
    assert across(recorded, entry(mean=float("nan")), ledger.ROBUST).fails


def test_the_tolerance_across_kernels_holds_what_other_kernels_moved_and_not_a_new_sample():
    """ACROSS_TOLERANCE, from the committed ledgers: every claim of a CPU tier ledger of other
    kernels (same seeds) moved its mean by less than that fraction of cpu.json's half-interval,
    and a new seed sample (cpu-seeds-3-5) moves some by more: the tolerance admits rounding, not
    a change in what was measured."""
    folder = Path(__file__).parents[1] / "claims" / "ledger"
    reference = ledger.read(folder / "cpu.json")

    def moved(path: Path) -> list[float]:
        other = ledger.read(path)
        return [abs(other[c].mean - e.mean) / max((e.high - e.low) / 2, ledger.DRIFT_FLOOR)
                for c, e in reference.items() if c in other and e.high > e.low]

    kernels = [p for p in folder.glob("cpu-*.json") if "seeds" not in p.stem]
    assert kernels and all(max(moved(p)) <= ledger.ACROSS_TOLERANCE for p in kernels)
    assert max(moved(folder / "cpu-seeds-3-5.json")) > ledger.ACROSS_TOLERANCE


def test_a_cpu_without_its_own_ledger_is_judged_against_the_reference(monkeypatch, tmp_path):
    on_a_cpu(monkeypatch, "SVE256", "AMD")
    ledger.write(tmp_path / "cpu.json", {"c-1": entry(), "c-3": entry()})
    ledger.write(tmp_path / "cpu-seeds-3-5.json", {"c-1": entry(),
                                                   "c-3": entry("inconclusive", 0.8, 0.7, 0.9)})
    ledgers = ledger.Ledgers(tmp_path, strict=True)
    assert ledgers.across("cpu") and ledgers.judged_against("cpu") == tmp_path / "cpu.json"
    assert not ledgers.across("paper")
    assert set(ledgers.entries("cpu")) == {"c-1", "c-3"}
    fresh = entry("inconclusive", 0.81, 0.7, 0.92, device="cpu (SVE256)")
    assert ledgers.judge("c-1", "cpu", fresh).fails  # robust: its move fails
    assert ledgers.judge("c-3", "cpu", fresh).status == ledger.MOVED  # fragile: reported
    assert not ledger.Ledgers(tmp_path, update=True).across("cpu")  # it writes its own
    ledger.write(tmp_path / "cpu-SVE256.json", {"c-1": entry()})
    held = ledger.Ledgers(tmp_path)
    assert not held.across("cpu") and held.judge("c-1", "cpu", fresh).fails  # its own, as ever
    assert held.judged_against("cpu") == tmp_path / "cpu-SVE256.json"


def test_the_committed_kernel_ledgers_judged_against_cpu_json_as_a_cpu_without_its_own(tmp_path):
    """Each CPU tier ledger of other kernels, read as a fresh session on those kernels would be
    judged without it (replication from the other files): torch's plain kernels (DEFAULT) move
    3 fragile verdicts and nothing robust, so --claims-strict would pass there; AVX2 moves
    ld-layernorm-decorrelates, which every other ledger records supported (robust without
    AVX2's), so it would fail there: a recorded finding, not a tolerance to widen."""
    import shutil

    folder = Path(__file__).parents[1] / "claims" / "ledger"
    reference = ledger.read(folder / "cpu.json")
    failing, moved = {}, {}
    for kernels in ("AVX2", "DEFAULT-Intel"):
        others = tmp_path / kernels
        others.mkdir()
        for path in folder.glob("*.json"):
            if path.name != f"cpu-{kernels}.json":
                shutil.copy(path, others)
        words = {cid: r.word for cid, r in ledger.replications(others, "cpu").items()}
        judged = {cid: ledger.judge_across(reference.get(cid), e, words[cid])
                  for cid, e in ledger.read(folder / f"cpu-{kernels}.json").items()}
        failing[kernels] = sorted(c for c, j in judged.items() if j.fails)
        moved[kernels] = sorted(c for c, j in judged.items() if j.status == ledger.MOVED)
    assert failing == {"AVX2": ["ld-layernorm-decorrelates"], "DEFAULT-Intel": []}
    assert moved["DEFAULT-Intel"] == ["ld-batchnorm-wins-cnn-large-batch",
                                "ld-layernorm-improves-final-accuracy", "ld-layernorm-small-batch"]


def test_under_the_same_looks_the_look_a_claim_decided_at_is_no_change():
    """A claim of a tier with looks may decide at another look on a rerun (GPU rounding moves a
    value): the same verdict passes; its seeds are compared at the first look, and its runs
    differ in nothing but the seeds added. Other looks, another offset, or another setting stay
    changes."""
    plan = [5, 8, 13, 21]
    at8 = entry(seeds=range(8), looks=plan, settings_fingerprint="eight")
    at13 = entry(seeds=range(13), looks=plan, settings_fingerprint="thirteen")
    assert ledger.judge(at8, at13, True).status == "same"
    assert ledger.judge(at8, entry(seeds=range(13), looks=plan, verdict="refuted",
                                   settings_fingerprint="thirteen"), True).status == "changed"
    moved = ledger.judge(at8, entry(seeds=range(3, 16), looks=plan,
                                    settings_fingerprint="thirteen"), True)
    assert moved.status == "changed" and "seeds: recorded 0-4, now 3-7" in moved.message
    one_look = ledger.judge(at8, entry(seeds=range(13), looks=[13], settings_fingerprint="t"), True)
    assert one_look.status == "changed" and "seeds: recorded 0-7, now 0-12" in one_look.message
    other = dict(SETTINGS, **{"train.epochs": "99"})
    setting = ledger.judge(at8, entry(seeds=range(13), looks=plan, settings=other,
                                      settings_fingerprint="thirteen"), True)
    assert setting.status == "changed" and "settings: train.epochs" in setting.message
    same_look = ledger.judge(at8, entry(seeds=range(8), looks=plan, settings_fingerprint="x"), True)
    assert same_look.status == "changed" and "run configs recorded eight, now x" in same_look.message


def test_a_claims_history_is_its_entries_in_this_environments_files_of_the_tier(monkeypatch,
                                                                               tmp_path):
    """Whatever the most seeds a file let an open claim add; not another GPU's, another seed
    set's or another tier's file."""
    monkeypatch.setattr(provenance, "device_name", lambda _=None: "NVIDIA H100 80GB HBM3")
    files = {"paper-NVIDIA-H100-80GB-HBM3.json": entry(seeds=range(13), looks=[5, 8, 13, 21]),
             "paper-NVIDIA-H100-80GB-HBM3-max-seeds-5.json": entry("inconclusive",
                                                                   seeds=range(5)),
             "paper-NVIDIA-H200.json": entry(seeds=range(21)),
             "paper-NVIDIA-H100-80GB-HBM3-seeds-5-9.json": entry(seeds=range(5, 10)),
             "cpu.json": entry()}
    for name, e in files.items():
        ledger.write(tmp_path / name, {"c-x": e, "c-other": entry()})
    history = ledger.Ledgers(tmp_path).history("c-x", "paper")
    assert sorted(len(e.seeds) for e in history) == [5, 13]
    assert [len(e.seeds) for e in ledger.Ledgers(tmp_path, offset=5).history("c-x", "paper")] \
        == [5]
    assert ledger.Ledgers(tmp_path).history("c-new", "paper") == []
    monkeypatch.setattr(provenance, "device_name", lambda _=None: "NVIDIA A100")
    assert ledger.Ledgers(tmp_path).history("c-x", "paper") == []


def test_the_file_a_session_judges_against_is_read_once_for_its_verdicts_and_history(
        monkeypatch, tmp_path):
    """A file read twice could be judged in one state and taken as history in another."""
    monkeypatch.setattr(provenance, "device_name", lambda _=None: "NVIDIA H100 80GB HBM3")
    for name in ["paper-NVIDIA-H100-80GB-HBM3.json", "paper-NVIDIA-H100-80GB-HBM3-max-seeds-5.json"]:
        ledger.write(tmp_path / name, {"c-x": entry()})
    reads = []
    monkeypatch.setattr(ledger, "read", lambda path, read=ledger.read: reads.append(path.name)
                        or read(path))
    ledgers = ledger.Ledgers(tmp_path, max_seeds=5)
    ledgers.judge("c-x", "paper", entry())
    assert len(ledgers.history("c-x", "paper")) == 2
    assert sorted(reads) == ["paper-NVIDIA-H100-80GB-HBM3-max-seeds-5.json",
                             "paper-NVIDIA-H100-80GB-HBM3.json"]


def test_across_environments_each_judgement_says_exactly_this():
    """The line a session prints for a claim judged against another environment's reference."""
    recorded = entry(mean=0.82, low=0.80, high=0.84)
    across = ledger.judge_across
    head = "reference (cpu, torch 2.13.0+cpu): supported 0.82 [0.8, 0.84] seeds 0-2 (2026-11-23, " \
           "a59fd79); now: "
    update = "; review, then rerun with --claims-update"
    lines = {
        "new": (across(None, entry(), ledger.ROBUST),
                "new: not in the reference ledger" + update),
        "changed": (across(recorded, entry(rule="> 0.9"), ledger.ROBUST),
                    head + "supported 0.82 [0.8, 0.84]; rule: recorded >= 0.8, now > 0.9" + update),
        "flip": (across(recorded, entry("refuted", 0.5, 0.4, 0.6), ledger.FRAGILE),
                 head + "refuted 0.5 [0.4, 0.6]; a decisive flip" + update),
        "robust": (across(recorded, entry("inconclusive", 0.81, 0.7, 0.92), ledger.ROBUST),
                   head + "inconclusive 0.81 [0.7, 0.92]; the verdict moved, and the ledgers "
                          "record it as robust" + update),
        "moved": (across(recorded, entry("inconclusive", 0.81, 0.7, 0.92), ledger.FRAGILE),
                  head + "inconclusive 0.81 [0.7, 0.92]; moved, as a fragile claim may (more "
                         "seeds decide it: --claims-max-seeds)"),
        "drift": (across(recorded, entry(mean=0.845, low=0.81, high=0.88), ledger.ROBUST),
                  head + "supported 0.845 [0.81, 0.88]; drift: the mean moved 0.025, beyond 1 of "
                         "the half-interval (0.02)" + update),
        "same": (across(recorded, entry(mean=0.835, low=0.8, high=0.87), ledger.ROBUST),
                 head.removesuffix("; now: ") + "; within 0.015 of it")}
    assert {k: j.message for k, (j, _) in lines.items()} == {k: m for k, (_, m) in lines.items()}
    # a move of exactly the tolerance (1 half-interval: 0.25) is within it
    edge = across(entry(mean=0.5, low=0.25, high=0.75), entry(mean=0.75, low=0.5, high=1.0),
                  ledger.ROBUST)
    assert edge.status == "same" and edge.message.endswith("; within 0.25 of it")
    # a reference without an interval (one seed: NaN bounds) holds any finite move
    assert across(entry(mean=0.5, low=float("nan"), high=float("nan")), entry(mean=0.9),
                  ledger.ROBUST).status == "same"


def test_a_cpu_label_names_the_kernels_and_a_vendor_other_than_the_reference_cpus():
    assert ledger.cpu_label("cpu (AVX512)") == "AVX512"  # no vendor known
    assert ledger.cpu_label("cpu (AVX2, AMD)") == "AVX2"
    assert ledger.cpu_label("cpu (AVX512, Intel)") == "AVX512-Intel"
    assert ledger.cpu_label("NVIDIA H200") == ledger.CPU_TIER_KERNELS


def test_replication_words_and_file_order_for_two_files_and_gpus_with_seed_sets(tmp_path):
    assert ledger.replicates(["supported", "supported"]) == ledger.ROBUST
    assert ledger.replicates(["supported"]) == ledger.UNREPLICATED
    for name in ("paper-GPU-A.json", "paper-GPU-A-seeds-5-9.json", "paper-GPU-B.json"):
        ledger.write(tmp_path / name, {"c-1": entry()})
    assert [p.name for p in ledger.tier_files(tmp_path, "paper")] == \
        ["paper-GPU-A.json", "paper-GPU-B.json", "paper-GPU-A-seeds-5-9.json"]


def test_the_replication_table_lists_each_files_seeds_and_environments_and_every_tiers_cells(
        tmp_path):
    ledger.write(tmp_path / "cpu.json", {"c-1": entry(),
                                         "c-2": entry(seeds=range(13), device="cpu (AVX2)")})
    ledger.write(tmp_path / "cpu-AVX2.json", {})
    ledger.write(tmp_path / "paper-GPU-A.json", {"c-3": entry(device="GPU A")})
    table = ledger.replication_table(tmp_path)
    assert "- cpu: `cpu` (seeds 0-2 to 0-12, cpu (AVX2), torch 2.13.0+cpu; cpu, torch " \
           "2.13.0+cpu); `cpu-AVX2` (no entries)\n- paper: `paper-GPU-A` (seeds 0-2, GPU A, " \
           "torch 2.13.0+cpu)\n" in table
    assert "| `c-3` | - |  | supported (`paper-GPU-A`) | unreplicated |" in table  # no cpu cell


def test_a_printed_table_of_this_reports_columns_is_read(tmp_path):
    from normsys.claims import report

    assert "CI" in report.HEADER
    text = ("claim  tier  verdict    statistic  mean  CI          rule  seeds  time\n"
            "-----  ----  ---------  ---------  ----  ----------  ----  -----  ----\n"
            "c-1    cpu   supported  x          0.5   [0.4, 0.6]  > 0   3      1s\n")
    assert [(r["low"], r["high"]) for r in ledger.table_rows(text)] == [("0.4", "0.6")]


def test_a_session_updating_or_judging_across_says_so_and_writes_its_own_file(monkeypatch,
                                                                             tmp_path):
    on_a_cpu(monkeypatch, "SVE256", "AMD")
    ledger.write(tmp_path / "cpu.json", {"c-1": entry()})
    assert not ledger.Ledgers(tmp_path).strict  # unrecorded claims fail only when asked
    across = ledger.Ledgers(tmp_path)
    assert across.judge("c-new", "cpu", entry()).status == "new"  # in no file: not replicated
    updating = ledger.Ledgers(tmp_path, update=True, max_seeds=5)
    assert updating.path("cpu") == tmp_path / "cpu-SVE256-max-seeds-5.json"
    judged = updating.judge("c-1", "cpu", entry())
    assert (judged.status, judged.message) == \
        ("updated", f"ledger updated from this run ({tmp_path / 'cpu-SVE256-max-seeds-5.json'})")


def test_a_written_file_says_what_it_took_and_which_entries_of_gone_claims_it_dropped(tmp_path):
    ledgers = ledger.Ledgers(tmp_path, update=True)
    path = ledgers.path("cpu")  # this machine's
    ledger.write(path, {"c-1": entry(), "c-gone": entry(), "c-old": entry()})
    result = type("Result", (), {"id": "c-1", "tier": "cpu", "entry": asdict(entry())})
    assert ledgers.write([result]) == [f"1 entries to {path}"]
    ledgers.stale[path] = ["c-gone", "c-old"]
    assert ledgers.stale_lines() == [
        f"{path} holds 2 entries of claims no longer defined (c-gone, c-old): review, then "
        f"--claims-update drops them from the file it writes"]
    assert ledgers.write([result]) == [f"1 entries to {path}, 2 of claims no longer defined "
                                       f"dropped (c-gone, c-old)"]
    assert set(ledger.read(path)) == {"c-1"}


def test_a_sessions_history_on_other_kernels_and_seeds_is_of_its_own_files(monkeypatch, tmp_path):
    on_a_cpu(monkeypatch, "AVX2", "AMD")
    files = {"cpu-AVX2-seeds-3-6.json": 4, "cpu-AVX2-seeds-3-6-max-seeds-8.json": 8,
             "cpu-seeds-3-6.json": 5, "cpu-AVX2-seeds-3-5.json": 3}
    for name, n in files.items():
        ledger.write(tmp_path / name, {"c-x": entry(seeds=range(3, 3 + n))})
    history = ledger.Ledgers(tmp_path, offset=3, seeds=4).history("c-x", "cpu")
    assert sorted(len(e.seeds) for e in history) == [4, 8]
