"""A claim's record against a fresh measurement and across its own entries: how the
measurement is judged (``judge``), how much its values move between numeric environments
(``noise``), and how its entries replicate (``replication``). The record itself, read and written,
is normsys.claims.ledger.

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

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from normsys.claims.ledger import (
    ALL_OF,
    Entry,
    Record,
    changes,
    differing,
    experiment,
    family,
    label,
    parse_rule,
    same_experiment,
    same_number,
    setting_changes,
)
from normsys.claims.verdict import (
    INCONCLUSIVE,
    REFUTED,
    SUPPORTED,
    family_level,
    half_width,
    interval,
    num,
    t_quantile,
)

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


def values_by_environment(entries: Iterable[Entry]) -> dict[tuple[str, str], dict]:
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


def reach(entry: Entry) -> float:
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


def shift_of(ref: Entry, fresh: Entry) -> tuple[int, float]:
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


def judge(record: Record, fresh: Entry) -> Judgement:
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


def numeric_environments(entries: Sequence[Entry]) -> int:
    """How many of the entries' environments gave numbers of their own: an environment whose
    every entry has the per-seed values of an environment counted before, on the seeds both
    ran, bit for bit, is counted with it."""
    by_env: dict[str, list[Entry]] = {}
    for e in entries:
        by_env.setdefault(e.environment, []).append(e)
    counted: list[list[Entry]] = []

    def same(a: Entry, b: Entry) -> bool:
        n = min(len(a.values), len(b.values))
        return a.seeds[:1] == b.seeds[:1] and \
            all(same_number(x, y) for x, y in zip(a.values[:n], b.values[:n], strict=True))

    for own in by_env.values():
        if not any(all(any(same(e, o) for o in other) for e in own) for other in counted):
            counted.append(own)
    return len(counted)


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
