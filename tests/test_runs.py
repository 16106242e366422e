"""Getting the runs claims ask for (normsys.orchestration.runs): which runs train together, what a
claim's run index keeps, and what --claims-list says a claim costs, in this process."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from normsys.orchestration import runs, runtimes
from normsys.orchestration.cache import run_key
from normsys.training.config import RunConfig, preset
from normsys.training.train import run_environment, train_with_state

SMALL = preset("ffn_stack", **{"train.steps": 2, "model.d": 8, "data.batch_shape": (2, 3, 8)})
SEEDS = [SMALL.override(**{"train.seed": s}) for s in range(3)]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    return tmp_path


@pytest.fixture
def session():
    """A session's runs: nothing fetched yet."""
    return runs.Runs()


def test_a_claims_index_keeps_each_run_once_with_its_data_and_training_time(cache, session):
    with session.recording() as fetched:
        records = [session.run(c) for c in SEEDS + SEEDS[:1]]  # seed 0 asked twice
    assert fetched == SEEDS + SEEDS[:1]
    session.write_index("c-x", "cpu", fetched)
    index = json.loads((cache / "claims" / "c-x-cpu.json").read_text())
    assert [r["config"]["train"]["seed"] for r in index["runs"]] == [0, 1, 2]
    assert RunConfig.from_dict(index["runs"][0]["config"]) == SEEDS[0]
    assert index["runs"][1]["seconds"] == records[1].wall_time and index["runs"][0]["data"] == ""
    assert runtimes.index_path("c-x", "paper") == cache / "claims" / "c-x-paper.json"
    session.write_index("c-none", "cpu", [])  # a claim that fetched nothing keeps no index
    assert not (cache / "claims" / "c-none-cpu.json").exists()


def test_cost_counts_cached_runs_and_the_training_the_others_took(cache, session):
    assert runtimes.cost("c-x", "cpu") == ("runs: not known until it has run once with this cache",
                                       None)
    with session.recording() as fetched:
        for c in SEEDS:
            session.run(c)
    session.write_index("c-x", "cpu", fetched)
    assert runtimes.cost("c-x", "cpu") == ("3 runs (3 cached)", 0)
    (cache / "runs" / f"{run_key(SEEDS[2])}.json").unlink()
    index = cache / "claims" / "c-x-cpu.json"
    body = json.loads(index.read_text())
    body["runs"][2]["seconds"] = 600.0
    body["runs"][1]["seconds"] = None  # never timed: counts nothing
    index.write_text(json.dumps(body))
    assert runtimes.cost("c-x", "cpu") == \
        ("3 runs (2 cached; the others ~10.0 min of training as last timed)", 600.0)
    (cache / "runs" / f"{run_key(SEEDS[1])}.json").unlink()
    body["runs"][2]["seconds"] = 62.5  # 1.04 min; a second more for the untimed run is 1.06
    index.write_text(json.dumps(body))
    assert runtimes.cost("c-x", "cpu") == \
        ("3 runs (1 cached; the others ~1.0 min of training as last timed)", 62.5)
    index.write_text("{}")
    assert runtimes.cost("c-x", "cpu") == ("runs: not known (its index cannot be read)", None)


def test_the_index_keys_runs_on_their_data(cache, data_env, session):
    """The index keeps each run's data digest, so that cost looks up the run's own entry."""
    cfg = preset("mlp", **{"data.n_train": 64, "data.n_test": 32, "model.d": 8})
    with session.recording() as fetched:
        record = session.run(cfg)
    session.write_index("c-mnist", "cpu", fetched)
    digest = json.loads((cache / "claims" / "c-mnist-cpu.json").read_text())["runs"][0]["data"]
    assert digest == session.task_of(cfg).digest and len(digest) == 64
    assert (cache / "runs" / f"{run_key(cfg, digest)}.json").is_file()
    assert runtimes.cost("c-mnist", "cpu") == ("1 runs (1 cached)", 0) and record.metrics


def test_without_a_cache_nothing_is_indexed_or_known(monkeypatch, session):
    monkeypatch.setenv("NORMSYS_CACHE", "off")
    assert runtimes.index_path("c", "cpu") is None
    session.write_index("c", "cpu", SEEDS)
    assert runtimes.cost("c", "cpu")[0] == "runs: not known until it has run once with this cache"


def test_several_seeds_of_one_config_train_stacked_on_cuda_and_one_by_one_otherwise(
        cache, monkeypatch, session):
    """On CUDA the uncached seeds of a configuration are one call of fit (one stacked model); a
    single config, the CPU, and a registered norm (no stacked form) train one run per call."""
    calls = []

    def fit(cfgs, task=None, read_every=None):
        calls.append([c.train.seed for c in cfgs])
        return [train_with_state(c) for c in cfgs]

    monkeypatch.setattr(runs, "fit", fit)
    session.runs(SEEDS)
    assert calls == [[0], [1], [2]]  # the CPU: each alone
    session = runs.Runs()
    calls.clear()
    monkeypatch.setattr(runs, "resolve_device", lambda name: torch.device("cuda"))
    others = [c.override(**{"model.d": 4, "data.batch_shape": (2, 3, 4)}) for c in SEEDS]
    with session.recording() as fetched:
        got = session.runs(others)
    assert calls == [[0, 1, 2]] and fetched == others  # one stacked call, each run recorded
    assert [r.run_config for r in got] == others
    assert session.runs(others) == got and calls == [[0, 1, 2]]  # memoized
    calls.clear()
    session.runs([SEEDS[0].override(**{"model.d": d, "data.batch_shape": (2, 3, d)}) for d in (10, 12)])
    assert calls == [[0], [0]]  # two configurations: not one stack
    calls.clear()
    session.runs([SEEDS[0].override(**{"model.d": 6, "data.batch_shape": (2, 3, 6)})])
    assert calls == [[0]]


def test_a_registered_norm_trains_one_run_per_call_on_cuda(cache, monkeypatch, session):
    from normsys.training import norms

    calls = []
    monkeypatch.setattr(runs, "fit", lambda cfgs, task=None: calls.append(len(cfgs)) or
                        [train_with_state(c) for c in cfgs])
    monkeypatch.setattr(runs, "resolve_device", lambda name: torch.device("cuda"))
    name = norms.register("wrapped_ln", norms.LayerNorm)
    try:
        session.runs([c.override(**{"model.norm": name}) for c in SEEDS])
    finally:
        del norms.NORMS[name]
    assert calls == [1, 1, 1]


def test_on_cuda_the_seed_groups_nobody_else_holds_train_first(cache, monkeypatch, session):
    """Two configurations' seeds asked at once, the first held by another worker: the second
    trains first (stacked), then the first is waited for."""
    calls = []
    monkeypatch.setattr(runs, "fit", lambda cfgs, task=None: calls.append(
        [(c.model.d, c.train.seed) for c in cfgs]) or [train_with_state(c) for c in cfgs])
    monkeypatch.setattr(runs, "resolve_device", lambda name: torch.device("cuda"))
    a, b = ([c.override(**{"model.d": d, "data.batch_shape": (2, 3, d)}) for c in SEEDS]
            for d in (4, 6))
    real, asked = runs.cached_runs, []

    def a_held_elsewhere(configs, data, compute, wait=True, progress=None, environment=None):
        asked.append((configs[0].model.d, wait))
        if configs[0] in a and not wait:
            return None
        return real(configs, data, compute, wait)

    monkeypatch.setattr(runs, "cached_runs", a_held_elsewhere)
    with session.recording() as fetched:
        got = session.runs(a + b)
    assert asked == [(4, False), (6, False), (4, True)]  # b is in the memo when waiting
    assert calls == [[(6, 0), (6, 1), (6, 2)], [(4, 0), (4, 1), (4, 2)]]
    assert [r.run_config for r in got] == a + b and fetched == a + b


def test_seed_groups_stack_each_configurations_seeds_on_cuda_only(monkeypatch):
    cnn = [preset("cnn", **{"train.seed": s}) for s in (0, 1)]  # convolutions: no stacked form
    mixed = [*SEEDS[:2], *cnn, SEEDS[2]]
    assert runs.seed_groups(mixed) == [[c] for c in mixed]  # the CPU: each run alone
    monkeypatch.setattr(runs, "resolve_device", lambda name: torch.device("cuda"))
    assert runs.seed_groups(mixed) == [SEEDS, [cnn[0]], [cnn[1]]]
    rules = [preset("resmlp", **{"train.method": m, "train.seed": s}) for m in ("fa", "dfa")
             for s in (0, 1)]  # every learning rule stacks, each rule's seeds apart
    assert runs.seed_groups(rules) == [rules[:2], rules[2:]]
    assert runs.seed_groups([]) == []


def test_run_waits_by_default_and_says_none_when_asked_not_to(cache, monkeypatch, session):
    """run(cfg) waits for a run another process holds; run(cfg, wait=False) answers None."""
    asked = []

    def held_elsewhere(configs, data, compute, wait=True, progress=None, environment=None):
        asked.append(wait)
        return None if not wait else [train_with_state(c)[0] for c in configs]

    monkeypatch.setattr(runs, "cached_runs", held_elsewhere)
    assert session.run(SEEDS[0], wait=False) is None and asked == [False]
    assert session.run(SEEDS[0]).run_config == SEEDS[0] and asked == [False, True]


def test_the_controls_runs_are_priced_once_past_the_claims_and_the_cache(cache, session, tmp_path):
    """Two controls sharing seed 0's run, one whose runs the table lacks: a run the claims plan
    (seed 1) is theirs, a run the cache holds is counted as cached, each other run once at its
    recorded seconds, and the control never timed is named."""
    for control, cfgs in (("control-a", SEEDS[:2]), ("control-b", [SEEDS[0], SEEDS[2]])):
        with session.recording() as fetched:
            for c in cfgs:
                session.run(c)
        session.write_index(control, "cpu", fetched)
    folder = tmp_path / "committed"
    table = runtimes.measure(cache, "cpu")
    runtimes.write(table, folder)
    names, claimed = ["control-a", "control-b", "control-new"], {SEEDS[1].fingerprint()}
    held = runtimes.control_work(names, claimed, folder)
    assert (held.todo, held.cached, held.untimed) == ({}, 2, ["control-new"])
    for seed in (1, 2):  # no longer cached: seed 1's run is the claims' to train
        for path in (cache / "runs").glob(f"{SEEDS[seed].fingerprint()}-*.json"):
            path.unlink()
    work = runtimes.control_work(names, claimed, folder)
    seconds = table["runs"][SEEDS[2].fingerprint()]
    assert (work.todo, work.cached) == ({SEEDS[2].fingerprint(): seconds}, 1)
    assert work.line() == (f"2 runs besides the claims' (1 cached; the others "
                           f"~{seconds / 60:.1f} min of training as recorded); 1 controls never "
                           f"timed (their runs are not known until they run once)")


def test_the_recorded_run_times_count_each_claims_runs_and_the_ones_it_alone_reads(
        cache, session, tmp_path):
    """Two claims sharing seed 0's run: each counts it, neither as its own."""
    for claim, cfgs in (("c-a", SEEDS[:2]), ("c-b", [SEEDS[0], SEEDS[2]])):
        with session.recording() as fetched:
            for c in cfgs:
                session.run(c)
        session.write_index(claim, "cpu", fetched)
    wall = {c.train.seed: session.run(c).wall_time for c in SEEDS}
    table = runtimes.measure(cache, "cpu")
    assert table["tier"] == "cpu" and table["device"].startswith("cpu (")
    assert table["claims"]["c-a"] == {"runs": 2, "seconds": round(wall[0] + wall[1], 1),
                                      "own_seconds": round(wall[1], 1), "untimed": 0,
                                      "fingerprints": sorted(c.fingerprint() for c in SEEDS[:2])}
    assert table["claims"]["c-b"]["own_seconds"] == round(wall[2], 1)
    assert table["runs"] == {c.fingerprint(): round(wall[c.train.seed], 1) for c in SEEDS}
    folder = tmp_path / "committed"
    assert runtimes.write(table, folder) == folder / "run-times-cpu.json"
    assert runtimes.read("cpu", folder) == table
    assert runtimes.seconds("c-b", "cpu", folder) == round(wall[0] + wall[2], 1)
    assert runtimes.seconds("c-none", "cpu", folder) == 0.0
    assert runtimes.read("paper", folder) == {"tier": "paper", "device": "", "claims": {}}
    assert runtimes.recorded_cost("c-a", "cpu", folder) == (
        f"2 runs, ~{table['claims']['c-a']['seconds'] / 60:.1f} min of training on "
        f"{table['device']} as recorded (claims/run-times-cpu.json)",
        table["claims"]["c-a"]["seconds"])
    assert runtimes.recorded_cost("c-none", "cpu", folder) is None
    assert runtimes.recorded_runs("c-b", "cpu", folder) == {
        c.fingerprint(): round(wall[c.train.seed], 1) for c in (SEEDS[0], SEEDS[2])}
    assert runtimes.recorded_runs("c-none", "cpu", folder) is None
    assert runtimes.run_seconds(SEEDS[2], folder) == (round(wall[2], 1), table["device"])
    assert runtimes.run_seconds(SEEDS[2].override(**{"model.d": 6}), folder) is None
    with pytest.raises(ValueError, match="no claim indexes of the paper tier"):
        runtimes.measure(cache, "paper")


def test_a_claim_without_an_index_costs_what_the_committed_run_times_say(cache, monkeypatch):
    monkeypatch.setattr(runtimes, "recorded_cost", lambda claim, tier: (f"{claim}/{tier} recorded", 7))
    assert runtimes.cost("c-x", "cpu") == ("c-x/cpu recorded", 7)
    row = runtimes.read("cpu")["claims"]["dm-l2-prevents-collapse"]
    assert row["runs"] == 3 and row["seconds"] > 0


def test_two_claim_files_controls_of_one_name_are_indexed_apart():
    """Two claim files may name a control alike: each keeps its own runs (and price)."""
    from types import SimpleNamespace

    from normsys.claims.items import control_index

    def index(module: str) -> str:
        return control_index(SimpleNamespace(path=Path(f"claims/{module}.py"),
                                             name="test_control_x[a-b]"))

    assert index("test_a") == "control-test_a.test_control_x_a-b_"
    assert index("test_a") != index("test_b")


def test_the_committed_run_times_name_only_claims_the_cpu_ledger_holds_and_controls_defined():
    """No row of a claim or control that no longer exists: a control's row is named by its test
    (control-<test name>, with its parameters)."""
    import re
    from types import SimpleNamespace

    from normsys.claims import ledger
    from normsys.claims.items import control_index
    from normsys.orchestration import runtimes

    held = {cid for cid, r in ledger.records(runtimes.FOLDER / "ledger").items() if r.of("cpu")}
    tests = runtimes.controls_defined()
    assert {control_index(SimpleNamespace(path=path, name=name))  # as the plugin indexes them
            for path in runtimes.FOLDER.glob("test_*.py")
            for name in re.findall(r"^def (test_control\w*)\(", path.read_text(), re.M)} == set(tests)
    rows = set(runtimes.read("cpu")["claims"])
    controls = {row for row in rows if row.startswith("control-")}
    assert rows - controls <= held
    assert {row for row in controls if runtimes.undefined(row, tests)} == set()


def test_run_times_merge_a_caches_claims_into_the_committed_table():
    """A cache holding a few claims' indexes updates their rows, not the table: the other rows
    stay while kept (a claim declared, a control defined), the runs no row reads go, each row's
    own seconds are counted again; a cache of another machine kind is refused."""
    row = lambda *fs: {"runs": len(fs), "seconds": 0, "own_seconds": 0,  # noqa: E731
                       "untimed": 0, "fingerprints": list(fs)}
    committed = {"tier": "cpu", "device": "cpu (AVX2, AMD), 2 cores",
                 "claims": {"a": row("f1", "f2"), "b": row("f1", "f2", "f3"),
                            "control-old": row("f4")},
                 "runs": {"f1": 1.0, "f2": 2.0, "f3": 3.0, "f4": 4.0}}
    measured = {**committed, "claims": {"a": row("f1", "f5")}, "runs": {"f1": 1.5, "f5": 5.0}}
    table = runtimes.merged(committed, measured, kept=lambda name: name != "control-old")
    assert set(table["claims"]) == {"a", "b"}
    assert table["runs"] == {"f1": 1.5, "f2": 2.0, "f3": 3.0, "f5": 5.0}
    assert (table["claims"]["a"]["seconds"], table["claims"]["a"]["own_seconds"]) == (6.5, 5.0)
    assert (table["claims"]["b"]["seconds"], table["claims"]["b"]["own_seconds"]) == (6.5, 5.0)
    elsewhere = {**measured, "device": "cpu (AVX512, AMD), 2 cores"}
    with pytest.raises(ValueError, match="a table holds one machine's times"):
        runtimes.merged(committed, elsewhere, kept=lambda name: True)
    fresh = runtimes.merged({"claims": {}}, measured, kept=lambda name: True)  # no table yet
    assert set(fresh["claims"]) == {"a"} and fresh["runs"] == measured["runs"]


def test_the_run_times_command_writes_the_table_or_says_what_is_missing(
        cache, session, monkeypatch, tmp_path, capsys):
    from normsys.__main__ import main
    monkeypatch.setattr(runtimes, "FOLDER", tmp_path / "checkout")  # the table and claim files
    assert main(["run-times", "--cache", str(cache)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {cache}: no claim indexes of the cpu tier") and err.count("\n") == 1
    with session.recording() as fetched:
        session.run(SEEDS[0])
    session.write_index("c-a", "cpu", fetched)
    assert main(["run-times"]) == 0  # the cache named by NORMSYS_CACHE
    assert capsys.readouterr().out == f"wrote {tmp_path / 'checkout' / 'run-times-cpu.json'}: 1 claims\n"
    assert runtimes.read("cpu")["claims"]["c-a"]["runs"] == 1
    # a control's index is kept while its test is defined (parametrized too), left out after
    (tmp_path / "checkout" / "test_x.py").write_text("def test_control_kept(runs):\n    pass\n")
    for name in ("control-test_x.test_control_kept_p1", "control-test_x.test_control_renamed"):
        session.write_index(name, "cpu", fetched)
    assert main(["run-times"]) == 0
    gone = cache / "claims" / "control-test_x.test_control_renamed-cpu.json"
    assert capsys.readouterr().out.endswith(
        f"2 claims\nleft out {gone}: a control's index whose test the claim files no longer "
        f"define\n")
    assert set(runtimes.read("cpu")["claims"]) == {"c-a", "control-test_x.test_control_kept_p1"}
    monkeypatch.setenv("NORMSYS_CACHE", "off")
    assert main(["run-times"]) == 2
    assert capsys.readouterr().err == "error: run-times: NORMSYS_CACHE is off; give --cache DIR\n"


@pytest.mark.parametrize("family,changes,said", [
    ("mlp", {"model.n_out": 9}, "model.n_out=9: the mnist data has 10 classes (labels 0-9); set "
                                "model.n_out >= 10"),
    ("char_gpt", {"model.vocab": 64}, "model.vocab=64: the tinyshakespeare data holds token ids up "
                                      "to 64; set model.vocab >= 65"),
    ("char_gpt", {"model.n_out": 64}, "model.n_out=64: the tinyshakespeare data has 65 characters "
                                      "to predict; set model.n_out >= 65"),
    ("encoder", {"model.vocab": 100}, "model.vocab=100: the ag_news data holds token ids up to "),
    ("mlp", {"data.name": "ag_news"}, "model.family=mlp reads float features; the ag_news data are "
                                      "token ids: take a family that reads token ids (char_gpt, "
                                      "encoder, lstm), or data of float features"),
    ("lstm", {"data.name": "mnist"}, "model.family=lstm reads token ids; the mnist data are float "
                                     "features: take a family that reads float features (cnn, "
                                     "ffn_stack, mlp, resmlp, tanh_mlp, tblock, vit), or data of "
                                     "token ids"),
])
def test_a_model_that_cannot_take_its_data_is_refused_before_training(
        data_env, session, monkeypatch, capsys, family, changes, said):
    from normsys.__main__ import main

    monkeypatch.setattr(runs, "fit", lambda *a, **k: pytest.fail("trained"))
    with pytest.raises(ValueError, match=f"^{re.escape(said)}"):
        session.run(preset(family, **changes))
    sets = [arg for k, v in changes.items() for arg in ("--set", f"{k}={v}")]
    for how in ("--no-cache", "--dry-run"):  # a dry run checks what the run checks
        assert main(["train", "--model", family, *sets, how]) == 2
        out, err = capsys.readouterr()
        assert err.startswith(f"error: {said}") and err.count("\n") == 1 and not out
    session.task_of(preset(family))  # the preset itself fits


def test_train_dry_run_states_the_recorded_training_time(capsys):
    from normsys.__main__ import main
    assert main(["train", "--model", "encoder", "--dry-run"]) == 0
    seconds, device = runtimes.run_seconds(preset("encoder"))
    assert capsys.readouterr().err == f"training: ~{seconds:.0f} s as recorded on {device}\n"
    assert main(["train", "--model", "encoder", "--set", "train.lr=3e-4", "--dry-run"]) == 0
    assert capsys.readouterr().err == "training: time not recorded for this config\n"


def test_each_data_setting_is_loaded_once_and_only_the_last_few_are_kept(session):
    shapes = [(2, 3, 8), (2, 4, 8), (2, 5, 8), (2, 6, 8), (2, 7, 8), (2, 3, 8)]
    cfgs = [SMALL.override(**{"data.batch_shape": s}) for s in shapes]
    first = session.task_of(cfgs[0])
    assert session.task_of(cfgs[0]) is first and first.shape == (2, 3, 8)
    for cfg, shape in zip(cfgs[1:5], shapes[1:5], strict=True):
        assert session.task_of(cfg).shape == shape  # each setting its own data
    assert len(session.tasks) == runs.KEEP_TASKS  # the first setting made room for the fifth
    assert session.task_of(cfgs[5]) is not first and len(session.tasks) == runs.KEEP_TASKS


def test_float_inputs_are_features_not_token_ids(session):
    from normsys.training.tasks import Classify

    x, y = torch.full((4, 8), 300.0), torch.tensor([0, 1, 0, 1])
    cfg = preset("mlp", **{"model.in_dim": 8, "model.vocab": 2})
    runs.fits(cfg, Classify(x, y, x, y))  # no vocabulary to check
    with pytest.raises(ValueError, match=r"^model.family=mlp reads float features; the mnist data "
                                         r"are token ids"):
        runs.fits(cfg, Classify(x.long(), y, x.long(), y))
    tokens = preset("encoder", **{"model.vocab": 2, "model.n_out": 2})
    with pytest.raises(ValueError, match=r"^model.vocab=2: the ag_news data holds token ids up "
                                         r"to 300; set model.vocab >= 301$"):
        runs.fits(tokens, Classify(x.long(), y, x.long(), y))


class Elsewhere:
    """A trainer in another place (normsys.orchestration.cluster's shape), training here, saying
    what it got."""

    def __init__(self, cuda: bool = False):
        self.cuda, self.calls, self.tasks = cuda, [], []

    def environment(self, cfg):
        return run_environment(cfg)  # it trains here

    def submit(self, cfgs, task):
        self.calls.append(("submit", cfgs))
        self.tasks.append(task)

    def train(self, cfgs, task):
        self.calls.append(("train", cfgs))
        self.tasks.append(task)
        return [train_with_state(c) for c in cfgs]


@pytest.mark.parametrize("cuda", [False, True])
def test_a_trainer_elsewhere_gets_every_missing_run_before_the_first_is_awaited(cache, cuda):
    trainer = Elsewhere(cuda)
    session = runs.Runs(trainer=trainer)
    session.run(SEEDS[0])
    trainer.calls.clear()
    assert [r.run_config for r in session.runs(SEEDS)] == SEEDS
    groups = [SEEDS[1:]] if cuda else [[SEEDS[1]], [SEEDS[2]]]  # seeds stack on its CUDA
    assert trainer.calls == [("submit", g) for g in groups] + [("train", g) for g in groups]
    assert trainer.tasks and all(t is session.task_of(SEEDS[0]) for t in trainer.tasks)
    trainer.calls.clear()
    other = [c.override(**{"model.d": 16, "data.batch_shape": (2, 3, 16)}) for c in SEEDS]
    assert session.plan([other]) == 3 and trainer.calls == [("submit", g) for g in (
        [other] if cuda else [[c] for c in other])]  # a plan groups as the trainer trains
    trainer.calls.clear()
    looks = [[c.override(**{"model.d": 24, "data.batch_shape": (2, 3, 24)}) for c in SEEDS]]
    looks = [looks[0][:1], looks[0]]  # a first look at one seed, a second at three
    assert runs.Runs(trainer=trainer).plan(looks) == 3
    assert trainer.calls == [("submit", g) for g in (  # each look's new seeds stack together
        [looks[0], looks[1][1:]] if cuda else [[c] for c in looks[1]])]


def test_a_plan_submits_the_longest_runs_first_and_none_the_cache_holds(cache, monkeypatch):
    trainer = Elsewhere()
    session = runs.Runs(trainer=trainer)
    session.run(SEEDS[0])
    trainer.calls.clear()
    seconds = {SEEDS[1].fingerprint(): 5.0, SEEDS[2].fingerprint(): 50.0}
    monkeypatch.setattr(runtimes, "run_seconds", lambda c: (seconds[c.fingerprint()], "box")
                        if c.fingerprint() in seconds else None)
    assert session.plan([SEEDS]) == 2
    assert trainer.calls == [("submit", [SEEDS[2]]), ("submit", [SEEDS[1]])]
    assert runs.Runs().plan([SEEDS]) == 0  # no trainer: nothing to hand
    assert runs.Runs(trainer=Elsewhere()).plan([SEEDS[:1]]) == 0  # another session: cached
    seconds = {SEEDS[1].fingerprint(): 0.5}  # a configuration never timed on any seed counts
    untimed = SMALL.override(**{"model.d": 16})  # nothing: it goes last
    later = Elsewhere()
    runs.Runs(trainer=later).plan([[untimed, SEEDS[1]]])
    assert later.calls == [("submit", [SEEDS[1]]), ("submit", [untimed])]


def test_a_run_kept_on_its_data_is_not_submitted_again(cache, data_env, session):
    cfg = preset("mlp", **{"data.n_train": 64, "data.n_test": 32, "model.d": 8})
    session.run(cfg)
    assert runs.Runs(trainer=Elsewhere()).plan([[cfg]]) == 0


def test_the_runs_a_claim_fetched_last_are_its_plan(cache, session):
    assert runs.planned("c-x", "cpu") == []
    with session.recording() as fetched:
        session.runs(SEEDS)
    session.write_index("c-x", "cpu", fetched)
    assert runs.planned("c-x", "cpu") == SEEDS
    (cache / "claims" / "c-x-cpu.json").write_text("{}")
    assert runs.planned("c-x", "cpu") == []


def test_each_task_of_a_sessions_lines_is_timed_once():
    from normsys.orchestration.runtimes import task_seconds

    log = "\n".join([
        "normsys: training mlp/layernorm/bp/s0 (cpu tier, aaaaaaaa) ...",
        "normsys: training encoder/l2/bp/s0 (paper tier, bbbbbbbb) with 2 seeds stacked ...",
        ".normsys: [1 runs done] mlp/layernorm/bp/s0 (cpu tier, aaaaaaaa): trained in 7 s (cpu)",
        "normsys: [2 runs done] encoder/l2/bp/s0 (paper tier, bbbbbbbb): trained in 30 s (cuda)",
        "normsys: [3 runs done] encoder/l2/bp/s1 (paper tier, cccccccc): trained in 30 s (cuda)",
        "normsys: [4 runs done] encoder/l2/bp/s0 (paper tier, bbbbbbbb): cached, trained in 30 s "
        "on 2026-11-24 (cuda)",
        "normsys: waiting for encoder/l2/bp/s1 (paper tier, cccccccc): another process is training",
        "normsys: training lstm/none/bp/s0 (cpu tier, dddddddd) ...",  # never finished
        # the lines of a session with a plan
        "normsys: training cnn/none/bp/s0 (cpu tier, eeeeeeee) ...",
        "normsys: [run 5 of 9, ~1.0 min of training left] cnn/none/bp/s0 (cpu tier, eeeeeeee): "
        "trained in 12 s (cpu)",
        "normsys: [cached] cnn/none/bp/s0 (cpu tier, eeeeeeee): trained in 12 s on 2026-11-26 (cpu)",
        "normsys: training cnn/none/bp/s1 (cpu tier, ffffffff) ...",
        "normsys: [run 10; 9 were planned] cnn/none/bp/s1 (cpu tier, ffffffff): trained in 3 s "
        "(cpu)",
    ])
    assert task_seconds(log) == [7.0, 30.0, 12.0, 3.0]


def test_the_expected_wall_lays_the_longest_tasks_first_and_is_bounded_by_the_longest():
    from normsys.orchestration.runtimes import expected_wall

    assert expected_wall([3, 5, 3, 4, 3], 2) == 10.0  # 5+3+... : longest first, not the best 9
    assert expected_wall([92.0, 1.0, 1.0], 8) == 92.0 and expected_wall([], 3) == 0.0
    assert expected_wall([2.0, 2.0, 2.0], 1) == 6.0
    with pytest.raises(ValueError, match="0 slots"):
        expected_wall([1.0], 0)


def test_a_plan_trains_here_longest_first_and_nothing_the_cache_holds(cache, monkeypatch):
    """Without a trainer, ``plan`` keeps the groups and ``train_planned`` trains them, longest
    first as the run times record them, skipping what the cache holds."""
    runs.Runs().run(SEEDS[0])  # another session's: cached
    seconds = {SEEDS[1].fingerprint(): 5.0, SEEDS[2].fingerprint(): 50.0}
    monkeypatch.setattr(runtimes, "run_seconds", lambda c: (seconds[c.fingerprint()], "box")
                        if c.fingerprint() in seconds else None)
    trained = []
    monkeypatch.setattr(runs, "fit", lambda cfgs, task: trained.append(cfgs) or
                        [train_with_state(c) for c in cfgs])
    assert runtimes.group_seconds(SEEDS) == 50.0  # seeds stacked: as long as the longest
    session = runs.Runs()
    assert session.plan([SEEDS]) == 0 and session.planned == [[SEEDS[2]], [SEEDS[0]], [SEEDS[1]]]
    shares = {SEEDS[2].fingerprint(): 50.0, SEEDS[1].fingerprint(): 5.0}
    assert session.planned_work(1) == (shares, 55.0) and session.planned_work(2) == (shares, 50.0)
    assert session.train_planned() == 2 and trained == [[SEEDS[2]], [SEEDS[1]]]
    assert session.planned == [] and session.train_planned() == 0
    assert [r.run_config for r in runs.Runs().runs(SEEDS)] == SEEDS and len(trained) == 2


def test_runs_on_seeds_never_timed_are_priced_as_their_configurations_timed_seeds(cache,
                                                                                  monkeypatch):
    """A replication on fresh seeds (--claims-seed-offset) trains configurations the run times
    record on other seeds: its plan is priced and ordered by those, not left at 0 (which would
    count the time left down from nothing and train in collection order)."""
    fresh = [SMALL.override(**{"train.seed": 7}), SMALL.override(**{"model.d": 16,
                                                                     "train.seed": 8})]
    seconds = {SEEDS[1].fingerprint(): 5.0,
               SMALL.override(**{"model.d": 16, "train.seed": 2}).fingerprint(): 50.0}
    monkeypatch.setattr(runtimes, "run_seconds", lambda c: (seconds[c.fingerprint()], "box")
                        if c.fingerprint() in seconds else None)
    assert [runtimes.group_seconds([c]) for c in fresh] == [5.0, 50.0]
    session = runs.Runs()
    assert session.plan([fresh]) == 0 and session.planned == [[fresh[1]], [fresh[0]]]
    assert session.planned_work(1) == ({fresh[1].fingerprint(): 50.0,
                                        fresh[0].fingerprint(): 5.0}, 55.0)


def test_a_planned_run_another_process_trains_is_left_to_it(cache, monkeypatch):
    """A worker takes the next planned group no other process holds, and never waits on one."""
    from filelock import FileLock

    session = runs.Runs()
    session.plan([SEEDS])
    task = session.task_of(SEEDS[1])
    (cache / "runs").mkdir(parents=True, exist_ok=True)
    trained = []
    worker = threading.Thread(target=lambda: trained.append(session.train_planned()))
    with FileLock(f"{cache / 'runs' / run_key(SEEDS[1], task.digest)}.lock"):  # another's
        worker.start()
        worker.join(60)
        assert not worker.is_alive() and trained == [2]  # it did not wait
    assert runs.lookup(SEEDS[1], task.digest) is None
    assert all(runs.lookup(c, task.digest) is not None for c in (SEEDS[0], SEEDS[2]))


def test_a_planned_run_that_cannot_train_is_left_to_its_claim(cache, data_env):
    """A group that fails before training (data missing, a config the data does not fit) is said
    and left to the claim that needs it, which fails with the whole message; the rest train."""
    said = []
    session = runs.Runs(progress=type("P", (runs.SILENT.__class__,), {
        "note": lambda self, line: said.append(line)})())
    wrong = preset("mlp", **{"data.n_train": 64, "data.n_test": 32, "model.d": 8,
                             "model.n_out": 1})
    session.plan([[wrong, SEEDS[1]]])
    assert len(session.planned_work(1)[0]) == 2  # a group that cannot be read: lacking
    assert session.train_planned() == 1
    assert len(said) == 1 and said[0].startswith("planned run mlp/") and \
        "left to its claim (model.n_out=1: the mnist data has 10 classes" in said[0]


def test_a_worker_whose_claims_are_done_trains_what_another_claim_asks_for(cache, monkeypatch):
    """A claim's groups go on the session's board while it fetches them; an idle worker trains
    those nobody holds, and stops once no other worker is at work."""
    monkeypatch.setattr(runs, "HELP_POLL", 0.05)
    board = runs.Board(cache / "sessions" / "uid")
    assert board.post([SEEDS[:1], SEEDS[1:]]) == [SEEDS[:1], SEEDS[1:]]
    assert board.wanted() == [SEEDS[:1], SEEDS[1:]]
    board.take([SEEDS[:1]])
    assert board.wanted() == [SEEDS[1:]]
    (cache / "sessions" / "uid" / "wanted" / "junk.json").write_text("{")  # unreadable: none
    assert board.wanted() == [SEEDS[1:]]
    gone = runs.Board(cache / "sessions" / "gone")
    (cache / "sessions" / "gone" / "wanted").rmdir()  # a board that cannot be written to:
    (cache / "sessions" / "gone" / "wanted").write_text("")  # a file where its folder goes
    assert gone.post([SEEDS[:1]]) == [] and gone.take([SEEDS[:1]]) is None

    helper = runs.Runs()
    helper.board = board
    assert helper.help("gw1") == 2  # nobody else at work: what is wanted, then done
    assert all(runs.lookup(c) is not None for c in SEEDS[1:]) and runs.lookup(SEEDS[0]) is None
    helped = []
    idle = threading.Thread(target=lambda: helped.append(helper.help("gw1")))
    with at_work_elsewhere(board, "gw0"):  # another worker, its claims still running
        idle.start()
        board.post([SEEDS[:1]])  # the busy worker's claim asks for another look's seeds
        deadline = time.monotonic() + 30
        while runs.lookup(SEEDS[0]) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert runs.lookup(SEEDS[0]) is not None and idle.is_alive()  # trained; waits for gw0
        board.close()  # gw0 is at work: the board stays
        assert (cache / "sessions" / "uid" / "gw0.lock").exists()
    idle.join(30)
    assert helped == [1] and not idle.is_alive()
    board.close()  # nobody at work: the last to leave removes the board
    assert not (cache / "sessions" / "uid").exists()


@contextmanager
def at_work_elsewhere(board: runs.Board, worker: str) -> Iterator[None]:
    """Another worker (a thread here) at work on ``board`` until the block ends."""
    held, done = threading.Event(), threading.Event()

    def hold():
        with board.at_work(worker):
            held.set()
            done.wait(30)

    other = threading.Thread(target=hold)
    other.start()
    held.wait(30)
    try:
        yield
    finally:
        done.set()
        other.join(30)


def test_nothing_is_planned_ahead_without_a_cache_that_keeps_it(monkeypatch, tmp_path):
    """Without a run cache (or with a read-only one) a planned run would train twice: ahead, and
    again when its claim asks."""
    monkeypatch.setenv("NORMSYS_CACHE", "off")
    session = runs.Runs()
    assert session.plan([SEEDS]) == 0 and session.planned == []
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    monkeypatch.setattr(runs, "writable", lambda root: False)
    assert session.plan([SEEDS]) == 0 and session.planned == []
    monkeypatch.setattr(runs, "writable", lambda root: True)
    session.plan([SEEDS])
    assert session.planned == [[c] for c in SEEDS]


def test_a_plans_cost_groups_its_runs_as_they_train_and_says_where_they_were_timed(
        cache, monkeypatch, session):
    """What the plan's line and --claims-list say a claim's runs cost: those the cache lacks,
    grouped as they train (seeds stacked on CUDA: a group costs its longest run), each timed
    by its own seed's record or another seed's of its configuration; untimed ones said."""
    times = {SEEDS[0].fingerprint(): (30.0, "cpu"), SEEDS[2].fingerprint(): (570.0, "H100")}
    monkeypatch.setattr(runtimes, "run_seconds", lambda cfg: times.get(cfg.fingerprint()))
    # seed 1 takes seed 0's time; seed 0 asked twice counts once
    assert session.cost(SEEDS + SEEDS[:1]) == (
        "3 runs (0 cached; the others ~10.5 min of training as recorded on H100 and cpu)", 630.0)
    monkeypatch.setattr(session, "_cuda", lambda: True)
    assert session.cost(SEEDS) == (
        "3 runs (0 cached; the others ~9.5 min of training as recorded on H100 and cpu)", 570.0)
    monkeypatch.setattr(session, "_cuda", lambda: False)
    assert session.cost([SMALL.override(**{"model.d": 16}), SEEDS[0]]) == (
        "2 runs (0 cached; the others ~0.5 min of training as recorded on cpu, 1 of them never "
        "timed)", None)
    assert session.cost([SMALL.override(**{"model.d": 16})]) == (  # no time to price it by
        "1 runs (0 cached; the others never timed, so their price is not known until they run "
        "once)", None)
    session.run(SEEDS[0])
    assert session.cost(SEEDS) == (
        "3 runs (1 cached; the others ~10.0 min of training as recorded on H100 and cpu)", 600.0)
    assert session.cost(SEEDS[:1]) == ("1 runs (1 cached)", 0)
    last = SMALL.override(**{"train.seed": max(t.max_seeds for t in runtimes.TIERS.values()) - 1})
    times = {last.fingerprint(): (12.0, "cpu")}  # the last seed any tier takes
    assert runtimes.similar_seconds(SEEDS[1]) == (12.0, "cpu")
    times = {}
    assert runtimes.similar_seconds(SEEDS[1]) is None


def test_every_worker_opens_the_sessions_board_and_the_last_two_may_both_close_it(cache):
    folder = cache / "sessions" / "uid"
    first, second = runs.Board(folder), runs.Board(folder)  # the same folder, two workers
    assert first.wanted() == second.wanted() == []
    first.close()
    second.close()  # gone already: nothing to do
    assert not folder.exists()


def test_a_helper_trains_every_wanted_group_past_one_that_fails_and_counts_them_all(
        cache, monkeypatch):
    assert runs.Runs().help("gw0") == 0  # no board: nothing to help with
    board = runs.Board(cache / "sessions" / "uid")
    board.post([[SEEDS[0]], [SEEDS[1]], [SEEDS[2]]])
    for age, cfg in enumerate(SEEDS):  # wanted oldest first: the failing one first
        os.utime(board._path([cfg]), (1e9 + age, 1e9 + age))
    helper = runs.Runs()
    helper.board = board
    train_free = helper._train_free

    def failing_first(group):
        if group == [SEEDS[0]]:
            raise RuntimeError("its data cannot be read")
        return train_free(group)

    monkeypatch.setattr(helper, "_train_free", failing_first)
    assert helper.help("gw1") == 2
    assert runs.lookup(SEEDS[0]) is None and all(runs.lookup(c) for c in SEEDS[1:])


def test_a_run_trained_ahead_is_kept_under_its_data_where_its_claim_looks(cache, data_env):
    """A planned or helped run of a data-dependent config (MNIST) is stored under its data's
    digest: the claim that asks for it then reads it, never trains it again."""
    cfg = preset("mlp", **{"data.n_train": 64, "data.n_test": 32, "model.d": 8})
    ahead = runs.Runs()
    assert ahead._train_free([cfg]) == 1
    digest = ahead.task_of(cfg).digest
    assert len(digest) == 64 and runs.lookup(cfg, digest) is not None
    assert ahead._train_free([cfg]) == 0  # the cache holds it now


def test_a_claims_missing_groups_are_on_the_board_while_it_fetches_them_and_taken_after(
        cache, monkeypatch):
    """What an idle worker can train for a claim: its groups this session does not hold, posted
    while it trains or waits for them, none left once it has them all."""
    board = runs.Board(cache / "sessions" / "uid")
    session = runs.Runs()
    session.board = board
    session.run(SEEDS[0])  # held already: never posted
    wanted_while_training = []
    fit = runs.fit
    monkeypatch.setattr(runs, "fit", lambda cfgs, task: wanted_while_training.append(
        sorted(c.train.seed for g in board.wanted() for c in g)) or fit(cfgs, task))
    assert [r.run_config for r in session.runs(SEEDS)] == SEEDS
    assert wanted_while_training == [[1, 2], [1, 2]] and board.wanted() == []


def test_a_board_posts_the_groups_it_can_write_past_one_it_cannot(cache, monkeypatch):
    board = runs.Board(cache / "sessions" / "uid")
    write = runs.atomic_write_text

    def full_for_seed_0(text, path):
        if SEEDS[0].fingerprint() in path.name:
            raise OSError("no space left on device")
        return write(text, path)

    monkeypatch.setattr(runs, "atomic_write_text", full_for_seed_0)
    assert board.post([[c] for c in SEEDS]) == [[SEEDS[1]], [SEEDS[2]]]
    assert sorted(g[0].train.seed for g in board.wanted()) == [1, 2]


def test_a_worker_sees_another_at_work_whichever_lock_file_comes_first(cache):
    board = runs.Board(cache / "sessions" / "uid")
    with board.at_work("gw0"):
        assert not board.others_at_work("gw0")
    with at_work_elsewhere(board, "gw1"):
        assert board.others_at_work("gw0") and not board.others_at_work("gw1")
    assert not board.others_at_work("gw0")


def test_a_session_that_planned_nothing_has_no_planned_work_and_hands_nothing_on(cache):
    session = runs.Runs()
    assert session.planned_work(4) == ({}, 0.0) and session.train_planned() == 0
    assert session.submit([[c] for c in SEEDS]) == 0  # no trainer: nothing handed


def test_a_stacked_groups_seconds_are_shared_by_its_seeds(cache, monkeypatch):
    """On CUDA one config's seeds train as one group, as long as its longest seed: each seed's
    share is that over the seeds, and the plan's wall is the group's."""
    monkeypatch.setattr(runtimes, "run_seconds", lambda c: (30.0 + c.train.seed, "H100"))
    session = runs.Runs()
    session.planned = [SEEDS]  # as plan() groups them on CUDA
    shares, wall = session.planned_work(2)
    assert shares == {c.fingerprint(): pytest.approx(32.0 / 3) for c in SEEDS} and wall == 32.0


def test_the_cpu_tier_with_its_controls_fits_its_budget():
    """The committed run times of the CPU tier (every run of its claims and negative controls,
    once) take at most the tier's budget cold on two processes of a 2-core AMD AVX2 machine (a
    table measured on a faster kind scaled to it): CI's tier, sized so that a cold run lands.
    A new claim or a larger preset that breaks it needs a smaller setting, not a longer CI."""
    from normsys.training.tiers import DEFAULT, TIERS

    table = runtimes.read(DEFAULT)
    wall = runtimes.budget_wall(table)
    assert wall is not None, f"run times measured on {table['device']!r}: a kind " \
                             f"runtimes.TO_BUDGET_KIND does not scale to the budget's"
    assert wall <= TIERS[DEFAULT].budget_minutes, f"~{wall:.1f} min cold on 2 processes"
    three = {**table, "runs": {"a": 60.0, "b": 60.0, "c": 60.0}}  # two minutes on two processes
    scale = runtimes.TO_BUDGET_KIND[table["device"].rpartition(", ")[0]]
    assert runtimes.budget_wall(three) == pytest.approx(2 * scale)


def test_prices_take_this_machines_pace_from_the_runs_it_trained(tmp_path, monkeypatch):
    """With MIN_PACED or more of the table's runs in the run cache, made here by this code, a
    run's price is its recorded seconds times the median of their wall times over the recorded
    ones, and says so; with fewer, or in another environment, the table's seconds as recorded.
    Runs the table times under a second, and damaged entries, do not count."""
    from normsys import __version__
    from normsys.orchestration.cache import code_digest, environment_digest

    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path / "cache"))
    folder, made = tmp_path / "committed", tmp_path / "cache" / "runs"
    cfgs = [SMALL.override(**{"train.seed": s}) for s in range(24)]
    times = {c.fingerprint(): 10.0 for c in cfgs} | {cfgs[23].fingerprint(): 0.5}
    runtimes.write({"tier": "cpu", "device": "cpu (X)", "claims": {}, "runs": times}, folder)
    made.mkdir(parents=True)

    def trained(c: RunConfig, wall, environment: dict | None = None) -> None:
        env = environment_digest(environment or runtimes.trained_in(c))
        (made / f"{c.fingerprint()}-c{code_digest()}-e{env}-v{__version__}.json").write_text(
            json.dumps({"record": {"wall_time": wall}}) if wall else "{")

    for c in cfgs[:19]:
        trained(c, 20.0)
    trained(cfgs[19], None)  # damaged
    trained(cfgs[20], 30.0, {**runtimes.trained_in(cfgs[20]), "threads": "7"})  # elsewhere
    trained(cfgs[23], 100.0)  # timed under a second
    assert runtimes.run_seconds(cfgs[0], folder) == (10.0, "cpu (X)")  # 19 runs: too few
    runtimes.paced.cache_clear()
    trained(cfgs[21], 20.0)
    trained(cfgs[22], 5.0)
    assert runtimes.run_seconds(cfgs[0], folder) == (
        20.0, "cpu (X), x2.00 for this machine's pace (the median over 21 of its runs)")
    assert runtimes.trained_in(cfgs[0])["threads"] == "1"  # the runs' own, not this process's
