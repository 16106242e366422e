"""On-disk cache of run records so that several claims share one training run.

Key: the config fingerprint and the normsys version. Location: ``$NORMSYS_CACHE`` (default
``~/.cache/normsys``); ``NORMSYS_CACHE=off`` disables it. Writes are atomic (temp file + rename);
an entry that cannot be read or does not match its key is recomputed, never trusted. A file lock
per key makes concurrent pytest-xdist workers safe: one trains, the others wait and then read.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

import torch
from filelock import FileLock, Timeout

from normsys import __version__
from normsys.config import RunConfig
from normsys.record import RunRecord


def cache_root() -> Path | None:
    value = os.environ.get("NORMSYS_CACHE", "")
    if value.lower() == "off":
        return None
    if value:
        return Path(value)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "normsys"


def _atomic_write(path: Path, write: Callable[[str], None]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_save(obj, path: Path) -> None:
    """torch.save to ``path`` via a temporary file in the same folder and an atomic rename."""
    _atomic_write(path, lambda tmp: torch.save(obj, tmp))


def atomic_write_text(text: str, path: Path) -> None:
    _atomic_write(path, lambda tmp: Path(tmp).write_text(text))


def run_key(config: RunConfig) -> str:
    return f"{config.fingerprint()}-v{__version__}"


def _load(json_path: Path, config: RunConfig) -> RunRecord | None:
    """The stored record if it is whole, matches the key and its weights check out; else None."""
    try:
        payload = json.loads(json_path.read_text())
        record = RunRecord.from_json(json.dumps(payload["record"]))
        if (record.fingerprint != config.fingerprint() or record.version != __version__
                or payload["sha256"] != _digest(payload["record"])):
            return None
        if record.state_path is not None:
            state = Path(record.state_path)
            if not state.is_file() or payload.get("state_sha256") != _file_digest(state):
                return None
        return record
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def _file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cached_run(config: RunConfig, compute: Callable[[RunConfig], tuple[RunRecord, dict | None]],
               wait: bool = True) -> RunRecord | None:
    """The record of ``config``: from the cache when a valid entry exists, else computed and stored.

    ``compute`` returns (record, state_dict or None). With ``wait=False`` a run that another
    process holds (is training) is not waited for: the answer is None, so that the caller can do
    other work first and ask again.
    """
    root = cache_root()
    if root is None:
        return compute(config)[0]
    runs = root / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    key = run_key(config)
    json_path, state_path = runs / f"{key}.json", runs / f"{key}.pt"
    try:
        with FileLock(str(runs / f"{key}.lock"), timeout=-1 if wait else 0):
            record = _load(json_path, config) if json_path.exists() else None
            if record is None:
                record = _store(*compute(config), json_path, state_path)
            return record
    except Timeout:
        return None


def cached_runs(configs: list[RunConfig],
                compute_many: Callable[[list[RunConfig]], list[tuple[RunRecord, dict | None]]]
                ) -> list[RunRecord]:
    """Like cached_run for several configs; the missing ones are computed together (one call)."""
    root = cache_root()
    if root is None:
        return [record for record, _ in compute_many(configs)]
    runs = root / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    paths = {c: (runs / f"{run_key(c)}.json", runs / f"{run_key(c)}.pt") for c in configs}
    with ExitStack() as stack:
        for key in sorted({run_key(c) for c in configs}):  # one global order: no deadlock
            stack.enter_context(FileLock(str(runs / f"{key}.lock")))
        found = {c: _load(paths[c][0], c) if paths[c][0].exists() else None for c in configs}
        missing = [c for c in dict.fromkeys(configs) if found[c] is None]
        if missing:
            for c, (record, state) in zip(missing, compute_many(missing), strict=True):
                found[c] = _store(record, state, *paths[c])
        return [found[c] for c in configs]


def _store(record: RunRecord, state: dict | None, json_path: Path, state_path: Path) -> RunRecord:
    payload: dict = {}
    if state is not None:
        atomic_save(state, state_path)
        record.state_path = str(state_path)
        payload["state_sha256"] = _file_digest(state_path)
    body = json.loads(record.to_json())
    payload.update(record=body, sha256=_digest(body))
    atomic_write_text(json.dumps(payload), json_path)
    return record
