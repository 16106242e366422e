"""What each task trains on and is judged by: its targets, the rows of each batch, the fixed probe
batch, the rows its held-out metrics read, and the loss of stacked seeds (normsys.training.tasks), on
data built so that every row and every target can be told apart."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from normsys.training.config import preset
from normsys.training.tasks import EVAL_SEED, Classify, LanguageModel, Regress, lm_batch, make_task
from normsys.training.train import run_context

LM = preset("char_gpt", **{"model.seq_len": 5, "train.batch_size": 3, "train.steps": 4,
                           "train.eval_batches": 2, "train.seed": 2})
CLS = preset("mlp", **{"train.batch_size": 4, "train.epochs": 2, "train.probe_batch": 3,
                       "train.eval_train_rows": 10})


def ctx(cfg):
    return run_context(cfg, torch.device("cpu"), 0)


# ----------------------------------------------------------------------------- language model


def test_lm_targets_are_the_next_characters_of_contiguous_windows():
    ids = torch.arange(100, 200)
    x, y = lm_batch(ids, 6, 4, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 6)
    assert torch.equal(y, x + 1)  # the next character
    assert torch.equal(x - x[:, :1], torch.arange(6).expand(4, 6))  # a window, in order
    assert int(x.min()) >= 100 and int(y.max()) <= 199  # inside the text
    again = lm_batch(ids, 6, 4, torch.Generator().manual_seed(0))
    assert torch.equal(again[0], x)


def test_lm_window_starts_leave_out_the_last_window():
    """Starts are drawn from 0 ... len - block - 2: a text of 8 characters and windows of 6 (7
    with the target) start at 0 only, though a start at 1 would fit (its last target is the
    text's last character; nanoGPT draws it). Drawing it would redraw every language model's
    batches and move every recorded verdict's values, so the draw stays as the ledger holds it."""
    ids = torch.arange(8)
    starts = {int(lm_batch(ids, 6, 1, torch.Generator().manual_seed(s))[0][0, 0])
              for s in range(40)}
    assert starts == {0}
    starts = {int(lm_batch(torch.arange(9), 6, 1, torch.Generator().manual_seed(s))[0][0, 0])
              for s in range(40)}
    assert starts == {0, 1}


def test_lm_trains_on_the_train_text_and_probes_on_fixed_validation_windows():
    task = LanguageModel(torch.arange(0, 300), torch.arange(1000, 1300))
    batches = list(task.batches(LM, torch.Generator().manual_seed(0)))
    assert len(batches) == 4 and all(epoch == 0 for epoch, _, _ in batches)
    assert all(int(x.max()) < 300 and x.shape == (3, 5) for _, x, _ in batches)
    x, y = task.probe_batch(LM)
    assert int(x.min()) >= 1000 and torch.equal(y, x + 1)
    want = lm_batch(task.val_ids, 5, 3, torch.Generator().manual_seed(EVAL_SEED + 2))
    assert torch.equal(x, want[0])  # fixed by the run's seed, the same for every norm
    assert not torch.equal(task.probe_batch(LM.override(**{"train.seed": 3}))[0], x)


class NextIsPlusOne(nn.Module):
    """Logits 50 at (x + 1) mod V, 0 elsewhere: right on a rising text, wrong on a falling one."""

    def __init__(self, vocab: int = 10):
        super().__init__()
        self.vocab, self.w = vocab, nn.Parameter(torch.zeros(()))

    def forward(self, x):
        return 50.0 * nn.functional.one_hot((x + 1) % self.vocab, self.vocab).float() + self.w


def test_lm_evaluates_train_on_the_train_text_and_val_on_the_validation_text():
    rising, falling = torch.arange(400) % 10, (-torch.arange(400)) % 10
    out = LanguageModel(rising, falling).evaluate(NextIsPlusOne(), LM, ctx(LM))
    # right: -log(e^50 / (e^50 + 9)) ~ 0; wrong: log(e^50 + 9) - 0 = 50 + log(1 + 9 e^-50)
    assert out["train_loss"] == pytest.approx(9 * math.exp(-50), abs=1e-12)
    assert out["val_loss"] == pytest.approx(50.0, abs=1e-5)
    assert set(out) == {"train_loss", "val_loss"}


# ----------------------------------------------------------------------------- classification


def numbered(n: int, classes: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows whose one feature is their index, labelled index mod ``classes``."""
    return torch.arange(n, dtype=torch.float32)[:, None], torch.arange(n) % classes


def test_classification_batches_are_each_epoch_a_permutation_with_aligned_labels():
    x, y = numbered(10)
    task = Classify(x, y, x, y)
    assert task.steps(CLS) == 2 * math.ceil(10 / 4)
    seen: dict[int, list[int]] = {0: [], 1: []}
    for epoch, xb, yb in task.batches(CLS, torch.Generator().manual_seed(0)):
        assert torch.equal(xb[:, 0].long() % 2, yb)  # each row with its own label
        assert len(yb) <= 4
        seen[epoch] += xb[:, 0].long().tolist()
    assert sorted(seen[0]) == sorted(seen[1]) == list(range(10))  # every row once per epoch
    assert seen[0] != seen[1]  # shuffled anew


def test_classification_by_steps_runs_past_an_epoch_and_stops_at_the_step_count():
    x, y = numbered(10)
    cfg = CLS.override(**{"train.steps": 7})
    batches = list(Classify(x, y, x, y).batches(cfg, torch.Generator().manual_seed(0)))
    assert len(batches) == 7 and Classify(x, y, x, y).steps(cfg) == 7
    assert [e for e, _, _ in batches] == [0, 0, 0, 1, 1, 1, 2]
    # a step count far past the data: one batch an epoch, 500 epochs, none cut short
    cfg = CLS.override(**{"train.steps": 500})
    epochs = [e for e, _, _ in Classify(x[:3], y[:3], x, y).batches(cfg, torch.Generator())]
    assert epochs == list(range(500))


def test_classification_probes_the_first_training_rows():
    x, y = numbered(10)
    px, py = Classify(x, y, x + 100, y).probe_batch(CLS)
    assert px[:, 0].tolist() == [0.0, 1.0, 2.0] and py.tolist() == [0, 1, 0]


class Constant(nn.Module):
    """Always class 0, with logits (1, 0)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.zeros(()))

    def forward(self, x):
        return torch.tensor([1.0, 0.0]).expand(len(x), 2) + self.w


def test_classification_metrics_read_the_first_eval_train_rows_and_every_test_row():
    x = torch.zeros(20, 1)
    y_train = torch.tensor([0] * 10 + [1] * 10)  # the first 10 rows are class 0
    y_test = torch.tensor([0, 1, 1, 1])
    task = Classify(x, y_train, torch.zeros(4, 1), y_test)
    out = task.evaluate(Constant(), CLS, ctx(CLS))
    right, wrong = math.log(1 + math.exp(-1)), math.log(1 + math.exp(1))  # CE of (1, 0)
    assert out["train_acc"] == 1.0 and out["train_loss"] == pytest.approx(right)
    assert out["test_acc"] == 0.25
    assert out["test_loss"] == pytest.approx((right + 3 * wrong) / 4)
    every = task.evaluate(Constant(), CLS.override(**{"train.eval_train_rows": 0}), ctx(CLS))
    assert every["train_acc"] == 0.5  # 0: all training rows


def test_make_task_takes_the_first_rows_and_says_so(data_env):
    cfg = preset("mlp", **{"data.n_train": 30, "data.n_test": 7})
    full = make_task(preset("mlp"))
    small = make_task(cfg)
    assert torch.equal(small.x_train, full.x_train[:30]) and torch.equal(small.y_test,
                                                                         full.y_test[:7])
    assert small.source.endswith("; first 30 train / 7 test rows")
    assert full.source and "first" not in full.source and small.digest == full.digest


# ----------------------------------------------------------------------------- regression


def test_regression_draws_fresh_inputs_and_targets_of_the_model_width():
    cfg = preset("ffn_stack", **{"model.d": 6, "data.batch_shape": (2, 3, 6), "train.steps": 3,
                                 "train.seed": 4})
    task = make_task(cfg)
    assert isinstance(task, Regress) and (task.shape, task.width) == ((2, 3, 6), 6)
    batches = list(task.batches(cfg, torch.Generator().manual_seed(0)))
    assert len(batches) == 3 and all(x.shape == (2, 3, 6) and y.shape == (2, 3, 6)
                                     for _, x, y in batches)
    assert not torch.equal(batches[0][1], batches[1][1])  # fresh every step
    gen = torch.Generator().manual_seed(0)
    x0 = torch.randn((2, 3, 6), generator=gen)
    y0 = torch.randn(2, 3, 6, generator=gen)
    assert torch.equal(batches[0][1], x0) and torch.equal(batches[0][2], y0)  # x, then y
    px, _ = task.probe_batch(cfg)
    assert torch.equal(px, torch.randn((2, 3, 6),
                                       generator=torch.Generator().manual_seed(EVAL_SEED + 4)))
    wide = make_task(preset("tanh_mlp", **{"model.d": 5, "data.batch_shape": (4, 5)}))
    assert wide.draw(torch.Generator())[1].shape == (4, 5)
    with pytest.raises(ValueError, match="needs data.batch_shape"):
        make_task(preset("tanh_mlp", **{"data.batch_shape": ()}))


def test_regression_loss_is_mse_and_stacked_seeds_get_each_their_own_mean():
    task = Regress((2, 3), 3)
    out, y = torch.zeros(4, 3), torch.tensor([[1.0] * 3, [1.0] * 3, [2.0] * 3, [2.0] * 3])
    assert float(task.loss(out, y)) == pytest.approx(2.5)  # (1 + 1 + 4 + 4) / 4
    assert task.loss(out, y, seeds=2).tolist() == pytest.approx([1.0, 4.0])


def test_classification_loss_of_stacked_seeds_is_each_seeds_mean_cross_entropy():
    task = Classify(*numbered(4), *numbered(4))
    logits = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    y = torch.tensor([0, 1, 0, 0])
    right, wrong = math.log(1 + math.exp(-1)), math.log(1 + math.exp(1))
    assert task.loss(logits, y, seeds=2).tolist() == pytest.approx([(right + wrong) / 2,
                                                                    math.log(2)])
    assert float(task.loss(logits, y)) == pytest.approx((right + wrong + 2 * math.log(2)) / 4)


def test_a_language_model_moved_to_a_device_keeps_its_data_and_digest(data_env):
    task = make_task(preset("char_gpt"))
    moved = task.to(torch.device("cpu"))
    assert moved.digest == task.digest and len(moved.digest) == 64
    assert torch.equal(moved.train_ids, task.train_ids) and torch.equal(moved.val_ids, task.val_ids)
    assert moved.source == task.source


def test_a_classification_task_moved_to_a_device_keeps_its_data_source_and_digest():
    x, y = numbered(10)
    task = Classify(x, y, x[:4], y[:4], "ten numbers", "d" * 64)
    moved = task.to(torch.device("cpu"))
    assert (moved.source, moved.digest) == ("ten numbers", "d" * 64)
    assert all(torch.equal(getattr(moved, k), getattr(task, k))
               for k in ("x_train", "y_train", "x_test", "y_test"))


def test_random_data_says_its_shape_and_needs_one():
    cfg = preset("ffn_stack", **{"data.batch_shape": (4, 5, 128)})
    assert make_task(cfg).source == "random normal batches of shape (4, 5, 128)"
    with pytest.raises(ValueError) as err:
        make_task(cfg.override(**{"data.batch_shape": ()}))
    assert str(err.value) == "data.name=random needs data.batch_shape, e.g. (32, 64)"
