"""A new user's first hour: the mistakes a user makes at the command line, each of which must end
in one ``error:`` line that names what was wrong and what is accepted, with a non-zero exit,
before anything trains: never a traceback, never an exit 0, never silence.

The command-line mistakes run through ``normsys.__main__.main`` (what ``python -m normsys`` runs;
a test of the entry point itself shows the two alike), the pytest plugin's through ``python -m
pytest`` on the claims. A case that is no mistake on some machines (CUDA asked for where there is
none) is pinned where it is one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from normsys.__main__ import main

ROOT = Path(__file__).resolve().parents[1]

# a user's norm file: one norm that works (README's, shortened), and the norms users write wrong
NORMS = '''
import sys
import torch
from torch import nn


class Fine(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(d))

    def forward(self, x):
        return self.gain * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


class Shrinks(nn.Module):
    def __init__(self, d):
        super().__init__()

    def forward(self, x):
        return x[..., :-1]


class Meta(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)

    def forward(self, x):
        return torch.empty_like(x, device="meta")


class EditsItself(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.ln = nn.LayerNorm(d)

    def forward(self, x):
        with torch.no_grad():
            self.ln.weight.mul_(1.01)
        return self.ln(x)


class ExitsAtOnce(nn.Module):
    def __init__(self, d):
        super().__init__()

    def forward(self, x):
        sys.exit()


def not_a_module(d):
    return 3
'''

# (argv, what the one error line says), {norms} the user's norm file
MISTAKES = [
    # the command and its options
    (["fly"], "invalid choice: 'fly'"),
    (["train", "--model", "nope"], "argument --model: invalid choice: 'nope' (choose from "),
    (["train", "--norm", "nonorm", "--dry-run"], "unknown norm kind 'nonorm'; valid kinds: "),
    (["train", "--tier", "gold", "--dry-run"], "argument --tier: invalid choice: 'gold'"),
    (["train", "--method", "hebb", "--dry-run"], "argument --method: invalid choice: 'hebb'"),
    (["train", "--seed", "-1"], "train.seed must be >= 0, got -1"),
    (["train", "--seed", str(2**62), "--dry-run"], f"train.seed must be below 2**62, got {2**62}"),
    (["train", "--seed", "99999999999999999999"], "train.seed must be below 2**62"),
    (["train", "--json", "/no/such/folder/run.json"], "the folder /no/such/folder does not exist"),
    (["train", "--json", "/tmp"], "--json /tmp: is a folder"),
    (["train", "--json", "/dev/null"], "--json /dev/null: is no regular file (a device, a pipe), "
     "which writing the record would replace with a file"),
    (["compare", "--ledger", "/no/such/ledger"], "--ledger /no/such/ledger: no claim records there"),
    # --set: its form, its fields, its values
    (["train", "--set", "train.steps"], "--set train.steps: expected SECTION.FIELD=VALUE"),
    (["train", "--set", "model.size=3"], "unknown config key 'model.size'"),
    (["train", "--set", "size=3"], "unknown config key 'size'"),
    (["train", "--set", "train.steps=abc"], "train.steps='abc': expects an integer"),
    (["train", "--set", "train.steps=-5"], "train.steps must be >= 0, got -5"),
    (["train", "--set", "train.epochs=0"], "the run would train no steps"),
    (["train", "--set", "data.n_train=-5"], "data.n_train must be >= 0, got -5"),
    (["train", "--set", "train.lr=inf", "--dry-run"], "train.lr must be a finite number, got inf"),
    (["train", "--set", "train.lr=1e400", "--dry-run"],
     "--set train.lr=1e400: 1e400 is beyond a float (it reads as inf); give a finite number"),
    (["train", "--set", "train.lr=1e-400", "--dry-run"],
     "--set train.lr=1e-400: 1e-400 rounds to 0 as a float; give 0, or a number a float can hold"),
    (["train", "--seed", "3", "--set", "train.seed=4", "--dry-run"],
     "--set train.seed=4 and --seed 3 both set train.seed: give it once"),
    (["train", "--set", "train.lr=0.1", "--set", "train.lr=0.2", "--dry-run"],
     "--set train.lr=0.2 and --set train.lr=0.1 both set train.lr: give it once"),
    (["train", "--set", "train.lr=nan", "--dry-run"],
     "--set train.lr=nan: nan is no value a run can take; give a finite number"),
    (["train", "--set", "train.weight_decay=nan"], "nan is no value a run can take"),
    (["train", "--model", "tanh_mlp", "--set", "train.probe=nosuchlayer", "--dry-run"],
     "train.probe: no layer named ['nosuchlayer'] in tanh_mlp"),
    # settings the model and the data cannot take together
    (["train", "--model", "mlp", "--set", "model.in_dim=10", "--set", "train.steps=1"],
     "the mlp model with --set model.in_dim=10 --set train.steps=1 cannot take the mnist data"),
    (["train", "--model", "vit", "--set", "model.patch=5", "--dry-run"],
     "the vit model with --set model.patch=5 cannot take the"),
    (["train", "--model", "mlp", "--set", "data.n_train=1000000000", "--dry-run"],
     "data.n_train=1000000000: the mnist data has 60,000 train rows; give at most 60,000"),
    (["train", "--model", "mlp", "--set", "data.n_test=20000", "--dry-run"],
     "data.n_test=20000: the mnist data has 10,000 test rows"),
    (["train", "--model", "char_gpt", "--set", "model.seq_len=100000", "--set", "train.steps=1"],
     "its attention scores alone would take 9,537 GiB to train (batch 16 x 4 heads x 100,000^2 "
     "positions x 4 bytes x 4 attentions), more than half of"),
    (["train", "--model", "char_gpt", "--set", "model.seq_len=10000000", "--dry-run"],
     "model.seq_len=10000000: the tinyshakespeare validation text has 111,540 characters"),
    (["train", "--model", "encoder", "--set", "model.seq_len=100000", "--dry-run"],  # not padded
     "model.seq_len=100000: the ag_news text padded to it is 760,000,000 tokens (7,600 rows), "
     "which would take 92 GiB to tokenize (130 bytes a token), more than half of"),
    (["train", "--model", "lstm", "--set", "model.seq_len=100000", "--set",
      "train.batch_size=4096", "--dry-run"],  # a recurrent model: measured at a short length
     "the lstm model with --set model.seq_len=100000 --set train.batch_size=4096: what its "
     "training keeps for the backward pass would take 3,333 GiB (batch 4096 x 833.1 MiB an "
     "example, measured at 64 positions and scaled to 100,000), more than half of"),
    (["train", "--model", "encoder", "--set", "model.d=30", "--dry-run"],
     "model.d=30 must be divisible by model.heads=4"),
    (["train", "--model", "char_gpt", "--set", "train.batch_size=10000000000", "--dry-run"],
     "train.batch_size=10000000000: a batch's inputs alone would take 1,192 GiB"),  # none made
    (["train", "--model", "mlp", "--set", "train.batch_size=1000000000", "--dry-run"],
     "train.batch_size=1000000000: a batch's inputs alone would take 2,921 GiB (784 values an "
     "example, 4 bytes each), more than half of"),
    (["train", "--model", "mlp", "--set", "model.d=99999999"],  # before any weight is made
     "the mlp model with --set model.d=99999999: its 20,000,079,899,999,209 parameters would take "
     "298,024,414 GiB to train (weights, gradients and Adam's two moments, 4 bytes each), more "
     "than half of"),
    # the scorecard: its options, and a user's norm
    (["scorecard"], "scorecard: give a norm (e.g. mynorm.py:MyNorm) or --builtin"),
    (["scorecard", "{norms}:Fine", "{norms}:Fine", "--dry-run"], ":Fine given twice; give each "
     "norm once"),
    (["scorecard", "{norms}:Fine", "--name", " ", "--dry-run"],
     "--name ' ': a row's name must say something"),
    (["scorecard", "{norms}"], "expected MODULE:ATTRIBUTE or FILE.py:ATTRIBUTE"),
    (["scorecard", "nofile.py:X"], "no such file nofile.py"),
    (["scorecard", "{norms}:Missing"], "has no attribute 'Missing'; it has "),
    (["scorecard", "no_such_module:X"], "cannot import no_such_module"),
    (["scorecard", "{norms}:not_a_module"], "returned a int, not a torch.nn.Module"),
    (["scorecard", "{norms}:Shrinks"], "a norm must keep the shape (..., d)"),
    (["scorecard", "{norms}:Meta"],
     "checking its forward and backward pass failed: RuntimeError: Tensor.item() cannot be "
     "called on meta tensors"),
    (["scorecard", "{norms}:ExitsAtOnce"],
     "checking its forward and backward pass failed: SystemExit"),
    (["scorecard", "{norms}:EditsItself", "--dry-run"],
     "its forward pass changes its own parameters (ln.weight); only the optimizer may"),
    (["scorecard", "{norms}:Fine", "--against", "nonorm", "--dry-run"],
     "--against nonorm: not a built-in kind"),
    (["scorecard", "--builtin", "--against", "layernorm,mine"], "--against mine: not a built-in kind"),
    (["scorecard", "--builtin", "--against", ""], "--against '': name at least one built-in kind"),
    (["scorecard", "--builtin", "--against", ","], "--against ',': name at least one built-in kind"),
    (["scorecard", "mine.py:Mine", "--builtin"],
     "--builtin scores the built-in kinds alone; drop it to score mine.py:Mine beside them"),
    (["scorecard", "{norms}:Fine", "--workers", "0"], "--workers 0: give 1 or more"),
    (["scorecard", "--builtin", "--workers", "1000"], "--workers 1000: at most "),
    (["scorecard", "{norms}:Fine", "--threads", "0"], "--threads 0: give 1 or more torch threads"),
    (["scorecard", "{norms}:Fine", "--name", "a", "--name", "b"], "scorecard: 2 --name for 1 norms"),
    (["scorecard", "{norms}:Fine", "--name", "layernorm"], "is a built-in kind"),
    (["scorecard", "{norms}:Fine", "--out", "/proc/nope"], "--out /proc/nope: cannot be created"),
    (["scorecard", "{norms}:Fine", "--check"], "add --builtin"),
    (["scorecard", "{shadow}:Fine", "--dry-run"], "is named as the module json, which normsys or "
                                                  "Python imports"),
    # the pages: where they go, checked before they are computed
    (["catalog", "--out", "/proc/nope/claims.md"], "--out /proc/nope/claims.md: cannot be written"),
    (["tables", "--out", "/proc/nope"], "--out /proc/nope: cannot be written"),
    (["tables", "--out", "/tmp"], "--out /tmp: is a folder; give the page's file"),
]
if not torch.cuda.is_available():
    MISTAKES += [
        (["train", "--set", "train.device=cuda", "--dry-run"], "train.device=cuda but no CUDA"),
        (["train", "--tier", "paper", "--dry-run"], "data.tier=paper: no CUDA device here"),
        (["scorecard", "{norms}:Fine", "--tier", "paper"], "scorecard --tier paper: no CUDA"),
        (["scorecard", "--builtin", "--tier", "paper"], "scorecard --tier paper: no CUDA"),
    ]


@pytest.fixture
def user_norms(tmp_path):
    """The user's norm file, and the kinds it registers forgotten afterwards."""
    from normsys.training.norms import NORMS as KINDS

    before = set(KINDS)
    path = tmp_path / "mynorms.py"
    path.write_text(NORMS)
    yield path
    for name in set(KINDS) - before:
        del KINDS[name]


@pytest.mark.parametrize("argv,says", MISTAKES, ids=[" ".join(a) for a, _ in MISTAKES])
def test_a_mistake_is_one_error_line_and_a_failing_exit(argv, says, user_norms, capsys):
    shadow = user_norms.with_name("json.py")  # a norm file named as a module normsys imports
    shadow.write_text(NORMS)
    argv = [a.replace("{norms}", str(user_norms)).replace("{shadow}", str(shadow)) for a in argv]
    code = main(argv)
    said = capsys.readouterr()
    errors = [line for line in said.err.splitlines() if "error:" in line]
    assert code == 2, f"exit {code} for a mistake (README: a bad input is exit 2): {said}"
    assert len(errors) == 1 and says.replace("{norms}", str(user_norms)) in errors[0], said.err
    assert "Traceback" not in said.err + said.out


def test_the_entry_point_says_it_as_main_does(tmp_path):
    """``python -m normsys`` is ``main``: the mistake's line, exit 2, nothing else on stderr."""
    done = subprocess.run([sys.executable, "-m", "normsys", "train", "--set", "train.lr=nan"],
                          capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("error: --set train.lr=nan: nan is no value a run can take; give a "
                           "finite number\n")


PYTEST_MISTAKES = [
    (["-k", "tc-residual-preserves-gradients and cpu", "--claims-report", "/proc/nope"],
     "--claims-report /proc/nope: cannot be created or written"),
    (["-k", "no-such-claim-anywhere"], "no-such-claim-anywhere"),
    (["-k", "tc-residual-preserves-gradients and cpu", "--claims-max-seeds", "2"],
     "--claims-max-seeds 2"),
    (["--claims-seeds", "1"], "--claims-seeds 1: a verdict needs >= 2 seeds"),
    (["--claims-seed-offset", "-3"], "--claims-seed-offset -3: seeds are >= 0"),
    (["--claims-ledger", "/no/such/ledger"], "--claims-ledger /no/such/ledger: no such folder"),
    (["-k", "tc-residual-preserves-gradients and cpu", "--claims-update", "--claims-ledger",
      "/proc/nope"], "--claims-update: the records' folder /proc/nope cannot be written"),
    (["-k", "tc-residual-preserves-gradients and cpu", "--claims-list", "--claims-ledger",
      "{damaged}"], "cannot be read (JSONDecodeError"),
]


@pytest.mark.parametrize("args,says", PYTEST_MISTAKES, ids=[" ".join(a) for a, _ in PYTEST_MISTAKES])
def test_a_claims_session_mistake_is_one_error_line_before_any_claim_runs(args, says, tmp_path):
    env = {**os.environ, "NORMSYS_CACHE": str(tmp_path / "cache")}  # nothing is trained
    damaged = tmp_path / "ledger"  # a record cut short
    damaged.mkdir()
    record = (ROOT / "claims" / "ledger" / "tc-residual-preserves-gradients.json").read_text()
    (damaged / "tc-residual-preserves-gradients.json").write_text(record[:len(record) // 2])
    args = [a.replace("{damaged}", str(damaged)) for a in args]
    done = subprocess.run([sys.executable, "-m", "pytest", "claims", "-q", "-p", "no:cacheprovider",
                           "-p", "no:randomly", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=600)
    said = done.stdout + done.stderr
    assert done.returncode not in (0, 1), said[-3000:]  # a usage error, not a run's outcome
    assert "Traceback" not in said and says in said, said[-3000:]
    assert not list((tmp_path / "cache").rglob("*.json")), "a run was trained"


def test_a_relative_run_cache_is_refused_with_one_line(tmp_path, monkeypatch, capsys):
    """NORMSYS_CACHE=cache would name another cache in every folder a command starts from:
    refused before anything trains, by the command line and by a claims session alike."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NORMSYS_CACHE", "cache")
    assert main(["train", "--model", "tanh_mlp", "--set", "train.steps=1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: NORMSYS_CACHE=cache: a relative path names another cache in "
                          f"every folder a command starts from (here {tmp_path / 'cache'}); give "
                          f"an absolute path") and "Traceback" not in err
    assert not (tmp_path / "cache").exists()
    done = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "claims"), "-q", "-p",
                           "no:cacheprovider", "-k", "tc-residual-preserves-gradients and cpu"],
                          capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "NORMSYS_CACHE": "cache"}, timeout=600)
    said = done.stdout + done.stderr
    assert done.returncode == pytest.ExitCode.USAGE_ERROR and "Traceback" not in said
    assert "NORMSYS_CACHE=cache: a relative path" in said and not (tmp_path / "cache").exists()


@pytest.mark.parametrize("argv", [["train", "--model", "encoder", "--dry-run"],
                                  ["scorecard", "{norms}:Fine", "--dry-run"]])
def test_a_run_cache_that_is_a_file_is_one_line_before_the_data_is_read(argv, user_norms,
                                                                        tmp_path, monkeypatch,
                                                                        capsys):
    """The data's tokenizers are kept in the run cache: a dry run reads the data (the
    scorecard's layer check does too), so a cache that is a file is said before either."""
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path / "afile"))
    (tmp_path / "afile").write_text("x")
    assert main([a.format(norms=user_norms) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err == f"error: NORMSYS_CACHE={tmp_path / 'afile'}: is a file, not a folder; name a " \
                  f"folder (it is created if missing), or NORMSYS_CACHE=off\n"


def test_a_damaged_run_times_table_costs_the_prices_in_one_line_never_the_command(tmp_path,
                                                                                  capsys):
    from normsys.orchestration import runtimes

    row = {"runs": 3, "seconds": 1.5, "own_seconds": 1.0, "untimed": 0, "fingerprints": ["ab"]}
    wrong = {  # a field of the wrong kind: named, as malformed JSON is
        '{"claims": {}, "runs": {"ab": "slow"}}': "run ab: seconds 'slow', not a number >= 0",
        '{"claims": {}, "runs": {"ab": -1}}': "run ab: seconds -1, not a number >= 0",
        json.dumps({"claims": {"c": {**row, "seconds": "lots"}}}):
            "claim c: seconds 'lots', not a number >= 0",
        json.dumps({"claims": {"c": {**row, "fingerprints": "ab"}}}):
            "claim c: fingerprints 'ab', not a list of names",
        json.dumps({"claims": {"c": 7}}): "claim c: 7, not a row of runs and seconds",
        json.dumps({"claims": {}, "device": 3}): "its device is 3, not a name"}
    for content in ("{not json", "[1, 2]", '{"claims": 3}', *wrong):
        (tmp_path / "run-times-cpu.json").write_text(content)
        runtimes.damaged.cache_clear()
        for _ in range(3):  # said once, however often it is read
            assert runtimes.read("cpu", tmp_path) == {"tier": "cpu", "device": "", "claims": {}}
        lines = capsys.readouterr().err.splitlines()
        assert len(lines) == 1 and "run-times-cpu.json cannot be read" in lines[0] and \
            "costs are priced without it" in lines[0] and wrong.get(content, "") in lines[0]
    (tmp_path / "run-times-cpu.json").write_text(json.dumps({"claims": {"c": row}}))
    assert runtimes.read("cpu", tmp_path)["claims"] == {"c": row}  # a table of the right kinds
    runtimes.damaged.cache_clear()


def test_a_reader_that_closes_the_pipe_ends_the_command_quietly():
    """``python -m normsys list | head -1``: the reader gone, the rest is not written, and the
    command ends with no traceback."""
    proc = subprocess.Popen([sys.executable, "-m", "normsys", "list"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    proc.stdout.close()  # the reader is gone before a line is written
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0 and err == "", err


def test_a_scorecard_on_ray_without_ray_installed_is_one_line_before_anything_loads(
        monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    assert main(["scorecard", "--builtin", "--ray", "local", "--dry-run"]) == 2
    assert capsys.readouterr().err == "error: --ray local: Ray is not installed here; pip " \
                                      "install 'normsys[ray]', or drop --ray to train on this " \
                                      "machine\n"


def test_an_interrupted_scorecard_says_which_columns_it_wrote(tmp_path, monkeypatch, capsys):
    """Ctrl-C after some columns were written: the message says they were, not that nothing
    was; before any, it says nothing was."""
    from normsys import scorecard

    def fetch(plan, specs, workers, runs, threads, done):
        done({})  # the runs of some columns are all in: they are written
        raise KeyboardInterrupt

    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(scorecard, "fetch", fetch)
    ready = [SimpleNamespace(name="level"), SimpleNamespace(name="vs_none")]
    monkeypatch.setattr(scorecard, "complete", lambda plan, records: ready)
    monkeypatch.setattr(scorecard, "cells", lambda *args: {})
    monkeypatch.setattr(scorecard, "provenance", lambda *args: {})
    provs = []
    monkeypatch.setattr(scorecard, "write", lambda out, table, prov, *args: provs.append(prov)
                        or [tmp_path / "out" / "scorecard.json"])
    args = ["scorecard", "--builtin", "--against", "layernorm", "--out", str(tmp_path / "out")]
    assert main(args) == 130
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"interrupted: stopped, with every training process; the 2 columns whose runs were all "
        f"in were written to {tmp_path / 'out'} before it, the files marked partial, the others "
        f"not (the same command again trains only the runs not cached)")
    partial = provs[-1]["partial"]  # the columns whose runs were not all in, named
    assert " columns still to come (" in partial and "level" not in partial
    monkeypatch.setattr(scorecard, "complete", lambda plan, records: [])
    assert main(args) == 130
    assert capsys.readouterr().err.splitlines()[-1].endswith("nothing was written (a run "
                                                             "trained to the end stays cached)")


def test_more_workers_than_cores_is_said_and_as_many_is_not():
    """-n past the cores on the CPU: every run trains on one thread, so the extra workers only
    take turns; said in a line, never refused (the numbers are the same)."""
    from normsys.orchestration import workers

    said = workers.oversubscribed(3, cores=2)
    assert said.startswith("-n 3 starts more workers than this machine's 2 cores: each run "
                           "trains on 1 thread") and said.endswith("-n 2 uses every core")
    assert workers.oversubscribed(2, cores=2) == "" and workers.oversubscribed(1, cores=2) == ""
    assert workers.oversubscribed(None, cores=2) == "" and workers.oversubscribed("auto", 2) == ""


def test_a_listing_whose_k_drops_the_claims_controls_says_they_are_not_priced():
    """``--claims-list -k cpu`` selects the claims at the cpu tier and none of their negative
    controls (their names hold no tier): the price leaves their runs out, and says so; a -k of
    the claim's id selects them with it."""
    def listed(k: str) -> str:
        return subprocess.run([sys.executable, "-m", "pytest", "claims", "--claims-list", "-k", k,
                               "-p", "no:cacheprovider", "-q"], capture_output=True, text=True,
                              cwd=ROOT).stdout

    dropped = listed("cpu and tc-residual-preserves-gradients and not control")
    assert "negative controls of these claims are deselected (by -k or -m): their runs are not " \
           "in this price" in dropped, dropped[-2000:]
    assert "are deselected" not in listed("tc-residual-preserves-gradients")


def test_the_scorecards_json_is_strict_and_reads_back_its_nulls_as_nan(tmp_path):
    """A value that is not a number is written as null (JSON has no NaN) and read back as NaN,
    by the built-in scorecard's reader and by ``of_json``."""
    import json
    import math

    from normsys import scorecard
    from normsys.claims.report import Row

    table = {"mine": {"kappa_6": Row(verdict="inconclusive", values=(math.nan, 1.0), mean=math.nan,
                                   low=math.nan, high=math.nan, n=2, reason="r",
                                   evidence={"reads": [math.nan, 1.0], "runs": [["a"], ["b"]]})}}
    prov = {"tier": "cpu", "device": "cpu", "commit": "c" * 12}
    stat = next(s for s in scorecard.columns(None) if s.name == "kappa_6")
    (path, page, _) = scorecard.write(tmp_path, table, prov, [stat])
    text = path.read_text()
    assert '"mean": null' in text
    body = json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in strict JSON"))
    read = scorecard.read_builtin(path)["norms"]["mine"]["kappa_6"]
    assert math.isnan(read["mean"]) and math.isnan(read["reads"][0]) and read["reads"][1] == 1.0
    assert math.isnan(scorecard.of_json(body["norms"])["mine"]["kappa_6"].values[0])
    assert "Partial" not in page.read_text()
    scorecard.write(tmp_path, table, {**prov, "partial": "1 columns still to come (x)"}, [stat])
    assert "**Partial**: 1 columns still to come (x)" in page.read_text()
    assert json.loads(path.read_text())["provenance"]["partial"] == "1 columns still to come (x)"


def test_the_installed_command_runs_beside_a_json_py_that_python_m_would_import(tmp_path):
    """A json.py in the working folder: ``python -m normsys`` imports it in place of the real
    json before normsys starts (Python puts the folder first on its path), and README says so;
    the ``normsys`` script that the install puts beside Python does not."""
    import shutil
    import sysconfig

    (tmp_path / "json.py").write_text("raise SystemExit('this is not json')\n")
    script = shutil.which("normsys", path=sysconfig.get_path("scripts"))
    assert script, "pip install -e . installs the normsys command (pyproject's [project.scripts])"
    done = subprocess.run([script, "list"], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("presets:"), done.stderr[-2000:]
    shadowed = subprocess.run([sys.executable, "-m", "normsys", "list"], capture_output=True,
                              text=True, cwd=tmp_path)
    assert "this is not json" in shadowed.stderr  # what README's line warns of


@pytest.mark.parametrize("kind", ["link", "folder"])
def test_a_scorecard_file_that_writing_would_replace_is_refused_before_training(
        kind, user_norms, tmp_path, capsys):
    """--out holding a scorecard.json that is a link (writing would go through it, into whatever
    it names) or a folder: one line naming it, before anything trains."""
    out = tmp_path / "out"
    out.mkdir()
    if kind == "link":
        (out / "scorecard.json").symlink_to(tmp_path / "elsewhere.json")
    else:
        (out / "scorecard.json").mkdir()
    assert main(["scorecard", f"{user_norms}:Fine", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and f"--out {out / 'scorecard.json'}: is " in err, err
    assert not (tmp_path / "elsewhere.json").exists()


@pytest.mark.parametrize("cache", [[], ["--no-cache"]])
def test_a_run_says_as_it_starts_how_long_it_is_priced_at(cache, tmp_path, monkeypatch, capfd):
    """A log shows no step bar: the line a run starts with says its price, cached or not."""
    from normsys.orchestration import runtimes

    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(runtimes, "run_seconds", lambda cfg: (42.4, "a box"))
    assert main(["train", "--model", "tanh_mlp", "--set", "train.steps=2", *cache]) == 0
    started = capfd.readouterr().err.splitlines()[0]
    assert started.startswith("normsys: training tanh_mlp/") and \
        started.endswith(" ... (~42 s as priced)"), started
