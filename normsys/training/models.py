"""The model families of the original experiments, each built from a ModelConfig.

Every norm comes from the registry (``build_norm(cfg.norm, d)``), so any kind drops in. Hidden
states have stable module names: block families (``encoder``, ``resmlp``, ``vit``, ``char_gpt``,
``ffn_stack``, ``tblock``) expose ``blocks.{i}``, layer families (``tanh_mlp``, ``mlp``, ``cnn``)
``layers.{i}``; ``capture`` reads any of them with temporary forward hooks.

Families with the FA-protocol interface (``resmlp``, ``vit``) have ``embed``, ``blocks`` (each the
residual *branch*: the caller adds it, h = h + block(h)), ``out_ln`` and ``out_head``, and
``forward(x, return_hidden=True)`` returns [h_0 ... h_L] as well; h_l is reachable by name as
``resid.{l}``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normsys.training.config import ModelConfig, RunConfig
from normsys.training.feedback import to_feedback_alignment
from normsys.training.norms import NORMS, build_norm
from normsys.training.stacked import Embedding, Linear, add_rows, per_row

ACTS = {"gelu": nn.GELU, "relu": nn.ReLU, "tanh": nn.Tanh}


def activation(name: str) -> nn.Module:
    if name not in ACTS:
        raise ValueError(f"unknown activation {name!r}; valid: {', '.join(ACTS)}")
    return ACTS[name]()


def ffn(d: int, mult: int, act: str = "gelu") -> nn.Sequential:
    return nn.Sequential(Linear(d, mult * d), activation(act), Linear(mult * d, d))


# ----------------------------------------------------------------------------- attention


class Attention(nn.Module):
    """Multi-head self-attention with nn.MultiheadAttention's initialization.

    softmax: F.scaled_dot_product_attention (fused where the device has it; exact semantics, no
    mask unless given). sigmoid: sigmoid(q k^T / sqrt(h) - log T) (Ramapuram et al. 2024).
    ``qk_norm``: a norm kind applied to each head's queries and keys over the head's dimension
    before their product (qk-layernorm, Dehghani et al. 2023), one for the queries and one for
    the keys, shared by the heads; "none": none. ``softcap`` c > 0: each logit s = q.k / sqrt(h)
    taken as c tanh(s / c) (Gemma 2), the softmax then written out rather than fused.
    """

    def __init__(self, d: int, heads: int, causal: bool = False, kind: str = "softmax",
                 qk_norm: str = "none", softcap: float = 0.0):
        super().__init__()
        if d % heads:
            raise ValueError(f"model.d={d} must be divisible by model.heads={heads}")
        self.heads, self.causal, self.kind, self.softcap = heads, causal, kind, softcap
        self.qkv = Linear(d, 3 * d)
        self.proj = Linear(d, d)
        nn.init.xavier_uniform_(self.qkv.weight)  # as nn.MultiheadAttention's in_proj
        nn.init.zeros_(self.qkv.bias)
        nn.init.zeros_(self.proj.bias)
        self.q_norm = self.k_norm = None
        if qk_norm != "none":
            self.q_norm, self.k_norm = build_norm(qk_norm, d // heads), build_norm(qk_norm, d // heads)

    def forward(self, x: Tensor, key_padding: Tensor | None = None,
                queries: int | None = None) -> Tensor:
        """Attention of every position, or (``queries=n``, non-causal) of the first n positions
        only, still over all T keys: the output is then (B, n, C)."""
        b, t, c = x.shape  # (B, T, C)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2)
                   for z in self.qkv(x).split(c, dim=-1))  # (B, h, T, hs)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if queries is not None:
            if self.causal:
                raise ValueError("queries= (the first positions only) is for non-causal attention")
            q = q[:, :, :queries]
        keep = None if key_padding is None else ~key_padding[:, None, None, :]  # (B, 1, 1, T)
        if self.kind == "softmax" and not self.softcap:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=keep, is_causal=self.causal)
        else:
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            if self.softcap:
                scores = self.softcap * torch.tanh(scores / self.softcap)
            if self.causal:
                tril = torch.ones(t, t, device=x.device, dtype=torch.bool).tril()
                keep = tril if keep is None else keep & tril
            if self.kind == "softmax":
                w = scores.masked_fill(~keep, -math.inf) if keep is not None else scores
                y = torch.softmax(w, dim=-1) @ v
            else:
                w = torch.sigmoid(scores - math.log(t))
                y = (w if keep is None else w * keep) @ v
        return self.proj(y.transpose(1, 2).reshape(b, q.shape[2], c))


class TransformerBlock(nn.Module):
    """post: x = N1(x + MHA(x)); x = N2(x + FFN(x)).  pre: x = x + MHA(N1(x)); x = x + FFN(N2(x)).
    peri (Kim et al. 2025): a norm on each sublayer's output too, x = x + N1o(MHA(N1(x))).

    Options of the pre and peri blocks: ``depth_scaled`` (Sun et al. 2025) multiplies each input
    norm's output by 1/sqrt(depth), the block's place from 1; ``recenter`` (Jiang et al. 2023)
    subtracts each sublayer's output mean over the hidden dimension, so that a stream started at
    zero mean stays there."""

    def __init__(self, cfg: ModelConfig, causal: bool = False, depth: int = 1):
        super().__init__()
        self.post = cfg.placement == "post"
        self.ln_1, self.ln_2 = build_norm(cfg.norm, cfg.d), build_norm(cfg.norm, cfg.d)
        self.attn = Attention(cfg.d, cfg.heads, causal, cfg.attention, cfg.qk_norm, cfg.softcap)
        self.mlp = ffn(cfg.d, cfg.ffn_mult, cfg.act)
        self.ln_1o = self.ln_2o = None
        if cfg.placement == "peri":
            self.ln_1o, self.ln_2o = build_norm(cfg.norm, cfg.d), build_norm(cfg.norm, cfg.d)
        self.scale = 1 / math.sqrt(depth) if cfg.depth_scaled else None
        self.recenter = cfg.recenter

    def forward(self, x: Tensor, key_padding: Tensor | None = None,
                queries: int | None = None) -> Tensor:
        """The block's output at every position, or (``queries=n``) at the first n only: with a
        per-token norm those depend on the other positions only through attention's keys."""
        q = x if queries is None else x[:, :queries]
        if self.post:
            x = self.ln_1(q + self.attn(x, key_padding, queries))
            return self.ln_2(x + self.mlp(x))
        x = q + self.branch(self.attn(self.normed(self.ln_1, x), key_padding, queries), self.ln_1o)
        return x + self.branch(self.mlp(self.normed(self.ln_2, x)), self.ln_2o)

    def normed(self, norm: nn.Module, x: Tensor) -> Tensor:
        """A sublayer's input: the norm's output, times 1/sqrt(depth) where depth-scaled."""
        return norm(x) if self.scale is None else norm(x) * self.scale

    def branch(self, y: Tensor, out_norm: nn.Module | None) -> Tensor:
        """A sublayer's output as the stream adds it: normed (peri), re-centred (recenter)."""
        if out_norm is not None:
            y = out_norm(y)
        return y - y.mean(-1, keepdim=True) if self.recenter else y


# ----------------------------------------------------------------------------- 1. seed encoder


class Encoder(nn.Module):
    """Dual-Mechanism Exp. 4: embedding (no positions), L blocks, classifier on position 0."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = Embedding(cfg.vocab, cfg.d)
        self.pos = Embedding(cfg.seq_len, cfg.d) if cfg.pos_emb else None
        self.blocks = nn.ModuleList(TransformerBlock(cfg, depth=i) for i in range(1, cfg.layers + 1))
        # pre-norm leaves the stream unnormalized: one final norm before the head
        self.out_norm = build_norm(cfg.norm, cfg.d) if cfg.placement != "post" else nn.Identity()
        self.head = Linear(cfg.d, cfg.n_out)

    def forward(self, ids: Tensor, return_hidden: bool = False):
        h = self.embed(ids)  # (B, T, d)
        if self.pos is not None:
            h = add_rows(h, self.pos.weight)
        pad = ids == 0 if self.cfg.pad_mask else None  # [PAD] = 0
        # Only [CLS] reaches the head, so the last block needs its output at position 0 alone
        # (attending to every key): the same logits and gradients for ~1/7 fewer FLOPs. Not with
        # batchnorm, whose statistics couple the positions, nor when the full output is read
        # (returned, or watched by ``capture``).
        cls_only = not (self.cfg.norm == "batchnorm" or return_hidden
                        or any(getattr(m, "watched", False) for m in self.blocks[-1].modules()))
        hidden = [h]
        for i, block in enumerate(self.blocks, 1):
            h = block(h, pad, queries=1 if cls_only and i == len(self.blocks) else None)
            hidden.append(h)
        logits = self.head(self.out_norm(h)[:, 0])  # [CLS] at position 0
        return (logits, hidden) if return_hidden else logits


# ----------------------------------------------------------------------------- 2./3. notebook MLPs


class TanhMLP(nn.Module):
    """L layers h = tanh(W h) (residual: h = h + tanh(W h)), a norm after each (none by default)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.residual = cfg.residual
        self.layers = nn.ModuleList(Linear(cfg.d, cfg.d) for _ in range(cfg.layers))
        self.norms = nn.ModuleList(build_norm(cfg.norm, cfg.d) for _ in range(cfg.layers))
        self.act = activation(cfg.act)

    def forward(self, x: Tensor) -> Tensor:
        for layer, norm in zip(self.layers, self.norms, strict=True):
            f = self.act(layer(x))
            x = norm(x + f if self.residual else f)
        return x


class FFNBlock(nn.Module):
    """[pre-norm] -> Linear(d, 4d) -> GELU -> Linear(4d, d) [+ residual]."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.residual = cfg.residual
        self.norm = build_norm(cfg.norm, cfg.d)
        self.mlp = ffn(cfg.d, cfg.ffn_mult, cfg.act)

    def forward(self, x: Tensor) -> Tensor:
        out = self.mlp(self.norm(x))
        return x + out if self.residual else out


class FFNStack(nn.Module):
    """L FFN blocks in a row (Transformer-components notebook): regression to random targets."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.blocks = nn.ModuleList(FFNBlock(cfg) for _ in range(cfg.layers))

    def forward(self, x: Tensor) -> Tensor:
        for block in self.blocks:
            x = block(x)
        return x


# ----------------------------------------------------------------------------- 4. FA protocol


class FAProtocolModel(nn.Module):
    """embed -> blocks (residual branches, h = h + block(h)) -> out_ln -> out_head.

    ``resid.{l}`` are identity hook points whose outputs are h_l (the residual stream after block
    l; ``resid.0`` is the embedding), so ``capture`` reaches them without editing the model.
    """

    tokens = False  # 3-D hidden states: the head reads token 0

    def add_hook_points(self) -> None:
        self.resid = nn.ModuleList(nn.Identity() for _ in range(len(self.blocks) + 1))

    def forward(self, x: Tensor, return_hidden: bool = False):
        h = self.resid[0](self.embed(x))
        hidden = [h]
        for block, hook in zip(self.blocks, self.resid[1:], strict=True):
            h = hook(h + block(h))
            hidden.append(h)
        logits = self.out_head(self.out_ln(h[:, 0] if self.tokens else h))
        return (logits, hidden) if return_hidden else logits


class ResMLP(FAProtocolModel):
    """Pre-LN residual MLP (FA protocol): Linear embed, blocks N-Linear-act-Linear, out_ln, head."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embed = Linear(cfg.in_dim, cfg.d)
        self.blocks = nn.ModuleList(
            nn.Sequential(build_norm(cfg.norm, cfg.d), *ffn(cfg.d, cfg.ffn_mult, cfg.act))
            for _ in range(cfg.layers))
        self.out_ln = build_norm(cfg.norm, cfg.d)
        self.out_head = Linear(cfg.d, cfg.n_out)
        self.add_hook_points()


class PatchEmbed(nn.Module):
    """(B, 784) MNIST pixels -> (B, 1 + patches, d) with a class token and learned positions."""

    def __init__(self, cfg: ModelConfig, side: int = 28):
        super().__init__()
        self.side, self.patch = side, cfg.patch
        n = (side // cfg.patch) ** 2
        self.proj = Linear(cfg.patch * cfg.patch, cfg.d)
        self.cls = nn.Parameter(torch.zeros(1, 1, cfg.d))
        self.pos = nn.Parameter(torch.randn(1, n + 1, cfg.d) * 0.02)

    def forward(self, x: Tensor) -> Tensor:
        b, p = x.shape[0], self.patch
        img = x.view(b, self.side // p, p, self.side // p, p).transpose(2, 3)
        tokens = self.proj(img.reshape(b, -1, p * p))  # (B, N, d)
        cls = per_row(self.cls, b, 3).expand(b, -1, -1)
        return torch.cat([cls, tokens], 1) + per_row(self.pos, b, 3)


class ViTBranch(nn.Module):
    """A pre-norm Transformer block written as one residual branch: returns a + m."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln_1, self.ln_2 = build_norm(cfg.norm, cfg.d), build_norm(cfg.norm, cfg.d)
        self.attn = Attention(cfg.d, cfg.heads)
        self.mlp = ffn(cfg.d, cfg.ffn_mult, cfg.act)

    def forward(self, h: Tensor) -> Tensor:
        a = self.attn(self.ln_1(h))
        return a + self.mlp(self.ln_2(h + a))


class ViTMini(FAProtocolModel):
    """ViT-mini (FA protocol): patch embedding with a class token, pre-norm branches, head."""

    tokens = True

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.embed = PatchEmbed(cfg)
        self.blocks = nn.ModuleList(ViTBranch(cfg) for _ in range(cfg.layers))
        self.out_ln = build_norm(cfg.norm, cfg.d)
        self.out_head = Linear(cfg.d, cfg.n_out)
        self.add_hook_points()


# ----------------------------------------------------------------------------- 5. char GPT


class CharGPT(nn.Module):
    """nanoGPT-style causal LM: token + position embeddings, pre-LN blocks, ln_f, lm_head."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.tok = Embedding(cfg.vocab, cfg.d)
        self.pos = Embedding(cfg.seq_len, cfg.d)
        self.blocks = nn.ModuleList(TransformerBlock(cfg, causal=True, depth=i)
                                    for i in range(1, cfg.layers + 1))
        self.ln_f = build_norm(cfg.norm, cfg.d) if cfg.placement != "post" else nn.Identity()
        self.lm_head = Linear(cfg.d, cfg.vocab)
        self.recenter = cfg.recenter

    def forward(self, ids: Tensor) -> Tensor:
        h = add_rows(self.tok(ids), self.pos.weight)  # (B, T, d)
        if self.recenter:  # the stream starts at zero mean (Jiang et al. 2023)
            h = h - h.mean(-1, keepdim=True)
        for block in self.blocks:
            h = block(h)
        return self.lm_head(self.ln_f(h))  # (B, T, vocab)


# ----------------------------------------------------------------------------- 6. deep-dive models


class MLP(nn.Module):
    """Deep-dive MLP: layers.{i} = Linear -> norm -> activation, then a linear head.

    ``init_scale`` multiplies the hidden layers' initial weights."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        dims = [cfg.in_dim] + [cfg.d] * cfg.layers
        self.layers = nn.ModuleList(
            nn.Sequential(Linear(a, b), build_norm(cfg.norm, b), activation(cfg.act))
            for a, b in zip(dims[:-1], dims[1:], strict=True))
        self.head = Linear(cfg.d, cfg.n_out)
        if cfg.init_scale != 1.0:  # the hidden layers' weights, scaled at init (not the head)
            with torch.no_grad():
                for layer in self.layers:
                    layer[0].weight.mul_(cfg.init_scale)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


class ConvNorm(nn.Module):
    """A registry norm for (B, C, H, W) maps: batchnorm per channel over (B, H, W); per-row kinds
    over each sample's whole (C, H, W) map, as nn.LayerNorm([C, H, W]) in Ba et al. 2016."""

    def __init__(self, kind: str, channels: int, hw: int):
        super().__init__()
        self.per_row = NORMS[kind].per_row
        self.norm = build_norm(kind, channels * hw * hw if self.per_row else channels)

    def forward(self, x: Tensor) -> Tensor:
        if self.per_row:
            return self.norm(x.flatten(1)).view_as(x)
        return self.norm(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class CNN(nn.Module):
    """3 x [conv3x3 -> norm -> act -> maxpool2] on 28x28 MNIST, global average pool, head."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        chans, side, layers = [1, cfg.d, 2 * cfg.d, 2 * cfg.d], 28, []
        for i in range(cfg.layers):
            c_in, c_out = chans[min(i, 3)], chans[min(i + 1, 3)]
            layers.append(nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1),
                                        ConvNorm(cfg.norm, c_out, side), activation(cfg.act),
                                        nn.MaxPool2d(2)))
            side //= 2
        self.layers = nn.ModuleList(layers)
        self.head = Linear(chans[min(cfg.layers, 3)], cfg.n_out)

    def forward(self, x: Tensor) -> Tensor:
        x = x.view(-1, 1, 28, 28)
        for layer in self.layers:
            x = layer(x)
        return self.head(x.mean((2, 3)))


class NormLSTMCell(nn.Module):
    """LSTM cell; with a norm, the layer-normalized LSTM of Ba et al. 2016:
    gates = N(W_x x) + N(W_h h) + b, c = f*c + i*g, h = o * tanh(N(c))."""

    def __init__(self, d_in: int, d: int, kind: str):
        super().__init__()
        self.wx = Linear(d_in, 4 * d, bias=False)
        self.wh = Linear(d, 4 * d, bias=True)
        self.nx, self.nh = build_norm(kind, 4 * d), build_norm(kind, 4 * d)
        self.nc = build_norm(kind, d)
        self.per_step = kind == "batchnorm"  # its statistics are per time step, over the batch

    def input_gates(self, x: Tensor) -> Tensor:
        """N(W_x x) of every time step at once (..., 4d): it does not depend on the state
        (for batchnorm only W_x x; the norm then runs per step in ``forward``)."""
        gx = self.wx(x)
        return gx if self.per_step else self.nx(gx)

    def forward(self, gx: Tensor, state: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        """One step from the input gates ``gx = input_gates(x_t)`` and the state (h, c)."""
        h, c = state
        if self.per_step:
            gx = self.nx(gx)
        i, f, g, o = (gx + self.nh(self.wh(h))).chunk(4, -1)
        c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        return torch.sigmoid(o) * torch.tanh(self.nc(c)), c


class CharLSTM(nn.Module):
    """Character LSTM (deep-dive notebook): embedding, NormLSTMCell layers, next-char head."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.d = cfg.d
        self.tok = Embedding(cfg.vocab, cfg.d)
        self.cells = nn.ModuleList(NormLSTMCell(cfg.d, cfg.d, cfg.norm) for _ in range(cfg.layers))
        self.lm_head = Linear(cfg.d, cfg.vocab)

    def forward(self, ids: Tensor) -> Tensor:
        x = self.tok(ids)  # (B, T, d)
        for cell in self.cells:
            h = c = x.new_zeros(x.shape[0], self.d)
            outs = []
            # the input projection of all steps in one matmul; unbind, not gx[:, t]: the
            # backward of T selects would zero-fill T full-size gradients, unbind's is one stack
            for gx in cell.input_gates(x).unbind(1):
                h, c = cell(gx, (h, c))
                outs.append(h)
            x = torch.stack(outs, 1)
        return self.lm_head(x)


class TBlockClassifier(nn.Module):
    """One Transformer block over MNIST rows as tokens (28 tokens of 28 pixels), mean-pooled."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.embed = Linear(cfg.in_dim, cfg.d)
        self.pos = nn.Parameter(torch.randn(1, cfg.seq_len, cfg.d) * 0.02)
        self.blocks = nn.ModuleList(TransformerBlock(cfg, depth=i) for i in range(1, cfg.layers + 1))
        self.out_norm = build_norm(cfg.norm, cfg.d) if cfg.placement != "post" else nn.Identity()
        self.head = Linear(cfg.d, cfg.n_out)

    def forward(self, x: Tensor) -> Tensor:
        b = x.shape[0]
        h = self.embed(x.view(b, self.cfg.seq_len, self.cfg.in_dim)) + per_row(self.pos, b, 3)
        for block in self.blocks:
            h = block(h)
        return self.head(self.out_norm(h).mean(1))


FAMILIES: dict[str, type[nn.Module]] = {
    "encoder": Encoder, "tanh_mlp": TanhMLP, "ffn_stack": FFNStack, "resmlp": ResMLP,
    "vit": ViTMini, "char_gpt": CharGPT, "mlp": MLP, "cnn": CNN, "lstm": CharLSTM,
    "tblock": TBlockClassifier,
}


def build_model(cfg: ModelConfig) -> nn.Module:
    """Build the family named by ``cfg.family`` (torch's global RNG draws the initial weights)."""
    if cfg.family not in FAMILIES:
        raise ValueError(f"unknown model family {cfg.family!r}; valid: {', '.join(FAMILIES)}")
    return FAMILIES[cfg.family](cfg)


def prepare_model(cfg: RunConfig) -> nn.Module:
    """The model of a run at initialization: seeded with train.seed, with its learning rule applied
    (FA swaps each Linear for one whose backward uses a fixed B; frozen blocks stop gradients)."""
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg.model)
    if cfg.train.method == "fa":
        to_feedback_alignment(model, cfg.train.seed)
    if cfg.train.frozen_blocks:
        if not hasattr(model, "blocks"):
            raise ValueError(f"train.frozen_blocks needs a block family, not {cfg.model.family}")
        model.blocks.requires_grad_(False)
    return model


@contextmanager
def capture(model: nn.Module, names: list[str] | tuple[str, ...]) -> Iterator[dict[str, Tensor]]:
    """Record the outputs of the named submodules during forward passes inside the block.

    The watched modules are marked (``module.watched = True``) while the block runs, so that a
    model skips no computation whose output they would show (the encoder's [CLS]-only last
    block). The hooks and marks are removed on exit, also when the block raises. Unknown names
    list valid ones.
    """
    modules = dict(model.named_modules())
    missing = [n for n in names if n not in modules]
    if missing:
        blocks = [n for n in modules if n.count(".") <= 1 and n]
        raise KeyError(f"no submodule named {missing}; top-level names include: {blocks[:20]}")
    out: dict[str, Tensor] = {}
    handles = [modules[n].register_forward_hook(
        lambda _m, _i, o, n=n: out.__setitem__(n, o)) for n in names]
    for n in names:
        modules[n].watched = True
    try:
        yield out
    finally:
        for n in names:
            modules[n].watched = False
        for h in handles:
            h.remove()
