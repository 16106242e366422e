"""The claims plugin: the ``claim`` and ``control`` markers and the options, the hooks, and the
fixtures a claim test takes (``claim``, ``run``, ``runs``, ``task_of``); each delegates to the
session's state (normsys.claims.session) and what it reads of an item (normsys.claims.items).

    @NONE_COLLAPSES.mark                 # @pytest.mark.claim(id, statement=..., declared=...)
    def test_none_collapses_with_depth(claim, runs):
        claim.check(runs)

The ``claim`` fixture is a ``Claim`` (normsys.claims.claim): the test runs once, and
``claim.check(runs)`` decides the claim by its declared rule at each look of its plan; then the
plugin makes the decision the claim's row with where it was measured
(normsys.claims.ledger.measured), has the claim's record judge it (normsys.claims.across,
``claims/ledger/<claim id>.json``) and ends the test by it (``conclude``). ``--claims-update``
writes this environment's entries from the run (``--claims-amend`` gives the reason for a changed
rule); ``--claims-strict`` fails claims without a current entry, and a session whose ledger folder
holds records of claims no longer defined. The session's state is one ``ClaimsSession``
(normsys.claims.session) on ``config.stash[SESSION]``: its ``Runs`` (normsys.orchestration.runs),
which the run fixtures fetch through, its ``Ledgers``, its Ray cluster; no module keeps a session's
state. A claim parametrized with a ``Variant`` (e.g. Variant("-nonpad"), see ``variant_tiers``)
gets that suffix on its id. ``pytest claims --claims-list`` lists every claim; ``-k`` matches ids.

Installed, normsys registers this plugin with pytest by its ``pytest11`` entry point: any folder
of claim files is a claims suite. It owns the collection: first (``tryfirst``) every claim and
control is checked and ``--claims-id`` selects, then, after ``-k`` and ``-m``, the session's
``trylast`` hook skips what is marked ``gpu`` on a machine without CUDA (unless ``--claims-ray``
trains on a cluster with GPUs), orders the claims longest first and plans or lists what is left.

Before the first claim starts, the session plans the runs of every selected claim's first look
(or of the later look its record's entries in this environment show it took) and each process
trains its share of them, longest first (``ClaimsSession.pytest_runtestloop``,
normsys.orchestration.runs); a claim open at its first look adds seeds at the looks of its tier
(normsys.claims.verdict), whose runs a pytest-xdist worker done with its own claims trains.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import pytest

from normsys.claims import verdict
from normsys.claims.claim import Claim, ClaimUsageError
from normsys.claims.items import (
    claim_id,
    claim_looks,
    claim_marker,
    claim_tier,
    claim_variant,
    control_ids,
    ids_of,
    own_plan,
    positive_ids,
)
from normsys.claims.report import PROPERTY, Row, write_check
from normsys.claims.session import (
    COUNTER_ENV,
    DEFAULT_REPORT_DIR,
    FETCHED,
    SESSION,
    ClaimRefuted,
    ClaimsSession,
    Ledgers,
    check_options,
    check_report_folder,
    cluster_of,
    data_errors,
    max_seeds_policy,
    owns_counter,
    seed_policy,
)
from normsys.orchestration import workers
from normsys.training.provenance import git_commit

# ----------------------------------------------------------------------------- hooks


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("normsys claims")
    group.addoption("--claims-seeds", type=int, default=None,
                    help=f"seeds per claim (default: each claim's own, {seed_policy()})")
    group.addoption("--claims-seed-offset", type=int, default=0,
                    help="first seed (verdict robustness: rerun claims on other seeds)")
    group.addoption("--claims-report", default=DEFAULT_REPORT_DIR,
                    help=f"folder for the JSON and Markdown report (default {DEFAULT_REPORT_DIR}/)")
    group.addoption("--claims-skip-missing-data", action="store_true",
                    help="skip a claim whose data set is missing instead of failing it")
    group.addoption("--claims-id", action="append", default=[], metavar="ID",
                    help="select the claim ID exactly (a variant's id with its suffix), with its "
                         "negative and positive controls; repeat for more. -k matches "
                         "substrings: -k ID also selects every claim whose id starts with ID")
    group.addoption("--claims-list", action="store_true",
                    help="list the selected claims (id, tier, statement, source) and run nothing")
    group.addoption("--claims-max-seeds", type=int, default=None,
                    help="a claim still inconclusive on its seeds adds seeds at fixed looks "
                         f"({', '.join(map(str, verdict.SCHEDULE[:4]))}, ...) up to N, each look "
                         "at an alpha-spending level "
                         f"(default: {max_seeds_policy()})")
    group.addoption("--claims-update", action="store_true",
                    help="write this run's measurements into the claims' records, as this "
                         "environment's entries (after reviewing them)")
    group.addoption("--claims-amend", default="", metavar="REASON",
                    help="with --claims-update: a claim whose rule differs from its record's is "
                         "amended, with this reason, the date and the old and new rule")
    group.addoption("--claims-strict", action="store_true",
                    help="fail claims with no current entry in their record (CI)")
    group.addoption("--claims-ledger", default="",
                    help="folder of the claims' records (default: claims/ledger/ under the "
                         "rootdir)")
    group.addoption("--claims-ray", default="", metavar="ADDRESS",
                    help="train the runs the cache lacks on a Ray cluster: `local` starts one "
                         "here, `auto` joins the running one ($RAY_ADDRESS), HOST:PORT or "
                         "ray://HOST:PORT names one (pip install -e \".[ray]\")")
    group.addoption("--claims-ray-gpus", type=float, default=0.25, metavar="FRACTION",
                    help="on a cluster with GPUs, the fraction of a GPU each run (or group of "
                         "stacked seeds) asks for (default 0.25: four share a GPU)")
    group.addoption("--claims-ray-cpus", type=int, default=1, metavar="N",
                    help="on a cluster without GPUs, the CPUs (torch threads) each run asks "
                         "for (default 1)")


OWN_RUNS = "own_runs"  # mutation testing leaves these out, as it leaves out the claims
MARKERS = (
    "claim(id, statement, source, seeds=None): an executable claim about normalization",
    "control(*claim_ids): a negative control of these claims: their own measurement and rule "
    "on a case where the effect is absent or reversed, coming out the other way",
    "positive(*claim_ids): a positive control of these claims: their own runs, reading and rule "
    "on a case where the effect is present by construction, coming out supported",
    f"{OWN_RUNS}: set on a control that trains its claims' own experiment (the runs fixture): "
    "minutes of training, as a claim takes",
    "gpu: needs a CUDA GPU (paper tier and GPU benchmarks); skipped without one",
    "slow: takes more than a few seconds on CPU",
)


def pytest_itemcollected(item: pytest.Item) -> None:
    if (control_ids(item) or positive_ids(item)) and "runs" in getattr(item, "fixturenames", ()):
        item.add_marker(OWN_RUNS)


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)
    opt = config.option
    check_options(opt)
    if not hasattr(config, "workerinput"):
        check_report_folder(Path(opt.claims_report))
        from normsys.orchestration.cache import CacheFolderError, check_folder

        try:
            check_folder()
        except CacheFolderError as err:
            raise pytest.UsageError(str(err)) from None
    ledgers = Ledgers(opt.claims_ledger or config.rootpath / "claims" / "ledger",
                             opt.claims_update, opt.claims_strict, opt.claims_amend)
    if opt.claims_update and not hasattr(config, "workerinput") and \
            (why := write_check(ledgers.folder)):  # before any claim trains, not at the end
        raise pytest.UsageError(f"--claims-update: the records' folder {ledgers.folder} cannot "
                                f"be written ({why}); make it writable, or name another with "
                                f"--claims-ledger")
    from normsys.orchestration.runs import (
        Runs,  # torch and the training path: not before a session needs them
    )

    cluster = cluster_of(config)
    # the terminal, before pytest captures it: progress lines of training runs go there
    terminal = os.dup(2)
    session = ClaimsSession(config, ledgers, Runs(trainer=cluster), cluster, terminal)
    config.stash[SESSION] = session
    if not hasattr(config, "workerinput") and \
            (said := workers.oversubscribed(getattr(opt, "numprocesses", None))):
        os.write(terminal, f"normsys: {said}\n".encode())
    config.pluginmanager.register(session, "normsys-claims-session")
    if owns_counter(config):  # one run counter for the session's processes
        import tempfile

        fd, counter = tempfile.mkstemp(prefix="normsys-runs-")
        os.close(fd)
        os.environ[COUNTER_ENV] = counter
    workers.share_the_machine()
    if hasattr(config, "workerinput"):  # one of the session's processes on the terminal
        from normsys.training import train

        train.STEP_BARS = False


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # before xdist's own, whichever loads first
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    return workers.auto_workers()


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The collection's first hook: every claim and control collected is checked, before -k
    and -m deselect (ClaimsSession.collected), and ``--claims-id`` keeps the items of exactly
    those claims. The last is the session's (ClaimsSession.pytest_collection_modifyitems)."""
    config.stash[SESSION].collected(items)
    if wanted := set(config.option.claims_id):
        ids = {item: ids_of(item) for item in items}
        if unknown := sorted(wanted - set().union(*ids.values())):
            raise pytest.UsageError(f"--claims-id {', '.join(unknown)}: no claim collected has "
                                    f"that id (`pytest claims --claims-list` lists every claim's)")
        config.hook.pytest_deselected(items=[i for i in items if not ids[i] & wanted])
        items[:] = [item for item in items if ids[item] & wanted]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    opt = session.config.option
    if opt.claims_list and exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED:
        session.exitstatus = pytest.ExitCode.OK  # listing is what was asked for
    ledgers = session.config.stash[SESSION].ledgers
    if ledgers.strict and ledgers.stale and not ledgers.update and \
            not hasattr(session.config, "workerinput"):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED  # said in the terminal summary


def pytest_unconfigure(config: pytest.Config) -> None:
    if SESSION in config.stash and config.stash[SESSION].cluster is not None:
        config.stash[SESSION].cluster.close()
    if owns_counter(config) and (counter := os.environ.pop(COUNTER_ENV, None)):
        for path in (counter, counter + ".lock"):
            if os.path.exists(path):
                os.unlink(path)


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function):
    """A claim's test runs once, then its decision ends it (``conclude``); a claim decided in a
    way its declaration does not allow fails in one line."""
    claim = pyfuncitem.funcargs.get("claim")
    if not isinstance(claim, Claim):
        return None
    try:
        pyfuncitem.obj(**{name: pyfuncitem.funcargs[name]
                          for name in pyfuncitem._fixtureinfo.argnames})
        row, misuse = claim.row(), ""
    except ClaimUsageError as err:
        row, misuse = None, f"{pyfuncitem.nodeid}: {err}"
    if row is None:
        pytest.fail(misuse, pytrace=False)
    conclude(pyfuncitem, row, pyfuncitem.config.stash[SESSION].ledgers)
    return True


@pytest.fixture(autouse=True)
def claim_runs(request: pytest.FixtureRequest):
    """A claim's runs: the configs its test fetches, for its ledger entry (the settings it was
    decided under) and, kept in the cache folder, for what --claims-list says it costs."""
    marker = claim_marker(request.node)
    if marker is None:
        yield
        return
    runs = request.config.stash[SESSION].runs
    with runs.recording() as fetched:
        request.node.stash[FETCHED] = fetched
        yield
    if own_plan(request.config):  # a replication or a longer plan leaves the tier's index be
        runs.write_index(claim_id(request.node, marker), claim_tier(request.node), fetched)


@pytest.fixture(autouse=True)
def control_runs(request: pytest.FixtureRequest):
    """A negative control's runs, which must not be only its claims' (ClaimsSession.controlled)."""
    with request.config.stash[SESSION].controlled(request.node):
        yield


def _guarded(request: pytest.FixtureRequest, fetch: Callable) -> Callable:
    """``fetch`` with missing or damaged data failing the test with what to do (or, asked with
    --claims-skip-missing-data, skipping it)."""
    skip = request.config.option.claims_skip_missing_data

    def guarded(arg):
        with data_errors(skip):
            return fetch(arg)

    return guarded


@pytest.fixture
def variant():
    """The claim variant ("" for the claim itself); a claim parametrized over variants
    (normsys.claims.params.variant_tiers) overrides it with its parameter."""
    return ""


@pytest.fixture
def run(request: pytest.FixtureRequest):
    """run(config) -> RunRecord: from the session's runs (each read or trained once) and the run
    cache."""
    return _guarded(request, request.config.stash[SESSION].runs.run)


@pytest.fixture
def runs(request: pytest.FixtureRequest):
    """runs([configs]) -> [RunRecord]: like run, with each configuration's seeds stacked together
    on a GPU, and the runs no other worker holds trained first."""
    return _guarded(request, request.config.stash[SESSION].runs.runs)


@pytest.fixture
def task_of(request: pytest.FixtureRequest):
    """task_of(config) -> its data (tasks.make_task), loaded once per session."""
    return _guarded(request, request.config.stash[SESSION].runs.task_of)


@pytest.fixture
def claim(request: pytest.FixtureRequest, claim_runs) -> Claim:
    """The claim of the test's marker; it records the runs ``claim_runs`` sees the test fetch."""
    marker = claim_marker(request.node)
    if marker is None:
        raise pytest.UsageError(f"{request.node.nodeid} uses the claim fixture without "
                                f"@pytest.mark.claim(id, statement=..., source=...)")
    item = request.node
    marked = {**marker.kwargs, "id": claim_id(item, marker), "tier": claim_tier(item),
              "variant": claim_variant(item), "plan": claim_looks(item, marker)}
    opt = request.config.option
    return Claim(marked["id"], marked["tier"], marked["plan"], marked.get("declared"),
                 marked["variant"], marked.get("statement", ""), marked.get("source", ""),
                 opt.claims_seed_offset, item.stash[FETCHED], Path(opt.claims_report),
                 item.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    """A claim that ended without a verdict (an error, a skip) is reported as one (unfinished)."""
    report = (yield).get_result()
    if (result := unfinished(item, report, call)) is not None:
        report.user_properties.append((PROPERTY, result))


@pytest.hookimpl(hookwrapper=True)
def pytest_report_to_serializable(config, report):
    """A claim's Row crosses from a pytest-xdist worker (or into a report log) as JSON; within
    one process it stays the object."""
    data = (yield).get_result()
    if data is not None and "user_properties" in data:
        data["user_properties"] = [(k, json.dumps(asdict(v)) if k == PROPERTY else v)
                                   for k, v in data["user_properties"]]


@pytest.hookimpl(hookwrapper=True)
def pytest_report_from_serializable(config, data):
    """The Row made again from the JSON a worker sent."""
    report = (yield).get_result()
    if report is not None:
        report.user_properties = [(k, Row(**json.loads(v)) if k == PROPERTY else v)
                                  for k, v in report.user_properties]


def conclude(item: pytest.Item, row: Row, ledgers: Ledgers) -> None:
    """End a claim's test (``item``) by its decided ``row``, judged by the claim's record
    (Ledgers.judged): a record that fails it (or none, under --claims-strict) fails; supported
    passes; refuted raises ClaimRefuted, which its record makes a strict xfail (or an xfail
    where there is no entry to hold it to, under --claims-update, or where it moved across
    environments); inconclusive is a skip."""
    reported, judgement = ledgers.judged(row)
    item.user_properties.append((PROPERTY, reported))
    said = f"[{row.id}/{row.tier}]"
    text = f"{said} {row.statistic}: {row.reason}"
    unrecorded = judgement.unrecorded
    if judgement.fails or (unrecorded and ledgers.strict):
        pytest.fail(f"{said} {judgement.message}" + (" (--claims-strict)" if unrecorded else ""),
                    pytrace=False)
    if row.verdict == verdict.REFUTED:
        if unrecorded or ledgers.update or judgement.moved:
            pytest.xfail(f"refuted ({judgement.status}): {text}")
        raise ClaimRefuted(f"{text}; {judgement.message}")
    if row.verdict == verdict.INCONCLUSIVE:
        pytest.skip(f"inconclusive: {text}; {judgement.message}")


def unfinished(item: pytest.Item, report: pytest.TestReport, call) -> Row | None:
    """The report of a claim that ended without a verdict (its test failed before deciding, or
    was skipped): a row that says so, with the error; None for any other report."""
    marker = item.get_closest_marker("claim")
    if marker is None or any(k == PROPERTY for k, _ in report.user_properties):
        return None
    if not (report.failed or (report.skipped and report.when == "call")):
        return None
    return Row(
        verdict="error" if report.failed else "not run", id=claim_id(item, marker),
        tier=claim_tier(item), statement=marker.kwargs.get("statement", ""),
        source=marker.kwargs.get("source", ""),
        reason=str(call.excinfo.value)[:500] if call.excinfo else "",
        seconds=call.duration, nodeid=item.nodeid, measured=time.strftime("%Y-%m-%d %H:%M"),
        commit=git_commit())
