"""Data loaders on the shared offline data, and clear errors for missing or malformed files."""

from __future__ import annotations

import gzip

import pytest
import torch

from normsys import data


def test_tokenizer_encodes_hello_world(data_env):
    assert data.bert_tokenizer()("Hello world")["input_ids"] == [101, 7592, 2088, 102]


def test_ag_news_cpu_pool_is_balanced_fixed_and_disjoint(data_env):
    train, held, source = data.ag_news_pool("cpu")
    assert (len(train), len(held)) == (6000, 1600) and "6000 train / 1600 held-out" in source
    for rows, per_class in ((train, 1500), (held, 400)):
        counts = torch.bincount(torch.tensor([y for y, _ in rows]), minlength=4)
        assert counts.tolist() == [per_class] * 4
    assert not {t for _, t in train} & {t for _, t in held}
    assert data.ag_news_pool("cpu")[0][:5] == train[:5]  # deterministic


def test_ag_news_paper_tier_falls_back_to_largest_real_pool_and_says_so(data_env):
    train, held, source = data.ag_news_pool("paper")
    assert "FALLBACK" in source and len(train) == 8000 and len(held) == 1600


def test_ag_news_tokenized_split(data_env, tmp_path, monkeypatch):
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    split = data.ag_news("cpu", 64)
    assert split.x_train.shape == (6000, 64) and split.x_test.shape == (1600, 64)
    assert (split.x_train[:, 0] == 101).all()  # [CLS] first
    assert list((tmp_path / "tokens").glob("*.pt"))  # tokenized once, cached on disk
    assert torch.equal(data.ag_news("cpu", 64).x_train, split.x_train)


def test_tiny_shakespeare_characters_and_split(data_env):
    train, val, chars = data.tiny_shakespeare()
    assert len(chars) == 65 and len(train) + len(val) == 1_115_394
    assert len(train) == int(0.9 * 1_115_394)
    assert "".join(chars[i] for i in train[:14].tolist()) == "First Citizen:"


def test_mnist_shapes_and_label_counts(data_env):
    split = data.mnist()
    assert split.x_train.shape == (60000, 784) and split.x_test.shape == (10000, 784)
    assert torch.bincount(split.y_test).tolist()[:3] == [980, 1135, 1032]
    assert abs(float(split.x_train[:1000].mean())) < 0.2


def test_missing_data_names_the_variable_and_the_files(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMSYS_DATA", str(tmp_path))
    with pytest.raises(data.DataMissingError, match="NORMSYS_DATA=.*mnist/train-images"):
        data.mnist()
    monkeypatch.delenv("NORMSYS_DATA")
    with pytest.raises(data.DataMissingError, match="NORMSYS_DATA is not set"):
        data.tiny_shakespeare()


def test_malformed_files_are_clear_errors(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMSYS_DATA", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "ag_news").mkdir()
    with gzip.open(tmp_path / "ag_news" / "test.csv.gz", "wt") as fh:
        fh.write('"9","title"\n')
    with pytest.raises(data.DataMissingError, match="malformed AG News row 0"):
        data.ag_news_rows("test")
    (tmp_path / "mnist").mkdir()
    for name in data.MNIST_FILES.values():
        with gzip.open(tmp_path / name, "wb") as fh:
            fh.write(b"\x00\x00\x08\x01garbage")
    with pytest.raises(data.DataMissingError, match="IDX magic"):
        data.mnist()
