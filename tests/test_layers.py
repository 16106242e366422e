"""The library's modules import downwards only, by folder: the training package (everything a
run's record depends on) imports nothing of the rest; run orchestration (fetching, caching,
pricing and following runs) uses it; the claims machinery uses both; what the claims'
declarations share (experiments, the FA protocol, figures) uses all three, and the declarations
use that; the scorecard and the command line use them all; the claim files
(claims/) stand above them all, and no module of the library imports one. Nothing imports in a
cycle, not even through an import inside a function, and each module imports on its own in a
fresh interpreter. The modules are the package's files and their folders say where each stands:
no list of modules to keep."""

from __future__ import annotations

import ast
import graphlib
import subprocess
import sys
from pathlib import Path

import pytest

from normsys.orchestration.cache import TRAINING, imported_modules, module_file

PACKAGE = Path(__file__).resolve().parents[1] / "normsys"
# bottom to top: a module imports from its folder or one below
FOLDERS = (TRAINING, "orchestration", "claims", "declarations.shared", "declarations", "")
MODULES = sorted(".".join(p.relative_to(PACKAGE).with_suffix("").parts)
                 for p in PACKAGE.rglob("*.py") if p.name != "__init__.py")


def folder(module: str) -> str:
    return module.rpartition(".")[0]


def normsys_imports(module: str) -> set[str]:
    """The normsys modules ``module`` imports, anywhere in its source (the reader of the cache's
    completeness test), without the package __init__s on the way."""
    return imported_modules(module, PACKAGE) - {module, *FOLDERS}


def test_every_module_is_in_a_folder_of_the_map():
    assert {folder(m) for m in MODULES} == set(FOLDERS)


@pytest.mark.parametrize("module", MODULES)
def test_imports_stay_in_their_folder_or_go_down(module):
    level = FOLDERS.index(folder(module))
    upward = sorted(m for m in normsys_imports(module) if FOLDERS.index(folder(m)) > level)
    assert not upward, f"normsys.{module} imports {upward}, from a folder above its own"


CLAIM_FILES = sorted((PACKAGE.parent / "claims").glob("*.py"))


def top_imports(path: Path) -> set[str]:
    """The top-level names of every module ``path``'s source imports, anywhere in it, and the
    modules it loads by name or by path (``import_module``, ``spec_from_file_location``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(
                node.func, "id", "")) in ("import_module", "spec_from_file_location"):
            found.add("<by name or path>")
    return found


@pytest.mark.parametrize("module", MODULES)
def test_no_module_of_the_library_imports_a_claim_file(module):
    """The catalog and the scorecard read the claims through pytest's collection; only the
    user's norm file is loaded by path (normsys.orchestration.usernorm)."""
    imported = top_imports(module_file(module, PACKAGE))
    assert "claims" not in imported, f"normsys.{module} imports the claim files' package"
    if module != "orchestration.usernorm":
        assert "<by name or path>" not in imported, f"normsys.{module} loads a module by name"


def test_the_claim_files_import_the_library_and_not_one_another():
    assert len(CLAIM_FILES) > 5
    for path in CLAIM_FILES:
        assert "claims" not in top_imports(path), f"claims/{path.name} imports a claim file"


def test_an_import_of_a_claim_file_is_found(tmp_path):
    for source in ("from claims import test_x\n", "import claims.test_x\n",
                   "def f():\n    importlib.import_module('claims.test_x')\n"):
        (tmp_path / "m.py").write_text(source)
        assert top_imports(tmp_path / "m.py") & {"claims", "<by name or path>"}


def test_nothing_imports_in_a_cycle():
    graph = {m: normsys_imports(m) for m in MODULES}
    assert len(list(graphlib.TopologicalSorter(graph).static_order())) == len(MODULES)


def test_a_cycle_or_an_upward_import_is_found(tmp_path):
    package = tmp_path / "normsys"
    (package / TRAINING).mkdir(parents=True)
    for name in ("__init__.py", "top.py", f"{TRAINING}/__init__.py"):
        (package / name).write_text("")
    (package / TRAINING / "a.py").write_text(f"from normsys.{TRAINING} import b\n")
    (package / TRAINING / "b.py").write_text(f"def f():\n    from normsys.{TRAINING}.a import X\n"
                                             f"    from normsys import top\n")
    graph = {m: imported_modules(m, package) - {m, *FOLDERS} for m in (f"{TRAINING}.a", f"{TRAINING}.b")}
    with pytest.raises(graphlib.CycleError):
        list(graphlib.TopologicalSorter(graph).static_order())
    assert "top" in graph[f"{TRAINING}.b"] and folder("top") == ""  # from the training folder: up


@pytest.mark.parametrize("module", MODULES)
def test_each_module_imports_alone_in_a_fresh_interpreter(module):
    done = subprocess.run([sys.executable, "-c", f"import normsys.{module}"],
                          capture_output=True, text=True, cwd=PACKAGE.parent)
    assert done.returncode == 0, done.stderr[-2000:]


def test_no_function_takes_more_than_six_parameters():
    """A function with more needs a small state object (norms.batch_norm mirrors F.batch_norm)."""
    crowded = []
    for module in MODULES:
        for node in ast.walk(ast.parse(module_file(module, PACKAGE).read_text())):
            if isinstance(node, ast.FunctionDef):
                args = node.args
                names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
                if len([n for n in names if n not in ("self", "cls")]) > 6:
                    crowded.append(f"{module}.{node.name}")
    assert crowded == [f"{TRAINING}.norms.batch_norm"]


def test_no_claim_file_defines_a_helper_another_claim_file_defines():
    """An experiment or helper two claim files need is defined once
    (normsys.declarations.shared.experiments, normsys.claims.testing, the plugin's fixtures)."""
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


def test_what_only_one_source_uses_sits_in_its_own_modules():
    """normsys.declarations.shared.experiments holds what two or more sources run or read (a
    source: its declarations module and its claim file): a reading, a rule or an experiment of
    one source sits in its declarations module, beside the claim it decides."""
    shared = ast.parse((PACKAGE / "declarations" / "shared" / "experiments.py").read_text())
    defined = [node.targets[0].id if isinstance(node, ast.Assign) else node.name
               for node in shared.body if isinstance(node, ast.FunctionDef | ast.Assign)]
    users = {name: set() for name in defined}
    sources = [*(PACKAGE / "declarations").glob("[!_]*.py"),
               *(PACKAGE.parent / "claims").glob("test_*.py")]
    for path in sources:
        names = {n.id for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Name)}
        for name in users:
            if name in names:
                users[name].add(path.stem.removeprefix("test_"))
    assert {name: sorted(of) for name, of in users.items() if len(of) < 2} == {}
