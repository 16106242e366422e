"""README's worked claims are the claim files' own code: every line of a Python block in "Adding a
claim" (its explaining comment stripped; a line eliding with ``...`` aside) is a line of a claim
file, so the guide cannot drift from the code it walks through; its claims table and map name
every claim file and module; the seed counts and paper settings it states are the code's."""

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


def test_the_adding_a_claim_examples_are_lines_of_the_declarations_and_claim_files():
    shown = code_lines(section((ROOT / "README.md").read_text(), "Adding a claim"))
    # the template claim with its test, and a declared norm-generic one
    assert {"RESIDUAL_PRESERVES = Declaration(", "def test_residual_preserves_gradients(claim, runs, "
            "tier):", "DECORRELATION = Statistic("} <= set(shown)
    files = [*(ROOT / "claims").glob("test_*.py"), *(ROOT / "normsys" / "declarations").glob("*.py")]
    in_files = {line.rstrip() for path in files for line in path.read_text().splitlines()}
    missing = [line for line in shown if line not in in_files]
    assert not missing, f"README's example lines that no source file has: {missing}"


def test_a_changed_line_is_found():
    shown = code_lines("## Adding a claim\n```python\nx = 1   # a note\ny = 2\nz = ...\n```\n")
    assert shown == ["x = 1", "y = 2"]


def test_the_claims_table_names_every_declarations_module_and_claim_file():
    """Each row a source: its declarations module and its claim file; the generic claim files
    (test_declared.py, test_aa_family.py) are named in the text above the table."""
    table = section((ROOT / "README.md").read_text(), "The claims")
    rows = re.findall(r"^\| `(\w+)` \| `(claims/test_\w+\.py)` \|", table, flags=re.M)
    assert {m for m, _ in rows} == {p.stem for p in (ROOT / "normsys" / "declarations")
                                    .glob("*.py") if p.stem != "__init__"}
    generic = {"claims/test_declared.py", "claims/test_aa_family.py"}
    named = {f for _, f in rows} | generic
    assert named == {f"claims/{p.name}" for p in (ROOT / "claims").glob("test_*.py")}
    assert all(f"`{f}`" in table for f in generic)


def test_the_map_names_every_module_of_the_package():
    table = section((ROOT / "README.md").read_text(), "How the code is laid out")
    named = set(re.findall(r"`normsys\.([\w.]+)`", table))
    package = ROOT / "normsys"
    modules = {".".join(p.relative_to(package).with_suffix("").parts)
               for p in package.rglob("*.py") if p.name != "__init__.py"}
    assert named == modules, f"missing {sorted(modules - named)}, gone {sorted(named - modules)}"


NUMBERS = {2: "Two", 3: "Three", 4: "Four", 5: "Five"}


def prose() -> str:
    """README and the guide to reading a verdict it links, where the facts below are stated."""
    return (ROOT / "README.md").read_text() + "\n" + (ROOT / "docs" / "reading-verdicts.md").read_text()


def stated_settings(text: str) -> dict:
    """The seed counts and the encoder's paper settings README states in words."""
    cpu = re.search(r"(\w+) seeds \(t\* = ([\d.]+)\) decide only large effects", text)
    paper = re.search(r"\(for the encoder:\s+d=(\d+), (\d+) tokens, Adam ([\de.-]+), batch (\d+), "
                      r"(\d+) epochs\) over (\d+) seeds, up to (\d+) where", text)
    command = re.search(r"# the paper tier: every claim, (\d+) seeds \(to (\d+) where open\)", text)
    looks = re.search(r"The paper tier looks\s+at ([\d, ]+) and (\d+) seeds; the CPU tier decides "
                      r"at its (\d+)", text)
    if not (cpu and paper and command and looks):
        raise AssertionError("README no longer states the seeds and paper settings this test reads")
    d, tokens, lr, batch, epochs = paper.groups()[:5]
    return {"cpu seeds": cpu[1], "t*": cpu[2],
            "encoder": (int(d), int(tokens), float(lr), int(batch), int(epochs)),
            "paper seeds": {paper[6], command[1]}, "paper most": {paper[7], command[2], looks[2]},
            "paper looks": looks[1].split(", ") + [looks[2]], "cpu looks": looks[3]}


def test_the_seeds_and_paper_settings_it_states_are_the_codes():
    """README and its guide say how many seeds each tier takes and the encoder's paper settings in
    prose; those facts live in the tier registry (normsys.training.tiers) and the encoder preset,
    and the prose follows them."""
    from normsys.claims.verdict import looks, t_quantile
    from normsys.training.config import preset
    from normsys.training.tiers import TIERS

    cpu, paper_tier = TIERS.values()
    paper = preset("encoder", paper_tier.name)
    assert stated_settings(prose()) == {
        "cpu seeds": NUMBERS[cpu.seeds], "t*": f"{t_quantile(cpu.seeds - 1):.2f}",
        "encoder": (paper.model.d, paper.model.seq_len, paper.train.lr, paper.train.batch_size,
                    paper.train.epochs),
        "paper seeds": {str(paper_tier.seeds)}, "paper most": {str(paper_tier.max_seeds)},
        "paper looks": [str(n) for n in looks(paper_tier.seeds, paper_tier.max_seeds)],
        "cpu looks": str(looks(cpu.seeds, cpu.max_seeds)[-1])}


def test_a_changed_seed_count_is_found():
    assert stated_settings(prose().replace("over 5 seeds", "over 7 seeds"))["paper seeds"] == \
        {"7", "5"}


def stated_levels(text: str) -> dict:
    """The interval levels README states in prose: one look's, its alpha a side, and an all-of
    rule's refuting levels for two and three comparisons (Holm)."""
    one = re.search(r"confidence interval of the mean, at ([\d.]+)% \(([\d.]+)% a side", text)
    holm = re.search(r"\(Holm: ([\d.]+)% intervals for two,\s+([\d.]+)% for three\)", text)
    return {"level": one[1], "alpha": one[2], "holm": (holm[1], holm[2])}


def test_the_interval_levels_it_states_are_the_codes():
    from normsys.claims.verdict import INTERVAL_ALPHA, LEVEL

    def pct(x: float) -> str:
        return f"{100 * x:.4g}"

    assert stated_levels(prose()) == {
        "level": pct(LEVEL), "alpha": pct(INTERVAL_ALPHA),
        "holm": (pct(1 - (1 - LEVEL) / 2), pct(1 - (1 - LEVEL) / 3))}
    changed = prose().replace("at 96.5% (", "at 95% (")
    assert stated_levels(changed)["level"] == "95"


def scorecard_environments() -> list[dict]:
    """The numeric environments the committed built-in CPU scorecard was made in."""
    import json

    path = ROOT / "claims" / "gallery" / "scorecard-builtin-cpu.json"
    return json.loads(path.read_text())["provenance"]["environments"]


def test_the_scorecard_log_it_names_is_of_the_committed_kind():
    """The log README names for its `MyNorm` scorecard is that command's whole output, from an
    empty run cache, made where the committed built-in scorecard was: its runs trained on that
    CPU kind, the built-in cells read, not trained, and its wall time on its last line."""
    named = re.search(r"\(`(claims/gallery/scorecard-mynorm-[\w.-]+\.log)` is\s+what the "
                      r"command\s+printed for the `MyNorm` above", (ROOT / "README.md").read_text())
    assert named is not None, "README no longer names the log of its MyNorm scorecard"
    log = (ROOT / named[1]).read_text()
    assert log.startswith("# python -m normsys scorecard mynorm.py:MyNorm ") and \
        "NORMSYS_CACHE empty" in log.splitlines()[0] and "\nwritten: " in log
    assert re.search(r"\nrc=0 after \d+ s$", log.rstrip()), log[-300:]
    first = re.search(r"\nscorecard: (\d+) runs, 0 cached; .*read from the committed built-in "
                      r"scorecard", log)
    assert first is not None, "the log's scorecard trained built-in rows, or read some from a cache"
    kinds = {e["device"] for e in scorecard_environments()}
    trained = re.findall(r"\): trained in \d+ s \((.+?), 1 thread", log)
    assert len(trained) == int(first[1]) and set(trained) == kinds, (set(trained), kinds)


def test_the_environment_it_says_the_committed_results_need_is_theirs():
    """The torch version README's set-up names is CI's pin and the committed results' own, and
    the CPU kind it names is the committed built-in scorecard's."""
    readme = (ROOT / "README.md").read_text()
    setup = readme[:readme.index("The CPU tier's data ships with the project")]
    pinned = re.search(r"torch==(\S+)", (ROOT / ".ci" / "run").read_text())[1]
    environments = scorecard_environments()
    assert {e["torch"].split("+")[0] for e in environments} == {pinned}
    assert {e["threads"] for e in environments} == {"1"}
    assert f"made with torch {pinned}" in setup and f"`pip install torch=={pinned}`" in setup
    for e in environments:
        assert f"on `{e['device']}`" in setup, e["device"]
