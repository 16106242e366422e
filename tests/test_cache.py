"""Run cache: round trip, corruption recovery, data digests, disabled cache, concurrent
workers, and what it says it did."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import shutil
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
import torch

from normsys.orchestration import cache, progress
from normsys.orchestration.cache import cached_runs, run_key
from normsys.orchestration.progress import SILENT, described
from normsys.training.config import preset
from normsys.training.provenance import code_text, cpu_vendor, numeric_environment
from normsys.training.record import trained_model
from normsys.training.train import run_environment, train_with_state

CFG = preset("ffn_stack", **{"train.steps": 3, "model.d": 16, "data.batch_shape": (4, 5, 16)})


def cached_run(cfg, compute, data: str = "", progress=SILENT):
    return cached_runs([cfg], data, lambda cfgs: [compute(c) for c in cfgs], progress=progress)[0]


def counting(log: Path):
    def compute(cfg):
        with log.open("a") as fh:
            fh.write("x")
        return train_with_state(cfg)
    return compute


def test_round_trip_reuses_the_stored_run(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    log = tmp_path / "calls"
    first = cached_run(CFG, counting(log))
    second = cached_run(CFG, counting(log))
    assert log.read_text() == "x" and first == second
    model = trained_model(second)
    assert sum(p.numel() for p in model.parameters()) > 0


def test_corrupted_entries_are_recomputed(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    log = tmp_path / "calls"
    cached_run(CFG, counting(log))
    json_path = tmp_path / "runs" / f"{run_key(CFG)}.json"
    assert json_path.exists()
    json_path.write_text(json_path.read_text()[:100])  # truncated
    cached_run(CFG, counting(log))
    state = tmp_path / "runs" / f"{run_key(CFG)}.pt"
    state.write_bytes(b"garbage")  # weights that no longer match their checksum
    record = cached_run(CFG, counting(log))
    assert log.read_text() == "xxx"
    weights, fresh = trained_model(record).state_dict(), train_with_state(CFG)[1]
    assert weights.keys() == fresh.keys() and all(torch.equal(weights[k], fresh[k]) for k in fresh)


def test_cache_off_always_computes(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMSYS_CACHE", "off")
    log = tmp_path / "calls"
    cached_run(CFG, counting(log))
    cached_run(CFG, counting(log))
    assert log.read_text() == "xx"


def _worker(cache: str, log: str, out: str) -> None:
    import os

    os.environ["NORMSYS_CACHE"] = cache

    def slow(cfg):
        with open(log, "a") as fh:
            fh.write("x")
        time.sleep(1.0)  # long enough for the other worker to arrive and wait
        return train_with_state(cfg)

    Path(out).write_text(cached_run(CFG, slow).to_json())


def test_concurrent_workers_train_once_and_read_the_same_record(tmp_path):
    ctx = multiprocessing.get_context("spawn")  # fork deadlocks once torch's thread pool is up
    log = tmp_path / "calls"
    procs = [ctx.Process(target=_worker, args=(str(tmp_path), str(log), str(tmp_path / f"o{i}")))
             for i in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert all(p.exitcode == 0 for p in procs)
    assert log.read_text() == "x"
    outs = {(tmp_path / f"o{i}").read_text() for i in range(3)}
    assert len(outs) == 1


def test_the_same_config_on_other_data_retrains(tmp_path, monkeypatch):
    """The key holds the digest of the data a run read: other data, another entry."""
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    log = tmp_path / "calls"
    cached_run(CFG, counting(log), data="a" * 64)
    cached_run(CFG, counting(log), data="a" * 64)
    cached_run(CFG, counting(log), data="b" * 64)
    assert log.read_text() == "xx"


def test_the_time_left_is_the_plans_untrained_seconds_at_the_pace_so_far_over_its_places():
    plan = {"plan": {"a": 60.0, "b": 90.0}, "places": 2}
    assert progress.seconds_left(plan) == 75.0  # nothing trained: as recorded
    assert progress.seconds_left({**plan, "done": 60.0, "took": 30.0, "estimated": 60.0}) == 22.5
    assert progress.seconds_left({**plan, "took": 1.0, "estimated": 0.5}) == 150.0  # twice as slow
    assert progress.seconds_left({**plan, "estimated": 30.0}) == 0.0  # none took any time yet
    assert progress.seconds_left({**plan, "done": 200.0}) == 0.0  # never below nothing


def test_the_tally_counts_each_run_at_its_share_and_the_lines_say_when_and_where(tmp_path):
    """Two seeds stacked take half the group's time each; a planned run counts its recorded
    time, an unplanned one what it took; a cached run is read, with when and where it trained."""
    from types import SimpleNamespace

    cfgs = [CFG.override(**{"train.seed": s}) for s in range(2)]
    read, write = os.pipe()
    said = progress.Progress(write, tmp_path / "tally")
    try:
        said.expect({cfgs[0].fingerprint(): 30.0}, places=1)
        said.started(cfgs)
        for cfg in cfgs:
            said.finished(SimpleNamespace(config=cfg.to_dict(), env={"node": "n7"},
                                          wall_time=50.0), cached=False)
        said.finished(SimpleNamespace(config=cfgs[0].to_dict(), env={"date": "2026-11-26 12:03"},
                                      wall_time=49.6), cached=True)
        said.finished(SimpleNamespace(config=cfgs[1].to_dict(), env={}, wall_time=7.0),
                      cached=True)
    finally:
        os.close(write)
    lines = os.read(read, 1 << 16).decode().splitlines()
    os.close(read)
    assert said._update(None) == {"plan": {cfgs[0].fingerprint(): 30.0}, "places": 1,
                                  "trained": 2, "took": 50.0, "estimated": 55.0, "done": 30.0,
                                  "read": 2}
    assert lines[0] == f"normsys: training {progress.label(cfgs[0])} with 2 seeds stacked ... " \
                       f"(~30 s as priced)"  # the group's price: the shares of its runs planned
    assert lines[1].endswith("; node n7)") and lines[2].endswith("; node n7)")
    assert ": trained in 50 s on 2026-11-26 12:03 (" in lines[3] and "node" not in lines[3]
    assert lines[3].startswith("normsys: [cached] ")
    assert ": trained in 7 s on an earlier session (" in lines[4]


def test_progress_says_trained_cached_and_retrained(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path / "cache"))
    read, write = os.pipe()
    said = progress.Progress(write)
    try:
        cached_run(CFG, train_with_state, progress=said)
        cached_run(CFG, train_with_state, progress=said)
        json_path = tmp_path / "cache" / "runs" / f"{run_key(CFG)}.json"
        json_path.write_text("{}")
        cached_run(CFG, train_with_state, progress=said)
    finally:
        os.close(write)
    lines = os.read(read, 1 << 16).decode().splitlines()
    os.close(read)
    # what differs from the family's preset is in the label: d, batch shape, steps
    label = f"ffn_stack/layernorm/bp/s0 d=16 batch_shape=(4, 5, 16) steps=3 (cpu tier, " \
            f"{CFG.fingerprint()[:8]})"
    assert lines[0] == f"normsys: training {label} ..."
    assert lines[1].startswith(f"normsys: [run 1] {label}: trained in ")
    assert lines[1].endswith(f" s ({numeric_environment()['device']}, "
                             f"{torch.get_num_threads()} thread(s), torch {torch.__version__})")
    assert lines[2].startswith(f"normsys: [cached] {label}: trained in ")
    assert "cannot be read" in lines[3] and f"retraining {label}" in lines[3]
    assert lines[5].startswith(f"normsys: [run 2] {label}: trained in ")


def test_a_planned_run_says_k_of_n_and_the_time_left_at_the_pace_kept_so_far(tmp_path):
    """With a plan (fingerprint -> recorded seconds) on two processes: the first run, planned at
    40 s, took 80: the plan's other 60 s are 120 at that pace, on two processes 1.0 min; a run
    outside the plan counts on past it; the tally is one file the session's processes share."""
    from types import SimpleNamespace

    cfgs = [CFG.override(**{"train.seed": s}) for s in range(3)]
    plan = {cfgs[0].fingerprint(): 40.0, cfgs[1].fingerprint(): 60.0}
    counter = tmp_path / "tally"
    read, write = os.pipe()
    first, second = progress.Progress(write, counter), progress.Progress(write, counter)
    try:
        first.expect(plan, places=2)
        for said, cfg, took in ((first, cfgs[0], 80.0), (second, cfgs[1], 100.0),
                                (first, cfgs[2], 5.0)):
            said.finished(SimpleNamespace(config=cfg.to_dict(), env={}, wall_time=took),
                          cached=False)
    finally:
        os.close(write)
    lines = os.read(read, 1 << 16).decode().splitlines()
    os.close(read)
    assert [line.split("]")[0] for line in lines] == [
        "normsys: [run 1 of 2, ~1.0 min of training left",
        "normsys: [run 2 of 2, ~0.0 min of training left", "normsys: [run 3; 2 were planned"]
    assert progress.where_in_plan({"trained": 1, "took": 30.0, "estimated": 0.0, "untimed": 1,
                                   "plan": {"a": 0.0, "b": 90.0}, "places": 1}) == \
        "run 1 of 2, ~1.5 min of training left"  # nothing timed yet: the recorded pace
    assert progress.where_in_plan({"trained": 1, "took": 30.0, "estimated": 30.0, "done": 30.0,
                                   "plan": {"a": 0.0, "b": 0.0, "c": 30.0}, "places": 1}) == \
        "run 1 of 3, ~0.0 min of training left besides 2 runs never timed"  # not "~0.0 min" alone
    assert progress.where_in_plan({"trained": 0, "plan": {"a": 600.0}, "places": 1}) == \
        "run 0 of 1, ~10.0 min of training left"


def test_the_time_left_counts_out_the_runs_never_timed_as_they_train():
    """A plan of two runs never timed (price 0) and one of 30 s: each line says how many of the
    untimed runs are still to train, since the minutes count none of them."""
    from types import SimpleNamespace

    cfgs = [CFG.override(**{"train.seed": s}) for s in range(3)]
    said = progress.Progress()
    said.expect({cfgs[0].fingerprint(): 0.0, cfgs[1].fingerprint(): 0.0,
                 cfgs[2].fingerprint(): 30.0}, places=1)
    lines = []
    for cfg in cfgs:
        said.finished(SimpleNamespace(config=cfg.to_dict(), env={}, wall_time=30.0), cached=False)
        lines.append(progress.where_in_plan(said.tally))
    assert lines == ["run 1 of 3, ~0.5 min of training left besides 1 run never timed",
                     "run 2 of 3, ~0.5 min of training left", "run 3 of 3, ~0.0 min of training left"]


def drained(fd: int) -> Callable[[], str]:
    """Read the pseudo-terminal whose controller side is ``fd`` as it is written (a terminal
    that no one reads blocks its writers); the function returned gives all that was written,
    once the terminal side is closed."""
    import threading

    out: list[bytes] = []

    def read() -> None:
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:  # EIO: the terminal side is closed and everything read
                return
            if not chunk:
                return
            out.append(chunk)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def written() -> str:
        reader.join()
        os.close(fd)
        return b"".join(out).decode()

    return written


def looked(looks: list[float]) -> float:
    """A clock one second on at each reading, kept in ``looks``."""
    looks.append(float(len(looks)))
    return looks[-1]


def test_on_a_terminal_a_bar_shows_the_plan_and_the_time_left(tmp_path):
    """A command training a plan on a terminal keeps a bar of it below its lines (k of N runs,
    the time left counting down between runs: here a clock 1 s on at each look) and each line
    clears the bar first; on a pipe the same calls write the lines alone."""
    import fcntl
    import struct
    import termios
    from types import SimpleNamespace

    cfgs = [CFG.override(**{"train.seed": s}) for s in range(2)]
    plan = {c.fingerprint(): 60.0 for c in cfgs}
    controller, terminal = os.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 120, 0, 0))
    on_terminal = drained(controller)
    read, write = os.pipe()
    for fd in (terminal, write):
        said = progress.Progress(fd, tmp_path / f"tally-{fd}")
        said.expect(plan, places=1)
        looks: list[float] = []  # the clock's readings: a second apart
        clock = partial(looked, looks)
        with said.bar(tick=0.01, clock=clock):
            deadline = time.monotonic() + 10
            while fd == terminal and len(looks) < 15 and time.monotonic() < deadline:
                time.sleep(0.01)  # 14 s of the countdown drawn
            said.finished(SimpleNamespace(config=cfgs[0].to_dict(), env={}, wall_time=60.0),
                          cached=False)
            time.sleep(0.1)
        os.close(fd)
    on_terminal, on_pipe = on_terminal(), os.read(read, 1 << 16).decode()
    os.close(read)
    before, after = on_terminal.split("\r\x1b[Knormsys: [run 1 of 2")
    assert "0 of 2 runs trained, ~2.0 min of training left" in before
    assert "0 of 2 runs trained, ~1.9 min of training left" in before  # counting down
    assert "1 of 2 runs trained, ~1.0 min of training left" in after  # 60 s of 120 trained
    assert after.startswith(", ~1.0 min of training left]")
    assert on_pipe.startswith("normsys: [run 1 of 2, ~1.0 min of training left]")
    assert on_pipe.count("\n") == 1 and "runs trained" not in on_pipe


def test_cached_runs_compute_only_the_missing_ones_together(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    cfgs = [CFG.override(**{"train.seed": s}) for s in range(3)]
    cached_run(cfgs[1], train_with_state)
    calls = []

    def many(missing):
        calls.append([c.train.seed for c in missing])
        return [train_with_state(c) for c in missing]

    records = cached_runs(cfgs, "", many)
    assert calls == [[0, 2]] and [r.run_config.train.seed for r in records] == [0, 1, 2]
    assert cached_runs(cfgs, "", many) == records and len(calls) == 1


def _hold_lock(lock_path: str, ready: str, seconds: float) -> None:
    from filelock import FileLock

    with FileLock(lock_path):
        Path(ready).write_text("held")
        time.sleep(seconds)


def test_get_runs_trains_what_is_free_before_waiting_for_a_busy_run(tmp_path, monkeypatch):
    """Two xdist workers needing the same runs split them: a run another process holds is left
    for last instead of being queued behind."""
    from normsys.orchestration import runs

    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    cfgs = [CFG.override(**{"train.seed": s}) for s in range(2)]
    order = []

    def logged(cfgs, task=None, read_every=None):
        order.extend(c.train.seed for c in cfgs)
        return [train_with_state(c) for c in cfgs]

    monkeypatch.setattr(runs, "fit", logged)
    (tmp_path / "runs").mkdir()
    ready = tmp_path / "ready"
    lock = tmp_path / "runs" / f"{run_key(cfgs[0])}.lock"
    holder = multiprocessing.get_context("spawn").Process(
        target=_hold_lock, args=(str(lock), str(ready), 6.0))
    holder.start()
    deadline = time.monotonic() + 60
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    said = tmp_path / "progress.txt"
    fd = os.open(said, os.O_WRONLY | os.O_CREAT)
    session = runs.Runs(progress.Progress(fd))
    try:
        records = session.runs(cfgs)
    finally:
        os.close(fd)
    holder.join(60)
    assert holder.exitcode == 0
    assert order == [1, 0]  # seed 1 first, seed 0 once the other process let go of it
    waiting = f"waiting for {progress.label(cfgs[0])}: another process is training it"
    assert waiting in said.read_text()  # not silent while it waits
    assert [r.run_config.train.seed for r in records] == [0, 1]
    assert session.runs(cfgs) == records and order == [1, 0]  # memoized


def package_copy(tmp_path: Path, name: str = "normsys") -> Path:
    import shutil

    from normsys.orchestration import cache

    copy = tmp_path / name / "normsys"
    shutil.copytree(cache.NORMSYS, copy, ignore=shutil.ignore_patterns("datafiles", "__pycache__"))
    return copy


def all_modules(package: Path) -> list[str]:
    return sorted(".".join(p.relative_to(package).with_suffix("").parts).removesuffix("__init__")
                  .rstrip(".") for p in package.rglob("*.py"))


def test_the_training_package_holds_everything_the_entry_points_import():
    """Every normsys module a fresh interpreter holds after importing the entry points, and every
    one their sources import (inside functions too), is in the training package: nothing outside
    it can change a record. The key is those modules, less the ones keyed by value."""
    import subprocess
    import sys

    from normsys.orchestration import cache

    entry = ", ".join(f"normsys.{m}" for m in cache.ENTRY_POINTS)
    shown = subprocess.run(
        [sys.executable, "-c", f"import sys, {entry}; print(*sorted(m for m in sys.modules "
                               f"if m == 'normsys' or m.startswith('normsys.')))"],
        capture_output=True, text=True, check=True).stdout.split()
    loaded = {m.partition(".")[2] for m in shown}
    imported = set(cache.imported_closure(cache.ENTRY_POINTS))
    assert loaded <= imported, sorted(loaded - imported)
    package = {m for m in all_modules(cache.NORMSYS) if m.split(".")[0] == cache.TRAINING}
    assert imported <= package | {""}, f"the training path imports {sorted(imported - package)} " \
                                       f"from outside normsys.{cache.TRAINING}: move it in, or " \
                                       f"stop importing it"
    path = set(cache.training_path())
    assert path == imported - set(cache.KEYED_BY_VALUE)
    assert set(cache.KEYED_BY_VALUE) <= imported  # a module no run imports needs no exception
    # the learning rule's gradients and the probes, the step log: measured into every record
    assert {f"{cache.TRAINING}.{m}" for m in ("measure", "steplog", "train", "batched", "models",
                                              "tasks")} | {""} <= path
    assert not {"report", "plugin", "verdict", "runs", "cache", "scorecard"} & path


def tiny(name: str) -> list:
    """The experiment ``name`` at the CPU tier cut to a few steps on a few rows, and the arms
    whose code differs from its own: another learning rule, stacked seeds."""
    from normsys.training.config import preset

    small = {"train.steps": 2, "train.epochs": 1, "train.eval_batches": 1,
             "train.eval_train_rows": 8, "train.batch_size": 8, "train.probe_batch": 8}
    cfg = preset(name, **small)
    if cfg.data.name in ("mnist", "ag_news"):
        cfg = cfg.override(**{"data.n_train": 32, "data.n_test": 16})
    arms = [[cfg], [cfg, cfg.override(**{"train.seed": 1})]]
    if name == "resmlp":
        arms += [[cfg.override(**{"train.method": m})] for m in ("fa", "dfa")]
    return arms


def test_a_run_executes_only_code_the_key_holds():
    """What reaches a run, traced: every normsys function that executes while a run of each
    experiment trains (one seed, stacked seeds, each learning rule), given its config and data,
    lies in a module of the key, and none of a module keyed by value executes."""
    import sys

    from normsys.orchestration import cache
    from normsys.training.batched import check_batchable, train_seeds
    from normsys.training.config import EXPERIMENTS
    from normsys.training.tasks import make_task
    from normsys.training.train import fit

    ran: set[str] = set()
    root = str(cache.NORMSYS)

    def seen(frame, event, arg):
        if event == "call" and frame.f_code.co_filename.startswith(root):
            ran.add(frame.f_code.co_filename)

    for name in EXPERIMENTS:
        for cfgs in tiny(name):
            task = make_task(cfgs[0])  # the data: its digest keys the run
            if len(cfgs) > 1:
                try:
                    check_batchable(cfgs)
                except ValueError:  # convolutions: their seeds train one by one
                    continue
            sys.setprofile(seen)
            try:
                train_seeds(cfgs, task) if len(cfgs) > 1 else fit(cfgs, task)
            finally:
                sys.setprofile(None)
    modules = {str(cache.module_file(m)): m for m in cache.imported_closure(cache.ENTRY_POINTS)}
    executed = {modules.get(f, f) for f in ran}
    assert executed <= set(cache.training_path()), sorted(executed - set(cache.training_path()))
    assert not executed & set(cache.KEYED_BY_VALUE)
    assert {f"{cache.TRAINING}.{m}" for m in ("train", "batched", "models", "norms", "tasks",
                                              "measure", "feedback", "stacked", "steplog")} \
        <= executed


def test_a_tier_setting_reaches_a_run_through_its_fingerprint_and_data(tmp_path):
    """The tier table is keyed by value: a changed CPU-tier size moves the fingerprint of the
    configs it reaches and leaves the code digest alone; a tier's data pool moves the rows the
    data digest is taken of."""
    import subprocess
    import sys

    from normsys.orchestration import cache

    copy = package_copy(tmp_path)
    tiers = copy / cache.TRAINING / "tiers.py"
    ask = ("from normsys.orchestration.cache import code_digest; "
           "from normsys.training.config import preset; "
           "from normsys.training.data import ag_news_pool; "
           "print(code_digest(), preset('lstm').fingerprint(), preset('cnn').fingerprint(), "
           "len(ag_news_pool('cpu')[0]))")

    def shown() -> list[str]:
        env = {**os.environ, "PYTHONPATH": str(copy.parent), "HF_HUB_OFFLINE": "1",
               "NORMSYS_DATA": str(cache.NORMSYS / "datafiles")}
        return subprocess.run([sys.executable, "-c", ask], env=env, capture_output=True,
                              text=True, check=True, cwd=tmp_path).stdout.split()

    before = shown()
    source = tiers.read_text()
    tiers.write_text(source.replace('"lstm": {"model.d": 128', '"lstm": {"model.d": 96'))
    code, lstm, cnn, rows = shown()
    assert code == before[0] and lstm != before[1] and cnn == before[2]
    tiers.write_text(source.replace('variants=False, budget_minutes=30',
                                    'variants=False, budget_minutes=30, full_data=True'))
    assert shown()[3] != before[3]  # the paper tier's pool: every row there is
def test_an_import_from_outside_the_training_package_is_found(tmp_path):
    from normsys.orchestration import cache

    copy = package_copy(tmp_path)
    train = copy / cache.TRAINING / "train.py"
    later = "\n\ndef later():\n    from normsys.claims.report import docs\n"
    train.write_text(train.read_text() + later)
    closure = set(cache.imported_closure(cache.ENTRY_POINTS, copy))
    outside = {m for m in closure if m.split(".")[0] != cache.TRAINING}
    assert {"claims.report", "claims.verdict"} <= outside  # and what it imports
    assert {"claims.report", "claims.verdict"} <= set(cache.training_path(copy))  # and keyed


def test_the_key_follows_every_module_a_run_imports_and_nothing_else(tmp_path):
    """A statement added to any module a run imports (or to the normsys __init__ its import runs),
    bar the ones keyed by value, changes the code digest (every cached run retrains); the same edit
    of any other module does not, and neither does a comment or a docstring edited anywhere."""
    from normsys.orchestration import cache

    copy = package_copy(tmp_path)
    before = cache.code_digest.__wrapped__(copy)
    assert before == cache.code_digest()  # a copy of the same code keys the same runs
    inside = set(cache.training_path(copy))
    assert inside == set(cache.imported_closure(cache.ENTRY_POINTS, copy)) - \
        set(cache.KEYED_BY_VALUE)
    for module in all_modules(copy):
        source = cache.module_file(module, copy)
        original = source.read_bytes()
        try:
            source.write_bytes(original + b"\n# a comment\n")
            assert cache.code_digest.__wrapped__(copy) == before, module
            source.write_bytes(original.replace(b'"""', b'""" Edited.', 1))
            assert cache.code_digest.__wrapped__(copy) == before, module
            source.write_bytes(original + b"\nX = 1\n")
            assert (cache.code_digest.__wrapped__(copy) != before) == (module in inside), module
        finally:
            source.write_bytes(original)
    (copy / cache.TRAINING / "new.py").write_text("X = 1\n")  # a module no run imports
    assert cache.code_digest.__wrapped__(copy) == before
    train = copy / cache.TRAINING / "train.py"
    train.write_text(train.read_text() + "\nfrom normsys.training import new\n")  # now one does
    assert cache.code_digest.__wrapped__(copy) != before
    assert f"-c{cache.code_digest()}-" in run_key(CFG)


def test_the_code_text_keeps_every_token_that_can_change_a_number(tmp_path):
    """What the digest reads: comments, docstrings, blank lines and line breaks inside brackets go;
    a number, a name, an indentation or a string that is not a docstring stays."""
    base = ('import torch\n\n\ndef f(x):\n    """Doc."""\n    return x * 2  # two\n\n\n'
            'class A:\n    y = (1,\n         2)\n')
    path = tmp_path / "m.py"

    def text(source: str) -> bytes:
        path.write_text(source)
        return code_text(path)

    same = [base + "# more\n", base.replace('"""Doc."""', '"""Other,\n    two lines."""  # c'),
            base.replace('    """Doc."""\n', ""), '"""A module."""\n' + base,
            base.replace("\n\n\nclass", "\n\n\n\n\nclass"), base.replace("(1,\n         2)", "(1, 2)"),
            base.replace("class A:\n", "class A:\n    'A class.'\n")]
    other = [base.replace("x * 2", "x * 3"), base.replace("return x", "return y"),
             base.replace("class A:\n    y", "class A:\n    pass\ny"),
             base.replace("import torch", "import torch\nX = 'a'")]
    assert all(text(s) == text(base) for s in same)
    assert all(text(s) != text(base) for s in other)
    assert text("def broken(:\n") == b"def broken(:\n"  # what does not parse: its bytes


def test_imports_are_read_in_every_form(tmp_path):
    from normsys.orchestration import cache

    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    for name in ("__init__.py", "a.py", "b.py", "c.py", "d.py", "sub/__init__.py", "sub/e.py",
                 "unused.py"):
        (package / name).write_text("X = 1\n")
    (package / "main.py").write_text(
        "import os\nfrom pkg import a, X\nimport pkg.b as bee\nfrom pkg.c import X as Y\n"
        "def f():\n    from pkg.sub.e import X\n    from pkg import d\n"
        "from . import unused\n")  # relative imports are not followed (the package uses none)
    assert cache.imported_modules("main", package) == {"", "a", "b", "c", "d", "sub", "sub.e"}
    assert cache.module_file("sub", package) == package / "sub" / "__init__.py"
    assert cache.module_file("nothing", package) is None
    (tmp_path / "pkg.py").write_text("X = 2\n")  # a module beside the package, of its name
    assert cache.module_file("", package) == package / "__init__.py"


def test_the_cache_folder_is_checked_before_anything_trains(tmp_path, monkeypatch):
    from normsys.orchestration.cache import CacheFolderError, check_folder

    afile = tmp_path / "a-file"
    afile.write_text("x")
    with pytest.raises(CacheFolderError, match=f"^NORMSYS_CACHE={afile}: is a file, not a folder"):
        check_folder(afile)
    with pytest.raises(CacheFolderError, match=f"NORMSYS_CACHE={afile / 'c'}: cannot be created "
                                               f"\\({afile} is not a writable folder\\)"):
        check_folder(afile / "c")
    assert check_folder(tmp_path / "new" / "cache") == "" and check_folder(tmp_path) == ""
    assert (tmp_path / "new" / "cache").is_dir()  # made here, not when the first run is kept
    # a folder whose permissions say yes but that cannot be made (/proc, a full disk)
    with monkeypatch.context() as m:
        def refused(self, *args, **kwargs):
            raise FileNotFoundError(2, "No such file or directory", str(self))

        m.setattr(cache.Path, "mkdir", refused)
        with pytest.raises(CacheFolderError, match=f"^NORMSYS_CACHE={tmp_path / 'x'}: cannot be "
                                                   f"created \\(No such file or directory\\)"):
            check_folder(tmp_path / "x")
    monkeypatch.setattr(cache.os, "access", lambda path, mode: False)  # as a non-root user sees it
    assert check_folder(tmp_path) == f"the run cache {tmp_path} is read-only: its runs are " \
                                     f"served, new ones are not kept"
    with pytest.raises(CacheFolderError, match="cannot be created"):
        check_folder(tmp_path / "not-made-yet")
    monkeypatch.setenv("NORMSYS_CACHE", "off")
    assert check_folder() == ""


def saying(call):
    """``call(progress)``'s result, and what it said on that progress stream."""
    read, write = os.pipe()
    try:
        result = call(progress.Progress(write))
    finally:
        os.close(write)
    said = os.read(read, 1 << 16).decode()
    os.close(read)
    return result, said


def test_a_read_only_cache_serves_its_runs_without_a_lock_and_trains_the_rest_unkept(
        tmp_path, monkeypatch):
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    kept = cached_run(CFG, train_with_state)
    monkeypatch.setattr(cache, "writable", lambda root: False)
    monkeypatch.setattr(cache, "FileLock", lambda path: pytest.fail(f"took a lock on {path}"))
    assert cached_run(CFG, train_with_state).to_json() == kept.to_json()
    other = CFG.override(**{"train.seed": 1})
    fresh, said = saying(lambda said: cached_run(other, train_with_state, progress=said))
    assert fresh.run_config == other and not (tmp_path / "runs" / f"{run_key(other)}.json").exists()
    assert f"the run cache {tmp_path} is read-only: training 1 runs it lacks without keeping them" \
        in said


def test_a_lock_that_is_no_lock_file_is_one_error_naming_it_before_anything_trains(
        tmp_path, monkeypatch, capsys):
    """A folder where a run's lock goes: the cache cannot say who trains the run, so the run is
    refused with the path and what to do, never a traceback; the command says it in one line."""
    from normsys.__main__ import main

    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    lock = tmp_path / "runs" / f"{run_key(CFG)}.lock"
    lock.mkdir(parents=True)
    trained = []
    with pytest.raises(cache.CacheFolderError, match=f"^{lock}: cannot be taken as the lock of a "
                                                     f"cache entry \\(Is a directory\\); remove it"):
        cached_run(CFG, lambda cfgs: trained.append(cfgs))
    assert not trained
    assert main(["train", "--model", "ffn_stack", "--set", "train.steps=3", "--set", "model.d=16",
                 "--set", "data.batch_shape=4,5,16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {lock}: cannot be taken as the lock")


@pytest.mark.parametrize("fails", ["weights", "record"])
def test_a_run_the_disk_cannot_take_is_said_kept_for_the_session_and_leaves_no_partial_entry(
        tmp_path, monkeypatch, fails):
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))

    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cache, "atomic_save" if fails == "weights" else "atomic_write_text", full)
    record, said = saying(lambda said: cached_run(CFG, train_with_state, progress=said))
    assert record.run_config == CFG and record.metrics
    left = {p.suffix for p in (tmp_path / "runs").glob(f"{run_key(CFG)}*")}
    assert left == {".lock"}  # the run's lock file only: no weights, no record, no temporary
    assert "could not keep ffn_stack/layernorm/bp/s0" in said
    assert "(OSError: [Errno 28] No space left on device): its record serves this session only" \
        in said
    if fails == "weights":  # nowhere to keep them
        assert record.state_path is None and "session only, without its weights\n" in said
    else:  # in the session's temporary folder
        assert Path(record.state_path).parent != tmp_path / "runs"
        assert f"session only, its weights in {Path(record.state_path).parent}\n" in said
        weights = trained_model(record).state_dict()
        assert all(torch.equal(weights[k], v) for k, v in train_with_state(CFG)[1].items())


@pytest.mark.parametrize("kept", ["off", "read-only"])
def test_a_run_the_cache_does_not_keep_serves_its_weights_to_the_session(
        tmp_path, monkeypatch, kept):
    """A claim that loads a trained net (the FA protocol, the LayerNorm Jacobian) runs without a
    cache too: the weights wait in a temporary folder of the process, one file a run, and the
    folder goes with the process."""
    monkeypatch.setenv("NORMSYS_CACHE", "off" if kept == "off" else str(tmp_path))
    monkeypatch.setattr(cache, "writable", lambda root: kept == "off")
    first, again = (cached_run(CFG, train_with_state) for _ in range(2))  # trained twice
    assert first.state_path != again.state_path and not tmp_path.joinpath("runs").exists()
    assert Path(first.state_path).parent == Path(again.state_path).parent
    weights = trained_model(first).state_dict()
    assert all(torch.equal(weights[k], v) for k, v in train_with_state(CFG)[1].items())
    unkept = cached_run(CFG.override(**{"train.keep_state": False}), train_with_state)
    assert unkept.state_path is None
    folder = cache._session_folder()
    cache._session_folder.cache_clear()
    folder.cleanup()  # as the process ends
    assert not Path(first.state_path).exists()



def test_a_run_made_in_another_environment_than_asked_is_said_and_kept_under_its_own(
        tmp_path, monkeypatch):
    """A trainer elsewhere (a cluster node of other kernels) may make a run in another numeric
    environment than the session asked for: it is kept under the one it was made in, never under
    the key of the one asked (where it would be served as if made there)."""
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    asked = {**run_environment(CFG), "device": "cpu (SVE256, Arm)"}
    record, said = saying(lambda said: cached_runs(
        [CFG], "", lambda cfgs: [train_with_state(c) for c in cfgs], progress=said,
        environment=lambda cfg: asked)[0])
    assert (tmp_path / "runs" / f"{run_key(CFG, '', record.env)}.json").is_file()
    assert not (tmp_path / "runs" / f"{run_key(CFG, '', asked)}.json").exists()
    assert f"{progress.label(CFG)} was made in another numeric environment " \
           f"({described(record.env)}; asked: {described(asked)}): kept under its own, served " \
           f"to this session only\n" in said
    _, again = saying(lambda said: cached_runs([CFG], "", train_with_state, progress=said))
    assert "another numeric environment" not in again  # asked here, found here


def test_an_entry_of_another_environment_says_which(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    made = cached_run(CFG, train_with_state)
    path = tmp_path / "runs" / f"{run_key(CFG)}.json"
    elsewhere = {**made.env, "threads": "8"}
    assert cache._load(path, CFG, elsewhere) == (
        None, f"it was made in another numeric environment ({described(made.env)})")


def test_the_environments_digest_is_twelve_hex_digits_whatever_the_order_of_its_fields():
    env = run_environment(CFG)
    backwards = dict(reversed(list(env.items())))
    assert list(backwards) != list(env)
    assert cache.environment_digest(backwards) == cache.environment_digest(env)
    assert re.fullmatch(r"[0-9a-f]{12}", cache.environment_digest(env))
    assert cache.environment_digest({**env, "threads": "8"}) != cache.environment_digest(env)


def test_a_disk_is_full_below_a_mebibyte_free_and_one_that_cannot_be_asked_is_not(
        tmp_path, monkeypatch):
    usage = shutil.disk_usage(tmp_path)
    for free, full in ((cache.FULL_BELOW - 1, True), (cache.FULL_BELOW, False)):
        monkeypatch.setattr(cache.shutil, "disk_usage", lambda p, free=free: usage._replace(free=free))
        assert cache.disk_full(tmp_path) is full
    assert cache.FULL_BELOW == 1 << 20

    def unreadable(path):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(cache.shutil, "disk_usage", unreadable)
    assert cache.disk_full(tmp_path) is False

def test_a_full_disk_is_said_in_words_not_in_torchs(tmp_path, monkeypatch):
    """torch.save on a full disk raises "unexpected pos ...": the line says the disk is full."""
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))

    def full(*args):
        raise RuntimeError("[enforce fail at inline_container.cc:626] . unexpected pos 64 vs 0")

    monkeypatch.setattr(cache, "atomic_save", full)
    usage = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(cache.shutil, "disk_usage", lambda p: usage._replace(free=4096))
    _, said = saying(lambda said: cached_run(CFG, train_with_state, progress=said))
    assert f"(the disk holding {tmp_path / 'runs'} is full; RuntimeError: [enforce fail" in said
    monkeypatch.setattr(cache.shutil, "disk_usage", lambda p: usage._replace(free=1 << 30))
    _, said = saying(lambda said: cached_run(CFG, train_with_state, progress=said))
    assert "is full" not in said and "(RuntimeError: [enforce fail" in said


def test_each_kind_of_unusable_entry_is_named_and_retrained(tmp_path, monkeypatch):
    """A record edited after it was kept, one of another normsys version, damaged weights and a
    file that is not a record each say what is wrong with them, and the run trains again."""
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    json_path = tmp_path / "runs" / f"{run_key(CFG)}.json"
    label = f"ffn_stack/layernorm/bp/s0 d=16 batch_shape=(4, 5, 16) steps=3 (cpu tier, " \
            f"{CFG.fingerprint()[:8]})"

    def edited(change) -> None:
        payload = json.loads(json_path.read_text())
        change(payload)
        json_path.write_text(json.dumps(payload))

    def resealed(field, value):
        def change(payload):
            payload["record"][field] = value
            payload["sha256"] = cache._digest(payload["record"])
        return change

    cached_run(CFG, train_with_state)
    damages = [
        (lambda p: p["record"].update(wall_time=p["record"]["wall_time"] + 1),
         "its checksum does not match"),
        (resealed("version", "0.0.1"), "it belongs to another config or version"),
        (resealed("fingerprint", "0" * 16), "it belongs to another config or version"),
        (lambda p: Path(p["record"]["state_path"]).write_bytes(b"garbage"),
         "its weights are missing or damaged"),
        (lambda p: p.pop("sha256"), "it cannot be read (KeyError)"),
    ]
    for damage, reason in damages:
        edited(damage)
        record, said = saying(lambda said: cached_run(CFG, train_with_state, progress=said))
        assert said.splitlines()[0] == (f"normsys: cache entry {json_path.stem} is unusable "
                                        f"({reason}): retraining {label}")
        assert "trained in" in said and record.run_config == CFG


def test_a_record_whose_keys_a_tool_reordered_is_the_same_record(tmp_path, monkeypatch):
    """The checksum is of the record's content, not of the order its keys were written in."""
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    log = tmp_path / "calls"
    kept = cached_run(CFG, counting(log))
    json_path = tmp_path / "runs" / f"{run_key(CFG)}.json"
    payload = json.loads(json_path.read_text())
    payload["record"] = dict(reversed(payload["record"].items()))
    json_path.write_text(json.dumps(payload, indent=1))
    assert cached_run(CFG, counting(log)).to_json() == kept.to_json() and log.read_text() == "x"


def test_the_key_is_the_fingerprint_data_code_norm_and_version_in_that_form():
    """Every kept run is filed under this form: a change to it orphans every cache."""
    from normsys import __version__
    from normsys.training.norms import register

    code, env = cache.code_digest(), cache.environment_digest(run_environment(CFG))
    assert run_key(CFG) == f"{CFG.fingerprint()}-c{code}-e{env}-v{__version__}"
    assert run_key(CFG, "0123456789abcdef" * 4) == \
        f"{CFG.fingerprint()}-0123456789abcdef-c{code}-e{env}-v{__version__}"
    register("halved-ln-key", lambda d: torch.nn.LayerNorm(d, elementwise_affine=False))
    try:
        mine = CFG.override(**{"model.norm": "halved-ln-key"})
        source = cache.NORMS["halved-ln-key"].source
        assert source and run_key(mine) == \
            f"{mine.fingerprint()}-c{code}-n{source}-e{env}-v{__version__}"
        # a kind on the queries and keys keys the run by its source too, once where it is both
        qk = preset("char_gpt", **{"model.qk_norm": "halved-ln-key"})
        qk_env = cache.environment_digest(run_environment(qk))
        assert run_key(qk).endswith(f"-c{code}-n{source}-e{qk_env}-v{__version__}")
        both = qk.override(**{"model.norm": "halved-ln-key"})
        assert f"-n{source}-e" in run_key(both) and run_key(both).count("-n") == 1
    finally:
        del cache.NORMS["halved-ln-key"]


def test_lookup_reads_a_kept_run_by_its_data_without_training(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    assert cache.lookup(CFG) is None
    kept = cached_run(CFG, train_with_state)
    on_data = cached_run(CFG, train_with_state, data="ab" * 32)
    assert cache.lookup(CFG).to_json() == kept.to_json()
    assert cache.lookup(CFG, "ab" * 32).to_json() == on_data.to_json()
    assert cache.lookup(CFG, "cd" * 32) is None


def test_runs_found_kept_beside_ones_trained_now_are_said_as_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    other = CFG.override(**{"train.seed": 1})
    cached_run(CFG, train_with_state)
    records, said = saying(lambda said: cached_runs(
        [CFG, other], "", lambda cfgs: [train_with_state(c) for c in cfgs], progress=said))
    assert [r.run_config for r in records] == [CFG, other]
    lines = said.splitlines()
    assert lines[0].startswith("normsys: [cached] ") and "/s0 " in lines[0]
    assert "/s1 " in lines[-1] and lines[-1].startswith("normsys: [run ")
    monkeypatch.setenv("NORMSYS_CACHE", "off")
    _, said = saying(lambda said: cached_run(CFG, train_with_state, progress=said))
    assert ": trained in " in said and "[cached]" not in said


@pytest.mark.parametrize("error,says", [
    (OSError(), "(OSError: -): its record"),
    (RuntimeError("x" * 200 + "\nsecond line"), f"(RuntimeError: {'x' * 120}): its record"),
])
def test_a_store_failure_is_said_in_one_short_line(tmp_path, monkeypatch, error, says):
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))

    def fails(*args):
        raise error

    monkeypatch.setattr(cache, "atomic_write_text", fails)
    _, said = saying(lambda said: cached_run(CFG, train_with_state, progress=said))
    assert says in said and len(said.splitlines()) == 3  # training, could not keep, trained


def test_writable_asks_of_the_runs_folder_where_it_exists(tmp_path, monkeypatch):
    (tmp_path / "runs").mkdir()
    monkeypatch.setattr(cache.os, "access", lambda path, mode: Path(path) != tmp_path / "runs")
    assert not cache.writable(tmp_path)
    # a folder one may enter and read, not write: asked for writing and entering, it says no
    monkeypatch.setattr(cache.os, "access", lambda path, mode: not mode & os.W_OK)
    assert not cache.writable(tmp_path / "new")
    with pytest.raises(cache.CacheFolderError, match="cannot be created"):
        cache.check_folder(tmp_path / "new")


def test_check_folder_reads_the_environment_when_given_no_folder(tmp_path, monkeypatch):
    afile = tmp_path / "a-file"
    afile.write_text("x")
    monkeypatch.setenv("NORMSYS_CACHE", str(afile))
    with pytest.raises(cache.CacheFolderError, match="is a file, not a folder"):
        cache.check_folder()


def test_a_run_another_process_trains_is_waited_for_unless_asked_not_to(tmp_path, monkeypatch):
    import threading

    from filelock import FileLock

    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    (tmp_path / "runs").mkdir()
    held = FileLock(f"{tmp_path / 'runs' / run_key(CFG)}.lock")
    held.acquire()
    got = []
    waiting = threading.Thread(target=lambda: got.append(cached_run(CFG, train_with_state)))
    try:
        assert cached_runs([CFG], "", lambda cfgs: [], wait=False) is None
        waiting.start()
        time.sleep(1.0)
        assert waiting.is_alive() and not got  # the default waits for the other process
    finally:
        held.release()
    waiting.join(60)
    assert got and got[0].run_config == CFG


# ----------------------------------------------------------------------------- numeric environment


def test_a_run_made_at_two_threads_is_not_served_at_one(tmp_path, monkeypatch):
    """A thread count changes a run's numbers: each count keeps its own runs."""
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    log, threads = tmp_path / "calls", torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        two = cached_run(CFG, counting(log))
        torch.set_num_threads(1)
        one = cached_run(CFG, counting(log))
        assert log.read_text() == "xx" and (two.env["threads"], one.env["threads"]) == ("2", "1")
        torch.set_num_threads(2)
        assert cached_run(CFG, counting(log)) == two and log.read_text() == "xx"
    finally:
        torch.set_num_threads(threads)


def test_a_record_made_on_other_cpu_kernels_is_not_served_here(tmp_path, monkeypatch):
    """A run trained under ATEN_CPU_CAPABILITY=avx2 (another process) is kept under its kernels,
    emulated on this machine's (not a real AVX2 machine's key: MKL rounds otherwise there); this
    machine's kernels train their own."""
    import subprocess
    import sys

    here = torch.backends.cpu.get_cpu_capability()
    other = "avx2" if here != "AVX2" else "default"
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    script = ("from normsys.orchestration.cache import cached_runs\n"
              "from normsys.training.train import train_with_state\n"
              "from tests.test_cache import CFG\n"
              "r = cached_runs([CFG], '', lambda cs: [train_with_state(c) for c in cs])[0]\n"
              "print(r.env['device'])")
    made = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          env={**os.environ, "ATEN_CPU_CAPABILITY": other, "OMP_NUM_THREADS":
                               str(torch.get_num_threads())}, cwd=Path(__file__).parents[1],
                          check=True).stdout.splitlines()[-1]
    vendor = cpu_vendor()
    assert made == f"cpu ({other.upper()} emulated on {here}, {vendor})"  # not that kind's key
    log = tmp_path / "calls"
    mine = cached_run(CFG, counting(log))
    assert log.read_text() == "x" and mine.env["device"] == f"cpu ({here}, {vendor})"
    assert len(list((tmp_path / "runs").glob("*.json"))) == 2


def test_the_torch_version_keys_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    log = tmp_path / "calls"
    before = run_key(CFG)
    cached_run(CFG, counting(log))
    monkeypatch.setattr(torch, "__version__", "0.0.1+other")
    assert run_key(CFG) != before
    cached_run(CFG, counting(log))
    assert log.read_text() == "xx"


def test_a_record_made_elsewhere_is_kept_under_its_own_environment(tmp_path, monkeypatch):
    """A trainer (a Ray node) whose run comes back made in another numeric environment: the
    record serves the session that asked, under its own key, and is never served here later."""
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    elsewhere = {**run_environment(CFG), "device": "cpu (SVE256)"}

    def on_a_node(cfg):
        record, state = train_with_state(cfg)
        record.env.update(elsewhere)
        return record, state

    got = cached_run(CFG, on_a_node)
    assert got.env["device"] == "cpu (SVE256)"
    assert (tmp_path / "runs" / f"{run_key(CFG, '', elsewhere)}.json").is_file()
    assert not (tmp_path / "runs" / f"{run_key(CFG)}.json").exists()
    log = tmp_path / "calls"
    assert cached_run(CFG, counting(log)).env["device"] != "cpu (SVE256)"
    assert log.read_text() == "x"
    assert cache.lookup(CFG, "", lambda cfg: elsewhere).env["device"] == "cpu (SVE256)"


def test_a_label_names_what_differs_from_the_familys_preset_at_its_tier_four_at_most():
    """Not what every label shows already (norm, rule, seed), not the preset of another tier."""
    from normsys.training.config import preset

    assert progress.label(preset("encoder", "paper")).startswith(
        "encoder/layernorm/bp/s0 (paper tier, ")
    assert progress.label(preset("ffn_stack", **{"model.norm": "rmsnorm"})).startswith(
        "ffn_stack/rmsnorm/bp/s0 (cpu tier, ")
    # most families' paper runs read the CPU tier's data: their tier is the preset they are
    # nearest, not their data's (a paper LSTM was "device=auto (cpu tier, ...)")
    assert progress.label(preset("lstm", "paper", **{"model.d": 16})).startswith(
        "lstm/layernorm/bp/s0 d=16 (paper tier, ")
    assert progress.label(preset("lstm", "paper", **{"train.device": "cpu"})).startswith(
        "lstm/layernorm/bp/s0 device=cpu (paper tier, ")  # the CPU tier's LSTM is smaller
    # the MLP, the same at both tiers but for the device
    assert progress.label(preset("mlp", "paper", **{"train.device": "cpu"})).startswith(
        "mlp/layernorm/bp/s0 (cpu tier, ")
    assert progress.nearest(preset("mlp", "paper", **{"train.device": "cpu", "model.d": 8}))[0] == "cpu"
    # as near to both presets: the data's tier
    both = {"train.device": "cuda", "data.tier": "paper"}
    assert progress.nearest(preset("mlp", **both))[0] == "paper"
    assert progress.nearest(preset("mlp", **{**both, "data.tier": "cpu"}))[0] == "cpu"


def test_a_label_of_a_family_without_a_preset_names_its_datas_tier_and_no_differences(monkeypatch):
    from normsys.training.config import PRESETS, preset

    cfg = preset("encoder", "paper", **{"model.d": 16})
    monkeypatch.delitem(PRESETS, "encoder")
    assert progress.label(cfg) == f"encoder/layernorm/bp/s0 (paper tier, {cfg.fingerprint()[:8]})"
    cfg = preset("ffn_stack", **{"model.d": 16, "data.batch_shape": (4, 5, 16), "train.lr": 0.5,
                                 "train.weight_decay": 0.1, "train.steps": 3})
    tier, changes = progress.nearest(cfg)
    assert tier == "cpu" and changes[:progress.MOST_SHOWN] == [
        ("model.d", 16), ("data.batch_shape", (4, 5, 16)), ("train.lr", 0.5),
        ("train.weight_decay", 0.1)]
    assert len(changes) == 5  # train.steps too
