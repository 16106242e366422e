"""The tiers a claim runs at, each declared once: its name, what it sets in every experiment, the
data it trains on, the seeds a claim decides on there, and whether it is meant for a GPU.

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
    #                            from the first tier's: preset "<name>-<tier>" (config.PRESETS)
    seeds: int = 3             # a claim's first look: the seeds it decides on, unless it names its own
    max_seeds: int = 0         # the most seeds a claim still open adds, at the looks of
    #                            verdict.SCHEDULE (0: decided at its first look)
    full_data: bool = False    # the data sets' full splits; else the fixed small pools that ship
    #                            with normsys (normsys/datafiles)
    gpu: bool = False          # meant for a GPU: its claims carry the gpu mark, and a run of it on
    #                            a CPU is refused unless asked for (--allow-cpu-paper)

    def first_look(self, own: int | None = None) -> int:
        """How many seeds a claim first decides on here: its own count when it names one (the
        ``seeds=`` of its declaration), else the tier's."""
        return own if own is not None else self.seeds


TIERS: dict[str, Tier] = {t.name: t for t in (
    Tier("cpu", "CI-sized: minutes on a CPU, fixed with each claim's rule"),
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
