"""Where a result was computed: the commit names the repository that tracks normsys, never one
that merely encloses a copy of it."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from normsys.training import provenance


def git(where: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(where), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], capture_output=True, text=True, check=True).stdout.strip()


def package_in(repo: Path) -> Path:
    copy = repo / "normsys"
    shutil.copytree(provenance.HERE, copy, ignore=shutil.ignore_patterns("datafiles",
                                                                          "__pycache__"))
    return copy


def test_the_commit_of_the_repository_that_tracks_the_package(tmp_path):
    git(tmp_path, "init", "-q")
    package = package_in(tmp_path)
    git(tmp_path, "add", "normsys")
    git(tmp_path, "commit", "-qm", "normsys")
    head = git(tmp_path, "rev-parse", "HEAD")
    assert provenance.git_commit(package) == head
    (package / "training" / "norms.py").write_text("# edited\n")
    assert provenance.git_commit(package) == head + "+changes"


def test_a_copy_inside_another_repository_has_no_commit(tmp_path):
    """A copy of normsys unpacked inside another project's checkout (a GPU session's scratch
    folder, say) is not that project's commit."""
    git(tmp_path, "init", "-q")
    (tmp_path / "other.txt").write_text("another project\n")
    git(tmp_path, "add", "other.txt")
    git(tmp_path, "commit", "-qm", "other")
    package = package_in(tmp_path / "scratch")
    assert provenance.git_commit(package) == "unknown"


def test_no_repository_at_all(tmp_path):
    assert provenance.git_commit(package_in(tmp_path)) == "unknown"



def test_a_kernel_set_chosen_below_the_machines_own_is_keyed_as_emulated_on_it(monkeypatch):
    """ATEN_CPU_CAPABILITY=avx2 on an AVX-512 machine is not an AVX2 machine (MKL keeps its own
    dispatch): its kind names both; a machine whose own kernels are AVX2 is plain AVX2, and so is
    the variable naming the machine's own set."""
    vendor = provenance.cpu_vendor()
    monkeypatch.setattr(provenance.torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    monkeypatch.setattr(provenance, "native_kernels", lambda: "AVX512")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert provenance.cpu_kind() == f"cpu (AVX2 emulated on AVX512, {vendor})"
    assert provenance.numeric_environment(provenance.torch.device("cpu"))["device"] == \
        f"cpu (AVX2 emulated on AVX512, {vendor})"
    monkeypatch.delenv("ATEN_CPU_CAPABILITY")  # not chosen: the machine's own, not asked again
    assert provenance.cpu_kind() == f"cpu (AVX2, {vendor})"
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    monkeypatch.setattr(provenance, "native_kernels", lambda: "AVX2")
    assert provenance.cpu_kind() == f"cpu (AVX2, {vendor})"


@pytest.mark.parametrize("var,name", [("ONEDNN_MAX_CPU_ISA", "oneDNN"),
                                      ("DNNL_MAX_CPU_ISA", "oneDNN"),
                                      ("MKL_ENABLE_INSTRUCTIONS", "MKL"), ("MKL_CBWR", "MKL CBWR")])
def test_a_kernel_librarys_own_cap_is_part_of_the_machine_kind(monkeypatch, var, name):
    """oneDNN and MKL choose their code paths themselves: a cap on one (oneDNN's moves matmuls'
    and convolutions' numbers even with ATen's kernels capped alike) keys the kind, the run cache
    and the entries apart from the machine's own."""
    from normsys.orchestration.cache import environment_digest

    vendor = provenance.cpu_vendor()
    for v in provenance.LIBRARY_CAPS:
        monkeypatch.delenv(v, raising=False)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    monkeypatch.setattr(provenance.torch.backends.cpu, "get_cpu_capability", lambda: "AVX2")
    plain = provenance.numeric_environment(provenance.torch.device("cpu"))
    assert plain["device"] == f"cpu (AVX2, {vendor})"
    monkeypatch.setenv(var, "sse41")
    capped = provenance.numeric_environment(provenance.torch.device("cpu"))
    assert capped["device"] == f"cpu (AVX2, {name} SSE41, {vendor})"
    assert environment_digest(capped) != environment_digest(plain)
    monkeypatch.setattr(provenance, "native_kernels", lambda: "AVX512")
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    assert provenance.cpu_kind() == f"cpu (AVX2 emulated on AVX512, {name} SSE41, {vendor})"
    monkeypatch.setenv(var, " ")  # set to nothing: no cap
    assert provenance.cpu_kind() == f"cpu (AVX2 emulated on AVX512, {vendor})"


def test_the_machines_own_kernels_are_asked_of_a_fresh_interpreter(monkeypatch):
    """torch chooses its kernels once, when it loads: the machine's own set comes from a process
    started without the variable, whatever this one was started with."""
    provenance.native_kernels.cache_clear()
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "default")
    try:
        assert provenance.native_kernels() == provenance.torch.backends.cpu.get_cpu_capability()
    finally:
        provenance.native_kernels.cache_clear()
