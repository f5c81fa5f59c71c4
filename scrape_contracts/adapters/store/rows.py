"""The values the store hands out and takes in, and how its rows become them."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from scrape_contracts.adapters.statuses import (
    AcceptSource, CandidateStatus, Decision, SelectorSource, TextEnum,
)
from scrape_contracts.engine.outcome import Outcome


class CandidateAction(TextEnum):
    """What ``record_candidates`` does with a new candidate (the status it gets)."""

    ACCEPT = "accept"  # accepted as the next version (compare-and-swap on ``compared_with``)
    QUARANTINE = "quarantine"  # held for review, the target paused
    REJECT = "reject"
    UNCHANGED = "unchanged"
    PENDING = "pending"  # stored; accepted later, once Dagster's blocking checks passed


STATUS_OF = {CandidateAction.ACCEPT: CandidateStatus.ACCEPTED,
              CandidateAction.REJECT: CandidateStatus.REJECTED,
              CandidateAction.UNCHANGED: CandidateStatus.UNCHANGED}


@dataclass(frozen=True)
class NewCandidate:
    """A candidate to store, and what to do with it."""

    contract: str
    partition: str
    run_id: str
    url: str
    record: dict[str, Any]
    outcome: Outcome
    details: dict[str, Any]
    page_sha256: str | None
    selector_version: int | None
    action: CandidateAction
    reason: str | None = None  # why it is quarantined
    validators: dict[str, str] | None = None  # etag/last_modified to remember for an unchanged page
    compared_with: int | None = None  # the accepted version it was diffed against (accept: compare-and-swap)


@dataclass(frozen=True)
class RecordedCandidate:
    """What became of a new candidate; ``stale``: not recorded, its accept was diffed against an old version
    (``accepted_version`` is then the newest one, to diff against and decide again)."""

    candidate_id: int
    status: CandidateStatus | None
    accepted_version: int | None = None
    stale: bool = False


@dataclass(frozen=True)
class Candidate:
    id: int
    contract: str
    partition: str
    run_id: str
    url: str
    record: dict[str, Any]
    outcome: Outcome
    status: CandidateStatus
    details: dict[str, Any]
    page_sha256: str | None
    selector_version: int | None
    created_at: dt.datetime


@dataclass(frozen=True)
class AcceptedVersion:
    contract: str
    partition: str
    version: int
    record: dict[str, Any]
    url: str
    candidate_id: int | None
    run_id: str
    page_sha256: str | None
    source: AcceptSource
    reviewer: str | None
    reason: str | None
    created_at: dt.datetime


@dataclass(frozen=True)
class SelectorVersion:
    contract: str
    version: int
    parent_version: int | None
    selectors: dict[str, str]
    contract_selectors: dict[str, str]
    source: SelectorSource
    run_id: str | None
    partition: str | None
    changes: dict[str, Any]
    created_at: dt.datetime


@dataclass(frozen=True)
class PartitionState:
    contract: str
    partition: str
    paused: bool = False
    pause_reason: str | None = None
    heal_attempts: int = 0
    etag: str | None = None
    last_modified: str | None = None
    last_page_sha256: str | None = None
    failure_streak: int = 0  # consecutive failed or rejected scrapes
    last_success_at: dt.datetime | None = None  # last accepted or unchanged scrape (UTC)


@dataclass(frozen=True)
class Lease:
    """A target's lease: ``holder`` may commit for the target while the row still has ``token`` and until
    ``expires_at`` (UTC). A released lease keeps its holder and token and expires when it was released."""

    contract: str
    partition: str
    holder: str
    token: int
    taken_at: dt.datetime
    expires_at: dt.datetime

    @property
    def key(self) -> tuple[str, str]:
        return self.contract, self.partition

    def live(self, now: dt.datetime) -> bool:
        return self.expires_at > now


@dataclass(frozen=True)
class Review:
    contract: str
    partition: str
    candidate_id: int
    decision: Decision
    reviewer: str
    reason: str
    run_id: str | None
    accepted_version: int | None


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def state_of(row: Any) -> PartitionState:
    return PartitionState(row.contract, row.partition, bool(row.paused), row.pause_reason, row.heal_attempts,
                          row.etag, row.last_modified, row.last_page_sha256, row.failure_streak,
                          _utc(row.last_success_at))


def _utc(value: dt.datetime | None) -> dt.datetime | None:
    # SQLite gives timestamps back without their zone; they were written in UTC
    return value.replace(tzinfo=dt.timezone.utc) if value is not None and value.tzinfo is None else value


def lease_of(row: Any) -> Lease:
    return Lease(row.contract, row.partition, row.holder, row.token, _utc(row.taken_at),  # type: ignore[arg-type]
                 _utc(row.expires_at))  # type: ignore[arg-type]


def candidate_of(row: Any) -> Candidate:
    return Candidate(row.id, row.contract, row.partition, row.run_id, row.url, row.record, row.outcome,
                     row.status, row.details, row.page_sha256, row.selector_version, row.created_at)


def accepted_of(row: Any) -> AcceptedVersion:
    return AcceptedVersion(row.contract, row.partition, row.version, row.record, row.url, row.candidate_id,
                           row.run_id, row.page_sha256, row.source, row.reviewer, row.reason, row.created_at)


def selector_version_of(row: Any) -> SelectorVersion:
    return SelectorVersion(row.contract, row.version, row.parent_version, row.selectors, row.contract_selectors,
                           row.source, row.run_id, row.partition, row.changes, row.created_at)
