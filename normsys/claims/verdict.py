"""From per-seed values to a verdict: the claims protocol's one decision path, and nothing else
(the record a verdict is written to is normsys.claims.ledger, its judgement against the record
normsys.claims.across; the pytest outcome a claim's test ends by, normsys.claims.plugin). It
imports neither pytest, nor the run cache, nor the training package.

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
records' per-seed values may be skewed, which the t-interval is not robust to at a few seeds, so the
intervals spend alpha = 1.75% per side (``INTERVAL_ALPHA``: one look's level is 96.5%), which keeps
the wrong-side rate at or below the protocol's 2.5% per side (``ALPHA_PER_SIDE``) up to a skewness
of 0.35 (``SKEW_TOLERATED``); tests/test_sequential.py measures both by Monte Carlo.

The t quantile is computed from the exact closed-form t CDF for integer degrees of freedom
(Abramowitz & Stegun 26.7.3-4), which keeps the dependencies to torch and numpy.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from statistics import NormalDist
from typing import Any

import numpy as np

SUPPORTED, REFUTED, INCONCLUSIVE = "supported", "refuted", "inconclusive"
ALPHA_PER_SIDE = 0.025  # the chance of a decisive verdict on the wrong side, per side
# The alpha a plan's intervals spend per side. The t-interval is exact for normal per-seed values,
# but skewed values (the verdict page's skew check reads the records' own, raw, one per seed) make
# a t-interval at 2.5% a side err on the side the skew points away from more often at 3-5 seeds;
# at 1.75% it stays at or below 2.5% at 3 and 5 seeds and over the paper plan 5, 8, 13, 21 up to
# a skewness of SKEW_TOLERATED (tests/test_sequential.py simulates each).
INTERVAL_ALPHA = 0.0175
LEVEL = 1 - 2 * INTERVAL_ALPHA  # one look's two-sided level: 96.5%
# The skewness of per-seed values up to which the intervals at INTERVAL_ALPHA keep the wrong side
# at 2.5%: one look at 3 or at 5 seeds and the paper plan 5, 8, 13, 21, simulated with
# standardized gamma values (tests/test_sequential.py); the verdict page's skew check says
# whether the records' values are credibly more skewed than this.
SKEW_TOLERATED = 0.35
# The interval alpha of entries recorded before the skew correction, which name none: the t
# interval at 95%. Their rule text carries no level; every later entry's does (ledger.Entry.full_rule).
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


@dataclass(frozen=True, kw_only=True)
class Verdict:
    """A rule's decision on per-seed values, what ``decide`` returns: the ``values`` the rule saw,
    their mean, sample std and Student-t interval at ``confidence`` (a look of a plan whose looks
    spend ``alpha`` a side); ``rule``: the rule as decided (``> 0.05``, ``within (-0.02, 0.02)``,
    ``all of 3 (Holm): > 0`` for several comparisons, this one the weakest); ``margin``: how far
    the interval lies inside the claimed region (< 0: outside); ``comparisons``: with parts, each
    part's verdict (as ``to_dict``), and ``parts`` their per-seed values. The record's entry
    (normsys.claims.ledger.Entry) adds the claim and where it was measured; the report's row
    (normsys.claims.report.Row) what its test said and how its record judged it."""

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

    def __post_init__(self) -> None:  # sequences as tuples, whether read from JSON or made here
        for name in self.TUPLES:
            object.__setattr__(self, name, tuple(getattr(self, name)))

    TUPLES = ("values",)  # its fields kept as tuples (a narrower type's add theirs)

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def interval(self) -> str:
        """``mean 0.82, 95% CI [0.8, 0.84], n=3``."""
        return f"mean {self.mean:.4g}, {100 * self.confidence:.4g}% CI [{self.low:.4g}, " \
               f"{self.high:.4g}], n={self.n}"


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
    return replace(out, reason=f"{out.interval}; claim: {claim}")


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


# ----------------------------------------------------------------------------- the A/A family


def family_confidence(family: int) -> float:
    """The two-sided level of each of ``family`` comparisons that together may err
    ALPHA_PER_SIDE a side (Bonferroni: ALPHA_PER_SIDE / family a side each)."""
    if family < 1:
        raise ValueError(f"a family holds at least one comparison, got {family}")
    return 1 - 2 * ALPHA_PER_SIDE / family


def apart(values: Sequence | Mapping[str, Sequence], alike: float | Mapping[str, float],
          family: int, combine: Callable[..., Any] | None = None) -> dict[str, Verdict]:
    """An A/A case's test, its comparisons among ``family`` decided together: per-seed values
    of arms alike but for their seeds, made one vector as ``decide`` makes it, held against
    ``alike``, the value alike arms give (0 for a difference, 1 for a ratio; one per part), in
    both directions, at ``family_confidence(family)``. Each comparison's verdict on ``> alike``:
    supported, its interval wholly above; refuted, wholly below; inconclusive, the interval
    holds ``alike``. The arms are apart where any comparison is decisive."""
    vector = per_seed(values, combine)
    parts = by_part(vector) or {"": vector}
    nulls = dict(alike) if isinstance(alike, Mapping) else {"": alike}
    if set(nulls) != set(parts):
        raise ValueError(f"the values' parts {sorted(parts)} are not the alike value's "
                         f"{sorted(nulls)}")
    level = family_confidence(family)
    return {name: _decide(Rule(name or "value", ">", nulls[name]), v, level)
            for name, v in parts.items()}


# ----------------------------------------------------------------------------- looks

# Seeds at which an open claim looks again, past its first look, up to its tier's most
# (normsys.training.tiers: the paper tier 5 -> 8 -> 13 -> 21); --claims-max-seeds sets another.
SCHEDULE = (3, 5, 8, 13, 21, 34, 55)


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


