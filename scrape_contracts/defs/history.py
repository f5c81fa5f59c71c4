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

from scrape_contracts.defs.names import accepted_key, candidate_key


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
    if stage == "batch_summary":
        return (f"{data.get('targets')} targets in {data.get('seconds')}s ({data.get('pages_per_second')}/s): "
                f"{short(data.get('outcomes'))}")
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


def _expand(record_id: int, timestamp: float, run_id: str, partition: str | None, stage: str,
            data: dict[str, Any]) -> list[TrailEvent]:
    """A batched run records a target's stages inside one event: one trail line per stage, in order."""
    stages = data.pop("stages", None)
    if not isinstance(stages, list):
        return [TrailEvent(record_id, timestamp, run_id, partition, stage, _summary(stage, data), data)]
    lines = []
    for item in stages:
        item = dict(item)
        name = str(item.pop("stage", "observed"))
        lines.append(TrailEvent(record_id, timestamp, run_id, partition, name, _summary(name, item), item))
    if not stages or stages[-1].get("stage") != stage:
        lines.append(TrailEvent(record_id, timestamp, run_id, partition, stage, _summary(stage, data), data))
    return lines


def _unchanged_lines(record: Any, data: dict[str, Any], partition: str | None) -> list[TrailEvent]:
    """Unchanged targets of a batch are listed in its summary, not recorded one by one."""
    keys = [k for k in data.get("unchanged") or [] if partition is None or k == partition]
    return [TrailEvent(record.storage_id, record.timestamp, record.run_id, key, "unchanged",
                       "page unchanged since the last accepted version", {}) for key in keys]


# Dagster refuses to return more than this many records in one call (enforce_max_records_limit)
_PAGE = 10_000


def _records(fetch: Any, records_filter: dg.AssetRecordsFilter, limit: int) -> list[Any]:
    """Up to ``limit`` records, oldest first, read in pages Dagster accepts."""
    records: list[Any] = []
    cursor = None
    while len(records) < limit:
        result = fetch(records_filter, limit=min(_PAGE, limit - len(records)), cursor=cursor, ascending=True)
        records.extend(result.records)
        if not result.has_more or not result.records:
            break
        cursor = result.cursor
    return records


def read_trail(instance: dg.DagsterInstance, contract: str, *, partition: str | None = None, after: int = 0,
               limit: int = 100) -> tuple[list[TrailEvent], int]:
    """Events of ``contract`` with storage id > ``after``, oldest first; returns (events, next cursor).

    ``limit`` counts stored events; one event of a batched run can expand to several lines, and a page
    never ends in the middle of one, so the cursor resumes exactly after the last line shown.
    """
    partitions = [partition] if partition else None
    groups: dict[int, list[TrailEvent]] = {}
    for key in (candidate_key(contract), accepted_key(contract)):
        records_filter = dg.AssetRecordsFilter(asset_key=key, asset_partitions=partitions, after_storage_id=after)
        # observations on the accepted data only restate a target's paused state, told on the candidate
        observations = _records(instance.fetch_observations, records_filter, limit) \
            if key == candidate_key(contract) else []
        for record in observations:
            data = _plain(record.asset_observation.metadata)
            stage = str(data.pop("stage", "observed"))
            groups[record.storage_id] = _expand(record.storage_id, record.timestamp, record.run_id,
                                                record.asset_observation.partition, stage, data)
        for record in _records(instance.fetch_materializations, records_filter, limit):
            data = _plain(record.asset_materialization.metadata)
            stage = "accepted" if key == accepted_key(contract) else "candidate_stored"
            data.pop("stage", None)
            groups[record.storage_id] = _expand(record.storage_id, record.timestamp, record.run_id,
                                                record.asset_materialization.partition, stage, data)
    if partition:
        # batch summaries carry no partition; they list the targets that were unchanged
        summaries = dg.AssetRecordsFilter(asset_key=candidate_key(contract), after_storage_id=after)
        for record in _records(instance.fetch_observations, summaries, limit):
            data = _plain(record.asset_observation.metadata)
            if data.get("stage") == "batch_summary" and partition in (data.get("unchanged") or []):
                groups[record.storage_id] = _unchanged_lines(record, data, partition)
    ids = sorted(groups)[:limit]
    events = [line for storage_id in ids for line in groups[storage_id]]
    return events, (ids[-1] if ids else after)


def batch_summaries(instance: dg.DagsterInstance, contract: str, run_ids: list[str]) -> list[dict[str, Any]]:
    """The summary each batched run recorded (outcomes, unchanged, failures, skipped)."""
    found = []
    for run_id in run_ids:
        for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_OBSERVATION):
            observation = entry.asset_observation
            if observation is None or observation.asset_key != candidate_key(contract) or observation.partition:
                continue
            data = _plain(observation.metadata)
            if data.get("stage") == "batch_summary":
                found.append(data)
    return found
