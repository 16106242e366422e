"""The training core: determinism, divergence, records, CLI, FA-protocol diagnostics."""

from __future__ import annotations

import itertools
import json
import math
import time
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch

from normsys.declarations.shared.protocol import disjoint_batches, fa_protocol_report
from normsys.training.config import preset
from normsys.training.steplog import StepLog, empty_curves
from normsys.training.train import (
    HOST_READ_EVERY,
    make_optimizer,
    run_context,
    train,
    train_with_state,
)

SMALL_FFN = {"train.steps": 8, "model.d": 16, "data.batch_shape": (4, 5, 16)}


def test_same_config_and_seed_give_identical_records(no_cache):
    a, b = train(preset("ffn_stack", **SMALL_FFN)), train(preset("ffn_stack", **SMALL_FFN))
    assert a.curves == b.curves and a.metrics == b.metrics and a.init_grad_norms == b.init_grad_norms
    c = train(preset("ffn_stack", **SMALL_FFN, **{"train.seed": 1}))
    assert c.curves["loss"] != a.curves["loss"]


def test_a_records_wall_time_is_the_time_its_training_took(no_cache):
    before = time.perf_counter()
    record = train(preset("ffn_stack", **SMALL_FFN))
    assert 0 < record.wall_time <= time.perf_counter() - before


@pytest.mark.parametrize("name,kind", [("adam", torch.optim.Adam), ("adamw", torch.optim.AdamW)])
def test_the_optimizer_is_the_one_the_config_names_with_its_settings(name, kind):
    """Adam's weight decay is an L2 term in the gradient, AdamW's a decoupled decay: with a decay
    set they train differently, so the config's name must pick the class."""
    cfg = preset("ffn_stack", **SMALL_FFN, **{"train.optimizer": name, "train.lr": 0.003,
                                              "train.weight_decay": 0.1})
    opt = make_optimizer(cfg, [torch.nn.Parameter(torch.ones(2))], torch.device("cpu"))
    assert type(opt) is kind
    assert opt.defaults["lr"] == 0.003 and opt.defaults["weight_decay"] == 0.1


def test_a_run_reads_its_log_every_step_on_the_cpu_and_casts_to_bf16_on_cuda(recwarn):
    """What a run's context asks of its device, pinned on a machine without one: on the CPU the
    step log is read every step (a diverging run stops before its next update) and nothing is
    cast; on CUDA the log is read every HOST_READ_EVERY steps and the step runs under bf16
    autocast (its numerics: tests/test_gpu_fast_path.py, on a GPU)."""
    cfg = preset("ffn_stack")
    cpu, cuda = (run_context(cfg, torch.device(d), 1000) for d in ("cpu", "cuda"))
    assert (cpu.read_every, cpu.amp) == (1, False) and (cuda.read_every, cuda.amp) == \
        (HOST_READ_EVERY, True)
    assert run_context(cfg.override(**{"train.amp": "off"}), torch.device("cuda"), 10).amp is False
    assert run_context(cfg, torch.device("cuda"), 10, read_every=3).read_every == 3
    assert not isinstance(cpu.autocast(), torch.autocast)
    cast = cuda.autocast()  # on a machine without CUDA torch makes it and switches it off
    assert isinstance(cast, torch.autocast) and (cast.device, cast.fast_dtype) == \
        ("cuda", torch.bfloat16)


def test_divergence_is_recorded_not_raised(no_cache):
    cfg = preset("ffn_stack", **SMALL_FFN, **{"model.norm": "none", "model.residual": False,
                                               "train.lr": 1e30})
    record = train(cfg)
    assert record.diverged and record.steps < 8
    assert math.isnan(record.metrics["val_loss"])


def test_a_diverged_classifier_has_nan_accuracies_and_loss_and_no_probes(data_env, no_cache):
    """Nothing of a diverged model is measured: its accuracies and held-out loss are NaN and it
    has no probes, where the same run at a sane learning rate has both."""
    cfg = preset("resmlp", **{"model.d": 32, "model.layers": 2, "data.n_train": 256,
                              "data.n_test": 128, "train.batch_size": 64, "train.steps": 4,
                              "train.probe": ("blocks.0",)})
    sane, diverged = train(cfg), train(cfg.override(**{"train.lr": 1e30}))
    assert not sane.diverged and set(sane.probes) == {"blocks.0"}
    assert all(math.isfinite(sane.metrics[k]) for k in ("train_acc", "test_acc"))
    assert diverged.diverged and diverged.probes == {}
    assert all(math.isnan(diverged.metrics[k]) for k in ("train_acc", "test_acc", "val_loss"))


def test_step_log_reads_in_windows_and_stops_each_run_at_its_first_nan():
    """The CUDA path reads the log every few steps: the curves must be what a per-step read gives."""
    curves = [empty_curves(), empty_curves()]
    log = StepLog(curves, read_every=3, accuracy=True)
    losses = [(1.0, 2.0), (0.5, float("nan")), (0.25, 1.0), (0.125, 0.5)]
    y = torch.tensor([[0, 1], [1, 1]])
    out = torch.tensor([[[1.0, 0.0], [1.0, 0.0]], [[0.0, 1.0], [0.0, 1.0]]])  # hits: 1 and 2 of 2
    reads = [log.add(torch.tensor(pair), torch.tensor(pair) * 10, out, y) for pair in losses]
    assert reads == [False, False, False, False] and len(log.pending) == 1  # one read, at step 3
    assert curves[0]["loss"] == [1.0, 0.5, 0.25] and curves[1]["loss"] == [2.0]
    log.close()
    assert curves[0]["loss"] == [1.0, 0.5, 0.25, 0.125] and curves[1]["grad_norm"] == [20.0]
    assert log.diverged == [False, True]
    assert curves[0]["batch_acc"] == [0.5] * 4 and curves[1]["batch_acc"] == [1.0]
    assert curves[0]["train_acc_running"] == [0.5] and curves[1]["train_acc_running"] == [1.0]


def test_a_run_diverging_at_its_first_step_leaves_the_others_logged_and_no_accuracy():
    """Seed 0 of two stacked runs diverges at once: seed 1 is still logged, and seed 0 closes
    with no running accuracy (it saw no row), not a division by zero."""
    curves = [empty_curves(), empty_curves()]
    log = StepLog(curves, read_every=1, accuracy=True)
    out = torch.tensor([[[1.0, 0.0]], [[0.0, 1.0]]])
    log.add(torch.tensor([float("nan"), 1.0]), torch.ones(2), out, torch.tensor([[0], [1]]))
    log.close()
    assert curves[0]["loss"] == [] and curves[0]["train_acc_running"] == []
    assert curves[1]["loss"] == [1.0] and curves[1]["train_acc_running"] == [1.0]


def test_a_record_with_nan_metrics_round_trips_through_json():
    """A diverged run's NaN metrics are written as JSON's NaN and read back as NaN."""
    from normsys.training.record import RunRecord

    record = RunRecord(config={}, fingerprint="f", version="0", metrics={"val_loss": math.nan},
                       curves={}, probes={}, init_grad_norms={}, diverged=True, steps=1,
                       wall_time=0.0, env={}, data_source="")
    assert "NaN" in record.to_json()
    assert math.isnan(RunRecord.from_json(record.to_json()).metrics["val_loss"])


def test_deferred_host_reads_give_the_per_step_record(no_cache):
    """Reading the log every 3 steps (as on CUDA) changes neither a run nor a divergence."""
    live = preset("ffn_stack", **SMALL_FFN)
    dead = live.override(**{"model.norm": "none", "model.residual": False, "train.lr": 1e30})
    eager = [train(live), train(dead)]
    deferred = [train_with_state(cfg, read_every=3)[0] for cfg in (live, dead)]
    assert deferred[0].curves == eager[0].curves and deferred[0].metrics == eager[0].metrics
    assert deferred[1].diverged and deferred[1].steps == eager[1].steps
    assert deferred[1].curves == eager[1].curves


def test_compile_setting_picks_the_mode_from_the_work_and_keeps_fa_uncompiled():
    """train.compile: auto on CUDA compiles from COMPILE_MIN_STEPS steps on and captures shorter
    runs as a CUDA graph (compiling would cost more than it saves), FA/DFA's at any length, but a
    registered norm kind's trains eager; on compiles anywhere, cudagraphs adds CUDA graphs on
    CUDA, off never; FA/DFA are never compiled (custom backward)."""
    from normsys.training.train import COMPILE_MIN_STEPS, compile_mode

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    cfg = preset("resmlp")
    setting = lambda value: cfg.override(**{"train.compile": value})  # noqa: E731
    assert compile_mode(cfg, cpu, 10**6) is None
    assert compile_mode(cfg, cuda, COMPILE_MIN_STEPS - 1) == "capture"
    assert compile_mode(cfg, cuda, COMPILE_MIN_STEPS) == "default"
    assert compile_mode(setting("on"), cpu, 1) == "default"
    assert compile_mode(setting("cudagraphs"), cuda, 1) == "reduce-overhead"
    assert compile_mode(setting("cudagraphs"), cpu, 10**6) is None
    assert compile_mode(setting("off"), cuda, 10**6) is None
    assert compile_mode(setting("off"), cuda, 1) is None
    for method in ("fa", "dfa"):
        rule = cfg.override(**{"train.method": method})
        for value in ("on", "cudagraphs"):
            assert compile_mode(rule.override(**{"train.compile": value}), cuda, 10**6) is None
        assert compile_mode(rule, cuda, 10**6) == compile_mode(rule, cuda, 1) == "capture"
        assert compile_mode(rule, cpu, 1) is None
    with pytest.raises(ValueError, match="compile"):
        setting("max")


def test_a_registered_norm_kind_is_never_captured(tmp_path, monkeypatch):
    """Its author's code may read the host, which a CUDA graph cannot hold: it trains eager."""
    from normsys.training import norms
    from normsys.training.train import compile_mode

    monkeypatch.setattr(norms, "NORMS", dict(norms.NORMS))
    norms.register("mine", lambda d: torch.nn.LayerNorm(d))
    cfg = preset("resmlp", **{"model.norm": "mine"})
    assert compile_mode(cfg, torch.device("cuda"), 1) is None
    assert compile_mode(cfg, torch.device("cuda"), 10**6) == "default"


def test_a_captured_run_autocasts_without_the_cast_cache():
    """A CUDA graph cannot hold autocast's cache of cast weights; other runs keep it."""
    from normsys.training.train import RunContext

    cuda = torch.device("cuda")
    with pytest.warns(UserWarning) if not torch.cuda.is_available() else nullcontext():
        captured = RunContext(cuda, amp=True, compile="capture").autocast()
        eager = RunContext(cuda, amp=True).autocast()
    assert captured._cache_enabled is False and eager._cache_enabled is not False
    assert isinstance(RunContext(cuda, amp=False, compile="capture").autocast(), nullcontext)


def test_gradients_at_init_per_layer(no_cache):
    record = train(preset("tanh_mlp"))
    assert record.steps == 0
    norms = [record.init_grad_norms[f"layers.{i}.weight"] for i in range(10)]
    assert all(n > 0 for n in norms)
    assert norms[0] < norms[-1]  # no residual, tanh: gradients shrink toward the input


def test_record_has_config_env_and_roundtrips_json(no_cache):
    record, state = train_with_state(preset("ffn_stack", **SMALL_FFN))
    assert record.run_config == preset("ffn_stack", **SMALL_FFN)
    assert {"torch", "device", "commit"} <= set(record.env)
    again = type(record).from_json(record.to_json())
    assert again == record and state is not None


def test_classification_run_records_accuracy_and_probes(data_env, no_cache):
    cfg = preset("mlp", **{"data.n_train": 512, "data.n_test": 128, "train.probe": ("layers.2",)})
    record = train(cfg)
    assert 0 <= record.metrics["test_acc"] <= 1 and record.metrics["train_acc"] > 0.5
    p = record.probes["layers.2"]
    assert len(p["singular_values"]) == 64 and 1 <= p["erank"] <= 64  # 64 probe rows x 256 units
    assert len(record.curves["train_acc_running"]) == 1


def test_cli_prints_summary_and_writes_json(tmp_path, capsys, no_cache):
    from normsys.__main__ import main

    out = tmp_path / "r.json"
    rc = main(["train", "--model", "ffn_stack", "--norm", "rmsnorm", "--seed", "2",
               "--set", "train.steps=3", "--set", "model.d=16",
               "--set", "data.batch_shape=4,5,16", "--json", str(out)])
    assert rc == 0 and "final_loss" in capsys.readouterr().out
    body = json.loads(out.read_text())
    assert body["config"]["model"]["norm"] == "rmsnorm" and body["config"]["train"]["seed"] == 2
    assert main(["train", "--model", "encoder", "--norm", "groupnorm"]) == 2
    assert "valid kinds" in capsys.readouterr().err


def _independent_stability(model, batches, layer):
    """The protocol's definition written out separately: manual forward through the residual path."""
    directions = []
    for x, y in batches:
        h = model.embed(x)
        hs = [h]
        for block in model.blocks:
            h = h + block(h)
            hs.append(h)
        loss = torch.nn.functional.cross_entropy(model.out_head(model.out_ln(h)), y)
        g = torch.autograd.grad(loss, hs[layer])[0].mean(0).double()
        directions.append(g / g.norm())
    pairs = list(itertools.combinations(directions, 2))
    return sum(float(a @ b) for a, b in pairs) / len(pairs), hs, loss


def test_fa_protocol_diagnostics_agree_with_an_independent_implementation(data_env, no_cache):
    from normsys.training.data import mnist

    cfg = preset("resmlp", **{"data.n_train": 1024, "data.n_test": 256, "train.epochs": 1})
    record, state = train_with_state(cfg)
    from normsys.training.models import prepare_model

    model = prepare_model(cfg)
    model.load_state_dict(state)
    model.eval()
    split = mnist()
    batches = disjoint_batches(split.x_test, split.y_test, n=8, size=128)
    report = fa_protocol_report(model, batches)
    assert report["layer"] == 2
    stability, hs, loss = _independent_stability(model, batches, 2)
    assert math.isclose(report["stability"], stability, rel_tol=1e-5, abs_tol=1e-6)
    # residual norms of the last batch's forward equal the manual ones for the first batch
    h = model.embed(batches[0][0]).detach()
    manual = [float(h.norm(dim=-1).median())]
    for block in model.blocks:
        h = (h + block(h)).detach()
        manual.append(float(h.norm(dim=-1).median()))
    assert all(math.isclose(a, b, rel_tol=1e-5) for a, b in zip(report["residual_norms"], manual,
                                                                 strict=True))
    assert report["bp_grad_norms"][0] > 0 and "reading" in report


def test_encoder_trains_on_real_ag_news_and_probes_blocks(data_env, no_cache):
    cfg = preset("encoder", **{"data.n_train": 256, "data.n_test": 128, "model.seq_len": 16,
                               "model.d": 16, "train.epochs": 1, "train.probe_batch": 8})
    record = train(cfg)
    assert set(record.probes) == {"blocks.0", "blocks.2", "blocks.5"}
    assert all(len(p["singular_values"]) == 16 for p in record.probes.values())  # 8*16 rows, d=16
    assert "6000 train / 1600 held-out; first 256 train / 128 test rows" in record.data_source


def test_fa_trained_net_is_measured_through_its_true_weights(data_env, tmp_path, monkeypatch):
    """The FA protocol measures the backprop gradient of the net it is given: an FA-trained net's
    report equals the report of the same weights loaded into a plain model, and differs from one
    taken through the FA layers' feedback matrices."""
    from normsys.orchestration.runs import Runs
    from normsys.training.data import mnist
    from normsys.training.models import build_model
    from normsys.training.record import trained_model

    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    run = Runs().run
    cfg = preset("resmlp", **{"data.n_train": 512, "data.n_test": 128, "train.epochs": 1,
                              "train.method": "fa"})
    record = run(cfg)
    report = fa_protocol_report(trained_model(record, learning_rule=False),
                                disjoint_batches(mnist().x_test, mnist().y_test, n=4, size=64))
    plain = build_model(cfg.model)
    state = torch.load(record.state_path)
    plain.load_state_dict({k: v for k, v in state.items() if not k.endswith(".feedback")})
    split = mnist()
    batches = disjoint_batches(split.x_test, split.y_test, n=4, size=64)
    assert report == fa_protocol_report(plain.eval(), batches)
    through_b = fa_protocol_report(trained_model(record), batches)  # the FA pseudo-gradient
    assert abs(through_b["stability"] - report["stability"]) > 1e-3
    assert through_b["residual_norms"] == report["residual_norms"]  # same forward, other backward


def test_cli_refuses_the_paper_tier_without_a_gpu_unless_allowed(capsys, monkeypatch):
    """Hours of training on fallback data: said before anything loads, dry run included."""
    from normsys.__main__ import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for argv in (["--model", "encoder-paper", "--dry-run"], ["--tier", "paper"]):
        assert main(["train", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: data.tier=paper: no CUDA device here") and \
            "--allow-cpu-paper" in err and err.count("\n") == 1
    assert main(["train", "--model", "encoder-paper", "--dry-run", "--allow-cpu-paper"]) == 0


def test_cli_refuses_cuda_without_a_gpu_before_training(capsys, monkeypatch):
    """train.device=cuda on a machine without CUDA: one error line, exit 2, --dry-run included
    (checked on a CUDA host too, by pretending it has none)."""
    from normsys.__main__ import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    for extra in ([], ["--dry-run"]):
        assert main(["train", "--model", "tanh_mlp", "--set", "train.device=cuda", *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: train.device=cuda but no CUDA") and err.count("\n") == 1


def test_cli_lists_and_dry_runs(capsys):
    from normsys.__main__ import main

    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "encoder-paper" in out and "scaled_l2" in out and "train.compile" in out
    assert main(["train", "--model", "mlp", "--set", "train.lr=0.01", "--dry-run"]) == 0
    resolved = json.loads(capsys.readouterr().out)
    assert resolved["train"]["lr"] == 0.01 and resolved["fingerprint"] == \
        preset("mlp", **{"train.lr": 0.01}).fingerprint()


def test_cli_knows_the_norm_kinds_the_claims_register(tmp_path):
    """A run a claim trains with a kind it registers (DyT at another initial alpha) can be
    trained, priced and listed from the command line too: in a fresh process, where nothing
    else has imported the claims."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "NORMSYS_CACHE": str(tmp_path)}
    listed = subprocess.run([sys.executable, "-m", "normsys", "list"], capture_output=True,
                            text=True, env=env, check=True).stdout
    assert "dyt-alpha-2" in listed
    done = subprocess.run([sys.executable, "-m", "normsys", "train", "--model", "char_gpt",
                           "--norm", "dyt-alpha-2", "--dry-run"], capture_output=True, text=True,
                          env=env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["model"]["norm"] == "dyt-alpha-2"


def test_cli_ctrl_c_ends_with_one_line(tmp_path):
    """An interrupted training run ends with one line on stderr and exit 130, no traceback."""
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "NORMSYS_CACHE": str(tmp_path)}
    # as from a terminal: a process started in the background of a script (CI's runner, mutmut)
    # inherits SIGINT ignored, and Python then leaves Ctrl-C ignored too
    proc = subprocess.Popen([sys.executable, "-m", "normsys", "train", "--model", "ffn_stack",
                             "--set", "train.steps=100000"], env=env, stderr=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        # interrupt once training has started (the progress line says so), however long the
        # imports take on a loaded machine
        deadline = time.monotonic() + 120
        while "normsys: training" not in (line := proc.stderr.readline()):
            assert line and time.monotonic() < deadline, "the run never started training"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()  # never leave a 100,000-step run behind when the test fails
    lines = [line for line in err.splitlines() if not line.startswith("normsys: ")]
    assert proc.returncode == 130 and lines == [
        ("interrupted: stopped, with every training process; nothing was written (a run trained "
         "to the end stays cached)")]


def test_snapshots_are_the_weights_a_shorter_run_ends_with(data_env, tmp_path, monkeypatch):
    """train.snapshots keeps the weights after earlier epochs: the same weights a run of that many
    epochs ends with (same data order, same updates), at no extra training."""
    from normsys.orchestration.runs import Runs
    from normsys.training.record import trained_model

    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    run = Runs().run
    small = {"data.n_train": 300, "data.n_test": 100, "train.eval_train_rows": 100}
    long = run(preset("resmlp", **small, **{"train.epochs": 3, "train.snapshots": (1, 2)}))
    short = run(preset("resmlp", **small, **{"train.epochs": 1}))
    at_1, after_1 = trained_model(long, epoch=1).state_dict(), trained_model(short).state_dict()
    assert all(torch.equal(at_1[k], after_1[k]) for k in after_1)
    final = trained_model(long).state_dict()
    assert not all(torch.equal(final[k], at_1[k]) for k in final)
    with pytest.raises(ValueError, match="kept no weights after epoch 3"):
        trained_model(long, epoch=3)
    with pytest.raises(ValueError, match="train.snapshots"):
        preset("resmlp", **{"train.epochs": 2, "train.snapshots": (5,)})
    assert preset("resmlp").fingerprint() == \
        preset("resmlp", **{"train.snapshots": ()}).fingerprint()


def test_a_stream_of_fresh_batches_is_one_epoch_whose_snapshot_is_the_last_weights(tmp_path,
                                                                                 monkeypatch):
    """Random data trained by steps is one epoch: every batch is of epoch 0, as a data set's
    first epoch, so the weights kept after epoch 1 are the ones the run ends with."""
    from normsys.orchestration.runs import Runs
    from normsys.training.record import trained_model
    from normsys.training.tasks import make_task

    cfg = preset("ffn_stack", **{"model.d": 16, "model.n_out": 16, "data.batch_shape": (4, 3, 16),
                                 "train.steps": 5, "train.snapshots": (1,)})
    epochs = [epoch for epoch, _, _ in make_task(cfg).batches(cfg, torch.Generator())]
    assert epochs == [0] * 5
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    record = Runs().run(cfg)
    at_1, final = trained_model(record, epoch=1).state_dict(), trained_model(record).state_dict()
    assert all(torch.equal(at_1[k], final[k]) for k in final)


def test_fit_hands_the_run_its_step_count_read_cadence_and_progress_bar(no_cache, monkeypatch):
    """What the loop is told: the task's step count (compile_mode decides from it on CUDA; the
    bar counts it), the caller's read_every, and a bar named after the run (one seed or several)."""
    from normsys.training import train as train_module
    from normsys.training.batched import train_seeds
    from normsys.training.tasks import make_task

    contexts, bars = [], []
    run_context, progress_bar = train_module.run_context, train_module.progress_bar

    def ctx_spy(cfg, device, steps, read_every=None):
        contexts.append((steps, read_every))
        return run_context(cfg, device, steps, read_every)

    def bar_spy(total, desc):
        bars.append((total, desc))
        return progress_bar(total, desc)

    monkeypatch.setattr(train_module, "run_context", ctx_spy)
    monkeypatch.setattr(train_module, "progress_bar", bar_spy)
    cfg = preset("ffn_stack", **SMALL_FFN)
    steps = make_task(cfg).steps(cfg)
    train_with_state(cfg, read_every=3)
    train_seeds([cfg, cfg.override(**{"train.seed": 1})])
    assert contexts == [(steps, 3), (steps, None)]
    assert bars == [(steps, f"ffn_stack/{cfg.model.norm}/s0"),
                    (steps, f"ffn_stack/{cfg.model.norm}/x2 seeds")]


@pytest.mark.parametrize("terminal,alone", [(True, True), (False, True), (True, False)])
def test_the_progress_bar_counts_the_steps_under_the_runs_name_only_on_a_terminal(
        terminal, alone, monkeypatch):
    """On a terminal this process alone draws on: a bar of the run's steps, named after it,
    shown after 3 s and cleared when the run ends; in a log (stderr not a terminal), or in one
    of a pool of training processes sharing the terminal (train.STEP_BARS off): no bar."""
    import sys

    from normsys.training import train as train_module

    monkeypatch.setattr(sys.stderr, "isatty", lambda: terminal)
    monkeypatch.setattr(train_module, "STEP_BARS", alone)
    bar = train_module.progress_bar(40, "ffn_stack/layernorm/s0")
    try:
        # tqdm keeps disable=None for a bar it draws, True for one it does not
        assert bool(bar.disable) is not (terminal and alone)
        assert bar.total == 40 and bar.leave is False
        if terminal and alone:
            assert (bar.desc, bar.delay) == ("ffn_stack/layernorm/s0", 3)
    finally:
        bar.close()


@pytest.mark.parametrize("compile_setting,fused", [("off", False), ("on", True)])
def test_fit_turns_the_norms_fused_kernels_off_with_the_compiled_step(compile_setting, fused,
                                                                      no_cache, monkeypatch):
    """train.compile=off runs every norm eager (no compiled kernel anywhere in the run); a
    compiled step leaves the fused kernels on. Read where the loop runs, before its first step."""
    from normsys.training import norms
    from normsys.training import train as train_module

    class Stop(Exception):
        pass

    seen = []

    def drive_spy(stream, learner, bar):
        seen.append(norms._fusion["enabled"])
        bar.close()
        raise Stop

    monkeypatch.setattr(train_module, "drive", drive_spy)
    with pytest.raises(Stop):
        train(preset("ffn_stack", **SMALL_FFN, **{"train.compile": compile_setting}))
    assert seen == [fused] and norms._fusion["enabled"] is True  # restored after the run


def test_fit_trains_on_the_task_it_is_given(data_env, no_cache):
    """A caller's own data (here half the training rows) is what the run trains on: its step
    count follows the rows given, not the config's data."""
    from normsys.training.tasks import Classify, make_task
    from normsys.training.train import fit

    cfg = preset("resmlp", **{"model.d": 16, "model.layers": 1, "data.n_train": 256,
                              "data.n_test": 128, "train.epochs": 1, "train.batch_size": 64})
    full = make_task(cfg)
    half = Classify(full.x_train[:128], full.y_train[:128], full.x_test, full.y_test,
                    full.source, full.digest)
    assert fit([cfg], full)[0][0].steps == 4
    assert fit([cfg], half)[0][0].steps == 2


def test_one_shape_compiles_statically_and_runs_other_shapes_eagerly(monkeypatch):
    """The compiled step keeps the first batch's shape (dynamic=False; mode "default" is torch's
    None); a batch of another shape (an epoch's short last one) runs the eager model."""
    from normsys.training.train import OneShape

    asked = []

    def fake_compile(model, mode=None, dynamic=None):
        asked.append((mode, dynamic))
        return lambda x: ("compiled", x.shape)

    monkeypatch.setattr(torch, "compile", fake_compile)
    model = lambda x: ("eager", x.shape)  # noqa: E731
    step = OneShape(model, "default")
    assert asked == [(None, False)] and step.model is model
    assert step(torch.zeros(4, 2)) == ("compiled", (4, 2))
    assert step(torch.zeros(3, 2)) == ("eager", (3, 2))
    assert step(torch.zeros(4, 2))[0] == "compiled"
    OneShape(model, "reduce-overhead")
    assert asked[-1] == ("reduce-overhead", False)


def test_each_epoch_closes_the_running_accuracy_of_the_live_runs_and_starts_it_anew():
    """end_epoch reads what is pending, appends correct / seen of each live run (not of a
    diverged one), and counts the next epoch from zero: epoch 1 hits 1 of 2 rows, epoch 2 the one
    row it has; run 1 diverges in epoch 1 and records no running accuracy."""
    curves = [empty_curves(), empty_curves()]
    log = StepLog(curves, read_every=10, accuracy=True)
    two = torch.tensor([[[1.0, 0.0], [1.0, 0.0]], [[0.0, 1.0], [0.0, 1.0]]])  # argmax 0,0 / 1,1
    log.add(torch.tensor([1.0, float("nan")]), torch.ones(2), two, torch.tensor([[0, 1], [1, 1]]))
    assert log.end_epoch() is False  # read here: nothing was read before
    assert curves[0]["train_acc_running"] == [0.5] and curves[1]["train_acc_running"] == []
    one = torch.tensor([[[0.0, 1.0]], [[0.0, 1.0]]])  # one row a run: argmax 1
    log.add(torch.tensor([2.0, 2.0]), torch.ones(2), one, torch.tensor([[1], [1]]))
    assert log.end_epoch() is False
    assert curves[0]["train_acc_running"] == [0.5, 1.0]  # 1 of the epoch's 1 row, not of 3
    assert curves[1]["train_acc_running"] == [] and log.diverged == [False, True]
    log.add(torch.tensor([float("nan"), 1.0]), torch.ones(2), one, torch.tensor([[1], [1]]))
    assert log.end_epoch() is True  # every run has diverged
    plain = [empty_curves()]
    quiet = StepLog(plain, read_every=10, accuracy=False)
    quiet.add(torch.tensor(1.0), torch.tensor(1.0), torch.zeros(3, 1), torch.zeros(3))
    assert quiet.end_epoch() is False and plain[0]["train_acc_running"] == []
    assert plain[0]["loss"] == [1.0]


def test_a_json_record_the_disk_cannot_take_is_one_error_line_and_no_partial_file(
        tmp_path, capsys, no_cache, monkeypatch):
    """--json writes atomically: a full disk leaves nothing at the path (and no temporary), the
    summary is printed first, and the error says what happened."""
    import normsys.__main__ as cli
    from normsys.training import store

    out = tmp_path / "r.json"

    real = store._atomic_write

    def full(path, write):
        def half(tmp):
            Path(tmp).write_text('{"half')
            raise OSError(28, "No space left on device")
        real(path, half)

    monkeypatch.setattr(store, "_atomic_write", full)
    rc = cli.main(["train", "--model", "ffn_stack", "--set", "train.steps=2", "--set",
                   "model.d=8", "--set", "data.batch_shape=2,3,8", "--json", str(out)])
    said = capsys.readouterr()
    assert rc == 1 and "final_loss" in said.out
    assert said.err == (f"error: --json {out}: cannot be written (No space left on device); the "
                        f"summary above is the run's, and nothing partial was left there\n")
    assert list(tmp_path.iterdir()) == []


def test_cuda_asked_for_without_a_cuda_device_is_an_error_saying_what_to_use(monkeypatch):
    from normsys.training import train as train_module

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(RuntimeError) as err:
        train_module.resolve_device("cuda")
    assert str(err.value) == "train.device=cuda but no CUDA device is available; use cpu or auto"
    assert train_module.resolve_device("auto") == torch.device("cpu")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert train_module.resolve_device("cuda") == torch.device("cuda")


@pytest.mark.parametrize("sets,says", [
    (["model.in_dim=10"], "the mlp model with --set model.in_dim=10 --set train.steps=1 cannot "
                          "take the mnist data (an example is 784)"),
    (["model.patch=5"], "the vit model with --set model.patch=5 --set train.steps=1 cannot take "
                        "the mnist data (an example is 784)")])
def test_cli_refuses_a_model_that_cannot_take_its_data_before_training(sets, says, capsys,
                                                                      no_cache):
    """An input width or a patch size the data does not have: one error line, exit 2, before
    anything trains (the dry run too), where training would end in a traceback."""
    from normsys.__main__ import main

    model = "mlp" if "in_dim" in sets[0] else "vit"
    for extra in ([], ["--dry-run"]):
        argv = ["train", "--model", model, *(a for s in sets for a in ("--set", s)),
                "--set", "train.steps=1", *extra]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {says}: ") and err.count("\n") == 1, err
    assert main(["train", "--model", model, "--set", "train.steps=1", "--dry-run"]) == 0


def test_the_angular_update_is_the_angle_each_step_turns_a_weight(data_env, no_cache):
    """train.angular logs, per step, the angle between a weight before and after the update:
    read back from the record it is the angle between the weights a one-step run starts and ends
    with; a name the model lacks is refused with the model's names."""
    import math

    from normsys.training.models import prepare_model
    from normsys.training.train import angles

    cfg = preset("mlp", **{"model.norm": "batchnorm", "model.d": 16, "data.n_train": 64,
                           "data.n_test": 32, "train.batch_size": 64, "train.optimizer": "sgd",
                           "train.lr": 0.5, "train.momentum": 0.9, "train.weight_decay": 1e-3,
                           "train.angular": ("layers.0.0.weight",)})
    rec, state = train_with_state(cfg)
    start = prepare_model(cfg).layers[0][0].weight
    (turn,) = rec.curves["angular_update.layers.0.0.weight"]
    a, b = start.double().flatten(), state["layers.0.0.weight"].double().flatten()
    expected = math.acos((a @ b / (a.norm() * b.norm())).clamp(-1, 1).item())
    assert turn > 0 and abs(turn - expected) <= 1e-6 * expected
    assert angles(a, 3 * a).item() < 1e-14 and abs(angles(a, -a).item() - math.pi) < 1e-12
    with pytest.raises(KeyError, match="no parameter named .'nope'.*layers.0.0.weight"):
        train_with_state(cfg.override(**{"train.angular": ("nope",)}))


def test_the_invariant_weights_train_at_their_own_learning_rate_and_decay(data_env, no_cache):
    """train.invariant puts the weights it names in a group of their own at train.invariant_lr
    and train.invariant_decay: a one-step SGD run moves such a weight by exactly
    -invariant_lr * (grad + invariant_decay * w) and every other parameter by -lr * (grad +
    weight_decay * w) (no momentum, so one step is that alone); named at the run's own lr and
    decay, the run is the run without them, to the bit. A name the model lacks, a group without
    its lr, or an lr without a group is refused."""
    from normsys.training.models import prepare_model
    from normsys.training.train import parameter_groups

    named = ("layers.0.0.weight", "layers.1.0.weight")
    cfg = preset("mlp", **{"model.norm": "batchnorm", "model.d": 16, "model.layers": 2,
                           "data.n_train": 64, "data.n_test": 32, "train.batch_size": 64,
                           "train.optimizer": "sgd", "train.lr": 0.5, "train.weight_decay": 1e-3,
                           "train.epochs": 1})
    own = cfg.override(**{"train.invariant": named, "train.invariant_lr": 5.0,
                          "train.invariant_decay": 1e-4})
    start = dict(prepare_model(own).named_parameters())
    grads = parameter_grads(own)
    _, state = train_with_state(own)
    for name, w in start.items():
        lr, decay = (5.0, 1e-4) if name in named else (0.5, 1e-3)
        expected = w.detach() - lr * (grads[name] + decay * w.detach())
        assert torch.allclose(state[name], expected, rtol=1e-5, atol=1e-6), name
    groups = parameter_groups(own, prepare_model(own))
    assert [len(g["params"]) for g in groups] == [len(start) - 2, 2]
    same = cfg.override(**{"train.invariant": named, "train.invariant_lr": 0.5,
                           "train.invariant_decay": 1e-3})
    plain, grouped = train_with_state(cfg)[1], train_with_state(same)[1]
    assert all(torch.equal(plain[k], grouped[k]) for k in plain)
    with pytest.raises(KeyError, match="no trained parameter named .'nope'"):
        train_with_state(own.override(**{"train.invariant": ("nope",)}))
    with pytest.raises(ValueError, match="train.invariant_lr > 0"):
        cfg.override(**{"train.invariant": named})
    with pytest.raises(ValueError, match="it names none"):
        cfg.override(**{"train.invariant_lr": 5.0})


def test_the_warm_up_raises_every_learning_rate_linearly_to_its_own(data_env, no_cache):
    """train.warmup W: the k-th update at min(1, k / W) of each group's learning rate, the
    invariant weights' own too; a one-step SGD run with W = 4 moves every parameter by a quarter
    of its plain step, W = 1 is the run without a warm-up, to the bit, and over two steps with
    W = 2 the training loop runs the second at twice the first's rate. A negative W is refused."""
    from normsys.training.models import prepare_model
    from normsys.training.train import make_optimizer, parameter_groups, warmup

    named = ("layers.0.0.weight",)
    cfg = preset("mlp", **{"model.norm": "batchnorm", "model.d": 16, "model.layers": 2,
                           "data.n_train": 64, "data.n_test": 32, "train.batch_size": 64,
                           "train.optimizer": "sgd", "train.lr": 0.5, "train.epochs": 1,
                           "train.invariant": named, "train.invariant_lr": 5.0})
    opt = make_optimizer(cfg, parameter_groups(cfg, prepare_model(cfg)), torch.device("cpu"))
    schedule, seen = warmup(opt, 4), []
    for _ in range(6):
        seen.append([g["lr"] for g in opt.param_groups])
        opt.step()
        schedule.step()
    assert seen == [[0.5 * k / 4, 5.0 * k / 4] for k in (1, 2, 3, 4, 4, 4)]
    start = dict(prepare_model(cfg).named_parameters())
    grads = parameter_grads(cfg)
    _, state = train_with_state(cfg.override(**{"train.warmup": 4}))
    for name, w in start.items():
        lr = 5.0 if name in named else 0.5
        assert torch.allclose(state[name], w.detach() - lr / 4 * grads[name], rtol=1e-5,
                              atol=1e-6), name
    plain, one = train_with_state(cfg)[1], train_with_state(cfg.override(**{"train.warmup": 1}))[1]
    assert all(torch.equal(plain[k], one[k]) for k in plain)
    # two steps (SGD, no momentum): with W = 2 the second runs at twice the first's lr. Against the
    # run at the first's lr throughout (w2' = w0 - a g1 - a g2, the same w1), w2 = 2 w2' - w0 + a g1
    two = cfg.override(**{"data.n_train": 128, "train.invariant": (), "train.invariant_lr": 0.0})
    g1, start = parameter_grads(two), dict(prepare_model(two).named_parameters())
    warmed = train_with_state(two.override(**{"train.warmup": 2}))[1]
    steady = train_with_state(two.override(**{"train.lr": 0.25}))[1]
    for name, w in start.items():
        assert torch.allclose(warmed[name], 2 * steady[name] - w.detach() + 0.25 * g1[name],
                              rtol=1e-4, atol=1e-5), name
    with pytest.raises(ValueError, match="train.warmup must be >= 0, got -1"):
        cfg.override(**{"train.warmup": -1})


def parameter_grads(cfg) -> dict[str, torch.Tensor]:
    """dL/dW of every parameter of ``cfg``'s model at its initialization, on its first batch."""
    from normsys.training.models import prepare_model
    from normsys.training.tasks import make_task

    model, task = prepare_model(cfg).train(), make_task(cfg)
    _, x, y = next(iter(task.batches(cfg, torch.Generator().manual_seed(cfg.train.seed))))
    torch.nn.functional.cross_entropy(model(x), y).backward()
    return {n: p.grad for n, p in model.named_parameters()}


def test_the_optimizer_takes_its_configured_betas_momentum_and_decay():
    from normsys.training.train import make_optimizer

    params = [torch.nn.Parameter(torch.ones(3))]
    adamw = make_optimizer(preset("char_gpt", **{"train.beta2": 0.95}), params, torch.device("cpu"))
    assert isinstance(adamw, torch.optim.AdamW) and adamw.defaults["betas"] == (0.9, 0.95)
    sgd = make_optimizer(preset("mlp", **{"train.optimizer": "sgd", "train.momentum": 0.9,
                                          "train.weight_decay": 1e-3}), params, torch.device("cpu"))
    assert isinstance(sgd, torch.optim.SGD)
    assert (sgd.defaults["momentum"], sgd.defaults["weight_decay"]) == (0.9, 1e-3)
