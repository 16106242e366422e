from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# Derandomized so CI and a developer see the same examples; no deadline (first calls warm up torch).
settings.register_profile("normsys", derandomize=True, deadline=None, max_examples=40)
settings.load_profile("normsys")

# The pytest sessions the tests start as processes of their own skip pytest's check for
# exceptions raised where nothing can catch them, which at each exit runs five full garbage
# collections over torch's objects (about 1 s a process, a sixth of its start): the tests read
# what those sessions print and exit with, never that check.
os.environ["PYTEST_ADDOPTS"] = " ".join(
    filter(None, (os.environ.get("PYTEST_ADDOPTS", ""), "-p no:unraisableexception")))


@pytest.fixture
def pytester(pytester, monkeypatch):
    """pytest's own, without bytecode caches: a test that rewrites a module and runs it again
    within one second, at the same size (a rule's 0.5 made 0.6), would otherwise be run from the
    stale cache, whose check reads only the file's size and whole-second mtime."""
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    return pytester


@pytest.fixture
def ctrl_c():
    """``press(argv, env, cwd=None)``: run a command as from a terminal (its own process group,
    SIGINT at its default: a runner such as pytest-xdist may ignore it, and a child inherits
    that), press Ctrl-C (SIGINT to the group) once its standard error says a run is training,
    check that no process of the group is left, and return its exit code, standard output and
    standard error."""
    import signal
    import subprocess
    import time

    def press(argv: list[str], env: dict, cwd=None) -> tuple[int, str, str]:
        proc = subprocess.Popen(argv, env=env, cwd=cwd, text=True, start_new_session=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        said = []
        try:
            for line in proc.stderr:
                said.append(line)
                if "normsys: training " in line:
                    break
            os.killpg(proc.pid, signal.SIGINT)
            out, rest = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30  # helpers (a resource tracker, Ray's) leave on their own
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break  # no process of the group is left
            time.sleep(0.2)
        else:
            left = subprocess.run(["ps", "-o", "pid,args", "-g", str(proc.pid)],
                                  capture_output=True, text=True).stdout
            pytest.fail(f"processes left after Ctrl-C:\n{left}")
        return proc.returncode, out, "".join(said) + rest

    return press


@pytest.fixture
def no_cache(monkeypatch):
    monkeypatch.setenv("NORMSYS_CACHE", "off")


@pytest.fixture
def light_compile(monkeypatch):
    """torch.compile with the aot_eager backend: dynamo's graph capture and AOT autograd (graph
    breaks, vmap and autocast under compile, the backward graph) without inductor's C++ code
    generation, which costs seconds per graph on CPU and is not the CUDA code anyway; the CUDA
    numerics are checked by the gpu tests."""
    import functools

    import torch

    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))


@pytest.fixture(autouse=True)
def fresh_memo_per_mutant():
    """mutmut forks each mutant's test run from a process that has already run the tests: the runs
    it fetched, the data it loaded and checked, the code digest and the t quantiles it computed
    would answer for the mutant's code (a mutant of the training loop would pass on its parent's
    records, one of a task on its parent's data; the declarations and claim files it imported,
    their markers made by the parent's code). Clear them there (only under mutmut: elsewhere they
    are what keeps one process from training a run or reading a file twice)."""
    if "MUTANT_UNDER_TEST" in os.environ:
        from normsys import declarations
        from normsys.claims import verdict
        from normsys.orchestration import cache
        from normsys.training import data

        data._VERIFIED.clear()
        for memo in (data._checksums, data._mnist, data.bert_tokenizer, cache.code_digest,
                     verdict.t_quantile, declarations.declared):
            memo.cache_clear()
        for name in [m for m in sys.modules if m.startswith(("claims.", "normsys.declarations."))]:
            del sys.modules[name]
    yield


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under mutmut, a mutant's tests run its module's own test file first, then fastest first
    (by the durations mutmut measured): a killed mutant stops at its first failing test, so it
    costs what its quickest failing test costs instead of whatever test happened to come first."""
    stats = Path("mutmut-stats.json")
    if "MUTANT_UNDER_TEST" not in os.environ or not stats.is_file():
        return
    try:
        seconds = json.loads(stats.read_text())["duration_by_test"]
    except (ValueError, KeyError):
        return
    # the mutated module's own test file first: a mutant of the training loop dies in
    # tests/test_train.py in seconds, not after every faster test that trains a model
    module = os.environ["MUTANT_UNDER_TEST"].rpartition(".")[0]  # e.g. normsys.training.train
    own = f"tests/test_{module.rpartition('.')[2]}.py::" if "." in module else None
    items.sort(key=lambda item: (not (own and item.nodeid.startswith(own)),
                                 seconds.get(item.nodeid, 0.0)))
