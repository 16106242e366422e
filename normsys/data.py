"""Real data sets: AG News (tokenized), Tiny Shakespeare (characters), MNIST (IDX files).

Offline copies live under ``$NORMSYS_DATA`` (see ../shared/data/README.md); with a network and
without ``HF_HUB_OFFLINE=1``, AG News and the tokenizer come from the Hugging Face Hub instead.

AG News pools (SPEC.md). Offline only the official test split (7,600 rows, 1,900 per class) and the
first 2,000 train rows exist, so the CPU tier is defined on the test split alone, identical online
and offline: per class, a permutation fixed by ``POOL_SEED`` gives 1,500 training and the next 400
held-out rows (6,000 / 1,600). The paper tier uses the full official splits when present; otherwise
the largest real pool: the CPU tier's 1,600 held-out rows, and for training every other real row
(the 6,000 CPU-tier rows plus the 2,000 train rows), recorded as such in ``Split.source``.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

POOL_SEED = 20_240_404  # fixes the CPU-tier AG News pool; never change (claims depend on it)
AG_FILES = {"test": "ag_news/test.csv.gz", "train": "ag_news/train.csv.gz",
            "train_partial": "ag_news/train_first2000rows.csv.gz"}
AG_NEWS_ROWS = {"train": 120_000, "test": 7_600}  # rows of the official splits (the paper tier's)
VOCAB_FILE = "tokenizers/bert-base-uncased/vocab.txt"
SHAKESPEARE_FILE = "tinyshakespeare/input.txt"
MNIST_FILES = {"train_x": "mnist/train-images-idx3-ubyte.gz",
               "train_y": "mnist/train-labels-idx1-ubyte.gz",
               "test_x": "mnist/t10k-images-idx3-ubyte.gz", "test_y": "mnist/t10k-labels-idx1-ubyte.gz"}
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


class DataMissingError(FileNotFoundError):
    """A data set is not where normsys looks for it; the message says where and how to get it."""


@dataclass(frozen=True)
class Split:
    """Tensors of one data set: inputs and targets for training and held-out evaluation."""

    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    source: str  # where the rows came from and how many, for the record


def data_root() -> Path:
    root = os.environ.get("NORMSYS_DATA")
    if not root:
        raise DataMissingError(
            "NORMSYS_DATA is not set. Point it at a folder holding the offline data sets "
            "(ag_news/, tokenizers/, tinyshakespeare/, mnist/ as in ../shared/data/README.md), "
            "e.g. export NORMSYS_DATA=../shared/data")
    return Path(root)


def data_file(relative: str, what: str) -> Path:
    """The path of a data file under $NORMSYS_DATA, or a DataMissingError naming what is needed."""
    root = data_root()
    path = root / relative
    if not path.is_file():
        raise DataMissingError(
            f"{what}: expected {relative} under NORMSYS_DATA={root} but {path} does not exist. "
            f"Copy the offline data set there (see ../shared/data/README.md for sources and "
            f"checksums), or unset HF_HUB_OFFLINE on a machine with network access.")
    return path


def hub_allowed() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("1", "true", "True")


# ----------------------------------------------------------------------------- AG News


def _read_ag_csv(path: Path) -> list[tuple[int, str]]:
    rows = []
    with gzip.open(path, "rt", encoding="utf-8", newline="") as fh:
        for i, row in enumerate(csv.reader(fh)):
            if len(row) != 3 or not row[0].isdigit() or not 1 <= int(row[0]) <= 4:
                raise DataMissingError(f"malformed AG News row {i} in {path}: {row[:1]}...; "
                                       f"expected 3 columns (class 1-4, title, description)")
            rows.append((int(row[0]) - 1, row[1] + " " + row[2]))
    return rows


def ag_news_rows(split: str) -> list[tuple[int, str]]:
    """(label 0-3, text) rows of an official split: ``test``, ``train`` or ``train_partial``."""
    if hub_allowed() and split in ("test", "train"):
        try:
            from datasets import load_dataset

            ds = load_dataset("ag_news", split=split)
            return [(int(r["label"]), r["text"]) for r in ds]
        except Exception:  # noqa: BLE001 - no network or no datasets: fall back to the files
            pass
    return _read_ag_csv(data_file(AG_FILES[split], f"AG News {split} split"))


def _per_class_permutation(labels: Tensor, n_classes: int = 4) -> list[Tensor]:
    gen = torch.Generator().manual_seed(POOL_SEED)
    return [torch.nonzero(labels == c).flatten()[torch.randperm(int((labels == c).sum()),
                                                               generator=gen)]
            for c in range(n_classes)]


def ag_news_pool(tier: str) -> tuple[list[tuple[int, str]], list[tuple[int, str]], str]:
    """(train rows, held-out rows, source) of the CPU tier or the paper tier (see module doc)."""
    test = ag_news_rows("test")
    perms = _per_class_permutation(torch.tensor([y for y, _ in test]))
    train_idx = torch.cat([p[:1500] for p in perms])
    held_idx = torch.cat([p[1500:1900] for p in perms])
    gen = torch.Generator().manual_seed(POOL_SEED + 1)  # interleave classes in a fixed order
    train_idx = train_idx[torch.randperm(len(train_idx), generator=gen)]
    held_idx = held_idx[torch.randperm(len(held_idx), generator=gen)]
    cpu_train, held = [test[i] for i in train_idx], [test[i] for i in held_idx]
    if tier == "cpu":
        return cpu_train, held, "AG News CPU-tier pool: official test split, 6000 train / 1600 held-out"
    try:
        full = ag_news_rows("train")
        return full, test, f"AG News official splits: {len(full)} train / {len(test)} test"
    except DataMissingError:
        partial = ag_news_rows("train_partial")
        return (cpu_train + partial, held,
                f"AG News paper-tier FALLBACK (full train split absent): {len(cpu_train)} test-split "
                f"rows + {len(partial)} train rows = {len(cpu_train) + len(partial)} train / "
                f"{len(held)} held-out; not the full reproduction")


def bert_tokenizer():
    """distilbert-base-uncased's tokenizer from the Hub, else bert-base-uncased's vocab.txt."""
    try:
        import transformers
    except ImportError as err:
        raise ImportError("AG News needs the tokenizer from transformers: "
                          "pip install -e '.[data]'") from err

    if hub_allowed():
        try:
            return transformers.AutoTokenizer.from_pretrained("distilbert-base-uncased")
        except Exception:  # noqa: BLE001 - offline: use the local vocabulary
            pass
    vocab = str(data_file(VOCAB_FILE, "BERT uncased vocabulary"))
    if int(transformers.__version__.split(".")[0]) >= 5:  # 5.x ignores vocab_file= silently
        tok = transformers.BertTokenizerFast(vocab=vocab, do_lower_case=True)
    else:
        tok = transformers.BertTokenizerFast(vocab_file=vocab, do_lower_case=True)
    if tok("Hello world")["input_ids"] != [101, 7592, 2088, 102]:
        raise RuntimeError(f"tokenizer built from {vocab} does not encode 'Hello world' as "
                           f"[101, 7592, 2088, 102]: the vocabulary did not load")
    return tok


def tokenize(texts: list[str], seq_len: int) -> Tensor:
    """Token ids (N, seq_len), padded with 0 / truncated, cached on disk by content hash."""
    key = hashlib.sha256(("\x00".join(texts) + f"|{seq_len}").encode()).hexdigest()[:20]
    from normsys.cache import cache_root

    root = cache_root()
    path = root / "tokens" / f"{key}.pt" if root else None
    if path is not None and path.is_file():
        try:
            ids = torch.load(path)
            if ids.shape == (len(texts), seq_len):
                return ids
        except Exception:  # noqa: BLE001 - unreadable cache entry: tokenize again
            pass
    enc = bert_tokenizer()(texts, padding="max_length", truncation=True, max_length=seq_len)
    ids = torch.tensor(enc["input_ids"], dtype=torch.long)
    if path is not None:
        from normsys.cache import atomic_save

        atomic_save(ids, path)
    return ids


def ag_news(tier: str, seq_len: int) -> Split:
    train, held, source = ag_news_pool(tier)
    return Split(tokenize([t for _, t in train], seq_len), torch.tensor([y for y, _ in train]),
                 tokenize([t for _, t in held], seq_len), torch.tensor([y for y, _ in held]),
                 source)


# ----------------------------------------------------------------------------- Tiny Shakespeare


def tiny_shakespeare() -> tuple[Tensor, Tensor, list[str]]:
    """Character ids of the first 90% (train) and last 10% (val), and the sorted alphabet."""
    path = data_file(SHAKESPEARE_FILE, "Tiny Shakespeare")
    text = path.read_text(encoding="utf-8")
    chars = sorted(set(text))
    if len(chars) != 65:
        raise DataMissingError(f"{path} has {len(chars)} distinct characters, expected 65: "
                               f"not the Tiny Shakespeare input.txt")
    lookup = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([lookup[c] for c in text], dtype=torch.long)
    cut = int(0.9 * len(ids))
    return ids[:cut], ids[cut:], chars


# ----------------------------------------------------------------------------- MNIST


def _read_idx(path: Path, magic: int) -> Tensor:
    import numpy as np

    with gzip.open(path, "rb") as fh:
        raw = fh.read()
    head = struct.unpack(">i", raw[:4])[0]
    ndim = magic - 2048
    if head != magic:
        raise DataMissingError(f"{path}: IDX magic {head}, expected {magic}; the file is corrupt")
    dims = struct.unpack(f">{ndim}i", raw[4 : 4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise DataMissingError(f"{path}: {data.size} bytes of data, header says {dims}; truncated")
    return torch.from_numpy(data.copy()).reshape(dims)


def mnist() -> Split:
    """Normalized images flattened to 784 features (float32) and labels; 60,000 / 10,000."""
    paths = {k: data_file(v, "MNIST") for k, v in MNIST_FILES.items()}
    xs = {k: (_read_idx(paths[k], 2051).reshape(-1, 784).float() / 255 - MNIST_MEAN) / MNIST_STD
          for k in ("train_x", "test_x")}
    ys = {k: _read_idx(paths[k], 2049).long() for k in ("train_y", "test_y")}
    return Split(xs["train_x"], ys["train_y"], xs["test_x"], ys["test_y"],
                 "MNIST: 60000 train / 10000 test")
