"""On-disk cache of run records so that several claims share one training run.

Key: the config's fingerprint, a digest of the data the run reads (normsys.training.data: file
checksums or the rows themselves), a digest of the code a run's result depends on, a digest of the
numeric environment it trains in (``numeric_environment``: the device and its CPU kernels or GPU,
torch threads, torch version, autocast dtype) and the normsys version. That code is what a run's
entry points import (``training_path``: their imports read from the sources, transitively, all
inside ``normsys.training``), less the modules that reach a run only as values the key holds
already (``KEYED_BY_VALUE``): an edit of one of those modules retrains every run, and an edit of
the tier table, the report, the plugin, the ledger or a claim file retrains nothing (a tier's
changed setting re-keys the runs it reaches through their fingerprint). A record is kept under the
environment it was made in (its own ``env``), so one made elsewhere (a Ray node of other kernels,
a process at another thread count) is never served to a session whose runs train otherwise.
Location: normsys.training.store (``$NORMSYS_CACHE``, ``off`` disables it). Writes are atomic; an
entry that cannot be read or does not match its key is retrained, and says so. A file lock per key
makes concurrent pytest-xdist workers safe: one trains, the others wait (and say whom they wait on)
and then read.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import hashlib
import itertools
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from filelock import FileLock, Timeout

from normsys import __version__
from normsys.orchestration.progress import SILENT, Progress, described, label
from normsys.training.config import RunConfig
from normsys.training.norms import NORMS
from normsys.training.provenance import code_text, numeric_of
from normsys.training.record import RunRecord
from normsys.training.store import atomic_save, atomic_write_text, cache_root, file_sha256
from normsys.training.train import run_environment

Compute = Callable[[list[RunConfig]], list[tuple[RunRecord, dict | None]]]
Environment = Callable[[RunConfig], dict[str, str]]  # where a config's run trains: its numeric
# environment (normsys.training.train.run_environment here; a cluster's own, cluster.Cluster)
NORMSYS = Path(__file__).parents[1]  # the normsys package
TRAINING = "training"  # the package that trains a run: everything a record depends on
ENTRY_POINTS = ("training.train", "training.batched")  # one run, or stacked seeds (fit)
# Modules the entry points import that reach a run only as values the key already holds: the tier
# table gives a run its settings (config fields: the fingerprint) and its data pool (the rows: the
# data digest), and none of its code runs while a run trains (tests/test_cache.py traces a run of
# every experiment to check it)
KEYED_BY_VALUE = ("training.tiers",)


def module_file(module: str, package: Path = NORMSYS) -> Path | None:
    """The source file of ``module`` (dotted, relative to the package; "" is the package's
    __init__), or None when no such module exists."""
    base = package.joinpath(*module.split(".")) if module else package
    for path in (base.with_suffix(".py") if module else None, base / "__init__.py"):
        if path is not None and path.is_file():
            return path
    return None


def imported_modules(module: str, package: Path = NORMSYS) -> set[str]:
    """The modules of the package that ``module``'s source imports, anywhere in it (inside
    functions too), with the package __init__s each import runs ("" is the package's own)."""
    found = set()
    for node in ast.walk(ast.parse(module_file(module, package).read_bytes())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            targets = [f"{node.module}.{a.name}" for a in node.names]  # a module or a name in one
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for target in targets:
            top, *parts = target.split(".")
            if top == package.name:  # the module, and each package on the way to it
                found |= {".".join(parts[:i]) for i in range(len(parts) + 1)}
    return {m for m in found if module_file(m, package) is not None}


def imported_closure(modules: tuple[str, ...], package: Path = NORMSYS) -> tuple[str, ...]:
    """``modules`` and every module of the package they import, transitively (sorted)."""
    seen, todo = set(), list(modules)
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += imported_modules(module, package) - seen
    return tuple(sorted(seen))


def training_path(package: Path = NORMSYS) -> tuple[str, ...]:
    """The modules whose source keys the cache: the entry points and every module of the package
    they import (``imported_closure``; "" is the normsys __init__ importing them runs), less
    ``KEYED_BY_VALUE`` (sorted)."""
    return tuple(m for m in imported_closure(ENTRY_POINTS, package) if m not in KEYED_BY_VALUE)


@functools.cache
def code_digest(package: Path = NORMSYS) -> str:
    """sha256 of the training path's code (12 hex digits): its tokens, comments and docstrings
    left out (provenance.code_text), so a comment edited retrains nothing."""
    digest = hashlib.sha256()
    for name in training_path(package):
        path = module_file(name, package)
        digest.update(name.encode() + b"\0" + text_of(path, path.read_bytes()))
    return digest.hexdigest()[:12]


@functools.lru_cache(maxsize=256)
def text_of(path: Path, source: bytes) -> bytes:
    """``code_text`` of the module at ``path``, once for each source it has held: a digest of a
    package with one module edited tokenizes that module alone."""
    return code_text(path)


def environment_digest(environment: dict[str, str]) -> str:
    """12 hex digits of a numeric environment (provenance.numeric_environment)."""
    return hashlib.sha256(json.dumps(numeric_of(environment), sort_keys=True).encode()) \
        .hexdigest()[:12]


def run_key(config: RunConfig, data: str = "", environment: dict[str, str] | None = None) -> str:
    """The cache key: config fingerprint, data digest (when the run reads data), code digest
    (with each registered norm kind's source digest, normsys.training.norms.register: the
    model's norm and its queries' and keys'), the digest of
    the numeric environment the run trains in (``environment``; None: here, run_environment),
    version."""
    data_part = f"-{data[:16]}" if data else ""
    kinds = (NORMS.get(k) for k in dict.fromkeys((config.model.norm, config.model.qk_norm)))
    norm_part = "".join(f"-n{kind.source}" for kind in kinds if kind is not None and kind.source)
    env = run_environment(config) if environment is None else environment
    return f"{config.fingerprint()}{data_part}-c{code_digest()}{norm_part}" \
           f"-e{environment_digest(env)}-v{__version__}"


def cached_fingerprints(environment: dict[str, str]) -> set[str]:
    """The config fingerprints of the runs the cache holds under this code, ``environment`` and
    version, by their file names alone (what prices a run known by its fingerprint, a control's;
    a damaged record counts here and trains again when read)."""
    root = cache_root()
    if root is None:
        return set()
    code, tail = f"-c{code_digest()}", f"-e{environment_digest(environment)}-v{__version__}.json"
    return {p.name.split("-", 1)[0] for p in (root / "runs").glob(f"*{tail}") if code in p.name}


def lookup(config: RunConfig, data: str = "",
           environment: Environment = run_environment) -> RunRecord | None:
    """The cached record of ``config`` on data ``data`` made in the numeric environment its run
    trains in (``environment(config)``), if a valid one exists (no lock, no training): what a cost
    estimate reads."""
    root = cache_root()
    if root is None:
        return None
    env = environment(config)
    return _load(root / "runs" / f"{run_key(config, data, env)}.json", config, env)[0]


def _load(json_path: Path, config: RunConfig,
          environment: dict[str, str]) -> tuple[RunRecord | None, str]:
    """The stored record if it is whole, matches the key (config, version, numeric environment)
    and its weights check out, else None and what was wrong ('' when there is no entry)."""
    if not json_path.exists():
        return None, ""
    try:
        payload = json.loads(json_path.read_text())
        record = RunRecord.from_json(json.dumps(payload["record"]))
        if payload["sha256"] != _digest(payload["record"]):
            return None, "its checksum does not match"
        if record.fingerprint != config.fingerprint() or record.version != __version__:
            return None, "it belongs to another config or version"
        if numeric_of(record.env) != numeric_of(environment):
            return None, f"it was made in another numeric environment ({described(record.env)})"
        if record.state_path is not None:
            state = Path(record.state_path)
            if not state.is_file() or payload.get("state_sha256") != file_sha256(state):
                return None, "its weights are missing or damaged"
        return record, ""
    except (OSError, ValueError, KeyError, TypeError) as err:
        return None, f"it cannot be read ({type(err).__name__})"


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


class CacheFolderError(ValueError):
    """The cache folder cannot be used: what it is, and what to do."""


def check_folder(root: Path | None = None) -> str:
    """Whether the run cache folder (``$NORMSYS_CACHE``) can be used, before anything trains or
    reads the data (whose tokenizers it keeps): raises CacheFolderError for a file, or a folder
    that cannot be created (it is created here); '' when it can be written, or a note when it is
    read-only (its runs are served, new ones are not kept)."""
    if root is None and (given := os.environ.get("NORMSYS_CACHE", "")) and \
            given.lower() != "off" and not Path(given).expanduser().is_absolute():
        raise CacheFolderError(f"NORMSYS_CACHE={given}: a relative path names another cache in "
                               f"every folder a command starts from (here {cache_root()}); give "
                               f"an absolute path, e.g. NORMSYS_CACHE={cache_root()}, or "
                               f"NORMSYS_CACHE=off")
    root = cache_root() if root is None else root
    if root is None:
        return ""
    if root.exists() and not root.is_dir():
        raise CacheFolderError(f"NORMSYS_CACHE={root}: is a file, not a folder; name a folder "
                               f"(it is created if missing), or NORMSYS_CACHE=off")
    existing = next(p for p in (root, *root.parents) if p.exists())
    if existing != root and not (existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)):
        raise CacheFolderError(f"NORMSYS_CACHE={root}: cannot be created ({existing} is not a "
                               f"writable folder); name another, or NORMSYS_CACHE=off")
    if existing != root:  # what the permissions say is not all (/proc, a full disk): make it
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise CacheFolderError(f"NORMSYS_CACHE={root}: cannot be created ({err.strerror}); "
                                   f"name another, or NORMSYS_CACHE=off") from None
    if existing == root and not writable(root):
        return f"the run cache {root} is read-only: its runs are served, new ones are not kept"
    return ""


def writable(root: Path) -> bool:
    """Whether runs can be kept under ``root``: its runs folder, or the nearest folder that
    exists on the way to it, can be written."""
    runs = root / "runs"
    existing = next(p for p in (runs, *runs.parents) if p.exists())
    return existing.is_dir() and os.access(existing, os.W_OK | os.X_OK)


def cached_runs(configs: list[RunConfig], data: str, compute: Compute, wait: bool = True,
                progress: Progress = SILENT,
                environment: Environment = run_environment) -> list[RunRecord] | None:
    """The records of ``configs`` (runs on the same data, digest ``data``): from the cache where
    a valid entry made in the numeric environment they train in (``environment(config)``)
    exists (read without a lock first: a read-only cache serves its runs), the others computed
    together by ``compute(missing configs)`` under a lock per run and stored, each said on
    ``progress``. With ``wait=False``, None instead of waiting while another process holds one
    of them (is training it), so that the caller can do other work first and ask again. A run
    that cannot be stored (a full disk, a read-only cache) is said and served to this session
    only; one that comes back made in another environment than asked (a cluster node of other
    kernels) is said, kept under its own environment and served to this session only."""
    envs = {c: environment(c) for c in dict.fromkeys(configs)}
    root = cache_root()
    if root is None:
        return _computed(configs, compute, progress)
    runs = root / "runs"
    paths = {c: runs / run_key(c, data, envs[c]) for c in envs}
    ready = {c: _load(Path(f"{paths[c]}.json"), c, envs[c])[0] for c in envs}
    if all(r is not None for r in ready.values()):
        for record in ready.values():
            progress.finished(record, cached=True)
        return [ready[c] for c in configs]
    if not writable(root):
        progress.note(f"the run cache {root} is read-only: training "
                      f"{sum(r is None for r in ready.values())} runs it lacks without keeping them")
        found = dict(ready)
        missing = [c for c in found if found[c] is None]
        found.update(zip(missing, _computed(missing, compute, progress), strict=True))
        return [found[c] for c in configs]
    runs.mkdir(parents=True, exist_ok=True)
    try:
        with ExitStack() as stack:
            held_by = {p: c for c, p in paths.items()}
            for path in sorted(set(paths.values())):  # one global order: no deadlock
                lock = FileLock(f"{path}.lock")
                try:
                    lock.acquire(timeout=0)
                except Timeout:
                    if not wait:
                        raise
                    progress.note(f"waiting for {label(held_by[path])}: another "
                                  f"process is training it")
                    lock.acquire()
                except OSError as err:  # not a lock file: a folder, a file it may not write
                    raise CacheFolderError(f"{path}.lock: cannot be taken as the lock of a cache "
                                           f"entry ({err.strerror}); remove it (a lock is a file "
                                           f"the cache makes), or NORMSYS_CACHE=off") from None
                stack.callback(lock.release)
            found = {}
            for c in dict.fromkeys(configs):
                found[c], problem = _load(Path(f"{paths[c]}.json"), c, envs[c])
                if problem:
                    progress.note(f"cache entry {paths[c].name} is unusable ({problem}): "
                                  f"retraining {label(c)}")
                elif found[c] is not None:
                    progress.finished(found[c], cached=True)
            missing = [c for c in found if found[c] is None]
            if missing:
                progress.started(missing)
                for c, (record, state) in zip(missing, compute(missing), strict=True):
                    path = runs / run_key(c, data, record.env)  # where it was made
                    if path != paths[c]:
                        progress.note(f"{label(c)} was made in another numeric environment "
                                      f"({described(record.env)}; asked: {described(envs[c])}): kept "
                                      f"under its own, served to this session only")
                    found[c] = _store(record, state, path, progress)
                    progress.finished(record, cached=False)
            return [found[c] for c in configs]
    except Timeout:
        return None


FULL_BELOW = 1 << 20  # bytes free under which a failed write is put down to a full disk


def disk_full(folder: Path) -> bool:
    """Whether the disk holding ``folder`` has (next to) no space left."""
    try:
        return shutil.disk_usage(folder).free < FULL_BELOW
    except OSError:
        return False


def _computed(configs: list[RunConfig], compute: Compute, progress: Progress) -> list[RunRecord]:
    """Train ``configs`` for a session whose cache keeps nothing (off, or read-only)."""
    progress.started(configs)
    records = [kept_for_session(record, state) for record, state in compute(configs)]
    for record in records:
        progress.finished(record, cached=False)
    return records


def _store(record: RunRecord, state: dict | None, path: Path,
           progress: Progress = SILENT) -> RunRecord:
    """Keep the record (and its weights) under ``path``; where the disk refuses (full, read-only)
    say so and leave no partial entry: the record serves this session (``kept_for_session``)."""
    payload: dict = {}
    state_path = Path(f"{path}.pt")
    try:
        if state is not None:
            atomic_save(state, state_path)
            record.state_path = str(state_path)
            payload["state_sha256"] = file_sha256(state_path)
        body = json.loads(record.to_json())
        payload.update(record=body, sha256=_digest(body))
        atomic_write_text(json.dumps(payload), Path(f"{path}.json"))
    except (OSError, RuntimeError) as err:  # torch.save reports a full disk as a RuntimeError
        state_path.unlink(missing_ok=True)
        kept_for_session(record, state)
        why = f"{type(err).__name__}: {(str(err) or '-').splitlines()[0][:120]}"
        if disk_full(path.parent):  # torch's words for it are "unexpected pos ..."
            why = f"the disk holding {path.parent} is full; {why}"
        weights = f"its weights in {Path(record.state_path).parent}" if record.state_path \
            else "without its weights"
        progress.note(f"could not keep {label(record.run_config)} in the run cache ({why}): its "
                      f"record serves this session only, {weights}")
    return record


_SAVED = itertools.count()  # each kept state's own file, a config trained twice included


@functools.cache
def _session_folder() -> tempfile.TemporaryDirectory:
    return tempfile.TemporaryDirectory(prefix="normsys-weights-")


def kept_for_session(record: RunRecord, state: dict | None) -> RunRecord:
    """``record`` with its weights (``state``) in a temporary folder of this process, removed as
    it ends: a run the cache does not keep still serves the claims that load its trained net
    (normsys.training.record.trained_model). Without weights where that folder refuses them too."""
    record.state_path = None
    if state is not None:
        with contextlib.suppress(OSError, RuntimeError):  # a full disk: RuntimeError from torch
            path = Path(_session_folder().name) / f"{record.fingerprint}-{next(_SAVED)}.pt"
            atomic_save(state, path)
            record.state_path = str(path)
    return record
