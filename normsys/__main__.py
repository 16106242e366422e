"""Command line.

    python -m normsys list                                   presets, norm kinds, config fields
    python -m normsys train --model encoder --norm l2 --seed 0 [--set key=value] [--json PATH]
    python -m normsys train ... --dry-run                    the resolved config, no training
    python -m normsys compare [--tier cpu] [COLUMN ...] [--markdown]   the claims' entries
                                                             side by side, per environment
    python -m normsys tables [--check]                       docs/verdicts.md, its figure, diagnostics.md
                                                             from every claim's record
    python -m normsys catalog [--check]                      docs/claims.md: every claim as
                                                             declared (trains, reads, decides)
    python -m normsys scorecard mynorm.py:MyNorm [--out DIR]  a new norm beside the built-in ones
    python -m normsys scorecard --builtin [--check]          the built-in kinds compared (or
                                                             whether claims/gallery's is now)
    python -m normsys run-times [--tier cpu] [--cache DIR]   claims/run-times-<tier>.json: each
                                                             claim's recorded training time

Any config field can be overridden with ``--set section.field=value`` (repeatable); ``--norm``,
``--seed``, ``--method`` and ``--tier`` are shortcuts. ``train`` prints a short summary and, with
``--json PATH``, writes the whole run record. Every error is one ``error: ...`` line, exit 2.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import tempfile
from pathlib import Path

import torch

from normsys import catalog, declarations, scorecard
from normsys.claims import ledger, report
from normsys.claims.report import write_check
from normsys.orchestration import runtimes, usernorm
from normsys.orchestration.cache import check_folder
from normsys.orchestration.progress import Progress, label
from normsys.orchestration.runs import Runs, meta_pass, takes_tokens
from normsys.orchestration.workers import RUN_THREADS, share_the_machine
from normsys.training.config import EXPERIMENTS, PRESETS, RunConfig, preset
from normsys.training.data import DataError, ag_news_pool
from normsys.training.models import FAMILIES, Attention, build_model
from normsys.training.norms import NORMS
from normsys.training.store import atomic_write_text, cache_root
from normsys.training.tasks import Classify, LanguageModel
from normsys.training.tiers import DEFAULT, TIERS
from normsys.training.train import train

CHECKOUT = Path(__file__).parents[1]  # the checkout this package lies in: its records and pages
LEDGER = CHECKOUT / "claims" / "ledger"


class UsageError(Exception):
    """A command line that cannot be carried out; the message says why and what is accepted."""


class PartlyFailed(Exception):
    """Work done and written with some of it failed: ``args``: what it says, and what failed."""


class StaleError(Exception):
    """A generated page that is not what its sources make now (exit 1, as a failed check)."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C after some of the work was written: ``args[0]`` says what was."""


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own errors, in the one format
        raise UsageError(message)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = Parser(prog="python -m normsys", description=__doc__,
                    formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="presets, norm kinds and config fields with their defaults")
    tr = sub.add_parser("train", help="train one run and print its summary")
    tr.add_argument("--model", default="encoder", choices=sorted(PRESETS),
                    help="the experiment (default: encoder) at the tier --tier names, "
                         "the CPU tier's sizes unless told")
    tr.add_argument("--norm", help="norm kind, e.g. layernorm, l2, none")
    tr.add_argument("--seed", type=int)
    tr.add_argument("--method", choices=["bp", "fa", "dfa"])
    tr.add_argument("--tier", choices=list(TIERS),
                    help=f"the tier whose settings and data it takes (default: {DEFAULT})")
    tr.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                    help="override any config field, e.g. --set train.epochs=2")
    tr.add_argument("--json", type=Path, help="write the run record as JSON to this path")
    tr.add_argument("--no-cache", action="store_true", help="train even if a cached run exists")
    tr.add_argument("--dry-run", action="store_true",
                    help="print the resolved config and its fingerprint, train nothing")
    tr.add_argument("--allow-cpu-paper", action="store_true",
                    help="train a paper-tier config without a GPU (hours, and the full data)")
    cmp = sub.add_parser("compare", help="the claims' entries of a tier side by side, one column "
                                          "per numeric environment and seed plan, with an "
                                          "agreement line")
    cmp.add_argument("columns", nargs="*", metavar="COLUMN",
                     help="columns as the table heads them (default: every one of the tier)")
    cmp.add_argument("--tier", default=DEFAULT, choices=list(TIERS))
    cmp.add_argument("--ledger", type=Path, default=LEDGER)
    cmp.add_argument("--markdown", action="store_true", help="the table as Markdown")
    tb = sub.add_parser("tables", help="write docs/verdicts.md, its figure and "
                                       "docs/diagnostics.md from every claim's record")
    tb.add_argument("--ledger", type=Path, default=LEDGER)
    tb.add_argument("--out", type=Path, default=CHECKOUT / "docs" / "verdicts.md")
    tb.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if the page is not what the ledgers make")
    am = sub.add_parser("amend-reason", help="correct the reason a claim's rule in force was "
                                             "given, in every record whose reason says TEXT: "
                                             "an amendment that keeps the rule")
    am.add_argument("--of", required=True, metavar="TEXT",
                    help="words of the reason it corrects, as the records say them")
    am.add_argument("--reason", required=True, help="the corrected reason")
    am.add_argument("--ledger", type=Path, default=LEDGER)
    ct = sub.add_parser("catalog", help="write docs/claims.md: every claim as declared (what it "
                                        "trains, reads and decides)")
    ct.add_argument("--out", type=Path, default=catalog.PAGE)
    ct.add_argument("--check", action="store_true",
                    help="write nothing; exit 1 if the page is not what the declarations make")
    rt = sub.add_parser("run-times", help="write claims/run-times-<tier>.json from a run cache's "
                                          "claim indexes: each claim's runs and training time")
    rt.add_argument("--tier", choices=list(TIERS), default=DEFAULT)
    rt.add_argument("--cache", type=Path, default=None,
                    help="the run cache folder (default: $NORMSYS_CACHE or ~/.cache/normsys)")
    rt.add_argument("--replace", action="store_true",
                    help="write the cache's claims alone (default: merge them into the committed "
                         "table, whose other claims and controls are kept while they exist)")
    sc = sub.add_parser("scorecard", help="a norm kind judged by every norm-generic claim, "
                                          "beside the built-in kinds")
    sc.add_argument("norms", nargs="*", metavar="MODULE:CLASS",
                    help="a norm to add: package.module:Class or path/to/file.py:Class (a class "
                         "or function taking d, returning an nn.Module)")
    sc.add_argument("--builtin", action="store_true", help="the built-in kinds alone")
    sc.add_argument("--name", action="append", default=[],
                    help="the row name of each norm given (default: its class name in lower case)")
    sc.add_argument("--against", default=",".join(scorecard.BUILTIN_ROWS),
                    help="the built-in rows, comma-separated (default: all)")
    sc.add_argument("--tier", choices=list(TIERS), default=DEFAULT)
    sc.add_argument("--out", type=Path, default=None,
                    help="folder for scorecard.json, .md and .png (with --builtin: "
                         "scorecard-builtin-<tier>.*; default: scorecard/, and with --check "
                         "the checkout's claims/gallery)")
    sc.add_argument("--workers", type=int, default=None,
                    help="training processes, >= 1 (default: one per core on the CPU, one on a "
                         "GPU); with 1 it trains here, on one thread")
    sc.add_argument("--threads", type=int, default=RUN_THREADS,
                    help=f"torch threads of each training process on the CPU (default "
                         f"{RUN_THREADS}, as the claims train: a run's numbers depend on it, and "
                         f"the run cache keeps runs of each thread count apart)")
    sc.add_argument("--ray", default="", metavar="ADDRESS",
                    help="train on a Ray cluster instead: `local`, `auto` ($RAY_ADDRESS), "
                         "HOST:PORT or ray://HOST:PORT (pip install -e \".[ray]\")")
    sc.add_argument("--allow-cpu-paper", action="store_true",
                    help="run the paper tier without a GPU (hours of training)")
    sc.add_argument("--dry-run", action="store_true",
                    help="list the runs it needs, cached or with their estimated cost")
    sc.add_argument("--check", action="store_true",
                    help="with --builtin: train nothing, write nothing; exit 1 if the committed "
                         "built-in scorecard of --tier (in --out) is not what --builtin "
                         "makes of this checkout (its training code, runs and rules)")
    return parser.parse_args(argv)


def check_builtin(args: argparse.Namespace) -> str:
    """scorecard --builtin --check: whether the committed built-in scorecard in --out (the
    checkout's gallery unless told) is what --builtin makes of this code; StaleError where not."""
    if not args.builtin:
        raise UsageError("scorecard --check: checks the committed built-in scorecard; add "
                         "--builtin (and --tier)")
    folder = args.out or scorecard.GALLERY
    if why := scorecard.stale(args.tier, folder):
        raise StaleError(f"{why}: run python -m normsys scorecard --builtin --tier "
                         f"{args.tier} --out {args.out or 'claims/gallery'}, and commit what "
                         f"it writes")
    return f"{scorecard.builtin_json(args.tier, folder)}: up to date"


def check_score_args(args: argparse.Namespace) -> None:
    """The scorecard's options checked before anything loads or trains (UsageError: what was
    wrong and what is accepted)."""
    if args.name and len(args.name) != len(args.norms):
        raise UsageError(f"scorecard: {len(args.name)} --name for {len(args.norms)} norms")
    if blank := [n for n in args.name if not n.strip()]:
        raise UsageError(f"--name {blank[0]!r}: a row's name must say something; give a word "
                         f"(e.g. --name mynorm)")
    if twice := sorted({n for n in args.norms if args.norms.count(n) > 1}):
        raise UsageError(f"scorecard: {twice[0]} given twice; give each norm once")
    if twice := sorted({n for n in args.name if args.name.count(n) > 1}):
        raise UsageError(f"--name {twice[0]} given twice: each row needs a name of its own")
    if args.ray:
        try:
            import ray  # noqa: F401  (the cluster's runs are planned before anything trains)
        except ImportError:
            raise UsageError(f"--ray {args.ray}: Ray is not installed here; pip install "
                             f"'normsys[ray]', or drop --ray to train on this machine") from None
    if TIERS[args.tier].gpu and not torch.cuda.is_available() and not args.allow_cpu_paper \
            and not args.ray:
        raise UsageError(f"scorecard --tier {args.tier}: no CUDA device here, and the {args.tier} "
                         f"tier on the CPU takes hours (and the full data); add --allow-cpu-paper "
                         f"to run it anyway")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers {args.workers}: give 1 or more training processes")
    if args.workers is not None and args.workers > (cores := os.cpu_count() or 1):
        raise UsageError(f"--workers {args.workers}: at most {cores}, the cores here (each "
                         f"process trains on --threads of them)")
    if not [n for n in args.against.split(",") if n]:
        raise UsageError(f"--against {args.against!r}: name at least one built-in kind, "
                         f"comma-separated ({', '.join(scorecard.BUILTIN_ROWS)})")
    if args.threads < 1:
        raise UsageError(f"--threads {args.threads}: give 1 or more torch threads")
    if args.out.exists() and not args.out.is_dir():
        raise UsageError(f"--out {args.out}: is a file; give a folder")


def score(args: argparse.Namespace) -> str:
    """The scorecard of the norms given (or of the built-in kinds): checked, planned, trained,
    judged and written, or with --dry-run what it would train."""
    if args.norms and args.builtin:
        raise UsageError(f"scorecard: --builtin scores the built-in kinds alone; drop it to score "
                         f"{', '.join(args.norms)} beside them")
    if not args.norms and not args.builtin:
        raise UsageError("scorecard: give a norm (e.g. mynorm.py:MyNorm) or --builtin")
    if args.check:
        return check_builtin(args)
    args.out = args.out or Path("scorecard")
    check_score_args(args)
    check_folder()  # before the layer check reads the models' data, whose tokenizers it keeps
    specs = list(zip(args.norms, args.name or [""] * len(args.norms), strict=True))
    for spec, name in specs:  # first, in a process of its own: what this one cannot survive
        if problem := scorecard.isolated_problem(spec, name):
            raise UsageError(problem)
    names = [usernorm.load(spec, name) for spec, name in specs]
    specs = [(spec, name) for (spec, _), name in zip(specs, names, strict=True)]
    rows = names + scorecard.builtin_rows([n for n in args.against.split(",") if n])
    plan = scorecard.plan(list(dict.fromkeys(rows)), args.tier)
    scorecard.check_layers(plan, names)
    if not args.dry_run and (why := write_check(args.out)):  # the norms fit: before training
        raise UsageError(f"--out {args.out}: cannot be created or written ({why}); give a folder "
                         f"that can")
    stem = scorecard.builtin_name(args.tier) if args.builtin else "scorecard"
    for path in (args.out / f"{stem}.{kind}" for kind in ("json", "md", "png")):
        if path.is_symlink() or path.exists():  # what writing would replace, said before training
            check_writable_file(path, "--out")
    cuda = torch.cuda.is_available() and TIERS[args.tier].gpu
    # the runs as they will train: on --threads each in worker processes on the CPU
    threads = None if cuda else args.threads
    if names:  # the built-in rows as the committed built-in scorecard holds them, if it can
        plan.known, why = scorecard.committed(plan, scorecard.environment_of(threads))
        read = (f"{len(plan.known)} cells of the built-in kinds read from the committed "
                f"built-in scorecard (claims/gallery)" if plan.known else
                f"the built-in kinds' runs trained here: {why}")
    else:
        read = "the built-in kinds' runs trained here (--builtin reads no committed results)"
    workers = args.workers or (1 if cuda else max(1, min(os.cpu_count() or 1, len(plan.configs))))
    costs, seconds, unknown = scorecard.estimate(plan, Runs(), threads)
    said = (f"{scorecard.cost_line(costs, seconds, unknown, 1 if args.ray else workers)}; "
            f"{read}")
    if args.dry_run:
        return "\n".join([said, *(f"  {label(cfg)}: {cost}" for cfg, cost in costs)])
    reach, written, unwritten = scorecard.builtin_reach(args.tier), [], []

    def publish(records: dict) -> tuple[dict, list[Path]]:
        """Judge and write the columns whose runs are all in, each as soon as it is: a later
        failure loses no finished judgement. A folder that stops taking files (a full disk)
        stops no training: the last failure to write is said at the end."""
        ready = scorecard.complete(plan, records)
        table = scorecard.cells(plan, records, ready, reach, scorecard.PROPERTIES)
        prov = {**scorecard.provenance(args.tier, specs, list(records.values())), "read": read}
        if missing := sorted({stat for stat, _ in plan.cells} - {s.name for s in ready}):
            prov["partial"] = (f"{len(missing)} columns still to come ({', '.join(missing)}): "
                               f"their runs were not all in when it was written (the same "
                               f"command again finishes it)")
        written[:] = ready
        try:
            paths = scorecard.write(args.out, table, prov, ready, set(names) or None, stem)
        except OSError as err:
            unwritten[:] = [f"--out {args.out}: writing the scorecard failed ({err.strerror or err})"
                            f"; every run is cached in {cache_root()}: the same command again "
                            f"writes it without training them"]
            return table, []
        unwritten.clear()
        return table, paths

    def done(records: dict) -> None:
        if len(scorecard.complete(plan, records)) > len(written):
            publish(records)

    if not cuda:  # the readings (and any run trained here) on the claims' thread count
        torch.set_num_threads(args.threads)
    try:
        if args.ray:
            records = on_cluster(args, plan, specs, said, done)
        else:
            print(f"scorecard: {said}", file=sys.stderr, flush=True)  # before any training
            with tempfile.TemporaryDirectory() as tmp:  # the tally the worker processes share
                runs = Runs(Progress(os.dup(2), Path(tmp) / "tally"))
                runs.progress.expect(seconds, workers)  # each trained run: k of N, time left
                with runs.progress.bar():
                    records = scorecard.fetch(plan, specs, workers, runs, args.threads, done)
    except KeyboardInterrupt:
        if not written or unwritten:
            raise
        raise Interrupted(f"interrupted: stopped, with every training process; the "
                          f"{len(written)} columns whose runs were all in were written to "
                          f"{args.out} before it, the files marked partial, the others not "
                          f"(the same command again trains only the runs not cached)") from None
    table, paths = publish(records)
    said = f"{scorecard.as_text(table)}\n\nwritten: {', '.join(map(str, paths)) or 'nothing'}"
    if unwritten:
        raise PartlyFailed(said, unwritten[0])
    if plan.failed:
        kinds = sorted({cfg.model.norm for cfg in plan.failed})
        raise PartlyFailed(said, f"{len(plan.failed)} run(s) of {', '.join(kinds)} failed (each "
                                 f"said above); their cells read 'failed', every other cell is "
                                 f"judged and written")
    return said


def on_cluster(args: argparse.Namespace, plan: scorecard.Plan, specs: list[tuple[str, str]],
               said: str, done) -> dict:
    """The plan's runs trained on the Ray cluster at ``args.ray`` (all submitted at once,
    longest first), kept in the local run cache; ``said`` (the plan's cost) is printed once the
    cluster is joined, ``done`` handed the records as they arrive (scorecard.fetch)."""
    from normsys.orchestration.cluster import Cluster, ClusterError

    try:
        cluster = Cluster(args.ray, specs=[(usernorm.absolute(s), n) for s, n in specs])
    except ClusterError as err:
        raise UsageError(f"--ray: {err}") from None
    try:
        if TIERS[args.tier].gpu and not cluster.cuda and not args.allow_cpu_paper:
            raise UsageError(f"scorecard --tier {args.tier} --ray {args.ray}: the cluster has no "
                             f"GPU; add --allow-cpu-paper to train the {args.tier} tier on its "
                             f"CPUs")
        print(f"scorecard: {said}", file=sys.stderr, flush=True)  # before any training
        runs = Runs(Progress(os.dup(2)), trainer=cluster)
        runs.plan([plan.configs])
        return scorecard.fetch(plan, specs, 1, runs, done=done)
    finally:
        cluster.close()


def compare(args: argparse.Namespace) -> str:
    if not any(args.ledger.glob("*.json")):
        raise UsageError(f"--ledger {args.ledger}: no claim records there; give the folder of "
                         f"the records (claims/ledger/)")
    try:
        header, rows, agreement = report.compare(ledger.records(args.ledger), args.tier,
                                                 args.columns)
    except ledger.LedgerError as err:
        raise UsageError(str(err)) from None
    table = report.as_markdown(header, rows) if args.markdown else report.as_text(header, rows)
    return f"{table}\n\n{agreement}"


def run_times(args: argparse.Namespace) -> str:
    """The tier's recorded run times, from the claim indexes of a run cache."""
    cache = args.cache or cache_root()
    if cache is None:
        raise UsageError("run-times: NORMSYS_CACHE is off; give --cache DIR")
    controls = runtimes.controls_defined()
    measured = runtimes.measure(cache, args.tier, controls)
    declared = {cid for cid, tiers in declarations.tiers_run().items() if args.tier in tiers}

    def kept(row: str) -> bool:  # a claim still declared at the tier, a control still defined
        return not runtimes.undefined(row, controls) if row.startswith("control-") else \
            row in declared

    try:
        table = measured if args.replace else \
            runtimes.merged(runtimes.read(args.tier), measured, kept)
    except ValueError as err:
        raise UsageError(f"run-times: {err}") from None
    path = runtimes.write(table)
    _, gone = runtimes.indexes_of(cache, args.tier, controls)
    held = len(table["claims"]) - len(measured["claims"])
    return f"wrote {path}: {len(table['claims'])} claims" + \
        (f" ({len(measured['claims'])} measured in the cache, {held} kept from the table)"
         if held else "") + "".join(
        f"\nleft out {p}: a control's index whose test the claim files no longer define"
        for p in gone)


def written(args: argparse.Namespace, text: str, page: Path | None = None) -> str:
    """A generated page written to ``page`` (``args.out`` unless given; or, ``args.check``,
    whether it is that text)."""
    page = page or args.out
    if args.check:
        if not page.is_file() or page.read_text() != text:
            raise StaleError(f"{page} is stale: run python -m normsys {args.command}")
        return f"{page}: up to date"
    page.write_text(text)
    return f"wrote {page}"


def page_out(args: argparse.Namespace) -> None:
    """A page's --out, checked before the page is computed (minutes for some): a file in a
    folder that can be written."""
    if args.check:
        return
    if args.out.is_dir():
        raise UsageError(f"--out {args.out}: is a folder; give the page's file (e.g. "
                         f"{args.out / 'page.md'})")
    if why := write_check(args.out.parent):
        raise UsageError(f"--out {args.out}: cannot be written ({why}); give a file in a folder "
                         f"that can")


def tables(args: argparse.Namespace) -> str:
    """docs/verdicts.md, its figure and diagnostics.md beside it from the claims' records (or,
    --check, whether the pages are what they make: the figure is drawn from the same records)."""
    page_out(args)
    if not any(args.ledger.glob("*.json")):
        raise UsageError(f"--ledger {args.ledger}: no claim records there; give the folder of "
                         f"the records (claims/ledger/)")
    try:
        pages = report.docs(args.ledger, None if args.check else args.out.with_suffix(".png"))
    except ledger.LedgerError as err:
        raise UsageError(str(err)) from None
    named = {args.out: pages.pop("verdicts.md")} | \
        {args.out.with_name(name): text for name, text in pages.items()}
    return "\n".join(written(args, text, out) for out, text in named.items())


def amend_reason(args: argparse.Namespace) -> str:
    """Each record whose rule in force was given a reason saying ``--of``, its reason corrected
    (ledger.reason_corrected) and written."""
    paths = sorted(args.ledger.glob("*.json"))
    if not paths:
        raise UsageError(f"--ledger {args.ledger}: no claim records there")
    corrected = []
    try:
        for path in paths:
            if (after := ledger.reason_corrected(ledger.read(path), args.of, args.reason)):
                ledger.write(path, after)
                corrected.append(after.claim)
    except ledger.LedgerError as err:
        raise UsageError(str(err)) from None
    if not corrected:
        raise UsageError(f"no record's rule in force was given a reason that says {args.of!r}")
    return f"corrected the reason of {len(corrected)} of {len(paths)} records: " + \
        ", ".join(corrected)


def claims_page(args: argparse.Namespace) -> str:
    """docs/claims.md from the claims' declarations (or, --check, whether it is)."""
    page_out(args)
    return written(args, catalog.page())


def overrides(args: argparse.Namespace) -> dict[str, str]:
    """The config fields the options and each ``--set`` change, by name: a field named twice
    (two --set, or --set beside the option that sets it) is refused, as is a value a run cannot
    take (nan, one beyond a float, one that rounds to 0)."""
    options = {"model.norm": ("--norm", args.norm), "train.seed": ("--seed", args.seed),
               "train.method": ("--method", args.method), "data.tier": ("--tier", args.tier)}
    given = {key: (flag, value) for key, (flag, value) in options.items() if value is not None}
    changes = {key: value for key, (_, value) in given.items()}
    named = {key: f"{flag} {value}" for key, (flag, value) in given.items()}
    for item in args.set:
        key, sep, value = item.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            raise UsageError(f"--set {item}: expected SECTION.FIELD=VALUE, e.g. train.epochs=2")
        if key in named:
            raise UsageError(f"--set {item} and {named[key]} both set {key}: give it once")
        if why := unfit_number(value):
            raise UsageError(f"--set {item}: {why}")
        changes[key], named[key] = value, f"--set {item}"
    return changes


def unfit_number(text: str) -> str:
    """Why a number a --set gives is no value a run can take ('' where it is, or is no number):
    nan, so large it reads as inf, or so small it rounds to 0."""
    try:
        value = float(text)
    except ValueError:
        return ""  # not a number: the config's own check names what the field takes
    if math.isnan(value):
        return "nan is no value a run can take; give a finite number"
    if math.isinf(value) and "inf" not in text.lower():  # inf itself: the config names it
        return f"{text} is beyond a float (it reads as {value}); give a finite number"
    if value == 0 and any(d in text.lower().split("e")[0] for d in "123456789"):
        return f"{text} rounds to 0 as a float; give 0, or a number a float can hold " \
               f"(down to ~1e-308)"
    return ""


def resolve(args: argparse.Namespace) -> RunConfig:
    """The run's config, checked before any work starts."""
    cfg = preset(args.model, args.tier or DEFAULT, **overrides(args))
    t = cfg.train
    if cfg.data.name != "random" and not t.steps and not t.epochs:
        raise UsageError("train.epochs=0 and train.steps=0: the run would train no steps; use "
                         "train.epochs >= 1 or train.steps >= 1")
    if args.json is not None:
        check_writable_file(args.json, "--json")
    if t.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("train.device=cuda but no CUDA device is available here; use "
                         "train.device=cpu or auto")
    if TIERS[cfg.data.tier].gpu and not torch.cuda.is_available() and not args.allow_cpu_paper:
        raise UsageError(f"data.tier={cfg.data.tier}: no CUDA device here, and a {cfg.data.tier}-"
                         f"tier run on the CPU takes hours (and the full data); add "
                         f"--allow-cpu-paper to train it anyway, or use the {DEFAULT} tier")
    with torch.device("meta"):  # the model's structure, checked without memory or random draws
        model = build_model(cfg.model)
    parameters = sum(p.numel() for p in model.parameters())
    memory, where = device_memory(cfg)
    if (need := parameters * TRAINING_BYTES) > memory / 2:  # before anything allocates
        said = f" with {' '.join(f'--set {s}' for s in args.set)}" if args.set else ""
        raise UsageError(f"the {cfg.model.family} model{said}: its {parameters:,} parameters "
                         f"would take {need / 2**30:,.0f} GiB to train (weights, gradients and "
                         f"Adam's two moments, 4 bytes each), more than half of {where}'s "
                         f"{memory / 2**30:,.0f} GiB; give smaller sizes (model.d, model.layers)")
    if cfg.data.name == "ag_news":  # padded to seq_len as it is tokenized, before any batch
        train, held, _ = ag_news_pool(cfg.data.tier)
        tokens = (len(train) + len(held)) * cfg.model.seq_len
        if (need := tokens * TOKENIZING_BYTES) > memory / 2:
            raise UsageError(f"model.seq_len={cfg.model.seq_len}: the {cfg.data.name} text padded "
                             f"to it is {tokens:,} tokens ({len(train) + len(held):,} rows), "
                             f"which would take {need / 2**30:,.0f} GiB to tokenize "
                             f"({TOKENIZING_BYTES} bytes a token), more than half of {where}'s "
                             f"{memory / 2**30:,.0f} GiB; give a shorter model.seq_len")
    names = dict(model.named_modules())
    if unknown := [n for n in t.probe if n not in names]:
        top = [n for n in names if n and n.count(".") <= 1][:12]
        raise UsageError(f"train.probe: no layer named {unknown} in {cfg.model.family}; "
                         f"layers include {', '.join(top)}")
    return cfg


def check_writable_file(path: Path, option: str) -> None:
    """A file that can be written: not a folder, a link or a device (which writing it would
    replace with a file), in a folder that exists and can be written."""
    if path.is_dir():
        raise UsageError(f"{option} {path}: is a folder; give a file path, e.g. {path / 'run.json'}")
    if path.is_symlink() or (path.exists() and not path.is_file()):
        what = "a symbolic link" if path.is_symlink() else "no regular file (a device, a pipe)"
        raise UsageError(f"{option} {path}: is {what}, which writing the record would replace "
                         f"with a file; give the path of a file")
    folder = path.parent
    if not folder.is_dir():
        raise UsageError(f"{option} {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UsageError(f"{option} {path}: not writable")


def listing() -> str:
    lines = ["presets:"]
    lines += [f"  {name:<14} {cfg.model.family} on {cfg.data.name} ("
              + (f"its settings at the {name.rpartition('-')[2]} tier)" if name not in EXPERIMENTS
                 else "its settings)") for name, cfg in PRESETS.items()]
    lines += ["norm kinds:"] + [f"  {kind:<14} {k.description}" for kind, k in NORMS.items()]
    lines += ["model families:"] + [f"  {name:<14} {cls.__doc__.splitlines()[0]}"
                                    for name, cls in FAMILIES.items()]
    lines.append("config fields (defaults; override with --set section.field=value):")
    for section in dataclasses.fields(RunConfig):
        for f in dataclasses.fields(section.default_factory()):
            lines.append(f"  {section.name}.{f.name:<18} {getattr(section.default_factory(), f.name)!r}")
    return "\n".join(lines)


def summary(record) -> str:
    m = record.metrics
    lines = [f"run {record.fingerprint}  ({record.env['device']}, trained in "
             f"{record.wall_time:.1f} s on {record.env.get('date', '?')}, {record.steps} steps"
             f"{', DIVERGED' if record.diverged else ''})",
             f"data: {record.data_source}"]
    lines += [f"  {k:<12} {v:.4f}" for k, v in m.items()]
    for name, p in record.probes.items():
        lines.append(f"  erank[{name}] = {p['erank']:.2f}  (rho {p['rho']:.3f}, "
                     f"stable rank {p['stable_rank']:.2f})")
    return "\n".join(lines)


def takes_the_data(cfg: RunConfig, task, settings: list[str]) -> None:
    """Two examples of the data through the model's structure (on the meta device: shapes only,
    no memory, no random draws) before anything trains: a setting the model and the data cannot
    take together (an input width, a patch size, more rows than the data has, a sequence whose
    attention scores outgrow the memory) is one error line, not a traceback from inside
    training or a machine swapping. ``settings``: the --set overrides, named in the error."""
    said = f" with {' '.join(f'--set {s}' for s in settings)}" if settings else ""
    for field, have in ((("n_train", len(task.y_train)), ("n_test", len(task.y_test)))
                        if isinstance(task, Classify) else ()):
        if getattr(cfg.data, field) > have:
            raise UsageError(f"data.{field}={getattr(cfg.data, field)}: the {cfg.data.name} data "
                             f"has {have:,} {field.removeprefix('n_')} rows; give at most "
                             f"{have:,} (0 takes them all)")
    if isinstance(task, LanguageModel) and cfg.model.seq_len + 1 >= len(task.val_ids):
        raise UsageError(f"model.seq_len={cfg.model.seq_len}: the {cfg.data.name} validation "
                         f"text has {len(task.val_ids):,} characters; give a model.seq_len below "
                         f"{len(task.val_ids) - 1:,}")
    # two examples' worth (a language model's probe is a training batch): shapes, not memory
    x, _ = task.probe_batch(cfg.override(**{"train.batch_size": min(cfg.train.batch_size, 2)}))
    memory, where = device_memory(cfg)
    if (batch := cfg.train.batch_size * x[0].numel() * 4) > memory / 2:  # its inputs alone
        raise UsageError(f"train.batch_size={cfg.train.batch_size}: a batch's inputs alone would "
                         f"take {batch / 2**30:,.0f} GiB ({x[0].numel():,} values an example, 4 "
                         f"bytes each), more than half of {where}'s {memory / 2**30:,.0f} GiB; "
                         f"give a smaller train.batch_size")
    # the pass at a short length where the model reads a sequence (a recurrent model steps
    # through every position, even on the meta device), its sizes scaled to the run's length
    length = x.shape[1] if takes_tokens(cfg.model) else 1
    short = min(length, PROBE_LENGTH)
    probe = cfg.override(**{"model.seq_len": short}) if length > short else cfg
    try:
        inputs, kept = meta_pass(probe, x[:, :short] if length > short else x, Attention)
    except (RuntimeError, ValueError, IndexError, TypeError) as err:
        raise UsageError(f"the {cfg.model.family} model{said} cannot take the {cfg.data.name} data "
                         f"(an example is {'x'.join(map(str, x.shape[1:]))}): "
                         f"{str(err).splitlines()[0]}; `python -m normsys list` gives each "
                         f"preset's fields and defaults") from None
    stretch, batch = length / short, cfg.train.batch_size
    lengths = [(m.heads, round(shape[1] * stretch)) for m, shape in inputs]
    scores = sum(batch * heads * t * t * 4 for heads, t in lengths)
    if scores > memory / 2:
        heads, t = lengths[0]
        raise UsageError(f"the {cfg.model.family} model{said}: its attention scores alone would "
                         f"take {scores / 2**30:,.0f} GiB to train (batch {batch} "
                         f"x {heads} heads x {t:,}^2 positions x 4 bytes x {len(lengths)} "
                         f"attentions), more than half of {where}'s {memory / 2**30:,.0f} GiB; "
                         f"give a shorter model.seq_len or a smaller train.batch_size")
    if (need := kept / 2 * stretch * batch) > memory / 2:
        scaled = f", measured at {short} positions and scaled to {length:,}" if stretch > 1 else ""
        raise UsageError(f"the {cfg.model.family} model{said}: what its training keeps for the "
                         f"backward pass would take {need / 2**30:,.0f} GiB (batch {batch} x "
                         f"{kept / 2 * stretch / 2**20:,.1f} MiB an example{scaled}), more than "
                         f"half of {where}'s {memory / 2**30:,.0f} GiB; give a smaller "
                         f"train.batch_size" + (" or a shorter model.seq_len" if length > 1
                                                else ""))


PROBE_LENGTH = 64  # positions a sequence model's sizes are measured at before a run
TRAINING_BYTES = 16  # per parameter in training: its weight, gradient and Adam's two moments
# per token at the peak of tokenizing a text padded to its length (the tokenizer's lists and
# encodings, then the ids): 129-132 bytes measured on the CPU tier's 7,600 AG News rows at
# seq_len 1,000 and 4,000
TOKENIZING_BYTES = 130


def device_memory(cfg: RunConfig) -> tuple[float, str]:
    """The memory (bytes) of what the run trains on, and its name: the GPU's where it trains on
    one, else this machine's."""
    if cfg.train.device in ("cuda", "auto") and torch.cuda.is_available():
        return float(torch.cuda.get_device_properties(0).total_memory), "the GPU"
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")), "this machine"


def main(argv: list[str] | None = None) -> int:
    """The command line (``command``); a reader that closes the pipe early (``| head``) ends it
    quietly, as command-line tools end."""
    try:
        return command(argv)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing more to flush
        return 0


def command(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv)
        declarations.declared()  # the norm kinds claims register: any run a claim trains runs here
        if args.command == "list":
            print(listing())
            return 0
        if args.command in ("amend-reason", "catalog", "compare", "run-times", "scorecard",
                            "tables"):
            print({"amend-reason": amend_reason, "catalog": claims_page, "compare": compare,
                   "run-times": run_times, "scorecard": score,
                   "tables": tables}[args.command](args))
            return 0
        cfg = resolve(args)
        check_folder()  # --no-cache and --dry-run too: the data's tokenizers are kept there
        runs = Runs(Progress(os.dup(2)))
        takes_the_data(cfg, runs.task_of(cfg), args.set)  # before anything trains (or not)
        recorded = runtimes.run_seconds(cfg)
        if args.dry_run:
            print(json.dumps({"fingerprint": cfg.fingerprint(), **cfg.to_dict()}, indent=2))
            print(f"training: ~{recorded[0]:.0f} s as recorded on {recorded[1]}" if recorded else
                  "training: time not recorded for this config", file=sys.stderr)
            return 0
        share_the_machine()  # a run it caches trains as the claims' runs do (one thread on a CPU)
        if recorded:  # said as it starts: a log shows no step bar, only the lines
            runs.progress.expect({cfg.fingerprint(): recorded[0]}, places=1)
        if args.no_cache:
            runs.progress.started([cfg])
            record = train(cfg)
            runs.progress.finished(record, cached=False)
        else:
            record = runs.run(cfg)
    except (UsageError, KeyError, ValueError, DataError) as err:  # CacheFolderError is a ValueError
        text = err.args[0] if isinstance(err, KeyError) and err.args else str(err)
        print(f"error: {text}", file=sys.stderr)
        return 2
    except StaleError as err:
        print(f"stale: {err}", file=sys.stderr)
        return 1
    except PartlyFailed as err:
        print(err.args[0])
        print(f"error: {err.args[1]}", file=sys.stderr)
        return 1
    except Interrupted as err:
        print(err.args[0], file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("interrupted: stopped, with every training process; nothing was written (a run "
              "trained to the end stays cached)", file=sys.stderr)
        return 130
    print(summary(record))
    if args.json:
        try:
            atomic_write_text(record.to_json(), args.json)
        except OSError as err:
            print(f"error: --json {args.json}: cannot be written ({err.strerror or err}); the "
                  f"summary above is the run's, and nothing partial was left there",
                  file=sys.stderr)
            return 1
        print(f"record written to {args.json}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
