"""Every family builds and trains a step with every norm kind and placement; hidden-state shapes."""

from __future__ import annotations

import math
import re

import pytest
import torch

from normsys.training.config import ModelConfig, preset
from normsys.training.models import build_model, capture
from normsys.training.norms import NORMS

TINY = {  # family -> (config changes, input builder)
    "encoder": ({"vocab": 50, "seq_len": 6, "d": 8, "heads": 2, "layers": 2},
                lambda: torch.randint(0, 50, (3, 6))),
    "tanh_mlp": ({"d": 8, "layers": 3, "act": "tanh", "n_out": 8}, lambda: torch.randn(3, 8)),
    "ffn_stack": ({"d": 8, "layers": 2}, lambda: torch.randn(3, 5, 8)),
    "resmlp": ({"d": 8, "layers": 2, "in_dim": 784, "n_out": 10}, lambda: torch.randn(3, 784)),
    "vit": ({"d": 8, "heads": 2, "layers": 2, "patch": 14, "n_out": 10}, lambda: torch.randn(3, 784)),
    "char_gpt": ({"vocab": 65, "seq_len": 6, "d": 8, "heads": 2, "layers": 2},
                 lambda: torch.randint(0, 65, (3, 6))),
    "mlp": ({"d": 8, "layers": 3, "act": "relu", "n_out": 10}, lambda: torch.randn(3, 784)),
    "cnn": ({"d": 4, "layers": 3, "act": "relu", "n_out": 10}, lambda: torch.randn(3, 784)),
    "lstm": ({"vocab": 65, "d": 8, "layers": 1}, lambda: torch.randint(0, 65, (3, 5))),
    "tblock": ({"d": 8, "heads": 2, "layers": 1, "seq_len": 28, "in_dim": 28, "n_out": 10},
               lambda: torch.randn(3, 784)),
}


def tiny(family: str, norm: str = "layernorm", placement: str = "post", **extra):
    changes, make_input = TINY[family]
    torch.manual_seed(0)
    return build_model(ModelConfig(family, norm, placement, **{**changes, **extra})), make_input()


@pytest.mark.parametrize("placement", ["pre", "post"])
@pytest.mark.parametrize("norm", list(NORMS))
@pytest.mark.parametrize("family", list(TINY))
def test_every_family_runs_forward_backward_with_every_norm(family, norm, placement):
    model, x = tiny(family, norm, placement)
    out = model(x)
    assert torch.isfinite(out).all()
    out.float().pow(2).mean().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert grads and all(g is not None and torch.isfinite(g).all() for g in grads)


@pytest.mark.parametrize("family,shape", [("encoder", (3, 6, 8)), ("resmlp", (3, 8)),
                                          ("vit", (3, 5, 8))])
def test_return_hidden_gives_h0_to_hL_with_documented_shapes(family, shape):
    model, x = tiny(family)
    logits, hidden = model(x, return_hidden=True)
    assert len(hidden) == 3 and all(h.shape == shape for h in hidden)
    # FA-protocol blocks are branches: their hook points resid.0 (the embedding) to resid.L
    names = ["blocks.1"] if family == "encoder" else [f"resid.{l}" for l in range(3)]
    with capture(model, names) as out:
        model(x)
    for name in names:
        assert torch.equal(out[name], hidden[int(name[-1]) + (family == "encoder")])


def test_fa_protocol_models_add_the_residual_in_the_caller():
    model, x = tiny("resmlp")
    _, hidden = model(x, return_hidden=True)
    for l, block in enumerate(model.blocks):
        torch.testing.assert_close(hidden[l + 1], hidden[l] + block(hidden[l]))


def test_capture_removes_hooks_and_names_unknown_modules():
    model, x = tiny("char_gpt")
    with pytest.raises(KeyError, match="no submodule named"):
        with capture(model, ["blocks.9"]):
            pass
    with pytest.raises(RuntimeError):
        with capture(model, ["blocks.0.ln_1"]) as seen:
            model(x)
            raise RuntimeError("inside")
    assert set(seen) == {"blocks.0.ln_1"}
    seen.clear()
    model(x)
    assert not seen  # the hook is gone
    assert not any(getattr(m, "watched", False) for m in model.modules())


def test_encoder_is_faithful_by_default_no_positions_no_mask():
    model, ids = tiny("encoder")
    assert model.pos is None and not model.cfg.pad_mask
    perm = torch.tensor([0, 2, 1, 5, 4, 3])  # no positions: permuting tokens 1.. keeps [CLS]'s output
    torch.testing.assert_close(model(ids), model(ids[:, perm]), atol=1e-5, rtol=1e-5)


def test_padding_mask_hides_pad_tokens_from_cls():
    model, _ = tiny("encoder", pad_mask=True)
    ids = torch.tensor([[49, 7, 9, 0, 0, 0]])
    other_emb = model.embed.weight.detach().clone()
    with torch.no_grad():
        model.embed.weight[0] += 5.0  # changing the pad embedding must not move unmasked outputs
    masked = model(ids)
    with torch.no_grad():
        model.embed.weight.copy_(other_emb)
    torch.testing.assert_close(masked, model(ids), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("attention", ["softmax", "sigmoid"])
@pytest.mark.parametrize("pad_mask", [False, True])
@pytest.mark.parametrize("placement", ["pre", "post"])
@pytest.mark.parametrize("norm", list(NORMS))
def test_encoder_last_block_at_cls_only_gives_the_same_logits_and_gradients(
        norm, placement, pad_mask, attention):
    """The training forward computes the last block at [CLS] alone (it is all the head reads);
    logits and every parameter's gradient equal the full forward's, for fewer FLOPs."""
    from torch.utils.flop_counter import FlopCounterMode

    model, ids = tiny("encoder", norm, placement, pad_mask=pad_mask, attention=attention)
    model = model.double()
    ids[:, -2:] = 0  # some padding
    grads = []
    for full in (False, True):
        model.zero_grad()
        with FlopCounterMode(display=False) as flops:
            logits = model(ids, return_hidden=True)[0] if full else model(ids)
            logits.square().sum().backward()
        grads.append((logits.detach(), [p.grad.clone() for p in model.parameters()],
                      flops.get_total_flops()))
    (cheap, g_cheap, f_cheap), (ref, g_ref, f_ref) = grads
    torch.testing.assert_close(cheap, ref, rtol=1e-12, atol=1e-12)
    for a, b in zip(g_cheap, g_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    assert (f_cheap < f_ref) == (norm != "batchnorm")  # batchnorm couples positions: full forward


def test_a_hook_on_the_encoder_last_block_sees_every_position():
    model, ids = tiny("encoder")
    with capture(model, ["blocks.1"]) as hidden:
        logits = model(ids)
    assert hidden["blocks.1"].shape == (3, 6, 8)
    torch.testing.assert_close(logits, model(ids))


@pytest.mark.parametrize("norm", ["layernorm", "none", "batchnorm"])
def test_lstm_equals_the_step_by_step_cell(norm):
    """The LSTM's batched input projection and per-step recurrence equal Ba et al.'s cell written
    one step at a time: gates = N(W_x x_t) + N(W_h h) + b (batchnorm: statistics per step)."""
    import copy

    model, ids = tiny("lstm", norm)
    model = model.double().train()
    ref = copy.deepcopy(model)
    cell = ref.cells[0]
    x = ref.tok(ids)
    h = c = x.new_zeros(x.shape[0], ref.d)
    outs = []
    for t in range(x.shape[1]):
        i, f, g, o = (cell.nx(cell.wx(x[:, t])) + cell.nh(cell.wh(h))).chunk(4, -1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        h = torch.sigmoid(o) * torch.tanh(cell.nc(c))
        outs.append(h)
    torch.testing.assert_close(model(ids), ref.lm_head(torch.stack(outs, 1)), rtol=1e-12, atol=1e-12)


def test_sigmoid_attention_is_causal():
    model, ids = tiny("char_gpt", attention="sigmoid")
    changed = ids.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 65
    torch.testing.assert_close(model(ids)[:, :-1], model(changed)[:, :-1])


def test_unknown_family_lists_valid_ones():
    from normsys.training.models import FAMILIES, activation, ffn

    with pytest.raises(ValueError) as err:
        build_model(ModelConfig("transformerxl"))
    assert str(err.value) == f"unknown model family 'transformerxl'; valid: {', '.join(FAMILIES)}"
    with pytest.raises(ValueError) as err:
        activation("swish")
    assert str(err.value) == "unknown activation 'swish'; valid: gelu, relu, tanh"
    assert type(ffn(4, 2)[1]) is torch.nn.GELU  # the FFN's default activation


def test_init_scale_multiplies_the_mlp_hidden_weights_and_keeps_earlier_fingerprints():
    """model.init_scale scales the hidden layers' initial weights (not the head); at its default
    it is left out of the fingerprint, so every earlier record keeps its key."""

    base, scaled = preset("mlp"), preset("mlp", **{"model.init_scale": 2.0})
    assert base.fingerprint() == "6682f01329ca15ab"  # the mlp preset's key before the field existed
    assert scaled.fingerprint() != base.fingerprint()
    torch.manual_seed(0)
    a = build_model(base.model)
    torch.manual_seed(0)
    b = build_model(scaled.model)
    for i in range(3):
        torch.testing.assert_close(b.layers[i][0].weight, 2 * a.layers[i][0].weight)
    torch.testing.assert_close(b.head.weight, a.head.weight)
    with pytest.raises(ValueError, match="init_scale is for family mlp"):
        preset("encoder", **{"model.init_scale": 2.0})


def test_attention_says_what_is_wrong_with_its_settings():
    from normsys.training.models import Attention

    with pytest.raises(ValueError, match=r"^model.d=10 must be divisible by model.heads=4$"):
        Attention(10, 4)
    causal = Attention(8, 2, causal=True)
    with pytest.raises(ValueError, match=r"^queries= \(the first positions only\) is for "
                                         r"non-causal attention$"):
        causal(torch.zeros(1, 3, 8), queries=1)


@pytest.mark.parametrize("kind", ["softmax", "sigmoid"])
@pytest.mark.parametrize("causal", [False, True])
def test_the_softcap_takes_each_logit_through_c_tanh_before_the_attention_weights(kind, causal):
    """model.softcap c: a cap so wide that it never binds is the uncapped attention (fused, for
    softmax); one that takes every logit to 0 weighs the kept keys alike (softmax: the mean of
    their values) or each at sigmoid(-log T); one in between is c tanh(q.k / sqrt(h) / c),
    padded keys and later positions left out either way."""
    from normsys.training.models import Attention

    torch.manual_seed(0)
    x, padding = torch.randn(2, 5, 8, dtype=torch.float64), torch.zeros(2, 5, dtype=torch.bool)
    padding[1, -2:] = True
    plain = Attention(8, 2, causal, kind).double()
    with torch.no_grad():
        plain.qkv.weight.mul_(4)  # logits of some tens: a cap of 3 binds
    capped = {c: Attention(8, 2, causal, kind, softcap=c).double() for c in (1e9, 1e-9, 3.0)}
    for model in capped.values():
        model.load_state_dict(plain.state_dict())
    torch.testing.assert_close(capped[1e9](x, padding), plain(x, padding))
    q, k, v = (z.view(2, 5, 2, 4).transpose(1, 2) for z in plain.qkv(x).split(8, dim=-1))
    keep = ~padding[:, None, None, :] & (torch.ones(5, 5, dtype=torch.bool).tril() if causal
                                         else torch.ones(5, 5, dtype=torch.bool))
    for c in (1e-9, 3.0):
        logits = c * torch.tanh(q @ k.transpose(-2, -1) / 2 / c)
        w = (torch.softmax(logits.masked_fill(~keep, -math.inf), dim=-1) if kind == "softmax"
             else torch.sigmoid(logits - math.log(5)) * keep)
        expected = plain.proj((w @ v).transpose(1, 2).reshape(2, 5, 8))
        torch.testing.assert_close(capped[c](x, padding), expected)
    assert not torch.allclose(capped[3.0](x, padding), plain(x, padding), atol=1e-3)
    with pytest.raises(ValueError, match="^model.softcap: for the attention families"):
        preset("mlp", **{"model.softcap": 3.0})
    with pytest.raises(ValueError, match="model.softcap must be >= 0, got -1"):
        preset("char_gpt", **{"model.softcap": -1.0})


@pytest.mark.parametrize("act", ["relu", "tanh"])
def test_the_residual_mlp_uses_the_configured_activation(act):
    from normsys.training.models import ACTS

    model = build_model(ModelConfig("resmlp", d=8, layers=2, ffn_mult=2, in_dim=12, n_out=5,
                                    act=act))
    assert all(type(block[2]) is ACTS[act] for block in model.blocks)


def test_a_model_without_weights_says_why_it_has_none(tmp_path):
    from normsys.training.record import RunRecord, trained_model

    cfg = preset("ffn_stack")
    record = RunRecord.__new__(RunRecord)
    record.fingerprint = cfg.fingerprint()
    gone = str(tmp_path / "gone.pt")
    cases = [(False, gone, r" kept no weights: its config has train.keep_state=False; set it True"),
             (True, None, r" has no weights stored with its record: the run cache stores them"),
             (True, gone, rf"'s weights are gone from {re.escape(gone)} \(removed, or kept by a")]
    for keep, path, why in cases:
        record.config = cfg.override(**{"train.keep_state": keep}).to_dict()
        record.state_path = path
        with pytest.raises(FileNotFoundError, match=f"^run {cfg.fingerprint()}{why}"):
            trained_model(record)


# ----------------------------------------------------------------------------- newer block options


def test_the_block_options_are_off_by_default_and_keep_every_preset_fingerprint():
    """qk_norm, depth_scaled, recenter, the peri placement, SGD's momentum and the angular log
    are left out of a fingerprint at their defaults: every earlier record keeps its key; a model
    built with them off draws and computes what it did before they existed."""
    from normsys.training.config import PRESETS

    assert PRESETS["char_gpt"].fingerprint() == "fd45d421919f19f5"
    assert PRESETS["encoder"].fingerprint() == "590ed7dbaafeb791"
    model, x = tiny("char_gpt", placement="pre")
    block = model.blocks[0]
    assert (block.ln_1o, block.scale, block.recenter, block.attn.q_norm) == (None, None, False, None)


def test_recentred_pre_ln_gpt_is_the_same_function_with_rmsnorm():
    """Jiang et al. 2023: with the embedding and every sublayer's output re-centred, the stream
    has zero mean, so LayerNorm (its bias zero) and RMSNorm of the same eps and gains agree to
    float64 rounding; without the re-centring they do not."""
    from normsys.training.norms import build_norm

    def pair(recenter: bool):
        ln, x = tiny("char_gpt", placement="pre", recenter=recenter)
        rms, _ = tiny("char_gpt", norm="rmsnorm", placement="pre", recenter=recenter)
        for _name, module in list(rms.named_modules()):  # LayerNorm's eps in every RMSNorm
            for child, norm in list(module.named_children()):
                if type(norm).__name__ == "RMSNorm":
                    setattr(module, child, build_norm("rmsnorm", norm.weight.shape[0], eps=1e-5))
        rms.load_state_dict(ln.state_dict(), strict=False)
        ln, rms = ln.double(), rms.double()
        with torch.no_grad():
            a, b = ln(x), rms(x)
        return ((a - b).abs().max() / a.abs().max()).item()

    assert pair(True) < 1e-12 and pair(False) > 1e-3


def test_the_twin_puts_a_kind_in_layernorms_place_with_its_gain_and_its_bias_folded():
    """The reading of Jiang et al.'s claim for any kind N (residual_stream.twin): each LayerNorm
    of the re-centred model becomes N followed by its gain, its bias folded into the next Linear,
    so that LayerNorm and RMSNorm give the model's own function to float64 rounding, and a kind
    that is not LayerNorm on a zero-mean stream does not: L2 is LayerNorm / sqrt(d), scaled L2
    lacks the eps. The gains and biases are moved off their initial values, so that a twin that
    dropped either shows; the model itself is left as it was."""
    from normsys.declarations.residual_stream import twin

    ln, x = tiny("char_gpt", placement="pre", recenter=True)
    norms = [m for m in ln.modules() if type(m).__name__ == "LayerNorm"]
    with torch.no_grad():
        for m in norms:
            m.weight.uniform_(0.5, 1.5)
            m.bias.normal_()
    ln = ln.double().eval()
    before = {k: v.clone() for k, v in ln.state_dict().items()}

    def gap(norm: str) -> float:
        with torch.no_grad():
            a, b = ln(x), twin(ln, norm)(x)
        return ((a - b).abs().max() / a.abs().max()).item()

    assert gap("layernorm") < 1e-12 and gap("rmsnorm") < 1e-12
    assert gap("l2") > 1e-2 and 1e-9 < gap("scaled_l2") < 1e-3
    assert all(torch.equal(v, ln.state_dict()[k]) for k, v in before.items())


def test_peri_placement_norms_each_sublayer_output_and_depth_scaling_divides_by_sqrt_depth():
    model, x = tiny("char_gpt", placement="peri")
    assert model.blocks[0].ln_1o is not None and not isinstance(model.ln_f, torch.nn.Identity)
    model(x).sum().backward()
    assert model.blocks[0].ln_2o.weight.grad is not None
    scaled, _ = tiny("char_gpt", placement="pre", depth_scaled=True)
    assert [b.scale for b in scaled.blocks] == [1.0, pytest.approx(2 ** -0.5)]
    h = torch.randn(3, 6, 8)
    blk = scaled.blocks[1]
    torch.testing.assert_close(blk.normed(blk.ln_1, h), blk.ln_1(h) * 2 ** -0.5)


@pytest.mark.parametrize("norm", ["layernorm", "rmsnorm", "l2"])
def test_qk_norm_normalizes_each_heads_queries_and_keys(norm):
    """The attention's scores come from normed queries and keys: with l2, each |q.k| / sqrt(hs)
    is at most 1 / sqrt(hs) (gains at their initial 1)."""
    model, x = tiny("char_gpt", placement="pre", qk_norm=norm)
    attn = model.blocks[0].attn
    assert attn.q_norm is not None and attn.q_norm is not attn.k_norm
    seen = {}
    attn.q_norm.register_forward_hook(lambda _m, _i, o: seen.setdefault("q", o))
    model(x)
    assert seen["q"].shape[-1] == 8 // 2  # over the head's dimension
    if norm == "l2":
        assert seen["q"].norm(dim=-1).sub(1).abs().max() < 1e-5


def test_the_block_options_say_where_they_apply():

    for changes, match in (({"model.qk_norm": "layernorm"}, "attention families"),
                           ({"model.placement": "peri"}, "attention families"),
                           ({"model.qk_norm": "nope"}, "nope"),
                           ({"model.recenter": True}, "recenter is for family char_gpt")):
        with pytest.raises((ValueError, KeyError), match=match):
            preset("mlp", **changes)
    with pytest.raises(ValueError, match="placement pre or peri"):
        preset("char_gpt", **{"model.placement": "post", "model.depth_scaled": True})
    with pytest.raises(ValueError, match="momentum is SGD's"):
        preset("mlp", **{"train.momentum": 0.9})
    with pytest.raises(ValueError, match=r"momentum must be in \[0, 1\)"):
        preset("mlp", **{"train.optimizer": "sgd", "train.momentum": 1.0})
    with pytest.raises(ValueError, match="beta2 is Adam's"):
        preset("mlp", **{"train.optimizer": "sgd", "train.beta2": 0.95})
