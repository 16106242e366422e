"""The Pre-LN residual stream, in three papers: Jiang et al. 2023 ("Pre-RMSNorm and Pre-CRMSNorm
Transformers", NeurIPS): a stream kept at zero mean makes LayerNorm and RMSNorm the same function;
Kim et al. 2025 ("Peri-LN"): the stream's variance grows with depth under Pre-LN and stays flat
with a norm on each sublayer's output too; Sun et al. 2025 ("The Curse of Depth in Large Language
Models"): the deep blocks of a Pre-LN model barely change their input, and scaling each norm's
output by 1/sqrt(depth) undoes it.

Every reading is of the trained char GPT (the char_gpt preset: block 64, 4 heads, AdamW 1e-3,
250 steps on Tiny Shakespeare; width 128 and batch 32, at the CPU tier width 64, batch 16 and
block 32) on a validation batch it never trained on. The deeper models are 8 blocks: of width
32 trained 250 steps at the CPU tier, of the preset's width 128 trained 1,000 steps at the paper
tier.
"""

from __future__ import annotations

import copy
import inspect
import math

import torch
from torch import nn

from normsys.claims.declaration import Arm, Declaration, Experiment, Statistic
from normsys.claims.verdict import Rule
from normsys.declarations.shared.experiments import CHAR_GPT, SEQUENCES, fresh_lm_batch, inputs_to
from normsys.training.config import RunConfig
from normsys.training.models import capture, prepare_model
from normsys.training.norms import NORMS, build_norm
from normsys.training.record import trained_model
from normsys.training.tasks import make_task
from normsys.training.tiers import DEFAULT
from normsys.training.train import Learner, RunContext, drive, progress_bar

JIANG = "Jiang et al. 2023 (Pre-RMSNorm Transformers)"
KIM = "Kim et al. 2025 (Peri-LN)"
SUN = "Sun et al. 2025 (curse of depth)"

# ----------------------------------------------------------------------------- Pre-LN = Pre-RMSNorm


class Gained(nn.Module):
    """A norm kind in a LayerNorm's place: the kind, then the LayerNorm's per-feature gain. The
    kind's own parameters stay at their initialization (an RMSNorm's gain of ones), so that the
    model trains the LayerNorm's gain and no second one multiplying it."""

    def __init__(self, norm: nn.Module, gain: torch.Tensor):
        super().__init__()
        self.norm, self.gain = norm.requires_grad_(False), nn.Parameter(gain)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x) * self.gain


def in_place_of(ln: nn.LayerNorm, norm: str) -> nn.Module:
    """The kind ``norm`` in the LayerNorm ``ln``'s place, in its dtype: built for its width, at
    its initialization (with ``ln``'s eps where the kind takes one), then ``ln``'s gain."""
    takes_eps = "eps" in inspect.signature(NORMS[norm].build).parameters
    built = build_norm(norm, ln.weight.shape[-1], **({"eps": ln.eps} if takes_eps else {}))
    return Gained(built, ln.weight.detach().clone()).to(ln.weight.dtype)


def twin(model: nn.Module, norm: str) -> nn.Module:
    """The Pre-LN char GPT ``model`` with the kind ``norm`` in every LayerNorm's place (Jiang et
    al.'s construction, for RMSNorm the Pre-RMSNorm model computing what ``model`` computes on a
    zero-mean stream): the same weights, each LayerNorm's gain carried over (``in_place_of``) and
    its bias folded into the bias of the Linear it feeds (W (z + b) + c = W z + (W b + c))."""
    twin = copy.deepcopy(model)
    with torch.no_grad():
        for owner, name, linear in norms_of(twin):
            ln = getattr(owner, name)
            linear.bias += linear.weight @ ln.bias
            setattr(owner, name, in_place_of(ln, norm))
    return twin.eval()


def norms_of(model: nn.Module) -> list[tuple[nn.Module, str, nn.Module]]:
    """Each norm of the char GPT ``model``: its owner, its name there, and the Linear it feeds."""
    return [*((block, name, block.get_submodule(linear)) for block in model.blocks
              for name, linear in (("ln_1", "attn.qkv"), ("ln_2", "mlp.0"))),
            (model, "ln_f", model.lm_head)]


def relative_gap(model: nn.Module, cfg: RunConfig, norm: str) -> float:
    """log10(max |logits_LN - logits_N| / max |logits_LN|) of ``model`` and its ``twin`` with the
    kind ``norm`` in float64 on a validation batch; a gap below one float64 ulp reads as one
    ulp."""
    ln = model.double().eval()
    return logit_gap(ln, twin(ln, norm), cfg)


def logit_gap(a: nn.Module, b: nn.Module, cfg: RunConfig) -> float:
    """log10(max |logits_a - logits_b| / max |logits_a|) of two char GPTs in eval mode on a
    validation batch; a gap below one float64 ulp reads as one ulp."""
    ids, _ = fresh_lm_batch(cfg)
    with torch.no_grad():
        x, y = a(ids), b(ids)
    gap = ((x - y).abs().max() / x.abs().max()).item()
    return math.log10(max(gap, torch.finfo(torch.float64).eps))


def ln_gaps(records, variant: str, norm: str) -> dict[str, float]:
    """The gap to LayerNorm of the kind ``norm`` in its place, at initialization and trained.

    Each is ``relative_gap`` of a model and its ``twin``: the run's model initialized, then trained."""
    cfg = records[0].run_config
    return {"at init": relative_gap(prepare_model(cfg), cfg, norm),
            "trained": relative_gap(trained_model(records[0], learning_rule=False), cfg, norm)}


# The char GPT with its stream re-centred (model.recenter), 50 steps. Norm-generic: the scorecard
# puts each kind N in the trained LayerNorm model's norms (the kind enters the reading alone, so
# every kind reads the same runs). Kinds that read the batch are left out (SEQUENCES).
RECENTRED_GPT = CHAR_GPT.changed({"model.recenter": True, "train.steps": 50})

CENTRED_LN_FUNCTION = Statistic(
    "centred_ln_function", "jiang-preln-equals-prermsnorm", Rule("log10 gap to LN", "<", -9.0),
    RECENTRED_GPT, ln_gaps, setting=None, claim_norm="rmsnorm", excludes=SEQUENCES,
    words="LayerNorm's function on a zero-mean stream", source=JIANG,
    statement="A Pre-LN char GPT whose residual stream is re-centred (the embedding and every "
              "sublayer's output) computes the same function with RMSNorm in LayerNorm's place "
              "(LayerNorm's gain carried over, its bias folded into the next Linear), in float64, "
              "at initialization and after {train.steps} steps (gap = max |logits_LN - "
              "logits_RMS| / max |logits_LN|): {rule} at both.", role="identity")


def trained_apart(records, variant: str = "", biases: bool = True) -> float:
    """``logit_gap`` of a run's Pre-LN char GPT and its Pre-RMSNorm ``twin``, both made from the
    run's initialization in float64 and trained side by side: the run's optimizer, steps and
    batches (its seed's order), eager on the CPU. Float64 leaves rounding at about 1e-15, so a
    gap above it is the optimizer's. ``biases=False``: every LayerNorm's bias held at its zero,
    so that no bias is folded and the twins differ in nothing the optimizer sees."""
    cfg = records[0].run_config
    ln = prepare_model(cfg).double()
    if not biases:
        for owner, name, _ in norms_of(ln):
            getattr(owner, name).bias.requires_grad_(False)
    rms = twin(ln, "rmsnorm")
    task, ctx = make_task(cfg), RunContext(torch.device("cpu"))
    for model in (ln, rms):
        learner = Learner(cfg, model.train(), task, ctx)
        drive(task.batches(cfg, torch.Generator().manual_seed(cfg.train.seed)), learner,
              progress_bar(task.steps(cfg), f"{cfg.model.family}/{type(model).__name__}"))
    return logit_gap(ln.eval(), rms.eval(), cfg)


STAYS_EQUIVALENT = Declaration(
    "jiang-prermsnorm-trains-as-preln", Rule("log10 gap", "<", -2.0), source=JIANG,
    statement="Trained side by side from equivalent initializations (the Pre-LN char GPT of "
              "jiang-preln-equals-prermsnorm, stream re-centred, and its Pre-RMSNorm twin: "
              "LayerNorm's gain carried over, its bias folded into the next Linear), under the "
              "run's AdamW for {train.steps} steps on the same batches, in float64, the two "
              "models stay equivalent to 1% of the logits (gap = max |logits_LN - logits_RMS| "
              "/ max |logits_LN| on a validation batch): {rule}.",
    experiment=Experiment({"twins": RECENTRED_GPT}, trained_apart), role="test")


# ----------------------------------------------------------------------------- 8-block char GPT

def deep_gpt(**settings) -> Arm:
    """The char_gpt preset 8 blocks deep with ``settings``: width 128 and 1,000 steps, at the CPU
    tier width 32 and the preset's 250 steps (the papers' effects need far larger models: there
    the claims guard the numbers, and their positive controls show the reading can hold)."""
    return Arm("char_gpt", {"model.layers": 8, "train.steps": 1000, **settings},
               at={DEFAULT: {"model.d": 32, "train.steps": 250}})


def stream(model: nn.Module, cfg: RunConfig) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each block's input and output on a validation batch, of the char GPT ``model``."""
    names = [f"blocks.{i}" for i in range(len(model.blocks))]
    with inputs_to(model, names) as inputs, capture(model, names) as outputs, torch.no_grad():
        model(fresh_lm_batch(cfg)[0])
    return [inputs[n] for n in names], [outputs[n] for n in names]


def growth(model: nn.Module, cfg: RunConfig) -> float:
    """log10(var(last block's output) / var(first block's output)) of ``model``.

    Each token's variance over the hidden dimension, averaged over the batch's tokens."""
    _, outputs = stream(model, cfg)
    first, last = (h.var(-1).mean().item() for h in (outputs[0], outputs[-1]))
    return math.log10(last / first)


def deep_cosine(model: nn.Module, cfg: RunConfig) -> float:
    """The mean cosine of a block's input and output over the last quarter of ``model``'s blocks.

    Each token's cosine over the hidden dimension, averaged over the batch's tokens."""
    inputs, outputs = stream(model, cfg)
    last = range(len(inputs) - max(1, len(inputs) // 4), len(inputs))
    return sum(torch.cosine_similarity(inputs[i], outputs[i], dim=-1).mean().item()
               for i in last) / len(last)


def change(measure, records, made=None) -> float:
    """``measure(model, cfg)`` of a run's trained model less the same of its model at
    initialization: what training did to it. Read as a level, the two placements' streams differ
    before any training by their construction (a Peri-LN output norm adds about a unit of
    variance per sublayer; depth scaling shrinks every sublayer's input), and that difference,
    not training, decided the claims. ``made``: a change made to the trained model before it is
    read (a positive control's)."""
    cfg = records[0].run_config
    trained = trained_model(records[0], learning_rule=False)
    if made is not None:
        made(trained)
    return measure(trained, cfg) - measure(prepare_model(cfg).eval(), cfg)


def variance_growth(records, variant: str = "") -> float:
    """The change in training of log10(var(last block's output) / var(first block's output))
    (``change`` of ``growth``)."""
    return change(growth, records)


def deep_block_cosine(records, variant: str = "") -> float:
    """The change in training of the mean cosine of a block's input and output over the last
    quarter of the blocks (``change`` of ``deep_cosine``)."""
    return change(deep_cosine, records)


PRE_LN = deep_gpt()

# Both norm-generic: the scorecard puts each kind N in the 8-block GPT's norms and pairs its
# Pre-LN model with the same model of N under Peri-LN, or with N's outputs depth-scaled.
# Kinds that read the batch are left out (SEQUENCES: in a causal model they read later positions).
PERI_FLATTENS = Statistic(
    "periln_flat_stream", "kim-preln-hidden-state-grows-periln-flat",
    Rule("log10 var growth change", ">", 0.5), PRE_LN, variance_growth, claim_arm="pre",
    paired={"model.placement": "peri"}, paired_arm="peri", words="stream variance flatter "
    "under Peri-LN", excludes=SEQUENCES, source=KIM,
    statement="Training makes the residual stream's variance grow with depth under Pre-LN and "
              "keeps it flatter under Peri-LN (a norm on each sublayer's input and output) in a "
              "char GPT of {model.layers} blocks (growth change: log10 of var(last block) / "
              "var(first block) trained, less the same at initialization), paired by seed: "
              "{rule}.",
    slow=("",), alike={"model.placement": "peri"},
    role="regression")  # six 8-block char GPTs

SCALING_UNDOES_IDENTITY = Statistic(
    "depth_scaled_blocks", "sun-preln-deep-blocks-near-identity",
    Rule("cos change", ">", 0.0),
    PRE_LN, deep_block_cosine, claim_arm="pre", paired={"model.depth_scaled": True},
    paired_arm="scaled", words="deep blocks less identity-like, depth-scaled",
    excludes=SEQUENCES, source=SUN,
    statement="Training leaves the deep blocks of a Pre-LN char GPT of {model.layers} blocks "
              "closer to the identity than scaling each norm's output by 1/sqrt(depth) does (cos "
              "change: the mean cosine of a block's input and output over the last quarter of "
              "the blocks trained, less the same at initialization), paired by seed: {rule}.",
    slow=("",), alike={"model.depth_scaled": True},
    role="regression")
