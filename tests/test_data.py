"""Data loaders on the data shipped with normsys (or $NORMSYS_DATA), checked against their
checksums, and errors that name the file, what was expected and the fix."""

from __future__ import annotations

import gzip
import os
import shutil
import struct
from pathlib import Path

import pytest
import torch

from normsys.training import data
from normsys.training.store import file_sha256


def test_tokenizer_encodes_hello_world(data_env):
    vocab = str(data.data_file(data.VOCAB_FILE, "vocabulary"))
    assert data.bert_tokenizer(vocab)("Hello world")["input_ids"] == [101, 7592, 2088, 102]


def test_the_shipped_data_is_the_default_and_matches_its_checksums(monkeypatch):
    monkeypatch.delenv("NORMSYS_DATA", raising=False)
    assert data.data_root() == data.SHIPPED
    listed = data._checksums(data.SHIPPED / "SHA256SUMS", 0)
    assert len(listed) == 10 and all(data.checksum(name) == sha for name, sha in listed.items())
    monkeypatch.setenv("NORMSYS_DATA", "relative/folder")
    assert data.data_root().is_absolute()  # a later cd changes nothing


@pytest.fixture
def unpinned(monkeypatch):
    """Files normsys does not pin, each vouched for by its folder's SHA256SUMS alone (as the full
    AG News train split a user brings): what the readers make of files other than the shipped."""
    monkeypatch.setattr(data, "PINNED", {})


def copy_of_the_data(tmp_path: Path, monkeypatch) -> Path:
    root = tmp_path / "data"
    shutil.copytree(data.SHIPPED, root)
    for path in root.rglob("*"):
        path.chmod(0o644 if path.is_file() else 0o755)
    monkeypatch.setenv("NORMSYS_DATA", str(root))
    return root


def test_damaged_files_are_named_with_the_expected_checksum_and_the_fix(tmp_path, monkeypatch):
    root = copy_of_the_data(tmp_path, monkeypatch)
    gz = root / "mnist" / "t10k-labels-idx1-ubyte.gz"
    gz.write_bytes(gz.read_bytes()[:100])  # truncated
    with pytest.raises(data.DataCorruptError) as err:
        data.mnist()
    message = str(err.value)
    assert str(gz) in message and "fails its checksum" in message
    assert "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6" in message
    assert message.endswith(
        "(pinned in normsys.training.data). The file is damaged or not the original. Fix: copy the "
        f"original into {root} (sources and checksums in {data.SHIPPED / 'README.md'}), or "
        f"unset NORMSYS_DATA to use the data shipped with normsys.")
    vocab = root / data.VOCAB_FILE
    lines = vocab.read_text().splitlines()
    vocab.write_text("\n".join(lines[1:] + lines[:1]) + "\n")  # a shuffled vocabulary
    with pytest.raises(data.DataCorruptError, match="vocab.txt fails its checksum"):
        data.ag_news("cpu", 16)


def test_a_shipped_file_is_checked_against_its_pin_whatever_its_folder_lists(tmp_path,
                                                                             monkeypatch):
    """A checksum list beside the data cannot vouch for another file: the shipped files' sha256
    are pinned in the package (and normsys/datafiles/SHA256SUMS lists the same, for sha256sum)."""
    assert data._checksums(data.SHIPPED / "SHA256SUMS", 0) == data.PINNED
    root = copy_of_the_data(tmp_path, monkeypatch)
    vocab = root / data.VOCAB_FILE
    vocab.write_text(vocab.read_text().replace("hello", "hullo"))
    sums = root / "SHA256SUMS"
    sums.write_text(sums.read_text().replace(data.PINNED[data.VOCAB_FILE], file_sha256(vocab)))
    with pytest.raises(data.DataCorruptError) as err:
        data.checksum(data.VOCAB_FILE, "BERT uncased vocabulary")
    assert str(err.value).startswith(f"BERT uncased vocabulary: {vocab} fails its checksum: "
                                     f"sha256 {file_sha256(vocab)}, expected "
                                     f"{data.PINNED[data.VOCAB_FILE]} (pinned in "
                                     f"normsys.training.data).")


def test_missing_files_and_unlisted_files_are_errors_that_say_what_to_do(tmp_path, monkeypatch):
    root = copy_of_the_data(tmp_path, monkeypatch)
    (root / data.SHAKESPEARE_FILE).unlink()
    with pytest.raises(data.DataMissingError) as err:
        data.tiny_shakespeare()
    assert str(err.value) == (f"Tiny Shakespeare: {root / data.SHAKESPEARE_FILE} does not exist "
                              f"(NORMSYS_DATA={root}). Fix: copy the original into {root} "
                              f"(sources and checksums in {data.SHIPPED / 'README.md'}), or unset "
                              f"NORMSYS_DATA to use the data shipped with normsys.")
    (root / "ag_news" / "train.csv.gz").write_bytes(b"")  # a full split, not listed
    with pytest.raises(data.DataCorruptError,
                       match="^AG News train split: ag_news/train.csv.gz is not listed in .*SHA256SUMS"):
        data.ag_news_rows("train")


def test_ag_news_cpu_pool_is_balanced_fixed_and_disjoint(data_env):
    train, held, source = data.ag_news_pool("cpu")
    assert source == "AG News CPU-tier pool: official test split, 6000 train / 1600 held-out"
    assert (len(train), len(held)) == (6000, 1600)
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


def test_malformed_files_listed_as_they_are_are_still_clear_errors(tmp_path, monkeypatch, unpinned):
    """A folder whose SHA256SUMS vouches for broken files: the readers say what is wrong."""
    monkeypatch.setenv("NORMSYS_DATA", str(tmp_path))
    (tmp_path / "ag_news").mkdir()
    with gzip.open(tmp_path / "ag_news" / "test.csv.gz", "wt") as fh:
        fh.write('"9","title"\n')
    (tmp_path / "mnist").mkdir()
    for name in data.MNIST_FILES.values():
        with gzip.open(tmp_path / name, "wb") as fh:
            fh.write(b"\x00\x00\x08\x01garbage")
    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / data.SHAKESPEARE_FILE).write_bytes(b"\x1f\x8b not gzip")
    from normsys.training.store import file_sha256

    names = ["ag_news/test.csv.gz", *data.MNIST_FILES.values()]
    (tmp_path / "SHA256SUMS").write_text("".join(f"{file_sha256(tmp_path / n)}  {n}\n"
                                                 for n in names))
    with pytest.raises(data.DataCorruptError, match="malformed AG News row 0"):
        data.ag_news_rows("test")
    with pytest.raises(data.DataCorruptError, match="IDX magic"):
        data.mnist()


def test_a_claim_on_damaged_or_missing_data_fails_or_skips_with_the_message(tmp_path, monkeypatch):
    """In pytest as in the command line: the file, the expected checksum and the fix."""
    import os
    import subprocess
    import sys

    root = copy_of_the_data(tmp_path, monkeypatch)
    vocab = root / data.VOCAB_FILE
    vocab.write_text(vocab.read_text().replace("hello", "hullo"))
    env = {**os.environ, "NORMSYS_DATA": str(root), "NORMSYS_CACHE": str(tmp_path / "cache")}
    top = Path(__file__).resolve().parents[1]
    claim = [sys.executable, "-m", "pytest", "claims", "-k", "xiong-preln and cpu", "-q",
             "-p", "no:cacheprovider", "--claims-report", str(tmp_path / "report")]
    failed = subprocess.run(claim, cwd=top, env=env, capture_output=True, text=True)
    assert failed.returncode == 1 and "DataCorruptError" in failed.stdout
    assert f"{vocab} fails its checksum" in failed.stdout and "07eced375cec144d" in failed.stdout
    cli = subprocess.run([sys.executable, "-m", "normsys", "train", "--model", "encoder"],
                         cwd=top, env=env, capture_output=True, text=True)
    assert cli.returncode == 2 and cli.stderr.startswith("error: BERT uncased vocabulary: ")
    vocab.unlink()
    skipped = subprocess.run(claim + ["--claims-skip-missing-data"], cwd=top, env=env,
                             capture_output=True, text=True)
    assert skipped.returncode == 0 and "1 skipped" in skipped.stdout


def test_the_same_config_on_changed_data_is_trained_again(tmp_path, monkeypatch, unpinned):
    """The run cache keys on the data a run read: a cut-down Tiny Shakespeare (with its own
    checksum) gets its own run, and the real data its own again."""
    from normsys.orchestration import runs
    from normsys.training.config import preset
    from normsys.training.store import file_sha256

    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path / "cache"))
    cfg = preset("char_gpt", **{"train.steps": 2, "model.d": 16, "model.layers": 1,
                                "train.batch_size": 2, "train.eval_batches": 1})
    monkeypatch.delenv("NORMSYS_DATA", raising=False)
    real = runs.Runs().run(cfg)
    root = copy_of_the_data(tmp_path, monkeypatch)
    text = root / data.SHAKESPEARE_FILE
    text.write_text(text.read_text()[:810_000])
    sums = root / "SHA256SUMS"
    sums.write_text("".join(line.replace(line.split()[0], file_sha256(text))
                            if line.rstrip().endswith(data.SHAKESPEARE_FILE) else line
                            for line in sums.read_text().splitlines(keepends=True)))
    cut = runs.Runs().run(cfg)  # a new session: nothing fetched or loaded
    assert "729000 train" in cut.data_source and "1003854 train" in real.data_source
    assert len(list((tmp_path / "cache" / "runs").glob("*.json"))) == 2


def test_ag_news_rows_are_class_minus_one_and_title_space_description(data_env):
    """The official test split's first line, "3","Fears for T N pension after talks","Unions
    representing workers at Turner   Newall say ...": label 2, the title and description joined by
    one space."""
    label, text = data.ag_news_rows("test")[0]
    assert label == 2
    assert text.startswith("Fears for T N pension after talks Unions representing workers at "
                           "Turner   Newall say")
    assert len(data.ag_news_rows("test")) == data.AG_NEWS_ROWS["test"]
    assert len(data.ag_news_rows("train_partial")) == 2000


def test_the_cpu_pool_is_the_one_every_ledger_was_measured_on(data_env):
    """The pool's rows in order (the sha256 of its label-tab-text lines), fixed by POOL_SEED: a
    change here changes every AG News claim's data."""
    import hashlib

    train, held, _ = data.ag_news_pool("cpu")
    digest = lambda rows: hashlib.sha256(  # noqa: E731
        "\n".join(f"{y}\t{t}" for y, t in rows).encode()).hexdigest()[:16]
    assert (digest(train), digest(held)) == ("0de7e1993a3a5a26", "a4d471bb190fc4dc")
    assert train[0][0] == 0 and train[0][1].startswith("India hospital injections fears")
    assert held[0][0] == 3 and held[0][1].startswith("NASA to test hypersonic scramjet")


def test_tokens_are_cls_text_sep_padded_with_zeros_or_cut_at_the_length(data_env, monkeypatch):
    monkeypatch.setenv("NORMSYS_CACHE", "off")
    ids, vocab_sha = data.tokenize(["Hello world", "a " * 50], 6)
    assert ids.tolist() == [[101, 7592, 2088, 102, 0, 0], [101, 1037, 1037, 1037, 1037, 102]]
    assert vocab_sha == data.checksum(data.VOCAB_FILE)


def test_mnist_pixels_are_scaled_to_unit_range_then_standardized(data_env):
    """x = (pixel / 255 - 0.1307) / 0.3081: black -0.424213, white 2.821487; the first labels of
    the official files."""
    split = data.mnist()
    assert float(split.x_train.min()) == pytest.approx(-0.1307 / 0.3081, abs=1e-6)
    assert float(split.x_train.max()) == pytest.approx((1 - 0.1307) / 0.3081, abs=1e-5)
    assert split.y_train[:3].tolist() == [5, 0, 4] and split.y_test[:3].tolist() == [7, 2, 1]
    assert split.x_train.dtype == torch.float32 and split.digest


def test_tiny_shakespeare_ids_index_the_sorted_alphabet_and_val_is_the_last_tenth(data_env):
    train, val, chars = data.tiny_shakespeare()
    assert "".join(chars[:12]) == "\n !$&',-.3:;"
    assert "".join(chars[i] for i in val[:20].tolist()) == "?\n\nGREMIO:\nGood morr"


@pytest.mark.parametrize("value,allowed", [(None, True), ("0", True), ("1", False),
                                           ("true", False), ("True", False), ("TRUE", True)])
def test_the_hub_is_asked_unless_hf_hub_offline_says_not_to(monkeypatch, value, allowed):
    """HF_HUB_OFFLINE=1, true or True (as huggingface_hub reads it) keeps normsys off the Hub."""
    if value is None:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    else:
        monkeypatch.setenv("HF_HUB_OFFLINE", value)
    assert data.hub_allowed() is allowed


def test_the_fix_a_data_error_names_depends_on_whose_folder_it_is(tmp_path, monkeypatch):
    monkeypatch.delenv("NORMSYS_DATA", raising=False)
    assert data._where(data.SHIPPED) == f"the data shipped with normsys ({data.SHIPPED})"
    assert data._fix(data.SHIPPED) == (
        "restore normsys's own copy (git checkout -- normsys/datafiles, or reinstall: pip "
        "install -e .), or set NORMSYS_DATA to a folder that holds an intact one")
    assert data._where(tmp_path) == f"NORMSYS_DATA={tmp_path}"
    assert data._fix(tmp_path) == (
        f"copy the original into {tmp_path} (sources and checksums in "
        f"{data.SHIPPED / 'README.md'}), or unset NORMSYS_DATA to use the data shipped with "
        f"normsys")


def test_tiny_shakespeare_errors_name_the_data_set(tmp_path, monkeypatch, unpinned):
    monkeypatch.setenv("NORMSYS_DATA", str(tmp_path))
    with pytest.raises(data.DataMissingError, match=r"^Tiny Shakespeare: .*input.txt does not "):
        data.tiny_shakespeare()
    text = tmp_path / "tinyshakespeare" / "input.txt"
    text.parent.mkdir()
    text.write_text("to be or not\n")
    import hashlib

    (tmp_path / "SHA256SUMS").write_text(
        f"{hashlib.sha256(text.read_bytes()).hexdigest()}  tinyshakespeare/input.txt\n")
    with pytest.raises(data.DataCorruptError, match=r"has 8 distinct characters, expected 65: "
                                                    r"not the Tiny Shakespeare input.txt"):
        data.tiny_shakespeare()


def test_the_ag_news_digest_holds_the_vocabulary_and_both_pools_rows(data_env, tmp_path,
                                                                     monkeypatch):
    """What the run cache keys every AG News run on: the vocabulary's checksum, the training
    rows, a separator, the held-out rows (pinned: a change here retrains every AG News run)."""
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    split = data.ag_news("cpu", 64)
    train, held, _ = data.ag_news_pool("cpu")
    vocab = data.checksum(data.VOCAB_FILE)
    rows = lambda pool: [f"{y}\t{t}" for y, t in pool]  # noqa: E731
    assert split.digest == data._digest(vocab, *rows(train), "|", *rows(held))
    assert split.digest[:16] == "a0ac3715dc81da95"


def ag_folder(tmp_path, rows: list[str], name: str = "test") -> None:
    """An AG News CSV of ``rows`` (lines) under tmp_path, listed in its SHA256SUMS."""
    from normsys.training.store import file_sha256

    (tmp_path / "ag_news").mkdir(exist_ok=True)
    path = tmp_path / data.AG_FILES[name]
    with gzip.open(path, "wt") as fh:
        fh.write("".join(line + "\n" for line in rows))
    sums = tmp_path / "SHA256SUMS"
    listed = sums.read_text() if sums.is_file() else ""
    sums.write_text(listed + f"{file_sha256(path)}  {data.AG_FILES[name]}\n")


@pytest.mark.parametrize("line", ['"5","t","d"', '"0","t","d"', '"x","t","d"', '"1","t"',
                                  '"1","t","d","e"'])
def test_an_ag_news_row_is_a_class_from_1_to_4_and_three_columns(tmp_path, monkeypatch, line, unpinned):
    monkeypatch.setenv("NORMSYS_DATA", str(tmp_path))
    ag_folder(tmp_path, ['"4","fine","row"', line])
    first = line.split(",")[0]
    with pytest.raises(data.DataCorruptError) as err:
        data.ag_news_rows("test")
    assert str(err.value) == (f"malformed AG News row 1 in {tmp_path / data.AG_FILES['test']}: "
                              f"[{first.strip(chr(34))!r}]...; expected 3 columns (class 1-4, "
                              f"title, description)")


def test_an_unreadable_ag_news_file_says_so(tmp_path, monkeypatch, unpinned):
    monkeypatch.setenv("NORMSYS_DATA", str(tmp_path))
    ag_folder(tmp_path, [])
    path = tmp_path / data.AG_FILES["test"]
    path.write_bytes(b"not gzip at all")
    from normsys.training.store import file_sha256

    (tmp_path / "SHA256SUMS").write_text(f"{file_sha256(path)}  {data.AG_FILES['test']}\n")
    with pytest.raises(data.DataCorruptError, match=rf"^{path} cannot be read as gzipped AG News "
                                                    r"CSV: "):
        data.ag_news_rows("test")


@pytest.fixture
def fake_hub(monkeypatch):
    """A stand-in for the datasets package whose ag_news splits are two rows each."""
    import sys
    import types

    asked = []

    def load_dataset(name, split):
        asked.append((name, split))
        return [{"label": 1, "text": f"{split} one"}, {"label": 3, "text": f"{split} two"}]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setitem(data._HUB, "unreachable", False)
    return asked


def test_official_splits_come_from_the_hub_only_when_asked_and_allowed(fake_hub, data_env):
    assert data.ag_news_rows("train", hub=True) == [(1, "train one"), (3, "train two")]
    assert fake_hub == [("ag_news", "train")]
    assert data.ag_news_rows("test")[0][0] == 2  # the file's first row: the hub not asked
    assert data.ag_news_rows("train_partial", hub=True)[0][1].startswith("Wall St.")  # no hub
    assert fake_hub == [("ag_news", "train")]


def test_the_paper_pool_is_the_hubs_full_train_split_and_the_test_split(fake_hub, data_env):
    train, held, source = data.ag_news_pool("paper")
    assert train == [(1, "train one"), (3, "train two")] and len(held) == 7600
    assert source == "AG News official splits: 2 train / 7600 test"


def test_a_hub_that_fails_is_not_asked_again(monkeypatch, data_env):
    import sys
    import types

    calls = []

    def broken(name, split):
        calls.append(split)
        raise ConnectionError("no network")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=broken))
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setitem(data._HUB, "unreachable", False)
    assert data.ag_news_rows("test", hub=True)[0][0] == 2  # the file, after the failure
    data.ag_news_rows("test", hub=True)
    assert calls == ["test"] and data._HUB["unreachable"]


def test_the_paper_fallback_pool_says_what_it_holds(data_env, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    train, held, source = data.ag_news_pool("paper")
    assert source == ("AG News paper-tier FALLBACK (full train split absent): 6000 test-split "
                      "rows + 2000 train rows = 8000 train / 1600 held-out; not the full "
                      "reproduction")


def test_tokens_are_cached_by_texts_length_and_vocabulary(data_env, tmp_path, monkeypatch):
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    vocab = data.checksum(data.VOCAB_FILE)
    ids, _ = data.tokenize(["Hello world"], 6)
    key = data._digest("Hello world", "6", vocab)[:20]
    stored = tmp_path / "tokens" / f"{key}.pt"
    assert torch.equal(torch.load(stored), ids) and ids.dtype == torch.long
    data.tokenize(["Hello world"], 5)
    data.tokenize(["Hello there"], 6)
    assert len(list((tmp_path / "tokens").glob("*.pt"))) == 3
    torch.save(torch.zeros(1, 3, dtype=torch.long), stored)  # another shape: not this entry's
    assert torch.equal(data.tokenize(["Hello world"], 6)[0], ids)
    torch.save(torch.full((1, 6), 7), stored)  # the right shape is read as it is
    assert data.tokenize(["Hello world"], 6)[0].tolist() == [[7] * 6]


def test_a_missing_vocabulary_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMSYS_DATA", str(tmp_path))
    with pytest.raises(data.DataMissingError, match=r"^BERT uncased vocabulary: "):
        data.tokenize(["x"], 4)


def test_mnist_errors_name_the_data_set_and_what_is_wrong_with_the_file(tmp_path, monkeypatch, unpinned):
    monkeypatch.setenv("NORMSYS_DATA", str(tmp_path))
    with pytest.raises(data.DataMissingError, match=r"^MNIST: .*does not exist"):
        data.mnist()
    from normsys.training.store import file_sha256

    def listed(content: bytes, gzipped: bool = True) -> None:
        (tmp_path / "mnist").mkdir(exist_ok=True)
        for name in data.MNIST_FILES.values():
            if gzipped:
                with gzip.open(tmp_path / name, "wb") as fh:
                    fh.write(content)
            else:
                (tmp_path / name).write_bytes(content)
        (tmp_path / "SHA256SUMS").write_text("".join(
            f"{file_sha256(tmp_path / n)}  {n}\n" for n in data.MNIST_FILES.values()))

    first = tmp_path / data.MNIST_FILES["train_x"]
    listed(b"not gzip", gzipped=False)
    with pytest.raises(data.DataCorruptError,
                       match=rf"^{first} cannot be read as a gzipped IDX file: "):
        data.mnist()
    # the right magic and a header of 2 images of 2x2 pixels, but 3 bytes of pixels
    listed(struct.pack(">iiii", 2051, 2, 2, 2) + b"\x00\x01\x02")
    with pytest.raises(data.DataCorruptError) as err:
        data.mnist()
    assert str(err.value) == f"{first}: 3 bytes of data, header says (2, 2, 2); truncated"


def test_mnist_is_read_once_while_its_files_stay_as_they_are(tmp_path, monkeypatch):
    """The same Split while the files stay (each call still checks them); a touched file or
    another data folder is read anew."""
    root = copy_of_the_data(tmp_path, monkeypatch)
    reads = []
    real = data._read_idx
    monkeypatch.setattr(data, "_read_idx", lambda path, magic: reads.append(path) or real(path, magic))
    data._mnist.cache_clear()
    first = data.mnist()
    assert data.mnist() is first and len(reads) == 4
    labels = root / data.MNIST_FILES["test_y"]
    os.utime(labels, ns=(labels.stat().st_atime_ns, labels.stat().st_mtime_ns + 10**9))
    again = data.mnist()
    assert again is not first and len(reads) == 8 and torch.equal(again.y_test, first.y_test)
    monkeypatch.setenv("NORMSYS_DATA", str(data.SHIPPED))
    assert data.mnist() is not again and len(reads) == 12
    labels.write_bytes(labels.read_bytes()[:100])  # damaged after it was read: still caught
    monkeypatch.setenv("NORMSYS_DATA", str(root))
    with pytest.raises(data.DataCorruptError, match="fails its checksum"):
        data.mnist()
    data._mnist.cache_clear()


def test_runs_and_reports_leave_the_shared_mnist_tensors_as_read(data_env, no_cache):
    """Runs, the FA protocol's report and the seeds' stacked batches all read the one Split that
    mnist() keeps: none of them may write into it."""
    from normsys.declarations.shared.protocol import mnist_report
    from normsys.training.batched import train_seeds
    from normsys.training.config import preset
    from normsys.training.models import build_model

    kept = data.mnist()
    cfgs = [preset("resmlp", **{"data.n_train": 200, "data.n_test": 100, "model.d": 16,
                                "train.method": "dfa", "train.seed": s}) for s in (0, 1)]
    _, state = train_seeds(cfgs)[0]
    model = build_model(cfgs[0].model)
    model.load_state_dict(state)
    mnist_report(model)
    assert data.mnist() is kept
    data._mnist.cache_clear()
    fresh = data.mnist()
    for name in ("x_train", "y_train", "x_test", "y_test"):
        assert torch.equal(getattr(kept, name), getattr(fresh, name)), name


def test_mnist_says_what_it_holds(data_env):
    split = data.mnist()
    assert split.source == (f"MNIST: {len(split.y_train)} train / {len(split.y_test)} test"
                            ) == "MNIST: 60000 train / 10000 test"


def test_a_folder_without_sha256sums_says_how_to_write_one(tmp_path, monkeypatch, unpinned):
    monkeypatch.setenv("NORMSYS_DATA", str(tmp_path))
    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / data.SHAKESPEARE_FILE).write_text("text")
    with pytest.raises(data.DataMissingError) as err:
        data.tiny_shakespeare()
    assert str(err.value) == (f"Tiny Shakespeare: {tmp_path} has no SHA256SUMS to check "
                              f"{data.SHAKESPEARE_FILE} against. Fix: write one (cd {tmp_path} && "
                              f"sha256sum */* */*/* > SHA256SUMS).")
    with pytest.raises(data.DataMissingError, match=r"^data file: "):  # checksum's default name
        data.checksum("nothing/here.txt")


def test_a_changed_sha256sums_is_read_again_and_the_file_checked_against_it(tmp_path, monkeypatch,
                                                                             unpinned):
    from normsys.training.store import file_sha256

    monkeypatch.setenv("NORMSYS_DATA", str(tmp_path))
    (tmp_path / "tinyshakespeare").mkdir()
    text = tmp_path / data.SHAKESPEARE_FILE
    text.write_text("text")
    sums = tmp_path / "SHA256SUMS"
    sums.write_text(f"{file_sha256(text)}  {data.SHAKESPEARE_FILE}\n")
    assert data.checksum(data.SHAKESPEARE_FILE) == file_sha256(text)
    sums.write_text(f"{'0' * 64}  {data.SHAKESPEARE_FILE}\n")
    os.utime(sums, ns=(sums.stat().st_atime_ns, sums.stat().st_mtime_ns + 10**9))
    with pytest.raises(data.DataCorruptError, match="fails its checksum"):
        data.data_file(data.SHAKESPEARE_FILE, "Tiny Shakespeare")
    with pytest.raises(data.DataCorruptError, match="fails its checksum"):
        data.checksum(data.SHAKESPEARE_FILE)
    text.write_text("other text")  # the file replaced, its new checksum listed
    sums.write_text(f"{file_sha256(text)}  {data.SHAKESPEARE_FILE}\n")
    os.utime(sums, ns=(sums.stat().st_atime_ns, sums.stat().st_mtime_ns + 2 * 10**9))
    assert data.checksum(data.SHAKESPEARE_FILE) == file_sha256(text)


def test_a_checked_file_is_hashed_again_once_changed_and_a_copy_elsewhere_is_checked_itself(
        tmp_path, monkeypatch, unpinned):
    """A file is taken unhashed only as the path, size and time checked before: damaged after
    its check, or a damaged copy in another folder with the same size and time, it fails."""
    roots = [tmp_path / "a", tmp_path / "b"]
    for root in roots:
        (root / "tinyshakespeare").mkdir(parents=True)
        (root / data.SHAKESPEARE_FILE).write_text("text")
        (root / "SHA256SUMS").write_text(
            f"{file_sha256(root / data.SHAKESPEARE_FILE)}  {data.SHAKESPEARE_FILE}\n")
    first, copy = (root / data.SHAKESPEARE_FILE for root in roots)
    monkeypatch.setenv("NORMSYS_DATA", str(roots[0]))
    assert data.data_file(data.SHAKESPEARE_FILE, "Tiny Shakespeare") == first
    copy.write_text("tent")  # damaged, as long as the original and as old
    os.utime(copy, ns=(first.stat().st_atime_ns, first.stat().st_mtime_ns))
    monkeypatch.setenv("NORMSYS_DATA", str(roots[1]))
    with pytest.raises(data.DataCorruptError, match="fails its checksum") as err:
        data.data_file(data.SHAKESPEARE_FILE, "Tiny Shakespeare")
    assert f"expected {file_sha256(first)} ({roots[1] / 'SHA256SUMS'})" in str(err.value)
    monkeypatch.setenv("NORMSYS_DATA", str(roots[0]))
    first.write_text("tent")  # damaged after its check
    os.utime(first, ns=(first.stat().st_atime_ns, first.stat().st_mtime_ns + 10**9))
    with pytest.raises(data.DataCorruptError, match="fails its checksum"):
        data.data_file(data.SHAKESPEARE_FILE, "Tiny Shakespeare")
