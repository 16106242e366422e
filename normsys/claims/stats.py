"""Per-seed summaries and the three-way decision of the claims protocol.

A statistic is measured once per seed; the verdict uses the Student-t 95% confidence interval of the
mean: *supported* if the interval lies wholly on the claimed side of the threshold, *refuted* if
wholly on the other side, *inconclusive* otherwise. Comparisons between settings use paired per-seed
differences. Equivalence claims are supported when the interval lies inside a band around 0.

Edge cases: one seed gives an infinite interval (inconclusive); zero variance gives a zero-width
interval at the mean; any NaN (a diverged seed) makes the verdict inconclusive and is reported.
The t quantile is computed from the exact closed-form t CDF for integer degrees of freedom
(Abramowitz & Stegun 26.7.3-4), which keeps the dependencies to torch and numpy.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

SUPPORTED, REFUTED, INCONCLUSIVE = "supported", "refuted", "inconclusive"
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
def t_quantile(df: int, confidence: float = 0.95) -> float:
    """Two-sided critical value t* with P(|T| < t*) = confidence (bisection on the exact CDF)."""
    lo, hi = 0.0, 1.0
    while t_cdf_two_sided(hi, df) < confidence:
        hi *= 2
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if t_cdf_two_sided(mid, df) < confidence else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class Summary:
    """Per-seed values with mean, sample std, n, and the Student-t interval of the mean."""

    values: tuple[float, ...]
    mean: float
    std: float
    n: int
    low: float
    high: float
    n_nan: int = 0
    confidence: float = 0.95

    def to_dict(self) -> dict:
        return asdict(self)


def summarize(values: Sequence[float], confidence: float = 0.95) -> Summary:
    """Summary of per-seed values; NaN values are counted and the statistics are NaN."""
    vals = tuple(float(v) for v in values)
    if not vals:
        raise ValueError("summarize needs at least one value (one per seed)")
    n = len(vals)
    n_nan = sum(math.isnan(v) for v in vals)
    if n_nan:
        nan = float("nan")
        return Summary(vals, nan, nan, n, nan, nan, n_nan, confidence)
    # identical values (zero variance) must give exactly that value, not fsum/n's rounding of it
    mean = vals[0] if min(vals) == max(vals) else math.fsum(vals) / n
    if n == 1:
        return Summary(vals, mean, float("nan"), 1, -math.inf, math.inf, 0, confidence)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in vals) / (n - 1))
    half = t_quantile(n - 1, confidence) * std / math.sqrt(n)
    return Summary(vals, mean, std, n, mean - half, mean + half, 0, confidence)


@dataclass(frozen=True)
class Decision:
    """A verdict with the rule and the evidence behind it."""

    verdict: str
    summary: Summary
    rule: str  # e.g. "> 0.05", ">= 0.8", "within (-0.02, 0.02)"
    reason: str
    extra: dict = field(default_factory=dict)
    margin: float = math.nan  # how far the interval lies inside the claimed region (< 0: outside)

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "rule": self.rule, "reason": self.reason,
                "summary": self.summary.to_dict(), "extra": self.extra}


def _interval(s: Summary) -> str:
    return f"mean {s.mean:.4g}, {100 * s.confidence:.4g}% CI [{s.low:.4g}, {s.high:.4g}], n={s.n}"


def decide(values: Sequence[float], side: str, threshold: float,
           confidence: float = 0.95) -> Decision:
    """Three-way verdict for the claim ``statistic <side> threshold`` (side in >, >=, <, <=)."""
    if side not in SIDES:
        raise ValueError(f"unknown side {side!r}; valid sides: {', '.join(SIDES)}")
    s = summarize(values, confidence)
    rule = f"{side} {threshold:g}"
    if s.n_nan:
        return Decision(INCONCLUSIVE, s, rule, f"{s.n_nan} of {s.n} seeds gave NaN (diverged)")
    holds = {">": lambda v: v > threshold, ">=": lambda v: v >= threshold,
             "<": lambda v: v < threshold, "<=": lambda v: v <= threshold}[side]
    # supported: the whole interval satisfies the rule; refuted: none of it does.
    if holds(s.low) and holds(s.high):
        verdict = SUPPORTED
    elif not holds(s.low) and not holds(s.high):
        verdict = REFUTED
    else:
        verdict = INCONCLUSIVE
    margin = s.low - threshold if side in (">", ">=") else threshold - s.high
    return Decision(verdict, s, rule, f"{_interval(s)}; claim: {SIDES[side]} {threshold:g}",
                    margin=margin)


def paired_differences(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """Per-seed a - b; the two settings must have been run on the same seeds."""
    if len(a) != len(b):
        raise ValueError(f"paired comparison needs one value per seed on both sides, "
                         f"got {len(a)} and {len(b)}")
    return [float(x) - float(y) for x, y in zip(a, b, strict=True)]


def decide_paired(a: Sequence[float], b: Sequence[float], side: str, threshold: float,
                  confidence: float = 0.95) -> Decision:
    """Verdict for ``a - b <side> threshold`` on paired per-seed differences."""
    return decide(paired_differences(a, b), side, threshold, confidence)


def decide_equivalence(values: Sequence[float], low: float, high: float,
                       confidence: float = 0.95) -> Decision:
    """Supported if the interval lies inside (low, high), refuted if wholly outside it."""
    if not low < high:
        raise ValueError(f"equivalence band needs low < high, got ({low}, {high})")
    s = summarize(values, confidence)
    rule = f"within ({low:g}, {high:g})"
    if s.n_nan:
        return Decision(INCONCLUSIVE, s, rule, f"{s.n_nan} of {s.n} seeds gave NaN (diverged)")
    if low < s.low and s.high < high:
        verdict = SUPPORTED
    elif s.high <= low or s.low >= high:
        verdict = REFUTED
    else:
        verdict = INCONCLUSIVE
    return Decision(verdict, s, rule, f"{_interval(s)}; claim: {rule}",
                    margin=min(s.low - low, high - s.high))


def decide_all(decisions: dict[str, Decision]) -> Decision:
    """A claim made of several comparisons that must all hold: supported if every one is
    supported, refuted if any is refuted, inconclusive otherwise. The comparison shown is the one
    the verdict rests on: among those with the deciding verdict, the weakest, whose interval lies
    least far inside its claimed region (for a ``<`` rule the highest upper end, for ``>`` the
    lowest lower end)."""
    if not decisions:
        raise ValueError("decide_all needs at least one decision")
    verdicts = {d.verdict for d in decisions.values()}
    verdict = next(v for v in (REFUTED, INCONCLUSIVE, SUPPORTED) if v in verdicts)
    name, key = min(((n, d) for n, d in decisions.items() if d.verdict == verdict),
                    key=lambda item: item[1].margin)
    reason = "; ".join(f"{n}: {d.verdict} ({_interval(d.summary)})" for n, d in decisions.items())
    return Decision(verdict, key.summary, f"all of {len(decisions)}: {key.rule}",
                    f"deciding: {name}. {reason}",
                    {n: d.to_dict() for n, d in decisions.items()}, key.margin)


@dataclass(frozen=True)
class Rule:
    """A claim's decision rule, fixed before its result is seen: ``statistic side threshold`` on
    the t-interval of the per-seed mean, side one of >, >=, <, <= or ``within`` a band
    (threshold = (low, high)). One object serves the claim's statement, its check, its recorded
    refutation and its negative control."""

    statistic: str
    side: str
    threshold: float | tuple[float, float]

    def __post_init__(self) -> None:
        if self.side not in (*SIDES, "within"):
            raise ValueError(f"unknown side {self.side!r}; valid sides: {', '.join(SIDES)}, within")
        if (self.side == "within") != isinstance(self.threshold, tuple):
            raise ValueError("side 'within' takes a (low, high) band, the others one threshold")

    @property
    def text(self) -> str:
        """The rule without its statistic, e.g. ``>= 0.8`` or ``within (-0.02, 0.02)``."""
        if self.side == "within":
            return f"within ({self.threshold[0]:g}, {self.threshold[1]:g})"
        return f"{self.side} {self.threshold:g}"

    def __str__(self) -> str:
        return f"{self.statistic} {self.text}"

    @property
    def sides(self) -> tuple[str, str]:
        """The names its statistic gives the two sides of a paired difference (``val(BN) -
        val(LN)``: val(BN), val(LN)), under which a claim records them; ``a``, ``b`` otherwise."""
        first, _, second = self.statistic.partition(" - ")
        return (first, second) if second and first != second else ("a", "b")

    def decide(self, values: Sequence[float], confidence: float = 0.95) -> Decision:
        """The verdict on per-seed values of the statistic."""
        if self.side == "within":
            return decide_equivalence(values, *self.threshold, confidence)
        return decide(values, self.side, self.threshold, confidence)

    def decide_paired(self, a: Sequence[float], b: Sequence[float],
                      confidence: float = 0.95) -> Decision:
        """The verdict on per-seed differences a - b."""
        return self.decide(paired_differences(a, b), confidence)

    def decide_all(self, values: dict[str, Sequence[float]], confidence: float = 0.95) -> Decision:
        """The rule applied to each named comparison; all must hold (``decide_all``)."""
        return decide_all({name: self.decide(v, confidence) for name, v in values.items()})
