"""The outcome of one materialisation, decided from violations, the diff and whether a heal happened."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the store reads outcomes: importing it must not load the validator (jsonschema, lxml)
    from scrape_contracts.engine.diff import FieldChange
    from scrape_contracts.engine.validate import Violation


class Outcome(str, Enum):
    VALID = "valid"  # new or changed data within every rule: accepted
    UNCHANGED = "unchanged"  # same data as the last accepted version (after normalisation)
    HEALED = "healed"  # a broken selector was healed and the data passes every rule: accepted
    REVIEW_REQUIRED = "review_required"  # only a change limit failed: quarantined for a person
    REJECTED = "rejected"  # schema/required/expected/bounds failed: never accepted
    FAILED = "failed"  # fetch or extraction failed before there was a record

    def __str__(self) -> str:  # the stored string, in messages and f-strings too
        return str(self.value)


def decide_outcome(violations: Sequence[Violation], changes: Sequence[FieldChange], *, healed: bool,
                   has_previous: bool) -> Outcome:
    from scrape_contracts.engine.validate import REVIEW_CHECKS

    if any(v.check not in REVIEW_CHECKS for v in violations):
        return Outcome.REJECTED
    if violations:
        return Outcome.REVIEW_REQUIRED
    if healed:
        return Outcome.HEALED
    if has_previous and not changes:
        return Outcome.UNCHANGED
    return Outcome.VALID
