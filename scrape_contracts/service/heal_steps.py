"""The steps a heal shares, single record or list: what the healer is told, saving what it found, pausing."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from scrape_contracts.adapters.store import ProjectStore, SelectorConflict, SelectorVersion
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.service.records import Emit, Extracted, Stage

if TYPE_CHECKING:
    from scrape_contracts.contract.fields import FieldSpec
    from scrape_contracts.engine.heal import HealSpec


def heal_spec(name: str, field: FieldSpec, selector: str, before: Any) -> HealSpec:
    """What the healer is told about one field: its broken selector, last accepted value, type and rules."""
    from scrape_contracts.engine.heal import HealSpec, ItemRule

    rules = field.rules
    return HealSpec(name=name, selector=selector, before=before, type=field.type, pattern=field.pattern,
                    normalise=tuple(field.normalise), minimum=rules.min, maximum=rules.max,
                    max_change_pct=rules.max_change_pct, expected=rules.expected,
                    item=ItemRule.from_mapping(field.item))


def save_selectors(loaded: LoadedContract, extracted: Extracted, results: dict[str, Any], run_id: str,
                   store: ProjectStore) -> SelectorVersion:
    """A new selector version with the healed selectors, over whatever another run saved meanwhile."""
    contract = loaded.contract
    parent = extracted.selector_version
    healed = {n: r.selector for n, r in results.items()}
    new_selectors = {**extracted.selectors, **healed}
    changes = {n: {"old": extracted.selectors[n], "new": r.selector, "evidence": r.evidence,
                   "confidence": r.confidence} for n, r in results.items()}
    # every conflict means another run's save committed, so this always progresses; the deadline only bounds
    # pathological contention
    deadline = time.monotonic() + 60
    while True:
        try:
            return store.add_selector_version(
                contract.name, parent_version=parent, selectors=new_selectors,
                contract_selectors=contract.selectors(), source="heal", changes=changes, run_id=run_id,
                partition=extracted.fetched.partition,
            )
        except SelectorConflict:
            if time.monotonic() > deadline:
                raise SelectorConflict(
                    f"could not save healed selectors of {contract.name!r}: too much contention") from None
            # another run healed first: keep its selectors and layer ours on top, never drop either
            latest = store.current_selectors(contract.name, contract.selectors())
            parent = latest.version
            new_selectors = {**latest.selectors, **healed}


def pause_exhausted(store: ProjectStore, contract: str, partition: str, reason: str, emit: Emit) -> None:
    """The healing budget is spent: the target pauses, its last accepted data stays."""
    store.pause(contract, partition, reason, cause="budget_exhausted")
    emit(Stage.PAUSED, {"reason": reason})
