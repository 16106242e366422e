"""A claim's record: what it was measured to be, read, verified, judged against and
written; the noise across environments, and how its entries replicate.

Every claim keeps what it was measured to be, one JSON file per claim:

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

The values decide, not the code that made them: an entry stands for what its numeric environment
gives under its run settings until a run there gives other per-seed values. The digests of the
training code that made it (``code``) are its provenance, never a reason to set it aside.

- **this environment and seed plan recorded, under the rule in force and the same run
  settings**: its per-seed values are compared bit for bit, with its verdict, statistic, rule,
  seeds and run settings; any difference fails the claim, naming the largest change and the
  command that records it after review. A training edit that changes no number passes
  everywhere (``--claims-update`` then stamps the entry with the code in force); one that
  changes a number fails exactly where an entry of that environment exists, until the change
  is reviewed and recorded there.
- **no such entry** (another CPU): against the tier's reference on the same seeds and run
  settings (``Record.current``), the mean of the per-seed differences within the claim's own
  bound (``Noise``: from its cross-environment differences on the same seeds, the kernel and
  vendor entries, at ALPHA_ACROSS a claim); a decisive flip fails.
- **run settings no entry holds** (on these seeds, under the rule in force): a setting changed
  unreviewed; fails against this environment's entry, else the reference, naming it. Once one
  environment records the new settings, another's entry of the old ones is history, and that
  environment is judged across against the new.
- **no entry on these seeds under the rule in force** (the rule was amended since, or other
  seeds): unrecorded, as is a claim with no record; both fail under ``--claims-strict``.

``replication`` says how a claim's verdicts replicate across its entries, counting independent
seed sets and numeric environments (replicated, reproduced, unreplicated, open, fragile,
CONTRADICTED); the verdict page (docs/verdicts.md) is written from every record by
normsys.claims.report.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from normsys import __version__
from normsys.claims.verdict import (
    FIRST_ALPHA,
    INCONCLUSIVE,
    OPTIONAL,
    RECORDED,
    REFUTED,
    SUPPORTED,
    Rule,
    Verdict,
    by_seed,
    decide,
    family_level,
    half_width,
    interval,
    levels,
    num,
    seed_span,
    t_quantile,
)
from normsys.training.store import atomic_write_text

# ----------------------------------------------------------------------------- the record


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
# level (Holm, _decide); entries recorded before it read "all of k: "
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


def experiment(e: Verdict) -> str:
    """What an entry's values are values of: its statistic over runs of its settings (every config
    field but the seed). Two entries of one experiment differ only where their environments, or
    the code that made them, round otherwise; an entry of another is another measurement."""
    return json.dumps([e.statistic, e.settings], sort_keys=True)


def same_experiment(a: Verdict, b: Verdict) -> bool:
    """Whether two entries measure one ``experiment`` (an entry recorded before run settings
    were kept is taken to be of any settings)."""
    return a.statistic == b.statistic and (not a.settings or not b.settings or
                                           a.settings == b.settings)


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
    if entry.parts:  # the whole family decided again picks the same comparison, on these values
        whole = decide(parse_rule(entry.rule), by_seed(entry.parts), entry.confidence)
        if list(whole.values) != list(entry.values) or whole.verdict != entry.verdict:
            return f"its parts decide {whole.verdict} on {list(whole.values)}, but it records " \
                   f"{entry.verdict} on {list(entry.values)}"
    differ = [f"{name} recorded {num(old)}, recomputed {num(new)}" for name, old, new in (
        ("mean", entry.mean, s.mean), ("low", entry.low, s.low), ("high", entry.high, s.high))
        if not same_number(old, new)]
    if decision.verdict != entry.verdict:
        differ.insert(0, f"verdict recorded {entry.verdict}, its values decide {decision.verdict}")
    if looks := [n for n in entry.plan if n < len(entry.seeds)]:  # an earlier look left it open
        early = [n for n, level in zip(entry.plan, levels(entry.plan, entry.alpha), strict=True)
                 if n in looks and decide(parse_rule(entry.rule), entry.values[:n], level,
                                          family=shared).verdict
                 != INCONCLUSIVE]
        if early:
            differ.append(f"its values decide at the look of {early[0]} seeds, yet it took "
                          f"{len(entry.seeds)}")
    return "; ".join(differ)


def under_rule(rule: str, e: Verdict) -> Verdict | None:
    """The entry's per-seed values decided by ``rule`` (a record's rule text, ``Record.rule``)
    at the look they stopped at: their seed count, at that look's level under the rule's own
    per-side alpha and the entry's plan; None where the rule is of another statistic (the values
    measure something else)."""
    if not rule.startswith(f"{e.statistic} ") or not e.values:
        return None
    body, alpha = rule[len(e.statistic) + 1:], FIRST_ALPHA
    if m := re.fullmatch(r"(.*) \(([0-9.e+-]+)% a side\)", body):
        body, alpha = m[1], float(m[2]) / 100
    plan = e.plan or (len(e.values),)
    if len(e.values) not in plan:
        return None
    level = levels(plan, alpha)[plan.index(len(e.values))]
    values = by_seed(e.parts) if e.parts else e.values
    return decide(parse_rule(body), values, level, family=family(body))


# ----------------------------------------------------------------------------- a claim's record


@dataclass(frozen=True)
class Amendment:
    """A change of a claim's rule after it was registered, with why; one that keeps the rule
    (old and new alike) corrects the reason the rule in force was given (``reason_corrected``)."""

    date: str
    old: str
    new: str
    reason: str

    def line(self, reason: str = "") -> str:
        """The amendment in a line, its reason as given or as ``reason`` names it."""
        why = reason or self.reason
        if self.old == self.new:
            return f"reason corrected {self.date}: {self.new} ({why})"
        return f"amended {self.date}: {self.old} -> {self.new} ({why})"


def reason_corrected(record: Record, of: str, reason: str) -> Record | None:
    """``record`` with the reason its rule in force was given corrected, where that reason (the
    last amendment's) says ``of``: an amendment that keeps the rule, dated today, with
    ``reason``. None where its rule in force was given no such reason (a correction made
    already is the last amendment, and says other words)."""
    if not (record.amendments and of in record.amendments[-1].reason):
        return None
    if not reason.strip():
        raise LedgerError("a corrected reason must say why: give it")
    correction = Amendment(time.strftime("%Y-%m-%d"), record.rule, record.rule, reason)
    return replace(record, amendments=[*record.amendments, correction])


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

    def in_force(self, tier: str, like: Verdict | None = None) -> list[Verdict]:
        """The entries of ``tier`` under the rule in force, of the experiment of ``like`` (None:
        of the tier's reference): what can stand for the claim now, on whatever seeds, by
        whatever training code."""
        like = like or self.entries.get(self.reference.get(tier, ""))
        return [e for e in self.of(tier) if e.full_rule == self.rule
                and (like is None or same_experiment(e, like))]

    def current(self, tier: str, first_seed: int, like: Verdict | None = None) -> list[Verdict]:
        """The entries in force (``in_force``) on the seeds from ``first_seed``, the tier's
        reference first."""
        out = [e for e in self.in_force(tier, like) if e.seeds[:1] == (first_seed,)]
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
    tier's reference moves to ``fresh`` (on the claim's own seeds) where it has none under that
    rule and of its experiment, or the reference is this environment's. An entry that ``fresh``
    gives again value for value keeps the codes that made it, ``fresh``'s added. One error
    budget per seed set: a plan of looks other than the one the tier's seeds were already decided
    on, in this numeric environment or, under the rule it is decided by, in any other, is refused
    (their values were seen; another plan over them would spend a second budget)."""
    seen = [e for e in record.entries.values() if e.plan != fresh.plan
            and (e.tier, e.seeds[:1]) == (fresh.tier, fresh.seeds[:1])
            and (e.environment == fresh.environment or e.full_rule == fresh.full_rule)]
    if fresh.key not in record.entries and seen:
        after = max(max(e.seeds) for e in seen) + 1
        raise LedgerError(f"{record.claim}: its record holds {seen[0].key}, decided on seeds "
                          f"{seed_span(seen[0].seeds)}; a second plan of looks over the same seeds "
                          f"({fresh.seed_plan}) would spend a fresh error budget on values already "
                          f"seen. Replicate on fresh seeds instead (--claims-seed-offset {after}), "
                          f"an entry judged on its own")
    own = record.entries.get(fresh.key)
    if own is not None and own.full_rule == fresh.full_rule and not differing(own, fresh):
        # the same values from this code: the entry keeps the codes that computed them before
        fresh = replace(fresh, code=" ".join(dict.fromkeys(fresh.code.split() + own.code.split())))
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
    if fresh.seeds[:1] == (0,) and (old is None or old.full_rule != fresh.full_rule or
                                   not same_experiment(old, fresh) or old.key == fresh.key):
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


DETECT_POWER = 0.95  # the chance at which a shift across environments counts as detected


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

    def detectable(self, n: int, power: float = DETECT_POWER, reps: int = 20_000,
                   seed: int = 0) -> float:
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


# An all-of entry recorded before entries kept their parts holds its deciding comparison's values
# alone: it is taken to be the part whose values it matches within this fraction, seed for seed
# (kernels round those a few parts in 1e7 apart; two comparisons lie far further apart), of an
# entry of the same experiment that keeps its parts, or of another such entry; and else it
# pairs with none.
SAME_PART = 1e-4


def matches(a: Mapping[int, float], b: Mapping[int, float]) -> bool:
    """Whether two per-seed value sets agree within SAME_PART on the seeds both hold (one at
    least)."""
    shared = a.keys() & b.keys()
    return bool(shared) and all(abs(a[s] - b[s]) <= SAME_PART * max(1.0, abs(a[s]))
                                for s in shared)


def values_by_environment(entries: Iterable[Verdict]) -> dict[tuple[str, str], dict]:
    """Per (environment, ``experiment``) the values its entries hold, by seed, or for an all-of
    rule by (seed, part): each comparison paired only with itself across environments,
    whichever one decided (an entry without its parts: the part it matches, SAME_PART)."""
    out: dict[tuple[str, str], dict] = {}
    known: list[tuple[str, str, dict[int, float]]] = []  # (experiment, part, values by seed)
    entries = sorted(entries, key=lambda e: not e.parts)  # those that name their parts first
    for i, e in enumerate(entries):
        own, of = dict(zip(e.seeds, e.values, strict=True)), experiment(e)
        if e.parts:
            by_part = {part: dict(zip(e.seeds, values, strict=True))
                       for part, values in e.parts.items()}
            known += [(of, part, v) for part, v in by_part.items()]
            values = {(s, part): x for part, v in by_part.items() for s, x in v.items()}
        elif re.match(ALL_OF, e.rule):
            part = next((part for x, part, v in known if x == of and matches(own, v)),
                        f"deciding comparison {i}")
            known.append((of, part, own))
            values = {(s, part): x for s, x in own.items()}
        else:
            values = own
        out.setdefault((e.environment, of), {}).update(values)
    return out


def noise(record: Record, tier: str) -> Noise:
    """The claim's noise across environments at ``tier``, from its entries: every seed that two
    or more environments measured in the same experiment adds its values' spread."""
    entries = record.of(tier)
    by_env = values_by_environment(entries)
    squares, df = 0.0, 0
    for of in {x for _, x in by_env}:
        envs = [v for (_, x), v in by_env.items() if x == of]
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


def reach(entry: Verdict) -> float:
    """How far the mean of a decisive entry's values can move toward its threshold, their spread
    held, before its verdict stops: the distance from the interval it was decided by (for a
    refutation of an all-of rule, the family's wider one) to the threshold, or to a band's
    nearer end. 0 for an inconclusive entry."""
    if entry.verdict not in (SUPPORTED, REFUTED):
        return 0.0
    rule, shared, n = parse_rule(entry.rule), family(entry.rule), len(entry.values)
    low, high = entry.low, entry.high
    if entry.verdict == REFUTED and shared > 1 and n > 1:
        sd = math.sqrt(math.fsum((v - entry.mean) ** 2 for v in entry.values) / (n - 1))
        half = half_width(sd, n, family_level(entry.confidence, shared))
        low, high = entry.mean - half, entry.mean + half
    if rule.side == "within":
        a, b = rule.threshold
        return min(low - a, b - high) if entry.verdict == SUPPORTED else max(a - high, low - b)
    above = low - rule.threshold  # > 0: the interval lies above the threshold
    below = rule.threshold - high
    claimed_above = rule.side in (">", ">=")
    return above if (entry.verdict == SUPPORTED) == claimed_above else below


# ----------------------------------------------------------------------------- judging


@dataclass(frozen=True)
class Judgement:
    """How a fresh measurement stands against the claim's record."""

    status: str   # same | across | moved | changed | new | unrecorded | updated
    message: str  # one line for the test's outcome and the verdict table
    across: str = ""  # where a run without an entry of its own fails its bound: why, in short

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
# A training-code edit that changes no number unrecords nothing: an entry of this environment made
# by other code is compared value for value, and the same values pass; recording them stamps the
# entry with the code in force beside the codes that made it, as provenance
RESTAMP = "--claims-update stamps the entry with it"
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


def shift_of(ref: Verdict, fresh: Verdict) -> tuple[int, float]:
    """How many seeds two measurements share (the same seeds from the first) and the mean of
    their per-seed differences: of the deciding values, or, where both keep the same parts, of
    the part that moved most (whichever comparison decided in each)."""
    pairs = [list(zip(ref.values, fresh.values, strict=False))]
    if ref.parts and ref.parts.keys() == fresh.parts.keys():
        pairs = [list(zip(ref.parts[p], fresh.parts[p], strict=False)) for p in ref.parts]
    n = len(pairs[0])
    if not n:
        return 0, math.nan
    means = [math.fsum(b - a for a, b in common) / n for common in pairs]
    return n, max(means, key=lambda m: abs(m) if math.isfinite(m) else math.inf)


def differing(own: Verdict, fresh: Verdict) -> list[str]:
    """How a fresh measurement differs from its environment's entry: run settings, seeds, rule
    or statistic (``changes``), any per-seed value, the verdict; [] where it is that entry's."""
    differ = changes(own, fresh)
    if moved := value_changes(own, fresh):
        differ.append(f"per-seed values differ at {len(moved)} seed(s), the largest {moved[0]}")
    if own.verdict != fresh.verdict:
        differ.append(f"verdict recorded {own.verdict}")
    return differ


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
    if own is not None and own.full_rule == fresh.full_rule and \
            same_experiment(own, fresh):  # the values decide, not the code that made them
        head = f"record ({own.environment}): {own.line()}"
        if differ := differing(own, fresh):
            return Judgement("changed", "; ".join([head, now, *differ, update]))
        if fresh.code in own.code.split():
            return Judgement("same", f"{head}; the same per-seed values")
        return Judgement("same", f"{head}; the same per-seed values from this training code "
                                 f"({fresh.code}), though made by other code "
                                 f"({own.code or 'before digests were kept'}): {RESTAMP}")
    candidates = record.current(fresh.tier, fresh.seeds[0], fresh)
    if not candidates:  # no entry of these run settings: were the settings changed unreviewed?
        ref = record.entries.get(record.reference.get(fresh.tier, ""))
        base = next((e for e in (own, ref, *record.of(fresh.tier)) if e is not None
                     and e.full_rule == record.rule and e.seeds[:1] == fresh.seeds[:1]), None)
        if base is not None:
            head = f"{'record' if base is own else 'reference'} ({base.environment}): " \
                   f"{base.line()}"
            differ = changes(base, fresh) or \
                [f"settings: {', '.join(setting_changes(base.settings, fresh.settings))}"]
            return Judgement("changed", "; ".join([head, now, *differ, update]))
        stale = "" if own is None else " (this environment's entry was decided under an " \
            "earlier rule)"
        return Judgement("unrecorded", f"no entry of the {fresh.tier} tier on seeds "
                                       f"{fresh.seeds[0]}+ under the rule in force{stale}; "
                                       f"{update}")
    stale = "" if own is None or own.full_rule != fresh.full_rule else \
        f" (this environment's entry is of other run settings: " \
        f"{', '.join(setting_changes(own.settings, fresh.settings))}; the reference's are these)"
    ref = candidates[0]
    head = f"reference ({ref.environment}): {ref.line()}{stale}"
    if differ := changes(ref, fresh):
        return Judgement("changed", "; ".join([head, now, *differ, update]))
    n, shift = shift_of(ref, fresh)
    bound = noise(record, fresh.tier).bound(n)
    if not abs(shift) <= bound:  # NaN too
        return Judgement("changed", "; ".join([head, now, f"the per-seed values moved by "
                                               f"{num(shift)} on average over {n} seeds, beyond "
                                               f"this claim's bound across environments "
                                               f"({num(bound)})", update]), "beyond its bound")
    if {ref.verdict, fresh.verdict} == {SUPPORTED, REFUTED}:
        return Judgement("changed", "; ".join([head, now, "a decisive flip", update]),
                         "a decisive flip")
    within = f"moved {num(shift)} on average, within its bound ({num(bound)})"
    if ref.verdict != INCONCLUSIVE and fresh.verdict == INCONCLUSIVE and bound > reach(ref):
        return Judgement("changed", "; ".join([
            head, now, f"{within}, but that bound is wider than the reference's distance to the "
            f"threshold ({num(reach(ref))}): a bug that moves its verdict would pass as rounding "
            f"here, so only an entry of this environment, after review, can hold it", update]),
            "a decisive verdict moved to inconclusive within a bound wider than its distance to "
            "the threshold: kernels move this claim across its threshold, so each kind's own "
            "entry holds it")
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

    def recorded(self, cid: str, tier: str, key_now: str, first_seed: int) -> Verdict | None:
        """The entry this session's measurement will be compared with: its own (``key_now``)
        under the rule in force, by whatever training code (values decide), else the reference
        it is judged against."""
        record = self.record(cid)
        own = record.entries.get(key_now)
        if own is not None and own.full_rule == record.rule:
            return own
        current = record.current(tier, first_seed)
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

# How a claim's verdicts replicate across its entries of a tier in force: one decisive verdict in
# every entry, on more than one independent seed set (replicated) or on one, recomputed in more
# than one numeric environment that gave other numbers (reproduced) or in one (unreplicated);
# inconclusive in every entry (open); decisive in one and inconclusive in another (fragile: the
# entries combine by agreement, Replication.verdict, so a further replication cannot settle it);
# supported in one and refuted in another (a red flag: the claim's evidence points both ways).
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
    def verdict(self) -> str:
        """What the entries say together: the one decisive verdict every entry agrees on, else
        inconclusive (open, fragile or contradicted). A replication adds an entry that must
        agree, never one that overrules: at the threshold, two independent entries both
        decisive on the wrong side happen far less often than one (tests/test_sequential.py)."""
        found = set(self.verdicts.values())
        return found.pop() if len(found) == 1 and INCONCLUSIVE not in found else INCONCLUSIVE

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
    """How the claim's entries of ``tier`` in force (under the rule in force, of its reference's
    experiment: ``Record.in_force``) replicate; None where it has none. Entries of earlier rules
    or settings stay in the record as what was measured then, and count for nothing here."""
    entries = record.in_force(tier)
    if not entries:
        return None
    ref = record.entries.get(record.reference.get(tier, ""))
    ordered = sorted(entries, key=lambda e: e is not ref)
    return Replication({label(e): e.verdict for e in ordered}, numeric_environments(ordered),
                       independent_seed_sets(e.seeds for e in entries))


