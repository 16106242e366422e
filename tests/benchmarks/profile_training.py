"""Where a CPU-tier run's time goes, per model family: the training loop's phases (data, forward
and backward, gradient norms, step log, optimizer) per step, the measurements a run makes once
(gradients at init, evaluation, probes), and the operators that take the step's time (torch's
profiler, self CPU time). One thread, as the claims train.

    python tests/benchmarks/profile_training.py [--steps 40] [--out docs/training-profile.md]

A run's whole time is estimated as its one-off parts plus its full number of steps at the
measured time per step; a family's share of the CPU tier is read from the committed run times.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import time
from contextlib import contextmanager
from pathlib import Path

import torch

from normsys.orchestration import runtimes
from normsys.orchestration.progress import described
from normsys.training import steplog, train
from normsys.training.config import RunConfig, preset
from normsys.training.provenance import numeric_environment
from normsys.training.store import cache_root
from normsys.training.tasks import make_task

# the model families the CPU tier's claims train, each profiled at its CPU-tier preset
FAMILIES = ("lstm", "encoder", "char_gpt", "resmlp", "cnn", "mlp", "ffn_stack")
PHASES = ("data", "forward+backward", "gradient norms", "step log", "optimizer")
ONCE = ("load data", "build model", "gradients at init", "evaluate", "probes")
PROFILED_STEPS = 10  # steps of the operator profile (each run measured once more besides)


class Clock:
    """Seconds spent in each named phase (wrapped functions; nested phases count in both)."""

    def __init__(self):
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.stepping = False  # inside the loop's steps: a step phase counts only there

    def wrap(self, name: str, fn):
        @functools.wraps(fn)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                if self.stepping or name not in PHASES:
                    self.seconds[name] += time.perf_counter() - start
        return timed

    def steps(self, drive):
        """``drive`` (train.drive) with the step phases counted while it runs, and its time."""
        def counted(stream, learner, bar):
            self.stepping, start = True, time.perf_counter()
            try:
                drive(self.stream(stream), learner, bar)
            finally:
                self.stepping = False
                self.seconds["steps"] += time.perf_counter() - start
        return counted

    def stream(self, items):
        """An iterator of ``items`` whose every next() counts as data."""
        it = iter(items)
        while True:
            start = time.perf_counter()
            try:
                item = next(it)
            except StopIteration:
                return
            finally:
                self.seconds["data"] += time.perf_counter() - start
            yield item


@contextmanager
def phases(clock: Clock, task_type: type):
    """The training core's functions wrapped with ``clock`` while the block runs."""
    patches = [(train, "forward_backward", "forward+backward"), (train, "grad_norms", "gradient norms"),
               (train, "gradients_at_init", "gradients at init"), (train, "probe", "probes"),
               (train, "prepare_model", "build model"), (steplog.StepLog, "add", "step log"),
               (task_type, "evaluate", "evaluate"), (torch.optim.Adam, "step", "optimizer"),
               (torch.optim.AdamW, "step", "optimizer")]
    saved = [(owner, attr, owner.__dict__.get(attr)) for owner, attr, _ in patches]
    drive = train.drive
    try:
        for owner, attr, name in patches:
            setattr(owner, attr, clock.wrap(name, getattr(owner, attr)))
        train.drive = clock.steps(drive)
        yield
    finally:
        for owner, attr, original in saved:
            if original is None:  # inherited: the wrapper goes, the base's shows again
                delattr(owner, attr)
            else:
                setattr(owner, attr, original)
        train.drive = drive


def family_seconds() -> dict[str, float]:
    """Seconds of one core the CPU tier's claims and controls train each family in, as the
    committed run times record them."""
    table = runtimes.read("cpu")
    fingerprints = {f for row in table["claims"].values() for f in row.get("fingerprints", [])}
    # the run times key runs by fingerprint alone: the families come from the cache's indexes
    seconds: dict[str, float] = collections.defaultdict(float)
    cache, seen = cache_root(), set()
    if cache is None:
        return {}
    for path in sorted((cache / "claims").glob("*-cpu.json")):
        for r in json.loads(path.read_text())["runs"]:
            cfg = RunConfig.from_dict(r["config"])
            f = cfg.fingerprint()
            if f in fingerprints and f not in seen:
                seen.add(f)
                seconds[cfg.model.family] += table["runs"].get(f, 0.0)
    return dict(seconds)


def profile(name: str, steps: int) -> dict:
    """One run of ``name``'s CPU-tier preset cut to ``steps`` steps, timed by phase; its top
    operators over those steps; and its full run estimated."""
    full = preset(name)
    clock = Clock()
    start = time.perf_counter()
    task = make_task(full)
    clock.seconds["load data"] = time.perf_counter() - start
    full_steps = task.steps(full)
    cfg = full.override(**{"train.steps": min(steps, full_steps), "train.keep_state": False})
    with phases(clock, type(task)):
        train.fit([cfg], task)
    n = cfg.train.steps
    per_step = {p: clock.seconds.get(p, 0.0) / n for p in PHASES}
    once = {p: clock.seconds.get(p, 0.0) for p in ONCE}
    step_wall = clock.seconds["steps"] / n
    # the operators, in a run of its own: the profiler's own cost would swell the phases
    short, drive, prof = cfg.override(**{"train.steps": PROFILED_STEPS}), train.drive, None

    def profiled(stream, learner, bar):  # the steps alone, not the run's one-off measurements
        nonlocal prof, profiled_s
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            start = time.perf_counter()
            drive(stream, learner, bar)
            profiled_s = time.perf_counter() - start

    profiled_s = 0.0

    train.drive = profiled
    try:
        train.fit([short], task)
    finally:
        train.drive = drive
    ops = sorted(((e.key, e.self_cpu_time_total / 1e6 / PROFILED_STEPS)
                  for e in prof.key_averages() if e.key.startswith("aten::")),
                 key=lambda kv: -kv[1])
    in_ops = sum(s for key, s in ops) * PROFILED_STEPS / profiled_s
    return {"family": name, "steps": n, "full_steps": full_steps, "step_s": step_wall,
            "per_step": per_step, "once": once, "ops": ops[:6], "in_ops": in_ops,
            "full_s": sum(once.values()) + full_steps * step_wall}


def markdown(rows: list[dict], shares: dict[str, float]) -> str:
    env = described(numeric_environment(torch.device("cpu")))
    total = sum(shares.values()) or 1.0
    out = ["# Where a CPU-tier run's time goes",
           "",
           f"Written by `python tests/benchmarks/profile_training.py` on {env}; "
           f"{rows[0]['steps']} steps of each family's CPU-tier preset, one thread. A step's "
           f"phases are wrapped with a clock (forward+backward holds the init's one pass too); "
           f"the operators are torch's profiler's self CPU time per step over {PROFILED_STEPS} "
           f"more steps, profiled apart; *in aten operators*: their self time over those steps' "
           f"wall time (the rest is Python, autograd's engine and the profiler's own cost). "
           f"*Share of tier*: the family's "
           f"part of the seconds the committed run times (`claims/run-times-cpu.json`) record "
           f"for the CPU tier's claims and controls.",
           "",
           "| family | share of tier | ms / step | " + " | ".join(PHASES)
           + " | outside the phases | in aten operators | full run: steps, s "
           "| one-off s: data, init, eval, probes |",
           "|---|---|---|" + "---|" * len(PHASES) + "---|---|---|---|"]
    for r in rows:
        step = r["step_s"]
        phase = [r["per_step"][p] / step for p in PHASES]
        outside = 1 - sum(phase)
        once = r["once"]
        out.append(
            f"| {r['family']} | {shares.get(r['family'], 0.0) / total:.0%} | {1000 * step:.1f} | "
            + " | ".join(f"{p:.0%}" for p in phase)
            + f" | {outside:.0%} | {r['in_ops']:.0%} | {r['full_steps']}, "
              f"{r['full_s']:.0f} | {once['load data']:.1f}, {once['gradients at init']:.1f}, "
              f"{once['evaluate']:.1f}, {once['probes']:.1f} |")
    out += ["", "Top operators per step (self CPU ms):", ""]
    for r in rows:
        ops = ", ".join(f"`{k.removeprefix('aten::')}` {1000 * s:.1f}" for k, s in r["ops"])
        out.append(f"- **{r['family']}**: {ops}")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--out", type=Path, default=Path("docs/training-profile.md"))
    parser.add_argument("--family", action="append", choices=FAMILIES)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])  # its first one imports torch._dynamo:
    # seconds a process pays once, not a run's
    rows = [profile(name, args.steps) for name in (args.family or FAMILIES)]
    args.out.write_text(markdown(rows, family_seconds()))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
