"""Mutation testing's results: what mutmut's last state says of every mutant, kept in
``results.json``, and the page that shows them (``docs/mutation.md``) with the equivalent survivors by
reason (``equivalent.json``, a reviewed classification: mutant name -> reason).

    python tests/mutation/mutation_results.py record [--mutants mutants] --time "..." [--only GLOB ...]
                                 results.json from mutmut's state (its mutants/ folder); with
                                 --only, the modules it names (e.g. 'claims.test_*', as a run
                                 of mutmut run 'claims.test_*' checked) replace theirs in
                                 results.json and every other module still mutated stays as
                                 recorded
    python tests/mutation/mutation_results.py docs [--check]
                                 write (or check) docs/mutation.md from results.json and equivalent.json

The modules mutated and the tests run against them are in pyproject.toml (``[tool.mutmut]``).
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import math
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).parent
RESULTS, EQUIVALENT = HERE / "results.json", HERE / "equivalent.json"
PAGE = HERE.parents[1] / "docs" / "mutation.md"
# mutmut's exit codes of a mutant's test run (mutmut.__main__.status_by_exit_code)
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests",
          34: "skipped", 35: "suspicious", 36: "timeout", 24: "timeout", -24: "timeout",
          152: "timeout", 255: "timeout", -11: "segfault", -9: "segfault", None: "not checked"}
COLUMNS = ("killed", "timeout", "survived", "no tests", "not checked")


def status(code: int | None) -> str:
    return STATUS.get(code, f"exit {code}")


def record(mutants: Path, took: str) -> dict:
    """Every mutant's status from mutmut's state in ``mutants`` (its ``*.meta`` files), by module,
    with the survivors and untested ones named."""
    by_name: dict[str, str] = {}
    for meta in sorted(mutants.rglob("*.py.meta")):
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            by_name[name] = status(code)
    if not by_name:
        raise ValueError(f"{mutants}: no mutmut state (*.py.meta files); run mutmut first")
    modules: dict[str, Counter] = {}
    for name, state in by_name.items():
        module = name.rpartition(".")[0].removeprefix("normsys.")  # e.g. training.models
        modules.setdefault(module, Counter())[state] += 1
    try:
        tool = f"mutmut {metadata.version('mutmut')}"
    except metadata.PackageNotFoundError:
        tool = "mutmut"
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True, cwd=HERE).stdout.strip()
    return {"tool": tool, "date": time.strftime("%Y-%m-%d"),
            "commit": commit, "time": took,
            "modules": {m: dict(sorted(c.items())) for m, c in sorted(modules.items())},
            "survived": sorted(n for n, s in by_name.items() if s == "survived"),
            "no tests": sorted(n for n, s in by_name.items() if s == "no tests"),
            "not checked": sorted(n for n, s in by_name.items() if s == "not checked")}


def mutated_modules(root: Path = HERE.parents[1]) -> set[str]:
    """The modules ``[tool.mutmut]``'s ``only_mutate`` names, as the record names them
    (``claims.verdict``, ``claims.test_literature``)."""
    import tomllib

    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["mutmut"]
    paths = {p for pattern in config["only_mutate"] for p in root.glob(pattern)}
    return {".".join(p.relative_to(root).with_suffix("").parts).removeprefix("normsys.")
            for p in paths}


def merged(old: dict, new: dict, only: Sequence[str], mutated: set[str]) -> dict:
    """``old`` with the modules matching any of ``only`` (fnmatch) as ``new`` has them, and
    without the modules mutmut no longer mutates (``mutated``: a module moved or deleted); the
    header (tool, date, commit, time) is the new run's."""
    def module(name: str) -> str:
        return name.rpartition(".")[0].removeprefix("normsys.")

    def ours(m: str) -> bool:
        return any(fnmatch.fnmatch(m, glob) for glob in only)

    modules = {m: c for m, c in old["modules"].items() if not ours(m) and m in mutated}
    modules |= {m: c for m, c in new["modules"].items() if ours(m)}
    lists = {state: sorted([n for n in old[state] if not ours(module(n))
                            and module(n) in mutated]
                           + [n for n in new[state] if ours(module(n))])
             for state in ("survived", "no tests", "not checked")}
    return {**{k: new[k] for k in ("tool", "date", "commit", "time")},
            "modules": dict(sorted(modules.items())), **lists}


def score(counts: dict) -> float:
    """Killed (by a failing test or a timeout) over the mutants that ran."""
    ran = sum(counts.get(c, 0) for c in ("killed", "timeout", "survived", "no tests"))
    return (counts.get("killed", 0) + counts.get("timeout", 0)) / ran if ran else float("nan")


def percent(x: float) -> str:
    """A score as the page shows it: "-" where no mutant ran."""
    return "-" if math.isnan(x) else f"{x:.1%}"


def unclassified(results: dict, equivalent: dict) -> list[str]:
    return [n for n in results["survived"] if n not in equivalent["mutants"]]


DOCS_HEAD = """# Mutation testing: where it stands

mutmut (hours, so not part of CI) checks that the tests fail when the code is broken, over every
module that decides a number (`[tool.mutmut]` in `pyproject.toml`). One thread per process (a
forked child of a process that started torch's thread pool hangs), offline:

```bash
OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 NORMSYS_CACHE=off HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 \\
    mutmut run --max-children 2
python tests/mutation/mutation_results.py record --time "..."   # results.json from mutmut's state
python tests/mutation/mutation_results.py docs                  # this page
```

The tests run against each mutant leave out the claims and the negative controls that train
their claims' own experiments (marked `own_runs` by the claims plugin): minutes of training each,
for every mutant again. A claim file's experiments and readers are checked by the controls on
small nets and by the tests.

This page is written from `results.json` and `equivalent.json` (the survivors reviewed as
equivalent, with why); a test fails when it is not what they make. Score: mutants killed (by a
failing test or by a timeout: the mutant loops) over those that ran.
"""


def docs(results: dict | None = None, equivalent: dict | None = None) -> str:
    results = results or json.loads(RESULTS.read_text())
    equivalent = equivalent or json.loads(EQUIVALENT.read_text())
    total = Counter()
    rows = []
    for module, counts in results["modules"].items():
        total.update(counts)
        rows.append(f"| `{module}` | " + " | ".join(str(counts.get(c, 0)) for c in COLUMNS)
                    + f" | {percent(score(counts))} |")
    lines = [DOCS_HEAD, f"{results['tool']}, {results['date']}, commit {results['commit']}; "
             f"time: {results['time']}.", "",
             "| module | " + " | ".join(COLUMNS) + " | score |", "|---" * (len(COLUMNS) + 2) + "|",
             *rows, "| **all** | " + " | ".join(str(total.get(c, 0)) for c in COLUMNS)
             + f" | **{percent(score(total))}** |", ""]
    by_reason: dict[str, list[str]] = {}
    for name in results["survived"]:
        by_reason.setdefault(equivalent["mutants"].get(name, ""), []).append(name)
    lines += ["## Survivors reviewed as equivalent", ""]
    for key, text in equivalent["reasons"].items():
        names = by_reason.get(key, [])
        if names:
            lines += [f"**{text}** ({len(names)}): " + ", ".join(f"`{n}`" for n in names), ""]
    if open_ := by_reason.get("", []):
        lines += ["## Survivors not yet killed or classified", "",
                  ", ".join(f"`{n}`" for n in open_), ""]
    for state in ("no tests", "not checked"):
        if results[state]:
            lines += [f"## {state.capitalize()} ({len(results[state])})", "",
                      ", ".join(f"`{n}`" for n in results[state]), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python tests/mutation/mutation_results.py",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("record", help="results.json from mutmut's state")
    r.add_argument("--mutants", type=Path, default=Path("mutants"))
    r.add_argument("--time", required=True, help="how long the passes took, in words")
    r.add_argument("--only", action="append", default=[], metavar="GLOB",
                   help="replace only the modules matching GLOB (e.g. 'claims.test_*'; may be "
                        "given again), keep the others as recorded")
    d = sub.add_parser("docs", help="write docs/mutation.md from results.json and equivalent.json")
    d.add_argument("--check", action="store_true", help="fail if docs/mutation.md is not up to date")
    args = parser.parse_args(argv)
    if args.command == "record":
        try:
            results = record(args.mutants, args.time)
            if args.only:
                results = merged(json.loads(RESULTS.read_text()), results, args.only,
                                 mutated_modules())
            RESULTS.write_text(json.dumps(results, indent=1) + "\n")
        except ValueError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        print(f"wrote {RESULTS}")
        return 0
    page = docs()
    if args.check:
        if PAGE.read_text() != page:
            print(f"{PAGE} is stale: run python tests/mutation/mutation_results.py docs",
                  file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(page)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
