"""The claims page (docs/claims.md) says what each claim's declaration makes its test do."""

from __future__ import annotations

import re

import pytest

from normsys import catalog, declarations
from normsys.__main__ import main
from normsys.training.config import preset


def test_the_page_is_what_the_declarations_declare():
    assert catalog.PAGE.read_text() == catalog.page(), "run python -m normsys catalog"


def test_every_claim_is_on_the_page_once_under_its_module():
    found = catalog.entries()
    ids = [e.declared.id for e in found]
    assert len(ids) == len(set(ids)) > 20
    page = catalog.PAGE.read_text()
    for e in found:
        assert page.count(f"### `{e.declared.id}`") == 1
        module = page.split(f"### `{e.declared.id}`")[0].rsplit("\n## ", 1)[1]
        assert module.startswith(f"`normsys.declarations.{e.module}`\n"), e.declared.id


def section_of(cid: str) -> str:
    return catalog.section(next(e for e in catalog.entries() if e.declared.id == cid))


def test_the_template_claim_reads_as_its_declaration():
    text = section_of("tc-residual-preserves-gradients")
    assert "- seeds: cpu 5, paper 5 (looks at 5, 8, 13, 21 while open)\n" in text
    assert "  - `residual`: `tanh_mlp` with model.residual=True\n  - `plain`: `tanh_mlp`\n" in text
    assert "- reads: `log10_grad_ratio`: log10(||grad W_1|| / ||grad W_10||)" in text
    assert text.endswith("- decides: `log10 ratio(residual) - log10 ratio(plain) > 1`, on the "
                         "first arm minus the second, paired by seed")


def test_variants_that_train_otherwise_are_shown():
    text = section_of("dm-none-collapses-with-depth")
    assert "variants: `-nonpad`, `-masked`" in text
    assert "- variant `-masked` trains:\n  - `none`: `encoder` with model.norm='none', " \
           "model.pad_mask=True" in text
    assert "variant `-nonpad` trains" not in text  # the same runs, read without the padding
    assert "variants: `-masked`" in section_of("dm-none-memorizes")  # its own, not its arm's
    combined = section_of("ld-layernorm-speeds-convergence")
    assert "on `steps_ratio`: LayerNorm's steps to 90% over the plain MLP's" in combined
    assert "trains nothing: its test computes" in section_of("dong-skips-prevent-rank-collapse")


def test_changes_are_what_differs_from_the_tiers_preset_seed_aside():
    cfg = preset("encoder", "paper", **{"model.norm": "l2", "train.seed": 4})
    assert catalog.changes(cfg, "paper") == "`encoder` with model.norm='l2'"
    assert catalog.changes(preset("mlp", "cpu", **{"train.seed": 1}), "cpu") == "`mlp`"
    assert "data." in catalog.changes(cfg, "cpu")  # the paper tier's encoder has its own data


def test_the_command_checks_and_writes_the_page(tmp_path, capsys):
    page = tmp_path / "claims.md"
    assert main(["catalog", "--out", str(page), "--check"]) == 1
    assert "is stale: run python -m normsys catalog" in capsys.readouterr().err
    assert main(["catalog", "--out", str(page)]) == 0 and page.read_text() == catalog.page()
    assert main(["catalog", "--out", str(page), "--check"]) == 0


@pytest.mark.parametrize("cid", ["lj-analytic-matches-autograd", "xiong-preln-gradients-flat"])
def test_each_arm_lists_every_run_of_a_seed(cid):
    text = section_of(cid)
    assert text.count("- trains, per seed:") == 1
    if cid.startswith("xiong"):
        assert "; `encoder` with model.layers=12" in text.replace("model.placement='pre', ", "")


def test_the_page_closes_with_every_trained_preset_resolved_per_tier():
    """What an arm trains is its preset at its tier with the changes shown: the page resolves
    every setting of each preset an arm trains, so the claim file and this page say the run."""
    page = catalog.page()
    presets = page.split("## The presets, resolved")[1]
    names = re.findall(r"^### `(\w+)`$", presets, flags=re.M)
    assert names == catalog.families(catalog.entries()) and "tanh_mlp" in names
    tanh = presets.split("### `tanh_mlp`")[1].split("###")[0]
    for key in ("model.layers", "model.d", "train.lr"):
        cpu, paper = (preset("tanh_mlp", t).flat()[key] for t in ("cpu", "paper"))
        assert f"| `{key}` | `{cpu!r}` | `{paper!r}` |" in tanh
    assert "`train.seed`" not in presets  # each arm's seed is its own


def test_the_page_and_the_scorecards_columns_come_from_the_package_alone(tmp_path):
    """The catalog and the scorecard read the claims as data (normsys.declarations): no claim
    test file, no pytest, from any folder. (Their page is checked here from outside the
    checkout, as it is from an installed package.)"""
    import os
    import subprocess
    import sys

    code = ("import sys\nfrom normsys import catalog, scorecard\ncatalog.page()\n"
            "columns = [s.name for s in scorecard.columns(None)]\n"
            "held = sorted(m for m in sys.modules if m == 'claims' or m.startswith(('claims.', "
            "'pytest', '_pytest')))\n"
            "print(len(columns), held)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=tmp_path, env={**os.environ, "PYTHONSAFEPATH": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [str(len(declarations.statistics())), "[]"]
    checked = subprocess.run([sys.executable, "-m", "normsys", "catalog", "--check", "--out",
                              str(catalog.PAGE)], capture_output=True, text=True, cwd=tmp_path)
    assert checked.returncode == 0 and checked.stdout.strip().endswith("claims.md: up to date")
