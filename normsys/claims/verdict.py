"""From per-seed values to a verdict, and the record it is judged against and written to: the
claims protocol's one decision path.

A claim's experiment reads one value per seed of each of its arms. ``decide`` makes them the
vector its rule sees, takes the Student-t interval of that vector's mean and returns one
``Verdict``:

- the vector: one arm's values as read; two arms' per-seed differences, first minus second (the
  two run on the same seeds); with ``combine``, ``combine(*the arms' values of the seed)``; values
  that are dicts (one value per part, e.g. per depth) give one comparison per part, all of which
  must hold (refuted if any is refuted);
- the verdict: *supported* if the interval lies wholly on the claimed side of the threshold,
  *refuted* if wholly on the other side, *inconclusive* otherwise; an equivalence rule (``within``
  a band) is supported when the interval lies inside the band;
- edge cases: one seed gives an infinite interval (inconclusive); zero variance a zero-width
  interval at the mean; any NaN (a diverged seed, a value undefined for its runs) makes the
  verdict inconclusive and says how many seeds gave one.

A claim still open at its first look may add seeds at looks fixed in advance (``looks``:
3 -> 5 -> 8 -> 13 ..., then the most asked for, ``pytest claims --claims-max-seeds N``), until it
decides or reaches N. Every look is another chance to decide wrongly, so the looks share the error
rate by a fixed alpha-spending function, O'Brien-Fleming's in the form of Lan & DeMets (1983): by
the share t = n / N of the final seeds, alpha(t) = 1 - Phi(z_{1-alpha} / sqrt(t)) per side has been
spent, and look k may err on each side with probability alpha(t_k) - alpha(t_{k-1}); its interval
has confidence one minus twice that (``levels``). Early looks spend little (3 of 8 seeds: 0.03% a
side), so a claim decides early only on strong evidence. By the union bound, over all looks the
chance of a decisive verdict on the wrong side when the true mean sits exactly on the threshold is
at most alpha per side for per-seed values for which the t-interval is exact (normal). The
records' per-seed values are skewed, which the t-interval is not robust to at a few seeds, so the
intervals spend alpha = 1.75% per side (``INTERVAL_ALPHA``: one look's level is 96.5%), which keeps
the wrong-side rate at or below the protocol's 2.5% per side (``ALPHA_PER_SIDE``) under the
skewness the records show; tests/test_sequential.py measures both by Monte Carlo.

The t quantile is computed from the exact closed-form t CDF for integer degrees of freedom
(Abramowitz & Stegun 26.7.3-4), which keeps the dependencies to torch and numpy.

**The record.** Every claim keeps what it was measured to be, one JSON file per claim:

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

- **this environment and seed plan recorded, under the rule in force**: its per-seed values are
  compared bit for bit, with its verdict, statistic, rule, seeds and run settings; any difference
  fails the claim, naming the largest change and the command that records it after review. The
  values decide, not the code that made the entry: a training edit that changes no number passes
  (``--claims-update`` then stamps the entry with the code in force), one that changes a number
  fails here until the change is reviewed and recorded.
- **no such entry** (another CPU): against the tier's reference on the same seeds, made by the
  training code in force, the mean of the per-seed differences within the claim's own bound
  (``Noise``: from its cross-environment differences on the same seeds, the kernel and vendor
  entries, at ALPHA_ACROSS a claim); a decisive flip fails.
- **no current entry on these seeds** (every entry made by other training code, or under another
  rule): unrecorded, as is a claim with no record; both fail under ``--claims-strict``. The
  machine that changed a number records it: nobody waits on a record only another machine kind
  can refresh.

``replication`` says how a claim's verdicts replicate across its entries, counting independent
seed sets and numeric environments (replicated, reproduced, unreplicated, open, fragile,
CONTRADICTED); the verdict page (docs/verdicts.md) is written from every record by
normsys.claims.report.

A claim's test talks to a ``Claim`` (the plugin's ``claim`` fixture, at the end of this module):
at each look of its plan it decides its declared rule on the values its experiment reads, builds
the one ``Verdict`` with where it was measured, has the claim's record judge it (``Ledgers``) and
ends the test by it: supported passes, refuted raises ``ClaimRefuted``, inconclusive is a skip.
The same ``Verdict`` is the record's entry, the report's row and the scorecard's cell.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from statistics import NormalDist
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from normsys import __version__
from normsys.training.data import data_root
from normsys.training.provenance import described, git_commit, numeric_environment
from normsys.training.store import atomic_write_text, file_sha256

if TYPE_CHECKING:
    from normsys.training.config import RunConfig

SUPPORTED, REFUTED, INCONCLUSIVE = "supported", "refuted", "inconclusive"
ALPHA_PER_SIDE = 0.025  # the chance of a decisive verdict on the wrong side, per side
# The alpha a plan's intervals spend per side. The t-interval is exact for normal per-seed values,
# but the records' values are skewed (median |skewness| 0.31 over the claims), and at 3-5 seeds a
# t-interval at 2.5% a side then errs on the side the skew points away from 2.7-3.1% of the time;
# at 1.75% it stays at or below 2.5% at 3 and 5 seeds and over the paper plan 5, 8, 13, 21
# (tests/test_sequential.py simulates each from the records' skewness).
INTERVAL_ALPHA = 0.0175
LEVEL = 1 - 2 * INTERVAL_ALPHA  # one look's two-sided level: 96.5%
# The skewness of per-seed values up to which the intervals at INTERVAL_ALPHA keep the wrong side
# at 2.5%: one look at 3 or at 5 seeds and the paper plan 5, 8, 13, 21, simulated with
# standardized gamma values (tests/test_sequential.py); the verdict page flags a claim whose own
# values are credibly more skewed than this.
SKEW_TOLERATED = 0.35
# The interval alpha of entries recorded before the skew correction, which name none: the t
# interval at 95%. Their rule text carries no level; every later entry's does (Verdict.full_rule).
FIRST_ALPHA = 0.025
SIDES = {">": "greater than", ">=": "at least", "<": "less than", "<=": "at most"}


def t_cdf_two_sided(t: float, df: int) -> float:
    """P(|T| < t) for Student's t with integer ``df`` >= 1 (A&S 26.7.3, 26.7.4)."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be >= 1, got {df}")
    theta = math.atan(abs(t) / math.sqrt(df))
    c2, s = math.cos(theta) ** 2, math.sin(theta)
    if df % 2 == 1:
        term, acc = math.cos(theta), 0.0
        if df > 1:
            acc = term
            for k in range(2, df - 1, 2):  # cos^(k+1) terms with coefficients 2.4..k / 3.5..(k+1)
                term *= c2 * k / (k + 1)
                acc += term
        return 2 / math.pi * (theta + s * acc)
    term, acc = 1.0, 1.0
    for k in range(1, df - 2, 2):  # cos^(k+1) terms with coefficients 1.3..k / 2.4..(k+1)
        term *= c2 * k / (k + 1)
        acc += term
    return s * acc


@functools.lru_cache(maxsize=1024)
def t_quantile(df: int, confidence: float = LEVEL) -> float:
    """Two-sided critical value t* with P(|T| < t*) = confidence (bisection on the exact CDF)."""
    lo, hi = 0.0, 1.0
    while t_cdf_two_sided(hi, df) < confidence:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf_two_sided(mid, df) < confidence else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class Rule:
    """A claim's decision rule, fixed before its result is seen: ``statistic side threshold`` on
    the t-interval of the per-seed mean, side one of >, >=, <, <= or ``within`` a band
    (threshold = (low, high)). One object serves the claim's statement, its verdict and its
    record."""

    statistic: str
    side: str
    threshold: float | tuple[float, float]

    def __post_init__(self) -> None:
        if self.side not in (*SIDES, "within"):
            raise ValueError(f"unknown side {self.side!r}; valid sides: {', '.join(SIDES)}, within")
        if (self.side == "within") != isinstance(self.threshold, tuple):
            raise ValueError("side 'within' takes a (low, high) band, the others one threshold")
        if self.side == "within" and not self.threshold[0] < self.threshold[1]:
            raise ValueError(f"equivalence band needs low < high, got {self.threshold}")

    @property
    def text(self) -> str:
        """The rule without its statistic, e.g. ``>= 0.8`` or ``within (-0.02, 0.02)``."""
        if self.side == "within":
            return f"within ({self.threshold[0]:g}, {self.threshold[1]:g})"
        return f"{self.side} {self.threshold:g}"

    def __str__(self) -> str:
        return f"{self.statistic} {self.text}"

    def holds(self, x: float) -> bool:
        """Whether the value ``x`` lies on the claimed side (inside the band)."""
        if self.side == "within":
            return self.threshold[0] < x < self.threshold[1]
        return {">": x > self.threshold, ">=": x >= self.threshold,
                "<": x < self.threshold, "<=": x <= self.threshold}[self.side]


# what a claim's record keeps of a verdict (Record); those OPTIONAL may be absent (entries recorded
# before they were kept)
RECORDED = ("tier", "verdict", "statistic", "rule", "seeds", "values", "mean", "low", "high", "plan",
            "alpha", "measured", "commit", "normsys", "torch", "device", "threads", "autocast",
            "data", "code", "settings", "settings_fingerprint", "parts")
OPTIONAL = ("alpha", "code", "settings", "settings_fingerprint", "parts")


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """A verdict with everything said of it, in one shape: what ``decide`` returns, a claim's
    report row, an entry of its record (``RECORDED``: ``entry``) and a scorecard's cell.

    The decision: the per-seed ``values`` the rule saw, their mean, sample std and Student-t
    interval at ``confidence``; ``rule``: the rule as decided (``> 0.05``, ``within (-0.02,
    0.02)``, ``all of 3 (Holm): > 0`` for several comparisons, this one the weakest); ``margin``: how far
    the interval lies inside the claimed region (< 0: outside); ``comparisons``: with parts, each
    part's verdict (as ``to_dict``). The claim it decides (``id``, ``tier``, ``seeds``, ``plan``:
    the seed counts of its looks, ``alpha``: the per-side error they spend, ``looks``: each
    look's line where there were several), where it was measured (date, commit, torch, device,
    threads, autocast, data, the training code's digest ``code`` and the runs' ``settings``) and,
    in a report, what its test said and how its record judged it (``ledger``, ``replication``,
    ``amendments``)."""

    verdict: str  # supported | refuted | inconclusive; a report's error | not run
    rule: str = ""
    values: tuple[float, ...] = ()
    mean: float = math.nan
    std: float = math.nan
    n: int = 0
    low: float = math.nan
    high: float = math.nan
    confidence: float = LEVEL
    alpha: float = INTERVAL_ALPHA  # the per-side alpha its plan's looks spend (``levels``)
    n_nan: int = 0
    reason: str = ""
    margin: float = math.nan
    comparisons: dict = field(default_factory=dict)
    # an all-of rule's per-seed values of every comparison, by name (``values`` are the deciding
    # one's): what a record needs to hold each part to itself across environments
    parts: dict = field(default_factory=dict)
    id: str = ""
    tier: str = ""
    statistic: str = ""
    seeds: tuple[int, ...] = ()
    plan: tuple[int, ...] = ()
    looks: tuple[dict, ...] = ()
    open_note: str = ""  # open at its last look: by how much (``open_note``)
    measured: str = ""  # date and time
    commit: str = ""
    normsys: str = ""
    torch: str = ""
    device: str = ""  # the GPU's name, or the CPU with its kernels and vendor
    threads: str = ""
    autocast: str = ""
    data: str = ""  # the data folder's checksum list, as sha256 of SHA256SUMS (or "" if none)
    # the digests of the training code whose runs computed these values (normsys.claims.cache.
    # code_digest), newest first, space-separated: code that gave the same values again stamps
    # its own on the entry (``recorded``); "" in entries recorded before it was kept
    code: str = ""
    # the runs the claim read: each config field's value ("a | b" where runs differ; the seeds
    # are `seeds`) and a fingerprint of the exact set of run configs
    settings: dict = field(default_factory=dict)
    settings_fingerprint: str = ""
    statement: str = ""
    source: str = ""
    seconds: float = 0.0
    evidence: dict = field(default_factory=dict)
    figures: tuple[str, ...] = ()
    nodeid: str = ""
    ledger: str = ""  # same | across | moved | changed | new | unrecorded | updated
    ledger_note: str = ""  # the record's line for this claim, or what to do
    replication: str = ""  # Replication.word
    replication_note: str = ""  # its verdict in each entry of the tier in its record
    amendments: tuple[str, ...] = ()  # its rule's amendments, each a line

    def __post_init__(self) -> None:  # sequences as tuples, whether read from JSON or made here
        for name in ("values", "seeds", "plan", "looks", "figures", "amendments"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def of_entry(cls, entry: dict) -> Verdict:
        """An entry of a claim's record (``RECORDED`` fields) as a Verdict: its seeds' count and
        the level of the look it took (``levels``) made again from its plan and alpha (an entry
        without one was decided at FIRST_ALPHA)."""
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
    def interval(self) -> str:
        """``mean 0.82, 95% CI [0.8, 0.84], n=3``."""
        return f"mean {self.mean:.4g}, {100 * self.confidence:.4g}% CI [{self.low:.4g}, " \
               f"{self.high:.4g}], n={self.n}"

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
    """An entry's key in its record: tier, numeric environment (provenance.described), seed plan
    (``seed_plan``)."""
    return f"{tier} | {environment} | {plan}"


def seed_plan(first_seed: int, looks: Sequence[int]) -> str:
    """``seeds 0+, looks 3``: the first seed and the seed counts of the looks."""
    return f"seeds {first_seed}+, looks {','.join(map(str, looks))}"


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



def per_seed(values: Sequence | Mapping[str, Sequence],
             combine: Callable[..., Any] | None = None) -> list:
    """What a rule decides on, per seed, from the arms' values (a sequence: one arm's)."""
    if not isinstance(values, Mapping):
        return list(values)
    sides = list(values.values())
    if not sides:
        raise ValueError("no arm's values to decide on: give name -> per-seed values")
    if combine is not None:
        return [combine(*seed) for seed in zip(*sides, strict=True)]
    if len(sides) > 2:
        raise ValueError(f"{len(sides)} arms ({', '.join(values)}) need combine(*values of a "
                         f"seed): a rule pairs two arms at most")
    if len(sides) == 2:
        a, b = sides
        if len(a) != len(b):
            raise ValueError(f"paired comparison needs one value per seed on both sides, "
                             f"got {len(a)} and {len(b)}")
        return [float(x) - float(y) for x, y in zip(a, b, strict=True)]
    return list(sides[0])


def by_seed(parts: Mapping[str, Sequence[float]]) -> list[dict[str, float]]:
    """Per-part values (``by_part``'s shape) as per-seed values by part again."""
    return [dict(zip(parts, seed, strict=True)) for seed in zip(*parts.values(), strict=True)]


def by_part(values: Sequence) -> dict[str, list[float]] | None:
    """Per-seed values that are dicts (one value per part, e.g. per depth) as per-part lists;
    NaN where a seed lacks a part (its run diverged); None for plain numbers."""
    parts = next((v for v in values if isinstance(v, dict)), None)
    if parts is None:
        return None
    return {part: [v[part] if isinstance(v, dict) else math.nan for v in values]
            for part in parts}


def decide(rule: Rule, values: Sequence | Mapping[str, Sequence], confidence: float = LEVEL,
           combine: Callable[..., Any] | None = None, family: int = 1) -> Verdict:
    """The rule's verdict on per-seed values: one arm's (a sequence), or the arms' by name,
    made one vector as the module says (``per_seed``). Per-seed values by part (dicts) are a
    family of comparisons that must all hold (``_all_of``); ``family``: the size of the family
    one comparison was decided in (an all-of record's deciding comparison, read again)."""
    vector = per_seed(values, combine)
    parts = by_part(vector)
    if parts is None:
        return _decide(rule, vector, confidence, family)
    return _all_of({name: _decide(rule, v, confidence, len(parts)) for name, v in parts.items()})


def _decide(rule: Rule, values: Sequence[float], confidence: float, family: int = 1) -> Verdict:
    """One comparison: supported when its interval at ``confidence`` lies wholly on the claimed
    side; refuted when the interval at the family's level lies wholly on the other (Holm's
    first step over ``family`` comparisons: each side's error split among them, so that an all-of
    rule, refuted by any one, is wrongly refuted at most as often as one comparison)."""
    vals = tuple(float(v) for v in values)
    if not vals:
        raise ValueError("a verdict needs at least one value (one per seed)")
    n, n_nan = len(vals), sum(math.isnan(v) for v in vals)
    known = {"rule": rule.text, "values": vals, "n": n, "confidence": confidence}
    if n_nan:
        nan = math.nan
        return Verdict(verdict=INCONCLUSIVE, mean=nan, std=nan, low=nan, high=nan, n_nan=n_nan,
                       reason=f"{n_nan} of {n} seeds gave NaN (diverged)", **known)
    # identical values (zero variance) must give exactly that value, not fsum/n's rounding of it
    mean = vals[0] if min(vals) == max(vals) else math.fsum(vals) / n
    if n == 1:
        std, low, high = math.nan, -math.inf, math.inf
    else:
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / (n - 1))
        half = half_width(std, n, confidence)
        low, high = mean - half, mean + half
    # the interval a refutation needs: at the family's level, wider where the family has more
    wide = family_level(confidence, family)
    rlow, rhigh = (low, high) if family == 1 or n == 1 else \
        (mean - (h := half_width(std, n, wide)), mean + h)
    if rule.side == "within":
        band_low, band_high = rule.threshold
        verdict = SUPPORTED if band_low < low and high < band_high else \
            REFUTED if rhigh <= band_low or rlow >= band_high else INCONCLUSIVE
        margin, claim = min(low - band_low, band_high - high), rule.text
    else:
        # supported: the whole interval satisfies the rule; refuted: none of it does.
        verdict = SUPPORTED if rule.holds(low) and rule.holds(high) else \
            REFUTED if not rule.holds(rlow) and not rule.holds(rhigh) else INCONCLUSIVE
        margin = low - rule.threshold if rule.side in (">", ">=") else rule.threshold - high
        claim = f"{SIDES[rule.side]} {rule.threshold:g}"
    if family > 1:
        claim += f"; refuted only at the {100 * wide:.4g}% level, its family's {family} " \
                 f"comparisons sharing the error (Holm): [{rlow:.4g}, {rhigh:.4g}]"
    out = Verdict(verdict=verdict, mean=mean, std=std, low=low, high=high, margin=margin, **known)
    return Verdict(**{**out.to_dict(), "reason": f"{out.interval}; claim: {claim}"})


def half_width(std: float, n: int, confidence: float) -> float:
    """Half the Student-t interval of the mean of n values of sample spread ``std``."""
    return t_quantile(n - 1, confidence) * std / math.sqrt(n)


def family_level(confidence: float, family: int) -> float:
    """The level one of ``family`` comparisons is refuted at (Holm's first step)."""
    return 1 - (1 - confidence) / family


def _all_of(verdicts: dict[str, Verdict]) -> Verdict:
    """Several comparisons that must all hold: supported if every one is supported, refuted if
    any is refuted at its family's level (``_decide``: the rule reads ``all of k (Holm)``),
    inconclusive otherwise. The comparison shown is the one the verdict rests on: among those
    with the deciding verdict, the weakest, whose interval lies least far inside its claimed
    region (for a ``<`` rule the highest upper end, for ``>`` the lowest lower end)."""
    seen = {v.verdict for v in verdicts.values()}
    verdict = next(v for v in (REFUTED, INCONCLUSIVE, SUPPORTED) if v in seen)
    name, key = min(((n, v) for n, v in verdicts.items() if v.verdict == verdict),
                    key=lambda item: item[1].margin)
    reason = "; ".join(f"{n}: {v.verdict} ({v.interval})" for n, v in verdicts.items())
    return Verdict(**{**key.to_dict(), "verdict": verdict,
                      "rule": f"all of {len(verdicts)} (Holm): {key.rule}",
                      "reason": f"deciding: {name}. {reason}",
                      "comparisons": {n: v.to_dict() for n, v in verdicts.items()},
                      "parts": {n: list(v.values) for n, v in verdicts.items()}})


# ----------------------------------------------------------------------------- looks

SEEDS = {"cpu": 3, "paper": 5}  # a claim's first look at each tier, unless it names its own
# The most seeds a claim still open at its first look adds at each tier, at the looks of SCHEDULE
# (the paper tier: 5 -> 8 -> 13 -> 21); --claims-max-seeds sets another. 0: the tier decides at
# its first look (the CPU tier: CI trains every claim once).
MAX_SEEDS = {"cpu": 0, "paper": 21}
SCHEDULE = (3, 5, 8, 13, 21, 34, 55)  # seeds at which an open claim looks again


def first_look(tier: str, own: int | None = None) -> int:
    """How many seeds a claim first decides on at ``tier``: its own count when it names one (the
    ``seeds=`` of its declaration), else the tier's (``SEEDS``)."""
    return own if own is not None else SEEDS[tier]


def plan(tier: str, own: int | None = None, first: int | None = None,
         most: int | None = None) -> tuple[int, ...]:
    """The looks of a claim at ``tier``: ``first`` seeds (--claims-seeds) or its first look,
    then, while open, up to ``most`` (--claims-max-seeds) or the tier's ``MAX_SEEDS``."""
    return looks(first or first_look(tier, own), most or MAX_SEEDS[tier])


def looks(first: int, most: int) -> tuple[int, ...]:
    """The seed counts at which a claim decides: its own seeds, the schedule's counts beyond them
    and below ``most``, then ``most``."""
    if most <= first:
        return (first,)
    return (first, *(n for n in SCHEDULE if first < n < most), most)


def expected(plan: Sequence[int], before: Iterable) -> int:
    """The seeds a claim deciding at the looks of ``plan`` can be expected to take, from its
    ledger entries in the same numeric environment on the same seeds (``before``: each with its
    verdict, its seeds and its plan of looks): at least its first look's; past n seeds where an
    entry left it open after n (its per-seed values are those again, so it is open there again);
    the look an entry of the same plan decided at. Never past the last look."""
    n = plan[0]
    for entry in before:
        took = len(entry.seeds)
        if entry.verdict == INCONCLUSIVE:
            n = max(n, next((k for k in plan if k > took), plan[-1]))
        elif tuple(entry.plan) == tuple(plan) and took in plan:
            n = max(n, took)
    return n


def levels(plan: Sequence[int], alpha: float = INTERVAL_ALPHA) -> tuple[float, ...]:
    """The two-sided confidence of each look of ``plan`` under O'Brien-Fleming-type spending."""
    if len(plan) == 1:
        return (1 - 2 * alpha,)  # LEVEL at the intervals' alpha
    z = NormalDist().inv_cdf(1 - alpha)
    spent, out = 0.0, []
    for n in plan:
        total = 1 - NormalDist().cdf(z / math.sqrt(n / plan[-1]))  # spent by this look
        out.append(1 - 2 * (total - spent))
        spent = total
    return tuple(out)


def sequential(decide_at: Callable[[int, float], Verdict], plan: Sequence[int],
               alpha: float = INTERVAL_ALPHA) -> tuple[Verdict, list[dict]]:
    """Decide at each look of ``plan`` (``decide_at(n_seeds, confidence)``) until a verdict is
    decisive or the looks run out; the last decision and a record of every look."""
    record = []
    for n, level in zip(plan, levels(plan, alpha), strict=True):
        decision = decide_at(n, level)
        record.append(look(decision))
        if decision.verdict != INCONCLUSIVE:
            break
    return decision, record


def look(verdict: Verdict) -> dict:
    """A look's line in a claim's report: its seeds, level, verdict and interval."""
    return {"seeds": verdict.n, "confidence": verdict.confidence, "verdict": verdict.verdict,
            "mean": verdict.mean, "low": verdict.low, "high": verdict.high}


MOST_SEEDS = 1_000  # beyond this, an open verdict is said to need more seeds than anyone trains


POWER = 0.8  # the chance at which an open verdict's planning figure expects a decision


def seeds_to_decide(summary: Verdict, rule: Rule, power: float = POWER) -> int | None:
    """How many seeds an open verdict would take to be decided ``power`` of the time (80%) if
    its mean and spread were the truth: the fewest n at which the t-interval (at the summary's
    confidence) misses the rule's nearest threshold by the normal quantile of ``power`` in
    standard errors (the usual power approximation: at n, a draw whose mean falls that far
    short of the truth still clears the threshold). None where nothing would decide it: no
    spread known, the mean on a threshold, or more than MOST_SEEDS. A planning figure, not a
    promise: the mean and spread move as seeds are added."""
    edges = rule.threshold if isinstance(rule.threshold, tuple) else (rule.threshold,)
    gap = min(abs(summary.mean - t) for t in edges)
    if not (math.isfinite(gap) and math.isfinite(summary.std)) or gap == 0 or summary.n < 2:
        return None
    z_power = NormalDist().inv_cdf(power)

    def reaches(n: int) -> bool:  # at n seeds, a draw short of the truth by z_power SEs reaches
        return (t_quantile(n - 1, summary.confidence) + z_power) * summary.std / math.sqrt(n) \
            >= gap

    # the normal quantile is below every t quantile: no n below the normal answer clears
    z = NormalDist().inv_cdf(0.5 + summary.confidence / 2)
    low = max(2, math.ceil(((z + z_power) * summary.std / gap) ** 2))
    if low > MOST_SEEDS or reaches(MOST_SEEDS):
        return None
    high = MOST_SEEDS
    while low < high:  # the reach shrinks as n grows: the first n that does not reach
        mid = (low + high) // 2
        low, high = (mid + 1, high) if reaches(mid) else (low, mid)
    return low


def open_note(summary: Verdict, rule: Rule) -> str:
    """What an open verdict at its last look lacks, in words."""
    n = seeds_to_decide(summary, rule)
    need = "no number of seeds would decide it at this mean" if n is None else \
        f"~{n} seeds would decide it {100 * POWER:.0f}% of the time if its mean " \
        f"({summary.mean:.4g}) and spread ({summary.std:.4g}) held"
    return f"open at its last look, {summary.n} seeds: the {100 * summary.confidence:.4g}% " \
           f"interval [{summary.low:.4g}, {summary.high:.4g}] reaches the rule's {rule.text}; {need}"


def simulate(rule: Rule, draw: Callable[[np.random.Generator, int], np.ndarray],
             plan: Sequence[int], reps: int = 10_000, seed: int = 0,
             alpha: float = INTERVAL_ALPHA) -> dict[str, float]:
    """Monte Carlo of the procedure: ``reps`` claims whose per-seed values come from
    ``draw(gen, n)``, each decided by ``sequential`` over ``plan`` at ``alpha``; the share of
    each final verdict and the mean number of seeds used. A draw of shape (n, k) is k
    comparisons per seed that must all hold (an all-of rule)."""
    gen = np.random.default_rng(seed)
    counts = {SUPPORTED: 0, REFUTED: 0, INCONCLUSIVE: 0}
    seeds_used = 0
    for _ in range(reps):
        drawn = np.asarray(draw(gen, plan[-1]))
        values = drawn.tolist() if drawn.ndim == 1 else [dict(enumerate(row)) for row in drawn]
        decision, record = sequential(
            lambda n, level, values=values: decide(rule, values[:n], level), plan, alpha)
        counts[decision.verdict] += 1
        seeds_used += record[-1]["seeds"]
    return {**{v: c / reps for v, c in counts.items()}, "mean_seeds": seeds_used / reps}


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
        """Whether the entry's values are the training code ``code``'s: one of its digests, or, for
        an entry recorded before digests were kept, while no entry of its tier carries one (once
        one does, the code has been recorded as it is and the older entries are stale)."""
        return code in e.code.split() or (not e.code and not any(x.code for x in self.of(e.tier)))

    def in_force(self, tier: str, code: str) -> list[Verdict]:
        """The entries of ``tier`` made by the training code ``code`` (``made_by``) under the
        rule in force: what can stand for the claim now, on whatever seeds."""
        return [e for e in self.of(tier) if self.made_by(e, code) and e.full_rule == self.rule]

    def current(self, tier: str, code: str, first_seed: int) -> list[Verdict]:
        """The entries in force (``in_force``) on the seeds from ``first_seed``, the tier's
        reference first."""
        out = [e for e in self.in_force(tier, code) if e.seeds[:1] == (first_seed,)]
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
    claims' own seeds. An entry that ``fresh`` gives again value for value keeps the codes that
    made it, ``fresh``'s added. One error budget per seed set: a plan of looks other than the one the
    tier's seeds were already decided on, in this numeric environment or, under the rule it is
    decided by, in any other, is refused (their values were seen; another plan over them would
    spend a second budget)."""
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


# An all-of entry recorded before entries kept their parts holds its deciding comparison's values
# alone: it is taken to be the part whose values it matches within this fraction, seed for seed
# (kernels round those a few parts in 1e7 apart; two comparisons lie far further apart), of an
# entry of the same training code that keeps its parts, or of another such entry; and else it
# pairs with none.
SAME_PART = 1e-4


def matches(a: Mapping[int, float], b: Mapping[int, float]) -> bool:
    """Whether two per-seed value sets agree within SAME_PART on the seeds both hold (one at
    least)."""
    shared = a.keys() & b.keys()
    return bool(shared) and all(abs(a[s] - b[s]) <= SAME_PART * max(1.0, abs(a[s]))
                                for s in shared)


def values_by_environment(entries: Iterable[Verdict]) -> dict[tuple[str, str], dict]:
    """Per (environment, training code) the values its entries hold, by seed, or for an all-of
    rule by (seed, part): each comparison paired only with itself across environments,
    whichever one decided (an entry without its parts: the part it matches, SAME_PART)."""
    out: dict[tuple[str, str], dict] = {}
    known: list[tuple[str, str, dict[int, float]]] = []  # (code, part, values by seed)
    entries = sorted(entries, key=lambda e: not e.parts)  # those that name their parts first
    for i, e in enumerate(entries):
        own = dict(zip(e.seeds, e.values, strict=True))
        if e.parts:
            by_part = {part: dict(zip(e.seeds, values, strict=True))
                       for part, values in e.parts.items()}
            known += [(c, part, v) for part, v in by_part.items() for c in e.code.split()]
            values = {(s, part): x for part, v in by_part.items() for s, x in v.items()}
        elif re.match(ALL_OF, e.rule):
            part = next((part for code, part, v in known
                         if code in e.code.split() and matches(own, v)),
                        f"deciding comparison {i}")
            known += [(c, part, own) for c in e.code.split()]
            values = {(s, part): x for s, x in own.items()}
        else:
            values = own
        for code in e.code.split() or [""]:  # values of several codes pair under each
            out.setdefault((e.environment, code), {}).update(values)
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
# by other code is compared value for value; the same values pass, and recording them stamps the
# entry with the code in force beside the codes that made it: it then counts for replication under
# this code (Record.in_force), and its values still pair with other environments' entries of the
# older code for the noise across environments
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
    if own is not None and own.full_rule == fresh.full_rule:
        differ = differing(own, fresh)
        head = f"record ({own.environment}): {own.line()}"
        if record.made_by(own, fresh.code):
            if differ:
                return Judgement("changed", "; ".join([head, now, *differ, update]))
            return Judgement("same", f"{head}; the same per-seed values")
        if not differ:  # the values decide, not the code that made them
            return Judgement("same", f"{head}; the same per-seed values from this training code "
                                     f"({fresh.code}), though made by other code "
                                     f"({own.code or 'before digests were kept'}): {RESTAMP}")
    candidates = record.current(fresh.tier, fresh.code, fresh.seeds[0])
    stale = "" if own is None else " (this environment's entry was made by other training code " \
        "and holds other values)" if own.full_rule == fresh.full_rule else \
        " (this environment's entry was decided under an earlier rule)"
    if not candidates:
        return Judgement("unrecorded", f"no entry of the {fresh.tier} tier on seeds "
                                       f"{fresh.seeds[0]}+ made by this training code under the "
                                       f"rule in force{stale}; {update}")
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
                                               f"({num(bound)})", update]))
    if {ref.verdict, fresh.verdict} == {SUPPORTED, REFUTED}:
        return Judgement("changed", "; ".join([head, now, "a decisive flip", update]))
    within = f"moved {num(shift)} on average, within its bound ({num(bound)})"
    if ref.verdict != INCONCLUSIVE and fresh.verdict == INCONCLUSIVE and bound > reach(ref):
        return Judgement("changed", "; ".join([
            head, now, f"{within}, but that bound is wider than the reference's distance to the "
            f"threshold ({num(reach(ref))}): a bug that moves its verdict would pass as rounding "
            f"here, so only an entry of this environment, after review, can hold it", update]))
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
        """The entry this session's measurement will be compared with: its own (``key_now``)
        under the rule in force, by whatever training code (values decide), else the reference
        it is judged against."""
        record = self.record(cid)
        own = record.entries.get(key_now)
        if own is not None and own.full_rule == record.rule:
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

    def replication(self, cid: str, tier: str, code: str) -> Replication | None:
        return replication(self.said(cid), tier, code)

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


def replication(record: Record, tier: str, code: str) -> Replication | None:
    """How the claim's entries of ``tier`` in force (made by the training code ``code`` under
    the rule in force: ``Record.in_force``) replicate; None where it has none. Entries of
    earlier code or rules stay in the record as what was measured then, and count for nothing
    here."""
    entries = record.in_force(tier, code)
    if not entries:
        return None
    ref = record.entries.get(record.reference.get(tier, ""))
    ordered = sorted(entries, key=lambda e: e is not ref)
    return Replication({label(e): e.verdict for e in ordered}, numeric_environments(ordered),
                       independent_seed_sets(e.seeds for e in entries))


# ----------------------------------------------------------------------------- the claim's test

PROPERTY = "normsys_claim"  # the user property a claim's result travels in


class ClaimRefuted(AssertionError):
    """The evidence lies wholly on the other side of the claim's threshold."""


class StillOpen(Exception):
    """Inconclusive at a look with more seeds to come (--claims-max-seeds)."""

    def __init__(self, decision: Verdict):
        super().__init__(decision.reason)
        self.decision = decision


def data_digest() -> str:
    """sha256 of the data folder's checksum list: which data files the runs read."""
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


class Claim:
    """What a claim test talks to (the plugin's ``claim`` fixture): its seeds, its evidence, its
    figures and its verdict. ``item``: the test's pytest item; ``marked``: its claim marker's
    keyword arguments with the claim's ``id``, ``tier``, ``variant`` and ``plan`` (the seed
    counts of its looks) as its session reads them; ``ledgers``: the session's claim records
    (Ledgers), which judge the verdict; ``fetched``: the run configs its
    test fetches, as it fetches them (the settings its entry records)."""

    def __init__(self, item, marked: Mapping[str, Any], ledgers, fetched: list):
        opt = item.config.option
        self.item, self.tier = item, marked["tier"]
        self.ledgers, self.fetched = ledgers, fetched
        self.id, self.variant = marked["id"], marked["variant"]
        self.statement = marked.get("statement", "")
        self.source = marked.get("source", "")
        self.declared = marked.get("declared")
        self.offset = opt.claims_seed_offset
        self.plan = marked["plan"]  # seeds at each look
        self.looks: list[dict] = []
        self.decision: Verdict | None = None
        self.at_look(self.plan[0], levels(self.plan)[0])
        self.report_dir = Path(opt.claims_report)
        self.evidence: dict = {}
        self.figures: list[str] = []
        self.start = time.perf_counter()

    def at_look(self, n: int, confidence: float) -> None:
        """Decide on the first ``n`` seeds at ``confidence`` (a look of --claims-max-seeds)."""
        self.seeds = list(range(self.offset, self.offset + n))
        self.confidence, self.final = confidence, n == self.plan[-1]

    def at_looks(self, body: Callable[[], Verdict | None]) -> None:
        """Run the claim's test ``body`` at each look of its plan until its verdict is decisive
        or the looks run out (``sequential``); the runs of earlier looks come from the
        cache. An open look ends the body with StillOpen (``_conclude``)."""
        def decide_at(n: int, confidence: float) -> Verdict:
            self.at_look(n, confidence)
            try:
                return body() or self.decision  # a supported claim returns
            except StillOpen as open_:
                return open_.decision

        sequential(decide_at, self.plan)

    def record(self, **evidence) -> None:
        """Attach evidence (numbers, per-seed lists, small dicts) to the report."""
        self.evidence.update(evidence)

    def figure(self, name: str, draw: Callable) -> None:
        """Draw a figure with ``draw(fig)`` and save it to the report's figures/ folder."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=(7, 4.2))
        try:
            draw(fig)
            path = self.report_dir / "figures" / f"{self.id}-{self.tier}-{name}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path, dpi=110, bbox_inches="tight")
            self.figures.append(str(path.relative_to(self.report_dir)))
        finally:
            plt.close(fig)

    def check(self, fetch) -> Verdict:
        """Decide the claim through its declared experiment, at its tier and variant, on the
        runs ``fetch`` gives (the claims' ``runs`` fixture), with the two sides of a paired rule,
        or each part's comparison, as evidence; end the test accordingly."""
        declared = self.declared
        if getattr(declared, "experiment", None) is None:
            raise pytest.UsageError(f"{self.item.nodeid}: claim {self.id} declares no experiment: "
                                    f"decide on the values its test computes, "
                                    f"claim.check_values(values)")
        exp = declared.experiment
        values = exp.values(fetch, self.seeds, self.tier, self.variant)
        decided = decide(declared.rule, values, self.confidence, exp.combine)  # arms in order
        if exp.combine is None and len(values) == 2:
            self.record(**{arm: list(v) for arm, v in values.items()})  # each side, by its arm
        elif decided.comparisons:
            self.record(comparisons=decided.comparisons)
        return self._conclude(decided, declared.rule)

    def check_values(self, values: Sequence[float], rule: Rule | None = None) -> Verdict:
        """Decide the claim on per-seed values its test computed (a claim that declares no
        experiment: one that does is decided through it, never on values read by other means);
        end the test accordingly. ``rule``: for a claim marked without a declaration."""
        declared = self.declared
        if getattr(declared, "experiment", None) is not None:
            pytest.fail(f"[{self.id}/{self.tier}] decided on values its test read, but the claim "
                        f"declares its experiment: decide through it, claim.check(runs)",
                        pytrace=False)
        if declared is None:
            if rule is None:
                raise pytest.UsageError(f"{self.item.nodeid}: claim {self.id} has no declared "
                                        f"rule: mark its test with its Declaration, or pass the "
                                        f"rule")
            return self._conclude(decide(rule, values, self.confidence), rule)
        if rule is not None and rule != declared.rule:
            pytest.fail(f"[{self.id}/{self.tier}] decided by the rule {rule}, but the claim "
                        f"declares {declared.rule}: decide by the declared rule", pytrace=False)
        return self._conclude(decide(declared.rule, values, self.confidence), declared.rule)

    def _conclude(self, decision: Verdict, rule: Rule) -> Verdict:
        from normsys.claims.cache import code_digest  # torch: when a claim decides
        from normsys.training.train import run_environment

        s, statistic = decision, rule.statistic
        note = ""
        if len(self.plan) > 1:
            self.looks.append(look(decision))
            if decision.verdict == INCONCLUSIVE and not self.final:
                raise StillOpen(decision)
            if decision.verdict == INCONCLUSIVE:
                note = open_note(s, rule)
        settings, fingerprint = run_settings(self.fetched)
        env = run_environment(self.fetched[0]) if self.fetched else numeric_environment()
        fresh = replace(
            decision, id=self.id, tier=self.tier, statistic=statistic, seeds=self.seeds[: s.n],
            plan=self.plan, looks=jsonable(self.looks), open_note=note,
            measured=time.strftime("%Y-%m-%d %H:%M"), commit=git_commit(), normsys=__version__,
            torch=env["torch"], device=env["device"], threads=env["threads"],
            autocast=env["autocast"], data=data_digest(), code=code_digest(), settings=settings,
            settings_fingerprint=fingerprint, statement=self.statement, source=self.source,
            seconds=time.perf_counter() - self.start, evidence=jsonable(self.evidence),
            figures=self.figures, nodeid=self.item.nodeid)
        judgement = self.ledgers.judge(self.id, fresh)
        replicated = self.ledgers.replication(self.id, self.tier, fresh.code)
        reported = replace(
            fresh, ledger=judgement.status, ledger_note=judgement.message,
            replication=replicated.word if replicated else "",
            replication_note=replicated.line() if replicated else "",
            amendments=[a.line() for a in self.ledgers.said(self.id).amendments])
        self.item.user_properties.append((PROPERTY, json.dumps(jsonable(asdict(reported)))))
        text = f"[{self.id}/{self.tier}] {statistic}: {decision.reason}"
        unrecorded = judgement.unrecorded
        if judgement.fails or (unrecorded and self.ledgers.strict):
            pytest.fail(f"[{self.id}/{self.tier}] {judgement.message}"
                        + (" (--claims-strict)" if unrecorded else ""), pytrace=False)
        if decision.verdict == REFUTED:
            if unrecorded or self.ledgers.update or judgement.moved:
                pytest.xfail(f"refuted ({judgement.status}): {text}")
            raise ClaimRefuted(f"{text}; {judgement.message}")
        if decision.verdict == INCONCLUSIVE:
            pytest.skip(f"inconclusive: {text}; {judgement.message}")
        self.decision = decision
        return decision


def jsonable(obj):
    """``obj`` as JSON gives it back (numbers that are not floats, e.g. numpy's, as floats)."""
    return json.loads(json.dumps(obj, default=float))
