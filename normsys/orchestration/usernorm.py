"""A user's norm, named by a spec (``package.module:Attribute`` or ``path/to/file.py:Attribute``),
imported and registered as a norm kind: what the scorecard judges, and what each worker process
and Ray node registers again before it trains."""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import sys
from pathlib import Path

from normsys.training.norms import qualified, register


def shadows(path: Path) -> bool:
    """Whether the file ``path`` would take the place of a module normsys runs on when imported
    from its own folder: one of Python's own, one imported already, or one installed elsewhere
    (torch, json, numpy, ...)."""
    module = path.stem
    if module in sys.stdlib_module_names or module in sys.modules:
        return True
    here = path.resolve().parent
    elsewhere = [p for p in sys.path if Path(p or ".").resolve() != here]
    return importlib.machinery.PathFinder.find_spec(module, elsewhere) is not None


def load(spec: str, name: str = "") -> str:
    """Register the norm ``spec`` names and return its kind name. ``spec`` is
    ``package.module:Attribute`` or ``path/to/file.py:Attribute``; the name is ``name`` or the
    attribute in lower case. Raises ValueError saying what was wrong."""
    target, sep, attr = spec.rpartition(":")
    if not sep or not target or not attr:
        raise ValueError(f"{spec!r}: expected MODULE:ATTRIBUTE or FILE.py:ATTRIBUTE, e.g. "
                         f"mynorm.py:MyNorm")
    if target.endswith(".py"):
        path = Path(target)
        if not path.is_file():
            raise ValueError(f"{spec!r}: no such file {path}")
        if shadows(path):
            raise ValueError(f"{spec!r}: the file {path} is named as the module {path.stem}, "
                             f"which normsys or Python imports; from its own folder it would "
                             f"be imported in that module's place: rename it (e.g. "
                             f"{path.stem}_norm.py)")
        module_name = private_name(path)
        module_spec = importlib.util.spec_from_file_location(module_name, path.resolve())
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[module_name] = module  # classes pickle and inspect by their module
        try:
            module_spec.loader.exec_module(module)
        except (Exception, SystemExit) as err:  # noqa: BLE001 - the user's file failed to import
            del sys.modules[module_name]
            raise ValueError(f"{spec!r}: importing {path} failed: {type(err).__name__}: "
                             f"{err}") from None
    else:
        try:
            module = importlib.import_module(target)
        except (Exception, SystemExit) as err:  # noqa: BLE001
            raise ValueError(f"{spec!r}: cannot import {target}: {type(err).__name__}: "
                             f"{err}") from None
    if not hasattr(module, attr):
        public = [a for a in vars(module) if not a.startswith("_")]
        raise ValueError(f"{spec!r}: {target} has no attribute {attr!r}; it has "
                         f"{', '.join(public[:12]) or 'none'}")
    factory = getattr(module, attr)
    # without a docstring of its own, a kind is described by where it is defined: the file's
    # name, not the private module name it was loaded under
    where = f"{Path(target).stem}:{attr}" if target.endswith(".py") and not factory.__doc__ else ""
    try:
        return register(name or attr.lower(), factory, where)
    except ValueError as err:  # its checks name the factory by that private module: say the spec
        raise ValueError(str(err).replace(qualified(factory), spec)) from None
    except (Exception, SystemExit) as err:  # noqa: BLE001 - the user's code failed inside the
        # check itself (a meta tensor's values read, a backward that raises, an exit)
        raise ValueError(f"{spec!r}: checking its forward and backward pass failed: "
                         f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
                         ) from None


def private_name(path: Path) -> str:
    """The module name a user's file is loaded under: its stem under a prefix of its own and a
    digest of its absolute path, so that a file named like an installed module (json.py,
    torch.py, normsys.py) shadows nothing, and every worker process that loads the same file
    names it alike (its classes pickle by that name)."""
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:8]
    stem = "".join(c if c.isalnum() else "_" for c in path.stem)
    return f"_normsys_user_{stem}_{digest}"


def absolute(spec: str) -> str:
    """The spec with a file path made absolute (worker processes start elsewhere)."""
    target, _, attr = spec.rpartition(":")
    return f"{Path(target).resolve()}:{attr}" if target.endswith(".py") else spec
