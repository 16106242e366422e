"""A claim's record: what it was measured to be, read, verified and written (how a fresh
measurement is judged against it, the noise across its environments and how its entries replicate
are normsys.claims.across; a session's records, normsys.claims.session.Ledgers).

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
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from normsys import __version__
from normsys.claims.verdict import (
    FIRST_ALPHA,
    INCONCLUSIVE,
    Rule,
    Verdict,
    by_seed,
    decide,
    interval,
    levels,
    num,
    seed_span,
)
from normsys.orchestration.progress import described
from normsys.training.store import atomic_write_text, file_sha256

if TYPE_CHECKING:
    from normsys.training.config import RunConfig


# ----------------------------------------------------------------------------- an entry

# what a claim's record keeps of an entry (Record); those OPTIONAL may be absent (entries recorded
# before they were kept)
RECORDED = ("tier", "verdict", "statistic", "rule", "seeds", "values", "mean", "low", "high", "plan",
            "alpha", "measured", "commit", "normsys", "torch", "device", "threads", "autocast",
            "data", "code", "settings", "settings_fingerprint", "parts")
OPTIONAL = ("alpha", "code", "settings", "settings_fingerprint", "parts")


@dataclass(frozen=True, kw_only=True)
class Entry(Verdict):
    """A decision (the Entry) as a claim's record keeps it: the claim's tier, its statistic,
    its ``seeds`` and ``plan`` (the seed counts of its looks), where it was measured (date,
    commit, normsys and torch versions, device, threads, autocast, the data's checksums, the
    training code's digests ``code`` and the runs' ``settings``); ``entry`` is what the record
    file holds of it (``RECORDED``)."""

    tier: str = ""
    statistic: str = ""
    seeds: tuple[int, ...] = ()
    plan: tuple[int, ...] = ()
    measured: str = ""  # date and time
    commit: str = ""
    normsys: str = ""
    torch: str = ""
    device: str = ""  # the GPU's name, or the CPU with its kernels and vendor
    threads: str = ""
    autocast: str = ""
    data: str = ""  # the data folder's checksum list, as sha256 of SHA256SUMS (or "" if none)
    # the digests of the training code whose runs computed these values (normsys.orchestration.cache.
    # code_digest), newest first, space-separated: code that gave the same values again stamps
    # its own on the entry (``recorded``); "" in entries recorded before it was kept
    code: str = ""
    # the runs the claim read: each config field's value ("a | b" where runs differ; the seeds
    # are `seeds`) and a fingerprint of the exact set of run configs
    settings: dict = field(default_factory=dict)
    settings_fingerprint: str = ""

    TUPLES = ("values", "seeds", "plan")

    @classmethod
    def of_entry(cls, entry: dict) -> Entry:
        """An entry of a claim's record (``RECORDED`` fields): its seeds' count and the level of
        the look it took (``levels``) made again from its plan and alpha (an entry without one
        was decided at FIRST_ALPHA)."""
        n = len(entry.get("values", ()))
        plan = tuple(entry.get("plan") or ()) or (n,)  # no plan: one look, at its seeds
        alpha = entry.get("alpha", FIRST_ALPHA)
        confidence = levels(plan, alpha)[plan.index(n)] if n in plan else math.nan
        return cls(**{**{k: entry[k] for k in RECORDED if k in entry}, "alpha": alpha}, n=n,
                   confidence=confidence)

    @property
    def entry(self) -> dict:
        """What a claim's record keeps of it (``parts`` only for an all-of rule)."""
        return {name: getattr(self, name) for name in RECORDED if name != "parts" or self.parts}

    @property
    def environment(self) -> str:
        """Where the values were computed: ``cpu (AVX2, AMD), 1 thread(s), torch 2.13.0+cpu``."""
        return described({"device": self.device, "threads": self.threads, "torch": self.torch,
                          "autocast": self.autocast})

    @property
    def seed_plan(self) -> str:
        """``seeds 0+, looks 3`` (``looks 5,8,13,21`` for a plan that adds seeds while open)."""
        return seed_plan(self.seeds[0] if self.seeds else 0, self.plan)

    @property
    def key(self) -> str:
        """Its entry's key in the claim's record: ``tier | environment | seed plan``."""
        return key(self.tier, self.environment, self.seed_plan)

    @property
    def full_rule(self) -> str:
        """The rule with its statistic and the per-side alpha of its intervals, as a record
        registers and amends it (``acc > 0 (1.75% a side)``; no alpha where it is FIRST_ALPHA,
        as entries recorded before the skew correction read)."""
        level = "" if self.alpha == FIRST_ALPHA else f" ({100 * self.alpha:g}% a side)"
        return f"{self.statistic} {self.rule}{level}"

    def line(self) -> str:
        """``supported 0.82 [0.8, 0.84] seeds 0-2 (2026-11-23, a59fd79)``."""
        return f"{self.verdict} {interval(self.mean, self.low, self.high)} seeds " \
               f"{seed_span(self.seeds)} ({self.measured.split()[0]}, {self.commit[:7]})"



def key(tier: str, environment: str, plan: str) -> str:
    """An entry's key in its record: tier, numeric environment (``described``), seed plan
    (``seed_plan``)."""
    return f"{tier} | {environment} | {plan}"


def seed_plan(first_seed: int, looks: Sequence[int]) -> str:
    """``seeds 0+, looks 3``: the first seed and the seed counts of the looks."""
    return f"seeds {first_seed}+, looks {','.join(map(str, looks))}"


# ----------------------------------------------------------------------------- where it was measured


def measured(configs: Sequence[RunConfig]) -> dict:
    """Where and when a decision on the runs of ``configs`` is measured now, as an Entry's fields:
    date, commit, versions, the runs' numeric environment (this process's where no run was
    fetched), the data's checksums, the training code's digest and the runs' settings."""
    from normsys.orchestration.cache import code_digest  # torch: only when a claim decides
    from normsys.training.provenance import git_commit, numeric_environment
    from normsys.training.train import run_environment

    settings, fingerprint = run_settings(configs)
    env = run_environment(configs[0]) if configs else numeric_environment()
    return {"measured": time.strftime("%Y-%m-%d %H:%M"), "commit": git_commit(),
            "normsys": __version__, "torch": env["torch"], "device": env["device"],
            "threads": env["threads"], "autocast": env["autocast"], "data": data_digest(),
            "code": code_digest(), "settings": settings, "settings_fingerprint": fingerprint}


def data_digest() -> str:
    """sha256 of the data folder's checksum list: which data files the runs read."""
    from normsys.training.data import data_root

    sums = data_root() / "SHA256SUMS"
    return file_sha256(sums)[:16] if sums.is_file() else ""


def run_settings(configs: Iterable[RunConfig]) -> tuple[dict[str, str], str]:
    """What a claim's runs were trained under: each config field with its value across the runs
    (the distinct values, sorted, joined by " | "), the seed left out, and the fingerprint of
    the set of seed-less configs (which also tells apart runs that pair the same values
    otherwise)."""
    seedless = {c.override(**{"train.seed": 0}) for c in configs}
    values: dict[str, set[str]] = {}
    for c in seedless:
        for name, value in c.flat().items():
            if name != "train.seed":
                values.setdefault(name, set()).add(show(value))
    settings = {k: " | ".join(sorted(v)) for k, v in sorted(values.items())}
    prints = sorted(c.fingerprint() for c in seedless)
    return settings, hashlib.sha256(" ".join(prints).encode()).hexdigest()[:16]


def show(value) -> str:
    """A config value as ``--set`` takes it: tuples comma-separated."""
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    return str(value)


def jsonable(obj):
    """``obj`` as JSON gives it back (numbers that are not floats, e.g. numpy's, as floats)."""
    return json.loads(json.dumps(obj, default=float))


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


def experiment(e: Entry) -> str:
    """What an entry's values are values of: its statistic over runs of its settings (every config
    field but the seed). Two entries of one experiment differ only where their environments, or
    the code that made them, round otherwise; an entry of another is another measurement."""
    return json.dumps([e.statistic, e.settings], sort_keys=True)


def same_experiment(a: Entry, b: Entry) -> bool:
    """Whether two entries measure one ``experiment`` (an entry recorded before run settings
    were kept is taken to be of any settings)."""
    return a.statistic == b.statistic and (not a.settings or not b.settings or
                                           a.settings == b.settings)


def follows(entry: Entry) -> str:
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


def under_rule(rule: str, e: Entry) -> Verdict | None:
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
    entries: dict[str, Entry] = field(default_factory=dict)
    reference: dict[str, str] = field(default_factory=dict)
    registered: str = ""
    amendments: list[Amendment] = field(default_factory=list)

    @property
    def rule(self) -> str:
        """The rule in force: the last amendment's, else the registered one."""
        return self.amendments[-1].new if self.amendments else self.registered

    def of(self, tier: str) -> list[Entry]:
        return [e for _, e in sorted(self.entries.items()) if e.tier == tier]

    def in_force(self, tier: str, like: Entry | None = None) -> list[Entry]:
        """The entries of ``tier`` under the rule in force, of the experiment of ``like`` (None:
        of the tier's reference): what can stand for the claim now, on whatever seeds, by
        whatever training code."""
        like = like or self.entries.get(self.reference.get(tier, ""))
        return [e for e in self.of(tier) if e.full_rule == self.rule
                and (like is None or same_experiment(e, like))]

    def current(self, tier: str, first_seed: int, like: Entry | None = None) -> list[Entry]:
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
        if "format" not in body or "entries" not in body:
            raise LedgerError(f"{path} is no claim record (a record names its format, claim and "
                              f"entries); {again(path)}")
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
            entries[k] = Entry.of_entry(e)
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


def recorded(record: Record, fresh: Entry, amend: str = "") -> Record:
    """``record`` with ``fresh`` as its entry of that key; a claim's first entry registers its
    rule, a rule other than the one in force needs ``amend`` (the reason), which amends it. The
    tier's reference moves to ``fresh`` (on the claim's own seeds) where it has none under that
    rule and of its experiment, or the reference is this environment's. An entry that ``fresh``
    gives again value for value stays as it was measured, ``fresh``'s code added to its codes. One error
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
        # the same values again: the entry stays as it was measured (its date, commit and
        # versions), the code that gave them again stamped on it beside the codes before; by
        # the same code, nothing changes
        fresh = replace(own, code=" ".join(dict.fromkeys(fresh.code.split() + own.code.split())))
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


def changes(entry: Entry, fresh: Entry) -> list[str]:
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


def value_changes(entry: Entry, fresh: Entry) -> list[str]:
    """The per-seed values that differ between two measurements on the same seeds, largest
    change first: ``seed 2: 0.1234 -> 0.1236``."""
    pairs = [(s, a, b) for s, a, b in zip(entry.seeds, entry.values, fresh.values, strict=False)
             if not same_number(a, b)]
    pairs.sort(key=lambda p: -abs(p[2] - p[1]) if math.isfinite(p[2] - p[1]) else -math.inf)
    return [f"seed {s}: {a!r} -> {b!r}" for s, a, b in pairs]


def differing(own: Entry, fresh: Entry) -> list[str]:
    """How a fresh measurement differs from its environment's entry: run settings, seeds, rule
    or statistic (``changes``), any per-seed value, the verdict; [] where it is that entry's."""
    differ = changes(own, fresh)
    if moved := value_changes(own, fresh):
        differ.append(f"per-seed values differ at {len(moved)} seed(s), the largest {moved[0]}")
    if own.verdict != fresh.verdict:
        differ.append(f"verdict recorded {own.verdict}")
    return differ


def stale(folder: Path, defined: set[str]) -> list[str]:
    """The claims whose records ``folder`` holds but ``defined`` (every claim id) lacks."""
    return sorted({p.stem for p in Path(folder).glob("*.json")} - set(defined))


def label(e: Entry) -> str:
    """An entry's column in a few words: its device, first seed and, for a plan of several looks,
    the most seeds it may take: ``cpu (AVX2, AMD), seeds 0+``, ``cpu (AVX512, AMD), seeds 0+ up
    to 8`` (a claim's own seed count and its runs' autocast are the claim's, not the column's)."""
    most = f" up to {e.plan[-1]}" if len(e.plan) > 1 else ""
    return f"{e.device}, seeds {e.seeds[0] if e.seeds else 0}+{most}"
