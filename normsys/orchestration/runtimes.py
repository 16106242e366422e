"""What training costs: the one module that prices work. Each claim's training, recorded: a
committed table per tier (``claims/run-times-<tier>.json``) made from a run cache's claim indexes
(``index_path``: each claim's runs with their training times), so that the cost of a claim is
known before its runs are in anyone's cache; from it, a run's price (``expected_seconds``, a
group of stacked seeds' ``group_seconds``), a claim's (``cost``), the negative controls' runs
besides the claims' (``control_work``) and the wall time of many on a few processes
(``expected_wall``; the CPU tier's budget, ``budget_wall``).

    python -m normsys run-times [--tier cpu] [--cache DIR]     merge a cache's claims into it
    python -m normsys run-times --replace                        the cache's claims alone

Per claim (and per negative control, ``control-<claim file>.<test name>``): its runs, the
seconds they took, the seconds of its *own* runs (those no other claim of the tier reads) and the
fingerprints of its runs, by which a plan counts a run that claims and controls share once; per
run config (by
fingerprint), the seconds it took, for the cost of a run before it is cached (``train --dry-run``,
the scorecard's dry run, a control's runs before its test runs). The claims start longest
first (normsys.claims.plugin): under pytest-xdist the workers split the long groups of runs early,
and the short claims, whose runs are mostly trained by then, fill in at the end.
"""

from __future__ import annotations

import functools
import heapq
import json
import os
import re
import statistics
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from normsys import __version__
from normsys.orchestration.cache import (
    cached_fingerprints,
    code_digest,
    environment_digest,
    run_key,
)
from normsys.orchestration.workers import RUN_THREADS
from normsys.training.config import RunConfig
from normsys.training.provenance import cpu_kind, device_name, numeric_environment
from normsys.training.store import atomic_write_text, cache_root
from normsys.training.tiers import DEFAULT, TIERS
from normsys.training.train import run_environment

FOLDER = Path(__file__).parents[2] / "claims"  # beside the claim files, in a checkout


def table_path(tier: str, folder: Path | None = None) -> Path:
    return (folder or FOLDER) / f"run-times-{tier}.json"


def controls_defined(folder: Path | None = None) -> list[str]:
    """The index names (``control-<claim file>.<test>``) of the negative controls the claim
    files in ``folder`` define; a parametrized one's indexes start with its name and ``_``."""
    return sorted(f"control-{path.stem}.{name}" for path in (folder or FOLDER).glob("test_*.py")
                  for name in re.findall(r"^def (test_control\w*)\(", path.read_text(), re.M))


def undefined(index: str, controls: list[str]) -> bool:
    """Whether ``index`` is a control's that none of ``controls`` (controls_defined) is."""
    return index.startswith("control-") and not any(
        index == c or index.startswith(f"{c}_") for c in controls)


def indexes_of(cache: Path, tier: str, controls: list[str] | None = None
               ) -> tuple[list[Path], list[Path]]:
    """The claim indexes of ``tier`` in the cache folder ``cache``, and those left out: with
    ``controls`` (controls_defined), a control's index that none of them is (a test since
    renamed or removed, whose index the cache keeps)."""
    indexes = sorted((cache / "claims").glob(f"*-{tier}.json"))
    if not indexes:
        raise ValueError(f"{cache}: no claim indexes of the {tier} tier (claims/*-{tier}.json); "
                         f"run the claims with NORMSYS_CACHE={cache} first")
    gone = [p for p in indexes if controls is not None
            and undefined(p.name.removesuffix(f"-{tier}.json"), controls)]
    return [p for p in indexes if p not in gone], gone


def measure(cache: Path, tier: str, controls: list[str] | None = None) -> dict:
    """The tier's table from the claim indexes in the cache folder ``cache`` (``indexes_of``):
    per claim id, its runs, their seconds and the seconds of the runs no other claim reads.
    Runs never timed (read from a cache that did not time them) count nothing and are counted
    apart."""
    indexes, _ = indexes_of(cache, tier, controls)
    runs: dict[str, dict[str, float | None]] = {}
    fingerprints: dict[str, set[str]] = {}
    by_config: dict[str, float] = {}
    for path in indexes:
        claim = path.name.removesuffix(f"-{tier}.json")
        runs[claim], fingerprints[claim] = {}, set()
        for r in json.loads(path.read_text())["runs"]:
            cfg = RunConfig.from_dict(r["config"])
            runs[claim][run_key(cfg, r["data"])] = r["seconds"]
            fingerprints[claim].add(cfg.fingerprint())
            if r["seconds"] is not None:
                by_config[cfg.fingerprint()] = round(r["seconds"], 1)
    readers: dict[str, int] = {}
    for keys in runs.values():
        for key in keys:
            readers[key] = readers.get(key, 0) + 1
    claims = {}
    for claim, keys in sorted(runs.items()):
        claims[claim] = {"runs": len(keys),
                         "seconds": round(sum(s or 0 for s in keys.values()), 1),
                         "own_seconds": round(sum(s or 0 for k, s in keys.items()
                                                  if readers[k] == 1), 1),
                         "untimed": sum(s is None for s in keys.values()),
                         "fingerprints": sorted(fingerprints[claim])}
    device = device_name()
    if device == "cpu":  # the kind that sets a run's speed: its kernels and vendor, and cores
        device = f"{cpu_kind()}, {os.cpu_count()} cores"
    return {"tier": tier, "device": device, "claims": claims,
            "runs": dict(sorted(by_config.items()))}


def merged(committed: dict, measured: dict, kept: Callable[[str], bool]) -> dict:
    """The committed table with what a cache measured merged in: the measured rows in place of
    their committed ones, every other committed row that ``kept`` keeps (a claim still declared,
    a control still defined), each run's seconds the cache's where it timed it; each row's
    seconds and own seconds (those of runs no other row reads) counted again over the merged
    runs. A cache that holds a few claims' indexes then updates those rows, not the table.
    One table is one machine's: a cache measured on another kind is refused."""
    if committed.get("device") and committed["device"] != measured["device"]:
        raise ValueError(f"the committed table was measured on {committed['device']}, this "
                         f"cache's runs on {measured['device']}: a table holds one machine's "
                         f"times (--replace writes this cache's alone)")
    rows = {name: dict(row) for name, row in committed.get("claims", {}).items()
            if name not in measured["claims"] and kept(name)}
    rows.update({name: dict(row) for name, row in measured["claims"].items()})
    seconds = {**committed.get("runs", {}), **measured["runs"]}
    readers = Counter(f for row in rows.values() for f in row["fingerprints"])
    for row in rows.values():
        row["seconds"] = round(sum(seconds.get(f, 0.0) for f in row["fingerprints"]), 1)
        row["own_seconds"] = round(sum(seconds.get(f, 0.0) for f in row["fingerprints"]
                                       if readers[f] == 1), 1)
    read = set(readers)
    return {**measured, "claims": dict(sorted(rows.items())),
            "runs": {f: s for f, s in sorted(seconds.items()) if f in read}}


# A tier's budget is set on two processes of a 2-core AMD AVX2 machine (tiers.Tier.budget_minutes),
# the slowest kind CI meets; a table measured on another kind is scaled to it by how much faster
# that kind trains the same runs. AMD AVX-512: 2.0, the figure the budget was set with (its 30
# minutes are 1,800 one-core s of a table measured there). Measurements lie on both sides of it:
# three char-LSTM runs timed alone on both kinds read 2.1-2.3x; two cold CPU tiers, timed on each
# kind by different code, 1.52x over the 231 runs both timed (2,581 s against 1,699 s). Until a
# cold tier is timed on an AVX2 machine by the same code, the budget's own figure holds.
TO_BUDGET_KIND = {"cpu (AVX2, AMD)": 1.0, "cpu (AVX512, AMD)": 2.0}
BUDGET_PROCESSES = 2


def budget_wall(table: dict) -> float | None:
    """The minutes the table's runs (every run of its claims and controls, once) take cold on
    the budget's machine, longest first on its two processes; None for a table measured on a
    kind TO_BUDGET_KIND does not know."""
    kind = table["device"].rpartition(", ")[0]
    if kind not in TO_BUDGET_KIND:
        return None
    seconds = [s * TO_BUDGET_KIND[kind] for s in table.get("runs", {}).values()]
    return expected_wall(seconds, BUDGET_PROCESSES) / 60


def write(table: dict, folder: Path | None = None) -> Path:
    path = table_path(table["tier"], folder)
    atomic_write_text(json.dumps(table, indent=1, sort_keys=True) + "\n", path)
    return path


def read(tier: str, folder: Path | None = None) -> dict:
    """The tier's table, or an empty one where none is committed (an installed package) or the
    file cannot be read as one (said once: prices are then estimates without it). Parsed once for
    each state of the file, its nested rows shared between callers: read them, never change them."""
    path = table_path(tier, folder)
    empty = {"tier": tier, "device": "", "claims": {}}
    if not path.is_file():
        return empty
    try:
        stat = path.stat()
        table = parsed(str(path), stat.st_mtime_ns, stat.st_size)
    except (OSError, ValueError) as err:  # JSONDecodeError is a ValueError
        damaged(str(path), f"{type(err).__name__}: {err}")
        return empty
    return {**empty, **table}


@functools.lru_cache(maxsize=8)
def parsed(path: str, mtime_ns: int, size: int) -> dict:
    """The table at ``path`` parsed once for each state of the file (its mtime and size): a
    listing prices thousands of runs against it. A field of the wrong kind (a string for a
    number) is a ValueError naming it, as malformed JSON is."""
    table = json.loads(Path(path).read_text())
    if not (isinstance(table, dict) and isinstance(table.get("claims"), dict)
            and isinstance(table.get("runs", {}), dict)):
        raise ValueError("not a table of claims and runs")
    if not isinstance(table.get("device", ""), str):
        raise ValueError(f"its device is {table['device']!r}, not a name")
    def amount(x) -> bool:  # a number of runs or seconds (a bool is no number here)
        return isinstance(x, int | float) and not isinstance(x, bool) and x >= 0

    for fingerprint, seconds in table.get("runs", {}).items():
        if not amount(seconds):
            raise ValueError(f"run {fingerprint}: seconds {seconds!r}, not a number >= 0")
    for claim, row in table["claims"].items():
        if not isinstance(row, dict):
            raise ValueError(f"claim {claim}: {row!r}, not a row of runs and seconds")
        for name in ("runs", "seconds", "own_seconds", "untimed"):
            if not amount(value := row.get(name, 0)):
                raise ValueError(f"claim {claim}: {name} {value!r}, not a number >= 0")
        prints = row.get("fingerprints", [])
        if not (isinstance(prints, list) and all(isinstance(f, str) for f in prints)):
            raise ValueError(f"claim {claim}: fingerprints {prints!r}, not a list of names")
    return table


@functools.cache
def damaged(path: str, why: str) -> None:
    """Say once that a run-times table cannot be read: a price without it is an estimate."""
    print(f"normsys: {path} cannot be read ({why}); costs are priced without it: restore it "
          f"with git checkout -- {path}, or write it again with python -m normsys run-times",
          file=sys.stderr, flush=True)


def seconds(claim: str, tier: str, folder: Path | None = None) -> float:
    """Seconds of training of the runs ``claim`` reads, as recorded (0 where unknown)."""
    return read(tier, folder)["claims"].get(claim, {}).get("seconds", 0.0)


def run_seconds(cfg: RunConfig, folder: Path | None = None) -> tuple[float, str] | None:
    """(seconds, device) a run of ``cfg``'s config took as its tier's table records, or another
    tier's (a paper-tier claim may train a config of the CPU tier's data on a GPU), or None;
    at this machine's pace (``pace``) where it has trained enough of the table's runs, and said
    in the device's words."""
    fingerprint = cfg.fingerprint()
    for tier in sorted(TIERS, key=lambda t: t != cfg.data.tier):
        table = read(tier, folder)
        if (seconds := table.get("runs", {}).get(fingerprint)) is not None:
            scale, n = pace(tier, environment_digest(trained_in(cfg)), folder)
            if n < MIN_PACED:
                return seconds, table["device"]
            return seconds * scale, (f"{table['device']}, x{scale:.2f} for this machine's pace "
                                     f"(the median over {n} of its runs)")
    return None


MIN_PACED = 20  # runs of a table this machine trained, before its prices take their pace


def trained_in(cfg: RunConfig) -> dict[str, str]:
    """The numeric environment a run of ``cfg`` trains in here: on the CPU, on the RUN_THREADS
    every claim's and scorecard's run takes, whatever this process's thread count."""
    env = run_environment(cfg)
    return {**env, "threads": str(RUN_THREADS)} if env["device"].startswith("cpu") else env


def pace(tier: str, environment: str, folder: Path | None = None) -> tuple[float, int]:
    """How long a run takes here over what the ``tier`` table records: the median, over the runs
    the run cache holds made by this code in the numeric environment of digest ``environment``
    that the table times at a second or more, of the record's wall time over the recorded
    seconds; and how many runs that was. (1.0, n) with fewer than MIN_PACED: too few to say.
    Read once a process for each cache folder (``paced``)."""
    return paced(tier, environment, folder, cache_root())


@functools.cache
def paced(tier: str, environment: str, folder: Path | None, root: Path | None
          ) -> tuple[float, int]:
    times = read(tier, folder).get("runs", {})
    ratios = []
    tail = f"-c{code_digest()}-e{environment}-v{__version__}.json"
    for path in (root / "runs").glob(f"*{tail}") if root is not None else ():
        if (recorded := times.get(path.name.split("-", 1)[0], 0)) >= 1.0:
            try:
                wall = json.loads(path.read_text())["record"]["wall_time"]
            except (OSError, ValueError, KeyError, TypeError):  # a damaged entry: not counted
                continue
            ratios.append(wall / recorded)
    return (statistics.median(ratios) if len(ratios) >= MIN_PACED else 1.0), len(ratios)


def recorded_runs(claim: str, tier: str, folder: Path | None = None) -> dict[str, float] | None:
    """The runs ``claim`` (or a control's index name) read when its table was made: fingerprint ->
    seconds (0 where never timed); None where the table does not hold it."""
    return runs_in(read(tier, folder), claim)


def runs_in(table: dict, claim: str) -> dict[str, float] | None:
    """``recorded_runs`` of a table read once."""
    row = table["claims"].get(claim)
    if row is None or not isinstance(row.get("fingerprints"), list):
        return None
    return {f: table.get("runs", {}).get(f, 0.0) for f in row["fingerprints"]}


def recorded_cost(claim: str, tier: str,
                  folder: Path | None = None) -> tuple[str, float] | None:
    """``9 runs, ~4.1 min of training on <device> as recorded`` and those seconds, or None where
    none is recorded."""
    table = read(tier, folder)
    row = table["claims"].get(claim)
    if row is None:
        return None
    return (f"{row['runs']} runs, ~{row['seconds'] / 60:.1f} min of training on "
            f"{table['device']} as recorded (claims/{table_path(tier).name})", row["seconds"])


@dataclass
class ControlWork:
    """The runs negative controls train besides their claims' and the run cache's, priced as the
    CPU tier's run times record them (controls train on the CPU): ``todo`` fingerprint ->
    seconds; how many of their other runs the cache holds; the controls the run times do not
    hold (never timed, so neither their runs nor their price are known before they run)."""

    todo: dict[str, float]
    cached: int = 0
    untimed: list[str] = field(default_factory=list)

    def line(self) -> str:
        """``31 runs besides the claims' (12 cached; the others ~20.3 min of training as
        recorded)``, each run counted once."""
        runs = len(self.todo) + self.cached
        text = f"{runs} runs besides the claims' ({self.cached} cached" + (
            f"; the others ~{sum(self.todo.values()) / 60:.1f} min of training as recorded"
            if self.todo else "") + ")"
        return text + (f"; {len(self.untimed)} controls never timed (their runs are not known "
                       f"until they run once)" if self.untimed else "")


def control_work(controls: list[str], claimed: set[str],
                 folder: Path | None = None) -> ControlWork:
    """What the negative controls ``controls`` (the names their runs are indexed under,
    ``control-<claim file>.<test name>``) train besides the runs ``claimed`` (the fingerprints of
    the claims' planned runs), as the CPU tier's table holds each control's runs (``runs_in``): a
    run two controls share counted once."""
    held = cached_fingerprints(numeric_environment(torch.device("cpu")))
    table, work, cached = read(DEFAULT, folder), ControlWork({}), set()
    for name in controls:
        runs = runs_in(table, name)
        if runs is None:
            work.untimed.append(name)
            continue
        for fingerprint, seconds in runs.items():
            if fingerprint in held:
                cached.add(fingerprint)
            elif fingerprint not in claimed:
                work.todo[fingerprint] = seconds
    work.cached = len(cached - claimed)
    return work


# ----------------------------------------------------------------------------- a run's price


def expected_seconds(cfg: RunConfig) -> float:
    """What a run of ``cfg`` takes as the tier's run times record it, or a run of its
    configuration on another seed (similar_seconds: a replication on fresh seeds is priced too);
    0 where none was timed."""
    recorded = similar_seconds(cfg)
    return 0.0 if recorded is None else recorded[0]


def similar_seconds(cfg: RunConfig) -> tuple[float, str] | None:
    """(seconds, device) a run of ``cfg`` took as the run times record, or a run of the same
    configuration on another seed of the most a tier takes (a seed changes what a run computes,
    not what it costs); None where none was timed."""
    for seed in (cfg.train.seed, *range(max(t.max_seeds for t in TIERS.values()))):
        if (recorded := run_seconds(cfg.override(**{"train.seed": seed}))) is not None:
            return recorded
    return None


def group_seconds(group: list[RunConfig]) -> float:
    """What a group of runs trains in as the tier's run times record: its longest run (seeds that
    stack train together, and each records the group's time; any other group is one run)."""
    return max(expected_seconds(c) for c in group)


def index_path(claim: str, tier: str) -> Path | None:
    """Where the run cache keeps the runs ``claim`` at ``tier`` fetched last, with their times
    (normsys.orchestration.runs.Runs.write_index); None without a cache."""
    root = cache_root()
    return None if root is None else root / "claims" / f"{claim}-{tier}.json"


def cost(claim: str, tier: str) -> tuple[str, float | None]:
    """``9 runs (6 cached; the others ~4.1 min of training as last timed)``, from the claim's
    last run, or what the committed run times record, or what is not known; and the seconds of
    training its runs not cached take (None: not known)."""
    path = index_path(claim, tier)
    if path is None or not path.is_file():
        recorded = recorded_cost(claim, tier)
        return recorded or ("runs: not known until it has run once with this cache", None)
    try:
        runs_ = json.loads(path.read_text())["runs"]
        keys = [run_key(RunConfig.from_dict(r["config"]), r["data"]) for r in runs_]
    except (ValueError, KeyError, TypeError):
        return "runs: not known (its index cannot be read)", None
    cached = [(path.parent.parent / "runs" / f"{k}.json").is_file() for k in keys]
    todo = sum(r["seconds"] or 0 for r, c in zip(runs_, cached, strict=True) if not c)
    return (f"{len(runs_)} runs ({sum(cached)} cached"
            + (f"; the others ~{todo / 60:.1f} min of training as last timed)"
               if not all(cached) else ")")), todo


def priced(runs: int, cached: int, timed: list[list[tuple[float, str]]]
           ) -> tuple[str, float | None]:
    """``10 runs (4 cached; the others ~3.2 min of training as recorded on cpu)`` and those
    seconds (None where a run was never timed): of ``runs`` in all, ``cached`` in the cache; the
    groups the others train in (``timed``), each with the (seconds, device) its runs were timed
    at (empty: never timed; a group trains in its longest run's time)."""
    untimed = sum(not t for t in timed)
    seconds = sum(max(s for s, _ in t) for t in timed if t)
    devices = sorted({d for t in timed for _, d in t})
    if cached == runs:
        return f"{runs} runs ({cached} cached)", 0.0
    if untimed == len(timed):  # nothing to price them by: no time, not ~0.0 min
        return f"{runs} runs ({cached} cached; the others never timed, so their price is not " \
               f"known until they run once)", None
    text = f"{runs} runs ({cached} cached; the others ~{seconds / 60:.1f} min of training as " \
           f"recorded on {' and '.join(devices)}" + (
               f", {untimed} of them never timed" if untimed else "") + ")"
    return text, None if untimed else seconds


def total_line(costs: list[float | None]) -> str:
    """What the runs not cached of several claims take (``cost``'s seconds, None: unknown)."""
    seconds = sum(c for c in costs if c is not None)
    untimed = sum(c is None for c in costs)
    if untimed == len(costs):
        return "none timed yet, so the training they take is not known until they run once"
    return f"at most ~{seconds / 60:.1f} min of training for the runs not cached (a run that " \
           f"claims share is counted for each)" + (f"; {untimed} not timed yet" if untimed else "")




# ----------------------------------------------------------------------------- on more devices

TRAINING = re.compile(r"normsys: training .* tier, ([0-9a-f]{8})\)(?: with \d+ seeds stacked)? "
                      r"\.\.\.")
# a trained run's line: "[run 3 of 40, ~12.5 min of training left] ..." (in logs made before
# plans: "[3 runs done] ...")
TRAINED = re.compile(r"normsys: \[(?:\d+ runs done|run \d+[^\]]*)\] .* tier, ([0-9a-f]{8})\): "
                     r"trained in (\d+) s")


def task_seconds(log: str) -> list[float]:
    """What each task trained in a session took, from its progress lines
    (normsys.orchestration.progress): one run, or one configuration's seeds stacked, found by its
    first run's fingerprint (each run of a stacked group says the group's time)."""
    trained: dict[str, float] = {}
    for m in TRAINED.finditer(log):
        trained.setdefault(m[1], float(m[2]))
    return [trained[m[1]] for m in TRAINING.finditer(log) if m[1] in trained]


def expected_wall(seconds: list[float], slots: int) -> float:
    """The wall time of ``seconds`` of tasks on ``slots`` places that each train one task at a
    time, longest task first to the place free first (within 4/3 of the best order); never
    below the longest task, which bounds it."""
    if slots < 1:
        raise ValueError(f"{slots} slots: give 1 or more")
    free = [0.0] * slots
    for s in sorted(seconds, reverse=True):
        heapq.heappush(free, heapq.heappop(free) + s)
    return max(free)
