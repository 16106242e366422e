"""Where something was computed: the code's commit, the versions, the device. One definition, used
by the run records, the run cache's key, the claims report and ledger, and the benchmarks.

A run's numbers depend on more than its config, data and code: on the kernels its device runs
(a CPU's vector instructions, a GPU model), the torch threads a reduction is split over, the torch
version and the autocast dtype. ``numeric_environment`` declares those once; the cache keys each
record on it, the record and the ledger entries carry it, and the ledger's file name is read from
it, so a number is never served to, or compared as if it came from, another environment."""

from __future__ import annotations

import ast
import functools
import io
import os
import platform
import subprocess
import sys
import time
import tokenize
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


def code_text(path: Path) -> bytes:
    """A Python file's code as what can change a number: its tokens, without comments, docstrings,
    blank lines or the line breaks inside brackets (so editing those keys no cache anew and
    unrecords nothing), lines and indentation kept; a file that does not parse, its bytes."""
    source = Path(path).read_bytes()
    try:
        tree = ast.parse(source)
        docs = {(node.body[0].lineno, node.body[0].col_offset) for node in ast.walk(tree)
                if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                     ast.AsyncFunctionDef)) and node.body
                and isinstance(node.body[0], ast.Expr)
                and isinstance(node.body[0].value, ast.Constant)
                and isinstance(node.body[0].value.value, str)}
        tokens = list(tokenize.tokenize(io.BytesIO(source).readline))
    except (SyntaxError, tokenize.TokenError, ValueError):
        return source
    marks = {tokenize.NEWLINE: "\n", tokenize.INDENT: ">", tokenize.DEDENT: "<"}
    words: list[str] = []
    after_doc = False  # a docstring's line leaves no trace, its line break neither
    for tok in tokens:
        if tok.type in (tokenize.COMMENT, tokenize.NL, tokenize.ENCODING):
            continue
        if tok.type == tokenize.STRING and tok.start in docs:
            after_doc = True
        elif not (after_doc and tok.type == tokenize.NEWLINE):
            after_doc = False
            words.append(marks.get(tok.type, tok.string))
    return " ".join(words).encode()


def device_name(device: torch.device | None = None) -> str:
    """The GPU's name on CUDA (the machine kind a result belongs to), else "cpu"."""
    if device is None:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def cpu_kernels() -> str:
    """The instruction set torch's CPU kernels dispatch to on this machine (AVX512, AVX2, DEFAULT,
    ...), with the machine's own where ``ATEN_CPU_CAPABILITY`` chose a lower one: ``AVX2 emulated
    on AVX512``, and the kernel libraries' own caps (``library_caps``). An emulated set is not the
    kind it names (oneDNN keeps its own dispatch unless capped too: AVX2 emulated on an AVX-512
    AMD rounds otherwise than an AVX2 AMD), so it is keyed apart."""
    dispatched = torch.backends.cpu.get_cpu_capability()
    native = native_kernels() if os.environ.get("ATEN_CPU_CAPABILITY") else dispatched
    return (dispatched if native == dispatched else f"{dispatched} emulated on {native}") + \
        library_caps()


# The variables with which a kernel library torch calls chooses its own code path, apart from
# ATen's ATEN_CPU_CAPABILITY: each set one keys the numbers made under it. Measured on an AMD
# Zen 3 (AVX2) with torch 2.13: ONEDNN_MAX_CPU_ISA=SSE41 moves a char GPT's, a CNN's and a
# residual MLP's losses (matmuls and convolutions), with ATen's kernels capped or not;
# MKL_ENABLE_INSTRUCTIONS (SSE4_2, AVX) moved none there (MKL on Intel honours it)
LIBRARY_CAPS = {"ONEDNN_MAX_CPU_ISA": "oneDNN", "DNNL_MAX_CPU_ISA": "oneDNN",
                "MKL_ENABLE_INSTRUCTIONS": "MKL", "MKL_CBWR": "MKL CBWR"}


def library_caps() -> str:
    """The kernel libraries' own caps this process was started with (``LIBRARY_CAPS``), as they
    read in a machine kind: ``, oneDNN SSE41``; "" where none is set."""
    return "".join(f", {name} {os.environ[var].strip().upper()}"
                   for var, name in LIBRARY_CAPS.items() if os.environ.get(var, "").strip())


@functools.cache
def native_kernels() -> str:
    """The kernel set torch dispatches to on this machine by itself: asked of a fresh interpreter
    without ``ATEN_CPU_CAPABILITY``, since the choice is made once, when torch loads."""
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    ask = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    try:
        return subprocess.run([sys.executable, "-c", ask], env=env, capture_output=True,
                              text=True, timeout=120, check=True).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def cpu_vendor() -> str:
    """Who made this CPU (Intel, AMD, or the architecture where the system does not say): MKL and
    oneDNN choose their code paths by vendor too, so two CPUs of the same kernel set round
    otherwise (AVX-512 on an Intel Xeon and on an AMD EPYC: 42 of 47 CPU-tier claims' per-seed
    values differ)."""
    names = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("vendor_id"):
                    vendor = line.split(":", 1)[1].strip()
                    return names.get(vendor, vendor)
    except OSError:
        pass
    return platform.machine() or "unknown"


def cpu_kind() -> str:
    """The CPU as a machine kind, its kernels and vendor: ``cpu (AVX512, AMD)``."""
    return f"cpu ({cpu_kernels()}, {cpu_vendor()})"


NUMERIC_FIELDS = ("device", "threads", "torch", "autocast")  # what numeric_environment says


def numeric_environment(device: torch.device | None = None, amp: bool = False) -> dict[str, str]:
    """What a computation on ``device`` (None: CUDA where there is one, else the CPU) computes its
    numbers under here, besides its inputs and code: the device (the GPU's name, or the CPU with
    the kernels it runs and its vendor, ``cpu_kind``), torch's threads and version, and
    the autocast dtype (``amp``: bf16 autocast, the CUDA fast path)."""
    name = device_name(device)
    return {"device": cpu_kind() if name == "cpu" else name,
            "threads": str(torch.get_num_threads()), "torch": torch.__version__,
            "autocast": "bfloat16" if amp else "off"}


def numeric_of(env: dict[str, str]) -> dict[str, str]:
    """The numeric environment a record's or an entry's ``env`` names (absent fields ``?``: made
    before they were recorded)."""
    return {k: str(env.get(k, "?")) for k in NUMERIC_FIELDS}


def processor() -> str:
    """The CPU's name where the platform says it, else its architecture (Linux leaves
    platform.processor() empty on many hosts)."""
    return platform.processor() or platform.machine() or "unknown"


def environment(device: torch.device, amp: bool = False) -> dict[str, str]:
    """What a run record keeps of where it ran: its numeric environment (the run cache's key
    reads it back, ``numeric_of``), the processor, the code and when."""
    return {**numeric_environment(device, amp), "processor": processor(), "commit": git_commit(),
            "normsys": __version__, "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M")}
