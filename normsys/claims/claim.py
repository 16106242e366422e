"""What a claim test talks to: the ``claim`` fixture's object, which ends the test by the verdict
its declared rule reaches (normsys.claims.verdict.decide) on the values its experiment reads
(``check``; for a claim that declares none, on the values its test computed: ``check_values``), at
each look of its plan (``at_looks``), and hands the result to the report and the ledger.

    @NONE_COLLAPSES.mark                 # @pytest.mark.claim(id, statement=..., declared=...)
    def test_none_collapses_with_depth(claim, runs, tier, variant):
        claim.check(runs)          # its experiment decides; the claim concludes on the decision

Outcomes (README, "Reading a verdict"): supported passes, refuted raises ClaimRefuted, inconclusive
is a skip, each judged against the claim's record (normsys.claims.ledger): a claim its record
holds as refuted is a strict xfail that only ClaimRefuted meets (so broken code is never counted
as a verdict), and a measurement other than the recorded one fails with one line naming the
change. The result travels in ``item.user_properties`` (as PROPERTY), so the session's table is
right under pytest-xdist too.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from normsys import __version__
from normsys.claims import ledger, verdict
from normsys.claims.params import Variant
from normsys.claims.verdict import INCONCLUSIVE, REFUTED, Rule, Verdict, decide
from normsys.training.data import data_root
from normsys.training.provenance import git_commit, numeric_environment
from normsys.training.store import file_sha256

PROPERTY = "normsys_claim"  # the user property a claim's result travels in
MARKER_KWARGS = ("statement", "source", "seeds", "declared", "statistic")  # what
# @pytest.mark.claim(id, ...) accepts; ``declared`` is the claim's Declaration
# (normsys.claims.declaration), set by its mark, ``statistic`` the Statistic it was made from


class ClaimRefuted(AssertionError):
    """The evidence lies wholly on the other side of the claim's threshold."""


class StillOpen(Exception):
    """Inconclusive at a look with more seeds to come (--claims-max-seeds)."""

    def __init__(self, decision: Verdict):
        super().__init__(decision.reason)
        self.decision = decision


def claim_marker(item: pytest.Item) -> pytest.Mark | None:
    """The item's claim marker, its keyword arguments checked (an unknown one is an error)."""
    marker = item.get_closest_marker("claim")
    if marker is None:
        return None
    unknown = set(marker.kwargs) - set(MARKER_KWARGS) - {"id"}
    if unknown or not (marker.args or "id" in marker.kwargs):
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.claim(id, {', '.join(MARKER_KWARGS)}"
                                f"=...) got unknown {sorted(unknown)}" if unknown else
                                f"{item.nodeid}: @pytest.mark.claim needs the claim id first")
    return marker


def claim_id(item: pytest.Item, marker: pytest.Mark) -> str:
    return (marker.args[0] if marker.args else marker.kwargs["id"]) + claim_variant(item)


def claim_tier(item: pytest.Item) -> str:
    return item.callspec.params.get("tier", "cpu") if hasattr(item, "callspec") else "cpu"


def claim_variant(item: pytest.Item) -> str:
    """The claim's variant (its id's suffix: ``-nonpad``), "" for the claim itself."""
    params = item.callspec.params.values() if hasattr(item, "callspec") else ()
    return "".join(v for v in params if isinstance(v, Variant))


def claim_looks(item: pytest.Item, marker: pytest.Mark) -> tuple[int, ...]:
    """The seed counts the claim decides at (normsys.claims.verdict.plan) with the session's
    --claims-seeds and --claims-max-seeds."""
    opt = item.config.option
    return verdict.plan(claim_tier(item), marker.kwargs.get("seeds"), opt.claims_seeds,
                        opt.claims_max_seeds)


def planned_configs(item: pytest.Item, ledgers=None) -> list:
    """The runs a claim trains, known before it runs: those of its declared experiment, evidence
    arms included, at its first look's seeds, or at the look its entries in ``ledgers`` (a
    session's ledger.Ledgers) show it took in this environment (verdict.expected); for a
    claim that declares none, those it fetched the last time it ran with this cache
    (normsys.claims.runs.planned); [] where neither is known."""
    from normsys.claims.runs import planned  # torch and the training path: when a session plans

    marker = claim_marker(item)
    experiment = getattr(marker.kwargs.get("declared"), "experiment", None)
    cid, tier = claim_id(item, marker), claim_tier(item)
    if experiment is None:
        return planned(cid, tier)
    offset = item.config.option.claims_seed_offset
    before = ledgers.history(cid, tier, numeric_environment(), offset) \
        if ledgers is not None else []
    seeds = range(offset, offset + verdict.expected(claim_looks(item, marker), before))
    return experiment.planned(seeds, tier, claim_variant(item))


def data_digest() -> str:
    """sha256 of the data folder's checksum list: which data files the runs read."""
    sums = data_root() / "SHA256SUMS"
    return file_sha256(sums)[:16] if sums.is_file() else ""


class Claim:
    """What a claim test talks to: its seeds, its evidence, its figures and its verdict.
    ``ledgers``: the session's claim records (``ledger.Ledgers``) that judge the verdict;
    ``fetched``: the run configs its test fetches, as it fetches them (the settings its entry
    records)."""

    def __init__(self, item: pytest.Item, marker: pytest.Mark, tier: str,
                 ledgers: ledger.Ledgers, fetched: list):
        opt = item.config.option
        self.item, self.tier = item, tier
        self.ledgers, self.fetched = ledgers, fetched
        self.id, self.variant = claim_id(item, marker), claim_variant(item)
        self.statement = marker.kwargs.get("statement", "")
        self.source = marker.kwargs.get("source", "")
        self.declared = marker.kwargs.get("declared")
        self.offset = opt.claims_seed_offset
        self.plan = claim_looks(item, marker)  # seeds at each look
        self.looks: list[dict] = []
        self.decision: Verdict | None = None
        self.at_look(self.plan[0], verdict.levels(self.plan)[0])
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
        or the looks run out (verdict.sequential); the runs of earlier looks come from the
        cache. An open look ends the body with StillOpen (``_conclude``)."""
        def decide_at(n: int, confidence: float) -> Verdict:
            self.at_look(n, confidence)
            try:
                return body() or self.decision  # a supported claim returns
            except StillOpen as open_:
                return open_.decision

        verdict.sequential(decide_at, self.plan)

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
        from normsys.claims.cache import code_digest  # torch: when a claim decides
        from normsys.training.train import run_environment

        s, statistic = decision, rule.statistic
        open_note = ""
        if len(self.plan) > 1:
            self.looks.append(verdict.look(decision))
            if decision.verdict == INCONCLUSIVE and not self.final:
                raise StillOpen(decision)
            if decision.verdict == INCONCLUSIVE:
                open_note = verdict.open_note(s, rule)
        settings, fingerprint = ledger.run_settings(self.fetched)
        env = run_environment(self.fetched[0]) if self.fetched else numeric_environment()
        fresh = replace(
            decision, id=self.id, tier=self.tier, statistic=statistic, seeds=self.seeds[: s.n],
            plan=self.plan, looks=jsonable(self.looks), open_note=open_note,
            measured=time.strftime("%Y-%m-%d %H:%M"), commit=git_commit(), normsys=__version__,
            torch=env["torch"], device=env["device"], threads=env["threads"],
            autocast=env["autocast"], data=data_digest(), code=code_digest(), settings=settings,
            settings_fingerprint=fingerprint, statement=self.statement, source=self.source,
            seconds=time.perf_counter() - self.start, evidence=jsonable(self.evidence),
            figures=self.figures, nodeid=self.item.nodeid)
        judgement = self.ledgers.judge(self.id, fresh)
        replicated = self.ledgers.replication(self.id, self.tier)
        reported = replace(
            fresh, ledger=judgement.status, ledger_note=judgement.message,
            replication=replicated.word if replicated else "",
            replication_note=replicated.line() if replicated else "",
            amendments=[a.line() for a in self.ledgers.said(self.id).amendments])
        self.item.user_properties.append((PROPERTY, json.dumps(jsonable(asdict(reported)))))
        text = f"[{self.id}/{self.tier}] {statistic}: {decision.reason}"
        unrecorded = judgement.status in ledger.UNRECORDED
        if judgement.fails or (unrecorded and self.ledgers.strict):
            pytest.fail(f"[{self.id}/{self.tier}] {judgement.message}"
                        + (" (--claims-strict)" if unrecorded else ""), pytrace=False)
        if decision.verdict == REFUTED:
            if unrecorded or self.ledgers.update or judgement.status == ledger.MOVED:
                pytest.xfail(f"refuted ({judgement.status}): {text}")
            raise ClaimRefuted(f"{text}; {judgement.message}")
        if decision.verdict == INCONCLUSIVE:
            pytest.skip(f"inconclusive: {text}; {judgement.message}")
        self.decision = decision
        return decision


def jsonable(obj):
    """``obj`` as JSON gives it back (numbers that are not floats, e.g. numpy's, as floats)."""
    return json.loads(json.dumps(obj, default=float))
