"""How each model family is wired, pinned by a reference forward written here from its definition
(SPEC.md, "Models"): functional ops over the model's own parameters, every parameter drawn at
random first (so that a swapped norm, a residual dropped or added, another token read by the head
or another pooling all change the output), in float64. The LSTM's reference is in test_models.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from normsys.training.config import ModelConfig
from normsys.training.models import ACTS, TransformerBlock, build_model

EXACT = dict(rtol=1e-10, atol=1e-10)


def randomized(family: str, **changes) -> torch.nn.Module:
    """A float64 model of ``family`` with every parameter (gains and biases too) drawn anew."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(family, **changes)).double()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype) * 0.5 + 0.1)
    return model


# ----------------------------------------------------------------------------- reference ops


def lin(m, x):
    return x @ m.weight.T + (0 if m.bias is None else m.bias)


def ln(m, x):
    """LayerNorm by definition: (x - mean) / sqrt(biased var + eps) * g + b over the last dim."""
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + m.eps) * m.weight + m.bias


def mlp2(seq, x, act=F.gelu):
    """Linear(d, 4d) -> act -> Linear(4d, d)."""
    return lin(seq[2], act(lin(seq[0], x)))


def attend(m, x, causal=False, pad=None, kind="softmax"):
    """Multi-head self-attention of every position over every (earlier, unpadded) key."""
    b, t, c = x.shape
    heads = m.heads
    q, k, v = (z.reshape(b, t, heads, c // heads).transpose(1, 2)
               for z in lin(m.qkv, x).split(c, -1))  # (B, h, T, hs)
    scores = q @ k.transpose(-2, -1) / math.sqrt(c // heads)
    allowed = torch.ones(t, t, dtype=torch.bool)
    if causal:
        allowed = allowed.tril()
    allowed = allowed.expand(b, 1, t, t)
    if pad is not None:
        allowed = allowed & ~pad[:, None, None, :]
    if kind == "softmax":
        weights = scores.masked_fill(~allowed, -math.inf).softmax(-1)
    else:
        weights = torch.sigmoid(scores - math.log(t)) * allowed
    y = (weights @ v).transpose(1, 2).reshape(b, t, c)
    return lin(m.proj, y)


def block(m, x, post, causal=False, pad=None, kind="softmax"):
    if post:  # x = N1(x + MHA(x)); x = N2(x + FFN(x))
        x = ln(m.ln_1, x + attend(m.attn, x, causal, pad, kind))
        return ln(m.ln_2, x + mlp2(m.mlp, x))
    x = x + attend(m.attn, ln(m.ln_1, x), causal, pad, kind)  # x = x + MHA(N1(x)); ...
    return x + mlp2(m.mlp, ln(m.ln_2, x))


# ----------------------------------------------------------------------------- the families


@pytest.mark.parametrize("placement", ["post", "pre"])
@pytest.mark.parametrize("pad_mask,pos_emb", [(False, False), (True, True)])
def test_encoder(placement, pad_mask, pos_emb):
    """Token embedding (positions only if asked), L blocks, the head on position 0 ([CLS]) after
    a final norm under pre-norm; [PAD] = 0 hidden from every query when masked."""
    model = randomized("encoder", vocab=40, seq_len=7, d=8, heads=2, layers=3,
                       placement=placement, pad_mask=pad_mask, pos_emb=pos_emb)
    ids = torch.randint(1, 40, (3, 7), generator=torch.Generator().manual_seed(2))
    ids[:, -2:] = 0
    h = model.embed.weight[ids]
    if pos_emb:
        h = h + model.pos.weight[:7]
    hidden = [h]
    for b in model.blocks:
        h = block(b, h, placement == "post", pad=(ids == 0) if pad_mask else None)
        hidden.append(h)
    if placement == "pre":
        h = ln(model.out_norm, h)
    logits, states = model(ids, return_hidden=True)
    torch.testing.assert_close(logits, lin(model.head, h[:, 0]), **EXACT)
    torch.testing.assert_close(model(ids), logits, **EXACT)  # the [CLS]-only last block
    for got, want in zip(states, hidden, strict=True):
        torch.testing.assert_close(got, want, **EXACT)


@pytest.mark.parametrize("residual", [False, True])
def test_tanh_mlp(residual):
    """h = N(tanh(W h + b)), or N(h + tanh(W h + b)) with residual connections."""
    model = randomized("tanh_mlp", d=6, layers=4, act="tanh", residual=residual)
    x = torch.randn(5, 6, dtype=torch.float64)
    h = x
    for layer, norm in zip(model.layers, model.norms, strict=True):
        f = torch.tanh(lin(layer, h))
        h = ln(norm, h + f if residual else f)
    torch.testing.assert_close(model(x), h, **EXACT)


@pytest.mark.parametrize("residual,act", [(False, "gelu"), (True, "gelu"), (True, "tanh")])
def test_ffn_stack(residual, act):
    """4 x [pre-LN] Linear(d, 4d) -> GELU (or the configured act) -> Linear(4d, d) [+ residual]."""
    model = randomized("ffn_stack", d=6, layers=4, residual=residual, placement="pre", act=act)
    x = torch.randn(2, 3, 6, dtype=torch.float64)
    h = x
    for b in model.blocks:
        out = mlp2(b.mlp, ln(b.norm, h), {"gelu": F.gelu, "tanh": torch.tanh}[act])
        h = h + out if residual else out
    torch.testing.assert_close(model(x), h, **EXACT)


def test_resmlp():
    """h_0 = embed(x); h_l = h_(l-1) + Linear(act(Linear(N(h_(l-1))))); head(out_ln(h_L))."""
    model = randomized("resmlp", d=8, layers=3, ffn_mult=2, in_dim=12, n_out=5)
    x = torch.randn(4, 12, dtype=torch.float64)
    h = lin(model.embed, x)
    hidden = [h]
    for b in model.blocks:
        h = h + lin(b[3], F.gelu(lin(b[1], ln(b[0], h))))
        hidden.append(h)
    logits, states = model(x, return_hidden=True)
    torch.testing.assert_close(logits, lin(model.out_head, ln(model.out_ln, h)), **EXACT)
    for got, want in zip(states, hidden, strict=True):
        torch.testing.assert_close(got, want, **EXACT)


def test_vit():
    """Patches in reading order, each flattened row by row, projected; the class token first;
    learned positions added; pre-norm branches a = MHA(N1(h)), a + FFN(N2(h + a)) added to the
    stream; the head reads the class token after out_ln."""
    model = randomized("vit", d=8, heads=2, layers=2, patch=7, n_out=10)
    x = torch.randn(3, 784, dtype=torch.float64)
    img = x.view(3, 28, 28)
    patches = torch.stack([img[:, 7 * i:7 * i + 7, 7 * j:7 * j + 7].reshape(3, 49)
                           for i in range(4) for j in range(4)], 1)  # (B, 16, 49)
    tokens = lin(model.embed.proj, patches)
    h = torch.cat([model.embed.cls.expand(3, 1, 8), tokens], 1) + model.embed.pos
    hidden = [h]
    for b in model.blocks:
        a = attend(b.attn, ln(b.ln_1, h))
        h = h + a + mlp2(b.mlp, ln(b.ln_2, h + a))
        hidden.append(h)
    logits, states = model(x, return_hidden=True)
    torch.testing.assert_close(logits, lin(model.out_head, ln(model.out_ln, h[:, 0])), **EXACT)
    for got, want in zip(states, hidden, strict=True):
        torch.testing.assert_close(got, want, **EXACT)


@pytest.mark.parametrize("attention", ["softmax", "sigmoid"])
def test_char_gpt(attention):
    """Token + position embeddings, causal pre-LN blocks, ln_f, lm_head at every position."""
    model = randomized("char_gpt", vocab=11, seq_len=6, d=8, heads=2, layers=2,
                       placement="pre", attention=attention)
    ids = torch.randint(0, 11, (3, 6), generator=torch.Generator().manual_seed(3))
    h = model.tok.weight[ids] + model.pos.weight[:6]
    for b in model.blocks:
        h = block(b, h, post=False, causal=True, kind=attention)
    torch.testing.assert_close(model(ids), lin(model.lm_head, ln(model.ln_f, h)), **EXACT)


def test_mlp():
    """layers.i = Linear -> norm -> ReLU, then the head."""
    model = randomized("mlp", d=8, layers=3, in_dim=12, n_out=5, act="relu")
    x = torch.randn(4, 12, dtype=torch.float64)
    h = x
    for layer in model.layers:
        h = torch.relu(ln(layer[1], lin(layer[0], h)))
    torch.testing.assert_close(model(x), lin(model.head, h), **EXACT)


@pytest.mark.parametrize("norm", ["layernorm", "batchnorm"])
def test_cnn(norm):
    """3 x [conv3x3 (padding 1) -> norm -> ReLU -> maxpool 2], channels 1 -> d -> 2d -> 2d,
    global average pool, head. LayerNorm: over each sample's whole (C, H, W) map; BatchNorm: per
    channel over (B, H, W), batch statistics in training."""
    model = randomized("cnn", norm=norm, d=3, layers=3, n_out=5, act="relu").train()
    x = torch.randn(4, 784, dtype=torch.float64)
    h = x.view(4, 1, 28, 28)
    for layer in model.layers:
        conv, n = layer[0], layer[1].norm
        h = F.conv2d(h, conv.weight, conv.bias, padding=1)
        if norm == "layernorm":
            h = ln(n, h.flatten(1)).view_as(h)
        else:
            mean = h.mean((0, 2, 3), keepdim=True)
            var = ((h - mean) ** 2).mean((0, 2, 3), keepdim=True)
            h = (h - mean) / torch.sqrt(var + n.eps) * n.weight.view(1, -1, 1, 1) \
                + n.bias.view(1, -1, 1, 1)
        h = F.max_pool2d(torch.relu(h), 2)
    assert h.shape == (4, 6, 3, 3)
    torch.testing.assert_close(model(x), lin(model.head, h.mean((2, 3))), **EXACT)


@pytest.mark.parametrize("placement", ["post", "pre"])
def test_tblock(placement):
    """MNIST rows as 28 tokens of 28 pixels, embedded, learned positions, one block, a final norm
    under pre-norm, mean over tokens, head."""
    model = randomized("tblock", d=8, heads=2, layers=1, seq_len=28, in_dim=28, n_out=10,
                       placement=placement)
    x = torch.randn(3, 784, dtype=torch.float64)
    h = lin(model.embed, x.view(3, 28, 28)) + model.pos
    h = block(model.blocks[0], h, placement == "post")
    if placement == "pre":
        h = ln(model.out_norm, h)
    torch.testing.assert_close(model(x), lin(model.head, h.mean(1)), **EXACT)


def test_cnn_channels_double_once_and_four_layers_keep_them():
    """Channels 1 -> d -> 2d -> 2d (-> 2d): the third and any fourth layer keep 2d."""
    model = randomized("cnn", norm="layernorm", d=3, layers=4, n_out=5, act="relu")
    assert [(l[0].in_channels, l[0].out_channels) for l in model.layers] == [
        (1, 3), (3, 6), (6, 6), (6, 6)]
    assert model.head.in_features == 6
    assert model(torch.randn(2, 784, dtype=torch.float64)).shape == (2, 5)


def test_char_gpt_post_norm_has_no_final_norm():
    """Post-norm blocks end in a norm already: the head reads the last block's output."""
    model = randomized("char_gpt", vocab=11, seq_len=6, d=8, heads=2, layers=2, placement="post")
    ids = torch.randint(0, 11, (2, 6), generator=torch.Generator().manual_seed(4))
    h = model.tok.weight[ids] + model.pos.weight[:6]
    for b in model.blocks:
        h = block(b, h, post=True, causal=True)
    assert isinstance(model.ln_f, torch.nn.Identity)
    torch.testing.assert_close(model(ids), lin(model.lm_head, h), **EXACT)


def test_vit_branches_use_the_configured_activation():
    model = randomized("vit", d=8, heads=2, layers=1, patch=14, n_out=3, act="relu")
    x = torch.randn(2, 784, dtype=torch.float64)
    _, (h0, h1) = model(x, return_hidden=True)
    b = model.blocks[0]
    a = attend(b.attn, ln(b.ln_1, h0))
    torch.testing.assert_close(h1, h0 + a + mlp2(b.mlp, ln(b.ln_2, h0 + a), torch.relu),
                               **EXACT)
    assert model.embed.side == 28


def test_lstm_cell_has_one_bias_on_the_recurrent_gates():
    """gates = N(W_x x) + N(W_h h) + b (Ba et al. 2016): W_x carries no bias, W_h the one b."""
    cell = randomized("lstm", vocab=11, d=6, layers=1).cells[0]
    assert cell.wx.bias is None and cell.wh.bias.shape == (24,)
    assert cell.wx.weight.shape == (24, 6) and cell.wh.weight.shape == (24, 6)


def test_learned_positions_are_one_table_drawn_at_scale_0_02():
    torch.manual_seed(0)
    vit = build_model(ModelConfig("vit", d=64, patch=7))
    tblock = build_model(ModelConfig("tblock", d=64, seq_len=28, in_dim=28))
    assert vit.embed.pos.shape == (1, 17, 64) and tblock.pos.shape == (1, 28, 64)
    assert vit.embed.cls.shape == (1, 1, 64) and not vit.embed.cls.any()  # the class token: 0
    for pos in (vit.embed.pos, tblock.pos):
        assert 0.018 < float(pos.detach().std()) < 0.022


# ----------------------------------------------------------------------------- the norms


def by_definition(kind: str, m, x):
    """Each norm kind as SPEC.md's table defines it, from the module's own parameters."""
    g, b = getattr(m, "weight", None), getattr(m, "bias", None)
    unit = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-9)
    if kind == "layernorm":
        return ln(m, x)
    if kind == "rmsnorm":
        return x / torch.sqrt((x ** 2).mean(-1, keepdim=True) + m.eps) * g
    if kind == "batchnorm":  # training: the batch's statistics
        return (x - x.mean(0)) / torch.sqrt(x.var(0, unbiased=False) + m.eps) * g + b
    if kind == "dyt":
        return g * torch.tanh(m.alpha * x) + b
    if kind == "l2_affine":
        return unit * g + b
    if kind == "scaled_l2":
        return math.sqrt(x.shape[-1]) * unit
    return {"l2": unit, "none": x}[kind]


def test_every_norm_module_holds_its_parameters_and_computes_its_definition():
    """Each kind of SPEC.md's table (the built-in kinds: a claim file imported in this process
    may have registered more), its parameters drawn at random; dyt starts at a0 = 0.5."""
    from normsys.training.norms import BUILTIN, build_norm

    x = torch.randn(7, 5, dtype=torch.float64) * 3 + 1
    gen = torch.Generator().manual_seed(5)
    params = {"layernorm": {"weight", "bias"}, "rmsnorm": {"weight"}, "l2": set(),
              "batchnorm": {"weight", "bias"}, "dyt": {"alpha", "weight", "bias"},
              "none": set(), "l2_affine": {"weight", "bias"}, "scaled_l2": set()}
    assert set(params) == BUILTIN
    assert float(build_norm("dyt", 5).alpha) == 0.5
    for kind, names in params.items():
        m = build_norm(kind, 5).double().train()
        assert {n for n, _ in m.named_parameters()} == names, kind
        with torch.no_grad():
            for p in m.parameters():
                p.copy_(torch.randn(p.shape, generator=gen, dtype=p.dtype))
        torch.testing.assert_close(m(x), by_definition(kind, m, x), **EXACT, msg=kind)


@pytest.mark.parametrize("family,changes", [
    ("encoder", {"vocab": 11, "d": 8, "heads": 2, "layers": 1, "seq_len": 4, "n_out": 3}),
    ("char_gpt", {"vocab": 11, "d": 8, "heads": 2, "layers": 1, "seq_len": 4}),
    ("tblock", {"d": 8, "heads": 2, "layers": 1, "n_out": 3})])
@pytest.mark.parametrize("act", ["relu", "tanh"])
def test_transformer_blocks_use_the_configured_activation(family, changes, act):
    """The configured activation, not the default GELU, in every Transformer block's MLP."""
    model = randomized(family, **changes, act=act)
    blocks = [m for m in model.modules() if isinstance(m, TransformerBlock)]
    assert blocks and all(type(b.mlp[1]) is ACTS[act] for b in blocks)
