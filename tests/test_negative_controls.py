"""Every claim has a negative control: a test next to it in claims/ (``@pytest.mark.control(id)``)
that runs the claim's own measurement and rule on a case where the effect is absent or reversed
and shows the rule coming out the other way. A rule that cannot fail is a defect. A claim whose
CPU verdict is a test of its source (role ``test``) shows it can come out supported there: it is,
or a positive control of it (``@pytest.mark.positive(id)``) is. And no claim about training is
decided by what its statistic reads of the untrained model."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def cpu_listing() -> list[str]:
    """The CPU tier's lines of --claims-list: one a claim."""
    listed = subprocess.run([sys.executable, "-m", "pytest", "claims", "--claims-list", "-q",
                             "-p", "no:cacheprovider"], cwd=ROOT, capture_output=True, text=True)
    assert listed.returncode == 0, listed.stdout[-2000:] + listed.stderr[-2000:]
    claims = [line for line in listed.stdout.splitlines() if "  [cpu]  " in line]
    assert len(claims) >= 40, listed.stdout[-2000:]
    return claims


def test_every_claim_has_a_negative_control(cpu_listing):
    uncontrolled = [line.split()[0] for line in cpu_listing if "  control: NONE  " in line]
    assert not uncontrolled, f"claims without a negative control: {uncontrolled}"


def test_every_cpu_verdict_says_its_role_and_a_test_can_come_out_supported(cpu_listing):
    """Each CPU claim names its role; one whose role is test is supported at the CPU tier (its
    record's reference entry, under the rule in force) or has a positive control."""
    from normsys.claims import ledger
    from normsys.claims.declaration import ROLES
    from normsys.claims.verdict import SUPPORTED

    roles = {line.split()[0]: line.split("  role: ")[1].split()[0] for line in cpu_listing
             if "  role: " in line}
    assert set(roles) == {line.split()[0] for line in cpu_listing}
    assert set(roles.values()) <= set(ROLES)
    unshown = []
    for cid in (c for c, role in roles.items() if role == "test"):
        record = ledger.read(ledger.path_of(ROOT / "claims" / "ledger", cid))
        ref = record.entries.get(record.reference.get("cpu", ""))
        supported = ref is not None and ref.verdict == SUPPORTED and ref.full_rule == record.rule
        positive = any(line.split()[0] == cid and "  positive: " in line for line in cpu_listing)
        if not (supported or positive):
            unshown.append(cid)
    assert not unshown, f"role test, but neither supported at the CPU tier nor with a positive " \
                        f"control: {unshown}"


@pytest.mark.parametrize("name", ["PERI_FLATTENS", "SCALING_UNDOES_IDENTITY"])
def test_a_deep_gpt_claim_reads_nothing_of_its_own_at_initialization(name, monkeypatch):
    """Kim's and Sun's claims are about what training does to the stream. Read on the untrained
    models (each run's model at its initialization in place of the trained one), their statistic
    must carry nothing: every seed reads exactly 0, whatever the placement. Read as levels, the
    untrained Peri-LN stream already lay 0.52-0.61 below Pre-LN's in log10 variance growth, and
    the depth-scaled blocks 0.011 above in cosine, each deciding its claim before any step."""
    from normsys.declarations import residual_stream
    from normsys.training.models import prepare_model
    from normsys.training.tiers import DEFAULT

    class Untrained:  # a run's record, its model at initialization
        def __init__(self, cfg):
            self.run_config = cfg

    monkeypatch.setattr(residual_stream, "trained_model",
                        lambda record, learning_rule=True: prepare_model(record.run_config).eval())
    declared = getattr(residual_stream, name).declaration
    exp = declared.experiment
    values = {arm: [exp.read([Untrained(cfg) for cfg in cfgs]) for cfgs in per_seed]
              for arm, per_seed in exp.configs(range(3), DEFAULT).items()}
    assert all(v == 0.0 for per_seed in values.values() for v in per_seed), values


def test_steps_to_accuracy_counts_the_window():
    from normsys.training.diagnostics import steps_to_accuracy

    fast = [0.5] * 20 + [1.0] * 200
    assert steps_to_accuracy(fast, 0.9, window=50) == 60  # window of steps 11-60: 10 x 0.5, 40 x 1.0
    assert math.isnan(steps_to_accuracy([0.5] * 100))  # never reached: NaN -> inconclusive


# One-line bugs that give one arm an edge it does not earn, each of which its claim would
# record as a verdict (the record rewritten with the bug's numbers raises no flag): the claim,
# its declaration, the arm, the edge, and how its control is called on the bugged declaration.
EDGES = {
    "plain tanh MLP 14 layers deep": ("test_transformer_components", "RESIDUAL_PRESERVES",
                                      "plain", {"model.layers": 14}),
    "unnormalized tanh MLP 14 layers deep": ("test_layernorm_deep_dive", "GRAD_RATIO_VS_NONE",
                                             "plain", {"model.layers": 14}),
    "LayerNorm MLP trained two epochs": ("test_layernorm_deep_dive", "IMPROVES_ACCURACY",
                                         "layernorm", {"train.epochs": 2}),
}


@pytest.mark.parametrize("edge", EDGES)
def test_a_control_catches_an_arm_given_an_edge_no_record_can_show(edge, monkeypatch):
    """The claim's control on the bugged declaration fails: with what the arms are compared on
    made the same, the edge is all that is left between them."""
    import importlib
    from dataclasses import replace

    from normsys.claims.testing import arm_changed
    from normsys.orchestration.runs import Runs

    module, name, arm, override = EDGES[edge]
    claims = importlib.import_module(f"claims.{module}")
    declared = getattr(claims, name)
    declared = getattr(declared, "declaration", declared)  # a Statistic's claim
    bugged = replace(declared, experiment=arm_changed(declared, arm, override))
    fetch = Runs().runs
    with pytest.raises(AssertionError):
        if hasattr(claims, "SAME_NORM"):  # the deep dive's control takes the declaration
            claims.test_control_norm_rules_are_refuted_where_both_arms_take_the_same_norm(
                fetch, bugged)
        else:
            monkeypatch.setattr(claims, name, bugged)
            claims.test_control_gradient_rule_is_refuted_where_neither_arm_has_residuals(fetch)


def test_the_controls_that_train_their_claims_experiments_are_marked_own_runs():
    """Mutation testing leaves out the controls marked own_runs (those that fetch through the
    runs fixture, as their claims do), and only those: a control on small nets stays in."""
    out = subprocess.run([sys.executable, "-m", "pytest", "claims", "-m", "own_runs",
                          "--collect-only", "-q", "-p", "no:cacheprovider"],
                         capture_output=True, text=True, cwd=ROOT).stdout
    marked = {line.split("[")[0] for line in out.splitlines() if "::" in line}
    assert {"claims/test_dual_mechanism.py::test_control_rank_rules_read_their_own_encoders_"
            "given_another_norm", "claims/test_ln_jacobian.py::test_control_analytic_rule_is_"
            "refuted_on_its_own_models_without_the_radial_term"} <= marked
    assert not any("trained_and_an_untrained" in name or "radial_term_misses" in name
                   for name in marked)


def test_the_a_a_case_fails_a_reading_that_cannot_tell_runs_apart():
    """Identical arms decide exact zeros whatever the reading: a reading that gives every run the
    same value passes the identical-arms check, and only the A/A case, two samples of the
    absent case with their seed spread, fails it. An arm given an edge fails the A/A case too,
    on either side, read again on fresh seeds."""
    from dataclasses import replace

    from claims.test_transformer_components import RESIDUAL_PRESERVES
    from normsys import declarations
    from normsys.claims.testing import alike_on_disjoint_seeds, arm_changed, unread_seeds
    from normsys.claims.verdict import REFUTED
    from normsys.orchestration.runs import Runs

    fetch, family = Runs().runs, declarations.aa_family()
    neither = RESIDUAL_PRESERVES.experiment.overridden(RESIDUAL_PRESERVES.alike)
    assert alike_on_disjoint_seeds(RESIDUAL_PRESERVES, neither, fetch, family)[""].std > 0
    blind = replace(neither, reads=lambda records, variant="": 0.5)
    same = blind.values(fetch, unread_seeds(RESIDUAL_PRESERVES), "cpu")
    assert RESIDUAL_PRESERVES.verdict(same).verdict == REFUTED  # the identical arms' check passes
    with pytest.raises(AssertionError, match="the reading does not tell runs apart"):
        alike_on_disjoint_seeds(RESIDUAL_PRESERVES, blind, fetch, family)
    for arm in neither.arms:  # the first arm deeper (its side), then the second (the other)
        deeper = arm_changed(replace(RESIDUAL_PRESERVES, experiment=neither), arm,
                             {"model.layers": 30})
        with pytest.raises(AssertionError, match="lie apart .* twice"):
            alike_on_disjoint_seeds(RESIDUAL_PRESERVES, deeper, fetch, family)
