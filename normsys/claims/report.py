"""The verdict table (terminal) and the JSON + Markdown claims report.

A session that ran some claims merges its rows into the report already in the folder (a row per
claim and tier; each row keeps the date and commit it was measured at), so running one claim
never erases the others. The report opens with where it was measured: normsys version, commit,
torch, device, seeds, data and its checksums.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import asdict, fields
from pathlib import Path

from normsys.claims.verdict import INCONCLUSIVE, REFUTED, SUPPORTED, Verdict

VERDICT_ORDER = (SUPPORTED, REFUTED, INCONCLUSIVE, "error", "not run")
HEADER = ["claim", "tier", "verdict", "statistic", "mean", "CI", "rule", "seeds", "time",
          "ledger", "replication"]  # CI: 95%, or the level of the look that decided (looks)


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


def rows(results) -> list[list[str]]:
    return [[r.id, r.tier, r.verdict.upper() if r.verdict == REFUTED else r.verdict,
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


def merged(results, folder: Path) -> list[Verdict]:
    """This session's results over the rows of the report in ``folder`` (by claim and tier)."""
    path = folder / "claims.json"
    earlier = {}
    if path.is_file():
        try:
            names = {f.name for f in fields(Verdict)}
            for row in json.loads(path.read_text()).get("claims", []):
                r = Verdict(**{k: v for k, v in row.items() if k in names})
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
            level = f"{100 * r.looks[-1]['confidence']:.4g}%" if getattr(r, "looks", []) else "95%"
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
