"""The values the project store keeps in its status columns (``adapters/schema.py``), as enums.

They are kept apart from the tables so that the layers which decide on a status (service, defs, api)
name it without the SQLAlchemy tables. A member is its stored string, the one earlier releases stored: the
database refuses any other value (a CHECK constraint on each such column), so a new or renamed member needs
a migration.
"""

from __future__ import annotations

from enum import Enum


class TextEnum(str, Enum):
    """An enum whose members are their stored strings: ``str()``, f-strings and JSON give the value."""

    def __str__(self) -> str:
        return str(self.value)


class CandidateStatus(TextEnum):
    """A candidate's life: pending → accepted | quarantined | rejected | unchanged;
    quarantined → accepted | rejected | superseded."""

    PENDING = "pending"
    ACCEPTED = "accepted"
    QUARANTINED = "quarantined"
    REJECTED = "rejected"
    UNCHANGED = "unchanged"
    SUPERSEDED = "superseded"


class AcceptSource(TextEnum):
    """How an accepted version came to be."""

    SCRAPE = "scrape"
    REVIEW = "review"


class SelectorSource(TextEnum):
    """Where a selector version came from: the contract's YAML, a heal, or a provider's repair a person
    approved (and the contract's checks passed)."""

    CONTRACT = "contract"
    HEAL = "heal"
    PROVIDER_REPAIR = "provider_repair"


class OutboxKind(TextEnum):
    """A state change that leaves the project as an event (written in the change's own transaction)."""

    ACCEPTED = "accepted"  # a new accepted version (by a scrape or a reviewer)
    QUARANTINED = "quarantined"  # a candidate waits for review
    REJECTED_BY_REVIEW = "rejected_by_review"
    PAUSED = "paused"  # by a person, a review or the healer's budget
    HEALED = "healed"  # a new selector version
    FAILED = "failed"  # a scrape of the target failed (fetch) or was rejected; data: streak
    RECOVERED = "recovered"  # accepted or unchanged again after failures; data: the streak it ended


class ProviderJobState(TextEnum):
    """A provider job's life (adapters/store/provider_jobs.py): submitting → submitted → done | failed;
    submitting → indeterminate (no job id was recorded) → submitted (adopted) | abandoned (resubmitted);
    submitting → abandoned (the submit never reached the provider)."""

    SUBMITTING = "submitting"
    SUBMITTED = "submitted"
    DONE = "done"
    FAILED = "failed"
    INDETERMINATE = "indeterminate"
    ABANDONED = "abandoned"


class RepairState(TextEnum):
    """A provider repair's life (adapters/store/repairs.py): requesting → proposed | failed;
    proposed → accepted (approved and passed the checks) | refused (approved, failed the checks) | rejected."""

    REQUESTING = "requesting"
    PROPOSED = "proposed"
    FAILED = "failed"
    ACCEPTED = "accepted"
    REFUSED = "refused"
    REJECTED = "rejected"


class DeliveryState(TextEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    DEAD = "dead"  # a 4xx, or every attempt failed: a failed delivery run; replay sends it again


class Decision(TextEnum):
    """A reviewer's decision on a quarantined candidate."""

    ACCEPT = "accept"
    REJECT = "reject"


class TokenScope(TextEnum):
    """What an API token may do: read, or read and change (launch, review, pause, add targets)."""

    READ = "read"
    WRITE = "write"
