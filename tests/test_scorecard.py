"""The scorecard: a registered norm is checked before anything trains, its runs are keyed on its
source, each statistic is its claim's rule, and a norm that is LayerNorm (or the identity) under
another name lands on the built-in layernorm (or none) row."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import json
import math
import re
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from normsys import declarations, scorecard
from normsys.__main__ import main
from normsys.claims.declaration import Arm, Declaration, Statistic, metric
from normsys.claims.ledger import records as claim_records
from normsys.orchestration import usernorm
from normsys.orchestration.cache import run_key
from normsys.orchestration.runs import Runs
from normsys.orchestration.workers import RUN_THREADS
from normsys.training import norms

# the claim files as modules (claims/ is a package: pytest imports claims/test_x.py so)
CLAIM_MODULES = sorted(f"claims.{p.stem}" for p in
                       (Path(__file__).parents[1] / "claims").glob("test_*.py"))


USER_NORMS = textwrap.dedent('''
    import torch
    from torch import nn


    class LNWrap(nn.Module):
        """torch's LayerNorm under another name."""

        def __init__(self, d):
            super().__init__()
            self.inner = nn.LayerNorm(d)

        def forward(self, x):
            return self.inner(x)


    class Same(nn.Module):
        def __init__(self, d):
            super().__init__()

        def forward(self, x):
            return x


    class Wider(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.lin = nn.Linear(d, d + 1)

        def forward(self, x):
            return self.lin(x)


    class Poisoned(nn.Module):
        def __init__(self, d):
            super().__init__()

        def forward(self, x):
            return x * float("nan")


    class LayerNorm(LNWrap):
        pass


    class Float64(nn.Module):  # another dtype than its input's
        def __init__(self, d):
            super().__init__()

        def forward(self, x):
            return torch.nn.functional.layer_norm(x.double(), x.shape[-1:])


    class ThreeD(nn.Module):  # assumes (B, T, d) input
        def __init__(self, d):
            super().__init__()

        def forward(self, x):
            b, t, d = x.shape
            return torch.nn.functional.layer_norm(x, (d,))


    class Constant(nn.Module):  # its output does not depend on its input
        def __init__(self, d):
            super().__init__()
            self.bias = nn.Parameter(torch.ones(d))

        def forward(self, x):
            return x * 0 + self.bias


    # layers that pass the check at registration ((4, 8, 64) float32) and fail on another input
    class TupleIn2D(nn.Module):
        def __init__(self, d):
            super().__init__()

        def forward(self, x):
            return (x,) if x.dim() == 2 else x


    class NaNIn2D(nn.Module):
        def __init__(self, d):
            super().__init__()

        def forward(self, x):
            return x * float("nan") if x.dim() == 2 else x


    class DetachedInBF16(nn.Module):
        def __init__(self, d):
            super().__init__()

        def forward(self, x):
            return torch.ones_like(x) if x.dtype == torch.bfloat16 else x


    class ComplexInBF16(nn.Module):
        def __init__(self, d):
            super().__init__()

        def forward(self, x):
            return x.to(torch.complex64) if x.dtype == torch.bfloat16 else x


    class NarrowIn2D(nn.Module):
        def __init__(self, d):
            super().__init__()

        def forward(self, x):
            return x[..., :-1] if x.dim() == 2 else x


    class Tiny(nn.Module):  # a small gradient is still a gradient
        def __init__(self, d):
            super().__init__()

        def forward(self, x):
            return x * 1e-6
''')
# small versions of each experiment: the same code path, seconds instead of minutes
TINY = {"encoder": {"data.n_train": 64, "data.n_test": 16, "model.seq_len": 32, "model.d": 32,
                    "train.probe_batch": 16},
        "char_gpt": {"train.steps": 5, "model.d": 32, "model.layers": 2},
        "mlp": {"data.n_train": 256, "data.n_test": 64, "train.probe_batch": 64}}


def tiny(cfg):
    return cfg.override(**TINY.get(cfg.model.family, {}))


@pytest.fixture
def user_file(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path / "cache"))
    path = tmp_path / "usernorms.py"
    path.write_text(USER_NORMS)
    yield path
    for name in [n for n in norms.NORMS if n not in norms.BUILTIN]:
        del norms.NORMS[name]


@pytest.mark.parametrize("spec,expected", [
    ("Wider", "{spec}: maps a (4, 8, 64) input to (4, 8, 65); a norm must keep the shape"),
    ("Poisoned", "{spec}: gives non-finite outputs"),
    ("LayerNorm", "'layernorm' is a built-in kind"),
    ("Missing", "has no attribute 'Missing'"),
    # the char GPT's first: the qk-norm columns come first (declarations by module name)
    ("Float64", "float64: on the char_gpt family's (4, 32, 64) float32 input: returns torch.float64 "
                "for a torch.float32 input; the next layer takes torch.float32"),
    # each head's queries and keys: (batch, heads, positions, d / heads)
    ("ThreeD", "threed: on the char_gpt family's (4, 4, 32, 16) float32 input: its forward pass "
               "failed: ValueError: too many values to unpack"),
    ("Constant", "constant: on the char_gpt family's (4, 32, 64) float32 input: passes no finite, "
                 "non-zero gradient to its input (its output does not depend on it)"),
    ("TupleIn2D", "tuplein2d: on the tanh_mlp family's (4, 64) float32 input: maps it to tuple; a "
                  "norm must keep the shape (..., d)"),
    ("NarrowIn2D", "narrowin2d: on the tanh_mlp family's (4, 64) float32 input: maps it to "
                   "(4, 63); a norm must keep the shape (..., d)"),
    ("NaNIn2D", "nanin2d: on the tanh_mlp family's (4, 64) float32 input: gives non-finite outputs "
                "(NaN or inf)"),
    ("DetachedInBF16", "detachedinbf16: on the char_gpt family's (4, 32, 64) bfloat16 input: passes "
                       "no finite, non-zero gradient to its input (its output does not depend on "
                       "it)"),
    ("ComplexInBF16", "complexinbf16: on the char_gpt family's (4, 32, 64) bfloat16 input: its output "
                      "does not feed the next layer: RuntimeError: "),
])
def test_a_bad_norm_exits_2_naming_the_problem_before_anything_trains(user_file, tmp_path,
                                                                       capsys, spec, expected):
    assert main(["scorecard", f"{user_file}:{spec}", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    expected = expected.format(spec=f"{user_file}:{spec}")  # the spec as written, no module name
    assert err.startswith("error: ") and expected in err and len(err.splitlines()) == 1
    assert not (tmp_path / "cache" / "runs").exists() and not (tmp_path / "out").exists()


def test_a_registered_kind_keys_its_runs_on_its_source(user_file):
    name = usernorm.load(f"{user_file}:LNWrap", "wrap")
    arm = importlib.import_module("claims.test_dual_mechanism").ENCODER

    def encoder(norm, seed):
        return arm.changed({"model.norm": norm})(seed, "cpu")[0]
    before, builtin = run_key(encoder(name, 0)), run_key(encoder("layernorm", 0))
    user_file.write_text(USER_NORMS + "\n# a comment\n")
    usernorm.load(f"{user_file}:LNWrap", "wrap")
    assert run_key(encoder(name, 0)) == before  # a comment changes no number: its runs serve
    user_file.write_text(USER_NORMS + "\nEDITED = 1\n")
    usernorm.load(f"{user_file}:LNWrap", "wrap")
    assert run_key(encoder(name, 0)) != before  # an edited file never reads a stale run
    assert run_key(encoder("layernorm", 0)) == builtin


def test_each_statistic_is_its_claims_recorded_rule():
    """The rule of each scorecard column, written for the claim's own norm, is the statistic and
    rule the CPU tier's ledger recorded for that claim, on as many seeds."""
    recs = claim_records(scorecard.Path(__file__).parents[1] / "claims" / "ledger")
    for stat in declarations.statistics():
        entry = recs[stat.claim].entries[recs[stat.claim].reference["cpu"]]
        rule = entry.rule.split(": ", 1)[1] if entry.rule.startswith("all of") else entry.rule
        assert str(stat.rule_of(stat.claim_norm)) == f"{entry.statistic} {rule}", stat.name
        assert len(entry.seeds) == len(stat.seeds("cpu")), stat.name


def test_every_claim_test_is_marked_by_its_one_declaration():
    """Each claim test of the claim files is marked by a declaration of normsys.declarations (its
    own, or a norm-generic Statistic's): the marker's statement is the declaration's with its
    rule written in, and no two tests are one claim."""
    declared = {d.id: d for d in declarations.claims()}
    tests = {}
    for module in map(importlib.import_module, CLAIM_MODULES):
        for name, test in vars(module).items():
            for mark in getattr(test, "pytestmark", []) if name.startswith("test_") else []:
                if mark.name == "claim":
                    assert mark.args[0] not in tests, f"{name}: claim {mark.args[0]} twice"
                    tests[mark.args[0]] = (name, mark)
    for cid, (name, mark) in tests.items():
        made = mark.kwargs.get("declared")
        assert isinstance(made, Declaration) and made == declared[cid], f"{name}: not declared"
        assert "{rule}" in made.statement and made.id == cid
        assert mark.kwargs["statement"] == made.text() and "{" not in made.text()
    assert len(tests) > 15 and set(tests) < set(declared)


def test_layernorm_and_identity_under_other_names_land_on_their_rows(user_file, data_env,
                                                                       tmp_path):
    """Every statistic of the LayerNorm wrapper equals the layernorm row's, and the identity
    module's the none row's (identical models: identical arithmetic, tolerance 1e-9)."""
    wrap = usernorm.load(f"{user_file}:LNWrap", "wrap")
    same = usernorm.load(f"{user_file}:Same", "same")
    plan = scorecard.plan([wrap, "layernorm", same, "none"], shrink=tiny)
    records = scorecard.fetch(plan, [], workers=1, runs=Runs())
    table = scorecard.cells(plan, records)
    check_paired_statistics_by_hand(plan, records, table)
    for mine, builtin in ((wrap, "layernorm"), (same, "none")):
        for stat in declarations.statistics():
            a, b = table[mine][stat.name], table[builtin][stat.name]
            assert a.verdict == b.verdict, (mine, stat.name)
            assert a.mean == pytest.approx(b.mean, abs=1e-9), (mine, stat.name)
    # and the rows differ where the norms do: LayerNorm is not the identity
    assert table[wrap]["kappa_6"].mean != table[same]["kappa_6"].mean
    paths = scorecard.write(tmp_path / "out", table, scorecard.provenance("cpu", []))
    saved = json.loads(paths[0].read_text())
    assert set(saved["norms"]) == {wrap, "layernorm", same, "none"}
    assert {"mean", "low", "high", "verdict", "rule"} <= set(saved["norms"][wrap]["kappa_6"])
    assert "| wrap |" in paths[1].read_text() and paths[2].stat().st_size > 0


def check_paired_statistics_by_hand(plan, records, table):
    """Each paired statistic, recomputed from the runs as its claim writes it (which side is
    subtracted from which)."""
    from normsys.declarations.attention_logits import lr_sensitivity, max_attention_logit
    from normsys.declarations.layernorm_deep_dive import init_scale_spread, unit_correlation
    from normsys.declarations.mean_field import input_over_output
    from normsys.declarations.rank_at_init import last_layer_rank
    from normsys.declarations.shared.experiments import weight_grad_profile
    from normsys.training import diagnostics as dg
    from normsys.training.record import TEST_ACC, VAL_LOSS

    def per_seed(stat, norm, read):
        return [read([records[c] for c in cs]) for cs in plan.cells[stat, norm]]

    acc = lambda rs: rs[0].metrics[TEST_ACC]  # noqa: E731
    val = lambda rs: rs[0].metrics[VAL_LOSS]  # noqa: E731
    ratio = lambda rs: dg.log10_ratio(weight_grad_profile(rs[0]))  # noqa: E731
    corr = lambda rs: unit_correlation(rs[0])  # noqa: E731
    pairs = lambda stat, ref, other, read: zip(  # noqa: E731
        per_seed(stat, ref, read), per_seed(stat, other, read), strict=True)
    by_hand = {
        ("test_acc_vs_ln", "none"): [ln - x for ln, x in pairs(
            "test_acc_vs_ln", "layernorm", "none", acc)],
        ("val_loss_vs_ln", "none"): [(x - ln) / ln for ln, x in pairs(
            "val_loss_vs_ln", "layernorm", "none", val)],
        ("grad_ratio_vs_none", "layernorm"): [ln - x for ln, x in pairs(
            "grad_ratio_vs_none", "layernorm", "none", ratio)],
        ("decorrelation", "layernorm"): [x - ln for ln, x in pairs(
            "decorrelation", "layernorm", "none", corr)],
        ("init_robustness", "layernorm"): [x - ln for ln, x in pairs(
            "init_robustness", "layernorm", "none", init_scale_spread)],
        ("grad_explosion_vs_ln", "none"): [x - ln for ln, x in pairs(
            "grad_explosion_vs_ln", "layernorm", "none", input_over_output)],
        ("rank_at_init", "layernorm"): [ln - x for ln, x in pairs(
            "rank_at_init", "layernorm", "none", last_layer_rank)],
        # the qk-norm's: the model without one (the none row) less the model with N on q and k
        ("qk_logit_bound", "layernorm"): [plain - x for x, plain in pairs(
            "qk_logit_bound", "layernorm", "none", max_attention_logit)],
        ("qk_lr_sensitivity", "layernorm"): [plain - x for x, plain in pairs(
            "qk_lr_sensitivity", "layernorm", "none", lr_sensitivity)],
        ("qk_lr_sensitivity_capped", "layernorm"): [capped - x for x, capped in pairs(
            "qk_lr_sensitivity_capped", "layernorm", "none", lr_sensitivity)],
    }
    assert {s.name for s in declarations.statistics() if s.versus} == {k for k, _ in by_hand}
    # a kind paired with itself: its first run (Pre-LN) less its second (Peri-LN, depth-scaled)
    from normsys.declarations.residual_stream import deep_block_cosine, variance_growth
    paired = {("periln_flat_stream", "layernorm"): per_seed(
                  "periln_flat_stream", "layernorm",
                  lambda rs: variance_growth(rs[:1]) - variance_growth(rs[1:])),
              ("depth_scaled_blocks", "layernorm"): per_seed(
                  "depth_scaled_blocks", "layernorm",
                  lambda rs: deep_block_cosine(rs[:1]) - deep_block_cosine(rs[1:]))}
    assert {s.name for s in declarations.statistics() if s.paired} == {k for k, _ in paired}
    by_hand |= paired
    for (stat, norm), values in by_hand.items():
        assert table[norm][stat].values == pytest.approx(values, abs=1e-12), stat
        assert any(v != 0 for v in values), stat  # the two sides differ: the order is tested


def test_batchnorm_is_not_applicable_where_its_statistics_would_see_padding_or_the_future():
    plan = scorecard.plan(["batchnorm"])
    families = {c.model.family for c in plan.configs}
    assert families == {"tanh_mlp", "mlp"}


def test_worker_processes_register_the_users_norm_again(user_file, monkeypatch):
    """Runs trained in worker processes (spawned: nothing inherited) know the user's kind, by its
    spec, and give what the same runs give in this process."""
    spec = f"{user_file}:LNWrap"
    wrap = usernorm.load(spec, "wrap")
    stats = [s for s in declarations.statistics() if s.name == "grad_ratio_vs_none"]
    plan = scorecard.plan([wrap], statistics=stats)
    in_workers = scorecard.fetch(plan, [(spec, wrap)], workers=2, runs=Runs())
    assert {c.model.norm for c in in_workers} == {wrap, "none"}
    monkeypatch.setenv("NORMSYS_CACHE", "off")  # trained again here, not read back
    here = scorecard.cells(plan, scorecard.fetch(plan, [], workers=1, runs=Runs()), stats)
    assert scorecard.cells(plan, in_workers, stats) == here


def test_a_worker_registers_the_norms_and_trains_quietly_on_its_threads(user_file, monkeypatch,
                                                                        tmp_path):
    """What each worker process does before its first run, here in this process (the pool's
    initializer and task): the user's norms registered again under their names, Ctrl-C left to the
    parent, the torch threads asked, no step bars, its progress lines on stderr sharing the
    parent's counter file; a run asked of it is its own Runs' run, with its index."""
    import os
    import signal

    from normsys.training import train

    handlers, threads = {}, []
    monkeypatch.setattr(signal, "signal", lambda sig, handler: handlers.update({sig: handler}))
    monkeypatch.setattr(torch, "set_num_threads", threads.append)
    monkeypatch.setattr(train, "STEP_BARS", True)
    monkeypatch.setattr(scorecard, "_WORKER_RUNS", None)
    monkeypatch.setattr(scorecard, "_WORKER_ERROR", "")
    scorecard._start_worker([(f"{user_file}:LNWrap", "wrap")], 3, str(tmp_path / "done"))
    assert handlers == {signal.SIGINT: signal.SIG_IGN} and threads == [3]
    assert train.STEP_BARS is False and "wrap" in norms.NORMS
    runs = scorecard._WORKER_RUNS
    assert isinstance(runs, Runs) and runs.progress.counter == tmp_path / "done"
    try:
        assert os.path.sameopenfile(runs.progress.fd, 2) and runs.progress.fd != 2
    finally:
        os.close(runs.progress.fd)
    cfg = preset("ffn_stack")
    monkeypatch.setattr(runs, "run", lambda c: made(c, 1.5))
    index, record = scorecard._fetch((4, cfg))
    assert index == 4 and record.run_config == cfg and record.metrics == {"v": 1.5}


def test_a_worker_that_cannot_register_a_norm_says_so_at_its_first_run(user_file, monkeypatch):
    """A pool starts a worker whose initializer raised again and again: the initializer keeps
    the reason, and every run asked of the worker fails with it."""
    import signal

    monkeypatch.setattr(signal, "signal", lambda sig, handler: None)
    monkeypatch.setattr(torch, "set_num_threads", lambda n: None)
    monkeypatch.setattr(scorecard, "_WORKER_RUNS", None)
    monkeypatch.setattr(scorecard, "_WORKER_ERROR", "")
    scorecard._start_worker([(f"{user_file}:Missing", "missing")], 1, "unused")
    assert scorecard._WORKER_RUNS is None
    with pytest.raises(ValueError, match=rf"^in a worker process: '{re.escape(str(user_file))}"
                                         r":Missing': .* has no attribute 'Missing'"):
        scorecard._fetch((0, preset("ffn_stack")))


# ----------------------------------------------------------------------------- register's checks

CHECKS = textwrap.dedent('''
    import torch
    from torch import nn


    def failing(d):
        raise RuntimeError("no weights file")


    def not_a_module(d):
        return torch.eye(d)


    class Crashes(nn.Module):
        def __init__(self, d):
            super().__init__()

        def forward(self, x):
            raise RuntimeError("bad matmul")


    class ReturnsTuple(nn.Module):
        def __init__(self, d):
            super().__init__()

        def forward(self, x):
            return x, x


    class NaNGradient(nn.Module):
        def __init__(self, d):
            super().__init__()

        def forward(self, x):
            return x + 0 * torch.sqrt(0 * x)  # finite, but 0 * inf in its gradient


    class NaNWeightGradient(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(d))

        def forward(self, x):
            return x + 0 * torch.sqrt(self.w)


    class NaNEverywhere(nn.Module):
        """Non-finite gradients for its input and its weight.

        The check names both.
        """

        def __init__(self, d):
            super().__init__()
            self.w = nn.Parameter(torch.zeros(d))

        def forward(self, x):
            return x + 0 * torch.sqrt(0 * x) + 0 * torch.sqrt(self.w)


    class Constant(nn.Module):
        def __init__(self, d):
            super().__init__()

        def forward(self, x):
            return torch.zeros_like(x)
''')


@pytest.fixture
def checks(tmp_path, monkeypatch):
    path = tmp_path / "checks.py"
    path.write_text(CHECKS)
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    import checks as module
    yield importlib.reload(module)
    for name in [n for n in norms.NORMS if n not in norms.BUILTIN]:
        del norms.NORMS[name]


@pytest.mark.parametrize("attr,message", [
    ("failing", "checks:failing: building it for d=64 failed: RuntimeError: no weights file"),
    ("not_a_module", "checks:not_a_module(64) returned a Tensor, not a torch.nn.Module"),
    ("Crashes", "checks:Crashes: its forward pass on a (4, 8, 64) input failed: RuntimeError: "
                "bad matmul"),
    ("ReturnsTuple", "checks:ReturnsTuple: maps a (4, 8, 64) input to tuple; a norm must keep the "
                     "shape (..., d)"),
    ("NaNGradient", "checks:NaNGradient: gives non-finite gradients (NaN or inf) for its input on "
                    "random input"),
    ("NaNWeightGradient", "checks:NaNWeightGradient: gives non-finite gradients (NaN or inf) for "
                          "w on random input"),
    ("NaNEverywhere", "checks:NaNEverywhere: gives non-finite gradients (NaN or inf) for its "
                      "input, w on random input"),
    ("Constant", "checks:Constant: its output does not depend on its input (no gradient)"),
])
def test_register_says_what_is_wrong_with_a_norm(checks, attr, message):
    factory = getattr(checks, attr)
    state = torch.random.get_rng_state()
    with pytest.raises(ValueError) as err:
        norms.register("mine", factory)
    assert str(err.value) == message
    assert torch.equal(torch.random.get_rng_state(), state)  # the check draws on its own generator


def test_register_names_descriptions_and_builds(user_file):
    usernorm.load(f"{user_file}:LNWrap", "my_norm-2")
    kind = norms.NORMS["my_norm-2"]
    assert kind.description == "torch's LayerNorm under another name."
    module = norms.build_norm("my_norm-2", 8)
    assert type(module).__name__ == "LNWrap" and module.inner.normalized_shape == (8,)
    usernorm.load(f"{user_file}:Same", "same")  # no docstring of its own: where it is defined
    assert norms.NORMS["same"].description == "usernorms:Same"
    usernorm.load(f"{user_file}:Same", "same2")
    norms.register("same3", norms.NORMS["same"].build, description="identity, as mine")
    assert norms.NORMS["same3"].description == "identity, as mine"
    assert len(kind.source) == 12
    for bad in ("bad name!", "", "a.b", "_", "-", "_-"):
        with pytest.raises(ValueError) as err:
            norms.register(bad, nn.Identity)
        assert str(err.value) == f"norm name {bad!r}: use letters, digits, '_' or '-'"
    with pytest.raises(ValueError, match="use letters"):
        norms.register(3, nn.Identity)
    with pytest.raises(ValueError) as err:
        norms.register("layernorm", nn.Identity)
    assert str(err.value) == ("norm name 'layernorm' is a built-in kind (batchnorm, dyt, l2, "
                              "l2_affine, layernorm, none, rmsnorm, scaled_l2); register it under "
                              "another name")


def test_a_norm_without_a_source_file_is_refused():
    with pytest.raises(ValueError) as err:
        norms.source_digest(len)
    assert str(err.value) == ("builtins:len: its source cannot be found; define the norm in a .py "
                              "file")
    partial = functools.partial(nn.LayerNorm, eps=1e-3)  # a factory without a __qualname__
    assert norms.qualified(partial) == f"functools:{partial}"


def test_a_registered_kinds_description_is_the_first_line_of_its_docstring(checks):
    class Finite(nn.Module):
        """A finite norm.

        Its second paragraph stays out of the table.
        """

        def __init__(self, d):
            super().__init__()

        def forward(self, x):
            return torch.nn.functional.layer_norm(x, x.shape[-1:])

    norms.register("finite", Finite)
    assert norms.NORMS["finite"].description == "A finite norm."


def test_each_statistic_takes_its_claims_seeds_per_tier():
    cpu = {s.name: len(s.seeds("cpu")) for s in declarations.statistics()}
    assert cpu.pop("grad_ratio_vs_none") == 5  # an at-init claim: 5 seeds on the CPU too
    assert set(cpu.values()) == {3}
    for stat in declarations.statistics():
        assert stat.seeds("paper") == [0, 1, 2, 3, 4], stat.name


def test_the_plan_holds_each_cells_configs_per_seed_at_its_tier():
    stat = declarations.statistics()[0]  # kappa_6: one encoder per seed
    plan = scorecard.plan(["rmsnorm"], "paper", statistics=(stat,), shrink=tiny)
    assert plan.tier == "paper" and plan.norms == ["rmsnorm"]
    seeds = plan.cells[stat.name, "rmsnorm"]
    assert [cs[0].train.seed for cs in seeds] == [0, 1, 2, 3, 4]
    assert all(cs[0].train.device == "auto" and cs[0].model.d == 32 for cs in seeds)  # shrunk
    plain = scorecard.plan(["rmsnorm"], "cpu", statistics=(stat,))
    assert plain.cells[stat.name, "rmsnorm"][0][0].model.d == 64  # no shrink: the claim's own


def test_loading_a_norm_says_what_was_wrong_with_the_spec(tmp_path, monkeypatch):
    expected = "expected MODULE:ATTRIBUTE or FILE.py:ATTRIBUTE, e.g. mynorm.py:MyNorm"
    for spec in (":LNWrap", "usernorms.py:", "usernorms.py"):
        with pytest.raises(ValueError, match=f"^{spec!r}: {expected}$".replace(".", r"\.")):
            usernorm.load(spec)
    with pytest.raises(ValueError, match=r"'nofile.py:X': no such file nofile.py$"):
        usernorm.load("nofile.py:X")
    broken = tmp_path / "broken.py"
    broken.write_text("raise KeyError('inside')\n")
    with pytest.raises(ValueError, match=rf"^'{broken}:X': importing {broken} failed: KeyError: "
                                         r"'inside'$"):
        usernorm.load(f"{broken}:X")
    with pytest.raises(ValueError, match=r"^'no_such_module_here:X': cannot import "
                                         r"no_such_module_here: ModuleNotFoundError: "):
        usernorm.load("no_such_module_here:X")
    empty = tmp_path / "empty.py"
    empty.write_text("_hidden = 1\n")
    with pytest.raises(ValueError, match=rf"^'{empty}:X': {empty} has no attribute 'X'; it has "
                                         r"none$"):
        usernorm.load(f"{empty}:X")
    many = tmp_path / "many.py"
    many.write_text("".join(f"a{i:02d} = {i}\n" for i in range(14)) + "_b = 0\n")
    with pytest.raises(ValueError, match=r"it has a00, a01, a02, a03, a04, a05, a06, a07, a08, "
                                         r"a09, a10, a11$"):
        usernorm.load(f"{many}:X")


def test_a_norm_file_named_like_a_module_normsys_imports_is_refused_naming_it(user_file,
                                                                              tmp_path):
    """json.py, torch.py, normsys.py: from its own folder such a file would be imported in the
    module's place (python -m puts that folder first), before normsys could say a word; named
    as a norm spec, it is refused with one line naming the file, and the real modules stay."""
    import importlib

    import normsys

    real = {name: sys.modules[name] for name in ("json", "torch", "normsys")}
    for name in real:
        (tmp_path / f"{name}.py").write_text(USER_NORMS)
        with pytest.raises(ValueError, match=re.escape(
                f"the file {tmp_path / name}.py is named as the module {name}, which normsys or "
                f"Python imports")):
            usernorm.load(f"{tmp_path / name}.py:LNWrap", f"in-{name}")
        assert sys.modules[name] is real[name] and importlib.import_module(name) is real[name]
    (tmp_path / "mynorms.py").write_text(USER_NORMS)  # a name of its own loads
    assert usernorm.load(f"{tmp_path / 'mynorms'}.py:LNWrap", "in-mynorms") == "in-mynorms"
    assert json.dumps({"a": 1}) == '{"a": 1}' and normsys.__version__
    assert usernorm.private_name(tmp_path / "json.py") == usernorm.private_name(
        tmp_path / "x" / ".." / "json.py")  # every process names the same file alike


def test_a_user_files_private_name_is_its_stem_and_a_digest_of_where_it_is(tmp_path):
    """Two files of one name in two folders are two modules; a stem's characters that a module
    name cannot hold become '_'."""
    here, there = tmp_path / "my-norm.v2.py", tmp_path / "sub" / "my-norm.v2.py"
    digest = hashlib.sha256(str(here.resolve()).encode()).hexdigest()[:8]
    assert usernorm.private_name(here) == f"_normsys_user_my_norm_v2_{digest}"
    assert re.fullmatch(r"_normsys_user_my_norm_v2_[0-9a-f]{8}", usernorm.private_name(there))
    assert usernorm.private_name(there) != usernorm.private_name(here)


def test_a_user_file_that_exits_is_an_error_naming_it(tmp_path):
    leaves = tmp_path / "leaves.py"
    leaves.write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(ValueError, match=rf"^'{leaves}:X': importing {leaves} failed: "
                                         r"SystemExit: 3$"):
        usernorm.load(f"{leaves}:X")
    assert usernorm.private_name(leaves) not in sys.modules


def test_a_norm_from_a_folder_whose_name_has_a_colon_is_named_after_its_class(user_file,
                                                                             tmp_path):
    folder = tmp_path / "a:b"
    folder.mkdir()
    (folder / "colon_norms.py").write_text(USER_NORMS)
    assert usernorm.load(f"{folder / 'colon_norms.py'}:LNWrap") == "lnwrap"
    assert usernorm.load(f"{user_file}:LNWrap", "mine") == "mine"


def test_against_names_every_unknown_kind_and_the_built_in_ones():
    with pytest.raises(ValueError) as err:
        scorecard.builtin_rows(["layernorm", "x", "y"])
    assert str(err.value) == ("--against x,y: not a built-in kind; built-in kinds: layernorm, "
                              "rmsnorm, l2, batchnorm, dyt, none, l2_affine, scaled_l2")
    # every built-in kind once, in the registry's order: a new kind is a row with no other edit
    assert scorecard.BUILTIN_ROWS == tuple(k for k in norms.NORMS if k in norms.BUILTIN)
    assert sorted(scorecard.BUILTIN_ROWS) == sorted(norms.BUILTIN)
    assert scorecard.builtin_rows(["l2", "none"]) == ["l2", "none"]


# ----------------------------------------------------------------------------- judging, in parts
# A plan of constructed statistics over records built by hand: what judge, the table, the file
# and the figure make of known values, without training.

from normsys.claims.report import Row  # noqa: E402
from normsys.claims.verdict import Rule  # noqa: E402
from normsys.training.config import preset  # noqa: E402
from normsys.training.record import RunRecord  # noqa: E402

VALUES = {("layernorm", s): v for s, v in enumerate([0.9, 0.91, 0.92])}
VALUES |= {("mine", s): v for s, v in enumerate([0.2, 0.3, 0.25])}
VALUES |= {("none", s): v for s, v in enumerate([0.5, 0.52, 0.49])}


class Mine(nn.Module):
    """A user's norm kind: RMSNorm without its gain."""

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


@pytest.fixture(autouse=True)
def mine():
    """'mine', registered as a user registers a kind, for the constructed statistics below; it
    and every kind a test registers are forgotten after it."""
    from normsys.training import norms

    before = set(norms.NORMS)
    norms.register("mine", lambda d: Mine())
    yield
    for name in set(norms.NORMS) - before:
        del norms.NORMS[name]


SMALL = Arm("ffn_stack", {"model.d": 4, "data.batch_shape": (2, 4)})  # every kind's runs


def small_cfg(norm: str, seed: int):
    (cfg,) = SMALL.changed({"model.norm": norm})(seed, "cpu")
    return cfg


def norm_of(c) -> str:
    """The kind whose VALUES a run carries: its own, or none's for a run of width 5 (a
    statistic's second run of a seed)."""
    return "none" if c.model.d == 5 else c.model.norm


def made(cfg, value: float, diverged: bool = False) -> RunRecord:
    return RunRecord(config=cfg.to_dict(), fingerprint=cfg.fingerprint(), version="0",
                     metrics={"v": value}, curves={}, probes={}, init_grad_norms={},
                     diverged=diverged, steps=1, wall_time=2.0, env={}, data_source="")


PARTS = (
    Statistic("level", "c-level", Rule("v", ">", 0.5),
                        SMALL, metric("v")),
    Statistic("vs_none", "c-vs", Rule("v", ">", 0.0),
                        SMALL, metric("v"),
                        versus="none", pairing="own - versus", excludes=frozenset({"mine"})),
)


def judged(diverge=()):
    plan = scorecard.plan(["mine", "layernorm"], statistics=PARTS)
    records = {c: made(c, VALUES[norm_of(c), c.train.seed],
                       (norm_of(c), c.train.seed) in diverge) for c in plan.configs}
    return plan, scorecard.cells(plan, records, PARTS)


def test_judge_decides_each_cell_by_its_rule_on_the_per_seed_values():
    plan, table = judged()
    assert set(plan.cells) == {("level", "mine"), ("level", "layernorm"), ("vs_none", "layernorm"),
                               ("vs_none", "none")}  # the reference row of a paired statistic
    mine, ln = table["mine"]["level"], table["layernorm"]["level"]
    assert mine.verdict == "refuted" and mine.values == (0.2, 0.3, 0.25)
    assert mine.mean == pytest.approx(0.25) and mine.low < 0.25 < mine.high
    assert mine.full_rule == "v(mine) > 0.5 (1.75% a side)" and "mean 0.25" in mine.reason
    assert (mine.id, mine.tier, mine.evidence["reads"]) == ("c-level", "cpu", [0.2, 0.3, 0.25])
    assert ln.verdict == "supported" and ln.mean == pytest.approx(0.91)
    paired = table["layernorm"]["vs_none"]
    assert paired.values == pytest.approx([0.4, 0.39, 0.43]) and paired.verdict == "supported"
    na = table["mine"]["vs_none"]
    assert (na.verdict, na.full_rule, na.values) == ("n/a", "v(mine) - v(none) > 0 (1.75% a side)", ())
    assert scorecard.as_json(table, PARTS)["mine"]["vs_none"] == {
        "verdict": "n/a", "rule": "v(mine) - v(none) > 0"}
    assert list(table) == ["mine", "layernorm"]


def test_committed_builtin_cells_stand_in_for_their_runs_where_made_alike(tmp_path, monkeypatch):
    """A user's scorecard reads the built-in kinds' cells of the committed built-in scorecard,
    made of the same runs by the same training code in the numeric environment its runs would
    train in here, instead of training them: its table is the one a scorecard that trains
    every run makes, the user's paired cells included. Made by other code, in another
    environment or of other runs: not read, and it says why."""
    stats = (PARTS[0], Statistic("vs", "c-vs-all", Rule("v", ">", 0.0),
                                 SMALL, metric("v"), versus="none",
                                 pairing="own - versus"))
    records_of = lambda p: {c: made(c, VALUES[norm_of(c), c.train.seed])  # noqa: E731
                            for c in p.configs}
    env = {"device": "cpu (X, Y)", "threads": "1", "torch": "t", "autocast": "off"}
    builtin = scorecard.plan(["layernorm", "none"], statistics=stats)
    body = {"norms": scorecard.as_json(scorecard.cells(builtin, records_of(builtin), stats), stats),
            "provenance": {"code": scorecard.code_digest(), "environments": [env]}}
    (tmp_path / "scorecard-builtin-cpu.json").write_text(json.dumps(body))
    full = scorecard.plan(["mine", "layernorm", "none"], statistics=stats)
    table = scorecard.cells(full, records_of(full), stats)

    user = scorecard.plan(["mine", "layernorm", "none"], statistics=stats)
    asked, every_run = [], set(user.configs)
    user.known, why = scorecard.committed(user, lambda cfg: asked.append(cfg) or env, tmp_path)
    assert why == "" and set(user.known) == {(s, n) for s in ("level", "vs")
                                             for n in ("layernorm", "none")}
    assert set(asked) == every_run  # the environment each of its runs would train in
    assert {norm_of(c) for c in user.configs} == {"mine"}  # only the user's runs train
    assert scorecard.cells(user, records_of(user), stats) == table
    assert table["mine"]["vs"].values == pytest.approx([-0.3, -0.22, -0.24])  # paired by seed

    elsewhere = {**env, "device": "cpu (AVX2, AMD)"}
    assert scorecard.committed(user, lambda cfg: elsewhere, tmp_path) == (
        {}, "scorecard-builtin-cpu.json was made on cpu (X, Y), 1 thread(s), torch t, this "
            "machine trains on cpu (AVX2, AMD), 1 thread(s), torch t")
    two = {**env, "device": "cpu (AVX2, AMD)"}, {**env, "device": "cpu (A, B)"}
    body["provenance"]["environments"] = [env, *two]
    (tmp_path / "scorecard-builtin-cpu.json").write_text(json.dumps(body))
    assert scorecard.committed(user, lambda cfg: two[cfg.train.seed % 2] | {"threads": "2"},
                               tmp_path)[1] == (
        "scorecard-builtin-cpu.json was made on cpu (A, B), 1 thread(s), torch t; cpu (AVX2, AMD), "
        "1 thread(s), torch t; cpu (X, Y), 1 thread(s), torch t, this machine trains on "
        "cpu (A, B), 2 thread(s), torch t; cpu (AVX2, AMD), 2 thread(s), torch t")
    del body["provenance"]["environments"]  # a file that names none is read by no machine
    (tmp_path / "scorecard-builtin-cpu.json").write_text(json.dumps(body))
    assert scorecard.committed(user, lambda cfg: env, tmp_path) == (
        {}, "scorecard-builtin-cpu.json was made on no environment it names, this machine trains "
            "on cpu (X, Y), 1 thread(s), torch t")
    body["provenance"]["environments"] = [env]
    del body["norms"]["none"]["vs"]  # a cell the file lacks is trained, the others read
    (tmp_path / "scorecard-builtin-cpu.json").write_text(json.dumps(body))
    assert set(scorecard.committed(user, lambda cfg: env, tmp_path)[0]) == \
        {("level", "layernorm"), ("vs", "layernorm"), ("level", "none")}
    body["norms"]["none"]["level"]["runs"][0] = ["another config"]
    (tmp_path / "scorecard-builtin-cpu.json").write_text(json.dumps(body))
    assert ("level", "none") not in scorecard.committed(user, lambda cfg: env, tmp_path)[0]
    monkeypatch.setattr(scorecard, "code_digest", lambda: "other")
    assert scorecard.committed(user, lambda cfg: env, tmp_path) == (
        {}, "scorecard-builtin-cpu.json was made by other training code than this")
    assert scorecard.committed(user, lambda cfg: env, tmp_path / "none") == (
        {}, "there is no scorecard-builtin-cpu.json to read them from")


def test_the_committed_builtin_scorecard_is_stale_when_its_code_runs_rules_or_cells_differ(
        monkeypatch, tmp_path):
    """`scorecard --builtin --check` (CI): the committed built-in scorecard is what --builtin
    makes of this checkout, judged by its training code's digest, each cell's runs and rule, its
    set of cells, and each cell decided again from its readings; each difference is named. The
    committed one, under the digest it records, is up to date (it is made of the claims' runs and
    rules as they stand)."""
    gallery = scorecard.Path(__file__).parents[1] / "claims" / "gallery"
    body = json.loads((gallery / "scorecard-builtin-cpu.json").read_text())
    monkeypatch.setattr(scorecard, "code_digest", lambda: body["provenance"]["code"])
    assert scorecard.stale("cpu", gallery) == ""
    path = tmp_path / "scorecard-builtin-cpu.json"

    def stale_with(change) -> str:
        changed = json.loads(json.dumps(body))
        change(changed)
        path.write_text(json.dumps(changed))
        return scorecard.stale("cpu", tmp_path)

    assert stale_with(lambda b: b["norms"]["rmsnorm"]["kappa_6"]["runs"][0].pop()) == (
        "scorecard-builtin-cpu.json: 1 cells made of other runs or judged by another rule, e.g. "
        "rmsnorm on kappa_6")
    assert stale_with(lambda b: b["norms"]["l2"]["min_rho"].update(rule="min_rho(l2) > 0.1")) \
        .endswith("1 cells made of other runs or judged by another rule, e.g. l2 on min_rho")
    assert stale_with(lambda b: b["norms"]["none"].pop("decorrelation")).endswith(
        "1 cells not made there, e.g. none on decorrelation")
    assert stale_with(lambda b: b["norms"]["none"].update(
        extra={"runs": [], "rule": ""})).endswith("1 cells there but no longer made, e.g. none on "
                                                  "extra")
    otherwise = "cells decided otherwise by this code from their readings (the interval's " \
                "level, the rule's decision), e.g. "
    assert stale_with(lambda b: b["norms"]["rmsnorm"]["kappa_6"].update(low=0.0)).endswith(
        f"1 {otherwise}rmsnorm on kappa_6")
    assert stale_with(lambda b: b["norms"]["l2"]["min_rho"].update(verdict="supported")).endswith(
        f"1 {otherwise}l2 on min_rho")
    assert stale_with(lambda b: b["provenance"].update(code="0" * 12)) == (
        f"scorecard-builtin-cpu.json was made by other training code (digest {'0' * 12}, now "
        f"{body['provenance']['code']})")
    assert scorecard.stale("paper", tmp_path) == "there is no scorecard-builtin-paper.json"
    paper = scorecard.plan(list(scorecard.BUILTIN_ROWS), "paper")
    stats = {s.name: s for s in declarations.statistics()}
    norms_of = {norm: {stat: {"runs": [[c.fingerprint() for c in cs] for cs in seeds],
                              "rule": str(stats[stat].rule_of(norm))}
                       for (stat, n), seeds in paper.cells.items() if n == norm}
                for norm in scorecard.BUILTIN_ROWS}
    (tmp_path / "scorecard-builtin-paper.json").write_text(json.dumps(
        {"norms": norms_of, "provenance": {"code": body["provenance"]["code"]}}))
    # judged by the paper tier's runs and rules, which hold; its cells then need their readings
    assert scorecard.stale("paper", tmp_path).startswith(
        f"scorecard-builtin-paper.json: {len(paper.cells)} cells without their per-seed readings")


def test_a_diverged_seed_is_nan_and_leaves_its_cell_inconclusive_and_said():
    _, table = judged(diverge={("mine", 1), ("mine", 2)})
    cell = table["mine"]["level"]
    assert math.isnan(cell.values[1]) and cell.verdict == "inconclusive"
    assert cell.evidence["diverged"] == 2 and scorecard.cell_text(cell) == "diverged (2 of 3 seeds)"
    assert table["layernorm"]["level"].evidence["diverged"] == 0
    assert scorecard.cell_text(table["layernorm"]["level"]) == "0.91 +"


def test_a_statistic_undefined_on_a_run_is_nan_not_a_crash():
    zero = Statistic("ratio", "c", PARTS[0].rule, PARTS[0].arm,
                               lambda rs, v: 1 / rs[0].metrics["v"])
    assert math.isnan(scorecard.stat_value("ratio", "none", [made(small_cfg("none", 0), 0.0)], (zero,)))
    assert scorecard.stat_value("ratio", "none", [made(small_cfg("none", 0), 0.5)], (zero,)) == 2.0


def checked(declared, fetch, variant: str = ""):
    """The verdict the claim's test reaches on the runs ``fetch`` gives (what Claim.check
    decides, on seeds 0-2 of the CPU tier)."""
    return declared.verdict(declared.experiment.values(fetch, [0, 1, 2], "cpu", variant))


def fetch_made(configs):
    return [made(c, VALUES[norm_of(c), c.train.seed]) for c in configs]


@pytest.mark.parametrize("pairing,paired,a,b", [
    ("own - versus", True, "mine", "none"),
    ("versus - own", True, "none", "mine"),
    ("(own - versus) / versus", False, None, None),
])
def test_a_claim_decides_through_its_declaration_as_the_scorecard_does(pairing, paired, a, b):
    """The claim's test and the scorecard's cell take the same per-seed values, paired the way
    the declaration says, to the same verdict."""
    stat = Statistic("v", "c-v", Rule("v", ">", 0.0),
                     SMALL, metric("v"), versus="none", pairing=pairing,
                     claim_norm="mine")
    decision = checked(stat.declaration, fetch_made)
    own, ref = [0.2, 0.3, 0.25], [0.5, 0.52, 0.49]
    side = {"mine": own, "none": ref}
    if paired:
        assert list(stat.declaration.experiment.arms) == [a, b]
        assert decision.values == pytest.approx(
            [x - y for x, y in zip(side[a], side[b], strict=True)])
    else:
        assert decision.values == pytest.approx([(x - y) / y for x, y in zip(own, ref, strict=True)])
    judged = stat.verdict("mine", {"mine": own, "none": ref}.__getitem__)  # the scorecard's cell
    assert decision == judged


def test_a_declaration_decides_for_another_norm_and_each_part_and_reads_a_variant():
    fetched = []

    def fetch(configs):
        fetched.append(configs)
        return fetch_made(configs)

    lr = {"": 1e-3, "-slow": 0.5}
    level = Statistic("level", "c-level", Rule("v", ">", 0.5),
                                Arm("ffn_stack", SMALL.settings,
                                    variants={v: {"train.lr": x} for v, x in lr.items()}),
                                lambda rs, v: rs[0].metrics["v"] * (2.0 if v else 1.0))
    other = level.declare("layernorm", "c-level-ln", statement="{rule}")
    assert (other.id, str(other.rule), other.text()) == \
        ("c-level-ln", "v(layernorm) > 0.5", "v(layernorm) > 0.5")
    slow = checked(other, fetch, "-slow")
    assert slow.values == pytest.approx([1.8, 1.82, 1.84]) and slow.rule == "> 0.5"
    assert len(fetched) == 1 and [c.train.seed for c in fetched[0]] == [0, 1, 2]  # one call
    assert {c.train.lr for c in fetched[0]} == {0.5}
    own = checked(level.declaration, fetch, "-slow")  # the statistic's own claim
    assert own.values == slow.values and {c.train.lr for c in fetched[1]} == {0.5}
    checked(level.declaration, fetch)  # the claim itself: variant ""
    assert {c.train.lr for c in fetched[2]} == {1e-3}
    parts = Statistic("parts", "c-p", Rule("v", "<", 1.0),
                                Arm("ffn_stack", each=(SMALL.settings, {
                                    "model.d": 5, "data.batch_shape": (2, 5)})),
                                lambda rs, v: {"first": rs[0].metrics["v"],
                                               "second": rs[1].metrics["v"]})
    both = checked(parts.declaration, fetch_made)
    assert both.rule == "all of 2 (Holm): < 1" and {k: list(v["values"]) for k, v in
                                             both.comparisons.items()} == \
        {"first": [0.9, 0.91, 0.92], "second": [0.5, 0.52, 0.49]}


def test_a_reference_needs_a_known_pairing():
    for versus, pairing in (("none", ""), ("", "own - versus"), ("none", "own / versus")):
        with pytest.raises(ValueError, match="needs a pairing, one of 'own - versus', "
                                             "'versus - own', '\\(own - versus\\) / versus'; got"):
            Statistic("v", "c", PARTS[0].rule, PARTS[0].arm, PARTS[0].value,
                                versus=versus, pairing=pairing)


def test_each_statistic_is_declared_in_order_and_marks_its_claim_with_its_seeds():
    """The declared statistics come in the declarations' order, and the marker each makes for
    its claim carries the claim's own seeds."""
    found = declarations.statistics()
    assert [s.name for s in found[:5]] == ["qk_logit_bound", "qk_lr_sensitivity",
                                           "qk_lr_sensitivity_capped", "kappa_6",
                                           "min_rho"]  # module order: attention_logits first
    for stat in (s for s in found if s.own_test):
        assert stat.mark.kwargs.get("seeds") == stat.own_seeds, stat.name
        assert stat.mark.kwargs["statistic"] is stat and stat.mark.args == (stat.claim,)
    assert {s.own_seeds for s in found} == {None, 5}


def test_a_statistic_with_parts_must_hold_for_each():
    stat = Statistic("parts", "c", Rule("x", "<", 1.0), SMALL,
                               lambda rs, v: {})
    both = [{"6 blocks": 0.2, "12 blocks": 0.3}, {"6 blocks": 0.25, "12 blocks": 0.35},
            {"6 blocks": 0.22, "12 blocks": 0.31}]
    assert stat.verdict("x", lambda kind: both).verdict == "supported"
    one_fails = [dict(v, **{"12 blocks": 5.0 + i / 10}) for i, v in enumerate(both)]
    assert stat.verdict("x", lambda kind: one_fails).verdict == "refuted"
    diverged = [both[0], math.nan, both[2]]
    assert stat.verdict("x", lambda kind: diverged).verdict == "inconclusive"


def test_a_column_is_as_wide_as_its_statistics_name_where_that_is_the_widest():
    long = dataclasses.replace(PARTS[0], name="a_level_named_at_length")
    _, table = judged()
    table = {norm: {long.name: row["level"]} for norm, row in table.items()}
    assert scorecard.as_text(table, [long]).splitlines()[:2] == [
        "           a_level_named_at_length  ",
        "mine       0.25 x                   "]


def test_complete_names_the_statistics_asked_whose_runs_are_all_in():
    plan = scorecard.plan(["rmsnorm"], statistics=PARTS)
    records = {c: made(c, 1.0) for c in plan.configs}
    assert scorecard.complete(plan, records, PARTS) == list(PARTS)
    level = {c for key, seeds in plan.cells.items() if key[0] == "level" for cs in seeds for c in cs}
    missing = next(c for c in plan.configs if c not in level)
    assert scorecard.complete(plan, {c: r for c, r in records.items() if c != missing},
                              PARTS) == [PARTS[0]]


def test_the_table_in_text_and_markdown_and_the_legend():
    _, table = judged()
    text = scorecard.as_text(table, PARTS)
    assert "     \n\nmean over seeds [" in text  # the legend a blank line below the table
    assert text.splitlines()[:3] == [  # every column padded to its width, the last too
        "           level       vs_none     ",
        "mine       0.25 x      n/a         ",
        "layernorm  0.91 +      0.407 +     "]
    wide = {norm: dict(row) for norm, row in table.items()}
    wide["mine"]["level"] = dataclasses.replace(wide["mine"]["level"], verdict="out of range",
                                                mean=1.55)
    ref = wide["layernorm"]["vs_none"]
    wide["mine"]["vs_none"] = dataclasses.replace(ref, evidence={**ref.evidence, "diverged": 2})
    lines = scorecard.as_text(wide, PARTS).splitlines()
    assert lines[1] == "mine       1.55 out of range  diverged (2 of 3 seeds)  "
    assert lines[2].index("0.407") == lines[1].index("diverged")  # the columns line up
    assert text.endswith(
        "mean over seeds [96.5% t-interval, where shown]; + supported, x refuted, ? inconclusive "
        "(the interval against the claim's rule, N = the row's norm):\n"
        "  level: v(N) > 0.5  (claim c-level, 3 seeds at the CPU tier)\n"
        "  vs_none: v(N) - v(none) > 0  (claim c-vs, 3 seeds at the CPU tier)")
    md = scorecard.as_markdown(table, PARTS)
    assert md.startswith(  # each cell with its interval
        "| norm | level | vs_none |\n|---|---|---|\n| mine | 0.25 x [0.0998, 0.4] | n/a |\n"
        "| layernorm | 0.91 + [0.88, 0.94] | 0.407 + [0.344, 0.469] |\n\nmean over seeds [")
    assert "\n- level: v(N) > 0.5  (claim c-level" in md and md.endswith("CPU tier)\n")
    assert scorecard.cell_text(Row(verdict="inconclusive", mean=1234.5)) == "1.23e+03 ?"


class BatchCentred(nn.Module):
    """A norm that reads the batch: each feature less its mean over the batch's rows, then
    LayerNorm's scaling (a per-row norm with one line of batch statistics added)."""

    def forward(self, x):
        x = x - x.mean(dim=0, keepdim=True)
        return x / x.pow(2).mean(-1, keepdim=True).add(1e-5).sqrt()


def test_a_kind_read_on_the_claims_own_runs_shares_them_and_its_failing_reading_fails_its_cell():
    """A statistic whose kind enters the reading alone (setting=None): every row's cells read the
    same runs (one a seed), each row's value is the reading with its kind; a user's kind that
    fails in the reading fails its own cell, saying how, and no other; a built-in kind's failure
    is the library's and raises."""
    def reading(records, variant="", norm=""):
        if norm == "mine":
            raise RuntimeError("no float64 kernel")
        return records[0].metrics["v"] + {"layernorm": 0.0, "none": -1.0}[norm]

    stat = Statistic("read", "c-read", Rule("v", ">", 0.5), SMALL, reading, setting=None)
    plan = scorecard.plan(["mine", "layernorm", "none"], statistics=(stat,))
    assert len(plan.configs) == 3 and {c.model.norm for c in plan.configs} == {"layernorm"}
    records = {c: made(c, 0.9 + c.train.seed / 100) for c in plan.configs}
    table = scorecard.cells(plan, records, (stat,))
    assert table["layernorm"]["read"].values == (0.9, 0.91, 0.92)
    assert table["none"]["read"].values == pytest.approx((-0.1, -0.09, -0.08))
    assert (table["layernorm"]["read"].verdict, table["none"]["read"].verdict) == (
        "supported", "refuted")
    assert table["mine"]["read"].evidence["failed"] == [
        "its reading failed: RuntimeError: no float64 kernel"] * 3
    assert table["mine"]["read"].verdict != "supported"
    with pytest.raises(KeyError, match="rmsnorm"):
        scorecard.cells(scorecard.plan(["rmsnorm"], statistics=(stat,)), records, (stat,))


def test_the_batch_invariance_column_fails_a_norm_that_reads_the_batch(tmp_path):
    """Every row of a full scorecard gets the property cells, decided on the layer itself with
    no run: LayerNorm's row holds, a norm that reads its batch fails, with by how much; the
    column is shown as it is in the text, the page and the JSON read back."""
    from normsys.training import norms

    norms.register("centred", lambda d: BatchCentred())
    plan = scorecard.plan(["centred", "layernorm"], statistics=[])
    table = scorecard.cells(plan, {}, [], props=scorecard.PROPERTIES)
    held, failed = table["layernorm"]["batch_invariance"], table["centred"]["batch_invariance"]
    assert (held.verdict, failed.verdict) == ("supported", "refuted")
    assert failed.reason.startswith("a row's output moves by up to") and held.values == ()
    text = scorecard.as_text(table, [])
    assert text.splitlines()[1].startswith("centred    fails x") and "holds +" in text
    assert "batch_invariance: a row's output bit-identical in batches of 1, 7, 64" in text
    md = scorecard.as_markdown(table, [])
    assert md.startswith("| norm | batch_invariance (a row alike in any batch) |\n|---|---|\n"
                         "| centred | fails x |\n| layernorm | holds + |\n")
    again = scorecard.of_json(scorecard.as_json(table, []))
    assert scorecard.as_text(again, []) == text
    assert scorecard.cells(plan, {}, []) == {"centred": {}, "layernorm": {}}  # chosen: none


def test_the_written_files_and_the_figure(tmp_path):
    _, table = judged()
    prov = {"tier": "cpu", "device": "cpu", "commit": "0123456789abcdef"}
    paths = scorecard.write(tmp_path / "out", table, prov, PARTS)
    assert [p.name for p in paths] == ["scorecard.json", "scorecard.md", "scorecard.png"]
    body = json.loads(paths[0].read_text())
    assert body["provenance"] == prov and body["norms"]["mine"]["level"]["verdict"] == "refuted"
    assert paths[1].read_text().startswith("# Scorecard (cpu tier, cpu, 0123456789ab)\n\n| norm |")
    assert paths[2].stat().st_size > 1000
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure()
    scorecard.draw(fig, table, PARTS)  # every row judged: coloured by its verdict
    ax = fig.axes[0]
    shades = list(scorecard.COLOURS)
    assert ax.images[0].get_array().tolist() == [[shades.index("refuted"), shades.index("n/a")],
                                                 [shades.index("supported")] * 2]
    mine, ln = table["mine"]["level"], table["layernorm"]["level"]
    assert [t.get_text() for t in ax.texts] == [
        f"0.25 x\n[{mine.low:.3g}, {mine.high:.3g}]", "n/a",
        f"0.91 +\n[{ln.low:.3g}, {ln.high:.3g}]",
        f"0.407 +\n[{table['layernorm']['vs_none'].low:.3g}, "
        f"{table['layernorm']['vs_none'].high:.3g}]"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["mine", "layernorm"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["\nv(N) > 0.5", "\nv(N) - v(none) > 0"]
    plt.close(fig)


RECORD_FIELDS = {"config": {}, "fingerprint": "f", "version": "v", "metrics": {}, "curves": {},
                 "probes": {}, "init_grad_norms": {}, "diverged": False, "steps": 0,
                 "wall_time": 0.0, "data_source": ""}


def test_provenance_names_the_users_norms_and_each_statistics_claim():
    prov = scorecard.provenance("paper", [("a/b.py:Mine", "mine")])
    assert prov["tier"] == "paper" and prov["user_norms"] == {"mine": "a/b.py:Mine"}
    assert prov["claims"]["kappa_6"] == "dm-layernorm-prevents-collapse"
    assert set(prov) == {"tier", "device", "commit", "code", "torch", "normsys", "environments",
                         "user_norms", "claims"}
    assert prov["code"] == scorecard.code_digest()  # the training code its runs were made by
    assert prov["environments"] == []  # no runs: no environment
    one, two = (RunRecord.from_json(json.dumps({**RECORD_FIELDS, "env": env}))
                for env in ({"device": "cpu (AVX2)", "threads": "1"},
                            {"device": "cpu (AVX2)", "threads": "2", "torch": "x"}))
    envs = scorecard.provenance("cpu", [], [one, one, two])["environments"]
    assert envs == [{"autocast": "?", "device": "cpu (AVX2)", "threads": "1", "torch": "?"},
                    {"autocast": "?", "device": "cpu (AVX2)", "threads": "2", "torch": "x"}]


def test_absolute_makes_a_files_path_absolute_and_leaves_a_module_alone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert scorecard.absolute("norms/x.py:Mine") == f"{tmp_path / 'norms' / 'x.py'}:Mine"
    assert scorecard.absolute("pkg.mod:Mine") == "pkg.mod:Mine"


def test_estimate_says_cached_timed_by_its_layernorm_twin_or_unknown(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    runs = Runs()
    plan = scorecard.plan(["rmsnorm", "l2"], statistics=PARTS[:1])
    cached = plan.cells["level", "rmsnorm"][0][0]
    twin = plan.cells["level", "l2"][1][0].override(**{"model.norm": "layernorm"})
    for cfg in (cached, twin):
        runs.run(cfg)
    rows, seconds, unknown = scorecard.estimate(plan, runs)
    said = {(c.model.norm, c.train.seed): how for c, how in rows}
    assert said["rmsnorm", 0] == "cached"
    wall = runs.run(twin).wall_time
    assert said["l2", 1] == f"~{wall:.0f} s (its LayerNorm run's time here)"
    assert said["rmsnorm", 1] == said["l2", 1]  # the same LayerNorm twin
    assert said["l2", 0] == said["rmsnorm", 2] == said["l2", 2] == "time unknown"
    assert sum(seconds.values()) == pytest.approx(2 * wall) and unknown == 3
    assert len(seconds) == 5  # every run to train, 0 s where none is timed
    rows, _, unknown = scorecard.estimate(plan, runs, threads=7)  # none trained on 7 threads
    assert {how for _, how in rows} == {"time unknown"} and unknown == 6


def test_fetch_in_this_process_fetches_each_run_once(monkeypatch):
    asked = []
    runs = Runs()
    monkeypatch.setattr(runs, "run", lambda c: asked.append(c) or made(c, 0.0))
    plan = scorecard.plan(["rmsnorm"], statistics=PARTS[:1])
    got = scorecard.fetch(plan, [], workers=1, runs=runs)
    assert set(got) == set(plan.configs) == set(asked) and len(asked) == 3
    first = preset("encoder", **{"train.seed": 0})
    late = preset("mlp", **{"train.seed": 0})
    plan.cells["other", "rmsnorm"] = [[late, first]]
    asked.clear()
    scorecard.fetch(plan, [], workers=0, runs=runs)
    assert asked[0] == first  # encoders and char GPTs, the longest runs, first


def test_the_cost_line_counts_the_runs_to_train_and_their_minutes_per_process():
    rows = [(None, "cached"), (None, "~60 s (as recorded on x)"), (None, "time unknown"),
            (None, "~30 s (its LayerNorm run's time here)")]
    seconds = {"a": 120.0, "b": 0.0, "c": 66.0}
    assert scorecard.cost_line(rows, seconds, 1, 1) == \
        "4 runs, 1 cached; the other 3 ~3.1 min of training on one core, plus 1 not timed yet"
    assert scorecard.cost_line(rows, seconds, 0, 2) == \
        "4 runs, 1 cached; the other 3 ~3.1 min of training on one core (~1.6 min on 2 processes)"
    assert scorecard.cost_line(rows, {"a": 3600.0}, 0, 3).endswith(
        "~60.0 min of training on one core (~20.0 min on 3 processes)")
    assert scorecard.cost_line(rows[:1] * 2, {}, 0, 2) == "2 runs, 2 cached"


class SyncPool:
    """A worker pool that runs its tasks here, in the order given back reversed (they arrive in
    any order), and records how fetch drives it."""

    made: list = []

    def __init__(self, processes, initializer, initargs):
        self.calls = [("Pool", processes, initializer, initargs)]
        SyncPool.made.append(self)

    def imap_unordered(self, func, iterable, chunksize):
        self.calls.append(("imap_unordered", func, chunksize))
        results = [func(item) for item in iterable][::-1]
        pool = self

        class Arriving:
            def next(self, timeout):
                pool.calls.append(("next", timeout))
                return results.pop(0)
        return Arriving()

    def close(self):
        self.calls.append(("close",))

    def terminate(self):
        self.calls.append(("terminate",))

    def join(self):
        self.calls.append(("join",))


def test_fetch_hands_the_plan_to_a_spawned_pool_and_maps_each_record_to_its_config(
        monkeypatch, tmp_path, user_file):
    """fetch's side of the worker pool (the pool itself runs here): spawned processes, one per
    worker, started with the user's norms by absolute spec, the threads and the shared counter;
    one run a task; each record given to its own config whatever order they arrive in; the pool
    closed and joined, or terminated at once where a run fails."""
    contexts = []
    monkeypatch.setattr(scorecard, "get_context", lambda method: contexts.append(method) or
                        type("Context", (), {"Pool": SyncPool}))
    SyncPool.made.clear()
    worker_runs = Runs()
    monkeypatch.setattr(worker_runs, "run", lambda c: made(c, c.train.seed + 0.5))
    monkeypatch.setattr(scorecard, "_WORKER_RUNS", worker_runs)
    monkeypatch.setattr(scorecard, "_WORKER_ERROR", "")
    plan = scorecard.plan(["rmsnorm"], statistics=PARTS[:1])
    seen = []
    monkeypatch.chdir(user_file.parent)
    got = scorecard.fetch(plan, [("usernorms.py:LNWrap", "wrap")], workers=2, runs=Runs(),
                          threads=3, done=lambda records: seen.append(len(records)))
    assert contexts == ["spawn"] and len(SyncPool.made) == 1
    (_, processes, initializer, (specs, threads, counter)), *rest = SyncPool.made[0].calls
    assert (processes, initializer, threads) == (2, scorecard._start_worker, 3)
    assert specs == [(f"{user_file}:LNWrap", "wrap")] and counter.endswith("/done")
    assert rest[0] == ("imap_unordered", scorecard._fetch, 1)
    assert rest[1:4] == [("next", scorecard.WAIT_FOREVER)] * 3 and rest[4:] == [("close",), ("join",)]
    assert list(got) == sorted(plan.configs, key=lambda c: c.model.family != "encoder")
    assert all(record.run_config == c and record.metrics == {"v": c.train.seed + 0.5}
               for c, record in got.items())
    assert seen == [1, 2, 3]

    counted = Runs(scorecard.Progress(counter=tmp_path / "tally"))
    scorecard.fetch(plan, [], workers=3, runs=counted)
    assert SyncPool.made[-1].calls[0][1] == 3 and SyncPool.made[-1].calls[0][3] == \
        ([], scorecard.RUN_THREADS, str(tmp_path / "tally"))

    monkeypatch.setattr(worker_runs, "run", lambda c: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        scorecard.fetch(plan, [], workers=2, runs=Runs())
    assert SyncPool.made[-1].calls[-2:] == [("terminate",), ("join",)]


def test_a_statistic_the_kind_does_not_take_leaves_the_rest_of_its_row_judged():
    """n/a in the first column, the next still decided; each statistic's value read by name."""
    flipped = PARTS[::-1]
    plan = scorecard.plan(["mine", "layernorm"], statistics=flipped)
    records = {c: made(c, VALUES[norm_of(c), c.train.seed]) for c in plan.configs}
    table = scorecard.cells(plan, records, flipped)
    assert table["mine"]["vs_none"].verdict == "n/a"
    assert table["mine"]["level"].verdict == "refuted"
    rs = [made(small_cfg("none", 0), 0.7)]
    halve = Statistic("half", "c-h", PARTS[0].rule, PARTS[0].arm,
                                lambda rs, v: rs[0].metrics["v"] / {"": 2}[v])
    assert scorecard.stat_value("half", "none", rs, (PARTS[0], halve)) == 0.35
    assert scorecard.stat_value("level", "none", rs, (PARTS[0], halve)) == 0.7


def test_absolute_splits_the_spec_at_its_last_colon(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert scorecard.absolute("odd:dir/x.py:Mine") == f"{tmp_path / 'odd:dir' / 'x.py'}:Mine"


def test_the_figure_maps_each_verdict_to_its_colour_and_says_so(tmp_path):
    """The colour scale (n/a grey, refuted red, inconclusive yellow, supported green over 0..3),
    the cell texts' font and place, the column labels' angle, the size and the title."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _, table = judged(diverge={("mine", 1)})  # an inconclusive cell
    fig = plt.figure()
    scorecard.draw(fig, table, PARTS, subjects={"mine"})  # layernorm: a reference row
    ax, image = fig.axes[0], fig.axes[0].images[0]
    shades = list(scorecard.COLOURS)
    assert image.get_array().tolist() == [[shades.index("inconclusive"), shades.index("n/a")],
                                          [shades.index("reference")] * 2]
    assert list(image.cmap.colors) == list(scorecard.COLOURS.values())
    assert (image.norm.vmin, image.norm.vmax, ax.get_aspect()) == (0, len(shades) - 1, "auto")
    assert {(t.get_fontsize(), t.get_ha(), t.get_va()) for t in ax.texts} == {(7, "center", "center")}
    assert ax.texts[0].get_text() == "diverged (1 of 3 seeds)"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["mine", "layernorm (reference)"]
    assert tuple(fig.get_size_inches()) == pytest.approx((1.9 * 2 + 2, 0.62 * 2 + 2.4))
    assert ax.get_title() == "Scorecard: mine, judged by each norm-generic claim's rule"
    assert "green supported, red refuted, yellow inconclusive, blue out of range" in ax.get_xlabel()
    plt.close(fig)


def test_a_value_beyond_every_builtin_kinds_is_flagged_out_of_range_not_green(tmp_path):
    """The range is the built-in kinds' lowest and highest per-seed value in the committed
    built-in scorecard; a user's row outside it is flagged, a built-in row never."""
    body = {"provenance": {},
            "norms": {"layernorm": {"level": {"values": [0.9, 0.95, float("nan")]},
                                    "vs_none": {"verdict": "n/a"}},
                      "none": {"level": {"values": [0.1, 0.2, 0.15]}},
                      "l2": {"level": {"values": [0.5, 0.6]}}}}  # the lowest is not the last
    (tmp_path / "scorecard-builtin-cpu.json").write_text(json.dumps(body))
    reach = scorecard.builtin_reach("cpu", tmp_path)
    assert reach == {"level": (0.1, 0.95)} and scorecard.builtin_reach("paper", tmp_path) == {}
    plan = scorecard.plan(["mine", "layernorm"], statistics=PARTS)
    records = {c: made(c, VALUES[norm_of(c), c.train.seed] + (1.0 if norm_of(c) == "mine" else 0))
               for c in plan.configs}  # mine: 1.2, 1.3, 1.25
    table = scorecard.cells(plan, records, PARTS, reach={"level": (0.1, 0.95)})
    cell = table["mine"]["level"]
    assert cell.verdict == "out of range" and cell.evidence["out_of_range"] == [0.1, 0.95]
    assert cell.evidence["rule_verdict"] == "supported"  # what the rule alone says, beside it
    assert scorecard.cell_text(cell) == "1.25 out of range"
    assert scorecard.shade(cell, True) == "out of range"
    assert "out_of_range" not in table["layernorm"]["level"].evidence  # 0.91: inside
    table = scorecard.cells(plan, records, PARTS, reach={"level": (0.0, 0.5)})
    assert "out_of_range" not in table["layernorm"]["level"].evidence  # a built-in row: never
    assert "out_of_range" not in scorecard.cells(plan, records, PARTS)["mine"]["level"].evidence
    assert set(scorecard.builtin_reach("cpu")) == {s.name for s in declarations.statistics()}


def test_the_files_are_written_into_a_new_nested_folder_and_over_old_ones(tmp_path):
    _, table = judged()
    prov = {"tier": "cpu", "device": "cpu", "commit": "0123456789abcdef"}
    out = tmp_path / "a" / "b"
    for _ in range(2):  # a folder that does not exist yet, then the same folder again
        paths = scorecard.write(out, table, prov, PARTS)
    text = paths[0].read_text()
    assert text == json.dumps({"about": scorecard.ABOUT, "norms": scorecard.as_json(table, PARTS),
                              "provenance": prov},
                              indent=1) + "\n"
    assert scorecard.of_json(json.loads(text)["norms"])["mine"]["level"].mean == \
        table["mine"]["level"].mean
    assert list(json.loads(text)["norms"]) == list(table)  # the rows as the page shows them
    assert text.startswith('{\n "about": ') and '\n "norms": {\n  "mine": {' in text
    from PIL import Image

    assert Image.open(paths[2]).info["dpi"] == pytest.approx((110, 110), abs=0.1)


def test_the_committed_builtin_scorecard_page_is_what_its_json_makes():
    """claims/gallery/scorecard-builtin-cpu.md is the scorecard.md of the run whose scorecard.json
    sits beside it (``python -m normsys scorecard --builtin --out DIR`` writes both)."""
    gallery = scorecard.Path(__file__).parents[1] / "claims" / "gallery"
    body = json.loads((gallery / "scorecard-builtin-cpu.json").read_text())
    page = (gallery / "scorecard-builtin-cpu.md").read_text()
    assert page == scorecard.markdown_page(scorecard.of_json(body["norms"]), body["provenance"])
    assert "| layernorm |" in page and "| batchnorm | n/a |" in page


def test_a_run_that_fails_later_loses_no_column_already_judged(monkeypatch, tmp_path, capsys):
    """Each column is judged and written as soon as its runs are in: a failure in a later
    column's run ends the scorecard with its error, the finished column on disk."""
    first = Statistic("level", "c-level", Rule("loss", ">", 0.5),
                      SMALL, metric("final_loss"))
    later = Statistic("later", "c-later", Rule("loss", ">", 0.5),
                      SMALL.changed({"train.steps": 7}),
                      metric("final_loss"))
    monkeypatch.setattr(scorecard.declarations, "statistics", lambda: (first, later))
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path / "cache"))
    run = Runs.run

    def failing(self, cfg):
        if cfg.train.steps == 7:
            raise ValueError("a later run failed")
        return run(self, cfg)

    monkeypatch.setattr(Runs, "run", failing)
    assert main(["scorecard", "--builtin", "--against", "layernorm", "--workers", "1",
                 "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.endswith("error: a later run failed\n")
    # --builtin writes the files under the names the gallery holds them by
    saved = json.loads((tmp_path / "out" / "scorecard-builtin-cpu.json").read_text())
    # judged, kept; "later" never was (the layer's own properties need no run)
    assert list(saved["norms"]["layernorm"]) == ["level", "batch_invariance"]
    assert saved["norms"]["layernorm"]["level"]["verdict"] in ("supported", "refuted",
                                                               "inconclusive")
    assert "| layernorm |" in (tmp_path / "out" / "scorecard-builtin-cpu.md").read_text()


def test_check_says_whether_the_committed_builtin_scorecard_is_up_to_date(monkeypatch, capsys):
    """`scorecard --builtin --check`: exit 0 and "up to date", or exit 1 with why and the command
    that makes it again; --out names the folder it checks (the checkout's gallery unless told);
    without --builtin, a usage error."""
    seen = []
    monkeypatch.setattr(scorecard, "stale", lambda tier, folder: seen.append(folder) or (
        "" if tier == "cpu" else "no such file"))
    assert main(["scorecard", "--builtin", "--check"]) == 0
    assert capsys.readouterr().out.endswith("scorecard-builtin-cpu.json: up to date\n")
    assert main(["scorecard", "--builtin", "--check", "--out", "elsewhere"]) == 0
    assert capsys.readouterr().out == "elsewhere/scorecard-builtin-cpu.json: up to date\n"
    assert seen == [scorecard.GALLERY, Path("elsewhere")]
    assert main(["scorecard", "--builtin", "--check", "--tier", "paper"]) == 1
    assert capsys.readouterr().err == (
        "stale: no such file: run python -m normsys scorecard --builtin --tier paper --out "
        "claims/gallery, and commit what it writes\n")
    assert main(["scorecard", "x.py:X", "--check"]) == 2
    assert "add --builtin" in capsys.readouterr().err


def test_one_worker_trains_here_on_one_thread(monkeypatch, tmp_path):
    """--workers 1: the runs train in this process on one thread (as each worker process and the
    claims' runs do), so its records equal theirs."""
    seen = {}

    def fetch(plan, specs, workers, runs, threads, done=None):
        seen.update(workers=workers, threads=torch.get_num_threads(), asked=threads)
        return {}

    monkeypatch.setattr(scorecard, "fetch", fetch)
    monkeypatch.setattr(scorecard, "cells", lambda plan, records, ready, reach, props: {})
    monkeypatch.setattr(scorecard, "write", lambda out, table, prov, ready, subjects, name: [])
    monkeypatch.setattr(scorecard, "as_text", lambda table: "")
    threads = torch.get_num_threads()
    try:
        assert main(["scorecard", "--builtin", "--workers", "1", "--out", str(tmp_path)]) == 0
    finally:
        torch.set_num_threads(threads)
    assert seen == {"workers": 1, "threads": 1, "asked": 1}
    try:
        assert main(["scorecard", "--builtin", "--workers", "1", "--threads", "2", "--out",
                     str(tmp_path)]) == 0
    finally:
        torch.set_num_threads(threads)
    assert seen == {"workers": 1, "threads": 2, "asked": 2}
    assert main(["scorecard", "--builtin", "--threads", "0"]) == 2


def test_layers_that_work_pass_the_check_on_every_family_and_dtype(user_file):
    """torch's LayerNorm under another name and the identity pass on every input the families
    feed (2-D MLPs, 3-D sequences; float32 and bfloat16 autocast)."""
    names = [usernorm.load(f"{user_file}:{cls}", cls.lower()) for cls in ("LNWrap", "Same", "Tiny")]
    plan = scorecard.plan(names + ["layernorm"])
    families = {cfg.model.family for (_, norm), seeds in plan.cells.items() if norm in names
                for cfg in seeds[0]}
    assert families >= {"encoder", "char_gpt", "mlp", "tanh_mlp"}
    scorecard.check_layers(plan, names)


def test_estimate_looks_runs_up_on_the_threads_they_will_train_on(tmp_path, monkeypatch):
    """The worker processes train on --threads (one by default): a run cached there is cached
    for the estimate, whatever this process's own thread count."""
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    plan = scorecard.plan(["rmsnorm"], statistics=PARTS[:1])
    cfg = plan.cells["level", "rmsnorm"][0][0]
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        Runs().run(cfg)
        torch.set_num_threads(2)
        assert dict(scorecard.estimate(plan, Runs(), threads=1)[0])[cfg] == "cached"
        assert dict(scorecard.estimate(plan, Runs())[0])[cfg] != "cached"
    finally:
        torch.set_num_threads(before)


def test_estimate_falls_back_on_the_recorded_run_times_of_the_config_or_its_twin(tmp_path,
                                                                               monkeypatch):
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    plan = scorecard.plan(["rmsnorm"], statistics=PARTS[:1])
    first, second, third = (cs[0] for cs in plan.cells["level", "rmsnorm"])
    twin = second.override(**{"model.norm": "layernorm"})
    table = {first.fingerprint(): (12.0, "box"), twin.fingerprint(): (30.0, "box")}
    monkeypatch.setattr(scorecard, "run_seconds", lambda cfg: table.get(cfg.fingerprint()))
    rows, seconds, unknown = scorecard.estimate(plan, Runs())
    said = {c.train.seed: how for c, how in rows}
    assert said == {0: "~12 s (as recorded on box)", 1: "~30 s (as recorded on box)",
                    2: "time unknown"}
    assert (sum(seconds.values()), unknown) == (42.0, 1)


def test_ctrl_c_stops_every_worker_at_the_first_press_with_one_line(tmp_path, ctrl_c):
    """A terminal's Ctrl-C reaches the whole process group: the workers leave it to the parent,
    which stops them at once and says so in one line (no traceback, no process left)."""
    import os
    import sys

    if "MUTANT_UNDER_TEST" in os.environ:  # mutmut's copy runs in a process it does not reach
        pytest.skip("a process of its own: no mutant of this process is exercised")
    env = {**os.environ, "NORMSYS_CACHE": str(tmp_path / "cache")}
    code, _, err = ctrl_c([sys.executable, "-m", "normsys", "scorecard", "--builtin", "--against",
                           "layernorm", "--workers", "2", "--out", str(tmp_path / "out")], env)
    assert code == 130 and "Traceback" not in err, err[-3000:]
    assert err.splitlines()[-1].startswith("interrupted: stopped, with every training process")
    assert not (tmp_path / "out").exists()


def test_the_check_feeds_a_kind_the_inputs_of_its_own_cells(user_file):
    """A plan of the user's kind alone: its cells' families are the ones checked."""
    name = usernorm.load(f"{user_file}:DetachedInBF16", "detached")
    plan = scorecard.plan([name], statistics=PARTS[:1])
    assert {norm for _, norm in plan.cells} == {name}
    with pytest.raises(ValueError, match=r"^detached: on the ffn_stack family's \(4, 4\) "
                                         r"bfloat16 input: passes no finite"):
        scorecard.check_layers(plan, [name])


def test_a_mean_on_the_edge_of_the_builtin_range_is_inside_it():
    plan, _ = judged()
    records = {c: made(c, VALUES[norm_of(c), c.train.seed]) for c in plan.configs}
    mean = scorecard.cells(plan, records, PARTS)["mine"]["level"].mean
    for span in ((mean, 0.5), (0.1, mean), (0.1, 0.5)):
        cell = scorecard.cells(plan, records, PARTS, reach={"level": span})["mine"]["level"]
        assert "out_of_range" not in cell.evidence, span


def test_estimate_looks_each_run_and_its_twin_up_on_the_runs_data(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from normsys.orchestration.cache import cached_runs
    from normsys.training.train import train_with_state

    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    runs, digest = Runs(), "d" * 64
    monkeypatch.setattr(runs, "task_of", lambda cfg: SimpleNamespace(digest=digest))
    plan = scorecard.plan(["rmsnorm", "l2"], statistics=PARTS[:1])
    cached = plan.cells["level", "rmsnorm"][0][0]
    twin = plan.cells["level", "l2"][1][0].override(**{"model.norm": "layernorm"})
    for cfg in (cached, twin):  # kept under the data digest only
        cached_runs([cfg], digest, lambda cfgs: [train_with_state(c) for c in cfgs])
    rows, _, unknown = scorecard.estimate(plan, runs)
    said = {(c.model.norm, c.train.seed): how for c, how in rows}
    assert said["rmsnorm", 0] == "cached"
    assert said["l2", 1].endswith(" s (its LayerNorm run's time here)") and unknown == 3


def test_shade_colours_a_judged_row_by_verdict_and_a_reference_row_grey():
    na, refuted = Row(verdict="n/a"), Row(verdict="refuted")
    assert scorecard.shade(na, True) == scorecard.shade(na, False) == "n/a"
    assert scorecard.shade(refuted, False) == "reference"
    assert scorecard.shade(refuted, True) == "refuted"
    assert scorecard.shade(Row(verdict="out of range", evidence={
        "rule_verdict": "supported", "out_of_range": [0, 1]}), True) == "out of range"
    assert set(scorecard.COLOURS) == {"reference", "n/a", "refuted", "inconclusive", "supported",
                                      "out of range"}


def test_the_title_names_the_judged_rows_or_the_built_in_kinds():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _, table = judged()
    table = {**table, "none": table["layernorm"]}
    titles = []
    for subjects in ({"mine", "none"}, None):
        fig = plt.figure()
        scorecard.draw(fig, table, PARTS, subjects=subjects)
        titles.append(fig.axes[0].get_title())
        plt.close(fig)
    rule = ", judged by each norm-generic claim's rule"
    assert titles == [f"Scorecard: mine, none{rule}", f"Scorecard: the built-in kinds{rule}"]
    image = fig.axes[0].images[0]  # every row judged: no grey cell, the colours still from 0
    assert min(map(min, image.get_array().tolist())) > 0 and image.norm.vmin == 0
    assert fig.axes[0].get_xlabel().endswith(
        "grey reference or n/a; + supported, x refuted, ? inconclusive")


def test_the_written_figure_judges_the_rows_it_is_given(tmp_path, monkeypatch):
    _, table = judged()
    drawn = []
    real = scorecard.draw
    monkeypatch.setattr(scorecard, "draw", lambda *args: drawn.append(args[3]) or real(*args))
    prov = {"tier": "cpu", "device": "d", "commit": "c"}
    scorecard.write(tmp_path, table, prov, PARTS, subjects={"mine"})
    scorecard.write(tmp_path, table, prov, PARTS)
    assert drawn == [{"mine"}, None]


@pytest.mark.parametrize("cores,threads", [(8, None), (2, None), (8, 2)])
def test_worker_processes_train_the_plan_on_the_claims_thread_count(user_file, tmp_path,
                                                                    monkeypatch, capfd, cores,
                                                                    threads):
    """Two workers, on eight cores or two: one thread each, as the claims train (a run's numbers
    depend on it), or the count asked for; every run of a user's norm comes back (the workers
    register it again), kept in the cache under that environment, and served here only at that
    count; the runs done are counted across the workers, and nothing is left in the working
    folder."""
    monkeypatch.setattr(scorecard.os, "cpu_count", lambda: cores)
    (tmp_path / "here").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    name = usernorm.load(f"{user_file}:LNWrap", "wrap")
    plan = scorecard.plan([name], statistics=PARTS[:1])
    asked = {} if threads is None else {"threads": threads}
    got = scorecard.fetch(plan, [(f"{user_file}:LNWrap", name)], workers=2, runs=Runs(),
                          **asked)
    assert sorted(got, key=plan.configs.index) == plan.configs
    assert all(record.run_config == cfg for cfg, record in got.items())
    assert {record.env["threads"] for record in got.values()} == {str(threads or RUN_THREADS)}
    assert not list((tmp_path / "here").iterdir())
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(threads or RUN_THREADS)
        assert all(Runs().run(cfg).to_json() == record.to_json() for cfg, record in got.items())
    finally:
        torch.set_num_threads(before)
    err = capfd.readouterr().err
    assert sorted(int(n) for n in re.findall(r"\[run (\d+)", err)) == [1, 2, 3]


def test_a_norm_that_cannot_load_in_the_worker_processes_is_said_not_waited_on(tmp_path,
                                                                               monkeypatch):
    """A pool starts a new worker for one whose initializer raised, without end: the failure
    reaches the parent as the first run's error instead (a wait of a minute, not forever)."""
    path = tmp_path / "parent_only.py"
    path.write_text(textwrap.dedent('''
        import multiprocessing
        from torch import nn

        if multiprocessing.current_process().name != "MainProcess":
            raise RuntimeError("not in a worker")


        def Norm(d):
            return nn.LayerNorm(d)
    '''))
    spec = f"{path}:Norm"
    name = usernorm.load(spec, "parent_only")
    plan = scorecard.plan([name], statistics=PARTS[:1])
    monkeypatch.setattr(scorecard, "WAIT_FOREVER", 60.0)
    try:
        with pytest.raises(ValueError, match=r"^in a worker process: .*parent_only\.py failed: "
                                             r"RuntimeError: not in a worker$"):
            scorecard.fetch(plan, [(spec, name)], workers=2, runs=Runs())
    finally:
        del norms.NORMS[name]  # the kinds a later test finds are the built-in ones


def test_the_json_says_which_of_a_cells_two_verdicts_to_read():
    """A cell out of range keeps its rule's verdict beside its own: the file says which one is
    the verdict, the committed built-in scorecard too."""
    import json

    from normsys.scorecard import ABOUT, GALLERY, OUT_OF_RANGE

    assert "`verdict` is the one to read" in ABOUT and "`rule_verdict`" in ABOUT
    assert repr(OUT_OF_RANGE) in ABOUT
    committed = json.loads((GALLERY / "scorecard-builtin-cpu.json").read_text())
    assert committed["about"] == ABOUT


def test_an_out_folder_the_file_system_refuses_is_an_error_before_anything_trains(
        user_file, tmp_path, capsys):
    """/proc takes no folder whatever the permissions say (even as root): one error line,
    exit 2, and no run trained or cached."""
    if not Path("/proc").is_dir():
        pytest.skip("no /proc here")
    assert main(["scorecard", f"{user_file}:LNWrap", "--against", "layernorm",
                 "--out", "/proc/normsys-scorecard"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --out /proc/normsys-scorecard: cannot be created or written (")
    assert len(err.splitlines()) == 1 and not (tmp_path / "cache" / "runs").exists()


FAILING_NORMS = '''
import sys
from torch import nn


class Late(nn.Module):
    """LayerNorm that fails once training is under way (its checks pass)."""

    def __init__(self, d):
        super().__init__()
        self.ln, self.calls = nn.LayerNorm(d), 0

    def forward(self, x):
        self.calls += 1
        if self.calls > 20:
            self.fail()
        return self.ln(x)

    def fail(self):
        raise RuntimeError("broke at call 21")


class Exits(Late):
    def fail(self):
        sys.exit(3)


class Fine(Late):
    def fail(self):
        pass
'''


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_users_norm_that_fails_in_training_is_one_line_and_the_other_runs_go_on(
        workers, monkeypatch, tmp_path, capsys):
    """Whatever a user's kind raises or exits with in a run (in this process or in a worker's)
    is one line naming the kind, the family and the run; every other run trains, every cell
    whose runs are in is judged and written, the failed ones read 'failed', and the exit is 1."""
    (tmp_path / "mine.py").write_text(FAILING_NORMS)
    level = Statistic("level", "c-level", Rule("loss", ">", 0.0),
                      SMALL.changed({"train.steps": 30}), metric("final_loss"))
    monkeypatch.setattr(scorecard.declarations, "statistics", lambda: (level,))
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path / "cache"))
    specs = [f"{tmp_path / 'mine.py'}:{c}" for c in ("Late", "Exits", "Fine")]
    assert main(["scorecard", *specs, "--against", "none", "--workers", workers,
                 "--out", str(tmp_path / "out")]) == 1
    said = capsys.readouterr()
    lines = said.err.splitlines()
    for kind, why in (("late", "RuntimeError: broke at call 21"), ("exits", "SystemExit: 3")):
        failed = [line for line in lines if line.startswith(f"error: {kind}: its ffn_stack run ")]
        assert len(failed) == 3 and all(line.endswith(f"failed: {why}; the other runs go on")
                                        for line in failed), said.err
    assert lines[-1] == ("error: 6 run(s) of exits, late failed (each said above); their cells "
                         "read 'failed', every other cell is judged and written")
    assert "Traceback" not in said.err
    saved = json.loads((tmp_path / "out" / "scorecard.json").read_text())["norms"]
    assert saved["late"]["level"]["failed"] == ["RuntimeError: broke at call 21"] * 3
    assert saved["late"]["level"]["verdict"] == "inconclusive"
    assert saved["fine"]["level"]["verdict"] == saved["none"]["level"]["verdict"] == "supported"
    assert "failed (3 of 3 seeds)" in said.out


def test_a_folder_that_stops_taking_files_stops_no_run_and_is_one_line_at_the_end(
        monkeypatch, tmp_path, capsys):
    """A full disk under --out after the check: every run trains (and stays cached), the table is
    printed, and one line says what failed and how to write it without training again; exit 1."""
    level = Statistic("level", "c-level", Rule("loss", ">", 0.0),
                      SMALL.changed({"train.steps": 5}), metric("final_loss"))
    monkeypatch.setattr(scorecard.declarations, "statistics", lambda: (level,))
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path / "cache"))

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(scorecard, "write", full)
    assert main(["scorecard", "--builtin", "--against", "layernorm,none", "--workers", "1",
                 "--out", str(tmp_path / "out")]) == 1
    said = capsys.readouterr()
    assert said.err.splitlines()[-1] == (
        f"error: --out {tmp_path / 'out'}: writing the scorecard failed (No space left on device);"
        f" every run is cached in {tmp_path / 'cache'}: the same command again writes it without "
        f"training them")
    assert "layernorm" in said.out and said.out.rstrip().endswith("written: nothing")
    assert len(list((tmp_path / "cache" / "runs").rglob("*.json"))) >= 6


@pytest.mark.parametrize("content,why", [
    ('{"norms": 3', "JSONDecodeError"),
    ("[1]", "no provenance"),
    ('{"provenance": {}}', "no norms"),
    ('{"provenance": {}, "norms": {"layernorm": {"x": 3}}}',
     "the row of layernorm is no table of statistics and cells"),
    ('{"provenance": {}, "norms": {"layernorm": {"x": {"values": ["a"]}}}}',
     "x of layernorm: values ['a'], not a list of numbers"),
    ('{"provenance": {}, "norms": {"layernorm": {"x": {"runs": "ab"}}}}',
     "x of layernorm: runs 'ab', not a list")])
def test_a_damaged_builtin_scorecard_is_one_line_naming_the_file_and_what_is_wrong(
        tmp_path, content, why):
    """Its --check, a user's scorecard reading the built-in rows and the reach of the built-in
    kinds all read it through read_builtin: a file of another shape is named with what is wrong
    and how to restore it, never a traceback."""
    path = scorecard.builtin_json("cpu", tmp_path)
    path.write_text(content)
    for read in (lambda: scorecard.stale("cpu", tmp_path),
                 lambda: scorecard.builtin_reach("cpu", tmp_path)):
        with pytest.raises(ValueError) as err:
            read()
        assert str(err.value).startswith(f"{path}: cannot be read as the built-in scorecard (")
        assert why in str(err.value) and "python -m normsys scorecard --builtin" in str(err.value)
    path.write_text('{"provenance": {}, "norms": {"layernorm": {"x": {"values": [1.0, NaN]}}}}')
    assert scorecard.read_builtin(path)["norms"]["layernorm"]["x"]["values"][0] == 1.0


class _Counting(nn.Module):  # an output that depends on how often it was called
    def __init__(self, d):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return x * (1 + self.calls)


class _FailsInEval(nn.Module):
    def __init__(self, d):
        super().__init__()

    def forward(self, x):
        if not self.training:
            raise RuntimeError("no running statistics kept")
        return x * 2


class _Reseeds(nn.Module):
    def __init__(self, d):
        super().__init__()

    def forward(self, x):
        torch.manual_seed(123)
        return x * 2


class _PythonRandom(nn.Module):
    def __init__(self, d):
        super().__init__()

    def forward(self, x):
        import random

        return x * (1 + random.random() * 0)  # the same output: the draw alone is the problem


class _NumpyRandom(nn.Module):
    def __init__(self, d):
        super().__init__()

    def forward(self, x):
        import numpy as np

        return x * (1 + np.random.rand() * 0)


class _Threads(nn.Module):
    def __init__(self, d):
        super().__init__()
        torch.set_num_threads(torch.get_num_threads() + 1)

    def forward(self, x):
        return x * 2


class _Moves(nn.Module):
    def __init__(self, d):
        super().__init__()

    def forward(self, x):
        import os

        os.chdir("/")
        return x * 2


@pytest.mark.parametrize("factory,problem", [
    (_Counting, "gives another output for the same input on a second call: it keeps state "
                "between calls that changes its output"),
    (_FailsInEval, "its forward pass in eval mode failed: RuntimeError: no running statistics "
                   "kept"),
    (_Reseeds, "reseeds torch's global random generator in its forward pass (to 123)"),
    (_PythonRandom, "draws from Python's global random generator, which a run's seed does not "
                    "set"),
    (_NumpyRandom, "draws from numpy's global random generator, which a run's seed does not set"),
    (_Threads, "changes torch's thread count ("),
    (_Moves, "changes the working folder ("),
])
def test_the_layer_check_finds_what_would_break_a_run_later(factory, problem, monkeypatch):
    """One forward and backward pass passes these; a second call, eval mode, and what the kind
    leaves behind (torch's, Python's and numpy's generators, the thread count, the folder) do
    not. torch's LayerNorm passes it all."""
    monkeypatch.chdir(Path.cwd())  # restored after _Moves
    np.random.rand()  # a generator drawn from before: one more draw moves its position alone
    threads = torch.get_num_threads()
    try:
        assert problem in scorecard._layer_problem(factory, (4, 8), torch.float32)
    finally:
        torch.set_num_threads(threads)
    assert scorecard._layer_problem(nn.LayerNorm, (4, 8), torch.float32) == ""
    assert scorecard._layer_problem(nn.BatchNorm1d, (4, 8), torch.float32) == ""  # buffers: fine


ISOLATED = '''
import os
import random

import torch
from torch import nn


class Base(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.w = nn.Parameter(torch.ones(d))


class Fine(Base):
    def forward(self, x):
        return x * self.w


class Exits(Base):  # ends the process that runs it, with rc 0: success to the eye
    def forward(self, x):
        if not torch.is_grad_enabled():
            os._exit(0)
        return x * self.w


class Hangs(Base):
    def forward(self, x):
        while not torch.is_grad_enabled():
            pass
        return x * self.w


class Interrupts(Base):  # its KeyboardInterrupt is no Ctrl-C of the user's
    def forward(self, x):
        if not torch.is_grad_enabled():
            raise KeyboardInterrupt
        return x * self.w


class Unseeded(Base):  # another factor in every process: its cache key cannot stand for it
    def __init__(self, d):
        super().__init__(d)
        self.k = random.Random().random()

    def forward(self, x):
        return x * self.w * (1 + self.k)


class Threads(Base):  # registering builds it: only a process that read the count before sees it
    def __init__(self, d):
        super().__init__(d)
        torch.set_num_threads(torch.get_num_threads() + 3)

    def forward(self, x):
        return x * self.w


class Moves(Base):
    def forward(self, x):
        os.chdir("/")
        return x * self.w
'''


@pytest.mark.parametrize("attr,problem", [
    ("Fine", ""),
    ("Exits", "ended its process without a result (exit code 0): the norm ends or crashes the "
              "process that runs it"),
    ("Hangs", "gives no output within 3 s in a process of its own"),
    ("Interrupts", "fails in a process of its own: KeyboardInterrupt"),
    ("Unseeded", "gives other outputs in two fresh processes for one seed"),
    ("Threads", "changes torch's thread count ("),
    ("Moves", "changes the working folder ("),
])
def test_a_norm_is_first_run_in_processes_of_its_own(tmp_path, attr, problem):
    """What the scorecard's process could not survive (an exit, a loop) or see (another output
    in each process) is found in two fresh processes before the norm runs in this one."""
    path = tmp_path / "isolated.py"
    path.write_text(ISOLATED)
    # a short limit for the loop alone: a fresh process takes seconds to import torch
    said = scorecard.isolated_problem(f"{path}:{attr}", timeout=3 if attr == "Hangs" else 120)
    assert said.startswith(f"{path}:{attr}: {problem}" if problem else ""), said
    assert bool(said) == bool(problem), said
