"""Training on a Ray cluster (normsys.orchestration.cluster), on a real local cluster: a run trained
there is the run trained here (same record, same weights, same key), runs start before they are asked
for, a worker that dies is retried, a run that diverges is recorded as diverged, an unreachable
cluster is one line before anything trains, Ctrl-C's cancel stops what runs, and the claims
give the same verdicts through --claims-ray."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ray = pytest.importorskip("ray")

from normsys.claims.declaration import Arm, Statistic, metric  # noqa: E402
from normsys.orchestration.cluster import Cluster, ClusterError, connect, train_group  # noqa: E402
from normsys.orchestration.runs import Runs  # noqa: E402
from normsys.training.config import preset  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FFN_SMALL = {"train.steps": 3, "model.d": 16, "data.batch_shape": (4, 5, 16)}
FFN = preset("ffn_stack", **FFN_SMALL)
SEEDS = [FFN.override(**{"train.seed": s}) for s in range(3)]
MLP = preset("mlp", **{"data.n_train": 256, "data.n_test": 64, "train.probe_batch": 64})


@pytest.fixture(scope="module")
def cluster():
    """A Ray cluster on this machine, one CPU a run."""
    on = Cluster("local", cpus=1)
    yield on
    on.close()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def fields(record) -> dict:
    """What a run measured: everything of its record but when, where and how long."""
    body = json.loads(record.to_json())
    return {k: v for k, v in body.items() if k not in ("env", "wall_time", "state_path")}


def test_a_run_trained_on_the_cluster_is_the_run_trained_here(cluster, tmp_path, monkeypatch,
                                                              data_env):
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path / "cluster"))
    there = Runs(trainer=cluster).runs([FFN, MLP])
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path / "here"))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the cluster's one-CPU tasks train
    try:
        here = Runs().runs([FFN, MLP])
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(there, here, strict=True):
        assert fields(a) == fields(b)
        assert a.env["node"] and "node" not in b.env
        wa, wb = torch.load(a.state_path), torch.load(b.state_path)
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa)
    keys = [{p.name for p in (tmp_path / side / "runs").glob("*.json")}
            for side in ("cluster", "here")]
    assert keys[0] == keys[1] and len(keys[0]) == 2  # the same keys: the MLP's holds its data


def test_runs_start_on_the_cluster_before_they_are_asked_for(cluster, cache):
    runs = Runs(trainer=cluster)
    runs.run(SEEDS[0])  # cached now: not submitted again
    assert runs.plan([SEEDS]) == 2 and set(cluster.pending) == set(SEEDS[1:])
    assert Runs(trainer=cluster).plan([SEEDS[:1]]) == 0  # another session finds it in the cache
    records = runs.runs(SEEDS)
    assert [r.run_config for r in records] == SEEDS and not cluster.pending
    assert all(r.env["node"] for r in records[1:])


def test_a_kind_the_claims_register_trains_on_the_cluster(cluster, cache):
    """A claim's registered kind (DyT at another initial alpha) is known on a worker, whose
    process has imported no claim: the run comes back trained there, as it trains here."""
    from normsys.declarations.shared.dyt_alphas import dyt_kind

    cfg = FFN.override(**{"model.norm": dyt_kind(2.0)})
    record = Runs(trainer=cluster).run(cfg)
    assert record.run_config == cfg and record.env["node"] and not record.diverged


def dies_once(marker: Path):
    def work(cfgs, specs, threads):
        if not marker.exists():
            marker.write_text("died")
            os._exit(1)  # the worker process dies, as on a lost node
        return train_group(cfgs, specs, threads)
    return work


def test_a_task_whose_worker_dies_is_retried(cluster, cache, tmp_path):
    fragile = Cluster("local", work=dies_once(tmp_path / "died"))
    record = Runs(trainer=fragile).run(FFN)
    assert (tmp_path / "died").read_text() == "died" and record.run_config == FFN
    assert fields(record) == fields(Runs(trainer=cluster).run(FFN))  # read back from the cache


def test_a_run_that_diverges_comes_back_recorded_as_diverged(cluster, cache):
    wild = FFN.override(**{"train.lr": 1e12, "train.steps": 20})
    record = Runs(trainer=cluster).run(wild)
    assert record.diverged and record.env["node"]


def sleeps_600_s():
    def work(cfgs, specs, threads):  # made here, so that Ray sends it by value to the worker
        time.sleep(600)
    return work


def test_cancel_stops_the_tasks_still_running(cluster):
    slow = Cluster("local", work=sleeps_600_s())
    slow.submit([FFN], None)
    ref = slow.pending[FFN]
    start = time.perf_counter()
    slow.cancel()
    with pytest.raises((ray.exceptions.TaskCancelledError, ray.exceptions.WorkerCrashedError)):
        ray.get(ref, timeout=60)
    assert time.perf_counter() - start < 60 and not slow.pending


def test_a_cancel_that_ray_drops_is_sent_again(cluster, monkeypatch):
    """Ray drops a cancel that arrives while the task's worker is being leased (the task then
    sleeps its 600 s): ``cancel`` cancels what has not ended again."""
    slow = Cluster("local", work=sleeps_600_s())
    slow.submit([FFN], None)
    ref, real, dropped = slow.pending[FFN], ray.cancel, []

    def drops_the_first(target, **how):
        if not dropped:
            return dropped.append(target)
        return real(target, **how)

    monkeypatch.setattr(ray, "cancel", drops_the_first)
    slow.cancel()
    with pytest.raises((ray.exceptions.TaskCancelledError, ray.exceptions.WorkerCrashedError)):
        ray.get(ref, timeout=20)
    assert dropped == [ref] and not slow.pending


def test_a_cluster_that_cannot_be_reached_is_one_line_before_anything_trains(tmp_path):
    with pytest.raises(ClusterError, match=r"^Ray cluster '127.0.0.1:1' cannot be reached "):
        connect("127.0.0.1:1")
    with pytest.raises(ClusterError, match="expected `local`, `auto`, HOST:PORT"):
        connect("no-port-here")
    with pytest.raises(ClusterError, match=r"^Ray cluster 'auto' \(\$RAY_ADDRESS=127.0.0.1:1\) "
                                           r"cannot be reached"):
        with pytest.MonkeyPatch.context() as patch:  # `auto` reads it, as Ray does
            patch.setenv("RAY_ADDRESS", "127.0.0.1:1")
            connect("auto")
    env = {**os.environ, "NORMSYS_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "pytest", "claims", "-p", "no:cacheprovider",
                           "--claims-ray", "127.0.0.1:1", "-k", "tc-residual-preserves-gradients"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 4
    assert "ERROR: --claims-ray: Ray cluster '127.0.0.1:1' cannot be reached" in done.stderr
    assert not (tmp_path / "cache" / "runs").exists()
    done = subprocess.run([sys.executable, "-m", "normsys", "scorecard", "--builtin",
                           "--ray", "127.0.0.1:1", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 2 and done.stderr.startswith("error: --ray: Ray cluster ")
    assert len(done.stderr.splitlines()) == 1 and not (tmp_path / "out").exists()


def claims_report(tmp_path: Path, name: str, *extra: str) -> dict:
    env = {**os.environ, "NORMSYS_CACHE": str(tmp_path / f"cache-{name}")}
    done = subprocess.run([sys.executable, "-m", "pytest", "claims", "-p", "no:cacheprovider",
                           "-k", "tc-residual-preserves-gradients and cpu",
                           "--claims-report", str(tmp_path / name), *extra],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    rows = json.loads((tmp_path / name / "claims.json").read_text())["claims"]
    return {r["id"]: (r["verdict"], r["values"]) for r in rows}, done.stderr


def test_claims_through_a_local_cluster_give_the_same_verdicts(tmp_path):
    here, _ = claims_report(tmp_path, "here")
    there, said = claims_report(tmp_path, "ray", "--claims-ray", "local")
    assert there == here and here["tc-residual-preserves-gradients"][0] == "supported"
    assert "; node " in said  # each run names the node it trained on
    for entry in (tmp_path / "cache-ray" / "runs").glob("*.json"):  # the index is kept: again,
        entry.unlink()                                               # every run starts at once
    again, said = claims_report(tmp_path, "ray", "--claims-ray", "local")
    assert again == here and "Ray cluster local: 10 runs submitted, longest first" in said


def test_claims_on_a_cluster_run_in_one_process(tmp_path):
    env = {**os.environ, "NORMSYS_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "pytest", "claims", "-p", "no:cacheprovider",
                           "--claims-ray", "local", "-n", "2", "-k", "nothing"],
                          capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert done.returncode == 4 and "run the claims in one process (without -n)" in done.stderr


def test_a_group_comes_back_in_the_order_asked_and_on_this_machines_data(cluster, cache):
    from types import SimpleNamespace

    task = Runs().task_of(FFN)
    got = cluster.train(SEEDS[::-1], task)  # one task: the three seeds stacked
    assert [record.run_config for record, _ in got] == SEEDS[::-1] and not cluster.ready
    other = SimpleNamespace(digest="f" * 64, source="other data")
    with pytest.raises(ClusterError, match=r"^the data on .* differ from this machine's \(other "
                                           r"data: digest none, here ffffffffffff\)"):
        cluster.train([FFN.override(**{"train.seed": 7})], other)


def test_a_users_norm_is_registered_again_on_the_workers(cluster, cache, tmp_path):
    from normsys.orchestration import usernorm
    from normsys.training import norms

    path = tmp_path / "usernorm.py"
    path.write_text("from torch import nn\n\n\nclass Halved(nn.Module):\n"
                    "    def __init__(self, d):\n        super().__init__()\n"
                    "        self.inner = nn.LayerNorm(d)\n\n"
                    "    def forward(self, x):\n        return self.inner(x) / 2\n")
    name = usernorm.load(f"{path}:Halved", "halved")
    try:
        on = Cluster("local", specs=[(f"{path}:Halved", name)])
        cfg = FFN.override(**{"model.norm": name})
        record = Runs(trainer=on).run(cfg)
        assert record.run_config == cfg and record.env["node"] and not record.diverged
    finally:
        del norms.NORMS[name]


def test_ctrl_c_cancels_the_clusters_tasks_and_leaves_the_cache_whole(tmp_path, ctrl_c):
    """A terminal's Ctrl-C while runs train on the cluster: pytest stops as interrupted, saying
    how many runs it cancelled; what was kept is whole (each record with its weights, no
    temporary file), and no process is left."""
    env = {**os.environ, "NORMSYS_CACHE": str(tmp_path / "cache")}
    code, out, err = ctrl_c([sys.executable, "-m", "pytest", "claims", "-p", "no:cacheprovider",
                             "-k", "ld-layernorm-small-batch and cpu", "--claims-ray", "local",
                             "--claims-report", str(tmp_path / "report")], env, ROOT)
    assert code == 2 and "KeyboardInterrupt" in out, out[-2000:] + err[-2000:]
    cancelled = re.search(r"normsys: interrupted: (\d+) runs cancelled on the Ray cluster, none "
                          r"of them kept", err)
    assert cancelled and int(cancelled[1]) >= 1, err[-2000:]  # the claim's others were waiting
    runs = tmp_path / "cache" / "runs"
    kept = {p.name for p in runs.iterdir()} if runs.exists() else set()
    records = {n.removesuffix(".json") for n in kept if n.endswith(".json")}
    assert all(f"{r}.pt" in kept for r in records)  # a record is kept with its weights
    assert not [n for n in kept if not n.endswith((".json", ".pt", ".lock"))]


def test_the_scorecard_trains_its_plan_on_the_cluster(cluster, cache, tmp_path, monkeypatch):
    """scorecard --ray: every run of the plan submitted at once and fetched back by config, the
    user's norm registered on the workers; the paper tier on a cluster without a GPU refused."""
    from argparse import Namespace

    from normsys import __main__ as cli
    from normsys import scorecard
    from normsys.claims.verdict import Rule
    from normsys.orchestration import cluster as module
    from normsys.orchestration import usernorm
    from normsys.training import norms

    class Kept(Cluster):  # the command ends its Ray session; this test's module goes on with it
        def close(self):
            self.cancel()

    monkeypatch.setattr(module, "Cluster", Kept)
    path = tmp_path / "usernorm.py"
    path.write_text("from torch import nn\n\n\ndef Scaled(d):\n    return nn.LayerNorm(d)\n")
    name = usernorm.load(f"{path}:Scaled", "scaled")
    level = Statistic("loss", "c-loss", Rule("loss", "<", 10.0),
                                Arm("ffn_stack", FFN_SMALL),
                                metric("final_loss"))
    try:
        plan = scorecard.plan([name, "layernorm"], statistics=(level,))
        args = Namespace(ray="local", tier="cpu", allow_cpu_paper=False)
        arrived = []
        records = cli.on_cluster(args, plan, [(str(path) + ":Scaled", name)], "6 runs",
                                 lambda got: arrived.append(len(got)))
        assert set(records) == set(plan.configs) and len(records) == 6
        assert arrived == [1, 2, 3, 4, 5, 6]  # each record handed on as it arrives
        assert all(r.run_config == c and r.env["node"] for c, r in records.items())
        with pytest.raises(cli.UsageError, match=r"--ray local: the cluster has no GPU; add "
                                                 r"--allow-cpu-paper"):
            cli.on_cluster(Namespace(ray="local", tier="paper", allow_cpu_paper=False), plan, [],
                           "", None)
    finally:
        del norms.NORMS[name]


def test_without_ray_installed_the_cluster_options_say_so_in_one_line(monkeypatch, tmp_path,
                                                                       capsys):
    """--ray and --claims-ray where Ray cannot be imported: the error names the fix, no
    traceback."""
    from normsys.__main__ import main

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(ClusterError, match=r"^Ray is not installed, so the cluster 'local' cannot "
                                           r"be used; pip install"):
        Cluster("local")
    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path / "cache"))
    assert main(["scorecard", "--builtin", "--against", "layernorm", "--ray", "local",
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Ray is not installed" in err and err.count("\n") == 1
    claims = subprocess.run([sys.executable, "-c", "import sys; sys.modules['ray'] = None\n"
                             "import pytest; sys.exit(pytest.main(['claims', '--claims-ray', "
                             "'local', '-k', 'tc-residual-preserves-gradients and cpu', '-p', "
                             "'no:cacheprovider']))"], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "NORMSYS_CACHE": str(tmp_path / "cache")})
    assert claims.returncode == pytest.ExitCode.USAGE_ERROR, claims.stdout + claims.stderr
    assert "--claims-ray: Ray is not installed, so the cluster 'local' cannot be used" in \
        claims.stdout + claims.stderr
    assert "Traceback" not in claims.stderr + claims.stdout
