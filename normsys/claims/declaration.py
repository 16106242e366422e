"""A claim's declaration: its id, the rule that decides it, its statement and source, and its
experiment (what it trains, what it reads of the runs), read in one place by everything that
speaks of the claim.

    NONE_COLLAPSES = Declaration(
        "dm-none-collapses-with-depth", Rule("kappa_6(none)", "<", 0.5), source=SOURCE,
        statement="Without normalization the representation collapses with depth: {rule}.",
        experiment=Experiment({"none": Arm("encoder", {"model.norm": "none"})}, reads=kappa_6))

    @NONE_COLLAPSES.mark
    def test_none_collapses_with_depth(claim, runs):
        claim.check(runs)    # trains, reads and decides NONE_COLLAPSES's experiment

    NONE_COLLAPSES.verdict({"none": values})   # its rule on other per-seed values (a control)

An arm is data (``Arm``): a preset and the settings it changes, checked when the claim is
declared. The marker carries the declaration to the plugin (normsys.claims.plugin): ``--claims-list``,
the report and the ledger read the statement and the rule from it, and a test that decides by
any other rule, or on values of its own where the claim declares an experiment, fails. A
norm-generic claim (``Statistic``, below) makes its declaration from its rule and experiment for
the claim's own norm kind, and the scorecard judges any kind through the same experiment. A claim
measured without training runs (random layers at initialization, say) declares no experiment:
its test computes the values it decides on.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from normsys.claims.verdict import LEVEL, Rule, Verdict, decide, looks, per_seed
from normsys.training.config import RunConfig, preset
from normsys.training.tiers import DEFAULT, TIERS
from normsys.training.tiers import tier as tier_of

Fetch = Callable[[list], list]  # configs -> their records, in order (the claims' `runs` fixture)

# What a claim's verdict at the CPU tier is worth, declared with the claim (``role``): the paper
# tier runs the original experiments, the CPU tier CI's smaller ones (normsys.training.tiers).
ROLES = {
    "test": "the CPU setting shows the effect where its source says it is (the claim is "
            "supported there, or a positive control on its own path is)",
    "regression": "the effect needs the source's scale: the CPU verdict guards the numbers, "
                  "the paper tier tests the claim",
    "identity": "a mathematical identity checked in floating point: no sample, so left out of "
                "the replication and multiplicity counts",
}


@dataclass(frozen=True)
class Arm:
    """An experiment's arm, as data: one seed's runs are the preset ``preset`` at the tier with
    ``settings`` changed and the seed as ``train.seed``, one run per entry of ``each`` (what a
    seed's runs differ in: the depths it trains, say); ``variants``: what each variant of the
    claim changes besides ("" the claim itself; an arm without variants is the same in each);
    ``at``: per tier, the settings it takes there in place of ``settings`` (a CPU tier's smaller
    model, say)."""

    preset: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    each: tuple[Mapping[str, Any], ...] = ({},)
    variants: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    at: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self):
        varied = {key for changes in (*self.each, *self.variants.values()) for key in changes}
        if "train.seed" in varied | set(self.settings):
            raise ValueError(f"arm of preset {self.preset!r}: train.seed is the seed each look "
                             f"gives, not a setting of the arm")
        if clash := sorted(varied & set(self.settings)):
            raise ValueError(f"arm of preset {self.preset!r}: {', '.join(clash)} set for the arm "
                             f"and again per run or variant; set each in one place")

    def __hash__(self) -> int:  # equal arms, whatever order their settings were given in
        return hash((self.preset, repr(sorted(self.settings.items())), repr(self.each),
                     repr(sorted(self.variants.items())), repr(sorted(self.at.items()))))

    def __call__(self, seed: int, tier: str = DEFAULT, variant: str = "") -> list[RunConfig]:
        if self.variants and variant not in self.variants:
            raise ValueError(f"arm of preset {self.preset!r}: no variant {variant!r}; its "
                             f"variants: {', '.join(map(repr, self.variants))}")
        changes = {**self.settings, **self.at.get(tier, {}), **self.variants.get(variant, {})}
        return [preset(self.preset, tier, **{**changes, **run, "train.seed": seed})
                for run in self.each]

    def changed(self, settings: Mapping[str, Any]) -> Arm:
        """This arm with ``settings`` set in every run at every tier: where a tier's ``at`` sets
        one of them too, ``settings`` wins there (a run left at its initialization stays one step
        long at a tier that sizes the arm's steps). A setting the arm varies per run or variant
        cannot be: an error."""
        at = {tier: {k: v for k, v in own.items() if k not in settings}
              for tier, own in self.at.items()}
        return replace(self, settings={**self.settings, **settings},
                       at={tier: own for tier, own in at.items() if own})

    @property
    def norm(self) -> str:
        """The norm kind the arm trains (its ``model.norm``)."""
        return self.value_of("model.norm")

    def value_of(self, name: str) -> Any:
        """The value of the setting ``name`` (``model.qk_norm``) in the arm's runs: its own, or
        its preset's."""
        if name in self.settings:
            return self.settings[name]
        section, _, key = name.partition(".")
        return getattr(getattr(preset(self.preset), section), key)


def by_norm(arm: Arm, *norms: str) -> dict[str, Arm]:
    """An experiment's arms, one per norm kind (``model.norm``), in order (the first minus the
    second)."""
    return {norm: arm.changed({"model.norm": norm}) for norm in norms}


def metric(name: str) -> Callable[[list, str], float]:
    """An experiment's ``reads``: the metric ``name`` of a seed's one run."""
    def reads(records: list, variant: str = "") -> float:
        return records[0].metrics[name]
    reads.__qualname__ = f"metric({name!r})"
    reads.__doc__ = f"The run's {name}."
    return reads


@functools.cache  # one reader per (value, kind): declarations made anew stay equal
def reading_with(value: Callable[..., Any], norm: str) -> Callable[[list, str], Any]:
    """An experiment's ``reads`` that puts the norm kind ``norm`` into the reading
    ``value(records, variant, norm=...)`` (a kind tried on a trained model's weights)."""
    def reads(records: list, variant: str = "") -> Any:
        return value(records, variant, norm=norm)
    reads.__qualname__ = f"{value.__qualname__}(norm={norm!r})"
    reads.__doc__ = value.__doc__
    return reads


@dataclass(frozen=True)
class Experiment:
    """What a claim trains and what it reads of the runs.

    ``arms``: each arm's name -> its ``Arm`` (a preset and its changes), that arm's runs of a seed.
    ``reads(records, variant)``: the value of one seed's runs of one arm (a dict: one value per
    part, each of which the rule must hold for). Per seed, the rule decides on the one arm's value;
    with two arms, on first - second (paired by seed, each side recorded); with ``combine``, on
    ``combine(*the arms' values of the seed)``."""

    arms: Mapping[str, Arm]
    reads: Callable[[list, str], Any]
    combine: Callable[..., Any] | None = None
    # arms its test also trains, for evidence only (read, reported or drawn, never decided on):
    # the session plans their runs with the others' (``planned``), and their cost is counted
    evidence: Mapping[str, Arm] = field(default_factory=dict)
    # whether ``reads`` is given a seed's runs where one diverged (their metrics NaN, ``diverged``
    # set), for a reading that gives a diverged run a value of its own; else the seed reads NaN
    reads_diverged: bool = False

    def __post_init__(self):
        if not self.arms:
            raise ValueError("an experiment needs at least one arm: name -> Arm(preset, "
                             "settings)")
        for name, arm in (*self.arms.items(), *self.evidence.items()):
            if not isinstance(arm, Arm):
                raise TypeError(f"an experiment's arm {name!r} must be an Arm (a preset and the "
                                f"settings it changes), got {type(arm).__name__} {arm!r}")
        if self.combine is None and len(self.arms) > 2:
            raise ValueError(f"an experiment of {len(self.arms)} arms ({', '.join(self.arms)}) "
                             f"needs combine(*values of a seed): the rule pairs two arms at most")

    @property
    def pairing(self) -> str | None:
        """How its rule's statistic reads the arms, as ``sides`` writes it: ``own`` for one arm,
        ``own - versus`` for two (first minus second), a combine of PAIRINGS by its formula;
        None for a combine of its own (its statistic is the combination's, given in full)."""
        if self.combine is None:
            return "own" if len(self.arms) == 1 else "own - versus"
        if len(self.arms) == 2:
            return next((k for k, f in PAIRINGS.items() if f is self.combine), None)
        return None

    def overridden(self, settings: Mapping[str, Any]) -> Experiment:
        """This experiment with ``settings`` (``{"model.residual": False}``) set in every arm's
        runs, and no evidence arms: a control's case where what the arms are compared on is made
        the same, so that what is left between them is what they should not differ in (a run
        trained longer, read at another point, paired with another seed)."""
        return replace(self, arms={name: arm.changed(settings) for name, arm in self.arms.items()},
                       evidence={})

    @property
    def alike_value(self) -> float | dict[str, float]:
        """What its rule's vector reads for one seed where every arm reads the same value: 0 for
        a difference, 1 for a ratio, one such value per part for a combine that gives parts. The
        value an A/A case's values scatter around (normsys.claims.verdict.apart)."""
        if len(self.arms) < 2:
            raise ValueError(f"an experiment of one arm ({', '.join(self.arms)}) has no arms to "
                             f"make alike")
        at = [per_seed({arm: [x] for arm in self.arms}, self.combine)[0] for x in (1.0, 2.0)]
        if at[0] != at[1]:
            raise ValueError(f"its combine reads {at[0]} for arms that all read 1 and {at[1]} "
                             f"for arms that all read 2: alike arms give it no one value")
        return at[0]

    def configs(self, seeds: Sequence[int], tier: str, variant: str = "") -> dict[str, list]:
        """Per arm, each seed's configs."""
        return {arm: [list(make(seed, tier, variant)) for seed in seeds]
                for arm, make in self.arms.items()}

    def planned(self, seeds: Sequence[int], tier: str, variant: str = "",
                evidence: bool = True) -> list:
        """Every run the claim trains on ``seeds``: its arms', then (``evidence``) its evidence
        arms'."""
        return [c for make in (*self.arms.values(), *(self.evidence.values() if evidence else ()))
                for seed in seeds for c in make(seed, tier, variant)]

    def records(self, fetch: Fetch, seeds: Sequence[int], tier: str,
                variant: str = "") -> dict[str, list]:
        """Per arm, each seed's records, all fetched in one call (so seeds and arms stack on a
        GPU, and a worker trains first the runs no other holds)."""
        per_arm = self.configs(seeds, tier, variant)
        fetched = iter(fetch([c for per_seed in per_arm.values() for cs in per_seed for c in cs]))
        return {arm: [[next(fetched) for _ in cs] for cs in per_seed]
                for arm, per_seed in per_arm.items()}

    def values(self, fetch: Fetch, seeds: Sequence[int], tier: str = DEFAULT,
               variant: str = "") -> dict[str, list]:
        """Per arm, each seed's value as ``reads`` reads it."""
        return {arm: [self.read(records, variant) for records in per_seed]
                for arm, per_seed in self.records(fetch, seeds, tier, variant).items()}

    def read(self, records: list, variant: str = "") -> Any:
        """One seed's value of one arm (``reads``): NaN where one of its runs diverged (unless it
        ``reads_diverged``), or where the value is undefined for them (a ratio over a zero
        gradient, say), which makes the verdict inconclusive and says how many seeds gave none."""
        if not self.reads_diverged and any(getattr(r, "diverged", False) for r in records):
            return math.nan
        try:
            return self.reads(records, variant)
        except ArithmeticError:  # e.g. log10 of a zero gradient ratio: no value, not a crash
            return math.nan


@dataclass(frozen=True)
class Declaration:
    """One claim: ``given``, its rule as declared (on the value's name, whose sides ``rule``
    writes from the experiment's arms, or a statistic in full); ``statement`` says it in words,
    with ``{rule}`` where its rule goes; ``seeds``: the claim's own seed count at every tier, where
    it differs from the tier's; ``experiment``: what it trains and reads (none where its test
    computes the values); ``variants``: the claim itself ("") and the variants it also runs at
    (each an id suffix, ``-masked``, that its arms know); ``slow``: those of them that take more
    than a few seconds on a CPU (marked slow at the CPU tier); ``role``: what its CPU verdict is
    worth (one of ROLES); ``alike``: the settings that make its arms alike (``Experiment.
    overridden``: one norm in both), for its negative controls and its A/A case, one of the A/A
    family (normsys.declarations.aa_cases); ``own_test``: a test of its own in its source's claim
    file decides it (marked ``@CLAIM.mark``: for evidence, figures, or values no experiment
    computes); every other claim is decided by claims/test_declared.py from its declaration."""

    id: str
    given: Rule
    source: str
    statement: str
    seeds: int | None = None
    experiment: Experiment | None = None
    variants: tuple[str, ...] = ("",)
    slow: tuple[str, ...] = ()
    role: str = "regression"
    alike: Mapping[str, Any] = field(default_factory=dict, hash=False)
    own_test: bool = False

    def __post_init__(self):
        if self.role not in ROLES:
            raise ValueError(f"claim {self.id}: role {self.role!r}; a claim's role is one of "
                             f"{', '.join(ROLES)}")
        if not isinstance(self.given, Rule):
            raise TypeError(f"claim {self.id}: its rule must be a verdict.Rule, got "
                            f"{type(self.given).__name__} {self.given!r}")
        if self.variants[:1] != ("",) or len(set(self.variants)) != len(self.variants) or \
                not all(v.startswith("-") for v in self.variants[1:]):
            raise ValueError(f"claim {self.id}: variants={self.variants!r}: the claim itself "
                             f"(\"\") first, then distinct id suffixes starting with '-'")
        if unknown := sorted(set(self.slow) - set(self.variants)):
            raise ValueError(f"claim {self.id}: slow={self.slow!r} names {unknown}, which are not "
                             f"among its variants {self.variants!r}")
        exp = self.experiment
        if exp is not None:
            self._check(exp)
            if exp.combine is None and len(exp.arms) == 2 and \
                    not VALUE_NAME.fullmatch(self.given.statistic):
                raise ValueError(f"claim {self.id}: its rule's statistic "
                                 f"{self.given.statistic!r} pairs two arms: give the value's name "
                                 f"alone (letters, digits, _ and spaces), and the sides are "
                                 f"written from the arms it pairs, first minus second")
        if self.alike:
            if exp is None or len(exp.arms) < 2:
                raise ValueError(f"claim {self.id}: alike={dict(self.alike)!r} makes the arms of "
                                 f"its experiment alike, and it declares "
                                 f"{'none' if exp is None else 'one arm'}")
            try:
                _ = exp.alike_value
            except ValueError as err:
                raise ValueError(f"claim {self.id}: {err}") from None
            self._check(exp.overridden(self.alike))
        try:  # one statement for every tier: the settings it quotes are the same at each
            texts = {tier: self.text(tier) for tier in TIERS}
        except (KeyError, AttributeError, IndexError, ValueError) as err:
            raise ValueError(f"claim {self.id}: its statement {self.statement!r} names "
                             f"{err}, which is neither {{rule}} nor a setting of its first "
                             f"arm's config ({{model.x}}, {{data.x}}, {{train.x}})") from None
        if len(set(texts.values())) > 1:
            raise ValueError(f"claim {self.id}: its statement quotes settings that differ by "
                             f"tier: " + "; ".join(f"{t}: {x}" for t, x in texts.items()))

    @property
    def rule(self) -> Rule:
        """The rule it is decided by: given on the value's name, its statistic written from the
        experiment's arms (``named``: ``test_acc(layernorm) - test_acc(l2)``)."""
        exp = self.experiment
        return self.given if exp is None else named(self.given, exp.pairing, *exp.arms)

    def _check(self, exp: Experiment) -> None:
        """Its experiment's reader takes (records, variant), and every arm makes configs at every
        tier and variant: an unknown preset, field or norm kind is said here, naming the claim."""
        try:
            inspect.signature(exp.reads).bind("records", "variant")
        except TypeError as err:
            raise TypeError(f"claim {self.id}: its reads must be callable as reads(records, "
                            f"variant) ({err})") from None
        for name, arm in {**exp.arms, **exp.evidence}.items():
            variants = dict.fromkeys([*(arm.variants or [""]), *self.variants])
            for tier, variant in itertools.product(TIERS, variants):
                try:
                    arm(0, tier, variant)
                except (KeyError, ValueError) as err:
                    raise ValueError(f"claim {self.id}: its arm {name!r} at the {tier} tier"
                                     + (f", variant {variant!r}" if variant else "") + ": "
                                     f"{err.args[0] if err.args else err}") from None

    def text(self, tier: str = DEFAULT) -> str:
        """The statement with the rule and the settings it quotes written in: ``{rule}``, and
        ``{train.steps:,}``, ``{model.layers}``... from the config of the first arm's first run
        at ``tier`` (its seed aside)."""
        cfg = next(iter(self.experiment.arms.values()))(0, tier)[0] if self.experiment else None
        settings = {"model": cfg.model, "data": cfg.data, "train": cfg.train} if cfg else {}
        return self.statement.format(rule=self.rule, **settings)

    @property
    def mark(self):
        """The claim's pytest marker (a MarkDecorator): its test is this claim."""
        import pytest  # the scorecard's command line reads declarations without pytest

        seeds = {} if self.seeds is None else {"seeds": self.seeds}
        return pytest.mark.claim(self.id, statement=self.text(), source=self.source,
                                 declared=self, **seeds)

    def _declared_experiment(self) -> Experiment:
        if self.experiment is None:
            raise ValueError(f"claim {self.id} declares no experiment: its test computes the "
                             f"values it decides on")
        return self.experiment

    def records(self, fetch: Fetch, seeds: Sequence[int], tier: str,
                variant: str = "") -> dict[str, list]:
        """Per arm of the experiment, each seed's records (``Experiment.records``)."""
        return self._declared_experiment().records(fetch, seeds, tier, variant)

    def verdict(self, values: Sequence | Mapping[str, Sequence],
                confidence: float = LEVEL) -> Verdict:
        """The claim's rule on per-seed values, decided as its test decides them
        (normsys.claims.verdict.decide): the arms' values by their names, paired or combined as
        the experiment pairs or combines them; a claim that declares no experiment takes one
        sequence, and so does a claim of one arm."""
        if self.experiment is not None:  # in the experiment's order, whatever the mapping's
            arms = list(self.experiment.arms)
            if not isinstance(values, Mapping) and len(arms) == 1:
                values = {arms[0]: values}
            if not isinstance(values, Mapping) or set(values) != set(arms):
                raise ValueError(f"claim {self.id}: give values by arm, named as its "
                                 f"experiment's arms {arms}; got "
                                 f"{list(values) if isinstance(values, Mapping) else 'a sequence'}")
            values = {arm: values[arm] for arm in arms}
        return decide(self.rule, values, confidence,
                      self.experiment.combine if self.experiment else None)


# ----------------------------------------------------------------------------- norm-generic claims


def _own_minus_versus(a: float, b: float) -> float:
    return a - b


def _versus_minus_own(a: float, b: float) -> float:
    return b - a


def relative_difference(a: float, b: float) -> float:
    """(a - b) / b."""
    return (a - b) / b


# a rule's statistic given as the value's name alone, whose sides the code writes from the arms
VALUE_NAME = re.compile(r"[\w ]+")


def sides(value: str, pairing: str, own: str, versus: str = "") -> str:
    """``pairing`` (``own``, or one of PAIRINGS) with each side named as the value of its arm:
    sides("corr", "versus - own", "layernorm", "none") is ``corr(none) - corr(layernorm)``."""
    return re.sub(r"own|versus", lambda m: f"{value}({own if m[0] == 'own' else versus})",
                  pairing)


def named(rule: Rule, pairing: str | None, *arms: str) -> Rule:
    """``rule`` with a statistic given as the value's name written out with the sides of its
    ``arms`` (own, then versus: ``sides``); a statistic given in full, or read by no pairing, as
    it is."""
    if pairing is None or not VALUE_NAME.fullmatch(rule.statistic):
        return rule
    return replace(rule, statistic=sides(rule.statistic, pairing, *arms))


# how a paired statistic combines a seed's value for the row's norm (own) and the reference's
PAIRINGS: dict[str, Callable[[float, float], float]] = {
    "own - versus": _own_minus_versus,
    "versus - own": _versus_minus_own,
    "(own - versus) / versus": relative_difference,
}


@dataclass(frozen=True)
class Statistic:
    """A norm-generic claim, declared once in normsys.declarations: the runs of one seed (``arm``,
    with norm kind N as its ``model.norm``, or as the setting ``setting`` names: ``model.qk_norm``
    for a claim about the norm on queries and keys; with ``setting`` None, N enters the reading
    alone and every kind's cell reads the arm's own runs), the per-seed value read from them
    (``value(records, variant)``, or ``value(records, variant, norm=N)`` where N enters the
    reading alone), and the claim's rule for any norm kind N (``rule_of``: a
    ``rule`` on the value's name, ``kappa_6``, reads ``kappa_6(N)``). With ``versus``, the rule
    is on the per-seed pairing of N's value with the reference's (``pairing``, one of PAIRINGS),
    its sides written by their names: ``corr(none) - corr(N)``. It is the claim's declaration
    for the claim's own kind (``declaration``, whose ``mark`` marks the test and whose ``check``
    decides it; ``statement`` has ``{rule}`` where the rule goes), it declares the claims it
    makes of other kinds (``declare``), and the scorecard makes a column of it
    (normsys.declarations.statistics) and judges any kind by it (``verdict``)."""

    name: str
    claim: str  # the claim id
    rule: Rule  # on the value's name (its sides written per kind: rule_of), or a statistic in full
    arm: Arm  # its model.norm is set to each kind the statistic is taken of
    value: Callable[..., float | dict[str, float]]  # (one seed's records, variant)
    versus: str = ""
    pairing: str = ""
    versus_arm: str = ""  # the reference's arm as the rule names it, where not by its kind
    claim_norm: str = "layernorm"  # the kind the claim itself is about
    own_seeds: int | None = None  # the claim's own seed count at every tier, if any
    variants: tuple[str, ...] = ("",)  # the claim's, as Declaration.variants
    slow: tuple[str, ...] = ()  # the claim's variants slow on a CPU, as Declaration.slow
    role: str = "regression"  # the claim's, as Declaration.role
    words: str = ""  # the column's name in words, for the figure
    excludes: frozenset[str] = frozenset()  # built-in kinds the experiment does not take
    source: str = ""
    statement: str = ""
    setting: str | None = "model.norm"  # the setting each kind N is put in (None: the reading)
    claim_arm: str = ""  # the claim's own kind's arm as the claim's rule names it, where not by kind
    reads_diverged: bool = False  # as Experiment.reads_diverged
    # a second arm of the same kind N, the arm with these settings changed, named ``paired_arm``:
    # N's value is its arm's less this arm's, seed by seed (Pre-LN less Peri-LN, both with N)
    paired: Mapping[str, Any] = field(default_factory=dict, hash=False)
    paired_arm: str = ""
    alike: Mapping[str, Any] = field(default_factory=dict, hash=False)  # the claim's, as
    # Declaration.alike
    own_test: bool = False  # the claim's, as Declaration.own_test

    def __post_init__(self):
        if bool(self.versus) != bool(self.pairing) or (self.pairing and
                                                       self.pairing not in PAIRINGS):
            raise ValueError(f"statistic {self.name}: a reference (versus={self.versus!r}) needs "
                             f"a pairing, one of {', '.join(map(repr, PAIRINGS))}; got "
                             f"pairing={self.pairing!r}")
        if bool(self.paired) != bool(self.paired_arm) or (self.paired and (
                self.versus or self.arm.each != ({},))):
            raise ValueError(f"statistic {self.name}: a paired arm (paired={dict(self.paired)!r}) "
                             f"needs its name (paired_arm), one run per seed in the arm, and no "
                             f"reference kind (versus)")
        if self.setting is None and (self.versus or self.paired):
            raise ValueError(f"statistic {self.name}: a kind that enters the reading alone "
                             f"(setting=None) reads one arm's runs: give no reference kind "
                             f"(versus) and no paired arm")
        if self.versus and not VALUE_NAME.fullmatch(self.rule.statistic):
            raise ValueError(f"statistic {self.name}: its rule's statistic "
                             f"{self.rule.statistic!r} pairs each kind with {self.versus}: give "
                             f"the value's name alone (letters, digits, _ and spaces), and the "
                             f"sides are written as {self.pairing!r}")

    def rule_of(self, norm: str) -> Rule:
        """The claim's rule for ``norm``, its statistic's sides named: ``kappa_6(norm)``, or the
        pairing with the reference, ``corr(none) - corr(norm)``; a statistic given in full is
        the same for every kind."""
        if self.paired:
            return named(self.rule, "own - versus", self.arm_name(norm), self.paired_arm)
        return named(self.rule, self.pairing or "own", self.arm_name(norm),
                     self.versus_arm or self.versus)

    def arm_name(self, norm: str) -> str:
        """The name of ``norm``'s arm: its kind, or for the claim's own kind the claim's name
        for it (``claim_arm``)."""
        return self.claim_arm if norm == self.claim_norm and self.claim_arm else norm

    def seeds(self, tier: str) -> list[int]:
        return list(range(tier_of(tier).first_look(self.own_seeds)))

    def applies(self, norm: str) -> bool:
        return norm not in self.excludes

    def arm_of(self, norm: str) -> Arm:
        """The statistic's runs of ``norm``: the arm's own where the kind enters the reading
        alone."""
        return self.arm if self.setting is None else self.arm.changed({self.setting: norm})

    def runs_of(self, norm: str) -> Arm:
        """Every run one seed of ``norm``'s cell takes: its arm's, then, for a paired statistic,
        the paired arm's (one run each)."""
        own = self.arm_of(norm)
        return replace(own, each=({}, dict(self.paired))) if self.paired else own

    def value_of(self, norm: str, records: list, variant: str = "") -> Any:
        """One seed's value of ``norm``'s cell from its runs (``runs_of``), read as the claim
        reads them: for a paired statistic, its arm's value less the paired arm's."""
        exp = self.experiment(norm)
        if not self.paired:
            return exp.read(records, variant)
        return exp.read(records[:1], variant) - exp.read(records[1:], variant)

    def experiment(self, norm: str) -> Experiment:
        """The claim's experiment with ``norm`` in place of its own kind: its arms in the order
        the pairing subtracts them. The reference kind itself (the scorecard's reference row) is
        paired with itself, its arms apart by name."""
        own, name = self.arm_of(norm), self.arm_name(norm)
        read = {"reads_diverged": self.reads_diverged}
        if self.paired:
            return Experiment({name: own, self.paired_arm: own.changed(self.paired)}, self.value,
                              **read)
        if self.setting is None:
            return Experiment({name: own}, reading_with(self.value, norm), **read)
        if not self.versus:
            return Experiment({name: own}, self.value, **read)
        versus = (self.versus_arm or self.versus) if norm != self.versus else \
            f"{norm} (reference)"
        reference = self.arm_of(self.versus)
        if self.pairing == "versus - own":
            return Experiment({versus: reference, name: own}, self.value, **read)
        combine = None if self.pairing == "own - versus" else PAIRINGS[self.pairing]
        return Experiment({name: own, versus: reference}, self.value, combine, **read)

    def declare(self, norm: str, claim: str, statement: str, source: str = "",
                role: str = "", own_test: bool = False) -> Declaration:
        """Another claim this statistic makes: its rule and experiment for ``norm`` (its role the
        statistic's, unless given; ``own_test`` as Declaration's)."""
        if norm == self.versus:
            raise ValueError(f"statistic {self.name}: {norm} against itself is no claim")
        return Declaration(claim, self.rule, source or self.source, statement,
                           self.own_seeds, self.experiment(norm), self.variants, self.slow,
                           role or self.role, own_test=own_test)

    def verdict(self, norm: str, values: Callable[[str], list]) -> Verdict:
        """The verdict for ``norm`` (any kind, the reference too) from each kind's per-seed
        values (``values(kind)``), decided as the claim decides."""
        if self.paired:  # each kind's values are its own pairs' already
            return decide(self.rule_of(norm), values(norm))
        exp = self.experiment(norm)
        return decide(self.rule_of(norm), {
            name: values(norm if self.setting is None else arm.value_of(self.setting))
            for name, arm in exp.arms.items()}, combine=exp.combine)

    @property
    def declaration(self) -> Declaration:
        """The claim itself: its rule and experiment for the kind it is about."""
        return replace(self.declare(self.claim_norm, self.claim, self.statement,
                                    own_test=self.own_test), alike=self.alike)

    @property
    def mark(self):
        """The claim's pytest marker (Declaration.mark), which carries this statistic to the
        scorecard (normsys.declarations.statistics)."""
        return self.declaration.mark.with_args(statistic=self)


def plan(tier: str, own: int | None = None, first: int | None = None,
         most: int | None = None) -> tuple[int, ...]:
    """The looks of a claim at ``tier``: ``first`` seeds (--claims-seeds) or its first look (its
    own count ``own``, else the tier's), then, while open, up to ``most`` (--claims-max-seeds) or
    the tier's most (normsys.training.tiers)."""
    at = tier_of(tier)
    return looks(first or at.first_look(own), most or at.max_seeds)


def declaration_of(claim: Declaration | Statistic) -> Declaration:
    """A claim's declaration: itself, or the one a Statistic makes of its own norm kind."""
    return claim.declaration if isinstance(claim, Statistic) else claim
