"""tests/benchmarks/gpu_session.sh, the device machine's measurement script, run on the CPU: its
time budget, its parts, and its errors (on a CPU every gpu case is skipped)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent / "benchmarks" / "gpu_session.sh"


def session(tmp_path: Path, *stages: str, budget: int = 540, pytest_args: str = "") -> tuple[int, str]:
    env = {**os.environ, "OUT": str(tmp_path / "out"), "GPU_SESSION_BUDGET_S": str(budget),
           "GPU_SESSION_PARTS": str(tmp_path / "parts"), "NORMSYS_CACHE": "off",
           "GPU_SESSION_PYTEST_ARGS": pytest_args}
    done = subprocess.run(["bash", str(SCRIPT), *stages], env=env, capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr


def collected_ids(text: str) -> list[str]:
    """The test ids in pytest output (--collect-only -q prints one a line)."""
    return [line for line in text.splitlines() if "::" in line]


def test_a_spent_budget_lists_every_part_left_for_the_next_call(tmp_path):
    rc, _ = session(tmp_path, "norms-bf16", "train/figure4", budget=0)
    assert rc == 1
    assert (tmp_path / "out" / "not-run.txt").read_text().splitlines() == [
        "norms-bf16/layernorm-rmsnorm", "norms-bf16/l2", "norms-bf16/dyt-batchnorm-none",
        "train/figure4"]


def test_one_part_runs_alone_and_logs_under_out(tmp_path, data_env):
    import torch

    if torch.cuda.is_available():
        pytest.skip("on a GPU the part would measure for real (minutes): run the script itself")
    rc, output = session(tmp_path, "train/figure4")
    assert rc == 0, output
    log = (tmp_path / "out" / "train.log").read_text()
    assert "== train/figure4" in log and "== train/steps" not in log
    assert "1 skipped" in log or "1 passed" in log  # the paper-tier case: skipped without CUDA


def test_an_unknown_stage_is_refused(tmp_path):
    rc, output = session(tmp_path, "norms-fp16")
    assert rc == 2 and "unknown stage 'norms-fp16'" in output


def test_the_norms_parts_run_every_gpu_case_once(tmp_path):
    """The parts' -k expressions partition each norms stage: every gpu case of its dtype in exactly
    one part (a name-substring match such as 'l2' also matches test_layernorm_..._l2_flush)."""
    rc, output = session(tmp_path, "norms-bf16", "norms-fp32", pytest_args="--collect-only -q")
    assert rc == 0, output
    ran = {dtype: collected_ids((tmp_path / "out" / f"norms-{dtype}.log").read_text())
           for dtype in ("bf16", "fp32")}
    every = collected_ids(subprocess.run(
        ["python", "-m", "pytest", str(SCRIPT.parent / "test_bench_norms.py"), "--collect-only",
         "-q", "-p", "no:cacheprovider", "-m", "gpu"],
        capture_output=True, text=True, cwd=SCRIPT.parents[2]).stdout)
    for dtype, cases in ran.items():
        assert len(cases) == len(set(cases)), f"norms-{dtype}: a case runs in two parts"
    assert sorted(ran["bf16"] + ran["fp32"]) == sorted(every)
    assert any("flush" in case for case in ran["bf16"])


def test_a_resumed_part_skips_the_cases_measured_before(tmp_path):
    """Cases any JSON in the parts folder holds (an earlier call's, cut short) are not run again."""
    done = "tests/benchmarks/test_bench_norms.py::test_norm_kernel[l2-normsys-fwd-128-bf16]"
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "norms-bf16-l2-1.json").write_text(json.dumps({
        "machine_info": {"normsys": {"device": "NVIDIA H100 80GB HBM3"}},
        "benchmarks": [{"name": done.split("::")[1], "fullname": done}]}))
    rc, output = session(tmp_path, "norms-bf16/l2", pytest_args="--collect-only -q")
    assert rc == 0, output
    ran = collected_ids((tmp_path / "out" / "norms-bf16.log").read_text())
    assert done not in ran and len(ran) == 107  # of the l2 part's 108 bf16 cases
