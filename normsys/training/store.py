"""Where normsys keeps what it computes, and how it writes there: the cache folder and atomic
writes (a temporary file in the same folder, then a rename), so a reader never sees half a file.

Location: ``$NORMSYS_CACHE`` (default ``~/.cache/normsys``); ``NORMSYS_CACHE=off`` disables
caching. Used by the tokenized-data cache (normsys.training.data) and the run cache.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch


def cache_root() -> Path | None:
    value = os.environ.get("NORMSYS_CACHE", "")
    if value.lower() == "off":
        return None
    if value:
        return Path(value).expanduser().resolve()
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


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes, hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
