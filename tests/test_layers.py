"""The library's modules import downwards only: each layer may use the layers below it, never one
above or beside it, and each module imports on its own in a fresh interpreter (no cycle held
together by imports inside functions)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from normsys.cache import imported_modules

PACKAGE = Path(__file__).resolve().parents[1] / "normsys"

# bottom to top; a module may import only modules of lower layers
LAYERS = [
    {"store", "stats", "stacked", "params", "workers", "provenance", "steplog"},
    {"norms", "sequential", "feedback"},
    {"config"},
    {"data", "models", "diagnostics", "progress"},
    {"tasks"},
    {"record", "protocol", "measure"},
    {"train"},
    {"batched", "cache"},
    {"runtimes"},
    {"runs"},
    {"bench", "experiments", "figures", "ledger", "report", "testing"},
    {"scorecard"},
    {"cluster"},
    {"plugin", "__main__"},
]
LAYER = {name: i for i, layer in enumerate(LAYERS) for name in layer}
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")


def normsys_imports(module: str) -> set[str]:
    """The normsys modules ``module`` imports, anywhere in its source (the reader that keys the
    run cache)."""
    return imported_modules(module, PACKAGE) - {module, ""}


def test_every_module_has_a_layer():
    assert set(MODULES) <= set(LAYER), sorted(set(MODULES) - set(LAYER))


@pytest.mark.parametrize("module", MODULES)
def test_imports_go_downwards_only(module):
    upward = sorted(m for m in normsys_imports(module) if LAYER[m] >= LAYER[module])
    assert not upward, f"normsys.{module} (layer {LAYER[module]}) imports {upward}"


@pytest.mark.parametrize("module", MODULES)
def test_each_module_imports_alone_in_a_fresh_interpreter(module):
    done = subprocess.run([sys.executable, "-c", f"import normsys.{module}"],
                          capture_output=True, text=True, cwd=PACKAGE.parent)
    assert done.returncode == 0, done.stderr[-2000:]


def test_no_function_takes_more_than_six_parameters():
    """A function with more needs a small state object (norms.batch_norm mirrors F.batch_norm)."""
    crowded = []
    for module in MODULES:
        for node in ast.walk(ast.parse((PACKAGE / f"{module}.py").read_text())):
            if isinstance(node, ast.FunctionDef):
                args = node.args
                names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
                if len([n for n in names if n not in ("self", "cls")]) > 6:
                    crowded.append(f"{module}.{node.name}")
    assert crowded == ["norms.batch_norm"]


def test_no_claim_file_defines_a_helper_another_claim_file_defines():
    """An experiment or helper two claim files need is defined once (normsys.experiments,
    normsys.testing, claims/conftest.py)."""
    claims = PACKAGE.parent / "claims"
    seen: dict[str, str] = {}
    twice = []
    for path in sorted(claims.glob("test_*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("test_"):
                if node.name in seen:
                    twice.append(f"{node.name}: {seen[node.name]} and {path.name}")
                seen[node.name] = path.name
    assert not twice
