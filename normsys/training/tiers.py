"""The tiers a claim runs at, each declared once: its name, what it sets in every experiment, its
own sizes of the experiments, the data it trains on, the seeds a claim decides on there, whether a
claim's variants run there, whether it is meant for a GPU, and the time it is sized to.

The paper tier runs the original experiments (config.PRESETS). The CPU tier is CI's: every claim
with its negative controls trains cold within ``budget_minutes`` on two processes of a 2-core AMD
AVX2 machine, the slowest kind CI meets, so its experiments are smaller (``presets``), each sized
by its cost and by what its claims must show, and each claim says what its verdict there is worth
(its role, normsys.claims.declaration.ROLES).

Every other module reads this table (the configs, the data pools, the claims' looks and marks,
the command line's choices, the pages), so a third tier is one entry here.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Tier:
    name: str
    about: str                 # what the tier is for, in a few words
    overrides: dict = field(default_factory=dict)  # dotted-key settings it gives every preset
    presets: dict = field(default_factory=dict)  # a preset's own settings here, where they differ
    #                            from the original experiment's: preset "<name>-<tier>"
    #                            (config.PRESETS)
    seeds: int = 3             # a claim's first look: the seeds it decides on, unless it names its own
    max_seeds: int = 0         # the most seeds a claim still open adds, at the looks of
    #                            verdict.SCHEDULE (0: decided at its first look)
    full_data: bool = False    # the data sets' full splits; else the fixed small pools that ship
    #                            with normsys (normsys/datafiles)
    gpu: bool = False          # meant for a GPU: its claims carry the gpu mark, and a run of it on
    #                            a CPU is refused unless asked for (--allow-cpu-paper)
    variants: bool = True      # a claim's variants (Declaration.variants: -masked, -long) run here
    budget_minutes: float = 0  # the tier with its negative controls, cold, on two processes of
    #                            a 2-core AMD AVX2 machine, at most (0: not sized;
    #                            normsys.orchestration.runtimes prices it)

    def first_look(self, own: int | None = None) -> int:
        """How many seeds a claim first decides on here: its own count when it names one (the
        ``seeds=`` of its declaration), else the tier's."""
        return own if own is not None else self.seeds


# The CPU tier's own sizes, each chosen for what its family's claims must show before any claim was
# run under it (a claim's arm may change them again: depth for a depth claim, more steps). Sized
# again, smaller, where the tier with its controls had grown past its budget: the families whose
# claims cost the most per claim, each cut to about half before any claim ran under the cut.
CPU_PRESETS = {
    # Dual-Mechanism encoder: 6 blocks kept (blocks 1, 3, 6 probed); half the tokens, one epoch
    # of the preset's four (each step's FFN matmuls over batch x tokens dominate). Every claim of
    # the family is a regression claim here (its effect needs the paper's encoder and 15
    # epochs): one epoch guards its numbers as two did
    "encoder": {"model.seq_len": 32, "train.epochs": 1},
    # char GPT: 4 blocks and 250 steps kept (a trained model, the depth the Jacobian and logit
    # claims read); width 64, batch 16 and a context of 32, a tenth of the matmuls
    "char_gpt": {"model.d": 64, "train.batch_size": 16, "model.seq_len": 32},
    # char LSTM: half the width, 150 steps, half the 300 it had, for cost (its runs cost the most
    # per claim); its claims' positive control, a trained LM against an untrained one, needs 60
    "lstm": {"model.d": 128, "train.steps": 150},
    # FA residual MLP: width 128 on the first 20,000 training images, its epochs kept
    "resmlp": {"model.d": 128, "data.n_train": 20_000},
    # deep-dive CNN: 16 channels on the first 10,000 training images, one epoch at batch 128 (its
    # one claim is a regression claim here)
    "cnn": {"model.d": 16, "data.n_train": 10_000},
}

TIERS: dict[str, Tier] = {t.name: t for t in (
    Tier("cpu", "CI-sized: the tier with its controls cold in 30 minutes on 2 cores",
         presets=CPU_PRESETS, variants=False, budget_minutes=30),
    Tier("paper", "the original experiments' settings, on a GPU", {"train.device": "auto"},
         presets={"encoder": {  # the Dual-Mechanism paper's settings
             "model.d": 128, "model.seq_len": 128, "data.tier": "paper", "train.lr": 2e-4,
             "train.batch_size": 256, "train.epochs": 15, "train.device": "auto"}},
         seeds=5, max_seeds=21, full_data=True, gpu=True),
)}
DEFAULT = next(iter(TIERS))  # the first: what a run, a control and the scorecard take unless told


def tier(name: str) -> Tier:
    """The tier ``name``; an unknown name lists the valid ones."""
    if name not in TIERS:
        raise KeyError(f"unknown tier {name!r}; valid tiers: {', '.join(TIERS)}")
    return TIERS[name]
