"""The event trail of a contract, read from Dagster run history with a resumable cursor.

Sources: observations on ``scrape/C/candidate`` (every stage: fetched, extracted, violation_found, healing,
change_detected, check_failed, quarantined, reviewed, ...) and materialisations of both assets. They share
the event log's asset index, so one storage id orders them and is the cursor. (Check evaluations are also
in run history, but SQLite numbers run events per run; failed checks are mirrored as observations.)
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

from scrape_contracts.defs.assets import accepted_key, candidate_key


@dataclass(frozen=True)
class TrailEvent:
    storage_id: int
    timestamp: float
    run_id: str
    partition: str | None
    stage: str
    summary: str
    metadata: dict[str, Any] = field(default_factory=dict)

    def line(self) -> str:
        when = dt.datetime.fromtimestamp(self.timestamp, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S")
        return (f"{self.storage_id:>7}  {when}  {self.run_id[:8] or '-':<8}  {self.partition or '-':<24}  "
                f"{self.stage:<18}  {self.summary}")


def _plain(metadata: Any) -> dict[str, Any]:
    return {k: getattr(v, "value", v) for k, v in (metadata or {}).items()}


def _summary(stage: str, data: dict[str, Any]) -> str:
    def short(value: Any) -> str:
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        return text if len(text) <= 120 else text[:117] + "..."

    if stage == "fetched":
        return f"{data.get('status')} {data.get('url')} ({data.get('bytes')} bytes, {data.get('elapsed_s')}s)"
    if stage == "check_failed":
        return f"{data.get('check')} FAILED: {data.get('message')}"
    if stage == "violation_found":
        return f"{data.get('check')}: {data.get('message')}"
    if stage in ("reviewed",):
        return f"{data.get('decision')} by {data.get('reviewer')}: {data.get('reason')}"
    if stage == "quarantined":
        return f"candidate {data.get('candidate_id')}: {short(data.get('reasons'))}"
    keys = ("record", "changes", "reason", "results", "fields", "outcome", "version", "message", "error")
    return " ".join(f"{k}={short(data[k])}" for k in keys if k in data) or short(data)


def read_trail(instance: dg.DagsterInstance, contract: str, *, partition: str | None = None, after: int = 0,
               limit: int = 100) -> tuple[list[TrailEvent], int]:
    """Events of ``contract`` with storage id > ``after``, oldest first; returns (events, next cursor)."""
    partitions = [partition] if partition else None
    events: list[TrailEvent] = []
    for key in (candidate_key(contract), accepted_key(contract)):
        records_filter = dg.AssetRecordsFilter(asset_key=key, asset_partitions=partitions, after_storage_id=after)
        for record in instance.fetch_observations(records_filter, limit=limit, ascending=True).records:
            data = _plain(record.asset_observation.metadata)
            stage = str(data.pop("stage", "observed"))
            events.append(TrailEvent(record.storage_id, record.timestamp, record.run_id,
                                     record.asset_observation.partition, stage, _summary(stage, data), data))
        for record in instance.fetch_materializations(records_filter, limit=limit, ascending=True).records:
            data = _plain(record.asset_materialization.metadata)
            stage = "accepted" if key == accepted_key(contract) else "candidate_stored"
            data.pop("stage", None)
            events.append(TrailEvent(record.storage_id, record.timestamp, record.run_id,
                                     record.asset_materialization.partition, stage, _summary(stage, data), data))
    events.sort(key=lambda e: e.storage_id)
    events = events[:limit]
    return events, (events[-1].storage_id if events else after)
