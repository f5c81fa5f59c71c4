"""What a batch came to, as one record: counts, how many targets failed, and each cause of failure once.

A full disk fails every target after it with the same cause; the summary names that cause once, with how
many targets it failed and a few of them, so a reader (the CLI's ``run --wait``, the API) says it in one
line and exits non-zero when ``targets_failed``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from scrape_contracts.service.records import FetchFailure

_SHOWN = 5  # partitions named per cause


@dataclass(frozen=True)
class FailureCause:
    kind: str  # the failure's kind: no_space, timeout, connection, http_status, ...
    reason: str  # one line: the first target's message of this kind
    targets: int
    partitions: tuple[str, ...]  # the first few

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "reason": self.reason, "targets": self.targets,
                "partitions": list(self.partitions)}


@dataclass(frozen=True)
class BatchSummary:
    targets: int
    counts: Mapping[str, int]  # outcome → targets
    failed: int  # targets with no candidate: their fetch, or storing their page, failed
    causes: tuple[FailureCause, ...]  # most targets first

    @property
    def targets_failed(self) -> bool:
        return self.failed > 0

    def line(self) -> str:
        """``330 of 500 targets failed: no space left on ... (330 targets)``; empty when none failed."""
        if not self.failed:
            return ""
        causes = "; ".join(f"{c.reason} ({c.targets} target{'s' if c.targets != 1 else ''})" for c in self.causes)
        return f"{self.failed} of {self.targets} targets failed: {causes}"


def summarise(targets: int, counts: Mapping[str, int], failures: Iterable[FetchFailure]) -> BatchSummary:
    by_kind: dict[str, list[FetchFailure]] = {}
    for failure in failures:
        by_kind.setdefault(failure.kind, []).append(failure)
    causes = sorted((FailureCause(kind, group[0].message, len(group), tuple(f.partition for f in group[:_SHOWN]))
                     for kind, group in by_kind.items()), key=lambda c: (-c.targets, c.kind))
    return BatchSummary(targets, dict(counts), sum(c.targets for c in causes), tuple(causes))
