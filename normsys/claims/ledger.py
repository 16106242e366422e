"""The verdict ledger: each claim's record of what it was measured to be, one JSON file per claim.

    claims/ledger/<claim id>.json

A record holds the claim's entries, each keyed by tier, numeric environment and seed plan
(``cpu | cpu (AVX2, AMD), 1 thread(s), torch 2.13.0+cpu | seeds 0+, looks 3``), one of each tier
its reference; the rule the claim was registered with and every amendment of it (date, old and
new rule, reason). An entry holds the verdict, statistic, rule, seeds, per-seed values, mean and
interval, the settings of the runs it read (every config field, with a fingerprint of the run
configs), the digest of the training code that computed them (``code``: the run cache's) and
where and when it was measured. Records are written only by ``pytest claims --claims-update`` from
a run someone has reviewed (keys sorted, so a change reads as a diff of a table), from any
machine: a run writes the entries of this environment and seed plan, and no record's presence
changes how another claim is judged.

Reading a record recomputes every entry's verdict and interval from its per-seed values, rule and
looks (``follows``): an entry that does not follow from itself is an error naming the claim and
entry, and so is a rule that is neither the registered one nor an amendment's.

How a fresh measurement is judged (``judge``):

- **this environment and seed plan recorded by the same training code**: its per-seed values are
  compared bit for bit, with its verdict, statistic, rule, seeds and run settings; any difference
  fails the claim, naming the largest change and the command that records it after review.
- **no such entry** (another CPU, or this environment's entry made by other training code: stale,
  judged as another environment until a machine of its kind records it again): against the
  tier's reference on the same seeds, the mean of the per-seed differences within the claim's
  own bound (``Noise``: from its cross-environment differences on the same seeds, the kernel and
  vendor entries, at ALPHA_ACROSS a claim); a decisive flip fails.
- **no current entry on these seeds** (every entry made by other training code, or under another
  rule): unrecorded, as is a claim with no record; both fail under ``--claims-strict``. So a
  number the training code changes fails where a fresh record exists, and the machine that made
  the change records it: nobody waits on a record only another machine kind can refresh.

``replication`` says how a claim's verdicts replicate across its entries, counting independent
seed sets and numeric environments (replicated, reproduced, unreplicated, open, fragile,
CONTRADICTED); ``docs`` writes
docs/verdicts.md from every record, with the figure of every interval against its threshold.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from normsys import __version__
from normsys.claims.verdict import (
    INCONCLUSIVE,
    OPTIONAL,
    RECORDED,
    REFUTED,
    SUPPORTED,
    Rule,
    Verdict,
    decide,
    interval,
    levels,
    num,
    seed_span,
    t_quantile,
)
from normsys.training.store import atomic_write_text


class LedgerError(ValueError):
    """A record that cannot be read or does not follow from itself; the message names the file
    and what is wrong."""


def setting_changes(recorded: dict[str, str], now: dict[str, str], most: int = 4) -> list[str]:
    """``train.epochs 10 -> 12`` for each setting that differs (a field one side lacks reads
    ``absent``), the first ``most`` of them and how many more."""
    names = sorted(set(recorded) | set(now))
    changed = [f"{k} {recorded.get(k, 'absent')} -> {now.get(k, 'absent')}" for k in names
               if recorded.get(k) != now.get(k)]
    return changed[:most] + ([f"{len(changed) - most} more"] if len(changed) > most else [])


# ----------------------------------------------------------------------------- an entry follows


# an all-of rule's prefix: its comparisons, and whether a refutation was held to the family's
# level (Holm, normsys.claims.verdict._decide); entries recorded before it read "all of k: "
ALL_OF = r"^all of (\d+)( \(Holm\))?: "


def family(text: str) -> int:
    """How many comparisons shared an entry's error: an all-of rule's k under Holm, else 1."""
    m = re.match(ALL_OF, text)
    return int(m[1]) if m and m[2] else 1


def parse_rule(text: str) -> Rule:
    """The Rule of an entry's rule text (``> 0.05``, ``within (-0.1, 0.1)``, ``all of 3 (Holm):
    <= 1``: one rule for each comparison, the weakest deciding)."""
    body = re.sub(ALL_OF, "", text)
    if m := re.fullmatch(r"within \(([^,]+), ([^)]+)\)", body):
        return Rule("", "within", (float(m[1]), float(m[2])))
    if m := re.fullmatch(r"(>=|<=|>|<) (\S+)", body):
        return Rule("", m[1], float(m[2]))
    raise LedgerError(f"rule {text!r}: not a rule normsys writes")


def same_number(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def follows(entry: Verdict) -> str:
    """"" if the entry's verdict, mean and interval are what its rule decides on its per-seed
    values at the level of the look it took; else what differs. (An all-of rule records the
    comparison its verdict rests on, which reaches that verdict on its own.)"""
    if len(entry.seeds) != len(entry.values):
        return f"{len(entry.seeds)} seeds but {len(entry.values)} values"
    if entry.plan and len(entry.seeds) not in entry.plan:
        return f"{len(entry.seeds)} seeds, a look its plan {list(entry.plan)} does not take"
    shared = family(entry.rule)
    decision = s = decide(parse_rule(entry.rule), entry.values, entry.confidence, family=shared)
    differ = [f"{name} recorded {num(old)}, recomputed {num(new)}" for name, old, new in (
        ("mean", entry.mean, s.mean), ("low", entry.low, s.low), ("high", entry.high, s.high))
        if not same_number(old, new)]
    if decision.verdict != entry.verdict:
        differ.insert(0, f"verdict recorded {entry.verdict}, its values decide {decision.verdict}")
    if looks := [n for n in entry.plan if n < len(entry.seeds)]:  # an earlier look left it open
        early = [n for n, level in zip(entry.plan, levels(entry.plan), strict=True)
                 if n in looks and decide(parse_rule(entry.rule), entry.values[:n], level,
                                          family=shared).verdict
                 != INCONCLUSIVE]
        if early:
            differ.append(f"its values decide at the look of {early[0]} seeds, yet it took "
                          f"{len(entry.seeds)}")
    return "; ".join(differ)


# ----------------------------------------------------------------------------- a claim's record


@dataclass(frozen=True)
class Amendment:
    """A change of a claim's rule after it was registered, with why."""

    date: str
    old: str
    new: str
    reason: str

    def line(self) -> str:
        return f"amended {self.date}: {self.old} -> {self.new} ({self.reason})"


@dataclass
class Record:
    """One claim's record: its entries by key, each tier's reference key, the rule it was
    registered with and its amendments, oldest first."""

    claim: str
    entries: dict[str, Verdict] = field(default_factory=dict)
    reference: dict[str, str] = field(default_factory=dict)
    registered: str = ""
    amendments: list[Amendment] = field(default_factory=list)

    @property
    def rule(self) -> str:
        """The rule in force: the last amendment's, else the registered one."""
        return self.amendments[-1].new if self.amendments else self.registered

    def of(self, tier: str) -> list[Verdict]:
        return [e for _, e in sorted(self.entries.items()) if e.tier == tier]

    def made_by(self, e: Verdict, code: str) -> bool:
        """Whether the entry's values are the training code ``code``'s: its own digest, or, for
        an entry recorded before digests were kept, while no entry of its tier carries one (once
        one does, the code has been recorded as it is and the older entries are stale)."""
        return e.code == code or (not e.code and not any(x.code for x in self.of(e.tier)))

    def current(self, tier: str, code: str, first_seed: int) -> list[Verdict]:
        """The entries of ``tier`` on the seeds from ``first_seed`` made by the training code
        ``code`` (``made_by``) under the rule in force: what can stand for the claim now, the
        tier's reference first."""
        out = [e for e in self.of(tier) if self.made_by(e, code) and e.full_rule == self.rule
               and e.seeds[:1] == (first_seed,)]
        return sorted(out, key=lambda e: (e.key != self.reference.get(tier), e.measured))


FORMAT = 2  # the layout of a record file


def path_of(folder: Path, claim: str) -> Path:
    return Path(folder) / f"{claim}.json"


def read(path: Path) -> Record:
    """The record in ``path`` (an empty one if there is no such file), every entry checked to
    follow from itself and to be under the registered rule or an amendment's."""
    claim = Path(path).stem
    if not Path(path).is_file():
        return Record(claim)
    try:
        body = json.loads(Path(path).read_text())
        if not isinstance(body, dict):
            raise TypeError(f"a JSON {type(body).__name__}, not an object")
        if (version := body.get("format")) != FORMAT:
            raise LedgerError(f"record {path} is format {version}; this normsys ({__version__}) "
                              f"reads format {FORMAT}: use the normsys version that wrote it")
        if body["claim"] != claim:
            raise LedgerError(f"record {path} holds claim {body['claim']!r}: a record's file is "
                              f"named for its claim")
        required = set(RECORDED) - set(OPTIONAL)
        entries = {}
        for k, e in body["entries"].items():
            if missing := sorted(required - set(e)):
                raise LedgerError(f"record {path}: entry {k!r} lacks {', '.join(missing)}; "
                                  f"{again(path)}")
            entries[k] = Verdict.of_entry(e)
        record = Record(claim, entries, dict(body["reference"]), body["registered"],
                        [Amendment(**a) for a in body["amendments"]])
    except LedgerError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise LedgerError(f"record {path} cannot be read ({type(err).__name__}: {err}); "
                          f"{again(path)}") from None
    verify(record, path)
    return record


def again(path: Path) -> str:
    """What to do with a record that cannot be read."""
    return f"restore it from git (git checkout -- {path}), or delete it and record the claim " \
           f"again with `pytest claims --claims-update` (every environment's entries go with it)"


def verify(record: Record, path: Path) -> None:
    """Raise LedgerError where the record contradicts itself: an entry under a key that is not
    its own, a verdict that does not follow from its values, a rule neither registered nor
    amended, an amendment that does not start from the rule before it, a reference that is not
    an entry."""
    rules = [record.registered]
    for a in record.amendments:
        if a.old != rules[-1]:
            raise LedgerError(f"record {path}: the amendment of {a.date} starts from {a.old!r}, "
                              f"but the rule before it is {rules[-1]!r}")
        rules.append(a.new)
    for k, e in record.entries.items():
        if k != e.key:
            raise LedgerError(f"record {path}: entry {k!r} is of {e.key!r}")
        if e.full_rule not in rules:
            raise LedgerError(f"record {path}: entry {k!r} is decided by {e.full_rule!r}, which "
                              f"is neither the registered rule ({record.registered!r}) nor an "
                              f"amendment's: a changed rule is recorded with --claims-amend")
        if why := follows(e):
            raise LedgerError(f"record {path}: entry {k!r} of {record.claim} does not follow "
                              f"from itself: {why}")
    for tier, k in record.reference.items():
        if k not in record.entries or record.entries[k].tier != tier:
            raise LedgerError(f"record {path}: the {tier} tier's reference {k!r} is not one of "
                              f"its entries of that tier")


def write(path: Path, record: Record) -> None:
    """Write ``record`` to ``path``, keys sorted, one field per line."""
    body = {"about": "normsys claim record: written by `pytest claims --claims-update`, never by "
                     "hand; every claims run is checked against it",
            "format": FORMAT, "claim": record.claim, "registered": record.registered,
            "amendments": [asdict(a) for a in record.amendments],
            "reference": dict(sorted(record.reference.items())),
            "entries": {k: record.entries[k].entry for k in sorted(record.entries)}}
    atomic_write_text(json.dumps(body, indent=1, sort_keys=True, default=float) + "\n", path)


def records(folder: Path) -> dict[str, Record]:
    """Every record in ``folder``, by claim id."""
    return {p.stem: read(p) for p in sorted(Path(folder).glob("*.json"))}


def recorded(record: Record, fresh: Verdict, amend: str = "") -> Record:
    """``record`` with ``fresh`` as its entry of that key; a claim's first entry registers its
    rule, a rule other than the one in force needs ``amend`` (the reason), which amends it. The
    tier's reference moves to ``fresh`` where it has none made by this training code on the
    claims' own seeds."""
    seen = [e for e in record.entries.values() if e.key != fresh.key and
            (e.tier, e.environment, e.seeds[:1]) == (fresh.tier, fresh.environment, fresh.seeds[:1])]
    if fresh.key not in record.entries and seen:
        after = max(max(e.seeds) for e in seen) + 1
        raise LedgerError(f"{record.claim}: its record holds {seen[0].key}, decided on seeds "
                          f"{seed_span(seen[0].seeds)}; a second plan of looks over the same seeds "
                          f"({fresh.seed_plan}) would spend a fresh error budget on values already "
                          f"seen. Replicate on fresh seeds instead (--claims-seed-offset {after}), "
                          f"an entry judged on its own")
    amendments = list(record.amendments)
    registered = record.registered or fresh.full_rule
    if fresh.full_rule != (record.rule or registered):
        if not amend:
            raise LedgerError(f"{record.claim}: decided by {fresh.full_rule!r}, but its record "
                              f"holds {record.rule!r}: a changed rule is an amendment, recorded "
                              f"with --claims-update --claims-amend \"<why>\"")
        amendments.append(Amendment(time.strftime("%Y-%m-%d"), record.rule, fresh.full_rule,
                                    amend))
    after = Record(record.claim, {**record.entries, fresh.key: fresh}, dict(record.reference),
                   registered, amendments)
    old = record.entries.get(after.reference.get(fresh.tier, ""))
    if fresh.seeds[:1] == (0,) and (old is None or not after.made_by(old, fresh.code) or
                                   old.full_rule != fresh.full_rule or old.key == fresh.key):
        after.reference[fresh.tier] = fresh.key
    return after


# ----------------------------------------------------------------------------- noise across


# A claim judged on another environment than its entries' is held to its reference by the mean of
# the per-seed differences, within a bound from the claim's own cross-environment differences:
# its two-sided false-alarm rate is ALPHA_ACROSS, so a run of up to 100 claims on a new CPU
# fails with no bug at most 1% of the time (tests/test_ledger.py simulates it from the records).
ALPHA_ACROSS = 1e-4
# where every environment gave the same bits, rounding is all another can add: this fraction of
# the values' scale
ROUNDING, FLOOR = 1e-6, 1e-12


@dataclass(frozen=True)
class Noise:
    """How much a claim's per-seed values move between numeric environments on the same seeds:
    ``sd`` of one environment's value about the seed's mean over environments, pooled with
    ``df`` degrees of freedom; ``measured`` False where no two environments share seeds and the
    seeds' own spread stands in (another environment taken to be as different as another
    seed)."""

    sd: float
    df: int
    scale: float  # the values' size, for the rounding floor
    measured: bool

    def bound(self, n: int) -> float:
        """How far the mean of n per-seed differences from another environment may lie from 0."""
        if self.df < 1 or not math.isfinite(self.sd):
            return math.inf
        spread = t_quantile(self.df, 1 - ALPHA_ACROSS) * self.sd * math.sqrt(2 / n)
        return max(spread, ROUNDING * self.scale, FLOOR)

    def detectable(self, n: int, power: float = 0.95, reps: int = 20_000, seed: int = 0) -> float:
        """The smallest shift of the mean that a run on another environment, n seeds, finds beyond
        its bound with probability ``power``: simulated, the per-seed differences normal with
        this spread."""
        bound = self.bound(n)
        if not math.isfinite(bound):
            return math.inf
        draws = np.random.default_rng(seed).normal(0, self.sd * math.sqrt(2 / n), reps)
        lo, hi = 0.0, 2 * bound + 10 * self.sd * math.sqrt(2 / n)  # found beyond: 100%
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if np.mean(np.abs(draws + mid) > bound) < power else (lo, mid)
        return hi


def values_by_environment(entries: Iterable[Verdict]) -> dict[tuple[str, str], dict[int, float]]:
    """Per (environment, training code) the per-seed values its entries hold."""
    out: dict[tuple[str, str], dict[int, float]] = {}
    for e in entries:
        out.setdefault((e.environment, e.code), {}).update(zip(e.seeds, e.values, strict=True))
    return out


def noise(record: Record, tier: str) -> Noise:
    """The claim's noise across environments at ``tier``, from its entries: every seed that two
    or more environments measured with the same training code adds its values' spread."""
    entries = record.of(tier)
    by_env = values_by_environment(entries)
    squares, df = 0.0, 0
    for code in {c for _, c in by_env}:
        envs = [v for (_, c), v in by_env.items() if c == code]
        for s in set().union(*envs):
            vals = [v[s] for v in envs if s in v and math.isfinite(v[s])]
            if len(vals) > 1:
                mean = math.fsum(vals) / len(vals)
                squares += math.fsum((v - mean) ** 2 for v in vals)
                df += len(vals) - 1
    finite = [v for e in entries for v in e.values if math.isfinite(v)]
    scale = max(map(abs, finite), default=0.0)
    if df:
        return Noise(math.sqrt(squares / df), df, scale, True)
    ref = record.entries.get(record.reference.get(tier, ""))
    own = [v for v in (ref.values if ref else []) if math.isfinite(v)]
    if len(own) < 2:
        return Noise(math.nan, 0, scale, False)
    mean = math.fsum(own) / len(own)
    return Noise(math.sqrt(math.fsum((v - mean) ** 2 for v in own) / (len(own) - 1)),
                 len(own) - 1, scale, False)


# ----------------------------------------------------------------------------- judging


@dataclass(frozen=True)
class Judgement:
    """How a fresh measurement stands against the claim's record."""

    status: str   # same | across | moved | changed | new | unrecorded | updated
    message: str  # one line for the test's outcome and the verdict table

    @property
    def fails(self) -> bool:
        return self.status == "changed"

    @property
    def unrecorded(self) -> bool:  # no entry holds it: reported; --claims-strict fails it
        return self.status in UNRECORDED

    @property
    def moved(self) -> bool:  # between decisive and inconclusive, within the bound
        return self.status == MOVED


UPDATE = "review, then record it: pytest claims -k {cid} --claims-update"
UNRECORDED = ("new", "unrecorded")  # reported; --claims-strict fails them
MOVED = "moved"  # a verdict that moved between decisive and inconclusive within the bound


def changes(entry: Verdict, fresh: Verdict) -> list[str]:
    """What a claim was decided under that differs from its entry: statistic, rule, seeds (at the
    first look: under the same plan the look it decided at is an outcome), run settings."""
    first = entry.plan[0] if entry.plan == fresh.plan and entry.plan else None
    out = [f"{name}: recorded {old}, now {new}" for name, old, new in (
        ("statistic", entry.statistic, fresh.statistic), ("rule", entry.rule, fresh.rule),
        ("seeds", seed_span(entry.seeds[:first]), seed_span(fresh.seeds[:first]))) if old != new]
    if entry.settings_fingerprint and entry.settings_fingerprint != fresh.settings_fingerprint:
        named = setting_changes(entry.settings, fresh.settings)
        if named or len(entry.seeds) == len(fresh.seeds):
            out.append("settings: " + (", ".join(named) if named else
                                       f"the runs pair the same values otherwise (run configs "
                                       f"recorded {entry.settings_fingerprint}, now "
                                       f"{fresh.settings_fingerprint})"))
    return out


def value_changes(entry: Verdict, fresh: Verdict) -> list[str]:
    """The per-seed values that differ between two measurements on the same seeds, largest
    change first: ``seed 2: 0.1234 -> 0.1236``."""
    pairs = [(s, a, b) for s, a, b in zip(entry.seeds, entry.values, fresh.values, strict=False)
             if not same_number(a, b)]
    pairs.sort(key=lambda p: -abs(p[2] - p[1]) if math.isfinite(p[2] - p[1]) else -math.inf)
    return [f"seed {s}: {a!r} -> {b!r}" for s, a, b in pairs]


def judge(record: Record, fresh: Verdict) -> Judgement:
    """Judge a fresh measurement (its ``code`` the training code's digest now) against the
    claim's record."""
    update = UPDATE.format(cid=record.claim)
    now = f"now: {fresh.verdict} {interval(fresh.mean, fresh.low, fresh.high)}"
    if not record.of(fresh.tier):
        return Judgement("new", f"new: no record of the {fresh.tier} tier; {update}")
    if record.rule and fresh.full_rule != record.rule:
        return Judgement("changed", f"decided by {fresh.full_rule!r}, but the record holds "
                                    f"{record.rule!r}: a changed rule is an amendment, recorded "
                                    f"with --claims-update --claims-amend \"<why>\"")
    own = record.entries.get(fresh.key)
    if own is not None and record.made_by(own, fresh.code) and own.full_rule == fresh.full_rule:
        head = f"record ({own.environment}): {own.line()}"
        differ = changes(own, fresh)
        moved = value_changes(own, fresh)
        if moved:
            differ.append(f"per-seed values differ at {len(moved)} seed(s), the largest "
                          f"{moved[0]}")
        if own.verdict != fresh.verdict:
            differ.append(f"verdict recorded {own.verdict}")
        if differ:
            return Judgement("changed", "; ".join([head, now, *differ, update]))
        return Judgement("same", f"{head}; the same per-seed values")
    candidates = record.current(fresh.tier, fresh.code, fresh.seeds[0])
    stale = " (this environment's entry was made by other training code)" if own else ""
    if not candidates:
        return Judgement("unrecorded", f"no entry of the {fresh.tier} tier on seeds "
                                       f"{fresh.seeds[0]}+ made by this training code under the "
                                       f"rule in force{stale}; {update}")
    ref = candidates[0]
    head = f"reference ({ref.environment}): {ref.line()}{stale}"
    if differ := changes(ref, fresh):
        return Judgement("changed", "; ".join([head, now, *differ, update]))
    common = list(zip(ref.values, fresh.values, strict=False))  # the same seeds from the first
    n = len(common)
    shift = math.fsum(b - a for a, b in common) / n if n else math.nan
    bound = noise(record, fresh.tier).bound(n)
    if not abs(shift) <= bound:  # NaN too
        return Judgement("changed", "; ".join([head, now, f"the per-seed values moved by "
                                               f"{num(shift)} on average over {n} seeds, beyond "
                                               f"this claim's bound across environments "
                                               f"({num(bound)})", update]))
    if {ref.verdict, fresh.verdict} == {SUPPORTED, REFUTED}:
        return Judgement("changed", "; ".join([head, now, "a decisive flip", update]))
    within = f"moved {num(shift)} on average, within its bound ({num(bound)})"
    if ref.verdict != fresh.verdict:
        return Judgement(MOVED, f"{head}; {now}: {within}")
    return Judgement("across", f"{head}; {within}")


class Ledgers:
    """A session's claim records in ``folder``, each read once: they judge each fresh verdict and,
    with ``update`` (--claims-update), take this session's ( ``amend``: the reason for a rule
    changed since a claim was recorded)."""

    def __init__(self, folder: Path, update: bool = False, strict: bool = False,
                 amend: str = ""):
        self.folder, self.update, self.strict, self.amend = Path(folder), update, strict, amend
        self.read: dict[str, Record] = {}
        # records of claims no longer defined: known only to a session that collected every claim
        # (the plugin's ``collects_every_claim``)
        self.stale: list[str] = []

    def record(self, cid: str) -> Record:
        if cid not in self.read:
            self.read[cid] = read(path_of(self.folder, cid))
        return self.read[cid]

    def recorded(self, cid: str, tier: str, key_now: str, code: str, first_seed: int) \
            -> Verdict | None:
        """The entry this session's measurement will be compared with: its own (``key_now``) made
        by this training code, else the reference it is judged against."""
        record = self.record(cid)
        own = record.entries.get(key_now)
        if own is not None and record.made_by(own, code):
            return own
        current = record.current(tier, code, first_seed)
        return current[0] if current else None

    def history(self, cid: str, tier: str, environment: dict[str, str], first_seed: int) \
            -> list[Verdict]:
        """The claim's entries of ``tier`` on this device, threads and torch
        (provenance.numeric_environment; the autocast is its runs') on seeds from
        ``first_seed``, whatever their plan: the looks it took here (verdict.expected)."""
        return [e for e in self.record(cid).of(tier)
                if (e.device, e.threads, e.torch) == (environment["device"],
                                                      environment["threads"],
                                                      environment["torch"])
                and e.seeds[:1] == (first_seed,)]

    def judge(self, cid: str, fresh: Verdict) -> Judgement:
        if self.update:
            try:  # a record it cannot read or amend is said, not written over
                recorded(self.record(cid), fresh, self.amend)
            except LedgerError as err:
                return Judgement("changed", str(err))
            return Judgement("updated", f"recorded from this run in "
                                        f"{path_of(self.folder, cid)}")
        return judge(self.record(cid), fresh)

    def said(self, cid: str) -> Record:
        """The claim's record for the report's words (replication, amendments); empty where it
        cannot be read, which its judgement has already failed on."""
        try:
            return self.record(cid)
        except LedgerError:
            return Record(cid)

    def replication(self, cid: str, tier: str) -> Replication | None:
        return replication(self.said(cid), tier)

    def write(self, results: Sequence) -> list[str]:
        """Put this session's measurements (claim results: ``id``, ``entry``) into their
        claims' records, and delete the records of claims no longer defined (``stale``); what was
        written and deleted."""
        written = []
        for cid in self.stale:
            path_of(self.folder, cid).unlink(missing_ok=True)
            written.append(f"deleted {path_of(self.folder, cid)}: no claim {cid} is defined")
        self.stale = []
        for r in results:
            if r.ledger != "updated":  # a rule changed without its amendment
                continue
            path = path_of(self.folder, r.id)
            fresh = Verdict.of_entry(r.entry)
            record = recorded(read(path), fresh, self.amend)
            self.folder.mkdir(parents=True, exist_ok=True)
            write(path, record)
            self.read[r.id] = record
            written.append(f"{path} ({fresh.key})")
        return written

    def stale_lines(self) -> list[str]:
        return [f"{path_of(self.folder, cid)}: the record of a claim no longer defined; review, "
                f"then --claims-update deletes it" for cid in self.stale]


def stale(folder: Path, defined: set[str]) -> list[str]:
    """The claims whose records ``folder`` holds but ``defined`` (every claim id) lacks."""
    return sorted({p.stem for p in Path(folder).glob("*.json")} - set(defined))


# ----------------------------------------------------------------------------- replication

# How a claim's verdicts replicate across its entries of a tier: one decisive verdict in every
# entry, on more than one independent seed set (replicated) or on one, recomputed in more than
# one numeric environment that gave other numbers (reproduced) or in one (unreplicated);
# inconclusive in every entry (open); decisive in one and inconclusive in another (a verdict the
# sample decides: a replication on fresh seeds, or the paper tier, settles it); supported in one
# and refuted in another (a red flag: the claim's evidence points both ways).
REPLICATED, REPRODUCED, UNREPLICATED, OPEN, FRAGILE, CONTRADICTED = (
    "replicated", "reproduced", "unreplicated", "open", "fragile", "CONTRADICTED")


@dataclass(frozen=True)
class Replication:
    """One claim's verdict in each entry of a tier (by short label) and what they say.
    ``seed_sets``: how many of the entries' seed sets are independent samples (share no seed);
    ``environments``: how many numeric environments gave numbers of their own (one whose
    per-seed values are another's, bit for bit, on the seeds both ran, adds none)."""

    verdicts: dict[str, str]
    environments: int
    seed_sets: int

    @property
    def word(self) -> str:
        found = set(self.verdicts.values())
        if {SUPPORTED, REFUTED} <= found:
            return CONTRADICTED
        if len(found) > 1:
            return FRAGILE
        if found == {INCONCLUSIVE}:
            return OPEN
        return REPLICATED if self.seed_sets > 1 else \
            REPRODUCED if self.environments > 1 else UNREPLICATED

    def line(self) -> str:
        """``fragile (1 independent seed set, 2 numeric environments): supported (cpu AVX512
        AMD), inconclusive (cpu AVX2 AMD)``."""
        return f"{self.word} ({self.counts}): " + \
            ", ".join(f"{v} ({k})" for k, v in self.verdicts.items())

    @property
    def counts(self) -> str:
        return f"{self.seed_sets} independent seed set{'s' * (self.seed_sets != 1)}, " \
               f"{self.environments} numeric environment{'s' * (self.environments != 1)}"


def independent_seed_sets(seed_sets: Iterable[Sequence[int]]) -> int:
    """The most of ``seed_sets`` that share no seed with each other: how many independent
    samples they hold (seeds 0-2, 3-5 and 0-7: two). Each set is a run of consecutive seeds, so
    taking the one that ends first, again and again, finds the most."""
    count, last = 0, -1
    for seeds in sorted((s for s in seed_sets if s), key=max):
        if min(seeds) > last:
            count, last = count + 1, max(seeds)
    return count


def numeric_environments(entries: Sequence[Verdict]) -> int:
    """How many of the entries' environments gave numbers of their own: an environment whose
    every entry has the per-seed values of an environment counted before, on the seeds both
    ran, bit for bit, is counted with it."""
    by_env: dict[str, list[Verdict]] = {}
    for e in entries:
        by_env.setdefault(e.environment, []).append(e)
    counted: list[list[Verdict]] = []

    def same(a: Verdict, b: Verdict) -> bool:
        n = min(len(a.values), len(b.values))
        return a.seeds[:1] == b.seeds[:1] and \
            all(same_number(x, y) for x, y in zip(a.values[:n], b.values[:n], strict=True))

    for own in by_env.values():
        if not any(all(any(same(e, o) for o in other) for e in own) for other in counted):
            counted.append(own)
    return len(counted)


def label(e: Verdict) -> str:
    """An entry's column in a few words: its device, first seed and, for a plan of several looks,
    the most seeds it may take: ``cpu (AVX2, AMD), seeds 0+``, ``cpu (AVX512, AMD), seeds 0+ up
    to 8`` (a claim's own seed count and its runs' autocast are the claim's, not the column's)."""
    most = f" up to {e.plan[-1]}" if len(e.plan) > 1 else ""
    return f"{e.device}, seeds {e.seeds[0] if e.seeds else 0}+{most}"


def replication(record: Record, tier: str) -> Replication | None:
    entries = record.of(tier)
    if not entries:
        return None
    ref = record.entries.get(record.reference.get(tier, ""))
    ordered = sorted(entries, key=lambda e: e is not ref)
    return Replication({label(e): e.verdict for e in ordered}, numeric_environments(ordered),
                       independent_seed_sets(e.seeds for e in entries))


# ----------------------------------------------------------------------------- the verdict page


def columns(recs: dict[str, Record], tier: str) -> list[str]:
    """The (environment, seed plan) labels the records' entries of ``tier`` fall in, the most
    used first (the reference's usually), then by name."""
    counts: dict[str, int] = {}
    for r in recs.values():
        for e in r.of(tier):
            counts[label(e)] = counts.get(label(e), 0) + (2 if r.reference.get(tier) == e.key
                                                           else 1)
    return sorted(counts, key=lambda c: (-counts[c], c))


def as_markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(f"`{c}`" if i == 0 else c for i, c in enumerate(row)) + " |"
              for row in rows]
    return "\n".join(lines)


def as_text(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(header)]
    fmt = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()  # noqa: E731
    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *map(fmt, rows)])


def compare(recs: dict[str, Record], tier: str, wanted: Sequence[str] = ()) \
        -> tuple[list[str], list[list[str]], str]:
    """Header, rows (claim, then verdict, mean [CI] and seeds per column) and the agreement line
    of the columns ``wanted`` (labels; all of the tier's if none): claims in all of them agree when
    their verdicts are equal; a decisive flip is supported in one and refuted in another."""
    known = columns(recs, tier)
    cols = list(wanted) or known
    if unknown := [c for c in cols if c not in known]:
        raise LedgerError(f"no entries of the {tier} tier under {', '.join(unknown)}; the "
                          f"columns there: {'; '.join(known)}")
    header = ["claim"] + [x for c in cols for x in (f"{c}: verdict", "mean [95% CI]", "seeds")]
    rows, common, agree, flips = [], 0, 0, []
    for cid, r in sorted(recs.items()):
        by = {label(e): e for e in r.of(tier)}
        if not by:
            continue
        entries = [by.get(c) for c in cols]
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
    if common < len(rows):
        line += f"; {len(rows) - common} claims not in every column"
    return header, rows, line


def false_alarm(recs: dict[str, Record], tier: str, reps: int = 20_000, seed: int = 0) -> float:
    """The chance that a clean run of every claim of ``tier`` on an environment none of them
    records fails somewhere, simulated: each claim's spread across environments drawn from what
    its records leave possible (sd^2 = s^2 df / chi2(df), the spread's uncertainty at df degrees
    of freedom), then the mean of its per-seed differences from its reference (normal, that
    spread), held to its bound."""
    def shifts(gen, r: Record, nz: Noise, n: int) -> np.ndarray | None:
        if not math.isfinite(nz.sd) or nz.df < 1:
            return None
        sd = nz.sd * np.sqrt(nz.df / gen.chisquare(nz.df, reps))
        return gen.normal(0, 1, reps) * sd * math.sqrt(2 / n)

    return alarm_rate(recs, tier, shifts, reps, seed)


def alarm_rate(recs: dict[str, Record], tier: str, shifts, reps: int, seed: int) -> float:
    """The share of ``reps`` simulated runs of every claim of ``tier`` in which some claim's mean
    difference from its reference (``shifts(gen, record, noise, n)``: one per run, or None for a
    claim it cannot simulate) lies beyond its bound."""
    gen = np.random.default_rng(seed)
    alarms = np.zeros(reps, dtype=bool)
    for r in recs.values():
        if (ref := r.entries.get(r.reference.get(tier, ""))) is None:
            continue
        n, nz = len(ref.seeds), noise(r, tier)
        if (drawn := shifts(gen, r, nz, n)) is not None:
            alarms |= np.abs(drawn) > nz.bound(n)
    return float(alarms.mean())


def differences(record: Record, tier: str) -> list[float]:
    """Every per-seed difference between two environments' values of the claim on one seed, made
    by the same training code (each pair of environments once)."""
    by_env = values_by_environment(record.of(tier))
    keys = sorted(by_env)
    out = []
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            if a[1] == b[1]:
                out += [by_env[b][s] - by_env[a][s] for s in by_env[a].keys() & by_env[b].keys()
                        if math.isfinite(by_env[b][s] - by_env[a][s])]
    return out


def false_alarm_resampled(recs: dict[str, Record], tier: str, reps: int = 20_000,
                          seed: int = 0) -> float:
    """``false_alarm`` with each claim's per-seed differences resampled, sign at random, from the
    differences its records show (a claim whose records show none: normal, as there)."""
    def shifts(gen, r: Record, nz: Noise, n: int) -> np.ndarray | None:
        if (diffs := np.array(differences(r, tier))).size:
            return (gen.choice(diffs, (reps, n)) * gen.choice([-1.0, 1.0], (reps, n))).mean(1)
        return gen.normal(0, nz.sd * math.sqrt(2 / n), reps) if math.isfinite(nz.sd) else None

    return alarm_rate(recs, tier, shifts, reps, seed)


def detection_table(recs: dict[str, Record], tier: str) -> tuple[list[str], list[list[str]]]:
    """Per claim of ``tier``: its noise across environments, its bound at the reference's seeds
    and the smallest shift of the mean CI on another environment detects 95% of the time, also in
    the reference's half-intervals."""
    header = ["claim", "spread across environments (df)", "bound on the mean difference",
              "detected shift (95%)", "in half-intervals"]
    rows = []
    for cid, r in sorted(recs.items()):
        ref = r.entries.get(r.reference.get(tier, ""))
        if ref is None:
            continue
        nz, n = noise(r, tier), len(ref.seeds)
        shift = nz.detectable(n)
        half = (ref.high - ref.low) / 2
        spread = f"{num(nz.sd)} ({nz.df})" if nz.measured else \
            f"{num(nz.sd)} ({nz.df}), seeds' own: one environment"
        rows.append([cid, spread, num(nz.bound(n)), num(shift),
                     num(shift / half) if half > 0 and math.isfinite(half) else "-"])
    return header, rows


def scaled(e: Verdict) -> tuple[float, float, float]:
    """The entry's mean and interval on the scale where its rule's threshold is 0 and its claimed
    side is positive, in units of the threshold's size (|threshold|, or the band's half-width;
    1 where the threshold is 0): a claim is supported where the whole bar lies right of 0."""
    rule = parse_rule(e.rule)
    if rule.side == "within":
        lo, hi = rule.threshold
        centre, half = (lo + hi) / 2, (hi - lo) / 2
        inside = lambda v: (half - abs(v - centre)) / half  # noqa: E731
        worst = min(inside(e.low), inside(e.high))
        best = 1.0 if e.low <= centre <= e.high else max(inside(e.low), inside(e.high))
        return inside(e.mean), worst, best
    t = rule.threshold
    unit = abs(t) or 1.0
    sign = 1 if rule.side in (">", ">=") else -1
    a, b = sign * (e.low - t) / unit, sign * (e.high - t) / unit
    return sign * (e.mean - t) / unit, min(a, b), max(a, b)


COLOURS = {SUPPORTED: "tab:green", REFUTED: "tab:red", INCONCLUSIVE: "tab:grey"}


def figure(recs: dict[str, Record], path: Path) -> None:
    """Every claim's interval against its threshold, per tier and column (scaled: ``scaled``),
    coloured by verdict; drawn to ``path`` (PNG). The axis is symmetric-log: near the threshold
    linear, far from it logarithmic."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tiers = [t for t in ("cpu", "paper") if any(r.of(t) for r in recs.values())]
    ids = sorted(recs)
    fig, axes = plt.subplots(1, len(tiers), figsize=(7 * len(tiers), 0.26 * len(ids) + 2.6),
                             sharey=True, squeeze=False)
    for ax, tier in zip(axes[0], tiers, strict=True):
        cols = columns(recs, tier)
        offsets = np.linspace(-0.3, 0.3, len(cols)) if len(cols) > 1 else [0.0]
        markers = "osD^v<>ph*"
        for i, cid in enumerate(ids):
            by = {label(e): e for e in recs[cid].of(tier)}
            for j, c in enumerate(cols):
                if (e := by.get(c)) is None or not math.isfinite(e.mean):
                    continue
                mid, lo, hi = scaled(e)
                y = i + offsets[j]
                ax.plot([lo, hi], [y, y], color=COLOURS.get(e.verdict, "black"), lw=1.4)
                ax.plot([mid], [y], markers[j % len(markers)], ms=3.5,
                        color=COLOURS.get(e.verdict, "black"))
        ax.axvline(0, color="black", lw=1)
        ax.set_xscale("symlog", linthresh=1)
        ax.set_title(f"{tier} tier: {len(cols)} environment and seed-plan column(s)", fontsize=9)
        ax.set_xlabel("distance from the threshold, in threshold units (claimed side right)",
                      fontsize=8)
        ax.grid(axis="x", alpha=0.3)
        handles = [plt.Line2D([], [], marker=markers[j % len(markers)], color="black", ls="",
                              label=c) for j, c in enumerate(cols)]
        handles += [plt.Line2D([], [], color=col, label=v) for v, col in COLOURS.items()]
        ax.legend(handles=handles, fontsize=7, loc="upper center", ncol=2,
                  bbox_to_anchor=(0.5, -0.6 / (0.26 * len(ids) + 1.6)))
    axes[0][0].set_yticks(range(len(ids)), ids, fontsize=7)
    axes[0][0].invert_yaxis()
    fig.tight_layout()
    fig.savefig(path, dpi=90, metadata={"Software": None})
    plt.close(fig)


DOCS_HEAD = """# Verdicts

Written by `python -m normsys tables` from the claim records in `claims/ledger/` (`.ci/run` fails
when this page is not what the command writes from them). Each record holds a claim's entries, one
per tier, numeric environment and seed plan; the CPU and paper tiers differ in model size, data
and seeds, so their agreement is a comparison of settings, not a reproduction check; two GPUs,
two CPU kernel sets or vendors, or two seed sets of one tier, are.

![Every claim's interval against its threshold](verdicts.png)

Each bar is an entry's 95% interval (or the level of the look it decided at), its mark the mean,
on a scale where the rule's threshold is the vertical line and the claimed side lies right: the
distance from the threshold in units of the threshold's size (|threshold|, a band's half-width, or
1 for a threshold of 0), linear within one unit and logarithmic beyond. Green supported, red
refuted, grey inconclusive; one mark per column (numeric environment and seed plan)."""

REPLICATION_HEAD = """## Replication: every claim at a glance

Each tier's verdict is its reference entry's; beside it, how that verdict replicates across the
claim's entries of the tier, and how many independent samples those are (seed sets that share no
seed; numeric environments that gave numbers of their own, not another's bit for bit):
**replicated** (one decisive verdict in every entry, on more than one independent seed set),
*reproduced* (one decisive verdict, on one seed set, recomputed in more than one numeric
environment: the arithmetic replicates, the sample is one), *unreplicated* (one decisive verdict
from one sample in one environment), *open* (inconclusive in every entry), **fragile** (decisive
in one, inconclusive in another: the sample decides it; a replication on fresh seeds or the paper
tier settles it), **CONTRADICTED** (supported in one, refuted in another). Where entries disagree,
the cell names those that differ from the reference. An amendment of a claim's rule stands under
its verdict."""

DETECTION_HEAD = """## What CI on another CPU detects

A CPU-tier run on a numeric environment with no entry of its own (another CPU's kernels or vendor,
or this environment's entry made by other training code) is held to the reference by the mean of
its per-seed differences, within a bound from the claim's own spread across the environments its
entries record on the same seeds (a two-sided false-alarm rate of {alpha:g} a claim; where one
environment records the claim, the seeds' own spread stands in). Below, per claim, the smallest
shift of its mean that such a run detects 95% of the time, simulated; in the last column in half
95% intervals of the reference. The whole CPU tier's false-alarm rate on a new environment,
simulated from the records: {normal:.3%} with the differences normal and each claim's spread as
uncertain as its degrees of freedom leave it, {resampled:.3%} with the differences resampled from
those recorded."""


def replication_section(recs: dict[str, Record], tiers: Sequence[str]) -> str:
    header = ["claim"] + [x for t in tiers for x in (t, f"{t}: replication")]
    rows, counts = [], {t: {} for t in tiers}
    for cid, r in sorted(recs.items()):
        row = [cid]
        for tier in tiers:
            rep, ref = replication(r, tier), r.entries.get(r.reference.get(tier, ""))
            if rep is None:
                row += ["-", ""]
                continue
            counts[tier][rep.word] = counts[tier].get(rep.word, 0) + 1
            first = label(ref) if ref else ""
            differ = [f"{v} in {k}" for k, v in rep.verdicts.items()
                      if ref is None or v != ref.verdict]
            verdict = ref.verdict if ref else "-"
            word = f"**{rep.word}**" if rep.word in (FRAGILE, CONTRADICTED) else rep.word
            row += [f"{verdict.upper() if verdict == REFUTED else verdict} ({first})",
                    f"{word} ({rep.counts})"
                    + (f": {', '.join(differ)}" if differ else "")]
        row[1] += "".join(f"<br>*{a.line()}*" for a in r.amendments)  # beside the verdict
        rows.append(row)
    summary = "; ".join(f"{t}: " + ", ".join(f"{n} {w}" for w, n in sorted(counts[t].items()))
                        for t in tiers)
    return "\n\n".join([REPLICATION_HEAD, summary, as_markdown(header, rows)])


def docs(folder: Path, picture: Path | None = None) -> str:
    """docs/verdicts.md from the records in ``folder``: the figure (drawn to ``picture`` when
    given), each claim's replication and amendments, what CI on another CPU detects, then every
    tier's columns side by side."""
    recs = records(folder)
    if picture is not None:
        figure(recs, picture)
    tiers = [t for t in ("cpu", "paper") if any(r.of(t) for r in recs.values())]
    blocks = [DOCS_HEAD, replication_section(recs, tiers)]
    if "cpu" in tiers:
        header, rows = detection_table(recs, "cpu")
        blocks += [DETECTION_HEAD.format(alpha=ALPHA_ACROSS, normal=false_alarm(recs, "cpu"),
                                         resampled=false_alarm_resampled(recs, "cpu")),
                   as_markdown(header, rows)]
    for tier in tiers:
        cols = columns(recs, tier)
        for other in cols[1:]:
            header, rows, agreement = compare(recs, tier, [cols[0], other])
            blocks += [f"## The {tier} tier: {other} beside {cols[0]}", agreement,
                       as_markdown(header, rows)]
    return "\n\n".join(blocks) + "\n"
