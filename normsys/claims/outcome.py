"""A claim's verdict as its pytest outcome: the ``Claim`` a claim's test talks to (the plugin's
``claim`` fixture). At each look of its plan it decides its declared rule on the values its
experiment reads (normsys.claims.verdict), makes the decision the report's row with where it was
measured (normsys.claims.report.Row, which is the record's entry and more), has the claim's record
judge it (normsys.claims.across, through the session's ``Ledgers``) and ends the test by it:
supported passes, refuted raises ``ClaimRefuted``, inconclusive is a skip.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from normsys import __version__
from normsys.claims.items import claim_id, claim_tier
from normsys.claims.report import Row
from normsys.claims.verdict import (
    INCONCLUSIVE,
    REFUTED,
    Rule,
    Verdict,
    decide,
    levels,
    look,
    open_note,
    sequential,
)
from normsys.training.data import data_root
from normsys.training.provenance import git_commit, numeric_environment
from normsys.training.store import file_sha256

if TYPE_CHECKING:
    from normsys.training.config import RunConfig


PROPERTY = "normsys_claim"  # the user property a claim's Row travels in (JSON only to cross
# from an xdist worker: normsys.claims.plugin)


class ClaimRefuted(AssertionError):
    """The evidence lies wholly on the other side of the claim's threshold."""


class StillOpen(Exception):
    """Inconclusive at a look with more seeds to come (--claims-max-seeds)."""

    def __init__(self, decision: Verdict):
        super().__init__(decision.reason)
        self.decision = decision


def data_digest() -> str:
    """sha256 of the data folder's checksum list: which data files the runs read."""
    sums = data_root() / "SHA256SUMS"
    return file_sha256(sums)[:16] if sums.is_file() else ""


def run_settings(configs: Iterable[RunConfig]) -> tuple[dict[str, str], str]:
    """What a claim's runs were trained under: each config field with its value across the runs
    (the distinct values, sorted, joined by " | "), the seed left out, and the fingerprint of
    the set of seed-less configs (which also tells apart runs that pair the same values
    otherwise)."""
    seedless = {c.override(**{"train.seed": 0}) for c in configs}
    values: dict[str, set[str]] = {}
    for c in seedless:
        for name, value in c.flat().items():
            if name != "train.seed":
                values.setdefault(name, set()).add(show(value))
    settings = {k: " | ".join(sorted(v)) for k, v in sorted(values.items())}
    prints = sorted(c.fingerprint() for c in seedless)
    return settings, hashlib.sha256(" ".join(prints).encode()).hexdigest()[:16]


def show(value) -> str:
    """A config value as ``--set`` takes it: tuples comma-separated."""
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    return str(value)


class Claim:
    """What a claim test talks to (the plugin's ``claim`` fixture): its seeds, its evidence, its
    figures and its verdict. ``item``: the test's pytest item; ``marked``: its claim marker's
    keyword arguments with the claim's ``id``, ``tier``, ``variant`` and ``plan`` (the seed
    counts of its looks) as its session reads them; ``ledgers``: the session's claim records
    (Ledgers), which judge the verdict; ``fetched``: the run configs its
    test fetches, as it fetches them (the settings its entry records)."""

    def __init__(self, item, marked: Mapping[str, Any], ledgers, fetched: list):
        opt = item.config.option
        self.item, self.tier = item, marked["tier"]
        self.ledgers, self.fetched = ledgers, fetched
        self.id, self.variant = marked["id"], marked["variant"]
        self.statement = marked.get("statement", "")
        self.source = marked.get("source", "")
        self.declared = marked.get("declared")
        self.offset = opt.claims_seed_offset
        self.plan = marked["plan"]  # seeds at each look
        self.looks: list[dict] = []
        self.decision: Verdict | None = None
        self.at_look(self.plan[0], levels(self.plan)[0])
        self.report_dir = Path(opt.claims_report)
        self.evidence: dict = {}
        self.figures: list[str] = []
        self.start = time.perf_counter()

    def at_look(self, n: int, confidence: float) -> None:
        """Decide on the first ``n`` seeds at ``confidence`` (a look of --claims-max-seeds)."""
        self.seeds = list(range(self.offset, self.offset + n))
        self.confidence, self.final = confidence, n == self.plan[-1]

    def at_looks(self, body: Callable[[], Verdict | None]) -> None:
        """Run the claim's test ``body`` at each look of its plan until its verdict is decisive
        or the looks run out (``sequential``); the runs of earlier looks come from the
        cache. An open look ends the body with StillOpen (``_conclude``)."""
        def decide_at(n: int, confidence: float) -> Verdict:
            self.at_look(n, confidence)
            try:
                return body() or self.decision  # a supported claim returns
            except StillOpen as open_:
                return open_.decision

        sequential(decide_at, self.plan)

    def record(self, **evidence) -> None:
        """Attach evidence (numbers, per-seed lists, small dicts) to the report."""
        self.evidence.update(evidence)

    def figure(self, name: str, draw: Callable) -> None:
        """Draw a figure with ``draw(fig)`` and save it to the report's figures/ folder."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig = plt.figure(figsize=(7, 4.2))
        try:
            draw(fig)
            path = self.report_dir / "figures" / f"{self.id}-{self.tier}-{name}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            fig.savefig(path, dpi=110, bbox_inches="tight")
            self.figures.append(str(path.relative_to(self.report_dir)))
        finally:
            plt.close(fig)

    def check(self, fetch) -> Verdict:
        """Decide the claim through its declared experiment, at its tier and variant, on the
        runs ``fetch`` gives (the claims' ``runs`` fixture), with the two sides of a paired rule,
        or each part's comparison, as evidence; end the test accordingly."""
        declared = self.declared
        if getattr(declared, "experiment", None) is None:
            raise pytest.UsageError(f"{self.item.nodeid}: claim {self.id} declares no experiment: "
                                    f"decide on the values its test computes, "
                                    f"claim.check_values(values)")
        exp = declared.experiment
        values = exp.values(fetch, self.seeds, self.tier, self.variant)
        decided = decide(declared.rule, values, self.confidence, exp.combine)  # arms in order
        if exp.combine is None and len(values) == 2:
            self.record(**{arm: list(v) for arm, v in values.items()})  # each side, by its arm
        elif decided.comparisons:
            self.record(comparisons=decided.comparisons)
        return self._conclude(decided, declared.rule)

    def check_values(self, values: Sequence[float], rule: Rule | None = None) -> Verdict:
        """Decide the claim on per-seed values its test computed (a claim that declares no
        experiment: one that does is decided through it, never on values read by other means);
        end the test accordingly. ``rule``: for a claim marked without a declaration."""
        declared = self.declared
        if getattr(declared, "experiment", None) is not None:
            pytest.fail(f"[{self.id}/{self.tier}] decided on values its test read, but the claim "
                        f"declares its experiment: decide through it, claim.check(runs)",
                        pytrace=False)
        if declared is None:
            if rule is None:
                raise pytest.UsageError(f"{self.item.nodeid}: claim {self.id} has no declared "
                                        f"rule: mark its test with its Declaration, or pass the "
                                        f"rule")
            return self._conclude(decide(rule, values, self.confidence), rule)
        if rule is not None and rule != declared.rule:
            pytest.fail(f"[{self.id}/{self.tier}] decided by the rule {rule}, but the claim "
                        f"declares {declared.rule}: decide by the declared rule", pytrace=False)
        return self._conclude(decide(declared.rule, values, self.confidence), declared.rule)

    def _conclude(self, decision: Verdict, rule: Rule) -> Verdict:
        """The decision as the report's row, with where it was measured, judged by the claim's
        record; the test ended by it (a supported claim returns the decision)."""
        from normsys.orchestration.cache import code_digest  # torch: when a claim decides
        from normsys.training.train import run_environment

        s, statistic = decision, rule.statistic
        note = ""
        if len(self.plan) > 1:
            self.looks.append(look(decision))
            if decision.verdict == INCONCLUSIVE and not self.final:
                raise StillOpen(decision)
            if decision.verdict == INCONCLUSIVE:
                note = open_note(s, rule)
        settings, fingerprint = run_settings(self.fetched)
        env = run_environment(self.fetched[0]) if self.fetched else numeric_environment()
        fresh = Row(
            **asdict(decision), id=self.id, tier=self.tier, statistic=statistic, seeds=self.seeds[: s.n],
            plan=self.plan, looks=jsonable(self.looks), open_note=note,
            measured=time.strftime("%Y-%m-%d %H:%M"), commit=git_commit(), normsys=__version__,
            torch=env["torch"], device=env["device"], threads=env["threads"],
            autocast=env["autocast"], data=data_digest(), code=code_digest(), settings=settings,
            settings_fingerprint=fingerprint, statement=self.statement, source=self.source,
            seconds=time.perf_counter() - self.start, evidence=jsonable(self.evidence),
            figures=self.figures, nodeid=self.item.nodeid,
            role=getattr(self.declared, "role", ""))
        judgement = self.ledgers.judge(self.id, fresh)
        replicated = self.ledgers.replication(self.id, self.tier)
        reported = replace(
            fresh, ledger=judgement.status, ledger_note=judgement.message,
            replication=replicated.word if replicated else "",
            replication_note=replicated.line() if replicated else "",
            amendments=[a.line() for a in self.ledgers.said(self.id).amendments])
        self.item.user_properties.append((PROPERTY, reported))
        text = f"[{self.id}/{self.tier}] {statistic}: {decision.reason}"
        unrecorded = judgement.unrecorded
        if judgement.fails or (unrecorded and self.ledgers.strict):
            pytest.fail(f"[{self.id}/{self.tier}] {judgement.message}"
                        + (" (--claims-strict)" if unrecorded else ""), pytrace=False)
        if decision.verdict == REFUTED:
            if unrecorded or self.ledgers.update or judgement.moved:
                pytest.xfail(f"refuted ({judgement.status}): {text}")
            raise ClaimRefuted(f"{text}; {judgement.message}")
        if decision.verdict == INCONCLUSIVE:
            pytest.skip(f"inconclusive: {text}; {judgement.message}")
        self.decision = decision
        return decision


def jsonable(obj):
    """``obj`` as JSON gives it back (numbers that are not floats, e.g. numpy's, as floats)."""
    return json.loads(json.dumps(obj, default=float))


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
