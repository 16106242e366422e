"""Run configuration: frozen dataclasses with commented defaults, one override grammar, presets.

A ``RunConfig`` has three sections (``model``, ``data``, ``train``). Override any field with dotted
keys: ``cfg.override(**{"model.norm": "rmsnorm", "train.seed": 3})``; unknown keys are an error.
``PRESETS`` holds the settings of the original experiments; a tier's own sizes of them are its
``Tier.presets`` (normsys.training.tiers), and ``preset(name, tier)`` gives the experiment at a tier.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field, fields, replace

from normsys.training.norms import check_kind
from normsys.training.tiers import DEFAULT, TIERS, tier

DATASETS = ("ag_news", "tinyshakespeare", "mnist", "random")
LATER_FIELDS = {"model.init_scale": 1.0,  # fingerprinted only away from their defaults
                "model.qk_norm": "none", "model.depth_scaled": False, "model.recenter": False,
                "train.snapshots": (), "train.momentum": 0.0, "train.beta2": 0.999,
                "train.angular": (), "train.invariant": (), "train.invariant_lr": 0.0,
                "train.invariant_decay": 0.0, "model.softcap": 0.0, "train.warmup": 0}
ATTENTION_FAMILIES = ("encoder", "char_gpt", "tblock")  # of models.TransformerBlock


@dataclass(frozen=True)
class ModelConfig:
    family: str = "encoder"     # a model family (normsys.training.models.FAMILIES)
    norm: str = "layernorm"     # any registry kind (normsys.training.norms.NORMS)
    placement: str = "post"     # post: N(x + f(x)); pre: x + f(N(x)); peri: x + N'(f(N(x)))
    d: int = 64                 # model width
    heads: int = 4              # attention heads
    layers: int = 6             # blocks / hidden layers
    ffn_mult: int = 4           # FFN hidden = ffn_mult * d
    vocab: int = 30522          # token vocabulary (bert-base-uncased) or characters
    n_out: int = 4              # classes (or regression outputs)
    in_dim: int = 784           # input features for vector models (MNIST: 784)
    seq_len: int = 64           # tokens per sequence (encoder, char GPT block size)
    residual: bool = True       # residual connections where the family has a choice
    attention: str = "softmax"  # softmax | sigmoid (char GPT)
    pad_mask: bool = False      # encoder: mask padding keys in attention (seed: no mask)
    pos_emb: bool = False       # encoder: learned positional embedding (seed: none)
    patch: int = 7              # ViT-mini patch size
    act: str = "gelu"           # hidden activation of MLP-style families (tanh_mlp: tanh)
    init_scale: float = 1.0     # mlp: hidden layers' initial weights times this (init robustness)
    qk_norm: str = "none"       # attention families: a norm kind on each head's queries and keys
    depth_scaled: bool = False  # pre/peri attention families: norm outputs times 1/sqrt(block)
    recenter: bool = False      # char_gpt, pre/peri: the embedding and each sublayer's output
    #                             re-centred over the hidden dimension (a zero-mean stream)
    softcap: float = 0.0        # attention families: each logit s = q.k / sqrt(d_head) taken as
    #                             c tanh(s / c) before the softmax (Gemma 2's cap c); 0: none


@dataclass(frozen=True)
class DataConfig:
    name: str = "ag_news"       # one of DATASETS
    tier: str = DEFAULT         # a tier of normsys.training.tiers: its data pool (small, or full)
    n_train: int = 0            # 0: the tier's size; > 0: take the first n (a smaller pool)
    n_test: int = 0             # 0: the tier's size
    batch_shape: tuple[int, ...] = ()  # random data: shape of one input batch, e.g. (16, 32, 128)


@dataclass(frozen=True)
class TrainConfig:
    method: str = "bp"          # bp | fa | dfa
    optimizer: str = "adam"     # adam | adamw | sgd
    lr: float = 1e-3
    weight_decay: float = 0.0   # AdamW's decay, or SGD's L2 term (torch default 0.01 not used)
    momentum: float = 0.0       # SGD's momentum
    beta2: float = 0.999        # Adam's second-moment decay (its first stays 0.9)
    batch_size: int = 64
    epochs: int = 4             # passes over the training set (classification)
    steps: int = 0              # > 0: train this many steps instead of epochs (LM, random data)
    seed: int = 0
    frozen_blocks: bool = False  # FA protocol baseline: blocks fixed at init
    probe: tuple[str, ...] = ()  # module names whose outputs are probed at the end of training
    probe_batch: int = 64        # sequences/examples in the fixed probe batch
    eval_batches: int = 8        # LM: validation batches for the held-out loss
    eval_train_rows: int = 10_000  # training accuracy on the first N training rows (0: all)
    device: str = "cpu"          # cpu | cuda | auto
    amp: str = "auto"            # auto: bf16 autocast on CUDA only; off
    compile: str = "auto"        # auto: on CUDA, torch.compile the step of long bp runs and
    #                              capture shorter runs' step as a CUDA graph (see
    #                              train.compile_mode); on: compile on any device; cudagraphs:
    #                              compile with CUDA graphs (mode="reduce-overhead"); off: eager
    keep_state: bool = True      # store the trained weights with the record
    snapshots: tuple[int, ...] = ()  # epochs after which the weights are kept too (progress)
    angular: tuple[str, ...] = ()  # parameters whose angular update each step is logged (curves
    #                                "angular_update.<name>": the angle between W before and after)
    invariant: tuple[str, ...] = ()  # parameters trained at a learning rate and decay of their own
    invariant_lr: float = 0.0        # (scale-invariant weights, van Laarhoven 2017): theirs, the
    invariant_decay: float = 0.0     # others' train.lr and train.weight_decay
    warmup: int = 0              # steps over which every learning rate rises linearly to its own
    #                              (step k of W at k/W of it); 0: none


@dataclass(frozen=True)
class RunConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        validate(self)

    def override(self, **changes) -> RunConfig:
        """New config with dotted-key changes, e.g. ``override(**{"model.norm": "l2"})``."""
        sections = {f.name: getattr(self, f.name) for f in fields(self)}
        for key, value in changes.items():
            section, _, name = key.partition(".")
            if section not in sections or not name:
                raise KeyError(f"unknown config key {key!r}; use section.field with section in "
                               f"{', '.join(sections)}")
            valid = {f.name: f for f in fields(sections[section])}
            if name not in valid:
                raise KeyError(f"unknown config key {key!r}; fields of {section}: "
                               f"{', '.join(valid)}")
            try:
                coerced = _coerce(valid[name], value)
            except ValueError as err:
                raise ValueError(f"{key}={value!r}: {err}") from None
            sections[section] = replace(sections[section], **{name: coerced})
        return RunConfig(**sections)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RunConfig:
        return cls(ModelConfig(**d["model"]),
                   DataConfig(**{**d["data"], "batch_shape": tuple(d["data"]["batch_shape"])}),
                   TrainConfig(**{**d["train"], "probe": tuple(d["train"]["probe"]),
                                  "snapshots": tuple(d["train"].get("snapshots", ())),
                                  "angular": tuple(d["train"].get("angular", ())),
                                  "invariant": tuple(d["train"].get("invariant", ()))}))

    def canonical(self) -> dict[str, dict]:
        """The resolved config as the fingerprint reads it: fields added after records were first
        kept (LATER_FIELDS) are left out while at their defaults."""
        d = self.to_dict()
        for key, default in LATER_FIELDS.items():
            section, _, name = key.partition(".")
            if d[section][name] == default:
                del d[section][name]
        return d

    def flat(self) -> dict[str, object]:
        """``{"section.field": value}`` of the canonical config."""
        return {f"{s}.{k}": v for s, d in self.canonical().items() for k, v in d.items()}

    def fingerprint(self) -> str:
        """sha256 of the canonical JSON of the resolved config (first 16 hex digits), so the
        records of every earlier config keep their fingerprints when a field is added."""
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]


def _coerce(f: dataclasses.Field, value):
    """Turn CLI strings into the field's type (bool, int, float, tuple); pass others through."""
    if not isinstance(value, str):
        return tuple(value) if f.type.startswith("tuple") and isinstance(value, list) else value
    if f.type == "bool":
        if value.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"{f.name} expects true/false, got {value!r}")
        return value.lower() in ("true", "1")
    if f.type == "int":
        try:
            return int(value)
        except ValueError:
            raise ValueError("expects an integer") from None
    if f.type == "float":
        try:
            return float(value)
        except ValueError:
            raise ValueError("expects a number") from None
    if f.type.startswith("tuple"):
        items = [v for v in value.split(",") if v]
        return tuple(int(v) for v in items) if "int" in f.type else tuple(items)
    return value


def _one_of(name: str, value: str, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ValueError(f"unknown {name} {value!r}; valid: {', '.join(valid)}")


# seeds below this: each random stream of a run draws on the seed plus a fixed offset
# (feedback.FEEDBACK_SEED_OFFSET, tasks.EVAL_SEED), and torch seeds are 64-bit
MAX_SEED = 2**62


def validate(cfg: RunConfig) -> None:
    m, d, t = cfg.model, cfg.data, cfg.train
    check_kind(m.norm)
    _one_of("placement", m.placement, ("pre", "post", "peri"))
    _one_of("attention", m.attention, ("softmax", "sigmoid"))
    _one_of("data set", d.name, DATASETS)
    _one_of("data tier", d.tier, tuple(TIERS))
    _one_of("method", t.method, ("bp", "fa", "dfa"))
    _one_of("optimizer", t.optimizer, ("adam", "adamw", "sgd"))
    _one_of("device", t.device, ("cpu", "cuda", "auto"))
    _one_of("amp", t.amp, ("auto", "off"))
    _one_of("compile", t.compile, ("auto", "on", "cudagraphs", "off"))
    positive = {"model.d": m.d, "model.heads": m.heads, "model.layers": m.layers,
                "model.ffn_mult": m.ffn_mult, "model.vocab": m.vocab, "model.n_out": m.n_out,
                "model.in_dim": m.in_dim, "model.seq_len": m.seq_len, "model.patch": m.patch,
                "train.batch_size": t.batch_size, "train.probe_batch": t.probe_batch,
                "train.eval_batches": t.eval_batches}
    at_least_zero = {"train.seed": t.seed,
                     "data.n_train": d.n_train, "data.n_test": d.n_test, "train.epochs": t.epochs,
                     "train.steps": t.steps, "train.eval_train_rows": t.eval_train_rows,
                     "train.lr": t.lr, "train.weight_decay": t.weight_decay,
                     "train.invariant_lr": t.invariant_lr,
                     "train.invariant_decay": t.invariant_decay, "train.warmup": t.warmup,
                     "model.softcap": m.softcap}
    for name, value in positive.items():
        if not value >= 1:
            raise ValueError(f"{name} must be >= 1, got {value}")
    for name, value in at_least_zero.items():  # 0: the tier's size, or no training at all
        if not value >= 0:
            raise ValueError(f"{name} must be >= 0, got {value}")
        if not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value}")
    if not t.seed < MAX_SEED:
        raise ValueError(f"train.seed must be below 2**62, got {t.seed}")
    if any(not 1 <= e <= t.epochs for e in t.snapshots):
        raise ValueError(f"train.snapshots={t.snapshots}: epochs between 1 and train.epochs="
                         f"{t.epochs}")
    if any(v < 1 for v in d.batch_shape):
        raise ValueError(f"data.batch_shape sizes must be >= 1, got {d.batch_shape}")
    if m.init_scale != 1.0 and m.family != "mlp":
        raise ValueError(f"model.init_scale is for family mlp, not {m.family}")
    if not m.init_scale > 0:
        raise ValueError(f"model.init_scale must be > 0, got {m.init_scale}")
    if m.qk_norm != "none":
        check_kind(m.qk_norm)
    attention_only = [k for k, on in (("model.qk_norm", m.qk_norm != "none"),
                                      ("model.depth_scaled", m.depth_scaled),
                                      ("model.softcap", m.softcap != 0),
                                      ("model.placement=peri", m.placement == "peri")) if on]
    if attention_only and m.family not in ATTENTION_FAMILIES:
        raise ValueError(f"{', '.join(attention_only)}: for the attention families "
                         f"({', '.join(ATTENTION_FAMILIES)}), not {m.family}")
    if m.recenter and m.family != "char_gpt":
        raise ValueError(f"model.recenter is for family char_gpt, not {m.family}")
    if (m.depth_scaled or m.recenter) and m.placement == "post":
        raise ValueError("model.depth_scaled and model.recenter are for placement pre or peri, "
                         "whose stream no norm follows")
    if not 0 <= t.momentum < 1:
        raise ValueError(f"train.momentum must be in [0, 1), got {t.momentum}")
    if t.momentum and t.optimizer != "sgd":
        raise ValueError(f"train.momentum is SGD's; train.optimizer is {t.optimizer}")
    if not 0 <= t.beta2 < 1:
        raise ValueError(f"train.beta2 must be in [0, 1), got {t.beta2}")
    if t.beta2 != 0.999 and t.optimizer == "sgd":
        raise ValueError("train.beta2 is Adam's; train.optimizer is sgd")
    if t.invariant and not t.invariant_lr > 0:
        raise ValueError(f"train.invariant={t.invariant}: give their learning rate, "
                         f"train.invariant_lr > 0 (and train.invariant_decay, default 0)")
    if not t.invariant and (t.invariant_lr or t.invariant_decay):
        raise ValueError("train.invariant_lr and train.invariant_decay are for the parameters "
                         "train.invariant names; it names none")


# ----------------------------------------------------------------------------- presets

# The original experiments' settings (what the paper tier runs); a tier's own settings of one are
# that tier's (tiers.Tier.presets: the CPU tier's smaller models), added below as "<name>-<tier>".
PRESETS: dict[str, RunConfig] = {
    "encoder": RunConfig(  # Dual-Mechanism Exp. 4
        ModelConfig("encoder", "layernorm", "post", d=64, heads=4, layers=6, seq_len=64, n_out=4),
        DataConfig("ag_news"),
        TrainConfig(lr=1e-3, batch_size=64, epochs=4,
                    probe=("blocks.0", "blocks.2", "blocks.5"), probe_batch=64)),
    "tanh_mlp": RunConfig(  # Transformer-components notebook: gradients at initialization
        ModelConfig("tanh_mlp", "none", d=64, layers=10, n_out=64, act="tanh", residual=False),
        DataConfig("random", batch_shape=(32, 64)),
        TrainConfig(batch_size=32, steps=0)),
    "ffn_stack": RunConfig(  # 4 x [pre-LN] Linear(d,4d)-GELU-Linear(4d,d) [+ residual]
        ModelConfig("ffn_stack", "layernorm", "pre", d=128, layers=4, n_out=128),
        DataConfig("random", batch_shape=(16, 32, 128)),
        TrainConfig(lr=1e-3, batch_size=16, steps=100)),
    "resmlp": RunConfig(  # FA evaluation protocol on MNIST
        ModelConfig("resmlp", "layernorm", "pre", d=256, layers=4, ffn_mult=2, n_out=10),
        DataConfig("mnist"),
        TrainConfig(lr=1e-3, batch_size=128, epochs=2)),
    "vit": RunConfig(
        ModelConfig("vit", "layernorm", "pre", d=64, heads=4, layers=4, n_out=10, patch=7),
        DataConfig("mnist"),
        TrainConfig(lr=1e-3, batch_size=128, epochs=1)),
    "char_gpt": RunConfig(  # LN-Jacobian analysis: block 64, 4 layers, 4 heads, d=128, pre-LN
        ModelConfig("char_gpt", "layernorm", "pre", d=128, heads=4, layers=4, seq_len=64,
                    vocab=65, n_out=65),
        DataConfig("tinyshakespeare"),
        TrainConfig(optimizer="adamw", lr=1e-3, batch_size=32, steps=250)),
    "mlp": RunConfig(  # LayerNorm deep-dive: 3 hidden layers, width 256, ReLU
        ModelConfig("mlp", "layernorm", "post", d=256, layers=3, n_out=10, act="relu"),
        DataConfig("mnist"), TrainConfig(lr=1e-3, batch_size=64, epochs=1)),
    "cnn": RunConfig(
        ModelConfig("cnn", "batchnorm", "post", d=32, layers=3, n_out=10, act="relu"),
        DataConfig("mnist"), TrainConfig(lr=1e-3, batch_size=128, epochs=1)),
    "lstm": RunConfig(
        ModelConfig("lstm", "layernorm", d=256, layers=1, seq_len=64, vocab=65, n_out=65),
        DataConfig("tinyshakespeare"), TrainConfig(lr=1e-3, batch_size=32, steps=1000)),
    "tblock": RunConfig(  # one Transformer block over MNIST rows as tokens
        ModelConfig("tblock", "layernorm", "pre", d=64, heads=4, layers=1, seq_len=28,
                    in_dim=28, n_out=10),
        DataConfig("mnist"), TrainConfig(lr=1e-3, batch_size=64, epochs=1)),
}
EXPERIMENTS = tuple(PRESETS)  # the original experiments' names; PRESETS adds each tier's own below
PRESETS.update({f"{name}-{t.name}": PRESETS[name].override(**changes)
                for t in TIERS.values() for name, changes in t.presets.items()})


def preset(name: str, at: str = DEFAULT, **changes) -> RunConfig:
    """The experiment ``name`` at the tier ``at`` (its overrides, and its own preset
    ``"<name>-<tier>"`` where there is one) with dotted-key overrides; an unknown name or tier
    lists the valid ones."""
    if name not in PRESETS:
        raise KeyError(f"unknown preset {name!r}; valid presets: {', '.join(PRESETS)}")
    base = PRESETS.get(f"{name}-{at}", PRESETS[name])
    return base.override(**{**tier(at).overrides, **changes})
