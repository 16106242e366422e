"""The claims page, docs/claims.md: every claim as its declaration (normsys.declarations) states
it. What it trains (each arm's runs of one seed: the preset of its tier and what the claim changes
in it), what it reads of them, what decides, its seeds and variants. The page is written from the
declarations, so it says what the code does, from a checkout or an installed package alike:

    python -m normsys catalog            # write docs/claims.md
    python -m normsys catalog --check    # exit 1 if the page is not what the declarations make

Each claim's negative controls are tests of its claim file: ``pytest claims --claims-list`` lists
them with the runs they train.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from normsys import declarations
from normsys.claims import declaration
from normsys.claims.declaration import Declaration
from normsys.training.config import RunConfig, preset
from normsys.training.tiers import DEFAULT, TIERS

PAGE = Path(__file__).parents[1] / "docs" / "claims.md"

HEAD = """# The claims, as declared

Written by `python -m normsys catalog` from the claims' declarations (`normsys.declarations`;
`tests/test_catalog.py` fails when this page is not what the command writes). Each claim trains its
arms' runs for every seed (a config: the preset of the tier, `normsys.training.config`, with the
changes shown; the seed is `train.seed`), reads one value per seed and arm, and decides by its
rule: on the one arm's value, on first arm minus second paired by seed, or on what `combine` makes
of the arms' values. Every setting of each preset, resolved per tier, closes the page. A claim's
negative controls are tests of its claim file (`claims/test_<source>.py`), listed with their runs
by `pytest claims --claims-list`. Verdicts are in [verdicts.md](verdicts.md)."""


@dataclass(frozen=True)
class Listed:
    """One claim: its declaration and the module of normsys.declarations that declares it."""

    declared: Declaration
    module: str


def entries() -> list[Listed]:
    """Every declared claim, module by module, in the order they are declared."""
    return [Listed(declaration, module) for (module, _), declaration
            in zip(declarations.declared(), declarations.claims(), strict=True)]


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
            lines.append(f"  - `{arm}`: {texts[DEFAULT]}")
        else:
            lines.append(f"  - `{arm}`: " + " / ".join(f"{t}: {x}" for t, x in texts.items()))
    return lines


def arms_block(arms: Mapping, variants: list[str], head: str, per_variant: str) -> list[str]:
    """``head`` and the arms' runs, then each variant whose runs differ (``per_variant`` names
    it) with its own."""
    lines = [head, *arms_text(arms, "")]
    for v in variants:
        if any(make(0, DEFAULT, v) != make(0, DEFAULT, "") for make in arms.values()):
            lines += [per_variant.format(v), *arms_text(arms, v)]
    return lines


def section(entry: Listed) -> str:
    d = entry.declared
    seeds = ", ".join(f"{t} {plan[0]}" + (
        f" (looks at {', '.join(map(str, plan))} while open)" if len(plan) > 1 else "")
        for t in TIERS for plan in [declaration.plan(t, d.seeds)])
    variants = d.variants[1:]
    at = [t for t in TIERS if TIERS[t].variants]
    lines = [f"### `{d.id}`", "", f"{d.text()} ({d.source})", "",
             f"- seeds: {seeds}"
             + (f"; variants: {', '.join(f'`{v}`' for v in variants)} (at the "
                f"{', '.join(at)} tier)" if variants else ""),
             f"- role at the {DEFAULT} tier: **{d.role}** ({declaration.ROLES[d.role]})"]
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
                for key in tiers[DEFAULT] if key != "train.seed"]
        blocks += ["", f"### `{name}`", "", "| setting | " + " | ".join(TIERS) + " |",
                   "|---|" + "---|" * len(TIERS), *rows]
    return "\n".join(blocks)


def page() -> str:
    """docs/claims.md: the claims of each declarations module, as declared, then the presets
    they train with every setting resolved."""
    blocks = [HEAD]
    by_module: dict[str, list[Listed]] = {}
    found = entries()
    for entry in found:
        by_module.setdefault(entry.module, []).append(entry)
    for module, of_module in by_module.items():
        blocks.append(f"## `normsys.declarations.{module}`")
        blocks += [section(e) for e in of_module]
    blocks.append(presets_text(families(found)))
    return "\n\n".join(blocks) + "\n"
