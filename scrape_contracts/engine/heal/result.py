"""What the healer returns for one field, and why it refused."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class RefusalReason(StrEnum):
    """Why a field was not healed; ``evidence["reason"]`` holds the value (``"healed"`` for a heal)."""

    INVALID_SELECTOR = "invalid_selector"  # the contract's selector is empty or does not parse
    LIMIT_EXCEEDED = "limit_exceeded"  # a page, time, regex or selector-cost limit was hit
    TOO_DEEP = "too_deep"  # the page nests too deep to compare
    VALUE_OUT_OF_RULES = "value_out_of_rules"  # the old element is still there; its value broke the rules
    HIDDEN_COPY_ONLY = "hidden_copy_only"  # only a machine-readable copy (meta) of a shown value remains
    ONLY_DECOYS = "only_decoys"  # every candidate is crossed out, related, or another item's
    FIELD_GONE = "field_gone"  # nothing on the new page holds a valid value
    LOW_CONFIDENCE = "low_confidence"  # the best candidate's score is below the floor
    VALUE_ONLY = "value_only"  # only the value matches: no structure, anchor or label evidence
    CHANGED_VALUE_WEAK = "changed_value_weak"  # a changed text without a strong anchor or fingerprint
    AMBIGUOUS = "ambiguous"  # the runner-up is too close to the best
    NO_STABLE_SELECTOR = "no_stable_selector"  # no stable selector matches exactly the chosen element
    NO_LAST_GOOD = "no_last_good"  # neither the last good page nor a stored fingerprint of the field
    ITEM_MOVED = "item_moved"  # a positional field's list changed order or grew: its place holds another item
    ITEM_NOT_FOUND = "item_not_found"  # the item the contract names (first, last, newest, key) is not found


HEALED = "healed"  # evidence["reason"] of a heal


@dataclass(frozen=True)
class HealResult:
    value: Any | None  # None = refused
    selector: str | None
    confidence: float
    evidence: dict = field(default_factory=dict)  # JSON-serialisable: reason, detail, scores, runner-up

    @property
    def healed(self) -> bool:
        return self.value is not None

    @property
    def refusal(self) -> RefusalReason | None:
        """Why the field was refused, or None when it was healed."""
        reason = self.evidence.get("reason")
        return None if self.healed or reason in (None, HEALED) else RefusalReason(reason)


def refusal(reason: RefusalReason, detail: str, candidates: int, **extra: Any) -> HealResult:
    """A refusal before any candidate was judged."""
    evidence = {
        "strategy": None,
        "reason": reason.value,
        "detail": detail,
        "runner_up": None,
        "score": None,
        "candidates": candidates,
        **extra,
    }
    return HealResult(None, None, 0.0, evidence)
