"""Pausing and resuming a target by hand: who and why, kept with the target's state."""

from __future__ import annotations

from dataclasses import dataclass

from scrape_contracts.adapters.store import PartitionState, ProjectStore, StoreError

MANUAL_PAUSE = "paused by hand"


@dataclass(frozen=True)
class StateChange:
    contract: str
    partition: str
    paused: bool
    reason: str  # as recorded, with who
    before: PartitionState


def pause(store: ProjectStore, contract: str, partition: str, *, by: str, reason: str) -> StateChange:
    """Stop schedules and batches from scraping a target until it is resumed; the accepted data stays."""
    if not by.strip() or not reason.strip():
        raise StoreError("pausing a target needs who (--by) and why (--reason)")
    before = store.state(contract, partition)
    recorded = f"{MANUAL_PAUSE} by {by.strip()}: {reason.strip()}"
    store.pause(contract, partition, recorded)
    return StateChange(contract, partition, True, recorded, before)


def resume(store: ProjectStore, contract: str, partition: str, *, by: str = "", reason: str = "") -> StateChange:
    """Let a paused target be scraped again (a pause for review or an exhausted healing budget too)."""
    before = store.state(contract, partition)
    who = f" by {by.strip()}" if by.strip() else " by hand"
    recorded = f"resumed{who}" + (f": {reason.strip()}" if reason.strip() else "") + \
        f" (was: {before.pause_reason})"
    store.resume(contract, partition)
    return StateChange(contract, partition, False, recorded, before)
