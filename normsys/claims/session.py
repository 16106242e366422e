"""A claims session's state and what it does besides the hooks: one ``ClaimsSession`` a process
(on ``config.stash[SESSION]``) with its records, runs, Ray cluster and results; planning and
training the runs before the first claim, writing the report and the records at the end;
``--claims-list``; the checks a session makes before anything trains (the report folder, the
cluster, the Hub)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from pathlib import Path

import pytest

from normsys import __version__
from normsys.claims import across, ledger, verdict
from normsys.claims.items import (
    claim_id,
    claim_looks,
    claim_marker,
    claim_tier,
    collects_every_claim,
    control_ids,
    control_index,
    control_names,
    planned_configs,
    planned_looks,
    positive_ids,
    recorded_entry,
    selected,
)
from normsys.claims.report import (
    PROPERTY,
    Row,
    merged,
    role_at,
    verdict_table,
    write_check,
    write_reports,
)
from normsys.orchestration import runtimes
from normsys.orchestration.progress import Progress
from normsys.orchestration.runtimes import control_work, cost, expected_wall, total_line
from normsys.training.config import MAX_SEED
from normsys.training.data import DataError, DataMissingError, data_root, hub_allowed
from normsys.training.provenance import device_name, git_commit, numeric_environment
from normsys.training.tiers import DEFAULT, TIERS

SESSION = pytest.StashKey["ClaimsSession"]()  # the session's state, one object a process
FETCHED = pytest.StashKey[list]()  # a claim item's run configs, as its test fetches them
COUNTER_ENV = "NORMSYS_RUN_COUNTER"
STALE_OUTPUT = "normsys_stale_records"  # what an xdist worker found, for the controller
DEFAULT_REPORT_DIR = "claims-report"


def provenance(config: pytest.Config) -> dict:
    """Where this session's claims were measured: code, torch, device, seeds, data."""
    import torch

    root = data_root()
    sums = root / "SHA256SUMS"
    device = device_name()
    opt = config.option
    return {"normsys": __version__, "commit": git_commit(), "torch": torch.__version__,
            "device": device, "environment": numeric_environment(),
            "seeds": opt.claims_seeds or f"each claim's own ({seed_policy()})",
            "seed_offset": opt.claims_seed_offset, "data": str(root),
            "data_sha256": dict(line.split()[::-1] for line in sums.read_text().splitlines()
                                if line.strip()) if sums.is_file() else {},
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def seed_policy() -> str:
    return ", ".join(f"{t.seeds} at the {t.name} tier" for t in TIERS.values())


def max_seeds_policy() -> str:
    return ", ".join(f"{t.max_seeds} at the {t.name} tier" for t in TIERS.values())


def owns_counter(config: pytest.Config) -> bool:
    """Whether this session keeps the run counter its processes share: not an xdist worker's
    (its controller's), nor a collection that trains nothing (the catalog's, in the process of a
    session that may keep one)."""
    return not hasattr(config, "workerinput") and not config.option.collectonly


def cluster_of(config: pytest.Config):
    """The Ray cluster of --claims-ray (connected before anything trains), or None."""
    opt = config.option
    if not opt.claims_ray or opt.claims_list or hasattr(config, "workerinput"):
        return None
    if getattr(opt, "numprocesses", None):
        raise pytest.UsageError("--claims-ray trains the runs on the cluster: run the claims in "
                                "one process (without -n)")
    if opt.claims_ray_gpus < 0 or opt.claims_ray_cpus < 1:
        raise pytest.UsageError(f"--claims-ray-gpus {opt.claims_ray_gpus} / --claims-ray-cpus "
                                f"{opt.claims_ray_cpus}: a fraction of a GPU >= 0 and >= 1 CPU")
    from normsys.orchestration.cluster import Cluster, ClusterError

    try:
        return Cluster(opt.claims_ray, opt.claims_ray_gpus, opt.claims_ray_cpus)
    except ClusterError as err:
        raise pytest.UsageError(f"--claims-ray: {err}") from None


class ClaimRefuted(AssertionError):
    """The evidence lies wholly on the other side of the claim's threshold."""


class Ledgers:
    """A session's claim records in ``folder`` (normsys.claims.ledger), each read once: they
    judge each fresh verdict (normsys.claims.across) and, with ``update`` (--claims-update),
    take this session's (``amend``: the reason for a rule changed since a claim was recorded)."""

    def __init__(self, folder: Path, update: bool = False, strict: bool = False,
                 amend: str = ""):
        self.folder, self.update, self.strict, self.amend = Path(folder), update, strict, amend
        self.read: dict[str, ledger.Record] = {}
        # records of claims no longer defined: known only to a session that collected every claim
        # (the plugin's ``collects_every_claim``)
        self.stale: list[str] = []

    def record(self, cid: str) -> ledger.Record:
        if cid not in self.read:
            self.read[cid] = ledger.read(ledger.path_of(self.folder, cid))
        return self.read[cid]

    def recorded(self, cid: str, tier: str, key_now: str, first_seed: int,
                 like: ledger.Entry | None = None) -> ledger.Entry | None:
        """The entry this session's measurement will be compared with, as across.judge picks
        it: its own (``key_now``) under the rule in force, by whatever training code (values
        decide), of the run settings it will read (``like``'s statistic and settings, where
        known), else the reference it is judged against."""
        record = self.record(cid)
        own = record.entries.get(key_now)
        if own is not None and own.full_rule == record.rule and \
                (like is None or ledger.same_experiment(own, like)):
            return own
        current = record.current(tier, first_seed, like)
        return current[0] if current else None

    def history(self, cid: str, tier: str, environment: dict[str, str], first_seed: int) \
            -> list[ledger.Entry]:
        """The claim's entries of ``tier`` on this device, threads and torch
        (provenance.numeric_environment; the autocast is its runs') on seeds from
        ``first_seed``, whatever their plan: the looks it took here (verdict.expected)."""
        return [e for e in self.record(cid).of(tier)
                if (e.device, e.threads, e.torch) == (environment["device"],
                                                      environment["threads"],
                                                      environment["torch"])
                and e.seeds[:1] == (first_seed,)]

    def judge(self, cid: str, fresh: ledger.Entry) -> across.Judgement:
        if self.update:
            try:  # a record it cannot read or amend is said, not written over
                ledger.recorded(self.record(cid), fresh, self.amend)
            except ledger.LedgerError as err:
                return across.Judgement("changed", str(err))
            return across.Judgement("updated", f"recorded from this run in "
                                               f"{ledger.path_of(self.folder, cid)}")
        return across.judge(self.record(cid), fresh)

    def judged(self, fresh: Row) -> tuple[Row, across.Judgement]:
        """A claim's fresh row judged by its record (``judge``): the row with the judgement, how
        the claim's entries of its tier replicate and its rule's amendments; and the judgement."""
        judgement = self.judge(fresh.id, fresh)
        replicated = self.replication(fresh.id, fresh.tier)
        return replace(
            fresh, ledger=judgement.status, ledger_note=judgement.message,
            replication=replicated.word if replicated else "",
            replication_note=replicated.line() if replicated else "",
            amendments=[a.line() for a in self.said(fresh.id).amendments]), judgement

    def said(self, cid: str) -> ledger.Record:
        """The claim's record for the report's words (replication, amendments); empty where it
        cannot be read, which its judgement has already failed on."""
        try:
            return self.record(cid)
        except ledger.LedgerError:
            return ledger.Record(cid)

    def replication(self, cid: str, tier: str) -> across.Replication | None:
        return across.replication(self.said(cid), tier)

    def write(self, results: Sequence) -> list[str]:
        """Put this session's measurements (claim results: ``id``, ``entry``) into their
        claims' records, and delete the records of claims no longer defined (``stale``); what was
        written (a record the same measurements leave as it was: unchanged) and deleted."""
        written = []
        for cid in self.stale:
            ledger.path_of(self.folder, cid).unlink(missing_ok=True)
            written.append(f"deleted {ledger.path_of(self.folder, cid)}: no claim {cid} is "
                           f"defined")
        self.stale = []
        for r in results:
            if r.ledger != "updated":  # a rule changed without its amendment
                continue
            path = ledger.path_of(self.folder, r.id)
            fresh = ledger.Entry.of_entry(r.entry)
            record = ledger.recorded(ledger.read(path), fresh, self.amend)
            self.folder.mkdir(parents=True, exist_ok=True)
            before = path.read_bytes() if path.is_file() else None
            ledger.write(path, record)
            self.read[r.id] = record
            written.append(f"{'wrote' if path.read_bytes() != before else 'unchanged'} {path} "
                           f"({fresh.key})")
        return written

    def stale_lines(self) -> list[str]:
        return [f"{ledger.path_of(self.folder, cid)}: the record of a claim no longer defined; "
                f"review, then --claims-update deletes it" for cid in self.stale]


def cluster_has_gpus(config: pytest.Config) -> bool:
    """Whether --claims-ray trains on a cluster with GPUs (where the GPU claims can run)."""
    cluster = config.stash[SESSION].cluster if SESSION in config.stash else None
    return cluster is not None and cluster.cuda


def gpu_skipped(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a machine without CUDA, every item marked ``gpu`` skipped with the reason, but a GPU
    claim whose runs train on a Ray cluster with GPUs (--claims-ray): here it only reads them."""
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="gpu marker: no CUDA device on this machine "
                                   "(run on a GPU host with -m gpu)")
    remote = cluster_has_gpus(config)
    for item in items:
        if "gpu" in item.keywords and not (remote and claim_marker(item) is not None):
            item.add_marker(skip)


def check_report_folder(folder: Path, create: bool = False) -> None:
    """The report is what a long run is for: a folder it cannot be written to is a usage error
    before anything trains, not a lost report after. ``create``: make it and write in it now (a
    session that runs claims), since what the permissions say is not all (a read-only or special
    file system)."""
    if folder.exists() and not folder.is_dir():
        raise pytest.UsageError(f"--claims-report {folder}: is a file, not a folder; name a "
                                f"folder for the report (default {DEFAULT_REPORT_DIR}/)")
    existing = next(p for p in (folder, *folder.absolute().parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise pytest.UsageError(f"--claims-report {folder}: cannot be created or written "
                                f"({existing} is not a writable folder)")
    if create and (why := write_check(folder)):
        raise pytest.UsageError(f"--claims-report {folder}: cannot be created or written ({why})")


def offline_without_hub(timeout: float = 3.0) -> None:
    """Where the Hugging Face Hub's host takes no connection, HF_HUB_OFFLINE=1 for this process:
    the paper tier's AG News then comes from the data files at once, where the datasets library
    would retry the Hub for ~30 s, printing each retry (into --claims-list's lines, say)."""
    import socket
    from urllib.parse import urlparse

    if not hub_allowed():
        return
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        with socket.create_connection((url.hostname, url.port or 443), timeout=timeout):
            return
    except (OSError, ValueError):  # no route, no name, a malformed endpoint
        os.environ["HF_HUB_OFFLINE"] = "1"


def list_claims(config: pytest.Config, items: list[pytest.Item]) -> None:
    """--claims-list: the claims ``items`` hold, each with its statement, source, negative
    controls and cost, and the training they would take in all."""
    catalog = selected(items)
    item_of = {(claim_id(i, m), claim_tier(i)): i for i in items if (m := claim_marker(i))}
    session = config.stash[SESSION]
    write = config.pluginmanager.get_plugin("terminalreporter").write_line
    unplanned, controls, configs = [], {}, {}
    for (cid, tier), (statement, source) in sorted(catalog.items()):
        for item in session.controls.get(cid, []):
            if (index := control_index(item)) not in controls:
                controls[index] = cost(index, DEFAULT)
        control = ", ".join(f"{item.name} ({controls[control_index(item)][0]})"
                            for item in session.controls.get(cid, [])) or "NONE"
        try:
            planned = planned_configs(item_of[cid, tier], session.ledgers)
        except ledger.LedgerError as err:  # as a claims run says it: the record, and restoring it
            raise pytest.UsageError(str(err)) from None
        # the runs it trains with this session's seed options, where it declares them (to the
        # look its ledger entries here show it took); else what it fetched last, or what the run
        # times record of it
        text, todo = session.runs.cost(planned) if planned else cost(cid, tier)
        if not planned:
            unplanned.append(todo)
        configs.setdefault(tier, []).extend(planned)
        declared = claim_marker(item_of[cid, tier]).kwargs.get("declared")
        role = role_at(getattr(declared, "role", ""), tier)
        positive = ", ".join(item.name for item in session.positives.get(cid, []))
        write(f"{cid}  [{tier}]  " + (f"role: {role}  " if role else "")
              + f"{statement}  ({source})  control: {control}  "
              + (f"positive: {positive}  " if positive else "") + f"cost: {text}")
    write(f"{len({cid for cid, _ in catalog})} claims, {len(catalog)} claim-tier pairs" + (
        f"; {len(unplanned)} without declared runs, {total_line(unplanned)}" if unplanned else ""))
    for tier, planned in sorted(configs.items()):  # each run once, however many claims read it
        if planned:
            write(f"the {tier} tier's claims in all: {session.runs.cost(planned)[0]}")
    if controls:  # each run once, however many controls read it, past the claims' own
        cpu = configs.get(DEFAULT, [])
        names = control_names(items)
        work = control_work(names, {c.fingerprint() for c in cpu})
        write(f"the {len(names)} negative controls selected: {work.line()}")
        theirs = control_names([i for cid, _ in catalog for i in session.controls.get(cid, [])])
        if dropped := set(theirs) - set(names):
            write(f"{len(dropped)} negative controls of these claims are deselected (by -k or "
                  f"-m): their runs are not in this price; a -k of the claims' ids selects them "
                  f"with their claims")
        tasks = [*session.runs.missing_seconds(cpu), *work.todo.values()]
        places = os.cpu_count() or 1
        budget = TIERS[DEFAULT].budget_minutes
        write(f"the cpu tier with its controls: ~{sum(tasks) / 60:.1f} min of training; "
              f"~{expected_wall(tasks, places) / 60:.1f} min on {places} process(es) "
              f"(-n {places}), longest first" + (
                  f"; its budget: {budget:g} min on 2 processes of a 2-core AMD AVX2 machine"
                  if budget else ""))
    items.clear()


@contextmanager
def data_errors(skip_missing: bool = False) -> Iterator[None]:
    """Missing or damaged data fails the test with the message (the file, what was expected, the
    fix); with ``skip_missing`` (--claims-skip-missing-data) a missing data set skips it."""
    try:
        yield
    except DataError as err:
        if isinstance(err, DataMissingError) and skip_missing:
            pytest.skip(f"data missing: {err}")
        pytest.fail(f"{type(err).__name__}: {err}", pytrace=False)


def longest_first(items: list[pytest.Item]) -> None:
    """Claims start longest first (the training of the runs each reads, as the tier's recorded
    run times say: normsys.orchestration.runtimes), so that under pytest-xdist the workers split the
    long groups of runs early and the short claims, whose runs are mostly trained by then, fill
    in at the end; the rest keep their order."""
    def seconds(item: pytest.Item) -> float:
        marker = claim_marker(item)
        return runtimes.seconds(claim_id(item, marker), claim_tier(item)) if marker else 0

    items.sort(key=seconds, reverse=True)  # stable: the rest keep their order


class ClaimsSession:
    """A claims session's state, one object a process (on ``config.stash[SESSION]``): its ledger
    files (``Ledgers``), its runs (normsys.orchestration.runs.Runs, which the run fixtures fetch
    through), its Ray cluster (--claims-ray, else None), the terminal its progress lines go to,
    the negative controls of each claim id; and the claim results of every report (local or
    from xdist workers), which it writes to the report and the ledger when the session finishes
    and shows in the terminal summary."""

    def __init__(self, config: pytest.Config, ledgers: Ledgers, runs, cluster,
                 terminal: int):
        self.config, self.ledgers, self.runs = config, ledgers, runs
        self.cluster, self.terminal = cluster, terminal
        self.controls: dict[str, list[pytest.Item]] = {}
        self.positives: dict[str, list[pytest.Item]] = {}  # each claim id's positive controls
        self.claim_items: dict[str, list[pytest.Item]] = {}
        self.results: dict[str, Row] = {}
        self.written: list[str] = []  # what was written, for the terminal summary
        self.started = time.monotonic()

    def collected(self, items: list[pytest.Item]) -> None:
        """Every item collected, before -k and -m deselect: check each claim marker (one test a
        claim and tier), let ``-k`` match claim ids (each id is a keyword of its test and of its
        negative controls), find records of claims no longer defined, and mark a refutation the
        record holds a strict xfail that only ClaimRefuted meets."""
        config, ledgers = self.config, self.ledgers
        catalog, controls, claim_items = {}, {}, {}
        for item in items:
            for cid in control_ids(item):
                item.extra_keyword_matches.add(cid)
                controls.setdefault(cid, []).append(item)
            for cid in positive_ids(item):
                item.extra_keyword_matches.add(cid)
                self.positives.setdefault(cid, []).append(item)
            if (marker := claim_marker(item)) is not None:
                cid = claim_id(item, marker)
                item.extra_keyword_matches.add(cid)
                claim_items.setdefault(cid, []).append(item)
                if (twice := [i for i in claim_items[cid][:-1]
                              if claim_tier(i) == claim_tier(item)]):
                    raise pytest.UsageError(
                        f"claim {cid} at the {claim_tier(item)} tier is decided by two tests, "
                        f"{twice[0].nodeid} and {item.nodeid}: a claim is one test (one with a "
                        f"test of its own declares own_test=True, which claims/test_declared.py "
                        f"leaves to that test)")
                catalog[cid, claim_tier(item)] = (marker.kwargs.get("statement", ""),
                                                  marker.kwargs.get("source", ""))
        if catalog:
            offline_without_hub()
        if catalog and not (config.option.claims_list or config.option.collectonly
                            or hasattr(config, "workerinput")):  # claims will run: a report is due
            check_report_folder(Path(config.option.claims_report), create=True)
        if catalog and collects_every_claim(config):
            ledgers.stale = ledger.stale(ledgers.folder, {cid for cid, _ in catalog})
            if hasattr(config, "workeroutput"):
                config.workeroutput[STALE_OUTPUT] = ledgers.stale
        for item in items:
            if (marker := claim_marker(item)) is None or config.option.claims_list or \
                    ledgers.update or config.option.collectonly:
                continue
            try:
                entry = recorded_entry(item, marker, ledgers)
            except ledger.LedgerError as err:
                raise pytest.UsageError(str(err)) from None
            if entry is not None and entry.verdict == verdict.REFUTED:
                item.add_marker(pytest.mark.xfail(strict=True, raises=ClaimRefuted,
                                                  reason=f"ledger: {entry.line()}"))
        if catalog and not config.option.claims_list:  # a claims session: say what training does
            counter = os.environ.get(COUNTER_ENV)
            self.runs.progress = Progress(self.terminal, Path(counter) if counter else None)
        self.controls = controls  # --claims-list names them, once -k has selected
        self.claim_items = claim_items  # whatever -k selects: what a control's claims train

    @contextmanager
    def controlled(self, node: pytest.Item) -> Iterator[None]:
        """A negative control reads a case its claims do not: one whose every run is among the
        runs its claims decide on (their first looks, both tiers) is only the claims' own values
        read again, which cannot come out otherwise than the claims do, and fails. A claim's
        evidence arms are not among them: it trains them to draw or report, never to decide, so
        a control that reads them (another claim's arm, trained once for both) decides values
        its claim does not."""
        ids = control_ids(node)
        if not ids:
            yield
            return
        with self.runs.recording() as fetched:
            yield
        self.runs.write_index(control_index(node), DEFAULT, fetched, empty=True)
        theirs = {c for cid in ids for item in self.claim_items.get(cid, [])
                  for c in planned_configs(item, evidence=False)}
        if fetched and set(fetched) <= theirs:
            pytest.fail(f"{node.nodeid}: a control of {', '.join(ids)} reads only runs its "
                        f"claim reads ({len(set(fetched))}): it cannot come out otherwise than "
                        f"the claim; give it a case where the effect is absent (other seeds, a "
                        f"setting without the effect)", pytrace=False)

    def plan(self, items: list[pytest.Item]) -> None:
        """Plan every run the selected claims train (planned_looks: their first looks, and the
        later looks their ledger entries in this environment show them taking), longest
        first: on --claims-ray the cluster starts the ones the cache lacks now; here
        ``pytest_runtestloop`` trains them before the first claim starts."""
        runs = self.runs
        try:
            looks = [look for item in items if claim_marker(item) is not None
                     and not item.get_closest_marker("skip")
                     for look in planned_looks(item, self.ledgers)]
            handed = runs.plan(looks)
        except Exception as err:  # noqa: BLE001 -- said again by the claim that needs the run
            runs.progress.note(f"nothing planned ahead ({type(err).__name__}: {err})")
            return
        if self.cluster is not None:
            planned = len({c for look in looks for c in look})
            runs.progress.note(f"Ray cluster {self.config.option.claims_ray}: {handed} runs "
                               f"submitted, longest first (of the {planned} the claims plan; "
                               f"the rest are cached)")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtestloop(self, session: pytest.Session):
        """Before the first claim starts (in each pytest-xdist worker, or alone): train the
        planned runs the cache lacks, longest first, each worker taking the next one no other
        holds (normsys.orchestration.runs.Runs.train_planned). Then, in a worker: the claims run, with
        the groups they ask for posted on the session's board; once its own are done, the worker
        trains what the others' claims wait for until none is at work (Runs.help). Not in
        xdist's controller, which runs no test."""
        runs = self.runs
        if self.config.pluginmanager.has_plugin("dsession") or session.config.option.collectonly:
            yield
            return
        board, me = self.board()
        with board.at_work(me) if board else nullcontext():
            if runs.planned:
                planned = sum(map(len, runs.planned))
                if me in ("", "gw0"):  # said once, by the first worker or alone
                    places = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
                    todo, wall = runs.planned_work(places)
                    controls = control_work(control_names(session.items),
                                            {c.fingerprint() for g in runs.planned for c in g})
                    # each trained run, the controls' too: k of N, time left
                    runs.progress.expect({**todo, **controls.todo}, places)
                    both = expected_wall([*todo.values(), *controls.todo.values()], places)
                    runs.progress.note(
                        f"planned: {planned} runs, {len(todo)} of them not cached: "
                        f"~{wall / 60:.1f} min of training on {places} process(es) as their run "
                        f"times record them; then the negative controls: {controls.line()}; in "
                        f"all ~{both / 60:.1f} min on {places} process(es)")
                with runs.progress.bar() if me in ("", "gw0") else nullcontext():
                    trained = runs.train_planned()
                runs.progress.note(f"the {planned} planned runs are taken ({trained} trained by "
                                   f"this process, the others cached or training elsewhere); the "
                                   f"claims start, {time.monotonic() - self.started:.0f} s into "
                                   f"the session")
            runs.board = board
            yield
        if board is None:
            return
        if helped := runs.help(me):
            runs.progress.note(f"{me}: its claims done, trained {helped} runs the others' "
                               f"claims asked for")
        board.close()

    def board(self):
        """The session's board (normsys.orchestration.runs.Board) and this worker's name, under
        pytest-xdist with a writable run cache; (None, "") otherwise."""
        from normsys.orchestration.runs import Board
        from normsys.training.store import cache_root

        workerinput = getattr(self.config, "workerinput", None)
        root = cache_root()
        if workerinput is None or root is None or self.cluster is not None:
            return None, ""
        try:
            return Board(root / "sessions" / workerinput["testrunuid"]), workerinput["workerid"]
        except OSError:  # a read-only cache: each claim trains its own runs
            return None, ""

    @pytest.hookimpl(trylast=True)  # after -k and -m deselect and the gpu skips: what runs
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """What -k and -m left, the GPU items skipped without CUDA (``gpu_skipped``), longest
        first (``longest_first``), then listed (--claims-list) or planned."""
        gpu_skipped(self.config, items)
        longest_first(items)
        opt = self.config.option
        if opt.claims_list:
            list_claims(self.config, items)
            return
        if opt.collectonly:  # nothing runs: nothing to plan or say
            return
        self.plan(items)
        runnable = [i for i in items if not i.get_closest_marker("skip")]
        if (claims := selected(runnable)) and os.environ.get("PYTEST_XDIST_WORKER", "gw0") == "gw0":
            # said once, by the first worker or alone (a planned session says what its plan
            # costs when it starts training it)
            self.runs.progress.note(f"{len(claims)} claim-tier pairs selected" + (
                "" if self.runs.planned else
                f"; {total_line([cost(cid, tier)[1] for cid, tier in claims])}"))
        if opt.claims_max_seeds is None:
            return
        for item in items:
            if (marker := claim_marker(item)) is None or item.get_closest_marker("skip"):
                continue
            tier = claim_tier(item)
            first = claim_looks(item, marker)[0]
            if opt.claims_max_seeds < first:
                raise pytest.UsageError(f"--claims-max-seeds {opt.claims_max_seeds}: below the "
                                        f"first look of {claim_id(item, marker)} [{tier}], "
                                        f"{first} seeds; give at least {first}")

    def pytest_keyboard_interrupt(self, excinfo) -> None:
        """Ctrl-C: the cluster's tasks are cancelled; the cache keeps only whole runs."""
        if self.cluster is not None:
            cancelled = self.cluster.cancel()
            self.runs.progress.note(f"interrupted: {cancelled} runs cancelled on "
                                                  f"the Ray cluster, none of them kept")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        for key, value in report.user_properties:
            if key == PROPERTY:
                self.results[value.nodeid] = value

    @pytest.hookimpl(optionalhook=True)  # pytest-xdist: what a worker found at collection
    def pytest_testnodedown(self, node, error) -> None:
        stale = getattr(node, "workeroutput", {}).get(STALE_OUTPUT)
        if stale:
            self.ledgers.stale = list(stale)

    def sorted_results(self) -> list[Row]:
        return sorted(self.results.values(), key=lambda r: (r.tier, r.id))

    @pytest.hookimpl(tryfirst=True)  # before the terminal's summary, which shows what it wrote
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """The report, and with --claims-update the claims' records, from this session's results (in the
        process that gathers them: alone, or xdist's controller)."""
        if hasattr(self.config, "workerinput") or not self.results:
            return
        results = self.sorted_results()
        folder = Path(self.config.option.claims_report)
        rows = merged(results, folder)
        paths = write_reports(rows, folder, provenance(self.config))
        kept = len(rows) - len(results)
        self.written = ["report: " + ", ".join(str(p) for p in paths)
                        + (f" ({kept} rows of earlier sessions kept)" if kept else "")]
        if self.ledgers.update:
            self.written += [f"ledger: {line}" for line in self.ledgers.write(results)]

    def pytest_terminal_summary(self, terminalreporter, exitstatus) -> None:
        if hasattr(self.config, "workerinput"):
            return
        ran = {"passed", "failed", "skipped", "xfailed", "xpassed", "error"}
        if self.config.option.keyword and terminalreporter.stats.get("deselected") and \
                not (self.config.option.claims_list or self.config.option.collectonly) and \
                not ran & set(terminalreporter.stats) and \
                exitstatus != pytest.ExitCode.INTERRUPTED:  # Ctrl-C before the first result
            terminalreporter.write_line(f"normsys: no claim or test matches -k "
                                        f"'{self.config.option.keyword}'; `pytest claims "
                                        f"--claims-list` lists the claim ids")
        ledgers = self.ledgers
        if self.results:
            terminalreporter.write_sep("=", "normsys claims")
            terminalreporter.write_line(verdict_table(self.sorted_results()))
            for line in self.written:
                terminalreporter.write_line(line)
        failing = ledgers.strict and not ledgers.update
        for line in ledgers.stale_lines():
            terminalreporter.write_line(f"ledger: {line}" + (" (fails under --claims-strict)"
                                                             if failing else ""))


def check_options(opt) -> None:
    """The session's claims options (``config.option``) checked before anything trains: seeds
    and looks a verdict can be made of, seeds in range, a records folder that exists (unless
    --claims-update starts one), an amendment only with the entries it explains."""
    if opt.claims_seeds is not None and opt.claims_seeds < 2:
        raise pytest.UsageError(f"--claims-seeds {opt.claims_seeds}: a verdict needs >= 2 seeds "
                                f"(the t-interval of one value is infinite)")
    if opt.claims_max_seeds is not None and opt.claims_max_seeds < 2:
        raise pytest.UsageError(f"--claims-max-seeds {opt.claims_max_seeds}: a verdict needs "
                                f">= 2 seeds")
    if opt.claims_seed_offset < 0:
        raise pytest.UsageError(f"--claims-seed-offset {opt.claims_seed_offset}: seeds are >= 0")
    most = max(opt.claims_seeds or 0, *(t.seeds for t in TIERS.values()),
               opt.claims_max_seeds or max(t.max_seeds for t in TIERS.values()))
    if opt.claims_seed_offset + most > MAX_SEED:
        raise pytest.UsageError(f"--claims-seed-offset {opt.claims_seed_offset}: seeds are "
                                f"below 2**62 (up to {most} seeds from the offset)")
    if opt.claims_ledger and not opt.claims_update and not Path(opt.claims_ledger).is_dir():
        raise pytest.UsageError(f"--claims-ledger {opt.claims_ledger}: no such folder; name the "
                                f"folder of the claims' records (default claims/ledger/ under the "
                                f"rootdir), or start a new one with --claims-update")
    if opt.claims_amend and not opt.claims_update:
        raise pytest.UsageError("--claims-amend: an amendment is written with the entries it "
                                "explains; add --claims-update")
