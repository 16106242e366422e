"""The seed-stacked pass gives the same per-seed results as separate runs, through the same
module code as one run, and its compiled form keeps one static graph."""

from __future__ import annotations

import functools

import pytest
import torch

from normsys.training.batched import check_batchable, train_seeds
from normsys.training.config import preset
from normsys.training.norms import BUILTIN
from normsys.training.train import train_with_state

TINY_ENCODER = {"data.n_train": 96, "data.n_test": 32, "model.seq_len": 16, "model.d": 16,
                "train.epochs": 2, "train.batch_size": 32, "train.probe_batch": 8}
# 100 rows in batches of 32: every epoch ends with a short batch of 4
SHORT_LAST_BATCH = {**TINY_ENCODER, "data.n_train": 100}
MNIST_TINY = {"data.n_train": 100, "data.n_test": 40, "model.d": 16, "train.batch_size": 32}


def close(a, b, rel=2e-4, abs_=1e-6):
    return all(abs(x - y) <= abs_ + rel * abs(y) for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("name,changes", [
    ("ffn_stack", {"train.steps": 6, "model.d": 16, "data.batch_shape": (4, 5, 16)}),
    ("encoder", TINY_ENCODER),
    ("encoder", {**SHORT_LAST_BATCH, "model.norm": "dyt", "model.pos_emb": True,
                 "model.pad_mask": True}),  # every stacked op: Embedding rows, positions, DyT
    ("char_gpt", {"train.steps": 3, "model.d": 32, "train.batch_size": 4,
                  "train.eval_batches": 2, "model.norm": "rmsnorm"}),
    ("lstm", {"train.steps": 3, "model.d": 16, "train.batch_size": 4, "train.eval_batches": 2}),
    # batchnorm per time step: each seed's statistics over its own rows, its own running ones
    # (batch 32: statistics of 4 rows turn rounding differences into 5e-4 of the loss by step 3)
    ("lstm", {"train.steps": 3, "model.d": 16, "train.batch_size": 32, "train.eval_batches": 2,
              "model.norm": "batchnorm"}),
    ("ffn_stack", {"train.steps": 6, "model.d": 16, "data.batch_shape": (4, 5, 16),
                   "model.norm": "batchnorm"}),
    ("vit", {"data.n_train": 100, "data.n_test": 40, "model.d": 16, "model.norm": "l2_affine"}),
    ("tblock", {"data.n_train": 100, "data.n_test": 40, "model.d": 16}),  # per-row positions
    # the learning rules: each seed's B (FA's Linears; DFA's B_l e at each hidden state), DFA's
    # frozen-blocks baseline, DFA at a token model's class token, FA through embeddings
    ("resmlp", {**MNIST_TINY, "train.method": "fa"}),
    ("resmlp", {**MNIST_TINY, "train.method": "dfa", "model.norm": "rmsnorm"}),
    ("resmlp", {**MNIST_TINY, "train.method": "dfa", "train.frozen_blocks": True}),
    ("vit", {**MNIST_TINY, "train.method": "dfa"}),
    ("char_gpt", {"train.steps": 3, "model.d": 32, "train.batch_size": 4,
                  "train.eval_batches": 2, "train.method": "fa"}),
    # the block options: qk-norm, Peri-LN, depth-scaled norms, a re-centred stream
    ("char_gpt", {"train.steps": 3, "model.d": 32, "train.batch_size": 4, "train.eval_batches": 2,
                  "model.qk_norm": "layernorm", "model.placement": "peri",
                  "model.depth_scaled": True, "model.recenter": True}),
    # SGD with momentum and decay, the angular update of a weight before a BatchNorm logged
    ("mlp", {**MNIST_TINY, "model.norm": "batchnorm", "train.optimizer": "sgd", "train.lr": 0.5,
             "train.momentum": 0.9, "train.weight_decay": 1e-3,
             "train.angular": ("layers.0.0.weight",)}),
], ids=lambda v: v if isinstance(v, str) else "-".join(
    [*(v[k] for k in ("model.norm", "train.method", "model.qk_norm", "train.optimizer") if k in v),
     *(["frozen"] if v.get("train.frozen_blocks") else [])]) or "defaults")
def test_batched_seeds_match_separate_runs(name, changes, data_env, no_cache):
    # two seeds for the ViT's DFA, three elsewhere: stacked feedback for any count of seeds
    seeds = (0, 1) if changes.get("train.method") == "dfa" and name == "vit" else (0, 1, 2)
    cfgs = [preset(name, **changes, **{"train.seed": s}) for s in seeds]
    batched = train_seeds(cfgs)
    for cfg, (rec_b, _) in zip(cfgs, batched, strict=True):
        rec_s, _ = train_with_state(cfg)
        assert rec_b.fingerprint == rec_s.fingerprint and rec_b.steps == rec_s.steps
        assert close(rec_b.curves["loss"], rec_s.curves["loss"])
        # not for the batchnorm LSTM: its first step normalizes W_h h with h = 0, every row the
        # same, a variance of 0, so the gradient passes 1/sqrt(eps) = 316 and its norm carries
        # the rounding differences of the batched matmuls (seen: 2-17% by step 3, with the loss
        # within 1e-6 and every metric within 1e-3)
        if (name, changes.get("model.norm")) != ("lstm", "batchnorm"):
            assert close(rec_b.curves["grad_norm"], rec_s.curves["grad_norm"], rel=1e-3)
        for key, value in rec_s.metrics.items():
            assert abs(rec_b.metrics[key] - value) <= 1e-3 * max(1.0, abs(value)), key
        for layer, probe in rec_s.probes.items():
            assert abs(rec_b.probes[layer]["erank"] - probe["erank"]) <= 1e-2
        for name in cfg.train.angular:
            angular = f"angular_update.{name}"
            assert len(rec_s.curves[angular]) == rec_s.steps
            assert close(rec_b.curves[angular], rec_s.curves[angular], rel=1e-3)


@pytest.mark.parametrize("kind", sorted(BUILTIN))
def test_every_built_in_norm_kind_trains_stacked_as_it_trains_alone(kind, no_cache):
    """Seeds stack every built-in kind's module (batched.STACKABLE reads the registry): each
    applies its parameters through normsys.training.stacked, so its stacked seeds end where its
    separate runs do. A new kind written with torch's own ops fails here."""
    cfgs = [preset("ffn_stack", **{"train.steps": 4, "model.d": 16, "data.batch_shape": (4, 5, 16),
                                   "model.norm": kind, "train.seed": s}) for s in (0, 1)]
    for cfg, (rec_b, _) in zip(cfgs, train_seeds(cfgs), strict=True):
        rec_s, _ = train_with_state(cfg)
        assert close(rec_b.curves["loss"], rec_s.curves["loss"]), kind
        assert close(rec_b.curves["grad_norm"], rec_s.curves["grad_norm"], rel=1e-3), kind


@pytest.fixture
def counted_compile(monkeypatch):
    """torch.compile with the aot_eager backend (graph capture and AOT autograd, as on CUDA,
    without inductor's code generation), counting the graphs it compiles."""
    from torch._dynamo.testing import CompileCounterWithBackend

    torch._dynamo.reset()
    counter = CompileCounterWithBackend("aot_eager")
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend=counter))
    yield counter
    torch._dynamo.reset()


@pytest.mark.parametrize("stacked", [False, True], ids=["one-run", "two-seeds"])
def test_compiled_step_is_one_static_graph_and_matches_eager(stacked, data_env, no_cache,
                                                              counted_compile):
    """The compiled step (train.compile=on: what CUDA runs) gives the eager runs' losses and
    compiles exactly one graph for a run of two epochs that each end with a short batch: the
    short batch runs eager instead of recompiling the graph or turning it dynamic."""
    cfgs = [preset("encoder", **SHORT_LAST_BATCH, **{"train.seed": s, "train.compile": "on"})
            for s in (0, 1)]
    eager = [train_with_state(c.override(**{"train.compile": "off"}))[0] for c in cfgs]
    assert counted_compile.frame_count == 0
    fast = [r for r, _ in train_seeds(cfgs)] if stacked else [train_with_state(cfgs[0])[0]]
    assert counted_compile.frame_count == 1
    for record, ref in zip(fast, eager, strict=False):
        assert record.steps == ref.steps == 8 and close(record.curves["loss"], ref.curves["loss"])


def test_batched_seeds_reject_what_they_cannot_do():
    base = preset("ffn_stack", **{"train.steps": 2})
    with pytest.raises(ValueError, match="differ only in train.seed"):
        train_seeds([base, base.override(**{"train.lr": 0.1})])
    with pytest.raises(ValueError, match="differ only in train.seed"):  # not two rules at once
        check_batchable([preset("resmlp", **{"train.method": m}) for m in ("fa", "dfa")])
    with pytest.raises(ValueError, match=r"layers\.0\.0 \(Conv2d\)"):
        check_batchable([preset("cnn", **{"model.norm": "layernorm"})])


def test_two_stacked_seeds_end_with_each_seeds_weights_and_snapshots(data_env, no_cache):
    """Two seeds (the smallest stack): each seed's trained weights and its weights after epoch 1
    (train.snapshots) come back unstacked, as the separate run keeps them."""
    cfgs = [preset("encoder", **TINY_ENCODER, **{"train.snapshots": (1,), "train.seed": s})
            for s in (0, 1)]
    batched = train_seeds(cfgs)
    for cfg, (rec_b, state_b) in zip(cfgs, batched, strict=True):
        rec_s, state_s = train_with_state(cfg)
        assert set(state_b) == set(state_s)
        assert any(k.startswith("snapshot@1/") for k in state_s)
        for key, value in state_s.items():
            assert state_b[key].shape == value.shape, key
            # 1e-3: the attention's key bias has a zero gradient up to rounding, which Adam
            # scales to steps of the learning rate's size (seen: 2e-4 after six steps)
            torch.testing.assert_close(state_b[key], value, atol=1e-3, rtol=1e-3, msg=key)
        assert close(rec_b.curves["loss"], rec_s.curves["loss"])


def test_what_cannot_stack_is_named_exactly():
    from normsys.training.batched import unstackable
    from normsys.training.models import build_model

    with pytest.raises(ValueError, match="^train_seeds needs at least one config$"):
        check_batchable([])
    with pytest.raises(ValueError, match="^batched seeds: the configs may differ only in "
                                         "train.seed$"):
        check_batchable([preset("mlp"), preset("mlp", **{"model.d": 8})])
    cnn = preset("cnn", **{"model.norm": "batchnorm", "model.d": 4})
    with pytest.raises(ValueError) as err:
        check_batchable([cnn])
    assert str(err.value) == (
        "batched seeds cannot stack layers.0.0 (Conv2d), layers.1.0 (Conv2d), layers.2.0 "
        "(Conv2d): convolutions (and layers outside normsys.training.stacked) have no seed-stacked "
        "form; train those seeds separately")
    # only layers that hold parameters or buffers of their own: not the model, not a Sequential,
    # not the batchnorm (which stacks)
    torch.manual_seed(0)
    assert unstackable(build_model(cnn.model)) == [f"layers.{i}.0 (Conv2d)" for i in range(3)]
    check_batchable([preset("ffn_stack", **{"model.norm": "batchnorm"})])  # stacks
    with pytest.raises(ValueError, match=r"stack layers\.0\.0 \(Conv2d\), layers\.1\.0 \(Conv2d\), "
                                         r"layers\.2\.0 \(Conv2d\), layers\.3\.0 \(Conv2d\): "):
        check_batchable([preset("cnn", **{"model.layers": 5, "model.d": 4})])  # the first 4
    bare = torch.nn.Linear(2, 2)
    assert unstackable(bare) == ["model (Linear)"]  # torch's own Linear: no stacked form


def test_train_seeds_hands_fit_its_task_and_read_cadence(monkeypatch):
    from normsys.training import batched

    monkeypatch.setattr(batched, "fit", lambda *args: args)
    cfgs = [preset("ffn_stack", **{"train.seed": s}) for s in (0, 1)]
    task = object()
    assert batched.train_seeds(cfgs, task, 7) == (cfgs, task, 7)
    assert batched.train_seeds(cfgs) == (cfgs, None, None)


def test_stacked_modules_stack_parameters_and_buffers_and_unstack_into_each_seed():
    from normsys.training.stacked import stack_modules, unstack_into

    def module(k: float):
        m = torch.nn.Module()
        m.inner = torch.nn.Module()
        m.inner.w = torch.nn.Parameter(torch.full((2,), k))
        m.inner.register_buffer("count", torch.tensor([k, 10 * k]))
        m.frozen = torch.nn.Parameter(torch.zeros(1), requires_grad=False)
        return m

    seeds = [module(1.0), module(2.0), module(3.0)]
    stack = stack_modules(seeds)
    assert stack.inner.w.tolist() == [[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]]
    assert stack.inner.count.tolist() == [[1.0, 10.0], [2.0, 20.0], [3.0, 30.0]]
    assert isinstance(stack.inner.w, torch.nn.Parameter) and not stack.frozen.requires_grad
    with torch.no_grad():
        stack.inner.w.add_(1.0)
        stack.inner.count.mul_(2.0)
    fresh = [module(0.0) for _ in range(3)]
    unstack_into(stack, fresh)
    assert [m.inner.w.tolist() for m in fresh] == [[2.0, 2.0], [3.0, 3.0], [4.0, 4.0]]
    assert [m.inner.count.tolist() for m in fresh] == [[2.0, 20.0], [4.0, 40.0], [6.0, 60.0]]


@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("training", [True, False])
def test_stacked_batchnorm_is_each_seeds_own_batchnorm(training, affine):
    """Three seeds' batchnorms as one: each seed's rows (seed-major in the folded batch) normalized
    by their own statistics, each seed's running statistics updated from its own rows alone."""
    import torch.nn.functional as F

    from normsys.training.norms import batch_norm

    torch.manual_seed(0)
    s, b, t, d = 3, 4, 5, 6
    x = torch.randn(s * b, t, d) * torch.arange(1, s + 1).repeat_interleave(b)[:, None, None]
    weight, bias = (torch.randn(s, d), torch.randn(s, d)) if affine else (None, None)
    mean, var = torch.randn(s, d), torch.rand(s, d) * 1e-3 + 1e-4  # eps 1e-2 matters
    alone = [(mean[k].clone(), var[k].clone()) for k in range(s)]
    y = batch_norm(x, mean, var, weight, bias, training, 0.1, 1e-2)
    for k in range(s):
        rows = x[k * b:(k + 1) * b].reshape(-1, d)
        gain = (weight[k], bias[k]) if affine else (None, None)
        want = F.batch_norm(rows, *alone[k], *gain, training, 0.1, 1e-2)
        torch.testing.assert_close(y[k * b:(k + 1) * b].reshape(-1, d), want)
        torch.testing.assert_close(mean[k], alone[k][0])  # the running statistics, per seed
        torch.testing.assert_close(var[k], alone[k][1])
    if training:
        assert not torch.equal(mean[0], mean[1])
