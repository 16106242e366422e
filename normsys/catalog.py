"""The claims as pytest collects them (``collected``; ``declared``, the norm-generic claims that
are the scorecard's columns; ``entries``), and the claims page, docs/claims.md: every claim as its
declaration states it. What it trains (each arm's runs of one seed: the preset of its tier and
what the claim changes in it), what it reads of them, what decides, its seeds and variants, and
the negative controls that stand for it. The page is written from the claims' declarations, so it
says what the code does:

    python -m normsys catalog            # write docs/claims.md
    python -m normsys catalog --check    # exit 1 if the page is not what the claim files make

The library imports no claim file: pytest's own collection of ``claims/`` does (in this
process, nothing run), and the claim markers carry each claim's declaration out of it.
"""

from __future__ import annotations

import contextlib
import functools
import io
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from normsys.claims import verdict
from normsys.claims.declaration import Declaration, Statistic
from normsys.claims.items import claim_marker, claim_variant, control_ids
from normsys.training.config import RunConfig, preset

CLAIMS = Path(__file__).parents[1] / "claims"  # the claim files, in a checkout


@dataclass(frozen=True)
class Collected:
    """One test of the claim files as pytest collects it: its file and function, the claim
    marker's declaration (and the ``Statistic`` it was made from, for a norm-generic claim), its
    variant and the claim ids it is a negative control of."""

    file: str
    test: str
    declared: Declaration | None
    statistic: Statistic | None
    variant: str
    controls: tuple[str, ...]


class _Collector:
    """A pytest plugin that keeps the items in the order they are collected (the claim files',
    then each file's definitions), before any hook sorts them."""

    def __init__(self):
        self.items = []

    def pytest_itemcollected(self, item) -> None:
        self.items.append(item)


@functools.cache
def collected(folder: Path = CLAIMS) -> tuple[Collected, ...]:
    """Every test of the claim files (``test_*.py`` in ``folder``), collected by pytest without
    running any."""
    import pytest

    if not sorted(Path(folder).glob("test_*.py")):
        raise ValueError(f"no claim files (test_*.py) in {folder}: the claims and the scorecard's "
                         f"statistics are declared there, so the catalog and the scorecard run "
                         f"from a checkout")
    collector = _Collector()
    # quiet: what pytest and its plugins say (a warning too) is said only if collecting fails
    with contextlib.redirect_stdout(io.StringIO()) as said, contextlib.redirect_stderr(said), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        code = pytest.main([str(folder), "--collect-only", "-q", "-p", "no:cacheprovider",
                            "-p", "no:benchmark", "-p", "no:xdist",
                            "--rootdir", str(Path(folder).parent)], plugins=[collector])
    if code != pytest.ExitCode.OK:
        raise ValueError(f"pytest could not collect the claim files in {folder} (exit {code}):\n"
                         + said.getvalue()[-3000:])
    out = []
    for item in collector.items:
        marker = claim_marker(item)
        kwargs = marker.kwargs if marker is not None else {}
        out.append(Collected(item.path.name, getattr(item, "originalname", item.name),
                             kwargs.get("declared"), kwargs.get("statistic"),
                             claim_variant(item), tuple(control_ids(item))))
    return tuple(out)


@functools.cache
def declared(folder: Path = CLAIMS) -> tuple[Statistic, ...]:
    """Every norm-generic claim, in the claim files' order."""
    return tuple(dict.fromkeys(c.statistic for c in collected(folder) if c.statistic))


PAGE = Path(__file__).parents[1] / "docs" / "claims.md"
TIERS = tuple(verdict.SEEDS)

HEAD = """# The claims, as declared

Written by `python -m normsys catalog` from the claim files' declarations (`tests/test_catalog.py`
fails when this page is not what the command writes). Each claim trains its arms' runs for every
seed (a config: the preset of the tier, `normsys.training.config`, with the changes shown; the seed
is `train.seed`), reads one value per seed and arm, and decides by its rule: on the one arm's value,
on first arm minus second paired by seed, or on what `combine` makes of the arms' values. Every
setting of each preset, resolved per tier, closes the page. Verdicts are in
[verdicts.md](verdicts.md)."""


@dataclass
class Listed:
    """One claim: where it is declared and tested, its variants and its controls."""

    declared: Declaration
    file: str
    test: str
    variants: list[str] = field(default_factory=list)
    controls: list[str] = field(default_factory=list)


def entries(folder: Path = CLAIMS) -> list[Listed]:
    """Every declared claim of the claim files, in file and test order, with its controls."""
    found: dict[str, Listed] = {}
    controls: dict[str, list[str]] = {}
    for c in collected(folder):
        for cid in c.controls:
            controls.setdefault(cid, []).append(c.test)
        if c.declared is not None:
            entry = found.setdefault(c.declared.id, Listed(c.declared, c.file, c.test))
            entry.variants = list(dict.fromkeys([*entry.variants, c.variant]))
    for entry in found.values():
        entry.controls = list(dict.fromkeys(
            name for v in entry.variants for name in controls.get(entry.declared.id + v, [])))
    return list(found.values())


def changes(cfg: RunConfig, tier: str) -> str:
    """A config as its family's preset at ``tier`` and what differs from it (the seed aside)."""
    base = preset(cfg.model.family, tier).flat()
    diff = [f"{key}={value!r}" for key, value in cfg.flat().items()
            if key != "train.seed" and base.get(key) != value]
    return f"`{cfg.model.family}`" + (f" with {', '.join(diff)}" if diff else "")


def named(fn) -> str:
    """A function as the page names it: its name and the first line of its docstring."""
    doc = (fn.__doc__ or "").strip().splitlines()
    return f"`{fn.__qualname__}`" + (f": {doc[0].rstrip('.')}" if doc else "")


def arms_text(arms: Mapping, variant: str) -> list[str]:
    """Per arm (name -> its runs of a seed), its runs of one seed at each tier (once where the
    tiers' changes agree)."""
    lines = []
    for arm, per_tier in ((arm, {t: [changes(c, t) for c in make(0, t, variant)] for t in TIERS})
                          for arm, make in arms.items()):
        texts = {t: "; ".join(runs) for t, runs in per_tier.items()}
        if len(set(texts.values())) == 1:
            lines.append(f"  - `{arm}`: {texts[TIERS[0]]}")
        else:
            lines.append(f"  - `{arm}`: " + " / ".join(f"{t}: {x}" for t, x in texts.items()))
    return lines


def arms_block(arms: Mapping, variants: list[str], head: str, per_variant: str) -> list[str]:
    """``head`` and the arms' runs, then each variant whose runs differ (``per_variant`` names
    it) with its own."""
    lines = [head, *arms_text(arms, "")]
    for v in variants:
        if any(make(0, TIERS[0], v) != make(0, TIERS[0], "") for make in arms.values()):
            lines += [per_variant.format(v), *arms_text(arms, v)]
    return lines


def section(entry: Listed) -> str:
    d = entry.declared
    seeds = ", ".join(f"{t} {plan[0]}" + (
        f" (looks at {', '.join(map(str, plan))} while open)" if len(plan) > 1 else "")
        for t in TIERS for plan in [verdict.plan(t, d.seeds)])
    variants = [v for v in entry.variants if v]
    lines = [f"### `{d.id}`", "", f"{d.text()} ({d.source})", "",
             f"- test: `claims/{entry.file}::{entry.test}`; seeds: {seeds}"
             + (f"; variants: {', '.join(f'`{v}`' for v in variants)}" if variants else "")]
    exp = d.experiment
    if exp is None:
        lines.append("- trains nothing: its test computes the values it decides on")
    else:
        lines += arms_block(exp.arms, variants, "- trains, per seed:", "- variant `{}` trains:")
        if exp.evidence:
            lines += arms_block(exp.evidence, variants, "- also trains, per seed, for its evidence "
                                "and figures only (never decided on):",
                                "- variant `{}` also trains, for its evidence and figures only:")
        lines.append(f"- reads: {named(exp.reads)}")
        how = (f"on {named(exp.combine)}" if exp.combine is not None else
               "on the first arm minus the second, paired by seed" if len(exp.arms) == 2 else
               "on the arm's value")
        lines.append(f"- decides: `{d.rule}`, {how}")
    lines.append("- negative control: " + (", ".join(f"`{c}`" for c in entry.controls)
                                            or "none"))
    return "\n".join(lines)


def families(found: list[Listed]) -> list[str]:
    """The presets the claims' arms train (their model families), in order of first use."""
    out: dict[str, None] = {}
    for entry in found:
        exp = entry.declared.experiment
        if exp is None:
            continue
        out.update(dict.fromkeys(arm.preset for arm in (*exp.arms.values(),
                                                         *exp.evidence.values())))
    return list(out)


def presets_text(names: list[str]) -> str:
    """Every setting of each preset at each tier, as a claim's arm resolves it before its changes
    (the seed aside)."""
    blocks = ["## The presets, resolved", "",
              "Every arm above trains its preset at its tier with the changes it shows. Each "
              "preset's settings, resolved (`normsys.training.config.preset(name, tier)`):"]
    for name in names:
        tiers = {t: preset(name, t).flat() for t in TIERS}
        rows = [f"| `{key}` | " + " | ".join(f"`{tiers[t][key]!r}`" for t in TIERS) + " |"
                for key in tiers[TIERS[0]] if key != "train.seed"]
        blocks += ["", f"### `{name}`", "", "| setting | " + " | ".join(TIERS) + " |",
                   "|---|" + "---|" * len(TIERS), *rows]
    return "\n".join(blocks)


def page(folder: Path = CLAIMS) -> str:
    """docs/claims.md: the claims of each claim file, as declared, then the presets they train
    with every setting resolved."""
    blocks = [HEAD]
    by_file: dict[str, list[Listed]] = {}
    found = entries(folder)
    for entry in found:
        by_file.setdefault(entry.file, []).append(entry)
    for file, of_file in by_file.items():
        blocks.append(f"## `claims/{file}`")
        blocks += [section(e) for e in of_file]
    blocks.append(presets_text(families(found)))
    return "\n\n".join(blocks) + "\n"
