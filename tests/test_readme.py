"""README's worked claims are the claim files' own code: every line of a Python block in "Adding a
claim" (its explaining comment stripped; a line eliding with ``...`` aside) is a line of a claim
file, so the guide cannot drift from the code it walks through."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).parents[1]


def section(text: str, title: str) -> str:
    start = text.index(f"\n## {title}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def code_lines(markdown: str) -> list[str]:
    """The lines of the Python blocks, each without a trailing comment set off by two spaces."""
    lines = []
    for block in re.findall(r"```python\n(.*?)```", markdown, flags=re.S):
        for line in block.splitlines():
            line = re.sub(r"\s{2,}#.*$", "", line).rstrip()
            if line.strip() and "..." not in line:
                lines.append(line)
    return lines


def test_the_adding_a_claim_examples_are_lines_of_the_claim_files():
    shown = code_lines(section((ROOT / "README.md").read_text(), "Adding a claim"))
    # the template claim with its test, and a declared norm-generic one
    assert {"RESIDUAL_PRESERVES = Declaration(", "def test_residual_preserves_gradients(claim, run, "
            "tier):", "DECORRELATION = Statistic("} <= set(shown)
    in_files = {line.rstrip() for path in (ROOT / "claims").glob("test_*.py")
                for line in path.read_text().splitlines()}
    missing = [line for line in shown if line not in in_files]
    assert not missing, f"README's example lines that no claim file has: {missing}"


def test_a_changed_line_is_found():
    shown = code_lines("## Adding a claim\n```python\nx = 1   # a note\ny = 2\nz = ...\n```\n")
    assert shown == ["x = 1", "y = 2"]


def test_the_claims_table_names_every_claim_file():
    table = section((ROOT / "README.md").read_text(), "The claims")
    named = set(re.findall(r"^\| `(claims/test_\w+\.py)` \|", table, flags=re.M))
    assert named == {f"claims/{p.name}" for p in (ROOT / "claims").glob("test_*.py")}


def test_the_map_names_every_module_of_the_package():
    table = section((ROOT / "README.md").read_text(), "How the code is laid out")
    named = set(re.findall(r"`normsys\.([\w.]+)`", table))
    package = ROOT / "normsys"
    modules = {".".join(p.relative_to(package).with_suffix("").parts)
               for p in package.rglob("*.py") if p.name != "__init__.py"}
    assert named == modules, f"missing {sorted(modules - named)}, gone {sorted(named - modules)}"
