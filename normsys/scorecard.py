"""The scorecard: any norm kind, built in or brought by the user, judged by every claim whose
statistic is defined for any kind, each with that claim's own experiment, seeds and ``Rule``.

A statistic is one claim made norm-generic: ``kappa_6(layernorm) >= 0.8`` becomes
``kappa_6(N) >= 0.8`` for every kind N, on the runs the claim trains, with N in place of its norm.
Paired rules keep their reference (LayerNorm, or no norm). Each statistic is declared once, in
its source's module of normsys.declarations (a module-level ``Statistic``, which the claim's test
decides through); the scorecard's columns are the ones declared there. Every cell is a verdict
with its interval, so a new layer's row reads like the built-in ones:

    python -m normsys scorecard mynorm.py:MyNorm       # its row beside the built-in kinds
    python -m normsys scorecard --builtin              # the built-in kinds alone

Runs come from the run cache (normsys.orchestration.runs), so built-in rows a claims session trained cost
nothing; the others train in worker processes, one per core on the CPU. After the statistics, a
``Property`` column asks the layer itself something exact that needs no training (``PROPERTIES``:
batch invariance), holding or failing for every row.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from normsys import declarations
from normsys.claims.declaration import Statistic
from normsys.claims.report import Row
from normsys.claims.verdict import INCONCLUSIVE, LEVEL, REFUTED, SUPPORTED, Rule
from normsys.orchestration.cache import code_digest, lookup
from normsys.orchestration.progress import Progress, described, label
from normsys.orchestration.runs import Runs, meta_pass
from normsys.orchestration.runtimes import run_seconds
from normsys.orchestration.usernorm import absolute, load
from normsys.orchestration.workers import RUN_THREADS
from normsys.training.config import RunConfig
from normsys.training.norms import BUILTIN, NORMS
from normsys.training.provenance import device_name, git_commit, numeric_of
from normsys.training.record import RunRecord
from normsys.training.tiers import DEFAULT
from normsys.training.train import run_environment

BUILTIN_ROWS = tuple(kind for kind in NORMS if kind in BUILTIN)  # the registry's, in its order



Columns = Sequence[Statistic] | None  # the statistics a scorecard judges by (None: every one)


def columns(statistics: Columns) -> Sequence[Statistic]:
    """The statistics asked for, or every norm-generic claim declared (normsys.declarations)."""
    return declarations.statistics() if statistics is None else statistics


# ----------------------------------------------------------------------------- what it trains


@dataclass
class Plan:
    """Per (statistic, norm), the configs of each seed; the cells read from committed results
    instead of trained (``known``, ``committed``); every distinct config to fetch; and the runs
    of a user's kind that failed, with what they raised (``failed``, filled by ``fetch``)."""

    tier: str
    norms: list[str]
    cells: dict[tuple[str, str], list[list[RunConfig]]]
    known: dict[tuple[str, str], dict] = field(default_factory=dict)
    failed: dict[RunConfig, str] = field(default_factory=dict)

    @property
    def configs(self) -> list[RunConfig]:
        return list(dict.fromkeys(c for key, seeds in self.cells.items() if key not in self.known
                                  for cs in seeds for c in cs))


def plan(norms: list[str], tier: str = DEFAULT, statistics: Columns = None,
         shrink: Callable[[RunConfig], RunConfig] | None = None) -> Plan:
    """The runs behind each cell, reference rows included (``shrink``: a smaller config for each,
    as the tests use)."""
    cells = {}
    for stat in columns(statistics):
        needed = [n for n in norms if stat.applies(n)]
        if stat.versus and needed:
            needed = list(dict.fromkeys([*needed, stat.versus]))
        for norm in needed:
            cells[stat.name, norm] = [[shrink(c) if shrink else c
                                       for c in stat.runs_of(norm)(seed, tier)]
                                      for seed in stat.seeds(tier)]
    return Plan(tier, norms, cells)


def environment_of(threads: int | None) -> Callable[[RunConfig], dict[str, str]]:
    """The numeric environment a run of a config trains in here, on ``threads`` torch threads
    (the worker processes' count on the CPU; None: this process's)."""
    def environment(cfg: RunConfig) -> dict[str, str]:
        env = run_environment(cfg)
        return env if threads is None else {**env, "threads": str(threads)}

    return environment


def committed(p: Plan, environment: Callable[[RunConfig], dict[str, str]],
              folder: Path | None = None) -> tuple[dict[tuple[str, str], dict], str]:
    """The built-in kinds' cells of the plan that the committed built-in scorecard of its tier
    (``scorecard-builtin-<tier>.json``) holds as this machine would make them: the same runs
    (each seed's config fingerprints), the same training code (the run cache's code digest) and
    the numeric environment the runs would train in here (``environment``). Their per-seed
    readings then stand in for training them. And, where none does, why (else '')."""
    path = builtin_json(p.tier, folder)
    if not path.is_file():
        return {}, f"there is no {path.name} to read them from"
    body = read_builtin(path)
    prov = body["provenance"]
    if prov.get("code") != code_digest():
        return {}, f"{path.name} was made by other training code than this"
    here = {json.dumps(numeric_of(environment(c)), sort_keys=True) for c in p.configs}
    made = {json.dumps(numeric_of(e), sort_keys=True) for e in prov.get("environments", [])}
    if not here <= made:
        def named(environments: set[str]) -> str:
            return "; ".join(described(json.loads(e)) for e in sorted(environments))
        return {}, (f"{path.name} was made on {named(made) or 'no environment it names'}, "
                    f"this machine trains on {named(here)}")
    found = {}
    for (stat, norm), seeds in p.cells.items():
        cell = body["norms"].get(norm, {}).get(stat, {})
        if norm in BUILTIN and "reads" in cell and \
                cell.get("runs") == [[c.fingerprint() for c in cs] for cs in seeds]:
            found[stat, norm] = cell
    return found, ""


def stale(tier: str, folder: Path | None = None) -> str:
    """Why the committed built-in scorecard of ``tier`` is not what ``scorecard --builtin`` would
    make of this checkout: other training code (a user's scorecard would then train every
    built-in row again), other runs behind a cell, another rule, cells no longer (or not yet)
    made, or a cell that its committed readings decide otherwise (another interval level), or
    a property cell that the layer does not give now; '' where it is. The numeric environment
    is not judged here: it decides only where the committed cells can be read (``committed``)."""
    path = builtin_json(tier, folder)
    if not path.is_file():
        return f"there is no {path.name}"
    body = read_builtin(path)
    if (made := body["provenance"].get("code")) != code_digest():
        return f"{path.name} was made by other training code (digest {made}, now {code_digest()})"
    p = plan(list(BUILTIN_ROWS), tier)
    stats = {s.name: s for s in columns(None)}
    now = {(stat, norm): ([[c.fingerprint() for c in cs] for cs in seeds],
                          str(stats[stat].rule_of(norm))) for (stat, norm), seeds in p.cells.items()}
    there = {(stat, norm): (cell["runs"], cell["rule"]) for norm, row in body["norms"].items()
             for stat, cell in row.items() if "runs" in cell}
    differ = sorted(k for k in now.keys() & there.keys() if now[k] != there[k])
    for what, keys in (("made of other runs or judged by another rule", differ),
                       ("not made there", sorted(now.keys() - there.keys())),
                       ("there but no longer made", sorted(there.keys() - now.keys()))):
        if keys:
            return f"{path.name}: {len(keys)} cells {what}, e.g. {keys[0][1]} on {keys[0][0]}"
    # the same runs and rules: each cell decided again from its committed per-seed readings
    known = {(stat, norm): cell for norm, row in body["norms"].items()
             for stat, cell in row.items() if "reads" in cell}
    if unread := sorted(p.cells.keys() - known.keys()):
        return f"{path.name}: {len(unread)} cells without their per-seed readings, e.g. " \
               f"{unread[0][1]} on {unread[0][0]}"
    again = as_json(cells(replace(p, known=known), {}))
    shown = ("verdict", "mean", "low", "high", "reason")
    decided = sorted(k for k, cell in known.items()  # as JSON text: NaN equals NaN
                     if json.dumps([again[k[1]][k[0]][f] for f in shown])
                     != json.dumps([cell[f] for f in shown]))
    if decided:
        return f"{path.name}: {len(decided)} cells decided otherwise by this code from their " \
               f"readings (the interval's level, the rule's decision), e.g. {decided[0][1]} on " \
               f"{decided[0][0]}"
    # a property's cells checked again on the layers themselves (seconds)
    moved = [(prop.name, norm) for prop in PROPERTIES for norm in BUILTIN_ROWS
             if json.dumps(body["norms"].get(norm, {}).get(prop.name))
             != json.dumps(again[norm][prop.name])]  # as JSON text: NaN equals NaN
    if moved:
        return f"{path.name}: {len(moved)} property cells not what the layers give now, e.g. " \
               f"{moved[0][1]} on {moved[0][0]}"
    return ""


def layernorm_twin(cfg: RunConfig) -> RunConfig:
    """``cfg`` with LayerNorm in every norm's place (the model's, and its queries' and keys'
    where it has one)."""
    qk = {"model.qk_norm": "layernorm"} if cfg.model.qk_norm != "none" else {}
    return cfg.override(**{"model.norm": "layernorm", **qk})


def norm_inputs(cfg: RunConfig, runs: Runs) -> list[tuple[int, ...]]:
    """The shapes the norms of ``cfg``'s model take, read from the model itself: two examples of
    its data through it with LayerNorm in the norms' places, on the meta device (shapes only, no
    memory), each shape with a batch of 4."""
    probe = layernorm_twin(cfg)
    x, _ = runs.task_of(probe).probe_batch(probe)
    layernorm = type(NORMS["layernorm"].build(4))
    return list(dict.fromkeys((4, *shape[1:]) for _, shape in meta_pass(probe, x, layernorm)[0]))


def check_layers(p: Plan, names: list[str], runs: Runs | None = None) -> None:
    """Run each of the user's kinds ``names`` on every input its cells' models feed their norms
    (``norm_inputs``), in float32 and under bfloat16 autocast (the GPU path), before anything
    trains: it must keep the shape, give finite outputs the next layer takes, and pass a
    non-zero gradient to its input. Raises ValueError naming the kind, family and input."""
    import torch

    runs = runs or Runs()
    for name in names:
        feeds = {}
        for (_, norm), seeds in p.cells.items():
            for cfg in seeds[0] if norm == name else ():
                for shape in norm_inputs(cfg, runs):
                    feeds.setdefault(shape, cfg.model.family)
        for shape, family in feeds.items():
            for dtype in (torch.float32, torch.bfloat16):
                if problem := _layer_problem(NORMS[name].build, shape, dtype):
                    raise ValueError(f"{name}: on the {family} family's {shape} "
                                     f"{str(dtype).removeprefix('torch.')} input: {problem}")


def _layer_problem(factory, shape: tuple[int, ...], dtype) -> str:
    """What is wrong with ``factory(d)`` between two Linears on a ``shape`` input (under autocast
    to ``dtype`` unless float32), or ''."""
    import torch
    from torch import nn

    d = shape[-1]
    outside = _outside()  # before the kind is made: its __init__ may change it too
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        module, before, after = factory(d), nn.Linear(d, d), nn.Linear(d, d)
        x = torch.randn(shape, requires_grad=True)
        autocast = torch.autocast("cpu", dtype=dtype, enabled=dtype != torch.float32)
        params = {n: q.detach().clone() for n, q in module.named_parameters()}
        try:
            with autocast:
                h = before(x)
                y = module(h)
        except Exception as err:  # noqa: BLE001 - the user's layer failed: say how
            return f"its forward pass failed: {type(err).__name__}: {err}"
        if edited := [n for n, q in module.named_parameters() if not torch.equal(q, params[n])]:
            return (f"its forward pass changes its own parameters ({', '.join(edited)}); only the "
                    f"optimizer may (keep running statistics in buffers)")
        if not isinstance(y, torch.Tensor) or y.shape != h.shape:
            got = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
            return f"maps it to {got}; a norm must keep the shape (..., d)"
        if y.device != h.device:
            return f"returns a tensor on the {y.device} device for one on the {h.device}"
        if dtype == torch.float32 and y.dtype != torch.float32:
            return f"returns {y.dtype} for a torch.float32 input; the next layer takes torch.float32"
        if not torch.isfinite(y).all():
            return "gives non-finite outputs (NaN or inf)"
        try:
            with autocast:
                out = after(y)
        except Exception as err:  # noqa: BLE001
            return f"its output does not feed the next layer: {type(err).__name__}: {err}"
        (out.float() * torch.randn(out.shape)).sum().backward()
        if x.grad is None or not torch.isfinite(x.grad).all() or not x.grad.abs().sum() > 0:
            return "passes no finite, non-zero gradient to its input (its output does not depend " \
                   "on it)"
        return _later_problem(module, h.detach(), autocast, outside)


LAYER_TIMEOUT = 120.0  # seconds a fresh process may take to build and run a user's norm once


def isolated_problem(spec: str, name: str = "", timeout: float = LAYER_TIMEOUT) -> str:
    """What a user's norm ``spec`` (to be registered as ``name``) does in a process of its own
    that the in-process checks cannot survive or see, or '', before any of them runs it: a
    forward pass that does not end within ``timeout`` (said, never waited on), a process the
    norm ends itself (os._exit, sys.exit) or interrupts (a KeyboardInterrupt of its own is the
    norm's, not the user's Ctrl-C), and outputs that differ between two fresh processes for one
    seed: the run cache keys a norm's runs by its source, which then cannot stand for them; and
    what its import, build and first pass leave changed outside it (``_moved``), which no later
    check in this process could see, registering having run them already. A spec that does not
    load is said as loading says it."""
    context, digests = get_context("spawn"), []
    queues = [context.Queue() for _ in range(2)]  # two fresh processes at once
    probes = [(said, context.Process(target=_fresh_output, args=(spec, name, said), daemon=True))
              for said in queues]
    for _, child in probes:
        child.start()
    try:
        for said, child in probes:
            child.join(timeout)
            if child.is_alive():
                return f"{spec}: gives no output within {timeout:g} s in a process of its own " \
                       f"(a loop that does not end?)"
            try:
                kind, text = said.get(timeout=5)
            except Exception:  # noqa: BLE001 - queue.Empty: the process left no word
                return f"{spec}: ended its process without a result (exit code " \
                       f"{child.exitcode}): the norm ends or crashes the process that runs it " \
                       f"(os._exit, sys.exit, a signal)"
            if kind != "ok":
                return {"load": text, "moved": f"{spec}: {text}"}.get(
                    kind, f"{spec}: fails in a process of its own: {text}")
            digests.append(text)
    finally:
        for _, child in probes:
            if child.is_alive():
                child.kill()
            child.join()
    if digests[0] != digests[1]:
        return f"{spec}: gives other outputs in two fresh processes for one seed (it draws on " \
               f"something the seed does not set): its cached runs could not stand for it"
    return ""


def _fresh_output(spec: str, name: str, said) -> None:
    """In a fresh process: ``spec`` loaded as ``name`` (what loading refuses, as it says it),
    one forward pass on a seeded input, and the digest of its output put on ``said``; or the
    error, whatever the norm raised; or what it changed outside itself from before its file was
    imported (``_moved``)."""
    import hashlib

    import torch

    before = _outside()  # before the norm's file is imported: its import and __init__ count too
    try:
        kind = load(spec, name)
    except ValueError as err:
        said.put(("load", str(err)))
        return
    except BaseException as err:  # noqa: BLE001 - the norm's own exits and interrupts too
        said.put(("error", f"{type(err).__name__}: {err}"))
        return
    try:
        torch.manual_seed(0)
        module = NORMS[kind].build(64)
        with torch.no_grad():
            y = module(torch.randn(4, 8, 64))
        moved = _moved(before, _outside())
        said.put(("moved", moved) if moved else
                 ("ok", hashlib.sha256(y.detach().float().numpy().tobytes()).hexdigest()))
    except BaseException as err:  # noqa: BLE001 - the norm's own exits and interrupts too
        said.put(("error", f"{type(err).__name__}: {err}"))


def _outside() -> tuple:
    """What a norm must leave as it found it: Python's and numpy's global random generators
    (which a run's seed does not set), torch's thread count (the run's plan sets it) and the
    working folder."""
    import os
    import random

    import numpy as np
    import torch

    kind, keys, position, *gauss = np.random.get_state()  # a draw may move the position alone
    return (random.getstate(), (kind, keys.tobytes(), position, *gauss), torch.get_num_threads(),
            os.getcwd())


def _later_problem(module, h, autocast, outside: tuple) -> str:
    """What would break a run later that one forward pass does not show, or '': a second call on
    the same input (the global RNG set alike before each) that gives another output (state kept
    between calls), a forward pass in eval mode that fails or gives another shape or non-finite
    values, a call that reseeds torch's global RNG, and a kind that changed what ``outside``
    (``_outside``, taken before it was made) holds: drawn from Python's or numpy's generators
    (its output would differ between processes), torch's thread count or the working folder."""
    import torch

    seed, outs = 20_261_202, []  # a seed no kind sets itself
    for _ in range(2):
        torch.manual_seed(seed)
        with torch.no_grad(), autocast:
            outs.append(module(h))
    if torch.initial_seed() != seed:
        return f"reseeds torch's global random generator in its forward pass (to " \
               f"{torch.initial_seed()}): the run's seed would no longer set what follows"
    if not torch.equal(*outs):
        return "gives another output for the same input on a second call: it keeps state " \
               "between calls that changes its output"
    module.eval()
    try:
        with torch.no_grad(), autocast:
            y = module(h)
    except Exception as err:  # noqa: BLE001 - the user's layer failed: say how
        return f"its forward pass in eval mode failed: {type(err).__name__}: {err}"
    finally:
        module.train()
    if not isinstance(y, torch.Tensor) or y.shape != h.shape or not torch.isfinite(y).all():
        return "in eval mode gives another shape or non-finite outputs; a run's evaluation " \
               "calls it so"
    return _moved(outside, _outside())


def _moved(before: tuple, now: tuple) -> str:
    """What a norm changed between two readings of ``_outside``, or ''."""
    said = ("draws from Python's global random generator, which a run's seed does not set (its "
            "output would differ between processes)",
            "draws from numpy's global random generator, which a run's seed does not set (its "
            "output would differ between processes)",
            f"changes torch's thread count ({before[2]} -> {now[2]}), which the run's plan sets",
            f"changes the working folder ({before[3]} -> {now[3]})")
    return next((why for was, is_, why in zip(before, now, said, strict=True) if was != is_), "")


BATCH_SIZES = (1, 7, 64)  # the batches a row is put through, the others' rows drawn anew each


def batch_variance(factory, d: int = 64, seed: int = 0) -> str:
    """Whether a norm ``factory(d)`` (in training mode, float32, on this machine's kernels) gives a
    row bit-identical outputs whatever batch it comes in: the same row first in batches of each
    of BATCH_SIZES, the other rows drawn anew for each, as rows (B, d) and as tokens (B, 5, d).
    '' where it does; else how far the row's output moved, and in which batches."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = factory(d).train()
    for shape in ((d,), (5, d)):
        row, outs, refused = torch.randn((1, *shape), generator=gen), {}, ""
        for n in BATCH_SIZES:
            try:
                with torch.no_grad():
                    outs[n] = module(torch.cat([row, torch.randn((n - 1, *shape),
                                                                 generator=gen)]))[0]
            except Exception as err:  # noqa: BLE001 - a kind that refuses a batch size says why
                refused = refused or f"in a batch of {n}: {type(err).__name__}: {err}"
        (first, base), *others = outs.items() or [(0, None)]
        for n, out in others:
            if not torch.equal(out, base):
                return (f"a row's output moves by up to {(out - base).abs().max().item():.3g} "
                        f"between batches of {first} and {n} "
                        f"({'tokens' if len(shape) > 1 else 'rows'} of width {d})")
        if refused:
            return refused
    return ""


@dataclass(frozen=True)
class Property:
    """A column of what a norm layer is, checked on the layer itself without training: ``check``
    (its factory -> '' where the property holds, else how it fails) decides the cell exactly,
    supported or refuted, on this machine's kernels."""

    name: str
    words: str
    rule: str  # what holding it means, as the column's rule
    check: Callable[[Callable], str]


PROPERTIES = (Property("batch_invariance", "a row alike in any batch",
                       f"a row's output bit-identical in batches of "
                       f"{', '.join(map(str, BATCH_SIZES))}", batch_variance),)


def properties(table: dict) -> list[Property]:
    """The property columns ``table`` holds (what ``cells`` made)."""
    return [p for p in PROPERTIES if any(p.name in row for row in table.values())]


def property_cell(prop: Property, norm: str, tier: str) -> Row:
    """``prop`` of the kind ``norm`` (the registry's layer): supported where it holds, refuted
    with how it fails where not."""
    why = prop.check(NORMS[norm].build)
    return Row(verdict=REFUTED if why else SUPPORTED, rule=prop.rule, reason=why or prop.rule,
                   tier=tier, statistic=prop.name, evidence={"property": why or "holds"})


def estimate(p: Plan, runs: Runs, threads: int | None = None
             ) -> tuple[list[tuple[RunConfig, str]], dict[str, float], int]:
    """Each config with what it costs ('cached', '~N s' as the tier's run times record it or its
    LayerNorm twin (normsys.orchestration.runtimes), else as its twin's cached run took here, or 'time
    unknown'); the seconds of each run to train (by config fingerprint; 0 without an
    estimate); and how many have none (``runs`` loads each config's data, for its digest).
    ``threads``: the torch threads the runs will train on (a cached run made on another count
    is not the run; None: this process's)."""
    environment = environment_of(threads)
    rows, seconds, unknown = [], {}, 0
    for cfg in p.configs:
        digest = runs.task_of(cfg).digest
        if lookup(cfg, digest, environment) is not None:
            rows.append((cfg, "cached"))
            continue
        twin_cfg = layernorm_twin(cfg)
        recorded = run_seconds(cfg) or run_seconds(twin_cfg)
        twin = None if recorded else lookup(twin_cfg, digest, environment)
        if recorded is not None:
            rows.append((cfg, f"~{recorded[0]:.0f} s (as recorded on {recorded[1]})"))
            seconds[cfg.fingerprint()] = recorded[0]
        elif twin is not None:
            rows.append((cfg, f"~{twin.wall_time:.0f} s (its LayerNorm run's time here)"))
            seconds[cfg.fingerprint()] = twin.wall_time
        else:
            rows.append((cfg, "time unknown"))
            seconds[cfg.fingerprint()] = 0.0
            unknown += 1
    return rows, seconds, unknown


def cost_line(rows: list[tuple[RunConfig, str]], seconds: dict[str, float], unknown: int,
              workers: int) -> str:
    """``222 runs, 40 cached; the other 182 ~62.7 min of training on one core (~31.4 min on 2
    processes)``: what a scorecard costs before it trains."""
    todo, total = sum(cost != "cached" for _, cost in rows), sum(seconds.values())
    text = f"{len(rows)} runs, {len(rows) - todo} cached"
    if todo:
        text += f"; the other {todo} ~{total / 60:.1f} min of training on one core"
        if workers > 1:
            text += f" (~{total / 60 / workers:.1f} min on {workers} processes)"
    return text + (f", plus {unknown} not timed yet" if unknown else "")


def _start_worker(specs: list[tuple[str, str]], threads: int, counter: str) -> None:
    import signal

    import torch

    from normsys.training import train

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops us
    torch.set_num_threads(threads)
    train.STEP_BARS = False  # one of a pool of processes on the terminal
    global _WORKER_RUNS, _WORKER_ERROR
    try:
        for spec, name in specs:
            load(spec, name)
    except ValueError as err:
        # a pool restarts a worker whose initializer raised, without end: the first run says it
        _WORKER_ERROR = f"in a worker process: {err}"
        return
    _WORKER_RUNS = Runs(Progress(os.dup(2), Path(counter)))


_WORKER_RUNS: Runs | None = None  # a worker process's runs, made by its initializer
_WORKER_ERROR = ""  # why its initializer could not make them


def _fetch(indexed: tuple[int, RunConfig]) -> tuple[int, RunRecord | str]:
    if _WORKER_ERROR:
        raise ValueError(_WORKER_ERROR)
    return indexed[0], trained(_WORKER_RUNS, indexed[1])


def trained(runs: Runs, cfg: RunConfig) -> RunRecord | str:
    """The run's record; for a run of a user's kind, what its code raised or exited with instead
    (one line), so that one kind failing stops no other run. A built-in kind's failure is the
    library's: it ends the scorecard."""
    if cfg.model.norm in BUILTIN:
        return runs.run(cfg)
    try:
        return runs.run(cfg)
    except (Exception, SystemExit) as err:  # noqa: BLE001 - the user's code failed: say how
        return raised(err)


def raised(err: BaseException) -> str:
    """What a user's code raised, in one line."""
    return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}".rstrip()


def fetch(p: Plan, specs: list[tuple[str, str]], workers: int, runs: Runs,
          threads: int = RUN_THREADS,
          done: Callable[[dict[RunConfig, RunRecord]], None] | None = None
          ) -> dict[RunConfig, RunRecord]:
    """Every run of the plan, from the cache or trained: in ``workers`` processes (each with the
    user's norms registered again, and its own runs), each training on ``threads`` torch threads
    (the claims' count unless told otherwise: a run's numbers depend on it), longest runs first;
    with ``runs`` in this process when ``workers`` <= 1. The workers' progress lines share the
    tally of ``runs.progress`` where it has a counter file (its plan: run k of N, time left);
    ``done`` is handed the records so far each time one arrives."""
    configs = sorted(p.configs, key=lambda c: c.model.family not in ("encoder", "char_gpt"))
    records: dict[RunConfig, RunRecord] = {}

    def arrived(cfg: RunConfig, record: RunRecord | str) -> None:
        if isinstance(record, str):  # a user's kind failed: said now, its cells say it too
            p.failed[cfg] = record
            print(f"error: {cfg.model.norm}: its {cfg.model.family} run {label(cfg)} failed: "
                  f"{record}; the other runs go on", file=sys.stderr, flush=True)
        else:
            records[cfg] = record
        if done is not None:
            done(records)

    if workers <= 1:
        for c in configs:
            arrived(c, trained(runs, c))
        return records
    with tempfile.TemporaryDirectory() as tmp:
        counter = runs.progress.counter or Path(tmp) / "done"
        pool = get_context("spawn").Pool(workers, _start_worker, (
            [(absolute(s), n) for s, n in specs], threads, str(counter)))
        try:
            arriving = pool.imap_unordered(_fetch, enumerate(configs), chunksize=1)
            for _ in configs:
                # a timeout keeps the wait interruptible: Ctrl-C reaches this process at once
                i, record = arriving.next(timeout=WAIT_FOREVER)
                arrived(configs[i], record)
            pool.close()
        except BaseException:  # Ctrl-C or a failed run: stop every worker now, not at its end
            pool.terminate()
            raise
        finally:
            pool.join()
    return {c: records[c] for c in configs if c in records}


def complete(p: Plan, records: dict[RunConfig, RunRecord],
             statistics: Columns = None) -> list[Statistic]:
    """The statistics whose cells all have their runs (or are read from committed results)."""
    def ready(stat: Statistic) -> bool:
        return all(c in records or c in p.failed for key, seeds in p.cells.items()
                   if key[0] == stat.name and key not in p.known for cs in seeds for c in cs)

    return [s for s in columns(statistics) if ready(s)]


WAIT_FOREVER = 30 * 24 * 3600.0  # seconds

# ----------------------------------------------------------------------------- the verdicts


def cells(p: Plan, records: dict[RunConfig, RunRecord], statistics: Columns = None,
          reach: dict[str, tuple[float, float]] | None = None,
          props: Sequence[Property] | None = None) -> dict[str, dict[str, Row]]:
    """{norm: {statistic: its cell, a report Row}}, decided as the statistic's claim decides, with the
    seeds whose runs diverged, the kind's own per-seed readings (``reads``: what a later
    scorecard pairs with) and the runs they came from as its evidence; ``n/a`` where the
    experiment does not take the kind. A kind that is not built in whose mean lies outside
    ``reach[statistic]`` (what the built-in kinds reach, ``builtin_reach``) is ``out of range``
    (the rule's verdict kept as ``rule_verdict``): a value no working norm gives is a finding to
    look at, not a verdict to trust. Then each of ``props``, checked on every row's layer (None:
    every property with every statistic, none with statistics chosen)."""
    judged = {s.name for s in columns(statistics)}
    made = {key: seeds for key, seeds in p.cells.items()
            if key not in p.known and key[0] in judged}
    # per seed that failed, what its first failed run raised, or a user's kind in the reading
    failed: dict[tuple[str, str], list[str]] = {key: [] for key in made}

    def read(key: tuple[str, str], cs: list[RunConfig]) -> Any:
        if why := next((p.failed[c] for c in cs if c in p.failed), None):
            failed[key].append(why)
            return math.nan
        try:
            return stat_value(*key, [records[c] for c in cs], statistics)
        except Exception as err:  # a user's kind that fails where it is read: that cell says how
            if key[1] in BUILTIN:
                raise
            failed[key].append(f"its reading failed: {raised(err)}")
            return math.nan

    per_seed = {key: [read(key, cs) for cs in seeds] for key, seeds in made.items()}
    per_seed.update({key: cell["reads"] for key, cell in p.known.items() if key[0] in judged})
    diverged = {key: sum(any(c not in p.failed and records[c].diverged for c in cs)
                         for cs in seeds) for key, seeds in made.items()}
    diverged.update({key: cell["diverged"] for key, cell in p.known.items() if key[0] in judged})
    table: dict[str, dict[str, Row]] = {}
    for norm in p.norms:
        row = table.setdefault(norm, {})
        for stat in columns(statistics):
            rule = stat.rule_of(norm)
            named = {"id": stat.claim, "tier": p.tier, "statistic": rule.statistic}
            if not stat.applies(norm):
                row[stat.name] = Row(verdict=NA, rule=rule.text, **named)
                continue
            d = stat.verdict(norm, lambda kind, name=stat.name: per_seed[name, kind])
            evidence = {"diverged": diverged[stat.name, norm],
                        **({"failed": why} if (why := failed.get((stat.name, norm))) else {}),
                        "reads": list(per_seed[stat.name, norm]),
                        "runs": [[c.fingerprint() for c in cs] for cs in p.cells[stat.name, norm]]}
            span = (reach or {}).get(stat.name)
            if span and norm not in BUILTIN and not span[0] <= d.mean <= span[1]:
                # beyond every built-in kind's values: the claim's rule was not made for it, so
                # what it says (``rule_verdict``) is no verdict
                evidence.update(out_of_range=list(span), rule_verdict=d.verdict)
                d = replace(d, verdict=OUT_OF_RANGE)
            row[stat.name] = Row(**asdict(d), evidence=evidence, **named)
        row.update({prop.name: property_cell(prop, norm, p.tier) for prop in (
            (PROPERTIES if statistics is None else ()) if props is None else props)})
    return table


def as_json(table: dict[str, dict[str, Row]], statistics: Columns = None) -> dict:
    """The table as the scorecard's JSON keeps it: {norm: {statistic: cell}}."""
    rules = {s.name: s.rule_of for s in columns(statistics)}
    rules.update({prop.name: lambda norm, rule=prop.rule: rule for prop in properties(table)})
    return {norm: {name: cell_json(cell, rules[name](norm)) for name, cell in row.items()}
            for norm, row in table.items()}


def of_json(norms: dict) -> dict[str, dict[str, Row]]:
    """A table as ``as_json`` keeps it, read back (what a cell shows; its rule stays text; a
    null read as NaN)."""
    def cell(c: dict) -> Row:
        c = numeric(c)
        if c["verdict"] == NA:
            return Row(verdict=NA)
        return Row(verdict=c["verdict"], values=c["values"], mean=c["mean"], low=c["low"],
                       high=c["high"], n=len(c["values"]), reason=c["reason"],
                       evidence={k: c[k] for k in EVIDENCE if k in c})

    return {norm: {name: cell(c) for name, c in row.items()} for norm, row in norms.items()}


# a cell's evidence, beside its verdict and interval
EVIDENCE = ("diverged", "failed", "reads", "runs", "out_of_range", "rule_verdict", "property")


def cell_json(cell: Row, rule: Rule) -> dict:
    """A cell as the scorecard's JSON keeps it (``rule``: its statistic's rule for the row)."""
    if cell.verdict == NA:
        return {"verdict": NA, "rule": str(rule)}
    shown = {"mean": cell.mean, "low": cell.low, "high": cell.high, "verdict": cell.verdict,
             "rule": str(rule), "values": list(cell.values), "reason": cell.reason}
    return {**shown, **cell.evidence}


GALLERY = Path(__file__).parents[1] / "claims" / "gallery"  # in a checkout


def builtin_name(tier: str) -> str:
    """The file name (without suffix) of the built-in scorecard of ``tier``, as ``scorecard
    --builtin`` writes it and the gallery holds it."""
    return f"scorecard-builtin-{tier}"


def builtin_json(tier: str, folder: Path | None = None) -> Path:
    """The built-in scorecard of ``tier`` in ``folder`` (the gallery unless told)."""
    return (folder or GALLERY) / f"{builtin_name(tier)}.json"


ABOUT = ("normsys scorecard: norms -> statistic -> cell. A cell's `verdict` is the one to read: "
         "supported, refuted or inconclusive as its claim decides; 'out of range' where the "
         "norm's mean lies beyond every built-in kind's (no verdict: what the rule would say is "
         "kept as `rule_verdict`); 'diverged (k of n seeds)' where runs diverged; 'n/a' where the "
         "statistic's experiment does not take the norm. `reads`: the per-seed values; `runs`: "
         "the run fingerprints they came from; `provenance`: where and with what it was made "
         "(`partial`: columns still to come when it was written); null: a value that is not a "
         "number (NaN).")
OUT_OF_RANGE = "out of range"  # a user's value beyond every built-in kind's (builtin_reach)
NA = "n/a"  # a cell of a kind its statistic's experiment does not take


def read_builtin(path: Path) -> dict:
    """The committed built-in scorecard at ``path``, its shape checked: a ValueError naming the
    file, what is wrong and how to restore it, never a traceback, where it is not JSON of
    provenance and norms -> statistics -> cells."""
    def wrong(why: str) -> ValueError:
        return ValueError(f"{path}: cannot be read as the built-in scorecard ({why}); restore "
                          f"it with git checkout -- {path}, or write it again with python -m "
                          f"normsys scorecard --builtin")

    try:
        body = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise wrong(f"{type(err).__name__}: {err}") from None
    if not isinstance(body, dict) or not isinstance(body.get("provenance"), dict):
        raise wrong("no provenance")
    if not isinstance(norms := body.get("norms"), dict):
        raise wrong("no norms")
    for norm, row in norms.items():
        if not isinstance(row, dict) or not all(isinstance(c, dict) for c in row.values()):
            raise wrong(f"the row of {norm} is no table of statistics and cells")
        norms[norm] = row = {stat: numeric(cell) for stat, cell in row.items()}
        for stat, cell in row.items():
            values = cell.get("values", [])
            if not isinstance(values, list) or not all(
                    isinstance(v, int | float) and not isinstance(v, bool) for v in values):
                raise wrong(f"{stat} of {norm}: values {values!r}, not a list of numbers")
            for name in ("runs", "reads"):
                if not isinstance(cell.get(name, []), list):
                    raise wrong(f"{stat} of {norm}: {name} {cell[name]!r}, not a list")
    return body


def builtin_reach(tier: str, folder: Path | None = None) -> dict[str, tuple[float, float]]:
    """Per statistic, the lowest and highest per-seed value any built-in kind gave in the
    committed built-in scorecard of ``tier`` (``scorecard-builtin-<tier>.json``); {} without
    one."""
    path = builtin_json(tier, folder)
    if not path.is_file():
        return {}
    spans: dict[str, tuple[float, float]] = {}
    for row in read_builtin(path)["norms"].values():
        for name, cell in row.items():
            values = [v for v in cell.get("values", []) if math.isfinite(v)]
            if values:
                low, high = spans.get(name, (math.inf, -math.inf))
                spans[name] = (min(low, *values), max(high, *values))
    return spans


def stat_value(name: str, norm: str, records: list[RunRecord], statistics: Columns = None):
    """The statistic's value on one seed's records, read as its claim reads it
    (declaration.Experiment.read: NaN where a run diverged or the value is undefined)."""
    stat = next(s for s in columns(statistics) if s.name == name)
    return stat.value_of(norm, records)


def provenance(tier: str, specs: list[tuple[str, str]],
               records: Sequence[RunRecord] = ()) -> dict:
    """Where the scorecard was made; ``environments``: the numeric environments its runs were
    made in (provenance.numeric_of of each record's), each once."""
    import torch

    from normsys import __version__

    environments = {json.dumps(numeric_of(r.env), sort_keys=True) for r in records}
    return {"tier": tier, "device": device_name(), "commit": git_commit(), "code": code_digest(),
            "torch": torch.__version__, "normsys": __version__,
            "environments": [json.loads(e) for e in sorted(environments)],
            "user_norms": {name: spec for spec, name in specs},
            "claims": {s.name: s.claim for s in declarations.statistics()}}

# ----------------------------------------------------------------------------- the outputs

MARK = {SUPPORTED: "+", REFUTED: "x", INCONCLUSIVE: "?", NA: ""}


def cell_text(cell: Row) -> str:
    if cell.verdict == NA:
        return NA
    if "property" in cell.evidence:
        return f"{'holds' if cell.verdict == SUPPORTED else 'fails'} {MARK[cell.verdict]}"
    if failed := cell.evidence.get("failed"):
        return f"failed ({len(failed)} of {len(cell.values)} seeds)"
    if diverged := cell.evidence.get("diverged"):
        return f"diverged ({diverged} of {len(cell.values)} seeds)"
    if cell.verdict == OUT_OF_RANGE:
        return f"{cell.mean:.3g} out of range"
    return f"{cell.mean:.3g} {MARK[cell.verdict]}"


def interval_text(cell: Row, sep: str = " ") -> str:
    """The cell's text and, for a value over seeds, its interval (at LEVEL, as its claim decides
    one look): ``0.806 ? [0.79, 0.82]``."""
    text = cell_text(cell)
    if cell.verdict != NA and not {"diverged", "failed", "property"} & {
            k for k, v in cell.evidence.items() if v}:
        text = f"{text}{sep}[{cell.low:.3g}, {cell.high:.3g}]"
    return text


def column_names(table: dict, statistics: Columns) -> list[str]:
    """The columns in order: the statistics', then the properties' the table holds."""
    return [s.name for s in columns(statistics)] + [p.name for p in properties(table)]


def as_text(table: dict, statistics: Columns = None) -> str:
    names = column_names(table, statistics)
    width = max(len(n) for n in table) + 2
    cols = [max(len(n), 10, *(len(cell_text(row[n])) for row in table.values())) + 2
            for n in names]  # the widest cell: "1.55 out of range" never runs into the next
    lines = ["".ljust(width) + "".join(n.ljust(c) for n, c in zip(names, cols, strict=True))]
    for norm, row in table.items():
        lines.append(norm.ljust(width) + "".join(cell_text(row[n]).ljust(c)
                                                 for n, c in zip(names, cols, strict=True)))
    return "\n".join(lines + ["", legend(statistics, properties(table))])


def legend(statistics: Columns = None, props: Sequence[Property] = ()) -> str:
    rows = [f"  {s.name}: {s.rule_of('N')}  (claim {s.claim}, {len(s.seeds(DEFAULT))} seeds at the "
            f"CPU tier)"
            for s in columns(statistics)]
    rows += [f"  {p.name}: {p.rule}  (the layer itself, in training mode, on this machine's kernels: "
             f"holds or fails exactly)" for p in props]
    return (f"mean over seeds [{100 * LEVEL:.4g}% t-interval, where shown]; + supported, "
            "x refuted, ? inconclusive (the interval against the claim's rule, N = the row's "
            "norm):\n"
            + "\n".join(rows))


def as_markdown(table: dict, statistics: Columns = None) -> str:
    names = column_names(table, statistics)
    lines = ["| norm | " + " | ".join([f"{s.name} ({s.words})" if s.words else s.name
                                       for s in columns(statistics)]
                                      + [f"{p.name} ({p.words})" for p in properties(table)])
             + " |",
             "|---" * (len(names) + 1) + "|"]
    lines += [f"| {norm} | " + " | ".join(interval_text(row[n]) for n in names) + " |"
              for norm, row in table.items()]
    return "\n".join(lines) + "\n\n" + legend(statistics, properties(table)).replace("\n  ", "\n- ") \
        + "\n"


COLOURS = {"reference": "#ececec", NA: "#f7f7f7", REFUTED: "#e8a0a0",
           INCONCLUSIVE: "#f2e3a0", SUPPORTED: "#9fd49f", OUT_OF_RANGE: "#a9c8ec"}


def shade(cell: Row, subject: bool) -> str:
    """What a cell's colour says: its verdict for a row being judged, 'out of range' where its
    value lies beyond every built-in kind's, 'reference' for a row it is judged against."""
    if cell.verdict == NA:
        return NA
    if not subject:
        return "reference"
    return cell.verdict


def draw(fig, table: dict, statistics: Columns = None, subjects: set[str] | None = None) -> None:
    """Norms x statistics, the rows judged (``subjects``: the user's kinds; every row when None)
    first and coloured by verdict, the others grey as references; each cell with its mean and
    interval, each column with its words and its rule."""
    from matplotlib.colors import ListedColormap

    subjects = set(table) if subjects is None else subjects
    norms = [n for n in table if n in subjects] + [n for n in table if n not in subjects]
    names, shades = column_names(table, statistics), list(COLOURS)
    ticks = [f"{textwrap.fill(st.words, 24)}\n{textwrap.fill(str(st.rule_of('N')), 24)}"
             for st in columns(statistics)]
    ticks += [f"{textwrap.fill(p.words, 24)}\n{textwrap.fill(p.rule, 24)}" for p in properties(table)]
    grid = [[shades.index(shade(table[n][s], n in subjects)) for s in names] for n in norms]
    ax = fig.subplots()
    fig.set_size_inches(1.9 * len(names) + 2, 0.62 * len(norms) + 2.4)
    ax.imshow(grid, cmap=ListedColormap(list(COLOURS.values())), vmin=0, vmax=len(COLOURS) - 1,
              aspect="auto")
    for i, n in enumerate(norms):
        for j, s in enumerate(names):
            ax.text(j, i, interval_text(table[n][s], "\n"), ha="center", va="center", fontsize=7)
    ax.set_xticks(range(len(names)), ticks, rotation=0, fontsize=7)
    ax.xaxis.tick_top()
    ax.set_yticks(range(len(norms)), [n if n in subjects else f"{n} (reference)" for n in norms])
    legend = ", ".join(f"{name}" for name in ("green supported", "red refuted",
                                               "yellow inconclusive", "blue out of range",
                                               "grey reference or n/a"))
    ax.set_xlabel(f"mean [{100 * LEVEL:.4g}% interval] over seeds, N = the row's norm. "
                  f"A colour is the verdict "
                  f"of the column's rule for the row, not a grade of the norm: {legend}; "
                  f"+ supported, x refuted, ? inconclusive", fontsize=7)
    judged = [n for n in norms if n in subjects]
    ax.set_title("Scorecard: " + (", ".join(judged) if len(judged) < len(norms) else
                                  "the built-in kinds") + ", judged by each norm-generic claim's rule",
                 fontsize=9, pad=40)


def markdown_page(table: dict, prov: dict, statistics: Columns = None) -> str:
    """scorecard.md: where it was measured, the table and the legend."""
    partial = f"**Partial**: {prov['partial']}\n\n" if prov.get("partial") else ""
    return (f"# Scorecard ({prov['tier']} tier, {prov['device']}, {prov['commit'][:12]})\n\n"
            f"{partial}{as_markdown(table, statistics)}")


def strict(obj):
    """``obj`` as strict JSON holds it: a float that is not a number (or not finite) as null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: strict(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [strict(v) for v in obj]
    return obj


NUMBERS = ("mean", "low", "high")  # a cell's numbers, and its lists of them (LISTS), null as NaN
LISTS = ("values", "reads", "out_of_range")


def numeric(cell: dict) -> dict:
    """A cell of a scorecard's JSON with its nulls read back as NaN (``strict``)."""
    def number(v):
        return math.nan if v is None else v

    return {**cell, **{k: number(cell[k]) for k in NUMBERS if k in cell},
            **{k: [number(v) for v in cell[k]] for k in LISTS if isinstance(cell.get(k), list)}}


def write(out: Path, table: dict, prov: dict, statistics: Columns = None,
          subjects: set[str] | None = None, name: str = "scorecard") -> list[Path]:
    """``name``.json, .md and .png in ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    paths = [out / f"{name}.json", out / f"{name}.md", out / f"{name}.png"]
    # the rows in the table's order, which the page and the figure show (the judged ones first)
    paths[0].write_text(json.dumps(strict({"about": ABOUT, "norms": as_json(table, statistics),
                                           "provenance": prov}), indent=1, allow_nan=False)
                        + "\n")
    paths[1].write_text(markdown_page(table, prov, statistics))
    fig = plt.figure()
    draw(fig, table, statistics, subjects)
    fig.savefig(paths[2], dpi=110, bbox_inches="tight")
    plt.close(fig)
    return paths


def builtin_rows(against: list[str]) -> list[str]:
    if unknown := [n for n in against if n not in BUILTIN]:
        raise ValueError(f"--against {','.join(unknown)}: not a built-in kind; built-in kinds: "
                         f"{', '.join(BUILTIN_ROWS)}")
    return against
