"""Where review notifications go. Destinations (webhook, Slack, Telegram) plug in behind ``Notifier``."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class ReviewNotice:
    contract: str
    partition: str
    candidate_id: int
    url: str
    reasons: list[str]
    record: dict[str, Any]


class Notifier(Protocol):
    def notify(self, notice: ReviewNotice) -> None: ...


class LogNotifier:
    """The default destination: a log line (visible in the sensor's tick logs)."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self.logger = logger or logging.getLogger("scrape_contracts.review")

    def notify(self, notice: ReviewNotice) -> None:
        self.logger.warning(
            "review required: %s/%s candidate %s (%s): %s", notice.contract, notice.partition,
            notice.candidate_id, notice.url, "; ".join(notice.reasons),
        )
