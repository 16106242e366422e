"""More seeds only where a verdict is still open: the claims protocol read group-sequentially.

A claim decides on its tier's seeds (the first look). Asked for up to N seeds
(``pytest claims --claims-max-seeds N``), a claim still inconclusive there adds seeds at looks fixed
in advance (``SCHEDULE``: 3 -> 5 -> 8 -> 13 ..., then N) until it decides or reaches N. Every look
is another chance to decide wrongly, so the looks share the error rate by a fixed alpha-spending
function, O'Brien-Fleming's in the form of Lan & DeMets (1983): by the share t = n / N of the
final seeds, alpha(t) = 1 - Phi(z_{1-alpha} / sqrt(t)) per side has been spent, and look k may err
on each side with probability alpha(t_k) - alpha(t_{k-1}); its interval has confidence one minus
twice that. Early looks spend little (3 of 8 seeds: 0.07% a side), so a claim decides early only
on strong evidence, and the last look keeps most of the power. By the union bound, over all looks
the chance of a decisive verdict on the wrong side when the true mean sits exactly on the threshold
is at most alpha = 2.5% per side for per-seed values for which the t-interval is exact (normal);
tests/test_sequential.py measures it by Monte Carlo, for skewed values too (README, "Reading a
verdict"). With one look (N no more than the tier's seeds) the level is the
protocol's 95%, so a run without the option is unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from statistics import NormalDist

import numpy as np

from normsys.claims.stats import INCONCLUSIVE, REFUTED, SUPPORTED, Decision, Rule, Summary, t_quantile

SCHEDULE = (3, 5, 8, 13, 21, 34, 55)  # seeds at which an open claim looks again
ALPHA_PER_SIDE = 0.025


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


def levels(plan: Sequence[int], alpha: float = ALPHA_PER_SIDE) -> tuple[float, ...]:
    """The two-sided confidence of each look of ``plan`` under O'Brien-Fleming-type spending."""
    if len(plan) == 1:
        return (1 - 2 * alpha,)
    z = NormalDist().inv_cdf(1 - alpha)
    spent, out = 0.0, []
    for n in plan:
        total = 1 - NormalDist().cdf(z / math.sqrt(n / plan[-1]))  # spent by this look
        out.append(1 - 2 * (total - spent))
        spent = total
    return tuple(out)


def sequential(decide_at: Callable[[int, float], Decision], plan: Sequence[int],
               alpha: float = ALPHA_PER_SIDE) -> tuple[Decision, list[dict]]:
    """Decide at each look of ``plan`` (``decide_at(n_seeds, confidence)``) until a verdict is
    decisive or the looks run out; the last decision and a record of every look."""
    record = []
    for n, level in zip(plan, levels(plan, alpha), strict=True):
        decision = decide_at(n, level)
        s = decision.summary
        record.append({"seeds": n, "confidence": level, "verdict": decision.verdict,
                       "mean": s.mean, "low": s.low, "high": s.high})
        if decision.verdict != INCONCLUSIVE:
            break
    return decision, record


MOST_SEEDS = 1_000  # beyond this, an open verdict is said to need more seeds than anyone trains


def seeds_to_decide(summary: Summary, rule: Rule) -> int | None:
    """How many seeds an open verdict would take to decide if its mean and spread held: the
    fewest n at which the t-interval (at the summary's confidence) no longer reaches the rule's
    nearest threshold. None where nothing would decide it: no spread known, the mean on a
    threshold, or more than MOST_SEEDS. A planning figure, not a promise: the mean moves as
    seeds are added."""
    edges = rule.threshold if isinstance(rule.threshold, tuple) else (rule.threshold,)
    gap = min(abs(summary.mean - t) for t in edges)
    if not (math.isfinite(gap) and math.isfinite(summary.std)) or gap == 0 or summary.n < 2:
        return None

    def reaches(n: int) -> bool:  # the interval's half-width at n seeds reaches the threshold
        return t_quantile(n - 1, summary.confidence) * summary.std / math.sqrt(n) >= gap

    # the normal quantile is below every t quantile: no n below the normal answer clears
    z = NormalDist().inv_cdf(0.5 + summary.confidence / 2)
    low = max(2, math.ceil((z * summary.std / gap) ** 2))
    if low > MOST_SEEDS or reaches(MOST_SEEDS):
        return None
    high = MOST_SEEDS
    while low < high:  # the half-width shrinks as n grows: the first n that does not reach
        mid = (low + high) // 2
        low, high = (mid + 1, high) if reaches(mid) else (low, mid)
    return low


def open_note(summary: Summary, rule: Rule) -> str:
    """What an open verdict at its last look lacks, in words."""
    n = seeds_to_decide(summary, rule)
    need = "no number of seeds would decide it at this mean" if n is None else \
        f"~{n} seeds would decide it if its mean ({summary.mean:.4g}) and spread " \
        f"({summary.std:.4g}) held"
    return f"open at its last look, {summary.n} seeds: the {100 * summary.confidence:.4g}% " \
           f"interval [{summary.low:.4g}, {summary.high:.4g}] reaches the rule's {rule.text}; {need}"


def simulate(rule: Rule, draw: Callable[[np.random.Generator, int], np.ndarray],
             plan: Sequence[int], reps: int = 10_000, seed: int = 0) -> dict[str, float]:
    """Monte Carlo of the procedure: ``reps`` claims whose per-seed values come from
    ``draw(gen, n)``, each decided by ``sequential`` over ``plan``; the share of each final
    verdict and the mean number of seeds used."""
    gen = np.random.default_rng(seed)
    counts = {SUPPORTED: 0, REFUTED: 0, INCONCLUSIVE: 0}
    seeds_used = 0
    for _ in range(reps):
        values = draw(gen, plan[-1]).tolist()
        decision, record = sequential(
            lambda n, level, values=values: rule.decide(values[:n], level), plan)
        counts[decision.verdict] += 1
        seeds_used += record[-1]["seeds"]
    return {**{v: c / reps for v, c in counts.items()}, "mean_seeds": seeds_used / reps}
