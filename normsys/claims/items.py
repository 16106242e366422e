"""What the claims plugin reads of a collected test item: its claim marker, id, tier, variant and
plan of looks; the runs it will train, look by look; the entry of its record it will be compared
with; the claims a negative control stands for and the name its runs are indexed under."""

from __future__ import annotations

import re

import pytest

from normsys.claims import ledger, verdict
from normsys.claims.declaration import plan
from normsys.claims.params import Variant
from normsys.orchestration.progress import described
from normsys.training.provenance import numeric_environment
from normsys.training.tiers import DEFAULT

MARKER_KWARGS = ("statement", "source", "seeds", "declared", "statistic")  # what
# @pytest.mark.claim(id, ...) accepts; ``declared`` is the claim's Declaration
# (normsys.claims.declaration), set by its mark, ``statistic`` the Statistic it was made from


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
    return item.callspec.params.get("tier", DEFAULT) if hasattr(item, "callspec") else DEFAULT


def claim_variant(item: pytest.Item) -> str:
    """The claim's variant (its id's suffix: ``-nonpad``), "" for the claim itself."""
    params = item.callspec.params.values() if hasattr(item, "callspec") else ()
    return "".join(v for v in params if isinstance(v, Variant))


def own_plan(config: pytest.Config) -> bool:
    """Whether the session decides each claim on its tier's own seeds and looks (no
    --claims-seeds, --claims-seed-offset or --claims-max-seeds): the runs a claim fetches then are
    the ones its index in the cache keeps for the run times and --claims-list."""
    opt = config.option
    return opt.claims_seeds is None and opt.claims_seed_offset == 0 and \
        opt.claims_max_seeds is None


def claim_looks(item: pytest.Item, marker: pytest.Mark) -> tuple[int, ...]:
    """The seed counts the claim decides at (normsys.claims.declaration.plan) with the session's
    --claims-seeds and --claims-max-seeds."""
    opt = item.config.option
    return plan(claim_tier(item), marker.kwargs.get("seeds"), opt.claims_seeds,
                        opt.claims_max_seeds)


def planned_looks(item: pytest.Item, ledgers=None, evidence: bool = True) -> list[list]:
    """The runs a claim trains, known before it runs, look by look (each look's new seeds): those
    of its declared experiment, evidence arms included (unless not ``evidence``: then the runs it
    decides on alone), at its first look, and at each later look up to the one its entries in
    ``ledgers`` (a session's Ledgers, normsys.claims.session) show it took in this environment
    (verdict.expected); for a claim that declares none, those it fetched the
    last time it ran with this cache (normsys.orchestration.runs.planned), as one look; [] where
    neither is known."""
    from normsys.orchestration.runs import planned  # torch and the training path: when a session plans

    marker = claim_marker(item)
    experiment = getattr(marker.kwargs.get("declared"), "experiment", None)
    cid, tier = claim_id(item, marker), claim_tier(item)
    if experiment is None:
        return [runs] if (runs := planned(cid, tier)) else []
    offset = item.config.option.claims_seed_offset
    before = ledgers.history(cid, tier, numeric_environment(), offset) \
        if ledgers is not None else []
    looks = claim_looks(item, marker)
    taken = [n for n in looks if n <= verdict.expected(looks, before)]
    return [experiment.planned(range(offset + a, offset + b), tier, claim_variant(item), evidence)
            for a, b in zip([0, *taken], taken, strict=False)]


def planned_configs(item: pytest.Item, ledgers=None, evidence: bool = True) -> list:
    """Every run of ``planned_looks``, look after look."""
    return [c for look in planned_looks(item, ledgers, evidence) for c in look]


def collects_every_claim(config: pytest.Config) -> bool:
    """Whether this session collects every claim under the folders it was given: only then is a
    record it does not see a claim that no longer exists (``-k`` and ``-m`` deselect after
    collection and do not count; a file, a test id, --ignore, --deselect or --last-failed do)."""
    opt = config.option
    narrowed = (getattr(opt, name, None) for name in ("ignore", "ignore_glob", "deselect", "lf"))
    return not any(narrowed) and all(
        (config.invocation_params.dir / arg).is_dir() for arg in config.args)


def recorded_entry(item: pytest.Item, marker: pytest.Mark, ledgers):
    """The entry of its record a claim's measurement here will be compared with (its own in this
    environment and seed plan, else its reference; of the run settings its plan reads, for a
    declared claim), None where it has none."""
    from normsys.training.train import run_environment  # torch: when a session judges claims

    tier, plan = claim_tier(item), claim_looks(item, marker)
    offset = item.config.option.claims_seed_offset
    configs = planned_configs(item)  # where its runs train: a GPU's autocast is theirs
    env = run_environment(configs[0]) if configs else numeric_environment()
    here = ledger.key(tier, described(env), ledger.seed_plan(offset, plan))
    declared, like = marker.kwargs.get("declared"), None
    if declared is not None and configs:
        settings, fingerprint = ledger.run_settings(configs)
        like = ledger.Entry(verdict="", tier=tier, statistic=declared.rule.statistic,
                            settings=settings, settings_fingerprint=fingerprint)
    return ledgers.recorded(claim_id(item, marker), tier, here, offset, like)


def selected(items: list[pytest.Item]) -> dict[tuple[str, str], tuple[str, str]]:
    """The claims ``items`` hold (what -k and -m selected): (id, tier) -> (statement, source)."""
    return {(claim_id(item, marker), claim_tier(item)): (marker.kwargs.get("statement", ""),
                                                         marker.kwargs.get("source", ""))
            for item in items if (marker := claim_marker(item)) is not None}


def control_index(item: pytest.Item) -> str:
    """The name a negative control's runs are indexed under, as a claim's are (its cost): its
    module's and its own, since two claim files may name a control alike."""
    return "control-" + re.sub(r"[^\w.-]+", "_", f"{item.path.stem}.{item.name}")


def control_names(items: list[pytest.Item]) -> list[str]:
    """The names the runs of the negative controls among ``items`` are indexed under, of those
    that will run (not skipped)."""
    return [control_index(i) for i in items
            if control_ids(i) and not i.get_closest_marker("skip")]


def positive_ids(item: pytest.Item) -> list[str]:
    """The claim ids a positive control (``@pytest.mark.positive(id, ...)``) stands for: their
    own runs, reading and rule where the effect is present by construction, which must come out
    supported (what shows a claim's CPU setting can show its effect)."""
    return [cid for mark in item.iter_markers("positive") for cid in mark.args]


def control_ids(item: pytest.Item) -> list[str]:
    """The claim ids a negative control (``@pytest.mark.control(id, ...)``) stands for; a
    parametrized control may name ids per parameter (a mark on each pytest.param)."""
    return [cid for mark in item.iter_markers("control") for cid in mark.args]


def ids_of(item: pytest.Item) -> set[str]:
    """The claim ids an item stands for: its claim's (a variant's with its suffix), or those its
    negative or positive control names."""
    marker = claim_marker(item)
    return {*([claim_id(item, marker)] if marker else []), *control_ids(item), *positive_ids(item)}
