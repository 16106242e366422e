"""FA and DFA: the backward passes equal hand computations and differ from backprop."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from normsys.config import ModelConfig, preset
from normsys.feedback import FALinear, dfa_feedback, dfa_loss_and_backward, to_feedback_alignment
from normsys.models import build_model
from normsys.testing import seeded_randn


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
    from normsys.train import train

    cfg = preset("resmlp", **{"train.method": method, "data.n_train": 4096, "data.n_test": 256,
                              "train.epochs": 1, "train.keep_state": False})  # 32 steps
    record = train(cfg)
    assert record.metrics["final_loss"] < 0.8 * record.metrics["init_loss"]
    assert record.metrics["test_acc"] > 0.3  # well above chance (0.1)
