"""Dead letters: the targets whose last runs all failed, grouped by why, and replaying them as one batch.

A target's failure streak counts its failed and rejected scrapes in a row (adapters/store/state.py); one that
reaches ``last`` is a dead letter until a scrape of it succeeds again, so the list drains by itself as
targets recover. Targets are grouped by the reason of their latest failure: a fetch failure by its message
with the target's own URL taken out (``GET <url> failed: HTTP 503 ...``), a rejection by the checks that
rejected it (their values differ from target to target; the rules do not).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from scrape_contracts.adapters.fetch.urls import redact_url
from scrape_contracts.adapters.statuses import CandidateStatus
from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.service.scrape import target_urls

_URL = re.compile(r"https?://[^\s'\")]+")
DEFAULT_LAST = 3


@dataclass(frozen=True)
class DeadLetter:
    partition: str
    url: str
    streak: int  # failed runs in a row
    reason: str  # its latest failure, as recorded
    paused: str | None  # why it is paused, if it is (a replay skips it)

    def as_dict(self) -> dict[str, Any]:
        return {"partition": self.partition, "url": self.url, "streak": self.streak, "reason": self.reason,
                "paused": self.paused}


@dataclass(frozen=True)
class FailureGroup:
    reason: str  # what the targets of the group have in common
    kind: str  # fetch | rejected | other
    targets: tuple[DeadLetter, ...]

    def as_dict(self) -> dict[str, Any]:
        return {"reason": self.reason, "kind": self.kind, "count": len(self.targets),
                "targets": [t.as_dict() for t in self.targets]}


def dead_letters(store: ProjectStore, loaded: LoadedContract, *,
                 last: int = DEFAULT_LAST) -> list[FailureGroup]:
    """The targets whose last ``last`` scrapes failed, grouped by reason, the largest group first."""
    if last < 1:
        raise ValueError("last must be 1 or more (the number of failed runs in a row)")
    name = loaded.contract.name
    failing = {key: state for key, state in store.states(name).items() if state.failure_streak >= last}
    if not failing:
        return []
    urls = target_urls(loaded, store)
    reasons = store.last_failures(name, sorted(failing))
    latest = store.latest_candidates(name)
    groups: dict[tuple[str, str], list[DeadLetter]] = {}
    for key in sorted(failing):
        state, url = failing[key], urls.get(key, "")
        reason = reasons.get(key, ("failed", None))[0]
        group = _group_of(reason, url, latest.get(key))
        letter = DeadLetter(key, redact_url(url) if url else "", state.failure_streak, reason,
                            state.pause_reason if state.paused else None)
        groups.setdefault(group, []).append(letter)
    found = [FailureGroup(reason, kind, tuple(items)) for (kind, reason), items in groups.items()]
    return sorted(found, key=lambda g: (-len(g.targets), g.reason))


def replayable(groups: list[FailureGroup]) -> list[str]:
    """The dead letters a replay scrapes: every one that is not paused (a batch skips those)."""
    return sorted(t.partition for g in groups for t in g.targets if t.paused is None)


def count(groups: list[FailureGroup]) -> int:
    return sum(len(g.targets) for g in groups)


def _group_of(reason: str, url: str, candidate: Any) -> tuple[str, str]:
    if reason.startswith(("GET ", "POST ")):
        text = reason.replace(redact_url(url), "<url>") if url else reason
        return "fetch", _URL.sub("<url>", text)[:300]
    if candidate is not None and candidate.status == CandidateStatus.REJECTED:
        violations = (candidate.details or {}).get("violations", [])
        checks = sorted({v.get("check") or "rejected" for v in violations})
        if checks:
            return "rejected", f"rejected by the checks: {', '.join(checks)}"
    return "other", _URL.sub("<url>", reason)[:300]
