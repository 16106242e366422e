"""What the run cache is doing, a line per training run as it starts and as it ends (trained or
read from the cache); with a plan (``Progress.expect``: the runs a session will train and their
recorded seconds), each trained run says how far the plan is and the time left:
``[run 3 of 40, ~12.5 min of training left]``.

A ``Progress`` names the stream: the claims plugin gives its session's the terminal (a copy of
the standard error taken before pytest captures output, so the lines show while claims wait on
training, from pytest-xdist workers too) and a counter file shared by the session's processes;
the command line gives its own standard error; ``SILENT`` writes nothing. On a terminal,
``Progress.bar`` keeps a tqdm bar of the plan below the lines while a command trains it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock

from normsys.training.config import PRESETS, RunConfig, preset
from normsys.training.tiers import TIERS


def described(env: Mapping[str, str]) -> str:
    """A numeric environment (``normsys.training.provenance.numeric_environment``: a record's
    ``env``, or an entry's fields) in a few words: ``cpu (AVX512, AMD), 1 thread(s), torch
    2.13.0``; a field it lacks (made before it was recorded) reads ``?``."""
    device, threads, version, autocast = (str(env.get(k, "?")) for k in
                                          ("device", "threads", "torch", "autocast"))
    amp = f", {autocast} autocast" if autocast not in ("off", "?") else ""
    return f"{device}, {threads} thread(s), torch {version}{amp}"


class Progress:
    """Where one session's progress lines go: file descriptor ``fd`` (None: nowhere), with its
    tally (the plan, the runs trained and read) kept in ``counter`` (a file shared by every
    process of the session) or in this object."""

    def __init__(self, fd: int | None = None, counter: Path | None = None):
        self.fd, self.counter = fd, counter
        self.tally: dict = {}  # without a counter file
        self.shares: dict[str, float] = {}  # a run's share of the group it trains in (started)

    def _write(self, line: str) -> None:
        if self.fd is not None:  # on a terminal, the line first clears the bar it is written over
            clear = "\r\x1b[K" if os.isatty(self.fd) else ""
            os.write(self.fd, f"{clear}normsys: {line}\n".encode())

    def _update(self, change: Callable[[dict], None] | None) -> dict:
        """Apply ``change`` (None: read only) to the session's tally (under the counter file's
        lock) and return it."""
        if self.counter is None:
            if change is not None:
                change(self.tally)
            return dict(self.tally)
        with FileLock(str(self.counter) + ".lock"):
            text = self.counter.read_text() if self.counter.exists() else ""
            tally = json.loads(text) if text.strip() else {}
            if change is not None:
                change(tally)
                self.counter.write_text(json.dumps(tally))
        return tally

    def expect(self, seconds: dict[str, float], places: int) -> None:
        """The session will train the runs ``seconds`` holds (config fingerprint -> its share of
        the training its group takes on one process, as the run times record it: 0 where none
        does) on ``places`` processes at once."""
        self._update(lambda t: t.update(plan=seconds, places=max(1, places)))

    def started(self, cfgs) -> None:
        for c in cfgs:
            self.shares[c.fingerprint()] = 1 / len(cfgs)
        what = label(cfgs[0]) if len(cfgs) == 1 else \
            f"{label(cfgs[0])} with {len(cfgs)} seeds stacked"
        plan = self._update(None).get("plan", {})
        seconds = sum(plan.get(c.fingerprint()) or 0.0 for c in cfgs)
        self._write(f"training {what} ..." + (f" (~{seconds:.0f} s as priced)" if seconds >= 1
                                               else ""))

    def finished(self, record, cached: bool) -> None:
        """A run ended: trained now, or read from the cache (when and where it was trained)."""
        cfg = RunConfig.from_dict(record.config)
        where = described(record.env)
        if "node" in record.env:  # trained on a cluster (normsys.orchestration.cluster)
            where = f"{where}; node {record.env['node']}"
        if cached:
            when = record.env.get("date", "an earlier session")
            self._update(lambda t: t.update(read=t.get("read", 0) + 1))
            self._write(f"[cached] {label(cfg)}: trained in {record.wall_time:.0f} s on {when} "
                        f"({where})")
            return
        took = record.wall_time * self.shares.pop(cfg.fingerprint(), 1.0)
        fingerprint = cfg.fingerprint()

        def count(t: dict) -> None:
            planned = t.get("plan", {}).get(fingerprint)
            t.update(trained=t.get("trained", 0) + 1, took=t.get("took", 0.0) + took,
                     estimated=t.get("estimated", 0.0) + (took if not planned else planned))
            if planned is not None:
                t["done"] = t.get("done", 0.0) + planned
            if planned == 0:  # in the plan, never timed
                t["untimed"] = t.get("untimed", 0) + 1

        self._write(f"[{where_in_plan(self._update(count))}] {label(cfg)}: trained in "
                    f"{record.wall_time:.0f} s ({where})")

    def note(self, line: str) -> None:
        self._write(line)

    @contextmanager
    def bar(self, tick: float = 0.5, clock: Callable[[], float] = time.monotonic
            ) -> Iterator[None]:
        """While the plan trains, on a terminal: a tqdm bar of its runs under the lines, ``run k
        of N, ~M min of training left`` (the time left counting down between the runs that
        update it), redrawn every ``tick`` seconds from the tally the session's processes share.
        Elsewhere (a file, a pipe, CI's log) nothing: the lines say the same."""
        if self.fd is None or not os.isatty(self.fd):
            yield
            return
        from tqdm.auto import tqdm

        stream = os.fdopen(os.dup(self.fd), "w")
        shown: list = []  # the bar, once the tally holds a plan
        stop = threading.Event()

        def draw() -> None:
            seen, since = None, clock()
            while not stop.wait(tick):
                tally = self._update(None)
                if "plan" not in tally:
                    continue
                if tally.get("trained") != seen:
                    seen, since = tally.get("trained"), clock()
                postfix = time_left(tally, max(0.0, seconds_left(tally) - (clock() - since)))
                if not shown:
                    shown.append(tqdm(total=len(tally["plan"]), file=stream, leave=False,
                                      dynamic_ncols=True, desc="normsys", bar_format=BAR,
                                      postfix=postfix))
                shown[0].n = min(tally.get("trained", 0), shown[0].total)
                shown[0].set_postfix_str(postfix, refresh=False)
                shown[0].refresh()

        drawing = threading.Thread(target=draw, name="normsys-progress-bar", daemon=True)
        drawing.start()
        try:
            yield
        finally:
            stop.set()
            drawing.join()
            for b in shown:
                b.close()
            stream.close()


def where_in_plan(tally: dict) -> str:
    """``run 3 of 40, ~12.5 min of training left``: the runs trained so far against the plan,
    and the plan's recorded seconds not yet trained, on its processes, at the pace the runs
    trained so far kept against their recorded times (the training alone: what the claims do
    between runs is not in it); ``run 41; 40 were planned`` past the plan; ``run 3`` without
    one."""
    k = tally["trained"]
    if "plan" not in tally:
        return f"run {k}"
    runs = len(tally["plan"])
    if k > runs:
        return f"run {k}; {runs} were planned"
    return f"run {k} of {runs}, {time_left(tally, seconds_left(tally))}"


def time_left(tally: dict, seconds: float) -> str:
    """``~12.5 min of training left``, and how many of the plan's runs not yet trained were never
    timed (their price unknown: the minutes count none of them)."""
    untimed = sum(1 for s in tally["plan"].values() if not s) - tally.get("untimed", 0)
    besides = f" besides {untimed} run{'s' * (untimed != 1)} never timed" if untimed > 0 else ""
    return f"~{seconds / 60:.1f} min of training left{besides}"


def seconds_left(tally: dict) -> float:
    """The plan's recorded seconds not yet trained, at the pace the runs trained so far kept
    against their recorded times, spread over the plan's processes."""
    took, estimated = tally.get("took", 0.0), tally.get("estimated", 0.0)
    pace = took / estimated if estimated > 0 else 1.0
    return max(0.0, sum(tally["plan"].values()) - tally.get("done", 0.0)) * pace \
        / tally["places"]


BAR = "{desc}: {bar} {n} of {total} runs trained{postfix}"  # tqdm puts ", " before the postfix
SILENT = Progress()  # what a caller that names no stream gets


SHOWN = {"model.norm", "train.method", "train.seed"}  # in every label already
UNSHOWN = {"train.probe", "train.probe_batch", "train.snapshots", "train.keep_state"}
MOST_SHOWN = 4  # the fields a label names beside its family, norm, rule and seed


def label(cfg) -> str:
    """family/norm/method/seed, what else differs from the family's preset, (tier, fingerprint):
    two runs of one family, norm and seed read apart, e.g. ``tanh_mlp/none/bp/s0 residual=False``."""
    at, changes = nearest(cfg)
    name = (f"{cfg.model.family}/{cfg.model.norm}/{cfg.train.method}/s{cfg.train.seed}"
            + "".join(f" {k.split('.')[1]}={v}" for k, v in changes[:MOST_SHOWN]))
    return f"{name} ({at} tier, {cfg.fingerprint()[:8]})"


def nearest(cfg) -> tuple[str, list[tuple[str, object]]]:
    """The tier whose preset of ``cfg``'s family it differs from in fewest fields (a config does
    not say its tier: most families' data are the same at both, the paper tier trains on a GPU),
    its data's tier on a tie; and those fields, but the ones a label always or never shows. A
    family with no preset: its data's tier, no fields."""
    if cfg.model.family not in PRESETS:
        return cfg.data.tier, []
    ours = cfg.flat()
    bases = {t: preset(cfg.model.family, t).flat() for t in TIERS}
    changes = {t: [(k, v) for k, v in ours.items() if k not in SHOWN | UNSHOWN
                   and base.get(k) != v] for t, base in bases.items()}
    at = min(TIERS, key=lambda t: (len(changes[t]), t != cfg.data.tier))
    return at, changes[at]
