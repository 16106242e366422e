"""A claim decided at one tier, variant and seed plan, without pytest: the object a claim's test
talks to (the plugin's ``claim`` fixture) and anything else can make.

    claim = Claim(declared.id, "cpu", plan=(3,), declared=declared)
    claim.check(runs)             # its experiment's values decided at each look (verdict.sequential)
    claim.record(...)             # evidence, on claim.seeds: the last look's
    row = claim.row()             # the decision with where it was measured (ledger.measured)
    row, judgement = Ledgers(folder).judged(row)   # judged by its record (normsys.claims.across)

The plugin then only ends the test by the judged row (normsys.claims.plugin.conclude).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from normsys.claims import ledger
from normsys.claims.report import Row
from normsys.claims.verdict import INCONCLUSIVE, Rule, Verdict, decide, open_note, sequential


class ClaimUsageError(ValueError):
    """A claim's test that decides it in a way its declaration does not allow."""


@dataclass
class Claim:
    """A claim being decided: its seeds, its evidence, its figures and its decision.

    ``check`` (or ``check_values``) decides the claim by its rule at each look of ``plan`` (the
    seed counts of its looks, from seed ``offset``) until its verdict is decisive or the looks
    run out, each look on its seeds, and leaves ``seeds`` at the last look's for the evidence
    recorded after it. ``declared``: its Declaration (None: a claim marked without one, decided
    by the rule given to ``check_values``); ``fetched``: the run configs its test fetches, as it
    fetches them (where it was measured); ``report_dir``: where its figures go; ``nodeid``: the
    test that decides it, for the report."""

    id: str
    tier: str
    plan: tuple[int, ...]
    declared: Any = None  # a Declaration
    variant: str = ""
    statement: str = ""
    source: str = ""
    offset: int = 0
    fetched: list = field(default_factory=list)
    report_dir: Path = Path("claims-report")
    nodeid: str = ""
    seeds: list[int] = field(init=False)
    decision: Verdict | None = field(init=False, default=None)
    rule: Rule | None = field(init=False, default=None)
    looks: list[dict] = field(init=False, default_factory=list)
    evidence: dict = field(init=False, default_factory=dict)
    figures: list[str] = field(init=False, default_factory=list)
    start: float = field(init=False, default_factory=time.perf_counter)

    def __post_init__(self):
        self.plan, self.report_dir = tuple(self.plan), Path(self.report_dir)
        self.seeds = self.first(self.plan[0])

    def first(self, n: int) -> list[int]:
        """The claim's first ``n`` seeds (from ``offset``)."""
        return list(range(self.offset, self.offset + n))

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
        or each part's comparison, as evidence."""
        exp = getattr(self.declared, "experiment", None)
        if exp is None:
            raise ClaimUsageError(f"claim {self.id} declares no experiment: decide on the values "
                                  f"its test computes, claim.check_values(values)")
        read = {}

        def values_of(seeds: list[int]):
            read["values"] = exp.values(fetch, seeds, self.tier, self.variant)
            return read["values"]

        decided = self._decide(self.declared.rule, values_of, exp.combine)
        if exp.combine is None and len(read["values"]) == 2:  # each side, by its arm
            self.record(**{arm: list(v) for arm, v in read["values"].items()})
        elif decided.comparisons:
            self.record(comparisons=decided.comparisons)
        return decided

    def check_values(self, values: Sequence[float] | Callable[[list[int]], Sequence[float]],
                     rule: Rule | None = None) -> Verdict:
        """Decide the claim on per-seed values its test computes: ``values(seeds)`` at each look
        (or the values of ``seeds`` where its plan has one look). For a claim that declares no
        experiment (one that does is decided through it, never on values read by other means);
        ``rule``: for a claim marked without a declaration."""
        declared = self.declared
        if getattr(declared, "experiment", None) is not None:
            raise ClaimUsageError(f"[{self.id}/{self.tier}] decided on values its test read, but "
                                  f"the claim declares its experiment: decide through it, "
                                  f"claim.check(runs)")
        if declared is None and rule is None:
            raise ClaimUsageError(f"claim {self.id} has no declared rule: mark its test with its "
                                  f"Declaration, or pass the rule")
        if declared is not None and rule is not None and rule != declared.rule:
            raise ClaimUsageError(f"[{self.id}/{self.tier}] decided by the rule {rule}, but the "
                                  f"claim declares {declared.rule}: decide by the declared rule")
        return self._decide(rule or declared.rule,
                            values if callable(values) else self.one_look(values))

    def one_look(self, values: Sequence[float]) -> Callable[[list[int]], list[float]]:
        """Values given for ``seeds``, as a look reads them: a plan of one look only."""
        if len(self.plan) > 1:
            raise ClaimUsageError(f"claim {self.id} looks at {list(self.plan)} seeds: give its "
                                  f"values as a function of the seeds, "
                                  f"claim.check_values(lambda seeds: ...)")
        given = list(values)
        return lambda seeds: given

    def _decide(self, rule: Rule, values_of: Callable, combine=None) -> Verdict:
        if self.decision is not None:
            raise ClaimUsageError(f"[{self.id}/{self.tier}] decided twice: a claim's test decides "
                                  f"it once")

        def at(n: int, confidence: float) -> Verdict:
            self.seeds = self.first(n)
            return decide(rule, values_of(self.seeds), confidence, combine)

        self.decision, self.looks = sequential(at, self.plan)
        self.rule = rule
        return self.decision

    def row(self) -> Row:
        """The decision as the report's row, with where it was measured (ledger.measured)."""
        d, rule = self.decision, self.rule
        if d is None:
            raise ClaimUsageError(f"[{self.id}/{self.tier}] its test decided nothing: end it "
                                  f"with claim.check(runs) or claim.check_values(values)")
        several = len(self.plan) > 1
        return Row(
            **asdict(d), **ledger.measured(self.fetched), id=self.id, tier=self.tier,
            statistic=rule.statistic, seeds=self.seeds[: d.n], plan=self.plan,
            looks=ledger.jsonable(self.looks) if several else (),
            open_note=open_note(d, rule) if several and d.verdict == INCONCLUSIVE else "",
            statement=self.statement, source=self.source,
            seconds=time.perf_counter() - self.start, evidence=ledger.jsonable(self.evidence),
            figures=self.figures, nodeid=self.nodeid, role=getattr(self.declared, "role", ""))
