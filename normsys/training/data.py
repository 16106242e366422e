"""Real data sets: AG News (tokenized), Tiny Shakespeare (characters), MNIST (IDX files).

The files the CPU tier needs ship with normsys (``normsys/datafiles``: the AG News test split and
its first 2,000 train rows, the BERT uncased vocabulary, Tiny Shakespeare, MNIST; provenance in
its README.md). ``$NORMSYS_DATA`` points normsys at another folder of the same layout instead.
Every file is checked when it is read: a file normsys ships against the sha256 pinned here
(``PINNED``), wherever it is read from, so that no checksum list beside the data can vouch for
another file; a file it does not ship (the full AG News train split) against the folder's
``SHA256SUMS``. A missing file is a DataMissingError and a damaged one a DataCorruptError, each
naming the file, what was expected and the fix. Each data set comes with a digest of what was
read, which the run cache keys on.

AG News pools. Only the official test split (7,600 rows, 1,900 per class) and the first
2,000 train rows ship, so the CPU tier is defined on the test split alone, identical on every
machine: per class, a permutation fixed by ``POOL_SEED`` gives 1,500 training and the next 400
held-out rows (6,000 / 1,600). The paper tier uses the full official splits: from the Hugging
Face Hub when it is reachable, or a complete ``ag_news/train.csv.gz`` under ``$NORMSYS_DATA``;
otherwise the largest real pool, the CPU tier's 1,600 held-out rows and for training every other
real row (the 6,000 CPU-tier rows plus the 2,000 train rows), recorded as such in
``Split.source``. Tokens come from the shipped vocabulary, byte-identical to the one of
distilbert-base-uncased (its tokenizer is bert-base-uncased's).
"""

from __future__ import annotations

import csv
import functools
import gzip
import hashlib
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from normsys.training.store import atomic_save, cache_root, file_sha256
from normsys.training.tiers import tier as tier_of

POOL_SEED = 20_240_404  # fixes the CPU-tier AG News pool; never change (claims depend on it)
SHIPPED = Path(__file__).parents[1] / "datafiles"  # the data that ships with normsys
AG_FILES = {"test": "ag_news/test.csv.gz", "train": "ag_news/train.csv.gz",
            "train_partial": "ag_news/train_first2000rows.csv.gz"}
AG_NEWS_ROWS = {"train": 120_000, "test": 7_600}  # rows of the official splits (the paper tier's)
VOCAB_FILE = "tokenizers/bert-base-uncased/vocab.txt"
SHAKESPEARE_FILE = "tinyshakespeare/input.txt"
MNIST_FILES = {"train_x": "mnist/train-images-idx3-ubyte.gz",
               "train_y": "mnist/train-labels-idx1-ubyte.gz",
               "test_x": "mnist/t10k-images-idx3-ubyte.gz", "test_y": "mnist/t10k-labels-idx1-ubyte.gz"}
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081
# the sha256 of every file normsys ships, as its provenance (normsys/datafiles/README.md) records
# them; normsys/datafiles/SHA256SUMS lists the same, for sha256sum -c (tests/test_data.py)
PINNED = {
    "ag_news/classes.txt":
        "612dbfa932f07a6ed837295a7d5746ce7412e7bb4bc32ba919fdb3cda3a1b9b5",
    "ag_news/readme.txt":
        "779c2e6bbf93dd810d9c7b318006daef7a4bfc34062002461d251dc10fb9f58c",
    "ag_news/test.csv.gz":
        "3c277beb6ce3dd635407635cb90a7c5ceaf87168fabb3be218e39aa2b097f706",
    "ag_news/train_first2000rows.csv.gz":
        "663449bec3414628db1b590c71f9f57ab8a8190c5fbdde488db349c9c89e1266",
    "mnist/t10k-images-idx3-ubyte.gz":
        "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
    "mnist/t10k-labels-idx1-ubyte.gz":
        "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
    "mnist/train-images-idx3-ubyte.gz":
        "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
    "mnist/train-labels-idx1-ubyte.gz":
        "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
    "tinyshakespeare/input.txt":
        "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed",
    "tokenizers/bert-base-uncased/vocab.txt":
        "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3",
}


class DataError(Exception):
    """Data normsys cannot use; the message names the file, what was expected and the fix."""


class DataMissingError(DataError, FileNotFoundError):
    """A data file is not where normsys looks for it."""


class DataCorruptError(DataError, ValueError):
    """A data file is there but is not the file it should be (checksum, format)."""


@dataclass(frozen=True)
class Split:
    """Tensors of one data set: inputs and targets for training and held-out evaluation."""

    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    source: str  # where the rows came from and how many, for the record
    digest: str = ""  # sha256 of what was read (files or rows): runs on other data differ


def data_root() -> Path:
    """``$NORMSYS_DATA`` when set (made absolute: a later ``cd`` changes nothing), else the data
    shipped with normsys."""
    value = os.environ.get("NORMSYS_DATA")
    return Path(value).expanduser().resolve() if value else SHIPPED


def _where(root: Path) -> str:
    return f"NORMSYS_DATA={root}" if root != SHIPPED else f"the data shipped with normsys ({root})"


def _fix(root: Path) -> str:
    if root == SHIPPED:
        return ("restore normsys's own copy (git checkout -- normsys/datafiles, or reinstall: "
                "pip install -e .), or set NORMSYS_DATA to a folder that holds an intact one")
    return (f"copy the original into {root} (sources and checksums in "
            f"{SHIPPED / 'README.md'}), or unset NORMSYS_DATA to use the data shipped with normsys")


@functools.lru_cache(maxsize=8)
def _checksums(sums: Path, mtime_ns: int) -> dict[str, str]:
    pairs = (line.split(maxsplit=1) for line in sums.read_text().splitlines() if line.strip())
    return {name.strip().lstrip("*"): digest for digest, name in pairs}


_VERIFIED: dict[tuple[str, int, int], str] = {}  # (path, size, mtime) -> sha256 checked this run


def data_file(relative: str, what: str) -> Path:
    """The path of a data file, checked against its pinned sha256 (``PINNED``) or, for a file
    normsys does not ship, its folder's SHA256SUMS; a DataMissingError or a DataCorruptError
    naming the file, the expected checksum and the fix otherwise."""
    root = data_root()
    path = root / relative
    if not path.is_file():
        raise DataMissingError(f"{what}: {path} does not exist ({_where(root)}). Fix: {_fix(root)}.")
    expected, sums = expected_sha256(root, relative, what)
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if _VERIFIED.get(key) != expected:
        actual = file_sha256(path)
        if actual != expected:
            raise DataCorruptError(f"{what}: {path} fails its checksum: sha256 {actual}, expected "
                                   f"{expected} ({sums}). The file is damaged or not the "
                                   f"original. Fix: {_fix(root)}.")
        _VERIFIED[key] = expected
    return path


def expected_sha256(root: Path, relative: str, what: str) -> tuple[str, str]:
    """The sha256 a data file must have and what says so: its pin, or the folder's SHA256SUMS
    for a file normsys does not ship."""
    if relative in PINNED:
        return PINNED[relative], "pinned in normsys.training.data"
    sums = root / "SHA256SUMS"
    if not sums.is_file():
        raise DataMissingError(f"{what}: {root} has no SHA256SUMS to check {relative} against. "
                               f"Fix: write one (cd {root} && sha256sum */* */*/* > SHA256SUMS).")
    expected = _checksums(sums, sums.stat().st_mtime_ns).get(relative)
    if expected is None:
        raise DataCorruptError(f"{what}: {relative} is not listed in {sums}, so normsys cannot "
                               f"tell it is the right file. Fix: add its sha256 (cd {root} && "
                               f"sha256sum {relative} >> SHA256SUMS) after checking it.")
    return expected, str(sums)


def checksum(relative: str, what: str = "data file") -> str:
    """The sha256 of a data file once it is checked (its pin, or its folder's SHA256SUMS)."""
    data_file(relative, what)
    return expected_sha256(data_root(), relative, what)[0]


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()


_HUB = {"unreachable": False}


def hub_allowed() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "0") not in ("1", "true", "True")


# ----------------------------------------------------------------------------- AG News


def _read_ag_csv(path: Path) -> list[tuple[int, str]]:
    rows = []
    try:
        with gzip.open(path, "rt", encoding="utf-8", newline="") as fh:
            for i, row in enumerate(csv.reader(fh)):
                if len(row) != 3 or not row[0].isdigit() or not 1 <= int(row[0]) <= 4:
                    raise DataCorruptError(f"malformed AG News row {i} in {path}: {row[:1]}...; "
                                           f"expected 3 columns (class 1-4, title, description)")
                rows.append((int(row[0]) - 1, row[1] + " " + row[2]))
    except (OSError, EOFError, UnicodeDecodeError, csv.Error) as err:
        raise DataCorruptError(f"{path} cannot be read as gzipped AG News CSV: {err}") from err
    return rows


def ag_news_rows(split: str, hub: bool = False) -> list[tuple[int, str]]:
    """(label 0-3, text) rows of an official split: ``test``, ``train`` or ``train_partial``;
    ``hub``: from the Hugging Face Hub when it is reachable, else from the files."""
    if hub and hub_allowed() and split in ("test", "train") and not _HUB["unreachable"]:
        try:
            from datasets import load_dataset

            ds = load_dataset("ag_news", split=split)
            return [(int(r["label"]), r["text"]) for r in ds]
        except Exception:  # noqa: BLE001 - no network or no datasets: fall back to the files
            _HUB["unreachable"] = True  # a failed attempt takes ~30 s: once per process
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
    if not tier_of(tier).full_data:
        return cpu_train, held, "AG News CPU-tier pool: official test split, 6000 train / 1600 held-out"
    try:
        full = ag_news_rows("train", hub=True)
        return full, test, f"AG News official splits: {len(full)} train / {len(test)} test"
    except DataMissingError:
        partial = ag_news_rows("train_partial")
        return (cpu_train + partial, held,
                f"AG News paper-tier FALLBACK (full train split absent): {len(cpu_train)} test-split "
                f"rows + {len(partial)} train rows = {len(cpu_train) + len(partial)} train / "
                f"{len(held)} held-out; not the full reproduction")


@functools.lru_cache(maxsize=1)
def bert_tokenizer(vocab: str):
    """The uncased BERT WordPiece tokenizer of the vocabulary file ``vocab``."""
    try:
        import transformers
    except ImportError as err:
        raise ImportError("AG News needs the tokenizer from transformers: "
                          "pip install -e '.[data]'") from err

    if int(transformers.__version__.split(".")[0]) >= 5:  # 5.x ignores vocab_file= silently
        tok = transformers.BertTokenizerFast(vocab=vocab, do_lower_case=True)
    else:
        tok = transformers.BertTokenizerFast(vocab_file=vocab, do_lower_case=True)
    if tok("Hello world")["input_ids"] != [101, 7592, 2088, 102]:
        raise DataCorruptError(f"the tokenizer built from {vocab} does not encode 'Hello world' as "
                               f"[101, 7592, 2088, 102]: the vocabulary did not load")
    return tok


def tokenize(texts: list[str], seq_len: int) -> tuple[Tensor, str]:
    """Token ids (N, seq_len), padded with 0 / truncated, and the vocabulary's checksum; cached on
    disk by the texts, the length and the vocabulary."""
    vocab_sha = checksum(VOCAB_FILE, "BERT uncased vocabulary")
    vocab = data_root() / VOCAB_FILE
    key = _digest(*texts, str(seq_len), vocab_sha)[:20]
    root = cache_root()
    path = root / "tokens" / f"{key}.pt" if root else None
    if path is not None and path.is_file():
        try:
            ids = torch.load(path)
            if ids.shape == (len(texts), seq_len):
                return ids, vocab_sha
        except Exception:  # noqa: BLE001 - unreadable cache entry: tokenize again
            pass
    enc = bert_tokenizer(str(vocab))(texts, padding="max_length", truncation=True,
                                     max_length=seq_len)
    ids = torch.tensor(enc["input_ids"], dtype=torch.long)
    if path is not None:
        atomic_save(ids, path)
    return ids, vocab_sha


def ag_news(tier: str, seq_len: int) -> Split:
    train, held, source = ag_news_pool(tier)
    x_train, vocab_sha = tokenize([t for _, t in train], seq_len)
    x_test, _ = tokenize([t for _, t in held], seq_len)
    digest = _digest(vocab_sha, *(f"{y}\t{t}" for y, t in train), "|",
                     *(f"{y}\t{t}" for y, t in held))
    return Split(x_train, torch.tensor([y for y, _ in train]), x_test,
                 torch.tensor([y for y, _ in held]), source, digest)


# ----------------------------------------------------------------------------- Tiny Shakespeare


def tiny_shakespeare() -> tuple[Tensor, Tensor, list[str]]:
    """Character ids of the first 90% (train) and last 10% (val), and the sorted alphabet."""
    path = data_file(SHAKESPEARE_FILE, "Tiny Shakespeare")
    text = path.read_text(encoding="utf-8")
    chars = sorted(set(text))
    if len(chars) != 65:
        raise DataCorruptError(f"{path} has {len(chars)} distinct characters, expected 65: "
                               f"not the Tiny Shakespeare input.txt")
    lookup = {c: i for i, c in enumerate(chars)}
    ids = torch.tensor([lookup[c] for c in text], dtype=torch.long)
    cut = int(0.9 * len(ids))
    return ids[:cut], ids[cut:], chars


# ----------------------------------------------------------------------------- MNIST


def _read_idx(path: Path, magic: int) -> Tensor:
    import numpy as np

    try:
        with gzip.open(path, "rb") as fh:
            raw = fh.read()
    except (OSError, EOFError) as err:
        raise DataCorruptError(f"{path} cannot be read as a gzipped IDX file: {err}") from err
    head = struct.unpack(">i", raw[:4])[0]
    ndim = magic - 2048
    if head != magic:
        raise DataCorruptError(f"{path}: IDX magic {head}, expected {magic}; the file is corrupt")
    dims = struct.unpack(f">{ndim}i", raw[4 : 4 + 4 * ndim])
    data = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim)
    if data.size != int(np.prod(dims)):
        raise DataCorruptError(f"{path}: {data.size} bytes of data, header says {dims}; truncated")
    return torch.from_numpy(data.copy()).reshape(dims)


def mnist() -> Split:
    """Normalized images flattened to 784 features (float32) and labels; 60,000 / 10,000. The files
    are checked at every call and read once a process while they stay as they are: a claim
    trains and measures dozens of nets on them, and reading them takes longer than measuring a
    net (0.45 s against ~0.1 s on 2 cores). The tensors are shared: never write into them."""
    paths = {k: data_file(v, "MNIST") for k, v in MNIST_FILES.items()}
    return _mnist(tuple((k, p, st.st_size, st.st_mtime_ns) for k, p in paths.items()
                        for st in [p.stat()]))


@functools.lru_cache(maxsize=1)
def _mnist(files: tuple[tuple[str, Path, int, int], ...]) -> Split:
    """The Split of the checked files (key, path, size, mtime): a new one when any changed."""
    return read_mnist({k: p for k, p, *_ in files})


def read_mnist(paths: dict[str, Path]) -> Split:
    """The Split of MNIST's four IDX files (MNIST_FILES' keys to paths), read and normalized."""
    xs = {k: (_read_idx(paths[k], 2051).reshape(-1, 784).float() / 255 - MNIST_MEAN) / MNIST_STD
          for k in ("train_x", "test_x")}
    ys = {k: _read_idx(paths[k], 2049).long() for k in ("train_y", "test_y")}
    return Split(xs["train_x"], ys["train_y"], xs["test_x"], ys["test_y"],
                 "MNIST: 60000 train / 10000 test",
                 _digest(*(checksum(v, "MNIST") for v in MNIST_FILES.values())))
