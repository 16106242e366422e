"""Learning rules proven through the training loop.

A rule's own function can be right while the loop never calls it (a run labelled dfa that trains
by backprop passes every loss-goes-down test). So these tests train through ``train.fit``, the path
every claim takes, catch the gradients the loop hands its optimizer on the first step, and compare
them with each rule's gradient computed here by hand from its definition:

- bp: autograd of the mean cross-entropy;
- fa: every Linear's input gradient uses its fixed B (the model's ``feedback`` buffers) in place of
  W, weight gradients exact (written as a straight-through Linear, not with normsys.training.feedback);
- dfa: h_0 and each block's output receive B_l e, e = dL/dlogits, the residual stream cut between
  blocks; out_ln and out_head get their true gradient.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normsys.training import train as train_module
from normsys.training.config import preset
from normsys.training.feedback import FEEDBACK_SEED_OFFSET, dfa_feedback
from normsys.training.tasks import make_task

SMALL = {"model.d": 32, "model.layers": 2, "data.n_train": 256, "data.n_test": 128,
         "train.batch_size": 64, "train.steps": 1, "train.probe": ()}


def config(method: str, seed: int = 0, family: str = "resmlp", **changes):
    return preset(family, **{**SMALL, "train.method": method, "train.seed": seed, **changes})


def loop_first_step(cfg, monkeypatch) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """Train ``cfg`` one step through train.fit; return the gradients the loop gave its optimizer
    (by parameter name) and the weights after the step."""
    caught: list[list[Tensor]] = []
    make = train_module.make_optimizer

    def spying(cfg_, params, device):
        opt = make(cfg_, params, device)
        step = opt.step

        def recorded_step(*args, **kwargs):
            caught.append([p.grad.detach().clone() for g in opt.param_groups for p in g["params"]])
            return step(*args, **kwargs)

        opt.step = recorded_step
        return opt

    monkeypatch.setattr(train_module, "make_optimizer", spying)
    record, state = train_module.fit([cfg])[0]
    assert record.steps == 1 and len(caught) == 1
    names = [n for n, p in train_module.prepare_model(cfg).named_parameters() if p.requires_grad]
    return dict(zip(names, caught[0], strict=True)), state


def first_batch(cfg) -> tuple[Tensor, Tensor]:
    _, x, y = next(make_task(cfg).batches(cfg, torch.Generator().manual_seed(cfg.train.seed)))
    return x, y


def initial_model(cfg) -> nn.Module:
    """The run's model at init, as a plain (backprop) model: the same weights the loop starts from."""
    return train_module.prepare_model(cfg.override(**{"train.method": "bp"})).train()


# ----------------------------------------------------------------------------- rules by hand


def bp_gradients(model: nn.Module, x: Tensor, y: Tensor) -> dict[str, Tensor]:
    params = dict(model.named_parameters())
    grads = torch.autograd.grad(F.cross_entropy(model(x), y), list(params.values()))
    return dict(zip(params, grads, strict=True))


def fa_gradients(model: nn.Module, feedback: dict[str, Tensor], x: Tensor,
                 y: Tensor) -> dict[str, Tensor]:
    """Backprop through ``model`` with each Linear made straight-through: the forward value of
    x W^T + b, the input gradient of x B^T (B = feedback[name]), the weight gradient of x W^T."""
    def through_b(name):
        def hook(module, inputs, output):
            x_in = inputs[0]
            via_b = F.linear(x_in, feedback[name])
            return F.linear(x_in.detach(), module.weight, module.bias) + (via_b - via_b.detach())
        return hook

    handles = [m.register_forward_hook(through_b(n)) for n, m in model.named_modules()
               if isinstance(m, nn.Linear)]
    try:
        return bp_gradients(model, x, y)
    finally:
        for h in handles:
            h.remove()


def dfa_gradients(model: nn.Module, feedback: list[Tensor], x: Tensor,
                  y: Tensor) -> dict[str, Tensor]:
    """Each piece's parameter gradient: embed and block l from B_l e delivered to their output,
    the head from the true loss with h_L held fixed."""
    tokens = getattr(model, "tokens", False)  # a token model: the head and B_l e at token 0
    h = model.embed(x)
    pieces = [(model.embed, h)]
    for block in model.blocks:
        h_in = h.detach()
        branch = block(h_in)
        pieces.append((block, branch))
        h = h_in + branch
    logits = model.out_head(model.out_ln(h.detach()[:, 0] if tokens else h.detach()))
    loss = F.cross_entropy(logits, y)
    e = torch.softmax(logits, -1).detach() - F.one_hot(y, logits.shape[-1]).float()
    e = e / len(y)  # dL/dlogits of the mean cross-entropy, (B, n_out)
    grads = {}
    for (module, out), b_l in zip(pieces, feedback, strict=True):
        signal = e @ b_l
        if tokens:
            signal = torch.zeros_like(out).index_copy(1, torch.tensor([0]), signal[:, None])
        params = list(module.parameters())
        grads.update(zip([id(p) for p in params],
                         torch.autograd.grad(out, params, signal), strict=True))
    head = [*model.out_ln.parameters(), *model.out_head.parameters()]
    grads.update(zip([id(p) for p in head], torch.autograd.grad(loss, head), strict=True))
    return {n: grads[id(p)] for n, p in model.named_parameters()}


def hand_gradients(cfg) -> dict[str, Tensor]:
    x, y = first_batch(cfg)
    model, method = initial_model(cfg), cfg.train.method
    if method == "fa":
        fa_model = train_module.prepare_model(cfg)
        feedback = {n.removesuffix(".feedback"): b for n, b in fa_model.named_buffers()
                    if n.endswith(".feedback")}
        return fa_gradients(model, feedback, x, y)
    if method == "dfa":
        return dfa_gradients(model, dfa_feedback(model, cfg.model.n_out, cfg.train.seed), x, y)
    return bp_gradients(model, x, y)


def relative_difference(a: Tensor, b: Tensor) -> float:
    return float((a - b).norm() / b.norm())


# ----------------------------------------------------------------------------- the tests

BLOCKS = ("blocks.0.1.weight", "blocks.0.3.weight", "blocks.1.1.weight", "blocks.1.3.weight")


@pytest.mark.parametrize("method,family", [("bp", "resmlp"), ("fa", "resmlp"),
                                           ("dfa", "resmlp"), ("dfa", "vit")])
def test_first_update_of_the_loop_uses_the_rules_gradient(method, family, data_env, no_cache,
                                                          monkeypatch):
    cfg = config(method, family=family)
    loop, state = loop_first_step(cfg, monkeypatch)
    expected = hand_gradients(cfg)
    assert set(loop) == set(expected)
    for name in expected:
        torch.testing.assert_close(loop[name], expected[name], atol=1e-6, rtol=1e-4,
                                   msg=lambda m, n=name: f"{method}, {n}: {m}")
    # and the optimizer applied them: one Adam step from the initial weights on these gradients
    model = initial_model(cfg)
    params = dict(model.named_parameters())
    for name, p in params.items():
        p.grad = loop[name]
    torch.optim.Adam(params.values(), lr=cfg.train.lr).step()
    for name, p in params.items():
        torch.testing.assert_close(state[name], p.detach(), atol=0, rtol=0)


@pytest.mark.parametrize("method", ["bp", "dfa"])
def test_the_logged_gradient_norm_is_the_norm_of_the_rules_gradient(method, data_env, no_cache):
    """The run's grad_norm at its one step is ||g|| over every parameter of the gradient the rule
    gives the model at init on the first batch (computed here by hand)."""
    cfg = config(method)
    record, _ = train_module.fit([cfg])[0]
    norm = torch.sqrt(sum(g.double().pow(2).sum() for g in hand_gradients(cfg).values()))
    assert record.curves["grad_norm"] == [pytest.approx(norm.item(), rel=1e-5)]


@pytest.mark.parametrize("method", ["fa", "dfa"])
def test_feedback_rules_change_the_blocks_gradients_and_not_the_heads(method, data_env, no_cache,
                                                                     monkeypatch):
    """Against a backprop run with the same seed and data: the blocks' gradients differ (the rule
    is in force), the head's weight gradient is the true one under both rules (FA's last Linear has
    an exact weight gradient; DFA's head learns from the true loss)."""
    loop, _ = loop_first_step(config(method), monkeypatch)
    bp = hand_gradients(config("bp"))
    for name in BLOCKS:
        assert relative_difference(loop[name], bp[name]) > 0.5, name
    torch.testing.assert_close(loop["out_head.weight"], bp["out_head.weight"],
                               atol=1e-6, rtol=1e-4)
    torch.testing.assert_close(loop["out_head.bias"], bp["out_head.bias"], atol=1e-6, rtol=1e-4)


def test_dfa_embedding_learns_from_its_feedback_not_from_the_blocks(data_env, no_cache,
                                                                   monkeypatch):
    """DFA cuts the stream: the embedding's gradient is the product of B_0 e with its input alone,
    whatever the blocks hold, so zeroing every block's weights leaves it unchanged."""
    cfg = config("dfa")
    x, y = first_batch(cfg)
    model = initial_model(cfg)
    feedback = dfa_feedback(model, cfg.model.n_out, cfg.train.seed)
    logits = model(x)
    e = (torch.softmax(logits, -1) - F.one_hot(y, 10).float()).detach() / len(y)
    expected = (e @ feedback[0]).T @ x  # dL/dW_embed = (B_0 e)^T x
    loop, _ = loop_first_step(cfg, monkeypatch)
    torch.testing.assert_close(loop["embed.weight"], expected, atol=1e-6, rtol=1e-4)


def test_feedback_matrices_are_fixed_random_draws_of_the_seed():
    """B_l: (n_out, d), uniform within nn.Linear(n_out -> d)'s bound 1/sqrt(n_out), one per hidden
    state, drawn from seed + FEEDBACK_SEED_OFFSET (the same seed gives the same B, another seed
    another B); FA's B has each Linear's weight shape and bound."""
    cfg = config("dfa")
    model = initial_model(cfg)
    b = dfa_feedback(model, 10, seed=0)
    assert len(b) == cfg.model.layers + 1 and all(m.shape == (10, 32) for m in b)
    bound = 1 / 10**0.5
    for m in b:
        assert m.abs().max() <= bound and m.abs().max() > 0.9 * bound
        assert abs(float(m.mean())) < 0.1 * bound  # centred
    assert not torch.equal(b[0], b[1])
    assert all(torch.equal(u, v) for u, v in zip(b, dfa_feedback(model, 10, seed=0), strict=True))
    assert not torch.equal(b[0], dfa_feedback(model, 10, seed=1)[0])
    gen = torch.Generator().manual_seed(0 + FEEDBACK_SEED_OFFSET)
    first = ((torch.rand(32, 10, generator=gen, dtype=torch.float64) * 2 - 1) * bound).float().T
    torch.testing.assert_close(b[0], first)

    fa_model = train_module.prepare_model(config("fa"))
    for name, module in fa_model.named_modules():
        if hasattr(module, "feedback"):
            fb, w = module.feedback, module.weight
            assert fb.shape == w.shape, name
            assert fb.abs().max() <= 1 / w.shape[1] ** 0.5
            assert not torch.equal(fb, w.detach())


@pytest.mark.parametrize("method", ["bp", "dfa"])
def test_frozen_blocks_stay_at_their_initialization_through_the_loop(method, data_env, no_cache):
    """The frozen baselines (train.frozen_blocks) train embedding and head only: after the loop
    every block weight is the initial one, the rest moved."""
    cfg = config(method, **{"train.frozen_blocks": True, "train.steps": 3})
    _, state = train_module.fit([cfg])[0]
    init = train_module.prepare_model(cfg).state_dict()
    blocks = [k for k in init if k.startswith("blocks.")]
    assert blocks and all(torch.equal(state[k], init[k]) for k in blocks)
    assert not torch.equal(state["embed.weight"], init["embed.weight"])
    assert not torch.equal(state["out_head.weight"], init["out_head.weight"])
    with pytest.raises(ValueError, match=r"^train\.frozen_blocks needs a block family, not lstm$"):
        train_module.prepare_model(preset("lstm", **{"train.frozen_blocks": True}))
