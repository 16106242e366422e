"""The benchmark results tools: merging one device's files, README's table from a results JSON."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

import bench
import bench_results
import pytest
from bench import CudaTimer, use_times
from bench_results import main, merge, table


def result(device: str, benchmarks: list[dict]) -> dict:
    for b in benchmarks:  # pytest-benchmark's test id of each case
        b.setdefault("fullname", f"tests/benchmarks/test_bench.py::{b['name']}")
    return {"machine_info": {"normsys": {"device": device, "peak_memory_bandwidth_Bps": 4.8e12}},
            "benchmarks": benchmarks}


def norm(provider: str, seconds: float, kind="layernorm", mode="fwd", hidden=4096,
         rows=None) -> dict:
    extra = {"kind": kind, "provider": provider, "mode": mode, "dtype": "bf16", "hidden": hidden,
             "rows": (8 << 20) // hidden if rows is None else rows,
             "GBps": 16.8e6 / seconds / 1e9, "fraction_of_peak_bandwidth": 16.8e6 / seconds / 4.8e12}
    return {"name": f"test_norm_kernel[{kind}-{provider}]", "stats": {"median": seconds},
            "extra_info": extra}


def flushed(flush: str, seconds: float) -> dict:
    case = norm("torch", seconds, mode="fwd+bwd")
    case["extra_info"]["flush"] = flush
    return {**case, "name": f"test_layernorm_bf16_4096_after_each_l2_flush[{flush}]"}


def test_table_reports_bandwidth_and_the_worst_ratio_to_the_best_other_provider():
    data = result("NVIDIA H200", [
        norm("normsys", 5e-6), norm("torch", 4e-6), norm("compile", 6e-6),
        norm("normsys", 9e-6, kind="l2", hidden=8192), norm("compile", 3e-6, kind="l2", hidden=8192),
        {"name": "test_train_step_eager_notebook_loop[paper]", "stats": {"median": 1.0},
         "extra_info": {"tokens_per_s": 1000.0, "mfu": 0.01}},
        {"name": "test_train_step_normsys_core[paper]", "stats": {"median": 0.1},
         "extra_info": {"tokens_per_s": 12000.0, "mfu": 0.12}},
        {"name": "test_paper_tier_figure4_wall_time[paper]", "stats": {"median": 250.0},
         "extra_info": {"wall_time_s": 250.0, "tier": "paper", "seeds": 5, "train_rows": 120_000,
                        "pool_train_rows": 8_000,
                        "seconds_per_norm": {"layernorm": 90.0, "l2": 85.0, "none": 75.0}}},
        flushed("read", 4e-6), flushed("write", 8e-6)])
    text = table(data)
    assert "| layernorm | fwd | bf16 | 4096 | 3,360 | 0.70 | 1.25 |" in text
    assert "| l2 | 3.00 | fwd bf16 h=8192 |" in text and "| layernorm | 1.25 |" in text
    assert "| test_train_step_normsys_core[paper] | 12,000 | 12.0 | 0.120 |" in text
    assert ("Paper-tier Figure 4 (3 norms x 5 seeds; 120,000 train rows: the 8,000-row offline "
            "pool repeated): 250 s (layernorm 90 s, l2 85 s, none 75 s)") in text
    assert ("torch layernorm fwd+bwd bf16 h=4096: 4,200 GB/s after the read flush used above, "
            "2,100 GB/s after a write flush") in text
    assert "fwd+bwd | bf16" not in text  # the flush cases stay out of the provider comparison


def test_targets_take_the_worst_full_size_case_and_say_what_was_not_measured():
    """Each speed target from the worst case it speaks of; the CPU smoke cases and the
    identity (no kernel: its ratios are the timer's noise) count for none of them."""
    data = result("NVIDIA H100 80GB HBM3", [
        norm("normsys", 4e-6), norm("torch", 4e-6),                      # fwd: 0.875 of peak
        norm("normsys", 4e-6, kind="rmsnorm", hidden=8192), norm("torch", 3.9e-6, kind="rmsnorm",
                                                                  hidden=8192),
        norm("normsys", 9e-6, mode="fwd+bwd"), norm("torch", 8e-6, mode="fwd+bwd"),  # 0.39: not met
        norm("normsys", 9e-6, hidden=256, rows=64), norm("torch", 1e-6, hidden=256, rows=64),
        norm("normsys", 5e-6, kind="none"), norm("compile", 1e-6, kind="none"),
        {"name": "test_train_step_eager_notebook_loop[paper]", "stats": {"median": 1.0},
         "extra_info": {"tokens_per_s": 1000.0}},
        {"name": "test_train_step_normsys_core[paper-auto]", "stats": {"median": 0.1},
         "extra_info": {"tokens_per_s": 9000.0}},
        {"name": "test_train_step_normsys_core[paper-cudagraphs]", "stats": {"median": 0.1},
         "extra_info": {"tokens_per_s": 11000.0}},
        {"name": "test_train_step_normsys_core[cpu-smoke]", "stats": {"median": 0.1},
         "extra_info": {"tokens_per_s": 1e9}},
        {"name": "test_train_step_normsys_core_5_seeds_batched[paper-on]", "stats": {"median": 1},
         "extra_info": {"tokens_per_s": 22000.0}},
        {"name": "test_paper_tier_figure4_wall_time[paper]", "stats": {"median": 30.0},
         "extra_info": {"wall_time_s": 30.0, "tier": "paper", "train_rows": 8_000}},
        {"name": "test_claims_wall_time_end_to_end[cpu-smoke]", "stats": {"median": 9.0},
         "extra_info": {"wall_time_s": 9.0, "claims": 2, "verdicts": {"supported": 2}}},
        {"name": "test_claims_wall_time_end_to_end[paper]", "stats": {"median": 480.0},
         "extra_info": {"wall_time_s": 480.0, "claims": 41, "command": "pytest claims -m gpu",
                        "verdicts": {"supported": 20, "refuted": 21}}}])
    assert [(value, verdict) for _, value, verdict in bench_results.targets(data)] == [
        ("worst 0.88 (layernorm h=4096; 2 cases)", "met"),                 # fwd >= 0.80 of peak
        ("worst 0.39 (layernorm h=4096; 1 cases)", "NOT met"),             # fwd+bwd >= 0.50
        ("worst 1.12 (layernorm fwd+bwd bf16 h=4096; 3 cases)", "NOT met"),  # within 10%
        ("11.0x (test_train_step_normsys_core[paper-cudagraphs])", "met"),  # >= 10x eager
        ("2.0x (test_train_step_normsys_core_5_seeds_batched[paper-on] over "
         "test_train_step_normsys_core[paper-cudagraphs])", "NOT met"),     # 5 seeds >= 3x one
        ("-", "not measured"),     # Figure 4 < 300 s: on 8,000 rows, not the official 120,000
        ("480 s, 0 errors", "met")]  # the whole paper tier < 600 s (the CPU smoke job is not it)
    text = table(data)
    assert "| paper-tier Figure 4 in < 300 s | - | not measured |" in text
    assert "`pytest claims -m gpu`: 480 s for 41 claims (21 refuted, 20 supported)" in text


def test_merge_joins_one_device_and_refuses_two(tmp_path):
    a, b, c = (tmp_path / n for n in ("a.json", "b.json", "c.json"))
    a.write_text(json.dumps(result("H200", [norm("normsys", 1e-5)])))
    b.write_text(json.dumps(result("H200", [norm("torch", 1e-5)])))
    c.write_text(json.dumps(result("H100", [norm("torch", 1e-5)])))
    assert main(["merge", str(tmp_path / "m.json"), str(a), str(b)]) == 0
    assert len(json.loads((tmp_path / "m.json").read_text())["benchmarks"]) == 2
    with pytest.raises(ValueError, match="one device"):
        merge([a, c])
    empty = tmp_path / "skipped.json"  # what pytest-benchmark leaves when every case was skipped
    empty.write_text("")
    assert len(merge([a, empty])["benchmarks"]) == 1
    with pytest.raises(ValueError, match="no measurements"):
        merge([empty])


def test_a_case_measured_twice_is_merged_once_and_resuming_skips_what_was_measured(tmp_path, capsys):
    """A resumed device session re-measures nothing it has (bench measured -> --deselect), and a
    case that was measured again anyway appears once in the merge: the later file's."""
    first, again = tmp_path / "first.json", tmp_path / "again.json"
    first.write_text(json.dumps(result("H100", [norm("normsys", 1e-5), norm("torch", 1e-5)])))
    again.write_text(json.dumps(result("H100", [norm("normsys", 2e-5)])))
    merged = merge([first, again])["benchmarks"]
    assert sorted((b["name"], b["stats"]["median"]) for b in merged) == [
        ("test_norm_kernel[layernorm-normsys]", 2e-5), ("test_norm_kernel[layernorm-torch]", 1e-5)]
    (tmp_path / "skipped.json").write_text("")
    assert main(["measured", str(first), str(again), str(tmp_path / "skipped.json")]) == 0
    assert capsys.readouterr().out.split() == [
        "tests/benchmarks/test_bench.py::test_norm_kernel[layernorm-normsys]",
        "tests/benchmarks/test_bench.py::test_norm_kernel[layernorm-torch]"]


def test_device_times_replace_the_host_times_in_the_benchmark_stats():
    """On CUDA the stats that pytest-benchmark writes (and `compare` shows) are the CUDA-event
    times, also when a statistic was already computed from the host times."""
    from pytest_benchmark.stats import Stats

    stats = Stats()
    for host in (3e-5, 2e-5, 4e-5):
        stats.update(host)
    assert stats.median == 3e-5  # cached from the host times
    bench = SimpleNamespace(stats=SimpleNamespace(stats=stats))
    use_times(bench, [1e-5, 3e-5, 2e-5])
    assert stats.median == 2e-5 and stats.min == 1e-5 and stats.rounds == 3
    assert stats.as_dict()["max"] == 3e-5
    with pytest.raises(ValueError, match="2 device times for 3 benchmark rounds"):
        use_times(bench, [1e-5, 2e-5])
    use_times(SimpleNamespace(stats=None), [1e-5])  # benchmarks disabled: nothing to replace
    with pytest.raises(ValueError, match="'read' or 'write'"):
        CudaTimer(hide_launch=True, flush="none")


class HostEvent:
    """torch.cuda.Event on the host clock, so the CUDA timing path runs on a CPU."""

    def __init__(self, enable_timing: bool):
        self.at = None

    def record(self):
        self.at = time.perf_counter()

    def elapsed_time(self, end: HostEvent) -> float:
        return (end.at - self.at) * 1e3  # milliseconds, like CUDA events


class PedanticOnly:
    """The part of pytest-benchmark's fixture that run_benchmark uses, with real Stats."""

    def __init__(self):
        from pytest_benchmark.stats import Stats

        self.stats, self.extra_info = SimpleNamespace(stats=Stats()), {}

    def pedantic(self, target, setup=None, rounds=1, iterations=1):
        for _ in range(rounds):
            setup()
            start = time.perf_counter()
            target()
            self.stats.stats.update(time.perf_counter() - start + 1.0)  # host time: 1 s too much


@pytest.mark.parametrize("hide_launch,flush", [(True, "read"), (False, "read"), (True, "write")])
def test_cuda_timing_path_on_the_host_clock(monkeypatch, hide_launch, flush):
    """run_benchmark's CUDA branch, with events, spin kernel and syncs faked: a kernel benchmark
    spins once per repeat and synchronizes only to read the events; a training benchmark
    synchronizes every repeat and never spins; either way the stats become the event times."""
    import torch

    calls = []
    monkeypatch.setattr(bench, "device", lambda: torch.device("cuda"))
    monkeypatch.setattr(torch.cuda, "Event", HostEvent)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: calls.append("sync"))
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: calls.append("spin"))
    zeros = torch.zeros
    monkeypatch.setattr(torch, "zeros", lambda *a, device=None, **kw: zeros(*a, **kw))  # the flush
    fake = PedanticOnly()
    median = bench.run_benchmark(fake, lambda: time.sleep(2e-3), rounds=7, hide_launch=hide_launch,
                                 flush=flush)
    assert 2e-3 <= median < 0.5 and median == fake.stats.stats.median  # event times, not host + 1 s
    assert calls.count("spin") == (7 if hide_launch else 0)
    # warm-up, (before and after every repeat), reading the events
    assert calls.count("sync") == (2 if hide_launch else 1 + 7 + 7 + 1)
    assert fake.extra_info["timer"] == f"cuda events, {flush} flush" + (
        ", launch hidden" if hide_launch else "")


def step(name: str, tokens_per_s: float, mfu: float | None) -> dict:
    return {"name": name, "stats": {"median": 1.0},
            "extra_info": {"tokens_per_s": tokens_per_s, "mfu": mfu, "seeds": 1}}


def test_compare_puts_devices_side_by_side_with_the_ratio_to_the_first(capsys, tmp_path):
    a = result("GPU A", [step("t[one]", 1_000_000, 0.01), step("t[a-only]", 5.0, None),
                         norm("normsys", 1e-5)])
    b = result("GPU B", [step("t[one]", 2_500_000, 0.02), norm("normsys", 2e-5)])
    assert bench_results.compare([a, b]).splitlines() == [
        "| benchmark | unit | GPU A | of peak | GPU B | of peak | GPU B / GPU A |",
        "|---|---|---|---|---|---|---|",
        "| t[a-only] | tokens/s | 5 | - | - | - | - |",
        "| t[one] | tokens/s | 1,000,000 | 0.010 | 2,500,000 | 0.020 | 2.50 |",
        "| test_norm_kernel[layernorm-normsys] | GB/s | 1,680 | 0.350 | 840 | 0.175 | 0.50 |"]
    paths = [tmp_path / "a.json", tmp_path / "b.json"]
    for path, r in zip(paths, (a, b), strict=True):
        path.write_text(json.dumps(r))
    assert main(["compare", *map(str, paths)]) == 0
    assert "| t[one] | tokens/s | 1,000,000 |" in capsys.readouterr().out
    assert main(["compare", str(paths[0])]) == 2
    assert "two results files or more" in capsys.readouterr().err


def test_a_cpu_results_file_reads_as_its_steps_without_the_gpu_targets():
    cpu = result("cpu", [{"name": "test_cpu_tier_training_step[lstm]", "stats": {"median": 1.0},
                          "extra_info": {"steps_per_s": 11.55, "gflops": 76.6, "threads": 2,
                                         "fraction_of_matmul_peak": 0.386,
                                         "matmul_peak_gflops": 198.2}}])
    cpu["machine_info"]["normsys"].update(torch="2.13.0+cpu", cpu_threads=2)
    assert table(cpu).splitlines() == [
        "**cpu** (CPU; torch 2.13.0+cpu, 2 threads)", "",
        "| training step (CPU-tier settings) | steps/s | GFLOP/s | of matmul peak (GFLOP/s) "
        "| threads |", "|---|---|---|---|---|",
        "| test_cpu_tier_training_step[lstm] | 11.6 | 77 | 0.39 (198) | 2 |"]
    assert bench_results.rates(cpu) == {"test_cpu_tier_training_step[lstm]":
                                        ("steps/s", 11.55, 0.386)}


def test_merge_can_name_the_commit_that_ran(tmp_path):
    path = tmp_path / "in.json"
    path.write_text(json.dumps({**result("GPU A", [step("t", 1.0, None)]),
                                "commit_info": {"id": "other-repository"}}))
    assert main(["merge", str(tmp_path / "out.json"), str(path), "--commit", "9ae600b"]) == 0
    info = json.loads((tmp_path / "out.json").read_text())["commit_info"]
    assert info == {"id": "9ae600b", "measured_in": "other-repository"}


def test_the_results_page_is_what_the_committed_results_make():
    page = bench_results.PAGE
    assert page.read_text() == bench_results.docs(), \
        f"{page} is stale: run python tests/benchmarks/bench_results.py docs"
    assert "## The GPUs side by side" in page.read_text()


def test_the_captured_step_table_reads_each_run_line_and_counts_the_bit_identical():
    lines = ("captured vs eager lstm/bp/none/x1 s0: 120 steps, 116 replays, bit-identical=False, "
             "gaps {'final_loss': 1.9e-05}, largest per-step loss gap 1.44e-04; wall 1.9 s "
             "captured, 12.2 s eager\nDEBUG noise\n"
             "captured vs eager encoder/bp/dyt/x1 s0: 32 steps, 28 replays, bit-identical=True, "
             "gaps {'final_loss': 0.0}, largest per-step loss gap 0.00e+00; wall 1.7 s captured, "
             "12.2 s eager\n")
    text = bench_results.captured_vs_eager(lines + lines.splitlines()[-1].replace("s0", "s1"))
    assert text.startswith("3 runs (family/rule/norm/seeds stacked, seed), 2 of them bit-identical")
    text = bench_results.captured_vs_eager(lines)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "/" in line]
    assert rows == ["| encoder/bp/dyt/x1 s0 | 32 | 28 | True | {'final_loss': 0.0} | 0.00e+00 "
                    "| 1.7 | 12.2 |",
                    "| lstm/bp/none/x1 s0 | 120 | 116 | False | {'final_loss': 1.9e-05} | 1.44e-04 "
                    "| 1.9 | 12.2 |"]
    with pytest.raises(ValueError, match="no 'captured vs eager' lines"):
        bench_results.captured_vs_eager("19 passed")


def test_the_captured_step_table_reads_the_line_the_gpu_test_prints():
    """The GPU test prints bench.CAPTURED_VS_EAGER; the table reads it back, every field."""
    line = bench.CAPTURED_VS_EAGER.format(
        run="resmlp/dfa/layernorm/x3", seed=2, steps=16, replays=12, same=False,
        gaps={"final_loss": 3.2e-05}, worst=4.4e-4, captured=0.94, eager=7.25)
    assert bench.CAPTURED_LINE.findall(f"noise\n{line}\n") == [(
        "resmlp/dfa/layernorm/x3", "s2", "16", "12", "False", "{'final_loss': 3.2e-05}",
        "4.40e-04", "0.9", "7.2")]
    assert "| resmlp/dfa/layernorm/x3 s2 | 16 | 12 | False |" in bench_results.captured_vs_eager(line)


def test_a_planned_sessions_prediction_is_set_beside_when_its_plan_was_trained():
    log = ("normsys: planned: 240 runs, 230 of them not cached: ~3.4 min of training on 8 "
           "process(es) as their run times record them\n"
           "normsys: the 240 planned runs are taken (37 trained by this process, the others "
           "cached or training elsewhere); the claims start, 199 s into the session\n"
           "xnormsys: the 240 planned runs are taken (3 trained by this process, the others "
           "cached or training elsewhere); the claims start, 210 s into the session\n")
    assert bench_results.predicted(log) == (
        ". When it started, it predicted ~204 s of training for its plan (240 runs, 230 not "
        "cached, on 8 processes); its last process had trained its share 210 s into the session "
        "(the first 199 s)")
    assert bench_results.predicted(log.splitlines()[0]) == ""  # stopped before its plan was done
    controls = log.replace("as their run times record them\n", "as their run times record them; "
                           "then the negative controls: 167 runs besides the claims' (6 cached; "
                           "the others ~54.5 min of training as recorded); in all ~7.0 min on 8 "
                           "process(es)\n", 1)
    assert bench_results.predicted(controls) == (
        ". When it started, it predicted ~204 s of training for its plan (240 runs, 230 not "
        "cached, on 8 processes), and ~420 s with its negative controls' 167 runs of their own; "
        "its last process had trained its share 210 s into the session (the first 199 s)")
    assert bench_results.predicted("\n".join(log.splitlines()[1:])) == ""  # planned nothing


def test_a_cold_cpu_session_is_its_training_over_its_processes_against_its_wall():
    def trained(k: int, fingerprint: str, seconds: int, where: str = "cpu (AVX2, AMD)") -> str:
        return (f"normsys: training lstm/none/bp/s{k} (cpu tier, {fingerprint}) ...\n"
                f"normsys: [run {k + 1} of 3, ~1.0 min of training left] lstm/none/bp/s{k} (cpu "
                f"tier, {fingerprint}): trained in {seconds} s ({where}, 1 thread(s), torch "
                f"2.13.0+cpu)\n")
    log = ("normsys: planned: 3 runs, 3 of them not cached: ~1.5 min of training on 2 "
           "process(es) as their run times record them\n" + trained(0, "0000000a", 100)
           + trained(1, "0000000b", 60) + trained(2, "0000000c", 50)
           + "normsys: the 3 planned runs are taken (2 trained by this process, the others cached "
             "or training elsewhere); the claims start, 112 s into the session\n"
           + "=========== 3 passed, 1 skipped in 131.50s (0:02:11) ============\n")
    assert bench_results.trained_on(log) == "cpu (AVX2, AMD), 1 thread(s), torch 2.13.0+cpu"
    assert bench_results.cpu_session(log) == (
        "3 runs, 210 s of one-core training in all, the longest 100 s, trained on cpu (AVX2, "
        "AMD), 1 thread(s), torch 2.13.0+cpu. The session took 132 s on 2 processes; its "
        "training alone, longest first, takes 110 s of it (bound by the total over 2 places, "
        "105 s). When it started, it predicted ~90 s of training for its plan (3 runs, 3 not "
        "cached, on 2 processes); its last process had trained its share 112 s into the session "
        "(the first 112 s).")
    with pytest.raises(ValueError, match="no trained runs or no closing line"):
        bench_results.cpu_session(log.rsplit("=", 30)[0])  # stopped before its closing line
    with pytest.raises(ValueError, match="2 environments: cpu \\(AVX2, AMD\\), .*; cpu \\(AVX512"):
        bench_results.trained_on(log + trained(3, "0000000d", 9, "cpu (AVX512, Intel)"))
    assert bench_results.trained_on("no runs") == ""
    cached = "normsys: [cached] x (cpu tier, 0000000e): trained in 3 s on 2026-11-27 01:14 " \
             "(NVIDIA H200, 2 thread(s))\n"  # a line of a cached run says when, then where
    assert bench_results.trained_on(cached) == "NVIDIA H200, 2 thread(s)"


def test_the_page_gives_a_cpu_sessions_log_its_own_section_and_a_gpus_the_gpu_layout(tmp_path):
    cpu, gpu = (tmp_path / "cpu-x-claims-cold.log", tmp_path / "NVIDIA-X-cold.log")
    line = ("normsys: training m (paper tier, 0000000a) ...\nnormsys: [run 1 of 1] m (paper tier, "
            "0000000a): trained in 5 s ({})\n========= 1 passed in 9.00s =========\n")
    cpu.write_text(line.format("cpu (AVX2, AMD), 1 thread(s)"))
    gpu.write_text(line.format("NVIDIA X, 2 thread(s)"))
    page = bench_results.docs(tmp_path)
    assert f"## A cold CPU-tier session: {cpu.name}\n\n1 runs, 5 s of one-core training" in page
    assert f"## On more GPUs: the tasks of {gpu.name}\n\n1 training tasks" in page
    assert [h for h in page.splitlines() if h.startswith("## ")] == [
        f"## On more GPUs: the tasks of {gpu.name}", f"## A cold CPU-tier session: {cpu.name}",
        "## The CPU tier on 2 cores: the runs of claims/run-times-cpu.json"]
