"""The verdict table (terminal) and the JSON + Markdown claims report."""

from __future__ import annotations

import json
import math
import time
from dataclasses import asdict
from pathlib import Path

VERDICT_ORDER = ("supported", "refuted", "inconclusive", "error", "not run")


def _num(x: float) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.4g}"


def rows(results) -> list[list[str]]:
    return [[r.id, r.tier, r.verdict.upper() if r.verdict == "refuted" else r.verdict,
             r.statistic, _num(r.mean), f"[{_num(r.low)}, {_num(r.high)}]", r.rule,
             str(len(r.seeds)), f"{r.seconds:.0f}s"] for r in results]


HEADER = ["claim", "tier", "verdict", "statistic", "mean", "95% CI", "rule", "seeds", "time"]


def verdict_table(results) -> str:
    """Plain-text table: one row per claim and tier, with a count line."""
    body = rows(results)
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(HEADER)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True))  # noqa: E731
    counts = {v: sum(r.verdict == v for r in results) for v in VERDICT_ORDER}
    summary = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    return "\n".join([line(HEADER), line(["-" * w for w in widths]), *map(line, body), summary])


def write_reports(results, folder: Path) -> list[Path]:
    """claims.json (everything) and claims.md (table, per-claim evidence, figures) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    json_path = folder / "claims.json"
    json_path.write_text(json.dumps({"generated": stamp,
                                     "claims": [asdict(r) for r in results]}, indent=1,
                                    default=float))
    md = [f"# normsys claims report\n\nGenerated {stamp}.\n",
          "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    md += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows(results)]
    for r in results:
        md += [f"\n## {r.id} ({r.tier}): {r.verdict}\n", f"*{r.statement}*  \nSource: {r.source}\n"]
        if r.rule:
            md.append(f"Rule: `{r.statistic} {r.rule}` on the 95% t-interval of the mean over "
                      f"seeds {r.seeds}.  \nPer seed: {', '.join(_num(v) for v in r.values)}  \n"
                      f"{r.reason}\n")
        elif r.reason:
            md.append(f"```\n{r.reason}\n```\n")
        for key, value in r.evidence.items():
            md.append(f"- {key}: `{json.dumps(value, default=float)[:400]}`")
        md += [f"\n![{fig}]({fig})" for fig in r.figures]
    md_path = folder / "claims.md"
    md_path.write_text("\n".join(md) + "\n")
    return [json_path, md_path]
