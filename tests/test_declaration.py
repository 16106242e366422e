"""A claim's experiment: which runs it asks for, in one call, what it reads of them, and how the
arms' per-seed values reach the rule (normsys.claims.declaration)."""

from __future__ import annotations

import importlib
import inspect
import math
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

from normsys import catalog, declarations
from normsys.claims.declaration import (
    Arm,
    Declaration,
    Experiment,
    Statistic,
    by_norm,
    metric,
    relative_difference,
)
from normsys.claims.verdict import Rule
from normsys.training.config import preset

CLAIMS = Path(__file__).parents[1] / "claims"  # the claim test files


def record(value):
    return SimpleNamespace(metrics={"v": value})


A = {0: 1.0, 1: 1.2, 2: 1.1}  # arm a's value per seed
B = {0: 0.4, 1: 0.5, 2: 0.7}
VALUES = {8: A, 9: B, 10: {seed: a + 1 for seed, a in A.items()}}  # by the arm's width


def arm(d: int, **kw) -> Arm:
    """An arm told apart by its width ``d``: its runs' value per seed is VALUES[d]."""
    return Arm("tanh_mlp", {"model.d": d}, **kw)


def fetch_values(configs):
    """A fetch whose records carry the value VALUES gives each config's width and seed."""
    return [record(VALUES[c.model.d][c.train.seed]) for c in configs]


def checked(exp: Experiment, rule: Rule, seeds=(0, 1, 2), variant: str = ""):
    """The verdict a claim of ``exp`` and ``rule`` reaches on the values ``fetch_values`` gives
    (what Claim.check decides), and the values by arm."""
    values = exp.values(fetch_values, list(seeds), "cpu", variant)
    return Declaration("c-x", rule, "t", "{rule}", experiment=exp).verdict(values), values


def two_arms(**kw) -> Experiment:
    return Experiment({"a": arm(8), "b": arm(9)}, metric("v"), **kw)


def test_the_runs_of_every_arm_and_seed_are_asked_for_in_one_call_in_order():
    calls = []

    def fetch(configs):
        calls.append([(c.model.d, c.train.seed, c.model.layers, c.train.device) for c in configs])
        return fetch_values(configs)

    exp = Experiment({"a": Arm("tanh_mlp", each=({"model.d": 8}, {"model.d": 9}),
                               variants={"": {}, "-x": {"model.layers": 3}}),
                      "b": arm(10)}, lambda rs, v: [r.metrics["v"] for r in rs])
    got = exp.values(fetch, [0, 1], "paper", "-x")
    assert calls == [[(8, 0, 3, "auto"), (9, 0, 3, "auto"), (8, 1, 3, "auto"), (9, 1, 3, "auto"),
                      (10, 0, 10, "auto"), (10, 1, 10, "auto")]]  # b: the same in every variant
    assert got == {"a": [[1.0, 0.4], [1.2, 0.5]], "b": [[2.0], [2.2]]}
    declared = Declaration("c-ab", Rule("v", ">", 0.0), "t", "{rule}", experiment=exp)
    assert declared.records(fetch, [0, 1], "paper", "-x") == exp.records(fetch, [0, 1], "paper",
                                                                        "-x")
    assert declared.records(fetch, [1], "cpu")["b"] == [[record(2.2)]]
    assert calls[-1] == [(8, 1, 10, "cpu"), (9, 1, 10, "cpu"), (10, 1, 10, "cpu")]


def test_the_arms_and_reads_are_given_the_variant_the_claim_itself_by_default():
    exp = Experiment({"a": arm(8, variants={"": {}, "-x": {"model.layers": 3}})},
                     lambda rs, variant: rs[0].metrics["v"] * {"": 1, "-x": 10}[variant])
    assert exp.values(fetch_values, [0, 1], "cpu", "-x") == {"a": [10.0, 12.0]}
    assert exp.values(fetch_values, [0, 1], "cpu") == {"a": [1.0, 1.2]}
    assert exp.records(fetch_values, [0], "cpu")["a"][0][0].metrics == {"v": 1.0}
    assert [c.model.layers for [[c]] in (exp.configs([0], "cpu", v)["a"] for v in ("", "-x"))] \
        == [10, 3]
    declared = Declaration("c-a", Rule("v", ">", 0.0), "t", "{rule}", experiment=exp)
    assert declared.records(fetch_values, [1], "cpu")["a"][0][0].metrics == {"v": 1.2}
    assert declared.records(fetch_values, [0, 2], "paper", "-x") == \
        exp.records(fetch_values, [0, 2], "paper", "-x")
    with pytest.raises(ValueError, match="arm of preset 'tanh_mlp': no variant '-y'; its "
                                         "variants: '', '-x'"):
        exp.configs([0], "cpu", "-y")


def test_two_arms_are_paired_first_minus_second():
    exp, rule = two_arms(), Rule("v", ">", 0.3)
    decided, values = checked(exp, rule)
    assert decided.values == pytest.approx([0.6, 0.7, 0.4]) and decided.rule == "> 0.3"
    assert values == {"a": [1.0, 1.2, 1.1], "b": [0.4, 0.5, 0.7]}
    declared = Declaration("c-ab", rule, "t", "{rule}", experiment=exp)
    # the arms by name, in the experiment's order whatever the mapping's: a swap is said
    assert declared.verdict(dict(reversed(values.items()))) == decided
    swapped = declared.verdict({"a": values["b"], "b": values["a"]})
    assert swapped.mean == pytest.approx(-17 / 30)
    with pytest.raises(ValueError, match=r"claim c-ab: give values by arm, named as its "
                                         r"experiment's arms \['a', 'b'\]; got \['a', 'c'\]"):
        declared.verdict({"a": values["a"], "c": values["b"]})
    with pytest.raises(ValueError, match="got a sequence"):
        declared.verdict([0.6, 0.7, 0.4])


def test_arms_of_unequal_seeds_are_refused_and_the_confidence_reaches_the_rule():
    rule = Rule("v", ">", 0.3)
    declared = Declaration("c-ab", rule, "t", "{rule}", experiment=two_arms())
    combined = Declaration("c-ab", rule, "t", "{rule}",
                           experiment=two_arms(combine=lambda a, b: a / b))
    with pytest.raises(ValueError, match="one value per seed on both sides, got 3 and 2"):
        declared.verdict({"a": [1.0, 2.0, 3.0], "b": [1.0, 2.0]})
    with pytest.raises(ValueError, match="zip"):
        combined.verdict({"a": [1.0, 2.0, 3.0], "b": [1.0, 2.0]})
    values = {"a": [1.0, 1.2, 1.1], "b": [0.4, 0.5, 0.7]}
    wide, narrow = declared.verdict(values), declared.verdict(values, confidence=0.5)
    assert narrow.high - narrow.low < wide.high - wide.low and wide.verdict == "inconclusive"
    assert narrow.verdict == "supported"  # 0.3 lies below the narrower interval
    one = Declaration("c-a", Rule("v", ">", 0.5), "t", "{rule}",
                      experiment=Experiment({"a": arm(8)}, metric("v")))
    assert one.verdict({"a": [1.0, 1.2, 1.1]}) == one.verdict([1.0, 1.2, 1.1])
    assert one.verdict([1.0, 1.2, 1.1]).verdict == "supported"


def test_combine_makes_the_value_the_rule_decides_on():
    decided, _ = checked(two_arms(combine=lambda a, b: a / b), Rule("v(a) / v(b)", ">", 1.0))
    assert decided.values == pytest.approx([2.5, 2.4, 1.1 / 0.7]) and decided.rule == "> 1"


def test_one_arm_is_its_own_value_and_parts_must_each_hold():
    one = Experiment({"a": arm(8)}, metric("v"))
    rule = Rule("v", ">", 0.0)
    ones, _ = checked(one, rule)
    assert ones.values == (1.0, 1.2, 1.1) and ones.comparisons == {}
    parts = Experiment({"a": arm(8)},
                       lambda rs, v: {"x": rs[0].metrics["v"], "y": -rs[0].metrics["v"]})
    deciding, _ = checked(parts, rule)
    assert deciding.values == (-1.0, -1.2, -1.1)  # the part the verdict rests on: y, refuted
    assert {k: list(v["values"]) for k, v in deciding.comparisons.items()} == \
        {"x": [1.0, 1.2, 1.1], "y": [-1.0, -1.2, -1.1]}
    declared = Declaration("c-p", rule, "t", "{rule}", experiment=parts)
    decision = declared.verdict([{"x": 1.0, "y": -1.0}, {"x": 2.0, "y": -1.2},
                                 {"x": 3.0, "y": -1.1}])
    assert decision.verdict == "refuted" and "deciding: y" in decision.reason
    # refuted at 95% but not at its family's 97.5% (Holm): open
    held = declared.verdict([{"x": 1.0, "y": -1.0}, {"x": 2.0, "y": -2.0}, {"x": 3.0, "y": -1.5}])
    assert held.verdict == "inconclusive" and "y: inconclusive" in held.reason
    both = [{"x": 1.0, "y": 1.0}, {"x": 1.2, "y": 1.2}, {"x": 1.1, "y": 1.1}]
    wide, narrow = declared.verdict(both), declared.verdict(both, confidence=0.5)
    assert narrow.high - narrow.low < wide.high - wide.low
    diverged = declared.verdict([{"x": 1.0, "y": 1.0}, math.nan, {"x": 3.0, "y": 2.0}])
    assert diverged.verdict == "inconclusive" and math.isnan(diverged.values[1])


def test_a_diverged_run_or_an_undefined_value_reads_as_nan():
    """One policy for every reader of a seed's runs (the claims' and the scorecard's)."""
    def ratio(records, variant=""):
        return 1.0 / records[0].metrics["v"]

    exp = Experiment({"a": arm(8)}, ratio)
    assert exp.read([SimpleNamespace(metrics={"v": 0.5}, diverged=False)]) == 2.0
    assert math.isnan(exp.read([SimpleNamespace(metrics={"v": 0.0}, diverged=False)]))
    assert math.isnan(exp.read([SimpleNamespace(metrics={"v": 0.5}, diverged=True)]))
    # unless the reading gives a diverged run a value of its own (a sweep's loss at init, say)
    own = Experiment({"a": arm(8)}, ratio, reads_diverged=True)
    assert own.read([SimpleNamespace(metrics={"v": 0.5}, diverged=True)]) == 2.0


def test_a_combined_value_with_parts_is_decided_part_by_part():
    exp = Experiment({"ref": arm(9), "a": arm(8), "b": arm(10)}, metric("v"),
                     combine=lambda ref, *others: {f"o{i}": o - ref for i, o in enumerate(others)})
    decided, _ = checked(exp, Rule("v", ">", 0.0))
    values = {k: v["values"] for k, v in decided.comparisons.items()}
    assert values["o0"] == pytest.approx([0.6, 0.7, 0.4])
    assert values["o1"] == pytest.approx([1.6, 1.7, 1.4])


def test_an_experiment_needs_arms_and_a_combine_past_two():
    with pytest.raises(ValueError, match="needs at least one arm"):
        Experiment({}, metric("v"))
    three = {k: arm(8) for k in "abc"}
    with pytest.raises(ValueError, match=r"an experiment of 3 arms \(a, b, c\) needs "
                                         r"combine\(\*values of a seed\)"):
        Experiment(three, metric("v"))


def test_a_declaration_without_an_experiment_says_its_test_computes():
    bare = Declaration("c-bare", Rule("v", ">", 0.0), source="t", statement="{rule}")
    assert bare.verdict([1.0, 1.1, 1.2]).verdict == "supported"  # its test's own values
    with pytest.raises(ValueError, match="claim c-bare declares no experiment: its test computes"):
        bare.records(fetch_values, [0], "cpu")


def test_an_arm_is_its_preset_with_its_changes_and_by_norm_gives_each_arm_its_norm():
    made = by_norm(arm(8), "layernorm", "none")
    assert list(made) == ["layernorm", "none"] and made["none"].norm == "none"
    assert made["none"](2, "paper", "-x") == [preset("tanh_mlp", "paper", **{
        "model.d": 8, "model.norm": "none", "train.seed": 2})]
    assert arm(8).norm == preset("tanh_mlp").model.norm == "none"  # the preset's own
    same = Arm("tanh_mlp", {"model.norm": "none", "model.d": 8})  # in another order: equal
    assert made["none"] == same and hash(made["none"]) == hash(same)
    depths = Arm("tanh_mlp", each=({"model.layers": 2}, {"model.layers": 4}))
    assert [c.model.layers for c in depths(0, "cpu")] == [2, 4]
    with pytest.raises(ValueError, match="arm of preset 'tanh_mlp': model.layers set for the arm "
                                         "and again per run or variant"):
        depths.changed({"model.layers": 3})
    with pytest.raises(ValueError, match="train.seed is the seed each look gives"):
        Arm("mlp", variants={"": {"train.seed": 1}})
    assert metric("v")([record(0.3)], "") == 0.3 and "metric('v')" in repr(metric("v"))

    # a tier's own settings in place of the arm's there, and nowhere else
    small = Arm("tanh_mlp", {"model.d": 32, "model.layers": 6}, at={"cpu": {"model.d": 8}})
    assert [(c.model.d, c.model.layers) for t in ("cpu", "paper") for c in small(0, t)] == [
        (8, 6), (32, 6)]
    assert small != Arm("tanh_mlp", {"model.d": 32, "model.layers": 6})
    # a change sets its settings at every tier, a tier's own size of the same setting included
    # (a run left at its initialization is one step long where the tier sizes the arm's steps)
    untrained = small.changed({"model.d": 4, "train.lr": 0.0})
    assert [(c.model.d, c.train.lr) for t in ("cpu", "paper") for c in untrained(0, t)] == [
        (4, 0.0), (4, 0.0)]
    assert small.changed({"train.lr": 0.0}).at == small.at  # the tier's other settings kept


@pytest.mark.parametrize("pairing,order,combined", [
    ("own - versus", ["rmsnorm", "none"], False),
    ("versus - own", ["none", "rmsnorm"], False),
    ("(own - versus) / versus", ["rmsnorm", "none"], True),
])
def test_a_statistic_declares_its_arms_in_the_order_its_pairing_subtracts(pairing, order,
                                                                          combined):
    stat = Statistic("v", "c-v", Rule("v", ">", 0.0), arm(8), metric("v"), versus="none",
                     pairing=pairing, claim_norm="rmsnorm")
    exp = stat.declaration.experiment
    assert list(exp.arms) == order and (exp.combine is not None) == combined
    assert exp == stat.experiment("rmsnorm")  # the same experiment each time it is made
    with pytest.raises(ValueError, match="statistic v: none against itself is no claim"):
        stat.declare("none", "c-none", "statement")
    itself = stat.experiment("none")  # the scorecard's reference row: paired with itself
    assert list(itself.arms) == [{"rmsnorm": "none", "none": "none (reference)"}[n] for n in order] and \
        {a.norm for a in itself.arms.values()} == {"none"}


def test_a_statistic_puts_each_kind_in_the_setting_it_names_and_its_claim_names_its_own_arm():
    """setting="model.qk_norm": each kind N goes on the queries and keys, the model's own norm as
    the arm has it; the claim's own kind keeps the arm name its rule was written with, every
    other kind's arm is named by its kind; the verdict reads each arm's values by that setting."""
    gpt = Arm("char_gpt", {"model.norm": "rmsnorm", "model.d": 32})
    stat = Statistic("qk", "c-qk", Rule("v", ">", 0.0), gpt, metric("v"), versus="none",
                     pairing="versus - own", versus_arm="plain", claim_arm="qk-norm",
                     setting="model.qk_norm", reads_diverged=True)
    exp = stat.declaration.experiment
    assert list(exp.arms) == ["plain", "qk-norm"] and exp.reads_diverged
    assert [(a.value_of("model.qk_norm"), a.norm) for a in exp.arms.values()] == [
        ("none", "rmsnorm"), ("layernorm", "rmsnorm")]
    assert [c.model.qk_norm for a in exp.arms.values() for c in a(0)] == ["none", "layernorm"]
    assert list(stat.experiment("l2").arms) == ["plain", "l2"]
    assert str(stat.rule_of("N")) == "v(plain) - v(N) > 0"
    values = {"none": [1.0, 1.1, 1.2], "l2": [0.2, 0.3, 0.25]}
    assert stat.verdict("l2", values.__getitem__).values == pytest.approx((0.8, 0.8, 0.95))
    assert Arm("char_gpt").value_of("model.qk_norm") == "none"  # the preset's


def test_a_paired_statistic_pairs_each_kind_with_itself_under_other_settings():
    """paired: N's cell is N's arm less the same arm of N with the paired settings, seed by seed;
    the claim's own arms keep their names, a kind's runs are both arms', and its value is the
    difference of the two readings; a paired arm needs its name and no reference kind."""
    gpt = Arm("char_gpt", {"model.d": 32})
    stat = Statistic("flat", "c-flat", Rule("v", ">", 0.5), gpt, metric("v"), claim_arm="pre",
                     paired={"model.placement": "peri"}, paired_arm="peri")
    exp = stat.declaration.experiment
    assert list(exp.arms) == ["pre", "peri"] and exp.combine is None  # pre - peri
    assert [c.model.placement for c in exp.arms["peri"](0)] == ["peri"]
    assert [(c.model.norm, c.model.placement) for c in stat.runs_of("rmsnorm")(0)] == [
        ("rmsnorm", "pre"), ("rmsnorm", "peri")]
    assert str(stat.rule_of("N")) == "v(N) - v(peri) > 0.5"

    class Run:
        def __init__(self, v):
            self.metrics, self.diverged = {"v": v}, False

    assert stat.value_of("rmsnorm", [Run(2.0), Run(0.5)]) == 1.5
    assert stat.verdict("rmsnorm", {"rmsnorm": [1.5, 1.6, 1.7]}.__getitem__).verdict == "supported"
    for bad in ({"paired_arm": ""}, {"versus": "none", "pairing": "own - versus"}):
        with pytest.raises(ValueError, match="a paired arm"):
            Statistic("flat", "c-flat", Rule("v", ">", 0.5), gpt, metric("v"),
                      **{"paired": {"model.placement": "peri"}, "paired_arm": "peri", **bad})


def test_a_kind_that_enters_the_reading_alone_reads_the_claims_own_runs():
    """setting=None: every kind's runs are the arm's own (one run of a seed serves every kind's
    cell), the kind is handed to the reading (norm=N), and the rule names it; a reference kind or
    a paired arm is refused."""
    gpt = Arm("char_gpt", {"model.d": 32})

    def gap(records, variant="", norm="rmsnorm"):
        return {"rmsnorm": -14.0, "none": -1.0}[norm] + records[0].metrics["v"]

    stat = Statistic("gap", "c-gap", Rule("log10 gap", "<", -9.0), gpt, gap, setting=None,
                     claim_norm="rmsnorm")
    assert stat.runs_of("none")(0) == stat.runs_of("rmsnorm")(0) == gpt(0)
    assert [c.model.norm for c in stat.runs_of("none")(0)] == ["layernorm"]  # the arm's own
    assert str(stat.rule_of("none")) == "log10 gap(none) < -9"
    exp = stat.declaration.experiment
    assert list(exp.arms) == ["rmsnorm"] and exp.reads.__qualname__ == (
        "test_a_kind_that_enters_the_reading_alone_reads_the_claims_own_runs.<locals>.gap"
        "(norm='rmsnorm')")

    class Run:
        metrics, diverged = {"v": 0.5}, False

    assert (stat.value_of("rmsnorm", [Run()]), stat.value_of("none", [Run()])) == (-13.5, -0.5)
    assert stat.verdict("none", {"none": [-0.5, -0.4, -0.6]}.__getitem__).verdict == "refuted"
    assert stat.verdict("rmsnorm", {"rmsnorm": [-13.5, -13.4, -13.6]}.__getitem__).verdict == \
        "supported"
    for bad in ({"versus": "none", "pairing": "own - versus"},
                {"paired": {"model.placement": "peri"}, "paired_arm": "peri"}):
        with pytest.raises(ValueError, match="enters the reading alone"):
            Statistic("gap", "c-gap", Rule("log10 gap", "<", -9.0), gpt, gap, setting=None, **bad)


def test_every_claim_that_trains_declares_its_experiment():
    """A claim test that takes the ``run`` or ``runs`` fixture trains (or fetches) runs: what it
    trains and reads is its declaration's experiment, which decides it."""
    modules = [importlib.import_module(f"claims.{p.stem}") for p in CLAIMS.glob("test_*.py")]
    tests = {name: mark.kwargs["declared"] for module in modules
             for name, test in vars(module).items() if name.startswith("test_")
             for mark in getattr(test, "pytestmark", []) if mark.name == "claim"
             if {"run", "runs"} & set(inspect.signature(test).parameters)}
    assert "test_residual_preserves_gradients" in tests  # the claim files were read
    assert not [name for name, declared in tests.items() if declared.experiment is None]


# ----------------------------------------------------------------------------- planned before a run


def claim_item(declared, tier="paper", variant="", seeds=None, max_seeds=None, offset=0,
               index=()):
    """A collected claim item as the planner reads it: its marker, its parameters, the options."""
    from normsys.claims.params import Variant

    marker = pytest.mark.claim("c-x", declared=declared).mark
    option = SimpleNamespace(claims_seeds=seeds, claims_max_seeds=max_seeds,
                             claims_seed_offset=offset)
    return SimpleNamespace(get_closest_marker=lambda name: marker if name == "claim" else None,
                           callspec=SimpleNamespace(params={"tier": tier,
                                                            "variant": Variant(variant)}),
                           config=SimpleNamespace(option=option), nodeid="claims/x.py::c-x")


def test_a_claim_plans_its_first_look_from_its_declared_experiment():
    """The runs planned for a claim are its experiment's configs at its first look's seeds (the
    tier's, --claims-seeds, from --claims-seed-offset), arm by arm, of its variant."""
    from normsys.claims.items import claim_looks, planned_configs

    def made(norm):
        return Arm("ffn_stack", {"model.norm": norm},
                   variants={"": {"train.steps": 1}, "-long": {"train.steps": 2}})

    def read(configs):
        return [(c.model.norm, {"cpu": "cpu", "auto": "paper"}[c.train.device], c.train.seed,
                 c.train.steps) for c in configs]

    declared = Declaration("c-x", Rule("v", ">", 0), "src", "statement",
                           experiment=Experiment({"a": made("layernorm"), "b": made("none")},
                                                 reads=metric("v")))
    item = claim_item(declared, variant="-long")
    assert claim_looks(item, item.get_closest_marker("claim")) == (5, 8, 13, 21)
    assert read(planned_configs(item)) == [(norm, "paper", s, 2) for norm in ("layernorm", "none")
                                           for s in range(5)]
    item = claim_item(declared, tier="cpu", seeds=2, offset=3)
    assert claim_looks(item, item.get_closest_marker("claim")) == (2,)  # the CPU tier: one look
    assert read(planned_configs(item)) == [("layernorm", "cpu", 3, 1), ("layernorm", "cpu", 4, 1),
                                           ("none", "cpu", 3, 1), ("none", "cpu", 4, 1)]
    item = claim_item(declared, max_seeds=5)  # a single look at the paper tier's 5 seeds
    assert claim_looks(item, item.get_closest_marker("claim")) == (5,)
    evidence = Declaration("c-e", Rule("v", ">", 0), "src", "statement", experiment=Experiment(
        {"a": made("layernorm")}, reads=metric("v"), evidence={"b": made("rmsnorm")}))
    assert read(planned_configs(claim_item(evidence, tier="cpu"))) == [
        (norm, "cpu", s, 1) for norm in ("layernorm", "rmsnorm") for s in range(3)]
    assert list(evidence.experiment.configs(range(3), "cpu")) == ["a"]  # decided on: a only


def test_a_claim_plans_the_look_its_ledger_entries_in_this_environment_show_it_took():
    """Open after its first look's 5 seeds in this GPU's 5-seed ledger, a claim that may look to
    21 plans its second look's 8 seeds; with its first look only, its 5."""
    from normsys.claims.items import planned_configs, planned_looks

    declared = Declaration("c-x", Rule("v", ">", 0), "src", "statement",
                           experiment=Experiment({"a": Arm("ffn_stack")}, reads=metric("v")))
    asked = []

    def history(cid, tier, environment, first_seed):
        asked.append((cid, tier))
        return [SimpleNamespace(verdict="inconclusive", seeds=list(range(5)), plan=[5])]

    ledgers = SimpleNamespace(history=history)
    seeds = [c.train.seed for c in planned_configs(claim_item(declared, variant="-long"), ledgers)]
    assert seeds == list(range(8)) and asked == [("c-x-long", "paper")]
    assert [c.train.seed for c in planned_configs(claim_item(declared, offset=2), ledgers)] == \
        list(range(2, 10))
    looks = planned_looks(claim_item(declared, offset=2), ledgers)  # each look's new seeds
    assert [[c.train.seed for c in look] for look in looks] == [[2, 3, 4, 5, 6], [7, 8, 9]]
    assert len(planned_configs(claim_item(declared, max_seeds=5), ledgers)) == 5
    assert len(planned_configs(claim_item(declared))) == 5  # no ledgers: the first look


def test_a_claim_without_an_experiment_plans_what_it_fetched_last(monkeypatch):
    from normsys.claims import items
    from normsys.orchestration import runs

    monkeypatch.setattr(runs, "planned", lambda cid, tier: [f"last run of {cid} [{tier}]"])
    declared = Declaration("c-x", Rule("v", ">", 0), "src", "statement")
    assert items.planned_configs(claim_item(declared, variant="-nonpad", tier="cpu")) == \
        ["last run of c-x-nonpad [cpu]"]


LEDGERS = CLAIMS / "ledger"


def test_a_declared_claims_plan_is_every_run_its_record_says_it_fetched():
    """What a session plans and costs for a claim (its experiment's arms and evidence arms) is
    the set of runs its test fetched when its verdict was recorded, figures' runs included: a
    run fetched outside the plan would train unplanned and uncounted. Checked against each
    tier's reference entry that records its runs' fingerprint (entries imported from reports do
    not), at the tiers the claim runs at (older entries hold the settings they were made under:
    history)."""
    from normsys import declarations
    from normsys.claims import ledger

    recorded, runs_at = ledger.records(LEDGERS), declarations.tiers_run()
    checked = []
    for entry in catalog.entries():
        experiment = entry.declared.experiment
        for variant in entry.declared.variants if experiment is not None else ():
            cid = entry.declared.id + variant
            record = recorded.get(cid, ledger.Record(cid))
            for tier, key in record.reference.items():
                was = record.entries[key]
                if not was.settings_fingerprint or tier not in runs_at[cid]:
                    continue
                planned = experiment.planned(was.seeds, was.tier, variant)
                settings, fingerprint = ledger.run_settings(planned)
                assert fingerprint == was.settings_fingerprint, (
                    f"{cid} [{was.key}]: planned runs differ from those its entry records: "
                    f"{ledger.setting_changes(was.settings, settings)}")
                checked.append(cid)
    assert len(set(checked)) >= 30


def test_an_arm_that_is_not_data_or_a_reading_that_cannot_take_its_arguments_is_said():
    with pytest.raises(TypeError, match=r"an experiment's arm 'a' must be an Arm \(a preset and "
                                        r"the settings it changes\), got function"):
        Experiment({"a": lambda seed, tier, variant: [seed]}, metric("v"))
    with pytest.raises(TypeError, match=r"an experiment's arm 'e' must be an Arm"):
        Experiment({"a": arm(8)}, metric("v"), evidence={"e": "mlp"})
    with pytest.raises(TypeError, match=r"claim c-x: its reads must be callable as "
                                        r"reads\(records, variant\)"):
        Declaration("c-x", Rule("v", ">", 0), "t", "{rule}",
                    experiment=Experiment({"a": arm(8)}, lambda records: 0.0))


def test_a_rule_on_the_values_name_has_its_sides_written_from_the_arms():
    arms = {"a": arm(8), "b": arm(9)}

    def declared(statistic: str, exp: Experiment) -> str:
        return Declaration("c-ab", Rule(statistic, ">", 0), "t", "{rule}",
                           experiment=exp).rule.statistic

    assert declared("v", Experiment(arms, metric("v"))) == "v(a) - v(b)"
    assert declared("log10 ratio", Experiment({"b": arm(9), "a": arm(8)}, metric("v"))) == \
        "log10 ratio(b) - log10 ratio(a)"
    assert declared("v", Experiment({"a": arm(8)}, metric("v"))) == "v(a)"
    assert declared("v", Experiment(arms, metric("v"), combine=relative_difference)) == \
        "(v(a) - v(b)) / v(b)"
    own = Experiment(arms, metric("v"), combine=lambda a, b: a / b)  # its own words
    assert declared("v(a) / v(b)", own) == "v(a) / v(b)" and declared("ratio", own) == "ratio"
    assert declared("max_LN rel. error", Experiment({"a": arm(8)}, metric("v"))) == \
        "max_LN rel. error"  # a statistic in full is kept
    for statistic in ("v(a) - v(b)", "v(b) - v(a)", "v(a) - v(plain)", "v(a) / v(b)"):
        with pytest.raises(ValueError, match=r"claim c-ab: its rule's statistic .* pairs two "
                                             r"arms: give the value's name alone"):
            declared(statistic, Experiment(arms, metric("v")))


def test_an_arm_that_makes_no_config_is_said_naming_the_claim_when_it_is_declared():
    for changes, says in (({"model.nope": 1}, "unknown config key 'model.nope'"),
                          ({"model.norm": "nonorm"}, "unknown norm kind 'nonorm'")):
        with pytest.raises(ValueError, match=f"claim c-x: its arm 'a' at the cpu tier: {says}"):
            Declaration("c-x", Rule("v", ">", 0), "t", "{rule}",
                        experiment=Experiment({"a": Arm("mlp", changes)}, metric("v")))
    with pytest.raises(ValueError, match="claim c-x: its arm 'a' at the cpu tier, variant '-x': "
                                         "unknown norm kind 'nonorm'"):
        Declaration("c-x", Rule("v", ">", 0), "t", "{rule}", experiment=Experiment(
            {"a": Arm("mlp", variants={"": {}, "-x": {"model.norm": "nonorm"}})}, metric("v")))
    with pytest.raises(KeyError, match="unknown preset 'nope'"):
        Arm("nope")(0, "cpu")


def test_a_statement_quotes_its_settings_from_its_config_and_the_same_at_every_tier():
    same = Experiment({"a": Arm("mlp", {"train.steps": 2000})}, metric("v"))
    declared = Declaration("c-x", Rule("v", ">", 0), "t", "after {train.steps:,} steps: {rule}",
                           experiment=same)
    assert declared.text() == declared.text("paper") == "after 2,000 steps: v(a) > 0"
    cpu_epochs = preset("encoder", "cpu").train.epochs  # the CPU tier's own, whatever it is
    with pytest.raises(ValueError, match=rf"claim c-x: its statement quotes settings that differ by "
                                         rf"tier: cpu: after {cpu_epochs} epochs: v\(a\) > 0; "
                                         rf"paper: after 15"):
        Declaration("c-x", Rule("v", ">", 0), "t", "after {train.epochs} epochs: {rule}",
                    experiment=Experiment({"a": Arm("encoder")}, metric("v")))
    with pytest.raises(ValueError, match=r"claim c-x: its statement .* names 'nope', which is "
                                         r"neither \{rule\} nor a setting"):
        Declaration("c-x", Rule("v", ">", 0), "t", "{nope}: {rule}", experiment=same)
    with pytest.raises(ValueError, match=r"claim c-x: its statement .* names 'train'"):
        Declaration("c-x", Rule("v", ">", 0), "t", "{train.steps}: {rule}")  # trains nothing


def test_an_overridden_experiment_sets_the_settings_in_every_arm_and_trains_no_evidence():
    """A control's case: the arms made the same in what they are compared on; whatever else an
    arm sets (here its seed and norm) is kept."""
    def ffn(norm):
        return Arm("ffn_stack", {"model.norm": norm})

    exp = Experiment({"LN": ffn("layernorm"), "none": ffn("none")}, reads=metric("final_loss"),
                     evidence={"RMS": ffn("rmsnorm")})
    same = exp.overridden({"model.norm": "none", "train.steps": 7})
    made = same.configs([4, 5], "cpu")
    assert list(made) == ["LN", "none"] and same.evidence == {}
    assert made["LN"] == made["none"]
    assert [c.train.seed for [c] in made["LN"]] == [4, 5]
    assert {(c.model.norm, c.train.steps) for arm in made.values() for [c] in arm} == {("none", 7)}
    assert exp.configs([4], "cpu")["LN"][0][0].model.norm == "layernorm"  # the claim's own stay
    with pytest.raises(KeyError, match="unknown config key 'model.nrom'"):
        exp.overridden({"model.nrom": "none"}).configs([0], "cpu")


def test_a_claims_variants_start_with_itself_and_its_slow_ones_are_among_them():
    made = Declaration("c-v", Rule("v", ">", 0), "t", "{rule}", experiment=Experiment(
        {"a": Arm("encoder", variants={"": {}, "-masked": {"model.pad_mask": True}})}, metric("v")),
        variants=("", "-masked"), slow=("-masked",))
    assert made.variants == ("", "-masked")
    for variants in (("-masked",), ("", "masked"), ("", "-masked", "-masked")):
        with pytest.raises(ValueError, match=r'claim c-v: variants=.*: the claim itself \(""\) '
                                             r"first, then distinct id suffixes starting with '-'"):
            Declaration("c-v", Rule("v", ">", 0), "t", "{rule}", variants=variants)
    with pytest.raises(ValueError, match=r"claim c-v: slow=\('-long',\) names \['-long'\], which "
                                         r"are not among its variants \('',\)"):
        Declaration("c-v", Rule("v", ">", 0), "t", "{rule}", slow=("-long",))
    with pytest.raises(ValueError, match=r"claim c-v: its arm 'a' at the cpu tier, variant "
                                         r"'-long': arm of preset 'encoder': no variant '-long'"):
        Declaration("c-v", Rule("v", ">", 0), "t", "{rule}", variants=("", "-long"),
                    experiment=Experiment({"a": Arm("encoder", variants={"": {}})}, metric("v")))


def test_a_statistic_gives_the_claims_it_declares_its_variants():
    stat = Statistic("s", "c-s", Rule("v", ">", 0), Arm("encoder", variants={"": {}, "-x": {}}),
                     metric("v"), variants=("", "-x"), slow=("-x",))
    assert (stat.declaration.variants, stat.declaration.slow) == (("", "-x"), ("-x",))
    assert stat.declare("l2", "c-l2", "{rule}").variants == ("", "-x")


def module(name: str, **values) -> ModuleType:
    made = ModuleType(f"normsys.declarations.{name}")
    made.__dict__.update(values)
    return made


def test_the_declarations_are_found_module_by_module_in_order_and_each_once():
    one = Declaration("c-one", Rule("v", ">", 0), "t", "{rule}")
    two = Declaration("c-two", Rule("v", ">", 0), "t", "{rule}")
    stat = Statistic("s", "c-s", Rule("v", ">", 0), Arm("mlp"), metric("v"))
    found = declarations.found_in([module("a", TWO=two, helper=len, ONE=one), module("b", S=stat)])
    assert found == (("a", two), ("a", one), ("b", stat))
    with pytest.raises(ValueError, match="claim c-one is named in a and again in b: declare each "
                                         "claim once, in the module of its source"):
        declarations.found_in([module("a", ONE=one), module("b", ONE=one)])
    with pytest.raises(ValueError, match="claim c-s is named in a and again in b"):
        declarations.found_in([module("a", S=stat), module("b", S=replace_claim(one, "c-s"))])


def replace_claim(declared: Declaration, cid: str) -> Declaration:
    from dataclasses import replace
    return replace(declared, id=cid)


def test_the_package_declares_every_claim_once_with_the_scorecards_columns_among_them():
    found = declarations.claims()
    ids = [d.id for d in found]
    assert len(ids) == len(set(ids)) > 30
    assert {s.claim for s in declarations.statistics()} <= set(ids)
    assert [m for m, _ in declarations.declared()] == sorted(m for m, _ in declarations.declared())
