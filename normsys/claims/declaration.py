"""A claim's declaration: its id, the rule that decides it, its statement and source, read in
one place by everything that speaks of the claim.

    NONE_COLLAPSES = Declaration(
        "dm-none-collapses-with-depth", Rule("kappa_6(none)", "<", 0.5), source=SOURCE,
        statement="Without normalization the representation collapses with depth: {rule}.")

    @NONE_COLLAPSES.mark
    def test_none_collapses_with_depth(claim, ...):
        claim.check([kappa(r.probes) for r in runs])      # decided by the declared rule

The marker carries the declaration to the plugin (normsys.claims.plugin): ``--claims-list``,
the report and the ledger read the statement and the rule from it, and a test that decides by
any other rule fails, naming both. A norm-generic claim (normsys.scorecard.Statistic) makes its
declaration from its rule for the claim's own norm kind.
"""

from __future__ import annotations

from dataclasses import dataclass

from normsys.claims.stats import Rule


@dataclass(frozen=True)
class Declaration:
    """One claim: ``statement`` says it in words, with ``{rule}`` where its rule goes;
    ``seeds``: the claim's own seed count at every tier, where it differs from the tier's."""

    id: str
    rule: Rule
    source: str
    statement: str
    seeds: int | None = None

    def __post_init__(self):
        if not isinstance(self.rule, Rule):
            raise TypeError(f"claim {self.id}: its rule must be a stats.Rule, got "
                            f"{type(self.rule).__name__} {self.rule!r}")

    def text(self) -> str:
        """The statement with the rule written in."""
        return self.statement.format(rule=self.rule)

    @property
    def mark(self):
        """The claim's pytest marker (a MarkDecorator): its test is this claim."""
        import pytest  # the scorecard's command line reads declarations without pytest

        seeds = {} if self.seeds is None else {"seeds": self.seeds}
        return pytest.mark.claim(self.id, statement=self.text(), source=self.source,
                                 declared=self, **seeds)
