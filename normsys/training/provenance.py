"""Where something was computed: the code's commit, the versions, the device. One definition, used
by the run records, the claims report and ledger, and the benchmarks."""

from __future__ import annotations

import platform
import subprocess
import time
from pathlib import Path

import torch

from normsys import __version__

HERE = Path(__file__).parents[1]  # the normsys package


def git_commit(where: Path = HERE) -> str:
    """The commit of the code (with '+changes' when the tracked files differ from it), or
    'unknown' where the package's own files are not tracked by the git repository around them
    (none, or another project's that holds a copy of normsys)."""
    git = ["git", "-C", str(where)]
    try:
        tracked = subprocess.run([*git, "ls-files", "--error-unmatch", "__init__.py"],
                                 capture_output=True, timeout=5).returncode == 0
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=5).stdout.strip()
        dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    if not (tracked and head):
        return "unknown"
    return head + ("+changes" if dirty else "")


def device_name(device: torch.device | None = None) -> str:
    """The GPU's name on CUDA (the machine kind a result belongs to), else "cpu"."""
    if device is None:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def processor() -> str:
    """The CPU's name where the platform says it, else its architecture (Linux leaves
    platform.processor() empty on many hosts)."""
    return platform.processor() or platform.machine() or "unknown"


def environment(device: torch.device) -> dict[str, str]:
    """What a run record keeps of where it ran."""
    name = device_name(device) if device.type == "cuda" else processor()
    return {"torch": torch.__version__, "device": f"{device.type}: {name}",
            "commit": git_commit(), "normsys": __version__, "python": platform.python_version(),
            "threads": str(torch.get_num_threads()), "date": time.strftime("%Y-%m-%d %H:%M")}
