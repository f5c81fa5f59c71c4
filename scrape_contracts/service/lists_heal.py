"""Healing a list target: relocate the item selector, then the fields' selectors inside the items."""

from __future__ import annotations

from typing import Any

from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.service.records import Emit, HealReport, Stage, Validated


def heal(loaded: LoadedContract, validated: Validated, run_id: str, artifacts: Any, store: Any,
         emit: Emit) -> tuple[Validated, HealReport]:
    from scrape_contracts.service.scrape import heal_triggers

    triggers = tuple(heal_triggers(validated))
    reason = "healing of list contracts is not built yet"
    emit(Stage.HEALING_REFUSED, {"fields": list(triggers), "reason": reason})
    return validated, HealReport(attempted=True, fields=triggers, reason=reason)
