"""The verdict table (terminal), the JSON + Markdown claims report, and the verdict page.

A session that ran some claims merges its rows into the report already in the folder (a row per
claim and tier; each row keeps the date and commit it was measured at), so running one claim
never erases the others. The report opens with where it was measured: normsys version, commit,
torch, device, seeds, data and its checksums.

The verdict page (docs/verdicts.md, ``docs``: ``python -m normsys tables``) is written from every
claim's record: the verdict counts, the figure of every interval against its threshold, each
claim's rule, verdicts and replication with its amendments told once, and the entries that
disagree (every column side by side: ``compare``, also ``python -m normsys compare``); the
protocol's diagnostics (multiplicity, skew, what CI on another CPU detects) on a page of their own
beside it (docs/diagnostics.md).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

import numpy as np

from normsys.claims.across import (
    ALPHA_ACROSS,
    CONTRADICTED,
    DETECT_POWER,
    FRAGILE,
    REPLICATED,
    Noise,
    Replication,
    judge,
    noise,
    replication,
    values_by_environment,
)
from normsys.claims.ledger import (
    Entry,
    LedgerError,
    Record,
    experiment,
    label,
    parse_rule,
    records,
    under_rule,
)
from normsys.claims.verdict import (
    ALPHA_PER_SIDE,
    FIRST_ALPHA,
    INCONCLUSIVE,
    INTERVAL_ALPHA,
    LEVEL,
    REFUTED,
    SKEW_TOLERATED,
    SUPPORTED,
    interval,
    num,
    seed_span,
)
from normsys.training.tiers import DEFAULT, TIERS


@dataclass(frozen=True, kw_only=True)
class Row(Entry):
    """A claim's row in the session's report (and a scorecard's cell): its entry (a report's
    ``verdict`` may also be ``error`` or ``not run``), the claim's ``id``, each look's line where
    it took several (``looks``) and, open at its last, by how much (``open_note``); what its
    test said (statement, source, seconds, evidence, figures, nodeid, the claim's role) and how
    its record judged it (``ledger``, ``ledger_note``, ``replication``, ``amendments``)."""

    id: str = ""
    looks: tuple[dict, ...] = ()
    open_note: str = ""  # open at its last look: by how much (``open_note``)
    statement: str = ""
    source: str = ""
    seconds: float = 0.0
    evidence: dict = field(default_factory=dict)
    figures: tuple[str, ...] = ()
    nodeid: str = ""
    role: str = ""  # what the claim's verdict at the CPU tier is worth (declaration.ROLES)
    ledger: str = ""  # same | across | moved | changed | new | unrecorded | updated
    ledger_note: str = ""  # the record's line for this claim, or what to do
    replication: str = ""  # Replication.word
    replication_note: str = ""  # its verdict in each entry of the tier in its record
    amendments: tuple[str, ...] = ()  # its rule's amendments, each a line

    TUPLES = ("values", "seeds", "plan", "looks", "figures", "amendments")


PROPERTY = "normsys_claim"  # the user property a claim's Row travels in (JSON only to cross
# from an xdist worker: normsys.claims.plugin)
VERDICT_ORDER = (SUPPORTED, REFUTED, INCONCLUSIVE, "error", "not run")
NONE_IN_FORCE = "unrecorded"  # a tier whose entries are all on other seeds than the claim's own
EARLIER = "earlier rule"  # a tier whose entries were all decided under an earlier rule
HEADER = ["claim", "tier", "role", "verdict", "statistic", "mean", "CI", "rule", "seeds", "time",
          "ledger", "replication"]  # CI: at the level of the look that decided (Verdict.confidence)


def write_check(folder: Path) -> str:
    """'' where ``folder`` can be made and written now, found by making it and writing in it
    (what the permissions say is not all: a read-only or special file system), and leaving
    nothing behind; else why not."""
    made = [p for p in (folder, *folder.absolute().parents) if not p.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-check-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        return err.strerror or str(err)
    finally:
        for p in made:  # the deepest first
            if p.is_dir():
                p.rmdir()
    return ""


def _num(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.4g}"


def role_at(role: str, tier: str) -> str:
    """A claim's role (declaration.ROLES) beside a verdict of ``tier``: what a CPU verdict is
    worth; a tier of the original experiments tests the claim itself ("")."""
    return role if tier == DEFAULT else ""


def rows(results) -> list[list[str]]:
    return [[r.id, r.tier, role_at(getattr(r, "role", ""), r.tier),
             r.verdict.upper() if r.verdict == REFUTED else r.verdict,
             r.statistic, _num(r.mean), f"[{_num(r.low)}, {_num(r.high)}]", r.rule,
             str(len(r.seeds)), f"{r.seconds:.0f}s", ledger_cell(r),
             getattr(r, "replication", "")] for r in results]


def ledger_cell(r) -> str:
    """How the measurement stands against the claim's record: same, across, moved, CHANGED, new,
    unrecorded, updated."""
    status = getattr(r, "ledger", "")
    return status.upper() if status == "changed" else status


def verdict_table(results) -> str:
    """Plain-text table: one row per claim and tier, with a count line."""
    body = rows(results)
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(HEADER)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))  # noqa: E731
    counts = {v: sum(r.verdict == v for r in results) for v in VERDICT_ORDER}
    summary = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    return "\n".join([line(HEADER), line(["-" * w for w in widths]), *map(line, body), summary,
                      *open_lines(results)])


def open_lines(results) -> list[str]:
    """The claims still open at their last look, each with what it lacks (its open_note)."""
    still = [r for r in results if getattr(r, "open_note", "")]
    if not still:
        return []
    return [f"{len(still)} open at their last look:"] + \
        [f"  {r.id} [{r.tier}]: {r.open_note}" for r in still]


def looks_line(r) -> str:
    """``looks at 5, 8, 13 seeds (levels 99.99%, 99.85%, 98.72%): inconclusive, inconclusive,
    supported``, or "" for a claim decided in one look."""
    looks = getattr(r, "looks", [])
    if not looks:
        return ""
    levels = ", ".join(f"{100 * k['confidence']:.4g}%" for k in looks)
    return (f"Looks at {', '.join(str(k['seeds']) for k in looks)} seeds (levels {levels}): "
            f"{', '.join(k['verdict'] for k in looks)}.  ")


def merged(results, folder: Path) -> list[Row]:
    """This session's results over the rows of the report in ``folder`` (by claim and tier)."""
    path = folder / "claims.json"
    earlier = {}
    if path.is_file():
        try:
            names = {f.name for f in fields(Row)}
            for row in json.loads(path.read_text()).get("claims", []):
                r = Row(**{k: v for k, v in row.items() if k in names})
                earlier[r.id, r.tier] = r
        except (ValueError, TypeError, AttributeError):
            earlier = {}  # an unreadable report is replaced, not merged
    earlier.update({(r.id, r.tier): r for r in results})
    return sorted(earlier.values(), key=lambda r: (r.tier, r.id))


def write_reports(results, folder: Path, provenance: dict) -> list[Path]:
    """claims.json (provenance, then every row) and claims.md (the same as a document)."""
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    json_path = folder / "claims.json"
    json_path.write_text(json.dumps({"provenance": provenance, "generated": stamp,
                                     "claims": [asdict(r) for r in results]}, indent=1,
                                    default=float))
    md = [f"# normsys claims report\n\nGenerated {stamp}. This session:\n"]
    md += [f"- {key}: {value}" if isinstance(value, str | int | float) else
           f"- {key}: `{json.dumps(value, default=str)}`" for key, value in provenance.items()]
    per_row = sorted({len(r.seeds) for r in results if r.seeds})
    md.append(f"- seeds of the rows below (each row lists its own; rows of earlier sessions are "
              f"kept): {', '.join(map(str, per_row)) or '-'}")
    md += ["", "| " + " | ".join([*HEADER, "measured"]) + " |", "|" + "---|" * (len(HEADER) + 1)]
    md += ["| " + " | ".join(c.replace("|", "\\|") for c in [*row, f"{r.measured} {r.commit[:8]}"])
           + " |" for row, r in zip(rows(results), results, strict=True)]
    if still := open_lines(results):
        md += ["", still[0], *(f"- {line.strip()}" for line in still[1:])]
    for r in results:
        md += [f"\n## {r.id} ({r.tier}): {r.verdict}\n", f"*{r.statement}*  \nSource: {r.source}  ",
               f"Measured {r.measured} at commit {r.commit or '?'}.\n"]
        if getattr(r, "ledger_note", ""):
            md.append(f"Record ({r.ledger}): {r.ledger_note}\n")
        if getattr(r, "replication_note", ""):
            md.append(f"Replication across its entries: {r.replication_note}\n")
        for line in getattr(r, "amendments", []):
            md.append(f"Rule {line}\n")
        if r.rule:
            level = f"{100 * r.confidence:.4g}%"
            md.append(f"Rule: `{r.statistic} {r.rule}` on the {level} t-interval of the mean over "
                      f"seeds {r.seeds}.  \n{looks_line(r)}"
                      f"Per seed: {', '.join(_num(v) for v in r.values)}  \n{r.reason}\n")
            if getattr(r, "open_note", ""):
                md.append(f"Still open: {r.open_note}.\n")
        elif r.reason:
            md.append(f"```\n{r.reason}\n```\n")
        if r.evidence:
            md += ["Evidence:", "```json", json.dumps(r.evidence, indent=1, default=float), "```"]
        md += [f"\n![{fig}]({fig})" for fig in r.figures]
    md_path = folder / "claims.md"
    md_path.write_text("\n".join(md) + "\n")
    return [json_path, md_path]


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
    """Header, rows (claim, then verdict, mean [CI] with the interval's level and seeds per
    column) and the agreement line of the columns ``wanted`` (labels; all of the tier's if none):
    claims in all of them agree when their verdicts are equal; a decisive flip is supported in
    one and refuted in another. The level is the look's that decided (Verdict.confidence): an
    entry recorded before the intervals' skew correction reads 95%, after it 96.5% at one look."""
    known = columns(recs, tier)
    cols = list(wanted) or known
    if unknown := [c for c in cols if c not in known]:
        raise LedgerError(f"no entries of the {tier} tier under {', '.join(unknown)}; the "
                          f"columns there: {'; '.join(known)}")
    header = ["claim"] + [x for c in cols for x in (f"{c}: verdict", "mean [CI] (level)", "seeds")]
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
                f"{interval(e.mean, e.low, e.high)} ({100 * e.confidence:.4g}%)",
                seed_span(e.seeds)]
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
    in the same experiment (each pair of environments once)."""
    by_env = values_by_environment(record.of(tier))
    keys = sorted(by_env)
    out = []
    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            if a[1] == b[1]:
                # in a fixed order: a seed's key of an all-of rule holds its part's name, and a
                # set of those iterates in the order of the process's string hashing
                out += [by_env[b][s] - by_env[a][s]
                        for s in sorted(by_env[a].keys() & by_env[b].keys(), key=repr)
                        if math.isfinite(by_env[b][s] - by_env[a][s])]
    return out


def configurations(recs: dict[str, Record], identities: frozenset[str] = frozenset()
                   ) -> dict[str, np.ndarray]:
    """Each configuration's raw per-seed values, one per seed: a configuration is one claim's
    experiment at one tier (its statistic and run settings; each part of an all-of rule apart),
    pooled over its entries, a seed's value taken once (another environment's value of the same
    seed is the same draw again, not another sample). The identities (``identities``) are no
    sample and are left out."""
    pooled: dict[str, dict[int, float]] = {}
    for cid, r in sorted(recs.items()):
        if cid in identities:
            continue
        for _, e in sorted(r.entries.items()):
            for part, values in sorted((e.parts or {"": e.values}).items()):
                seen = pooled.setdefault(f"{cid} | {e.tier} | {experiment(e)} | {part}", {})
                for seed, v in zip(e.seeds, values, strict=True):
                    if math.isfinite(v):
                        seen.setdefault(seed, float(v))
    return {k: np.array(list(v.values())) for k, v in pooled.items()}


def skewness(z: np.ndarray) -> np.ndarray:
    """The sample skewness along the last axis (0 where the values are all alike)."""
    centred = z - z.mean(axis=-1, keepdims=True)
    m2, m3 = np.mean(centred ** 2, axis=-1), np.mean(centred ** 3, axis=-1)
    return np.divide(m3, m2 ** 1.5, out=np.zeros_like(m3), where=m2 > 0)


def gamma_values(gen: np.random.Generator, skew: float, shape: tuple[int, ...]) -> np.ndarray:
    """Standardized gamma values of skewness ``skew`` (normal at 0): the shape the protocol's
    simulations give skewed per-seed values."""
    if skew == 0:
        return gen.standard_normal(shape)
    k = 4 / skew ** 2
    return (gen.gamma(k, 1.0, shape) - k) / math.sqrt(k)


SKEW_MIN_VALUES = 5  # a configuration's values below which its skewness is not read
SKEW_TO_CATCH = 0.75  # a skewness the check must fire on at least half the time to measure skew
SKEW_POWER_AT = (0.0, SKEW_TOLERATED, SKEW_TO_CATCH, 1.0)  # the check's power is told at these
SKEW_GRID = tuple(round(0.1 * i, 1) for i in range(16))  # 0 to 1.5: the estimate's candidates


@dataclass(frozen=True)
class SkewCheck:
    """What the records' raw per-seed values say of their skewness. ``observed``: the mean over
    the configurations of their squared sample skewness; ``critical``: the 95th percentile of
    that mean for values of skewness SKEW_TOLERATED (standardized gamma) at the configurations'
    own sizes, past which the check ``fires``; ``power``: how often it fires at each skewness of
    SKEW_POWER_AT; ``estimate``: the skewness of SKEW_GRID whose simulated mean lies nearest the
    observed one, ``upper``: the smallest at which the observed mean lies in the lowest 5% (a
    one-sided 95% bound). Each simulated ``reps`` times from ``seed``."""

    configurations: int
    values: int
    observed: float
    critical: float
    fires: bool
    power: dict[float, float]
    estimate: float
    upper: float

    @property
    def measures(self) -> bool:
        """Whether the check can tell the skewness that breaks the promise: it fires on
        SKEW_TO_CATCH at least half the time."""
        return self.power[SKEW_TO_CATCH] >= 0.5


def readable(samples: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The configurations whose skewness is read: at least SKEW_MIN_VALUES values that differ."""
    return [x for x in samples if len(x) >= SKEW_MIN_VALUES and np.ptp(x) > 0]


def skew_check(samples: Sequence[np.ndarray], reps: int = 1000, seed: int = 0) -> SkewCheck:
    """The skew check on configurations' raw values (``configurations``, those of at least
    SKEW_MIN_VALUES values that differ), their sizes kept in every simulation."""
    samples = readable(samples)
    if not samples:
        raise ValueError(f"no configuration holds {SKEW_MIN_VALUES} values of distinct seeds")
    sizes = [len(x) for x in samples]
    observed = float(np.mean([float(skewness(x)) ** 2 for x in samples]))

    counts = {n: sizes.count(n) for n in sorted(set(sizes))}

    def means(skew: float, at: int) -> np.ndarray:  # reps draws of the mean squared skewness
        gen = np.random.default_rng([seed, at])
        return sum(np.sum(skewness(gamma_values(gen, skew, (reps, k, n))) ** 2, axis=1)
                   for n, k in counts.items()) / len(sizes)

    critical = float(np.quantile(means(SKEW_TOLERATED, 0), 0.95))
    power = {s: float(np.mean(means(s, 1 + i) > critical)) for i, s in enumerate(SKEW_POWER_AT)}
    grid = {s: means(s, 100 + i) for i, s in enumerate(SKEW_GRID)}
    estimate = min(grid, key=lambda s: abs(float(grid[s].mean()) - observed))
    upper = next((s for s in SKEW_GRID if np.mean(grid[s] <= observed) <= 0.05), math.inf)
    return SkewCheck(len(samples), sum(sizes), observed, critical, observed > critical, power,
                     estimate, upper)


def binomial_range(n: int, p: float, mass: float = 0.95) -> tuple[int, int]:
    """The central ``mass`` range of a Binomial(n, p) count: the smallest k whose CDF reaches
    (1 - mass) / 2, and the smallest whose CDF reaches (1 + mass) / 2."""
    cdf, found = 0.0, []
    for k in range(n + 1):
        cdf += math.comb(n, k) * p ** k * (1 - p) ** (n - k)
        found += [k] * sum(cdf >= q - 1e-12 for q in ((1 - mass) / 2, (1 + mass) / 2)[len(found):])
        if len(found) == 2:
            break
    return found[0], found[-1] if len(found) == 2 else n


def multiplicity(recs: dict[str, Record], tier: str, identities: frozenset[str] = frozenset(),
                 questions: dict[str, str] | None = None) -> str:
    """What chance alone would decide among the tier's claims in force were every effect exactly
    on its threshold, where each reference entry errs on a side with at most ALPHA_PER_SIDE: how
    many wrong-side decisive verdicts the reference entries would give (expected, and its 95%
    range), and how many of the replicated ones (a replication on k independent seed sets must
    err k times on one side: 2 x ALPHA_PER_SIDE^k). Counted over distinct questions
    (``questions``: claim id -> the question it asks, a variant its base's), ``identities`` (role
    identity: rounding, not a sample, decides them) left out."""
    asked: dict[str, Replication] = {}
    for cid, r in sorted(recs.items(), key=lambda kv: len(kv[0])):  # a base before its variants
        if cid not in identities and (rep := replication(r, tier)) is not None:
            asked.setdefault((questions or {}).get(cid, cid), rep)
    if not asked:
        earlier = sum(bool(r.of(tier)) for cid, r in recs.items() if cid not in identities)
        return f"{tier}: no claim decided under the rule in force" + \
            (f" ({earlier} under an earlier rule alone)" if earlier else "")
    n, each = len(asked), 2 * ALPHA_PER_SIDE
    decisive = [d for d in asked.values() if d.verdict != INCONCLUSIVE]
    replicated = [d for d in decisive if d.word == REPLICATED]
    lo, hi = binomial_range(n, each)
    by_chance = math.fsum(2 * ALPHA_PER_SIDE ** d.seed_sets for d in replicated)
    left = f", the {len(identities)} identities left out" if identities else ""
    return f"{tier}: {n} questions decided under the rule in force (variants with their " \
           f"base{left}), {len(decisive)} decisive in every entry, {len(replicated)} of them " \
           f"replicated. Were every effect exactly on its threshold, the reference entries " \
           f"would still give about {n * each:.2g} wrong-side decisive verdicts ({n} x 2 x " \
           f"{100 * ALPHA_PER_SIDE:g}%; 95% of the time {lo} to {hi}), and the replicated ones " \
           f"about {by_chance:.2g} (each 2 x {100 * ALPHA_PER_SIDE:g}% to the power of its " \
           f"independent seed sets)"


def false_alarm_resampled(recs: dict[str, Record], tier: str, reps: int = 20_000,
                          seed: int = 0) -> float:
    """``false_alarm`` with each claim's per-seed differences resampled, sign at random, from the
    differences its records show (a claim whose records show none: normal, as there)."""
    def shifts(gen, r: Record, nz: Noise, n: int) -> np.ndarray | None:
        if (diffs := np.array(differences(r, tier))).size:
            return (gen.choice(diffs, (reps, n)) * gen.choice([-1.0, 1.0], (reps, n))).mean(1)
        return gen.normal(0, nz.sd * math.sqrt(2 / n), reps) if math.isfinite(nz.sd) else None

    return alarm_rate(recs, tier, shifts, reps, seed)


@dataclass(frozen=True)
class Detection:
    """What CI on another environment detects of one claim: its noise across environments
    (spread, df, whether measured across them), its bound at the reference's seeds, the shift of
    the mean it detects 95% of the time, and the reference's half-interval."""

    claim: str
    sd: float
    df: int
    measured: bool
    bound: float
    shift: float
    half: float

    @property
    def in_halves(self) -> float:
        """The detected shift in half-intervals of the reference (NaN for an interval of no
        width)."""
        return self.shift / self.half if self.half > 0 and math.isfinite(self.half) else math.nan

    @property
    def blind(self) -> bool:
        """Kernels move its values as much as a seed would: the detected shift is a half interval
        or more (an interval of no width: blind only where no shift is detected)."""
        if math.isnan(self.in_halves):
            return not math.isfinite(self.shift)
        return not self.in_halves < 1


def detections(recs: dict[str, Record], tier: str) -> list[Detection]:
    """Per claim of ``tier`` with a reference, what CI on another environment detects of it."""
    out = []
    for cid, r in sorted(recs.items()):
        ref = r.entries.get(r.reference.get(tier, ""))
        if ref is None:
            continue
        nz, n = noise(r, tier), len(ref.seeds)
        out.append(Detection(cid, nz.sd, nz.df, nz.measured, nz.bound(n), nz.detectable(n),
                             (ref.high - ref.low) / 2))
    return out


def detection_table(found: list[Detection]) -> tuple[list[str], list[list[str]]]:
    """The detections as a table: per claim its noise across environments, its bound at the
    reference's seeds and the smallest shift of the mean CI on another environment detects 95%
    of the time, also in the reference's half-intervals."""
    header = ["claim", "spread across environments (df)", "bound on the mean difference",
              "detected shift (95%)", "in half-intervals"]
    rows = [[d.claim, f"{num(d.sd)} ({d.df})" + ("" if d.measured else
                                                  ", seeds' own: one environment"),
             num(d.bound), num(d.shift), "-" if math.isnan(d.in_halves) else num(d.in_halves)]
            for d in found]
    return header, rows


def scaled(e: Entry) -> tuple[float, float, float]:
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


def recorded_tiers(recs: dict[str, Record]) -> list[str]:
    """The tiers (in the order normsys.training.tiers declares them) of which the records hold
    entries."""
    return [t for t in TIERS if any(r.of(t) for r in recs.values())]


def figure(recs: dict[str, Record], path: Path):
    """Every claim's interval against its threshold, per tier and column (scaled: ``scaled``),
    coloured by verdict; drawn to ``path`` (PNG) and returned (closed). The axis is
    symmetric-log: near the threshold linear, far from it logarithmic."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tiers = recorded_tiers(recs)
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
    return fig


DOCS_HEAD = """# Verdicts

Written by `python -m normsys tables` from the claim records in `claims/ledger/` (`.ci/run` fails
when this page is not what the command writes from them). Each record holds a claim's entries, one
per tier, numeric environment and seed plan; the CPU and paper tiers differ in model size, data
and seeds, so their agreement is a comparison of settings, not a reproduction check; two GPUs,
two CPU kernel sets or vendors, or two seed sets of one tier, are. The protocol's diagnostics
(multiplicity, skew, what CI on another CPU detects) are on a page of their own,
[diagnostics.md](diagnostics.md)."""

FIGURE = """![Every claim's interval against its threshold](verdicts.png)

Each bar is an entry's interval at the level of the look it decided at ({level:.4g}% for one look;
{first:.4g}% for entries recorded before the intervals' skew correction), its mark the mean,
on a scale where the rule's threshold is the vertical line and the claimed side lies right: the
distance from the threshold in units of the threshold's size (|threshold|, a band's half-width, or
1 for a threshold of 0), linear within one unit and logarithmic beyond. Green supported, red
refuted, grey inconclusive; one mark per column (numeric environment and seed plan)."""

DETECTION_HEAD = """## What CI on another CPU detects

A CPU-tier run on a numeric environment with no entry of its own (another CPU's kernels or vendor,
or this environment's entry of other run settings) is held to the
reference by the mean of its per-seed differences, within a bound from the claim's own spread
across the environments its entries record on the same seeds (a two-sided false-alarm rate of
{alpha:g} a claim; where one environment records the claim, the seeds' own spread stands in).
Below, per claim, the smallest shift of its mean that such a run detects {power:.0%} of the time,
simulated; in the last column in
half-widths of the reference's interval (at the level of the look it decided at: {level:.4g}% for
one look). The whole CPU tier's false-alarm rate on a new environment,
simulated from the records: {normal:.3%} with the differences normal and each claim's spread as
uncertain as its degrees of freedom leave it, {resampled:.3%} with the differences resampled from
those recorded."""


SKEW_HEAD = """## Many claims, skewed values

Each verdict is wrong on a side at most {alpha} of the time when the claim's effect sits
exactly on its threshold (the intervals spend {interval} a side, for per-seed values up to a
skewness of {tolerated:g}, under every plan of looks `docs/reading-verdicts.md` offers;
`tests/test_sequential.py`).
Over many claims some decisive verdicts are wrong by chance alone:

{lines}

{skew}"""


def skew_words(check: SkewCheck) -> str:
    """What the skew check found, in words: its sample, its reading, its power."""
    power = ", ".join(f"{percent(p)} at {s:g}" for s, p in check.power.items())
    sample = f"The records' raw per-seed values, one per seed, in {check.configurations} " \
             f"configurations of at least {SKEW_MIN_VALUES} (each claim's experiment at a tier; " \
             f"{check.values} values in all): their mean squared sample skewness is " \
             f"{check.observed:.3f}, what standardized gamma values of skewness " \
             f"{check.estimate:g} give on these sizes (at most {check.upper:g}, one-sided 95%)."
    if not check.measures:
        return f"{sample} The records cannot measure skew: a check of the mean beyond what " \
               f"skewness {SKEW_TOLERATED:g} gives 95 times in 100 fires {power} (simulated on " \
               f"these sizes)."
    found = "lies beyond it: the records' values are more skewed than the intervals are sized " \
            "for" if check.fires else "does not lie beyond it: the records cannot tell their " \
            f"skewness from {SKEW_TOLERATED:g}"
    return f"{sample} The check, that mean beyond {check.critical:.3f} (what skewness " \
           f"{SKEW_TOLERATED:g} gives 95 times in 100 on these sizes), fires {power} (simulated " \
           f"on these sizes); the records' mean {found}."


def skew_section(recs: dict[str, Record], tiers: Sequence[str],
                 roles: dict[str, str] | None = None,
                 runs_at: dict[str, tuple[str, ...]] | None = None) -> str:
    """The multiplicity line of each tier over the claims that run at it (``runs_at``: claim
    id -> its tiers; a claim's entries at another are history), and the skew check on every
    configuration's raw values."""
    identities = identities_in(recs, roles)
    at = lambda tier: {cid: r for cid, r in recs.items()  # noqa: E731
                       if tier in (runs_at or {}).get(cid, (tier,))}
    lines = "\n".join(f"- {multiplicity(at(tier), tier, identities, questions())}"
                      for tier in tiers)
    samples = readable(list(configurations(recs, identities).values()))
    skew = skew_words(skew_check(samples)) if samples else \
        f"The records cannot measure skew: no configuration holds {SKEW_MIN_VALUES} values of " \
        f"distinct seeds."
    return SKEW_HEAD.format(alpha=f"{100 * ALPHA_PER_SIDE:g}%", lines=lines,
                            interval=f"{100 * INTERVAL_ALPHA:g}%", tolerated=SKEW_TOLERATED,
                            skew=skew)


def questions() -> dict[str, str]:
    """Every claim id (each variant's too) -> the question it asks: a variant asks its base's."""
    from normsys import declarations  # every claim module: a page's work

    return declarations.questions()


def identities_in(recs: dict[str, Record], roles: dict[str, str] | None) -> frozenset[str]:
    """The claims of ``recs`` whose role (``roles``: claim id -> role) is identity."""
    return frozenset(cid for cid in recs if (roles or {}).get(cid) == "identity")


GLANCE_HEAD = """## Every claim

Each tier's cell is its reference entry's verdict, mean and interval (at the level of the look it
decided at; {level} for one look){where}. Beside it, how that verdict replicates across the
claim's entries of the tier in force (under the rule in force and the reference's run settings,
by whatever training code: the values decide, the code is provenance; where every entry was
decided under an *earlier rule*, what the rule in force decides of the reference's values at the
look they stopped at), with how many independent samples those are (seed sets that share no
seed; numeric environments that gave numbers of their own, not another's bit for bit):
**replicated** (one decisive verdict in every entry, on more than one independent seed set),
*reproduced* (one decisive verdict on one seed set, recomputed in more than one numeric
environment), *unreplicated* (one decisive verdict from one sample in one environment), *open*
(inconclusive in every entry), **fragile** (decisive in one, inconclusive in another),
**CONTRADICTED** (supported in one, refuted in another); where entries disagree, the cell names
those that differ. The last column names the claim's amendments, each told once below."""


def usual_reference(recs: dict[str, Record], tier: str) -> str:
    """Where most of the tier's reference entries were made (``where``), told once on the page
    and in a cell only where a reference was made elsewhere."""
    seen: dict[str, int] = {}
    for r in recs.values():
        if (ref := r.entries.get(r.reference.get(tier, ""))) is not None:
            seen[where(ref)] = seen.get(where(ref), 0) + 1
    return max(sorted(seen), key=seen.get, default="")


def where(e: Entry) -> str:
    """An entry's column and the training code that made it: ``cpu (AVX2, AMD), seeds 0+, code
    21848584``."""
    return f"{label(e)}, " + (f"code {e.code.split()[0][:8]}" if e.code else "code before digests")


def rule_cell(rule: str) -> str:
    """A rule as code in a Markdown table's cell, its bars escaped (``|log2(a / b)| < 1``)."""
    return "`" + rule.replace("|", "\\|") + "`"


def verdict_cell(e: Entry, usual: str = "") -> str:
    """An entry's verdict, mean and interval, with its level where it is not one look's and where
    it was made where that is not ``usual``: ``supported 0.859 [0.7648, 0.9533]``."""
    verdict = e.verdict.upper() if e.verdict == REFUTED else e.verdict
    level = "" if math.isclose(e.confidence, LEVEL) else f" ({percent(e.confidence)})"
    made = "" if where(e) == usual else f" ({where(e)})"
    return f"{verdict} {interval(e.mean, e.low, e.high)}{level}{made}"


def glance_section(recs: dict[str, Record], tiers: Sequence[str],
                   roles: dict[str, str] | None = None,
                   runs_at: dict[str, tuple[str, ...]] | None = None) -> str:
    """One row per claim: its rule in force, its role, each tier's reference verdict with mean and
    interval and its replication, and the amendments of its rule, each told once below the table
    (``amendment_notes``); the replication counts leave out the identities (``roles``: claim id ->
    role) and a claim at a tier it no longer runs at (``runs_at``: claim id -> its tiers), whose
    entries there are history."""
    roles, runs_at = roles or {}, runs_at or {}
    usual = {t: usual_reference(recs, t) for t in tiers}
    header = ["claim", "rule", "role"] + [x for t in tiers for x in (t, f"{t}: replication")] + \
        ["amended"]
    rows, counts = [], {t: {} for t in tiers}
    notes: dict[str, list] = {}  # an amendment's reason -> its amendments, with their claims
    identities = identities_in(recs, roles)
    for cid, r in sorted(recs.items()):
        row = [cid, rule_cell(r.rule), roles.get(cid, "")]
        for tier in tiers:
            if cid in runs_at and tier not in runs_at[cid]:
                row += ["-", f"not run at this tier ({len(r.of(tier))} older entries kept)"]
                continue
            rep, ref = replication(r, tier), r.entries.get(r.reference.get(tier, ""))
            counted = counts[tier] if cid not in identities else {}
            if ref is None:
                older = len(r.of(tier))
                if older:
                    counted[NONE_IN_FORCE] = counted.get(NONE_IN_FORCE, 0) + 1
                row += ["-", f"{NONE_IN_FORCE}: no entry on the claim's own seeds ({older} on "
                             f"others)" if older else ""]
                continue
            row.append(verdict_cell(ref, usual[tier]))
            if rep is None:  # the reference is in force where any entry is: an earlier rule
                counted[EARLIER] = counted.get(EARLIER, 0) + 1
                row.append(f"{EARLIER}: {now_cell(r, ref)}")
                continue
            counted[rep.word] = counted.get(rep.word, 0) + 1
            differ = [f"{v} in {k}" for k, v in rep.verdicts.items() if v != ref.verdict]
            word = f"**{rep.word}**" if rep.word in (FRAGILE, CONTRADICTED) else rep.word
            row.append(f"{word} ({rep.counts})" + (f": {', '.join(differ)}" if differ else ""))
        for a in r.amendments:
            notes.setdefault(a.reason, []).append((cid, a))
        row.append(", ".join(str(list(notes).index(a.reason) + 1) for a in r.amendments))
        rows.append(row)
    summary = "; ".join(f"{t}: " + ", ".join(f"{n} {w}" for w, n in sorted(counts[t].items()))
                        for t in tiers)
    if identities:
        summary += f" (the {len(identities)} identities left out: {', '.join(sorted(identities))})"
    said = [f"the {t} tier's references were made on {usual[t]}" for t in tiers if usual[t]]
    head = GLANCE_HEAD.format(level=percent(LEVEL),
                              where=f"; {'; '.join(said)}, unless the cell names another"
                              if said else "")
    return "\n\n".join([head, roles_line(), f"Replication: {summary}.",
                        as_markdown(header, rows),
                        *([amendment_notes(notes)] if notes else [])])


def amendment_notes(notes: dict[str, list]) -> str:
    """Each reason an amendment was given, told once and numbered as the table's last column
    names it: its dates, its claims, and how it changed their rules (a rule that gained the same
    words in each claim said once; any other change, each claim's earlier rule)."""
    lines = []
    for i, (reason, amended) in enumerate(notes.items(), 1):
        dates = ", ".join(sorted({a.date for _, a in amended}))
        changed = [(cid, a) for cid, a in amended if a.old != a.new]
        gained = {a.new[len(a.old):] if a.new.startswith(a.old) else None for _, a in changed}
        n = len({cid for cid, _ in amended})
        if not changed:
            how = "the rule kept, its reason corrected"
        elif len(gained) == 1 and None not in gained:
            how = f"{'each' if n > 1 else 'the'} rule gained `{gained.pop()}`"
        else:
            how = "; ".join(f"`{cid}` was `{a.old}`" for cid, a in changed)
        lines.append(f"{i}. {dates}, {n} claim{'s' * (n > 1)} ({how}): {reason}")
    return "### Amendments\n\n" + "\n".join(lines)


def disagreements_section(recs: dict[str, Record], tiers: Sequence[str]) -> str:
    """Each tier's entries in force (older ones are history) that disagree with its most used
    column (the references' usually): the agreement of each other column in a line, then one
    table of the claims whose verdicts differ, with their rule."""
    blocks = ["## Where entries disagree\n\nEach other column of a tier (numeric environment and "
              "seed plan) against its most used one, over the claims in both "
              "(`python -m normsys compare` sets every claim beside)."]
    for tier in tiers:
        current = {cid: replace(r, entries={e.key: e for e in r.in_force(tier)})
                   for cid, r in recs.items()}
        cols = columns(current, tier)
        if len(cols) < 2:
            blocks.append(f"The {tier} tier: {len(cols)} column{'s' * (len(cols) != 1)} of "
                          f"entries in force, nothing to set beside it.")
            continue
        lines, rows = [], []
        for other in cols[1:]:
            lines.append(f"- {other}: {compare(current, tier, [cols[0], other])[2]}")
            for cid, r in sorted(current.items()):
                by = {label(e): e for e in r.of(tier)}
                base, e = by.get(cols[0]), by.get(other)
                if base is not None and e is not None and base.verdict != e.verdict:
                    rows.append([cid, rule_cell(r.rule), verdict_cell(base, where(base)),
                                 other, verdict_cell(e, where(e))])
        header = ["claim", "rule", cols[0], "other column", "its verdict"]
        blocks += [f"The {tier} tier, against {cols[0]}:\n\n" + "\n".join(lines)] + \
            ([as_markdown(header, rows)] if rows else [])
    return "\n\n".join(blocks)


def now_cell(r: Record, ref: Entry) -> str:
    """What the rule in force makes of a reference decided under an earlier one: its values
    decided again at the look they stopped at (``under_rule``)."""
    now = under_rule(r.rule, ref)
    if now is None:
        return f"decided by `{ref.full_rule}`; the rule in force, `{r.rule}`, measures " \
               f"another statistic"
    n = len(ref.values)
    at = f"at {n} seeds ({percent(now.confidence)})"
    if now.verdict == ref.verdict:
        return f"the rule in force decides these values {now.verdict} too, {at}"
    later = [k for k in ref.plan if k > n]
    again = f", where its plan looks again at {later[0]}" if later and \
        now.verdict == INCONCLUSIVE else ""
    return f"**the rule in force decides these values {now.verdict}**, {at}{again}"


def percent(level: float) -> str:
    """A confidence level in as few digits as tell it from 100%: 96.5%, 99.94%, 99.998%."""
    return next((f"{x}%" for d in range(3, 9) if (x := f"{100 * level:.{d}g}") != "100"),
                f"{100 * level:g}%")


def roles_line() -> str:
    """What each role says of a claim's CPU verdict (declaration.ROLES), in a sentence each."""
    from normsys.claims.declaration import ROLES

    return "A claim's role says what its CPU verdict is worth: " + "; ".join(
        f"**{role}**, {words}" for role, words in ROLES.items()) + "."


def left_out(recs: dict[str, Record], tier: str) -> tuple[int, list[str]]:
    """Leave one environment out: each entry in force (``Record.in_force``) judged as a fresh run
    of its environment against its record without that environment's entries, as CI on a kind
    without entries would judge it; the folds, and the alarms (judgements that fail), each
    ``claim without environment: why``."""
    folds, alarms = 0, []
    for cid, r in sorted(recs.items()):
        entries = r.in_force(tier)
        for env in sorted({e.environment for e in entries}):
            kept = {k: e for k, e in r.entries.items() if e.environment != env}
            rest = Record(cid, kept, {}, r.registered, r.amendments)
            for e in (e for e in entries if e.environment == env):
                if not (current := rest.current(tier, e.seeds[0], e)):
                    continue  # no other environment on these seeds: nothing to judge against
                rest.reference[tier] = current[0].key
                folds += 1
                if (j := judge(rest, e)).fails:
                    alarms.append(f"`{cid}` without {env} ({e.verdict}, against "
                                  f"{current[0].verdict} on {current[0].environment}): "
                                  f"{j.across or j.message}")
    return folds, alarms


LEFT_OUT = """**Leave one environment out**, over the entries in force: each judged as a run of its
environment against its record without that environment's entries, as CI on a kind without
entries would judge it. {folds} folds, {n} alarm(s){alarms}"""


def left_out_line(recs: dict[str, Record], tier: str) -> str:
    folds, alarms = left_out(recs, tier)
    return LEFT_OUT.format(folds=folds, n=len(alarms),
                           alarms=(":\n\n" + "\n".join(f"- {a}" for a in alarms)) if alarms
                           else ".")


BLIND = """**Blind off their recorded kinds: {n} of {total} claims**, whose detected shift is a half
interval or more (rounding across kernels moves their values as much as another seed would, so a
shift the size of the reference's own uncertainty passes unseen more than {missed:.0%} of the
time): {ids}.
For these, the bit-for-bit comparison on a kind with entries of its own is the check; a kind
without them records them (`docs/reading-verdicts.md`, Recording a machine kind)."""


def blind_line(found: list[Detection], identities: frozenset[str] = frozenset()) -> str:
    """The claims blind off their recorded kinds (Detection.blind), named; ``identities`` left
    out (their values are rounding: a kind moves them as much as a seed would by design)."""
    found = [d for d in found if d.claim not in identities]
    ids = [d.claim for d in found if d.blind]
    return BLIND.format(n=len(ids), total=len(found), missed=1 - DETECT_POWER,
                        ids=", ".join(f"`{i}`" for i in ids) or "none")


def verdict_counts(recs: dict[str, Record], tiers: Sequence[str],
                   runs_at: dict[str, tuple[str, ...]] | None = None) -> str:
    """Each tier's verdicts, its claims' reference entries counted (the claims that run at it,
    ``runs_at``: claim id -> its tiers): how many of each verdict, how many of those were
    decided under an earlier rule, and how many claims have no reference entry."""
    lines = []
    for tier in tiers:
        here = [r for cid, r in sorted(recs.items()) if tier in (runs_at or {}).get(cid, (tier,))]
        refs = [(r, r.entries.get(r.reference.get(tier, ""))) for r in here]
        counted = {v: sum(e is not None and e.verdict == v for _, e in refs)
                   for v in (SUPPORTED, REFUTED, INCONCLUSIVE)}
        earlier = sum(e is not None and e.full_rule != r.rule for r, e in refs)
        missing = sum(e is None for _, e in refs)
        lines.append(f"- {tier}: {len(here)} claims, " +
                     ", ".join(f"{n} {v}" for v, n in counted.items()) +
                     (f" ({earlier} of them under an earlier rule)" if earlier else "") +
                     (f"; {missing} without an entry on the claim's own seeds" if missing else ""))
    return "**The verdicts**, each claim's reference entry at each tier it runs at:\n\n" + \
        "\n".join(lines)


DIAGNOSTICS_HEAD = """# The protocol's diagnostics

Written by `python -m normsys tables` from the claim records in `claims/ledger/`, beside the
verdicts ([verdicts.md](verdicts.md)): how often the verdicts over many claims are wrong by chance,
whether the records' values are more skewed than the intervals are sized for, and what CI on
another CPU detects."""


def docs(folder: Path, picture: Path | None = None) -> dict[str, str]:
    """The pages written from the records in ``folder``, by file name: ``verdicts.md`` (the
    figure, drawn to ``picture`` when given; the verdict counts; each claim's rule, verdicts,
    replication and role over its entries in force (``Record.in_force``), its amendments told
    once; the entries that disagree) and ``diagnostics.md`` (the protocol's: multiplicity and
    skew, then what CI on another CPU detects)."""
    from normsys import declarations  # every claim module: a page's work

    recs = records(folder)
    if picture is not None:
        figure(recs, picture)
    tiers = recorded_tiers(recs)
    roles, runs_at = declarations.roles(), declarations.tiers_run()
    verdicts = [DOCS_HEAD, verdict_counts(recs, tiers, runs_at),
                FIGURE.format(level=100 * LEVEL, first=100 * (1 - 2 * FIRST_ALPHA)),
                glance_section(recs, tiers, roles, runs_at),
                disagreements_section(recs, tiers)]
    diagnostics = [DIAGNOSTICS_HEAD, skew_section(recs, tiers, roles, runs_at)]
    for tier in (t for t in tiers if not TIERS[t].gpu):  # the designed reruns are CPU kinds'
        # what CI meets there: the claims that run at the tier (a variant's older entries aside)
        here = {cid: r for cid, r in recs.items() if tier in runs_at.get(cid, (tier,))}
        found = detections(here, tier)
        diagnostics += [DETECTION_HEAD.format(alpha=ALPHA_ACROSS, level=100 * LEVEL,
                                              power=DETECT_POWER, normal=false_alarm(here, tier),
                                              resampled=false_alarm_resampled(here, tier)),
                        as_markdown(*detection_table(found)),
                        blind_line(found, identities_in(here, roles)),
                        left_out_line(here, tier)]
    return {"verdicts.md": "\n\n".join(verdicts) + "\n",
            "diagnostics.md": "\n\n".join(diagnostics) + "\n"}
