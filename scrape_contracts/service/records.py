"""Typed records passed between the stages of a scrape, and the names of those stages.

Every record is frozen: a stage returns a new record (``dataclasses.replace``) instead of changing the one
it got, so the single-target ops and the batch path can hand them around (and across processes) safely.
``details()`` gives the JSON the project store keeps with a candidate; its shape is the stored format.
"""

from __future__ import annotations

import copy

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from scrape_contracts.adapters.statuses import CandidateStatus
from scrape_contracts.adapters.store import Lease, LostLease, busy_message
from scrape_contracts.engine.diff import FieldChange
from scrape_contracts.engine.extract import FieldProblem
from scrape_contracts.engine.outcome import Outcome
from scrape_contracts.engine.validate import Violation


class Stage(str, Enum):
    """What happened to a target; the ``stage`` of every event in the trail."""

    FETCHED = "fetched"
    FETCH_FAILED = "fetch_failed"
    EXTRACTED = "extracted"
    VIOLATION_FOUND = "violation_found"
    HEALING = "healing"
    HEALING_REFUSED = "healing_refused"
    RE_EXTRACTED = "re_extracted"
    CHANGE_DETECTED = "change_detected"
    PAUSED = "paused"
    QUARANTINED = "quarantined"
    CHECK_FAILED = "check_failed"
    ACCEPTED = "accepted"
    UNCHANGED = "unchanged"
    REJECTED = "rejected"
    SKIPPED = "skipped"
    REVIEWED = "reviewed"
    REVIEW_ANNOUNCED = "review_announced"
    RESUMED = "resumed"
    REPAIR_REQUESTED = "repair_requested"  # healing refused: the provider was asked for its own repair
    REPAIR_PROPOSED = "repair_proposed"  # its proposal waits for review (the candidate is quarantined)
    REPAIR_FAILED = "repair_failed"  # no proposal (not asked, failed, nothing proposed)
    REPAIR_REVIEWED = "repair_reviewed"  # a person accepted (and the checks passed, or refused it) or rejected
    RECONCILED = "reconciled"  # a person decided an indeterminate provider submission (adopt, or resubmit)
    BATCH_SUMMARY = "batch_summary"
    BUSY = "busy"  # another run holds the target's lease: nothing was scraped here
    LEASE_LOST = "lease_lost"  # the lease expired or was taken over: nothing of this run was recorded


MAX_STORED_RECORD_CHANGES = 200

# a stage callback: the ops turn these into Dagster events, the batch path collects them per target
Emit = Callable[[Stage, dict[str, Any]], None]


def no_emit(stage: Stage, data: dict[str, Any]) -> None:
    """For callers that do not tell the story (tests, re-runs of a pure stage)."""


@dataclass(frozen=True)
class StageEvent:
    stage: Stage
    data: dict[str, Any]


class StoryRecorder:
    """An ``Emit`` that keeps the events in order, for one target of a batch."""

    def __init__(self) -> None:
        self.events: list[StageEvent] = []

    def __call__(self, stage: Stage, data: dict[str, Any]) -> None:
        self.events.append(StageEvent(stage, data))


@dataclass(frozen=True)
class Previous:
    """The last accepted version of a target, read once per scrape: every stage compares against it."""

    record: dict[str, Any]
    version: int
    page_sha256: str | None
    # what it was extracted under: the unchanged shortcut holds only while both are the same
    selector_version: int | None = None
    contract_fingerprint: str | None = None
    candidate_id: int | None = None  # its stored element fingerprints are this candidate's


@dataclass(frozen=True)
class Fetched:
    contract: str
    partition: str
    url: str
    final_url: str
    page_sha256: str | None
    unchanged: bool  # 304, or the same bytes as the last accepted page
    attempts: tuple[dict[str, Any], ...]
    etag: str | None
    last_modified: str | None
    previous: Previous | None

    @property
    def validators(self) -> dict[str, str | None]:
        return {"etag": self.etag, "last_modified": self.last_modified}


@dataclass(frozen=True)
class Extracted:
    fetched: Fetched
    record: dict[str, Any]
    problems: tuple[FieldProblem, ...]
    selector_version: int
    selectors: dict[str, str]
    reused: bool = False  # the last accepted record, by the unchanged shortcut: nothing was extracted
    # why the fields may be missing when it is not the selectors (a page its scripts fill in): said with
    # the required-field violations
    hint: str | None = None


@dataclass(frozen=True)
class Validated:
    extracted: Extracted
    violations: tuple[Violation, ...]

    @property
    def fetched(self) -> Fetched:
        return self.extracted.fetched


@dataclass(frozen=True)
class HealReport:
    attempted: bool = False
    healed: bool = False
    fields: tuple[str, ...] = ()
    reason: str | None = None
    results: dict[str, Any] = field(default_factory=dict)
    selector_version: int | None = None
    seconds: float | None = None
    # the provider's repair asked after the healer refused (service/repairs.py): RepairProposal.as_dict()
    repair: dict[str, Any] | None = None

    @property
    def repair_pending(self) -> bool:
        """A provider's proposal waits for a person: the candidate is quarantined, whatever else it fails."""
        return bool(self.repair) and self.repair.get("state") == "proposed"

    def as_dict(self) -> dict[str, Any]:
        # spelled out, not dataclasses.asdict (which deep-copies): this runs for every target of a batch
        data: dict[str, Any] = {"attempted": self.attempted, "healed": self.healed}
        if self.fields:
            data["fields"] = list(self.fields)
        if self.reason is not None:
            data["reason"] = self.reason
        if self.results:
            data["results"] = copy.deepcopy(self.results)
        if self.selector_version is not None:
            data["selector_version"] = self.selector_version
        if self.seconds is not None:
            data["seconds"] = self.seconds
        if self.repair is not None:
            data["repair"] = copy.deepcopy(self.repair)
        return data

    def selector_changes(self) -> dict[str, tuple[str | None, str]]:
        """field → (old selector, new selector) of a successful heal."""
        return {name: (r.get("old_selector"), r["selector"]) for name, r in self.results.items()
                if self.healed and r.get("selector")}


@dataclass(frozen=True)
class ScrapeResult:
    """The candidate of one target: its record, the outcome and the evidence for it."""

    contract: str
    partition: str
    url: str
    record: dict[str, Any]
    outcome: Outcome
    violations: tuple[Violation, ...]
    problems: tuple[FieldProblem, ...]
    changes: tuple[FieldChange, ...]
    heal: HealReport
    fetched: Fetched
    selector_version: int | None
    contract_fingerprint: str | None = None
    # a list target (records:): counts of the set and its diff by record key (service/lists.py)
    summary: dict[str, Any] | None = None
    # field -> fingerprint (engine.heal.FieldMemory as JSON) of the element each value came from, stored
    # with the candidate so a heal against this record works after its page is pruned
    fingerprints: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def page_sha256(self) -> str | None:
        return self.fetched.page_sha256

    def stored_changes(self) -> tuple[FieldChange, ...]:
        """The changes kept with the candidate: a list target's changed records (old and new), at most
        ``MAX_STORED_RECORD_CHANGES``; its added and removed records are the set's and the summary's keys."""
        if self.summary is None:
            return self.changes
        changed = [c for c in self.changes if c.old is not None and c.new is not None]
        return tuple(changed[:MAX_STORED_RECORD_CHANGES])

    @property
    def accepted_outcome(self) -> bool:
        return self.outcome in (Outcome.VALID, Outcome.HEALED)

    def details(self) -> dict[str, Any]:
        previous = self.fetched.previous
        return {
            "violations": [v.as_dict() for v in self.violations],
            "problems": [{"field": p.field, "kind": p.kind, "message": p.message} for p in self.problems],
            "changes": [c.as_dict() for c in self.stored_changes()],
            # a list target's last set is in its accepted version already: not copied into every candidate
            "previous": dict(previous.record) if previous and self.summary is None else None,
            "previous_version": previous.version if previous else None,
            "heal": self.heal.as_dict(),
            "attempts": [dict(a) for a in self.fetched.attempts],
            "validators": self.fetched.validators,
            "contract_fingerprint": self.contract_fingerprint,
            **({"set": self.summary} if self.summary is not None else {}),
        }


@dataclass(frozen=True)
class FetchFailure:
    """A target whose page could not be fetched: no candidate, the last accepted data stays."""

    contract: str
    partition: str
    url: str
    kind: str
    message: str
    transient: bool
    attempts: tuple[dict[str, Any], ...] = ()


class Refusal(str, Enum):
    """Why a batch did not record a target: another run holds its lease, or took it over meanwhile."""

    BUSY = "busy"
    LEASE_LOST = "lease_lost"


@dataclass(frozen=True)
class LeaseRefusal:
    """A target this run did not record, and the line a user reads about it (docs/leases.md)."""

    kind: Refusal
    message: str
    holder: str | None = None  # the run that holds the target's lease now

    @classmethod
    def busy(cls, held: Lease) -> LeaseRefusal:
        return cls(Refusal.BUSY, busy_message(held), held.holder)

    @classmethod
    def lost(cls, lost: LostLease) -> LeaseRefusal:
        return cls(Refusal.LEASE_LOST, lost.message, lost.current.holder if lost.current else None)


@dataclass(frozen=True)
class Recorded:
    """What the store made of a candidate."""

    candidate_id: int
    outcome: Outcome
    status: CandidateStatus
    accepted_version: int | None = None
    quarantine_reason: str | None = None
