"""What each claim's figure draws and what it records beside its verdict (the report's evidence):
which numbers go on which axis, the mean over seeds and its min-max band, the reference ranges
and the labels. Each input below gives every seed, layer and rule numbers of their own, so that
drawing or recording another one changes the result.
"""

from __future__ import annotations

import importlib
import itertools

import numpy as np
import pytest
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure

from normsys.declarations.shared.protocol import BP_RANGE, DFA_RANGE
from normsys.training.config import preset
from normsys.training.record import TEST_ACC, TRAIN_ACC, RunRecord


def dm():
    return importlib.import_module("claims.test_dual_mechanism")


def fa():
    return importlib.import_module("claims.test_fa_protocol")


def encoder_run(spectra: dict[str, list[float]], acc: float, nonpad_scale: float = 2.0) -> RunRecord:
    """An encoder run whose probed blocks have these singular values (over all rows; the rows that
    are not padding: each value times ``nonpad_scale`` squared, another spectrum's shape)."""
    probes = {layer: {"singular_values": s, "erank": len(s) + 0.12345,
                      "nonpad": {"singular_values": [v * nonpad_scale ** i for i, v in enumerate(s)],
                                 "erank": len(s) + 0.98765}}
              for layer, s in spectra.items()}
    return RunRecord(config=preset("encoder").to_dict(), fingerprint="f", version="0",
                     metrics={TEST_ACC: acc, TRAIN_ACC: acc + 0.05}, curves={}, probes=probes,
                     init_grad_norms={}, diverged=False, steps=0, wall_time=0.0, env={},
                     data_source="ag_news rows")


def fractions(s) -> np.ndarray:
    s = np.asarray(s, dtype=float)
    return s / s.sum(-1, keepdims=True)


def band(collection) -> tuple[np.ndarray, np.ndarray]:
    """The lower and upper edge of a fill_between band (its polygon: along the top, back along the
    bottom, or the other way round), by x."""
    xy = collection.get_paths()[0].vertices
    xs = np.unique(xy[:, 0])
    return (np.array([xy[xy[:, 0] == x, 1].min() for x in xs]),
            np.array([xy[xy[:, 0] == x, 1].max() for x in xs]))


def spectra_of(seed: int) -> dict[str, list[float]]:
    return {layer: [10.0 + seed + i, 4.0 * (i + 1), 1.0 + seed * (i + 2)]
            for i, layer in enumerate(dm().DM_PROBES)}


@pytest.mark.parametrize("rows", [None, "all", "nonpad"])
def test_figure_4_draws_each_blocks_spectra_as_fractions_mean_over_seeds_and_min_max_band(rows):
    runs = {"none": [encoder_run(spectra_of(0), 0.5), encoder_run(spectra_of(1), 0.75)],
            "layernorm": [encoder_run(spectra_of(2), 0.875)]}
    fig = Figure()
    dm().draw_figure_4(fig, runs, *([rows] if rows else []))  # every row unless told
    axes = fig.axes
    assert side_by_side(axes)
    assert all(axes[0].get_shared_y_axes().joined(axes[0], ax) for ax in axes[1:])
    assert [ax.get_title() for ax in axes] == ["block 1", "block 3", "block 6"]
    assert [ax.get_yscale() for ax in axes] == ["log"] * 3
    assert axes[0].get_ylabel() == "s_i / sum(s)" and axes[2].get_xlabel() == "singular value index"
    assert axes[2].get_legend() is not None and axes[0].get_legend() is None
    assert tuple(fig.get_size_inches()) == (12, 3.8)
    for ax, layer in zip(axes, dm().DM_PROBES, strict=True):
        assert [line.get_label() for line in ax.lines] == ["none (test acc 0.625)",
                                                           "layernorm (test acc 0.875)"]
        for line, fill, seeds in zip(ax.lines, ax.collections, runs.values(), strict=True):
            s = fractions([r.probes[layer]["singular_values"] if rows != "nonpad"
                           else r.probes[layer]["nonpad"]["singular_values"] for r in seeds])
            np.testing.assert_allclose(line.get_xdata(), [1, 2, 3])
            np.testing.assert_allclose(line.get_ydata(), s.mean(0))
            low, high = band(fill)
            np.testing.assert_allclose(low, s.min(0))
            np.testing.assert_allclose(high, s.max(0))
    assert fig._suptitle.get_text().startswith("Figure 4 re-drawn: spectra of hidden states")


class Claim:
    """What a claim body hands its claim: the evidence recorded, the figures drawn (each drawn
    here on a figure of its own), the runs it was checked on."""

    def __init__(self, seeds=(0, 1)):
        self.seeds, self.evidence, self.figures, self.checked = list(seeds), {}, {}, None

    def record(self, **evidence):
        self.evidence = evidence

    def figure(self, name, draw):
        self.figures[name] = Figure()
        draw(self.figures[name])

    def check(self, runs):
        self.checked = runs


def test_a_seeds_ranks_are_recorded_per_probed_block_with_its_accuracies():
    runs = [encoder_run(spectra_of(0), 0.5), encoder_run({**spectra_of(1), "blocks.5": [1.0]}, 0.25)]
    claim = Claim()
    dm().record_ranks(claim, runs, "-nonpad")
    assert claim.evidence == {"erank": {"blocks.0": [3.988, 3.988], "blocks.2": [3.988, 3.988],
                                        "blocks.5": [3.988, 1.988]},
                              "rows": "nonpad", "test_acc": [0.5, 0.25], "train_acc": [0.55, 0.3],
                              "data": "ag_news rows"}
    dm().record_ranks(claim, runs)
    assert claim.evidence["erank"]["blocks.5"] == [3.123, 1.123] and claim.evidence["rows"] == "all"
    dm().record_ranks(claim, runs[:1])  # a claim run at one seed
    assert claim.evidence["test_acc"] == [0.5] and claim.evidence["data"] == "ag_news rows"


def test_the_stability_figure_draws_each_rules_seeds_its_mean_and_the_reference_ranges():
    by_method = {"bp": [0.1, 0.2, 0.3], "dfa": [0.7, 0.9], "fa": [0.4]}
    fig = Figure()
    fa().draw_stability(fig, by_method)
    (ax,) = fig.axes
    points = [c.get_offsets() for c in ax.collections]
    for i, values in enumerate(by_method.values()):
        np.testing.assert_allclose(points[i], [[i, v] for v in values])
    assert [p.get_height() for p in ax.patches[:3]] == pytest.approx([0.2, 0.8, 0.4])
    assert [p.get_x() + p.get_width() / 2 for p in ax.patches[:3]] == pytest.approx([0, 1, 2])
    assert [t.get_text() for t in ax.get_xticklabels()] == ["bp", "dfa", "fa"]
    assert ax.get_ylabel() == "direction stability at h_2"
    assert ax.get_title() == "Cross-batch gradient-direction stability per learning rule"
    assert_reference_bands(ax)


def assert_reference_bands(ax) -> None:
    """The protocol's BP and DFA reference ranges, as horizontal bands named in the legend."""
    spans = [p for p in ax.patches if p.get_label().endswith(("reference 0.05-0.18",
                                                              "reference 0.5-0.99"))]
    assert [p.get_label() for p in spans] == ["BP reference 0.05-0.18", "DFA reference 0.5-0.99"]
    for span, (low, high), colour in zip(spans, (BP_RANGE, DFA_RANGE), ("tab:green", "tab:red"),
                                         strict=True):
        assert (span.get_y(), span.get_y() + span.get_height()) == pytest.approx((low, high))
        assert to_rgb(span.get_facecolor()) == to_rgb(colour)
        assert (span.get_x(), span.get_width()) == (0, 1)  # across the whole axis
    assert {t.get_text() for t in ax.get_legend().get_texts()} >= {s.get_label() for s in spans}


def test_the_stability_by_epochs_figure_draws_each_rules_mean_over_seeds_and_band_on_a_log_axis():
    by_epochs = {"bp": {5: [0.1, 0.3], 1: [0.2, 0.4], 2: [0.05, 0.15], 10: [0.5, 0.7]},
                 "dfa": {1: [0.6, 0.6], 2: [0.7, 0.9], 5: [0.8, 0.8], 10: [0.9, 0.95]}}
    fig = Figure()
    fa().draw_stability_by_epochs(fig, by_epochs)
    (ax,) = fig.axes
    assert [line.get_label() for line in ax.lines] == ["bp", "dfa"]
    for line, fill, per_epoch in zip(ax.lines, ax.collections, by_epochs.values(), strict=True):
        epochs = sorted(per_epoch)
        values = np.array([per_epoch[e] for e in epochs])
        np.testing.assert_allclose(line.get_xdata(), epochs)
        np.testing.assert_allclose(line.get_ydata(), values.mean(1))
        low, high = band(fill)
        np.testing.assert_allclose(low, values.min(1))
        np.testing.assert_allclose(high, values.max(1))
    assert ax.get_xscale() == "log"
    assert list(ax.get_xticks()) == [1, 2, 5, 10]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "5", "10"]
    assert ax.get_xlabel() == "training epochs" and ax.get_ylabel() == "direction stability at h_2"
    assert ax.get_title().startswith("Gradient-direction stability against training")
    assert_reference_bands(ax)


def test_the_correlation_figure_draws_each_norms_trained_last_hidden_layer(data_env, monkeypatch):
    """The unit correlations of each norm's trained net (its weights, not its initialization) on
    the first 1,000 training images, first 64 live units of the last hidden layer."""
    from normsys.orchestration.runs import Runs
    from normsys.training.data import mnist
    from normsys.training.record import trained_model

    monkeypatch.setenv("NORMSYS_CACHE", "off")
    dd = importlib.import_module("claims.test_layernorm_deep_dive")
    session = Runs()
    records = {norm: session.run(dd.mlp(norm, 0, **{"train.steps": 3}))
               for norm in ("none", "layernorm")}
    fig = Figure()
    dd.draw_correlations(fig, records)
    axes = [ax for ax in fig.axes if ax.images]
    assert len(axes) == 2 and len(fig.axes) == 3  # and the colour bar
    assert side_by_side(axes) and tuple(fig.get_size_inches()) == (10, 4.2)
    fig.canvas.draw()  # where the colour bar took its room from: both heatmaps alike
    assert axes[0].get_position().width == pytest.approx(axes[1].get_position().width)
    assert axes[1].images[0].colorbar.ax is fig.axes[2]
    x = mnist().x_train[:1000]
    for ax, (norm, record) in zip(axes, records.items(), strict=True):
        h = last_hidden(trained_model(record), x)
        h = h[:, h.std(0) > 0][:, :64]
        (image,) = ax.images
        np.testing.assert_allclose(image.get_array(), np.corrcoef(h.T.numpy()), atol=1e-6)
        assert image.get_clim() == (-1, 1) and image.get_cmap().name == "RdBu_r"
        assert ax.get_title() == f"{norm}: mean |corr| {dd.unit_correlation(record):.3f}"
    assert not np.allclose(axes[0].images[0].get_array(), axes[1].images[0].get_array())
    assert fig._suptitle.get_text().startswith("Hidden-unit correlations, last hidden layer")


def last_hidden(model, x):
    """What the model's last hidden layer puts out as its whole forward runs."""
    out = []
    model.layers[-1].register_forward_hook(lambda module, args, h: out.append(h.detach()))
    model(x)
    return out[0]


def side_by_side(axes) -> bool:
    """The axes in one row, left to right."""
    boxes = [ax.get_position() for ax in axes]
    return len({round(b.y0, 6) for b in boxes}) == 1 and all(
        a.x1 <= b.x0 for a, b in itertools.pairwise(boxes))


def lit():
    return importlib.import_module("claims.test_literature")


def test_xiongs_profiles_record_and_draw_each_depths_ffn_gradients_per_seed():
    """A block's FFN gradient norm is the norm over its two Linears' weight gradients."""
    def grads(layers: int, seed: int) -> dict[str, float]:
        return {f"blocks.{b}.mlp.{i}.weight": (b + 1) * (seed + 1) * (3.0 if i == 0 else 4.0)
                for b in range(layers) for i in (0, 2)} | {"blocks.0.attn.weight": 99.0}

    fetched = []

    def runs(cfgs):
        fetched.append(cfgs)
        return [RunRecord(config=c.to_dict(), fingerprint="f", version="0", metrics={}, curves={},
                          probes={}, init_grad_norms=grads(c.model.layers, c.train.seed),
                          diverged=False, steps=0, wall_time=0.0, env={}, data_source="")
                for c in cfgs]

    claim = Claim(seeds=(0, 2))
    lit().xiong_profiles(claim, lit().POSTLN_GROWS, runs, "cpu", "post")
    assert len(fetched) == 1 and [(c.model.layers, c.train.seed) for c in fetched[0]] == [
        (6, 0), (12, 0), (6, 2), (12, 2)]  # every run at once
    profiles = claim.evidence["ffn_grad_profiles"]
    assert list(profiles) == ["post-LN, 6 blocks", "post-LN, 12 blocks"]
    for depth, per_seed in zip((6, 12), profiles.values(), strict=True):
        assert per_seed == [pytest.approx([5.0 * (b + 1) * (s + 1) for b in range(depth)])
                            for s in (0, 2)]
    (ax,) = claim.figures["profiles"].axes
    assert ax.get_title() == "Xiong profile, post-LN (mean over seeds, band min-max)"
    assert ax.get_ylabel() == "||grad FFN weights|| at init" and ax.get_xlabel() == "block"
    assert [line.get_label() for line in ax.lines] == list(profiles)


def test_dongs_residuals_are_each_seeds_stack_of_six_layers_and_its_values_their_ratios():
    for skips in (False, True):
        stacks = [lit().attention_stack_residuals(s, depth=6, skips=skips) for s in (3, 5)]
        assert lit().dong_residuals([3, 5], skips) == stacks
        assert lit().dong_ratios(skips)([3, 5]) == [lit().depth_ratio(r) for r in stacks]
    assert len(lit().dong_residuals([3, 5], True)[0]) == 7  # the input and six layers
    assert lit().dong_ratios(False)([3]) != lit().dong_ratios(True)([3])


def test_an_equivalence_claim_records_each_norms_validation_losses_and_draws_their_curves():
    statistic = lit().VAL_LOSS_VS_LN

    def runs(cfgs):
        return [RunRecord(config=c.to_dict(), fingerprint="f", version="0",
                          metrics={"val_loss": 2.0 + c.train.seed + (c.model.norm == "rmsnorm")},
                          curves={"loss": [3.0, 2.5 - c.train.seed]}, probes={},
                          init_grad_norms={}, diverged=False, steps=2, wall_time=0.0, env={},
                          data_source="") for c in cfgs]

    claim = Claim(seeds=(0, 1))
    lit().equivalence_to_layernorm(claim, runs, statistic.declaration, "cpu")
    assert claim.evidence == {"val_loss": {"rmsnorm": [3.0, 4.0], "LN": [2.0, 3.0]}}
    assert claim.checked is runs
    (ax,) = claim.figures["loss-curves"].axes
    assert claim.figures["loss-curves"]._suptitle.get_text() == \
        "Char GPT training loss, rmsnorm vs LN (mean over seeds, band min-max)"
    assert ax.get_ylabel() == "loss"
    assert [line.get_label() for line in ax.lines] == ["rmsnorm", "LN"]
