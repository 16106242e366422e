"""FA and DFA: the backward passes equal hand computations and differ from backprop."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normsys.claims.testing import seeded_randn
from normsys.training.config import ModelConfig, preset
from normsys.training.feedback import (
    FALinear,
    dfa_feedback,
    dfa_loss_and_backward,
    to_feedback_alignment,
)
from normsys.training.models import build_model


def test_fa_linear_backward_uses_b_in_place_of_w():
    torch.manual_seed(0)
    linear = nn.Linear(5, 3)
    b = seeded_randn((3, 5), 1, dtype=torch.float32)
    fa = FALinear(linear, b)
    x = seeded_randn((4, 5), 2, dtype=torch.float32).requires_grad_(True)
    gy = seeded_randn((4, 3), 3, dtype=torch.float32)
    fa(x).backward(gy)
    torch.testing.assert_close(x.grad, gy @ b)                  # B, not W
    torch.testing.assert_close(linear.weight.grad, gy.T @ x.detach())  # weight gradient exact
    torch.testing.assert_close(linear.bias.grad, gy.sum(0))
    assert (x.grad - gy @ linear.weight.detach()).abs().max() > 1e-3  # differs from BP


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_stacked_fa_linear_gives_each_seed_its_own_fa_gradients(bias):
    """Two seeds' FA Linears stacked (weights and B, (2, out, in)) on their folded rows: each
    seed's input, weight and bias gradients are those of its own FALinear."""
    from normsys.training.stacked import stack_modules

    torch.manual_seed(0)
    seeds = [FALinear(nn.Linear(5, 3, bias=bias), seeded_randn((3, 5), s, dtype=torch.float32))
             for s in (1, 2)]
    x = seeded_randn((8, 5), 3, dtype=torch.float32)
    gy = seeded_randn((8, 3), 4, dtype=torch.float32)
    stack = stack_modules(seeds)
    xs = x.clone().requires_grad_(True)
    stack(xs).backward(gy)
    for k, fa in enumerate(seeds):
        rows = slice(4 * k, 4 * k + 4)
        xk = x[rows].clone().requires_grad_(True)
        fa(xk).backward(gy[rows])
        torch.testing.assert_close(xs.grad[rows], xk.grad)  # seed k's own B
        torch.testing.assert_close(stack.weight.grad[k], fa.weight.grad)
        if bias:
            torch.testing.assert_close(stack.bias.grad[k], fa.bias.grad)
    assert (xs.grad[:4] - gy[:4] @ seeds[1].feedback).abs().max() > 1e-3  # not the other's B


def test_to_feedback_alignment_keeps_names_and_parameters():
    torch.manual_seed(0)
    model = build_model(ModelConfig("resmlp", d=8, layers=2, n_out=10))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    to_feedback_alignment(model, seed=0)
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert sum(isinstance(m, FALinear) for m in model.modules()) == 6
    assert not any(type(m) is nn.Linear for m in model.modules())


def test_dfa_delivers_b_l_e_to_each_hidden_state():
    torch.manual_seed(0)
    model = build_model(ModelConfig("resmlp", d=8, layers=3, n_out=10, in_dim=20))
    feedback = dfa_feedback(model, 10, seed=0)
    x, y = torch.randn(6, 20), torch.randint(0, 10, (6,))
    _, logits, signals = dfa_loss_and_backward(model, x, y, feedback)
    e = torch.softmax(logits, -1) - nn.functional.one_hot(y, 10).float()
    e = e / len(y)  # dL/dlogits of the mean cross-entropy
    for signal, b_l in zip(signals, feedback, strict=True):
        torch.testing.assert_close(signal, e @ b_l)
    # block 1's parameters got exactly the vector-Jacobian product of its branch with B_1 e
    h0 = model.embed(x).detach()
    block = model.blocks[0]
    expected = torch.autograd.grad(block(h0), list(block.parameters()), signals[1])
    for p, g in zip(block.parameters(), expected, strict=True):
        torch.testing.assert_close(p.grad, g)


def test_dfa_rejects_models_without_the_protocol_interface():
    with pytest.raises(ValueError, match="FA-protocol model"):
        dfa_feedback(build_model(ModelConfig("mlp", d=8, layers=2)), 10, 0)


@pytest.mark.parametrize("method", ["fa", "dfa"])
def test_fa_and_dfa_reduce_the_loss_on_mnist(method, data_env, no_cache):
    from normsys.training.train import train

    cfg = preset("resmlp", **{"train.method": method, "data.n_train": 4096, "data.n_test": 256,
                              "train.epochs": 1, "train.keep_state": False})  # 32 steps
    record = train(cfg)
    assert record.metrics["final_loss"] < 0.8 * record.metrics["init_loss"]
    assert record.metrics["test_acc"] > 0.3  # well above chance (0.1)


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
def test_fa_linear_on_token_input_reduces_over_every_leading_dim(bias):
    """On (B, T, d) input (the ViT's tokens) the weight and bias gradients sum over batch and
    tokens, as a Linear's do; the input gradient still uses B; a Linear without bias works."""
    torch.manual_seed(0)
    linear = nn.Linear(5, 3, bias=bias)
    b = seeded_randn((3, 5), 1, dtype=torch.float32)
    x = seeded_randn((4, 7, 5), 2, dtype=torch.float32).requires_grad_(True)
    gy = seeded_randn((4, 7, 3), 3, dtype=torch.float32)
    FALinear(linear, b)(x).backward(gy)
    plain = nn.Linear(5, 3, bias=bias)
    plain.load_state_dict(linear.state_dict())
    plain(x.detach()).backward(gy)
    torch.testing.assert_close(linear.weight.grad, plain.weight.grad)
    if bias:
        torch.testing.assert_close(linear.bias.grad, plain.bias.grad)
    torch.testing.assert_close(x.grad, gy @ b)


def test_fa_feedback_is_drawn_from_the_seed_plus_the_offset_in_module_order():
    """Each Linear's B is the next draw of one generator seeded with seed + FEEDBACK_SEED_OFFSET,
    whatever the global RNG holds (the weights' stream stays apart)."""
    from normsys.training.feedback import FEEDBACK_SEED_OFFSET, uniform_like_linear

    model = build_model(ModelConfig("resmlp", d=8, layers=2, n_out=10))
    torch.manual_seed(123)  # the global stream: must not matter
    to_feedback_alignment(model, seed=3)
    gen = torch.Generator().manual_seed(3 + FEEDBACK_SEED_OFFSET)
    fa = [m for m in model.modules() if isinstance(m, FALinear)]
    for m in fa:
        assert torch.equal(m.feedback, uniform_like_linear(m.out_features, m.in_features, gen))
    with pytest.raises(ValueError,
                       match=r"^feedback alignment needs at least one nn\.Linear in the model$"):
        to_feedback_alignment(nn.Sequential(nn.ReLU()), seed=0)


def test_feedback_rules_run_on_a_float64_model_with_float32_feedback():
    """The feedback matrices are drawn in float32; a float64 model (as the exactness checks use)
    takes them in its own dtype, under FA and DFA alike."""
    torch.manual_seed(0)
    model = build_model(ModelConfig("resmlp", d=8, layers=2, n_out=10, in_dim=20)).double()
    x, y = torch.randn(6, 20, dtype=torch.float64), torch.randint(0, 10, (6,))
    feedback = dfa_feedback(model, 10, seed=0)
    assert all(b.dtype == torch.float32 for b in feedback)
    _, logits, signals = dfa_loss_and_backward(model, x, y, feedback)
    e = (torch.softmax(logits, -1) - nn.functional.one_hot(y, 10).double()) / len(y)
    for signal, b_l in zip(signals, feedback, strict=True):
        torch.testing.assert_close(signal, e @ b_l.double())
    to_feedback_alignment(model, seed=0)
    model.zero_grad()
    nn.functional.cross_entropy(model(x), y).backward()
    assert all(p.grad.dtype == torch.float64 for p in model.parameters())


class RowModel(nn.Module):
    """An FA-protocol model written by a user: embed, blocks, out_ln, out_head, no ``tokens``."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(6, 4)
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(4, 4), nn.ReLU())])
        self.out_ln, self.out_head = nn.LayerNorm(4), nn.Linear(4, 3)


def test_dfa_reads_a_model_without_tokens_as_a_row_model():
    torch.manual_seed(0)
    model = RowModel()
    x, y = torch.randn(5, 6), torch.randint(0, 3, (5,))
    feedback = dfa_feedback(model, 3, seed=0)
    _, logits, signals = dfa_loss_and_backward(model, x, y, feedback)
    e = (torch.softmax(logits, -1) - nn.functional.one_hot(y, 3).float()) / len(y)
    assert [s.shape for s in signals] == [(5, 4), (5, 4)]
    torch.testing.assert_close(signals[0], e @ feedback[0])
    with pytest.raises(ValueError, match=r"; Sequential lacks \['embed', 'blocks', 'out_ln', "
                                         r"'out_head'\]: use family resmlp or vit$"):
        dfa_feedback(nn.Sequential(nn.Linear(2, 2)), 3, 0)
