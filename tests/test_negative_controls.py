"""Negative controls: each claim's decision rule, applied where the effect is absent, must come out
the other way (a rule that cannot fail is a defect). Same statistic functions as the claims."""

from __future__ import annotations

import torch

from normsys import stats
from normsys.experiments import (
    kappa_of_activations,
    layernorm_gradients,
    ln_decomposition_summary,
    ln_vjp_errors,
    log_grad_ratio,
    tanh_mlp_config,
    weight_grad_profile,
)
from normsys.protocol import direction_stability
from normsys.testing import seeded_randn
from normsys.train import train

SEEDS = range(3)


def isotropic(seed: int, rows: int = 1024, d: int = 64):
    return seeded_randn((rows, d), seed, dtype=torch.float32)


def collapsed(seed: int, rows: int = 1024, d: int = 64, rank: int = 2):
    return seeded_randn((rows, rank), seed) @ seeded_randn((rank, d), seed + 1)


def test_collapse_rules_flip_on_constructed_activations():
    no_collapse = [kappa_of_activations(isotropic(s), isotropic(s + 10)) for s in SEEDS]
    collapse = [kappa_of_activations(isotropic(s), collapsed(s)) for s in SEEDS]
    # dm-none-collapses-with-depth (kappa_6 < 0.5): isotropic at every depth -> refuted
    assert stats.decide(no_collapse, "<", 0.5).verdict == stats.REFUTED
    assert stats.decide(collapse, "<", 0.5).verdict == stats.SUPPORTED
    # dm-l2/layernorm-prevents-collapse (kappa_6 >= 0.8): a collapsed last block -> refuted
    assert stats.decide(collapse, ">=", 0.8).verdict == stats.REFUTED
    assert stats.decide(no_collapse, ">=", 0.8).verdict == stats.SUPPORTED


def test_isotropy_rule_flips_on_a_collapsed_matrix():
    from normsys.diagnostics import normalized_effective_rank

    rho_collapsed = [normalized_effective_rank(collapsed(s)) for s in SEEDS]
    rho_isotropic = [normalized_effective_rank(isotropic(s)) for s in SEEDS]
    assert stats.decide(rho_collapsed, ">=", 0.5).verdict == stats.REFUTED
    assert stats.decide(rho_isotropic, ">=", 0.5).verdict == stats.SUPPORTED


def test_paired_accuracy_rules_flip_when_both_sides_are_the_same_model():
    acc = [0.81, 0.79, 0.83]
    gap = [0.12, 0.10, 0.15]
    # dm-layernorm-expression (> 0.05), dm-none-memorizes (> 0.02), fa-*-beats-frozen (> 0.02)
    for threshold, values in ((0.05, acc), (0.02, gap), (0.02, acc)):
        assert stats.decide_paired(values, values, ">", threshold).verdict == stats.REFUTED


def test_residual_rule_flips_without_the_residual_component(no_cache):
    plain = [log_grad_ratio(weight_grad_profile(train(tanh_mlp_config(False, s)))) for s in SEEDS]
    # the same model on both sides (no residuals): difference 0, rule "> 1" is refuted
    assert stats.decide_paired(plain, plain, ">", 1.0).verdict == stats.REFUTED
    assert all(r < -1 for r in plain)  # and the plain net does lose gradient toward the input


def _tiny_gpt():
    from normsys.config import ModelConfig
    from normsys.models import build_model

    torch.manual_seed(0)
    model = build_model(ModelConfig("char_gpt", "layernorm", "pre", d=32, heads=4, layers=2,
                                    seq_len=16, vocab=65, n_out=65))
    return model, torch.randint(0, 65, (4, 16)), torch.randint(0, 65, (4, 16))


def test_ln_formula_without_radial_term_misses_by_more_than_1e_2():
    model, x, y = _tiny_gpt()
    captures = layernorm_gradients(model, x, y)
    assert len(captures) == 5  # ln_1, ln_2 of two blocks and ln_f
    exact, dropped = ln_vjp_errors(captures), ln_vjp_errors(captures, drop_radial=True)
    assert max(exact) < 1e-4
    assert max(dropped) > 1e-2
    assert stats.decide([max(dropped)] * 3, "<", 1e-4).verdict == stats.REFUTED


def test_attention_comparison_flips_when_both_sides_use_the_same_attention():
    model, x, y = _tiny_gpt()
    cos = ln_decomposition_summary(layernorm_gradients(model, x, y))["cos_center_scale"]
    assert 0 < cos <= 1
    assert stats.decide_paired([cos] * 3, [cos] * 3, ">", 0.0).verdict == stats.REFUTED


def test_stability_rules_flip_on_constructed_gradient_directions():
    same = [direction_stability([seeded_randn((256,), s)] * 8) for s in SEEDS]  # one direction
    independent = [direction_stability([seeded_randn((256,), 100 * s + i) for i in range(8)])
                   for s in SEEDS]
    # fa-bp-direction-unstable (<= 0.2): perfectly stable directions -> refuted
    assert stats.decide(same, "<=", 0.2).verdict == stats.REFUTED
    # fa-dfa-direction-stable (>= 0.5): independent directions -> refuted
    assert stats.decide(independent, ">=", 0.5).verdict == stats.REFUTED
    # fa-stability-separates (> 0.3): the same rule on the same kind of net on both sides
    assert stats.decide_paired(independent, independent, ">", 0.3).verdict == stats.REFUTED
    assert stats.decide_paired(same, independent, ">", 0.3).verdict == stats.SUPPORTED


# ----------------------------------------------------------------- literature and deep-dive claims


def test_all_of_rule_flips_when_one_comparison_is_absent():
    better, same = [0.2, 0.25, 0.22], [0.5, 0.52, 0.49]
    # tc-residual-layernorm-lowest-loss: one "other" config identical to residual+LN -> refuted
    decisions = {"a": stats.decide_paired(same, better, ">", 0.0),
                 "b": stats.decide_paired(better, better, ">", 0.0)}
    assert stats.decide_all(decisions).verdict == stats.REFUTED
    decisions["b"] = stats.decide_paired([0.4, 0.41, 0.45], better, ">", 0.0)
    assert stats.decide_all(decisions).verdict == stats.SUPPORTED


def test_convergence_rule_flips_for_equal_speeds():
    from normsys.experiments import steps_to_accuracy

    fast = [0.5] * 20 + [1.0] * 200
    assert steps_to_accuracy(fast, 0.9, window=50) == 60  # window of steps 11-60: 10 x 0.5, 40 x 1.0
    slow = [0.5] * 100 + [1.0] * 200
    ratio_same = [steps_to_accuracy(slow, 0.9, 50) / steps_to_accuracy(slow, 0.9, 50)] * 3
    assert stats.decide(ratio_same, "<", 0.8).verdict == stats.REFUTED
    import math

    assert math.isnan(steps_to_accuracy([0.5] * 100))  # never reached: NaN -> inconclusive


def test_vanishing_gradient_rule_flips_without_layernorm(no_cache):
    plain = [log_grad_ratio(weight_grad_profile(train(tanh_mlp_config(False, s, "none"))))
             for s in SEEDS]
    assert stats.decide_paired(plain, plain, ">", 1.0).verdict == stats.REFUTED


def test_xiong_rules_flip_on_constructed_profiles():
    flat, growing = [1.1, 0.9, 1.05], [4.0, 5.0, 4.5]
    assert stats.decide(flat, ">", 2.0).verdict == stats.REFUTED  # post-LN rule on a flat net
    import math

    assert stats.decide([abs(math.log2(r)) for r in growing], "<", 1.0).verdict == stats.REFUTED


def test_dong_rules_flip_between_pure_attention_and_skips():
    from normsys.experiments import attention_stack_residuals

    with_skips = [attention_stack_residuals(s, skips=True) for s in SEEDS]
    pure = [attention_stack_residuals(s, skips=False) for s in SEEDS]
    # the pure-attention rule (< 1e-3) applied to the stack with skips -> refuted, and vice versa
    assert stats.decide([r[6] / r[0] for r in with_skips], "<", 1e-3).verdict == stats.REFUTED
    assert stats.decide([r[6] / r[0] for r in pure], ">", 0.1).verdict == stats.REFUTED


def test_equivalence_rules_flip_for_a_clearly_different_setting():
    # rmsnorm/dyt-matches-layernorm (+-2%) and dm-scaled-l2-matches-layernorm (+-0.02)
    assert stats.decide_equivalence([0.10, 0.12, 0.11], -0.02, 0.02).verdict == stats.REFUTED
    assert stats.decide_equivalence([0.001, -0.002, 0.0], -0.02, 0.02).verdict == stats.SUPPORTED
