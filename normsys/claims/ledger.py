"""The verdict ledger: what each claim was measured to be, one JSON file per tier and machine kind.

    claims/ledger/cpu.json                            the CPU tier, the claims' own seeds
    claims/ledger/cpu-AVX2.json                       the same on a CPU whose kernels are AVX2
    claims/ledger/cpu-DEFAULT-Intel.json              ... torch's plain kernels on an Intel CPU
    claims/ledger/cpu-seeds-3-5.json                  the same claims on seeds 3, 4, 5, ...
    claims/ledger/paper-NVIDIA-H200.json              the paper tier on that GPU: 5 seeds, and up
                                                      to 21 where a verdict is open
    claims/ledger/paper-NVIDIA-H200-max-seeds-5.json  ... decided at 5 seeds, in one look

Each entry holds a claim's verdict, statistic, rule, seeds, per-seed values, mean and interval, the
settings of the runs it read (every config field, with a fingerprint of the run configs), and
where and when it was measured (date, commit, normsys and torch versions, device, data). The files
are written only by ``pytest claims --claims-update`` from a run someone has reviewed (keys sorted,
so a change reads as a diff of a table); every run compares its fresh verdicts with them
(``judge``): the same verdict under the same statistic, rule, seeds and run settings passes as
before; another verdict, or a rule, statistic, seed set or setting that differs from the recorded
one (a threshold moved, epochs changed) fails the claim with one line naming what changed; a mean
that moved while all else held is flagged as drift. This is snapshot testing (syrupy,
pytest-snapshot) applied to verdicts and what they were decided under.

``compare`` puts several ledgers side by side: machines, seed sets, tiers. ``replications`` says of
each claim whether its verdict replicates across the ledger files of its tier (robust, fragile,
CONTRADICTED), and ``judge_across`` holds a CPU of kernels that have no ledger to the tier's
reference (cpu.json) by rules made for another numeric environment.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path

from normsys import __version__
from normsys.claims import params
from normsys.claims.stats import INCONCLUSIVE, REFUTED, SUPPORTED
from normsys.training import provenance
from normsys.training.config import RunConfig
from normsys.training.store import atomic_write_text

# a mean that moved by more than this fraction of its recorded interval's half-width (or by more
# than DRIFT_FLOOR where that width is 0) while its verdict held is flagged as drift
DRIFT_FRACTION, DRIFT_FLOOR = 0.1, 1e-9


class LedgerError(ValueError):
    """A ledger file that cannot be read; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Entry:
    """One claim's recorded measurement."""

    verdict: str
    statistic: str
    rule: str
    seeds: list[int]
    values: list[float]
    mean: float
    low: float
    high: float
    measured: str  # date and time
    commit: str
    normsys: str
    torch: str
    device: str
    data: str  # the data folder's checksum list, as sha256 of SHA256SUMS (or "" if none)
    # the runs the claim read: each config field's value ("a | b" where runs differ; the seeds
    # are `seeds`) and a fingerprint of the exact set of run configs; empty in entries that
    # predate them (imported reports), which are then not checked for settings
    settings: dict[str, str] = field(default_factory=dict)
    settings_fingerprint: str = ""
    # the rest of the numeric environment beside torch and device (provenance.numeric_environment);
    # "" in entries that predate them
    threads: str = ""
    autocast: str = ""
    # the seed counts of the looks an open claim could take (normsys.claims.sequential), [] for
    # one look; the look it decided at is len(seeds)
    looks: list[int] = field(default_factory=list)

    @property
    def environment(self) -> str:
        """Where the values were computed, in a few words (``cpu (AVX512), torch 2.13.0``)."""
        parts = [self.device, f"torch {self.torch}"]
        if self.threads:
            parts.insert(1, f"{self.threads} thread(s)")
        return ", ".join(parts)

    def line(self) -> str:
        """``supported 0.82 [0.8, 0.84] seeds 0-2 (2026-11-23, a59fd79)``."""
        return f"{self.verdict} {interval(self.mean, self.low, self.high)} seeds " \
               f"{seed_span(self.seeds)} ({self.measured.split()[0]}, {self.commit[:7]})"


def interval(mean: float, low: float, high: float) -> str:
    return f"{num(mean)} [{num(low)}, {num(high)}]"


def num(x: float | None) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "nan"
    return f"{x:.4g}"


def seed_span(seeds: Sequence[int]) -> str:
    if not seeds:
        return "-"
    consecutive = list(seeds) == list(range(seeds[0], seeds[0] + len(seeds)))
    return f"{seeds[0]}-{seeds[-1]}" if consecutive and len(seeds) > 1 else \
        ",".join(map(str, seeds))


def run_settings(configs: Iterable[RunConfig]) -> tuple[dict[str, str], str]:
    """What a claim's runs were trained under: each config field with its value across the runs
    (the distinct values, sorted, joined by " | "), the seed left out, and the fingerprint of
    the set of seed-less configs (which also tells apart runs that pair the same values
    otherwise)."""
    seedless = {c.override(**{"train.seed": 0}) for c in configs}
    values: dict[str, set[str]] = {}
    for c in seedless:
        for key, value in c.flat().items():
            if key != "train.seed":
                values.setdefault(key, set()).add(show(value))
    settings = {k: " | ".join(sorted(v)) for k, v in sorted(values.items())}
    prints = sorted(c.fingerprint() for c in seedless)
    return settings, hashlib.sha256(" ".join(prints).encode()).hexdigest()[:16]


def show(value) -> str:
    """A config value as ``--set`` takes it: tuples comma-separated."""
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    return str(value)


def setting_changes(recorded: dict[str, str], now: dict[str, str], most: int = 4) -> list[str]:
    """``train.epochs 10 -> 12`` for each setting that differs (a field one side lacks reads
    ``absent``), the first ``most`` of them and how many more."""
    keys = sorted(set(recorded) | set(now))
    changed = [f"{k} {recorded.get(k, 'absent')} -> {now.get(k, 'absent')}" for k in keys
               if recorded.get(k) != now.get(k)]
    return changed[:most] + ([f"{len(changed) - most} more"] if len(changed) > most else [])


# The CPU tier's numbers depend on the vector instructions torch's CPU kernels (and MKL's) use, and
# on the CPU's vendor, by which MKL and oneDNN choose their code paths: a CPU of other kernels or of
# another vendor rounds otherwise, and a run of many steps carries that into its result. Its
# ledger cpu.json holds what AMD CPUs whose kernels are AVX-512 measure (the machines it was
# recorded and reproduced on); the CPU tier on another CPU is recorded apart, in
# cpu-<label>.json (``cpu_label``: cpu-AVX2.json on AMD, cpu-AVX512-Intel.json), as the paper tier
# is per GPU, or judged against cpu.json where it has none (``judge_across``).
CPU_TIER_KERNELS = "AVX512"
CPU_TIER_VENDOR = "AMD"  # the vendor of the CPUs whose ledgers carry no vendor in their name


def cpu_label(device: str) -> str:
    """The CPU part of a ledger's file name, from numeric_environment's device: ``cpu (AVX2,
    AMD)`` -> ``AVX2``, ``cpu (AVX512, Intel)`` -> ``AVX512-Intel`` (CPU_TIER_KERNELS on
    CPU_TIER_VENDOR: the reference); a GPU's: the reference's."""
    if not device.startswith("cpu ("):
        return CPU_TIER_KERNELS
    kernels, _, vendor = device.removeprefix("cpu (").removesuffix(")").partition(", ")
    return kernels if vendor in ("", CPU_TIER_VENDOR) else f"{kernels}-{vendor}"


MAX_SEEDS_PART = "-max-seeds-"  # file_name's part for another most seeds than the tier's


def file_name(tier: str, device: str, seed_offset: int = 0, seeds: int = 0,
              max_seeds: int = 0, kernels: str = CPU_TIER_KERNELS) -> str:
    """The ledger file of a tier on a device: ``cpu.json`` (``cpu-<kernels>.json`` where the CPU's
    kernels are not those of ``CPU_TIER_KERNELS``), ``paper-<GPU name>.json``, with
    ``-seeds-<first>-<last>`` when the run used other seeds than the claims' own and
    ``-max-seeds-<N>`` when open claims could add seeds up to another N than the tier's own
    (--claims-max-seeds; params.MAX_SEEDS)."""
    if tier == "cpu":
        stem = "cpu" if kernels == CPU_TIER_KERNELS else f"cpu-{kernels}"
    else:
        stem = f"{tier}-{'-'.join(device.split())}"
    if seed_offset or seeds:
        n = seeds or params.SEEDS[tier]  # a file without -seeds- ran on the claims' own
        stem += f"-seeds-{seed_offset}-{seed_offset + n - 1}"
    if max_seeds and max_seeds != params.MAX_SEEDS[tier]:
        stem += f"{MAX_SEEDS_PART}{max_seeds}"
    return stem + ".json"


def tier_of(path: Path) -> str:
    """The tier a ledger file records, from its name (``file_name``): ``cpu-seeds-3-5.json`` ->
    ``cpu``, ``paper-NVIDIA-H200.json`` -> ``paper``."""
    return path.stem.split("-")[0]


def stale(folder: Path, defined: dict[str, set[str]]) -> dict[Path, list[str]]:
    """The entries of every ledger file in ``folder`` whose claim id ``defined`` (the claim ids of
    each tier) no longer has, by file: a renamed or removed claim's verdict that nothing checks.
    Files of a tier ``defined`` does not speak of are left alone."""
    out = {}
    for path in sorted(folder.glob("*.json")):
        if (tier := tier_of(path)) in defined:
            if gone := sorted(set(read(path)) - defined[tier]):
                out[path] = gone
    return out


FORMAT = 1  # the layout of a ledger file; a file without "format" predates the field (1)


def read(path: Path) -> dict[str, Entry]:
    """The entries of a ledger file by claim id ({} if there is no such file)."""
    if not path.is_file():
        return {}
    try:
        body = json.loads(path.read_text())
        version = body.get("format", 1) if isinstance(body, dict) else None
        if version != FORMAT:
            raise LedgerError(f"ledger {path} is format {version}; this normsys ({__version__}) "
                              f"reads format {FORMAT}: use the normsys version that wrote it, or "
                              f"rewrite it with `pytest claims --claims-update`")
        claims = body["claims"]
        names = {f.name for f in fields(Entry)}
        required = {f.name for f in fields(Entry) if f.default is MISSING and
                    f.default_factory is MISSING}
        for cid, e in claims.items():
            if missing := sorted(required - set(e)):
                raise LedgerError(f"ledger {path}: the entry of {cid} lacks {', '.join(missing)} "
                                  f"(written by another normsys version?); rewrite it with "
                                  f"`pytest claims --claims-update`")
        return {cid: Entry(**{k: v for k, v in e.items() if k in names})
                for cid, e in claims.items()}
    except LedgerError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise LedgerError(f"ledger {path} cannot be read ({type(err).__name__}: {err}); it is "
                          f"written by `pytest claims --claims-update`: restore it from git "
                          f"(git checkout -- {path}) or rewrite it with --claims-update") from None


def write(path: Path, entries: dict[str, Entry]) -> None:
    """Write ``entries`` (by claim id) to ``path``, keys sorted, one field per line."""
    body = {"about": "normsys verdict ledger: written by `pytest claims --claims-update`, "
                     "never by hand; every claims run is checked against it",
            "format": FORMAT, "claims": {cid: asdict(entries[cid]) for cid in sorted(entries)}}
    atomic_write_text(json.dumps(body, indent=1, sort_keys=True, default=float) + "\n", path)


@dataclass(frozen=True)
class Judgement:
    """How a fresh verdict stands against the ledger."""

    status: str   # same | drift | changed | no-settings | new | unrecorded
    message: str  # one line for the test's outcome and the verdict table

    @property
    def fails(self) -> bool:
        return self.status == "changed"


UPDATE = "review, then rerun with --claims-update"


def changes(entry: Entry, fresh: Entry) -> list[str]:
    """What a claim was decided under that differs from its entry: statistic, rule, seeds, run
    settings (where the entry records them), each as ``what: recorded X, now Y``. Under the same
    looks (``Entry.looks``) the look a claim decided at is an outcome, not a setting: its seeds
    are compared at the first look, and runs that differ only in how many seeds were added are
    no change."""
    looked = bool(entry.looks) and entry.looks == fresh.looks and \
        len(entry.seeds) in entry.looks and len(fresh.seeds) in fresh.looks
    first = entry.looks[0] if looked else None
    out = [f"{name}: recorded {old}, now {new}" for name, old, new in (
        ("statistic", entry.statistic, fresh.statistic), ("rule", entry.rule, fresh.rule),
        ("seeds", seed_span(entry.seeds[:first]), seed_span(fresh.seeds[:first]))) if old != new]
    if entry.settings_fingerprint and entry.settings_fingerprint != fresh.settings_fingerprint:
        named = setting_changes(entry.settings, fresh.settings)
        if named or not looked or len(entry.seeds) == len(fresh.seeds):
            out.append("settings: " + (", ".join(named) if named else
                                       f"the runs pair the same values otherwise (run configs "
                                       f"recorded {entry.settings_fingerprint}, now "
                                       f"{fresh.settings_fingerprint})"))
    return out


# A CPU whose kernels have no ledger of their own is checked against its tier's reference ledger
# (cpu.json) with rules made for another numeric environment: rounding moves per-seed values, so
# they are compared within ACROSS_TOLERANCE (the fresh mean within that fraction of the recorded
# interval's half-width: tests/test_ledger.py holds it against what other kernels were measured to
# move and what another seed set moves), and a verdict that moves fails unless the ledgers record
# the claim as fragile (``replication``).
ACROSS_TOLERANCE = 1.0
MOVED = "moved"  # a fragile claim's verdict moved between decisive and inconclusive: reported


def judge_across(entry: Entry | None, fresh: Entry, replicated: str) -> Judgement:
    """Compare a measurement made in another numeric environment (a CPU of other kernels) with
    its tier's reference entry, the claim's replication across the ledgers being ``replicated``
    (ROBUST, FRAGILE, ...): a decisive flip fails; a verdict that moves fails unless the claim is
    fragile, whose move between decisive and inconclusive is reported (MOVED); a statistic, rule,
    seed set or setting that differs fails as ever; a mean that shifted beyond ACROSS_TOLERANCE
    of the recorded half-width fails as drift."""
    if entry is None:
        return Judgement("new", f"new: not in the reference ledger; {UPDATE}")
    now = f"{fresh.verdict} {interval(fresh.mean, fresh.low, fresh.high)}"
    head = [f"reference ({entry.environment}): {entry.line()}", f"now: {now}"]
    if changed := changes(entry, fresh):
        return Judgement("changed", "; ".join([*head, *changed, UPDATE]))
    if entry.verdict != fresh.verdict:
        if {entry.verdict, fresh.verdict} == {SUPPORTED, REFUTED}:
            return Judgement("changed", "; ".join([*head, "a decisive flip", UPDATE]))
        if replicated != FRAGILE:
            return Judgement("changed", "; ".join([*head, f"the verdict moved, and the ledgers "
                                                          f"record it as {replicated}", UPDATE]))
        return Judgement(MOVED, "; ".join([*head, "moved, as a fragile claim may (more seeds "
                                                  "decide it: --claims-max-seeds)"]))
    width = (entry.high - entry.low) / 2 if math.isfinite(entry.high - entry.low) else math.inf
    tolerance = max(ACROSS_TOLERANCE * width, DRIFT_FLOOR)
    moved = abs(fresh.mean - entry.mean)
    if not (moved <= tolerance):  # NaN too
        return Judgement("changed", "; ".join([*head, f"drift: the mean moved {num(moved)}, "
                                                      f"beyond {ACROSS_TOLERANCE:g} of the "
                                                      f"half-interval ({num(tolerance)})",
                                               UPDATE]))
    return Judgement("same", "; ".join(head[:1] + [f"within {num(moved)} of it"]))


def judge(entry: Entry | None, fresh: Entry, file_exists: bool) -> Judgement:
    """Compare a fresh measurement with its ledger entry (None: the claim has none)."""
    if not file_exists:
        return Judgement("unrecorded", "no ledger for this tier and device: run with "
                                       "--claims-update to start one")
    if entry is None:
        return Judgement("new", f"new: not in the ledger; {UPDATE}")
    now = f"{fresh.verdict} {interval(fresh.mean, fresh.low, fresh.high)}"
    changed = changes(entry, fresh)
    if entry.verdict != fresh.verdict or changed:
        return Judgement("changed", "; ".join([f"ledger: {entry.line()}", f"now: {now}",
                                               *changed, UPDATE]))
    if not entry.settings_fingerprint:
        return Judgement("no-settings", f"ledger: {entry.line()}; its run settings are not "
                                      f"recorded: {UPDATE}")
    width = (entry.high - entry.low) / 2 if math.isfinite(entry.high - entry.low) else math.inf
    tolerance = max(DRIFT_FRACTION * width, DRIFT_FLOOR)
    moved = abs(fresh.mean - entry.mean)
    if math.isfinite(moved) and moved > tolerance:
        return Judgement("drift", f"ledger: {entry.line()}; now: {now} (mean moved {num(moved)})")
    return Judgement("same", f"ledger: {entry.line()}")


class Ledgers:
    """A session's ledger files in ``folder`` (one per tier, named for this numeric environment
    and the seeds the session runs on: ``file_name``), each read once: they judge each fresh
    verdict, and with ``update`` (--claims-update) take this session's verdicts. On a CPU whose
    kernels have no ledger of their own, the CPU tier is judged against its reference ledger
    (``CPU_TIER_KERNELS``) by the rules for another environment (``judge_across``)."""

    def __init__(self, folder: Path, update: bool = False, strict: bool = False,
                 offset: int = 0, seeds: int | None = None, max_seeds: int | None = None):
        self.folder, self.update, self.strict = Path(folder), update, strict
        self.offset, self.seeds, self.max_seeds = offset, seeds, max_seeds
        device = provenance.numeric_environment()["device"]  # a GPU's, or cpu (kernels, vendor)
        self.device = "cpu" if device.startswith("cpu (") else device
        self.kernels = cpu_label(device)
        self.read: dict[str, dict[str, Entry]] = {}
        self.replicated: dict[str, dict[str, Replication]] = {}
        self.histories: dict[str, list[dict[str, Entry]]] = {}
        # entries of claims no longer defined, by file: known only to a session that collected
        # every claim (the plugin's ``collects_every_claim``)
        self.stale: dict[Path, list[str]] = {}

    def path(self, tier: str, kernels: str | None = None) -> Path:
        return self.folder / file_name(tier, self.device, self.offset, self.seeds,
                                       self.max_seeds, kernels or self.kernels)

    def across(self, tier: str) -> bool:
        """Whether ``tier`` is judged against the reference ledger of another environment: the
        CPU tier on kernels that have no ledger, when not writing one."""
        return tier == "cpu" and not self.update and self.kernels != CPU_TIER_KERNELS and \
            not self.path(tier).is_file() and self.path(tier, CPU_TIER_KERNELS).is_file()

    def judged_against(self, tier: str) -> Path:
        """The ledger file this session's verdicts of ``tier`` are judged against."""
        return self.path(tier, CPU_TIER_KERNELS) if self.across(tier) else self.path(tier)

    def entries(self, tier: str) -> dict[str, Entry]:
        if tier not in self.read:
            self.read[tier] = read(self.judged_against(tier))
        return self.read[tier]

    def history(self, cid: str, tier: str) -> list[Entry]:
        """The claim's entries in this environment's ledger files of ``tier`` on the session's
        seeds, whatever the most seeds each let an open claim add (``-max-seeds-N``): what it took
        there (sequential.expected)."""
        if tier not in self.histories:
            own = file_name(tier, self.device, self.offset, self.seeds, 0, self.kernels)
            name = re.compile(re.escape(own.removesuffix(".json")) +
                              rf"({re.escape(MAX_SEEDS_PART)}\d+)?\.json")
            judged = self.judged_against(tier)  # read once, by ``entries``
            self.histories[tier] = [self.entries(tier) if path == judged else read(path)
                                    for path in sorted(self.folder.glob("*.json"))
                                    if name.fullmatch(path.name)]
        return [entries[cid] for entries in self.histories[tier] if cid in entries]

    def replication(self, cid: str, tier: str) -> Replication | None:
        """How the claim's verdict replicates across the tier's ledger files (None: in none)."""
        if tier not in self.replicated:
            self.replicated[tier] = replications(self.folder, tier)
        return self.replicated[tier].get(cid)

    def judge(self, cid: str, tier: str, fresh: Entry) -> Judgement:
        if self.update:
            return Judgement("updated", f"ledger updated from this run ({self.path(tier)})")
        if self.across(tier):
            replicated = self.replication(cid, tier)
            return judge_across(self.entries(tier).get(cid), fresh,
                                replicated.word if replicated else UNREPLICATED)
        return judge(self.entries(tier).get(cid), fresh, self.path(tier).is_file())

    def write(self, results: Sequence) -> list[str]:
        """Put this session's measured verdicts (claim results: ``id``, ``tier``, ``entry``) into
        their tiers' files; what was written."""
        written = []
        for tier in sorted({r.tier for r in results}):
            fresh = {r.id: Entry(**r.entry) for r in results if r.tier == tier and r.entry}
            if fresh:
                path = self.path(tier)
                gone = self.stale.pop(path, [])
                kept = {cid: e for cid, e in read(path).items() if cid not in gone}
                write(path, {**kept, **fresh})
                written.append(f"{len(fresh)} entries to {path}"
                               + (f", {len(gone)} of claims no longer defined dropped "
                                  f"({', '.join(gone)})" if gone else ""))
        return written

    def stale_lines(self) -> list[str]:
        return [f"{path} holds {len(ids)} entries of claims no longer defined ({', '.join(ids)}): "
                f"review, then --claims-update drops them from the file it writes"
                for path, ids in sorted(self.stale.items())]


# ----------------------------------------------------------------------------- replication

# How a claim's verdict replicates across the ledger files of its tier (seed sets, numeric
# environments): one verdict in every file; decisive in one and inconclusive in another (a
# verdict the sample decides: more seeds, or the paper tier, settle it); supported in one and
# refuted in another (a red flag: the claim's evidence points both ways); recorded once.
ROBUST, FRAGILE, CONTRADICTED, UNREPLICATED = "robust", "fragile", "CONTRADICTED", "unreplicated"


def replicates(verdicts: Sequence[str]) -> str:
    """The replication word of one claim's verdicts in several ledger files."""
    found = set(verdicts)
    if {SUPPORTED, REFUTED} <= found:
        return CONTRADICTED
    if len(found) > 1:
        return FRAGILE
    return ROBUST if len(verdicts) > 1 else UNREPLICATED


@dataclass(frozen=True)
class Replication:
    """One claim's verdict in each ledger file of its tier (by file stem) and what they say."""

    verdicts: dict[str, str]
    behind: dict[str, str]  # file stem -> its seeds and numeric environment, in a few words

    @property
    def word(self) -> str:
        return replicates(list(self.verdicts.values()))

    def line(self) -> str:
        """``fragile: supported (cpu), inconclusive (cpu-AVX2)``."""
        return f"{self.word}: " + ", ".join(f"{v} ({stem})" for stem, v in self.verdicts.items())


def tier_files(folder: Path, tier: str) -> list[Path]:
    """The ledger files of ``tier`` in ``folder``, the tier's reference first (``cpu.json``;
    for the paper tier, each GPU's own seeds before other seed sets)."""
    files = [p for p in sorted(Path(folder).glob("*.json")) if tier_of(p) == tier]
    return sorted(files, key=lambda p: ("-seeds-" in p.stem, p.stem != tier, p.stem))


def replications(folder: Path, tier: str) -> dict[str, Replication]:
    """Each claim's replication across the ledger files of ``tier`` in ``folder``."""
    out: dict[str, dict[str, Entry]] = {}
    for path in tier_files(folder, tier):
        for cid, e in read(path).items():
            out.setdefault(cid, {})[path.stem] = e
    return {cid: Replication({stem: e.verdict for stem, e in by.items()},
                             {stem: f"seeds {seed_span(e.seeds)}, {e.environment}"
                              for stem, e in by.items()})
            for cid, by in sorted(out.items())}


# ----------------------------------------------------------------------------- comparing ledgers


def compare(paths: Sequence[Path]) -> tuple[list[str], list[list[str]], str]:
    """Header, rows (claim, then verdict, mean [CI] and seeds per ledger) and the agreement line
    of several ledger files: claims in all of them agree when their verdicts are equal; a
    decisive flip is supported in one and refuted in another."""
    for p in paths:
        if not p.is_file():
            raise LedgerError(f"ledger {p} does not exist")
    ledgers = [read(p) for p in paths]
    ids = sorted(set().union(*ledgers))
    header = ["claim"] + [x for p in paths for x in (f"{p.stem}: verdict", "mean [95% CI]",
                                                       "seeds")]
    rows, common, agree, flips = [], 0, 0, []
    for cid in ids:
        entries = [ledger.get(cid) for ledger in ledgers]
        row = [cid]
        for e in entries:
            row += ["-", "", ""] if e is None else [
                e.verdict.upper() if e.verdict == REFUTED else e.verdict,
                interval(e.mean, e.low, e.high), seed_span(e.seeds)]
        rows.append(row)
        if all(e is not None for e in entries):
            common += 1
            verdicts = {e.verdict for e in entries}
            agree += len(verdicts) == 1
            if {SUPPORTED, REFUTED} <= verdicts:
                flips.append(cid)
    line = f"{agree} of {common} agree; {len(flips)} decisive flips" + (
        f" ({', '.join(flips)})" if flips else "")
    if common < len(ids):
        line += f"; {len(ids) - common} claims not in every ledger"
    return header, rows, line


def as_text(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *map(fmt, rows)])


def as_markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(f"`{c}`" if i == 0 else c for i, c in enumerate(row)) + " |"
              for row in rows]
    return "\n".join(lines)


DOCS_HEAD = """# Verdict ledgers side by side

Written by `python -m normsys tables` from the ledger files in this folder (`tests/test_ledger.py`
fails when this page is not what the command writes from them). Each table below the first is
`python -m normsys compare ... --markdown` of the files it names. The CPU and paper tiers differ in
model size, data and seeds, so their agreement is a comparison of settings, not a reproduction
check; two GPUs on the paper tier, two CPU kernel sets, or two seed sets of one tier, are."""

REPLICATION_HEAD = """## Replication: every claim at a glance

Each tier's verdict is its reference ledger's (the first file listed for it); beside it, how that
verdict replicates across every ledger file of the tier: **robust** (one verdict in all of them),
**fragile** (decisive in one, inconclusive in another: the sample decides it, and more seeds,
`--claims-max-seeds`, or the paper tier settle it), **CONTRADICTED** (supported in one, refuted in
another: the evidence points both ways), *unreplicated* (one file records it). Where files
disagree, the cell names those that differ from the reference."""


def replication_table(folder: Path, tiers: Sequence[str] = ("cpu", "paper")) -> str:
    """The page's first table: each claim's verdict per tier, its replication, and the files
    that differ; above it, the files behind each tier with their seeds and environments."""
    tiers = [t for t in tiers if tier_files(folder, t)]
    lines = []
    for tier in tiers:
        files = tier_files(folder, tier)
        seen = {}
        for path in files:
            entries = list(read(path).values())
            spans = sorted({seed_span(e.seeds) for e in entries}, key=lambda x: (len(x), x))
            environments = sorted({e.environment for e in entries})
            seen[path.stem] = "no entries" if not entries else \
                f"seeds {' to '.join(dict.fromkeys([spans[0], spans[-1]]))}, " \
                f"{'; '.join(environments)}"
        lines.append(f"- {tier}: " + "; ".join(f"`{stem}` ({what})" for stem, what in seen.items()))
    by_tier = {t: replications(folder, t) for t in tiers}
    header = ["claim"] + [x for t in tiers for x in (t, f"{t}: replication")]
    rows = []
    for cid in sorted(set().union(*by_tier.values())):
        row = [cid]
        for tier in tiers:
            r = by_tier[tier].get(cid)
            if r is None:
                row += ["-", ""]
                continue
            reference, *others = r.verdicts.items()
            differ = [f"{v} in `{stem}`" for stem, v in others if v != reference[1]]
            verdict = reference[1].upper() if reference[1] == REFUTED else reference[1]
            word = f"**{r.word}**" if r.word in (FRAGILE, CONTRADICTED) else r.word
            row += [f"{verdict} (`{reference[0]}`)",
                    word + (f": {', '.join(differ)}" if differ else "")]
        rows.append(row)
    counts = {t: {} for t in tiers}
    for t in tiers:
        for r in by_tier[t].values():
            counts[t][r.word] = counts[t].get(r.word, 0) + 1
    summary = "; ".join(f"{t}: " + ", ".join(f"{n} {w}" for w, n in sorted(counts[t].items()))
                        for t in tiers)
    return "\n\n".join([REPLICATION_HEAD, "\n".join(lines), summary,
                         as_markdown(header, rows)])


def docs(folder: Path) -> str:
    """This folder's README: the replication of every verdict, then the CPU tier beside the
    paper tier on every GPU with a ledger, the GPUs' agreement among themselves, and each tier
    beside its other kernel sets and seed sets."""
    cpu = folder / "cpu.json"
    gpus = [p for p in sorted(folder.glob("paper-*.json")) if "-seeds-" not in p.stem]
    blocks = [DOCS_HEAD, replication_table(folder)]

    def section(title: str, paths: list[Path], extra: str = "") -> None:
        header, rows, agreement = compare(paths)
        names = ", ".join(f"`{p.name}`" for p in paths)
        blocks.extend([f"## {title}", f"{names}: {agreement}{extra}",
                       as_markdown(header, rows)])

    if gpus:
        gpu_line = ""
        if len(gpus) > 1:
            gpu_line = "; the GPUs among themselves: " + compare(gpus)[2]
        section("The CPU tier and the paper tier on each GPU", [cpu, *gpus], gpu_line)
    for other in sorted(folder.glob("*-seeds-*.json")):
        reference = folder / f"{other.stem.split('-seeds-')[0].removesuffix('-max')}.json"
        if reference.is_file():
            section(f"Seeds: `{other.stem}` beside `{reference.stem}`", [reference, other])
    for other in sorted(folder.glob("cpu-*.json")):
        if "-seeds-" not in other.stem:  # the CPU tier on a CPU of other kernels (file_name)
            section(f"CPU kernels: `{other.stem}` beside `cpu` ({CPU_TIER_KERNELS})",
                    [cpu, other])
    return "\n\n".join(blocks) + "\n"


# ----------------------------------------------------------------------------- earlier reports


def from_report(path: Path, provenance: dict[str, str]) -> dict[tuple[str, str], Entry]:
    """Ledger entries, by (claim id, tier), of the decided claims of a claims report written before
    the ledger existed: ``claims.json``, or the verdict table pytest printed (saved as text, whose
    rows carry no per-seed values; seeds 0 to n-1). ``provenance`` (measured, commit, normsys,
    torch, device, data) is what the importer knows of the run and wins over the report's own
    rows: a report measured from a copy of the package inside another repository names that
    repository's commit, not the code that ran."""
    text = path.read_text()
    try:
        rows = json.loads(text)["claims"]
    except ValueError:
        rows = table_rows(text)
    except (KeyError, TypeError):
        raise LedgerError(f"{path}: neither a claims report (claims.json) nor a verdict "
                          f"table") from None
    out = {}
    for r in rows:
        if r["verdict"].lower() not in (SUPPORTED, REFUTED, INCONCLUSIVE):
            continue
        recorded = r.get("entry") or {}  # reports that carry the run settings
        out[r["id"], r["tier"]] = Entry(
            r["verdict"].lower(), r["statistic"], r["rule"], list(r["seeds"]),
            list(r.get("values", [])), float(r["mean"]), float(r["low"]), float(r["high"]),
            provenance["measured"], provenance["commit"], provenance["normsys"],
            provenance["torch"], provenance["device"], provenance.get("data", ""),
            dict(recorded.get("settings", {})),
            recorded.get("settings_fingerprint", ""))
    return out


def table_rows(text: str) -> list[dict]:
    """The rows of a printed verdict table (columns apart by two or more spaces)."""
    import re

    lines = text.splitlines()
    try:
        top = next(i for i, line in enumerate(lines) if line.split()[:3] == ["claim", "tier",
                                                                             "verdict"])
    except StopIteration:
        raise LedgerError("no verdict table (a line 'claim  tier  verdict ...') found") from None
    header = re.split(r"\s{2,}", lines[top].strip())
    rows = []
    for line in lines[top + 2:]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) < len(header) - 1:
            break
        row = dict(zip(header, cells, strict=False))
        low, high = row.get("CI", row.get("95% CI", "")).strip("[]").split(", ")  # or older
        rows.append({"id": row["claim"], "tier": row["tier"], "verdict": row["verdict"],
                     "statistic": row["statistic"], "rule": row["rule"], "mean": row["mean"],
                     "low": low, "high": high, "seeds": list(range(int(row["seeds"])))})
    return rows
