"""One schedule per contract that declares ``schedule:``; paused partitions are skipped with a reason."""

from __future__ import annotations

import dagster as dg

from scrape_contracts.contract.loader import LoadedContract


def build_schedule(loaded: LoadedContract) -> dg.ScheduleDefinition | None:
    return None
