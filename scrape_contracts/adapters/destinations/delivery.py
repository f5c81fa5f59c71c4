"""Send one request with the delivery policy, and say what every attempt did.

At most ``max_attempts`` (3) attempts, each with a ``timeout_s`` (10 s) budget; between them the backoff
(2, 4, 8 s) or the receiver's ``Retry-After`` when it asks for longer (capped at ``max_wait_s``). Retried:
429, 5xx and connection errors or timeouts. Any other 4xx is final at once (the request itself is wrong and
would be wrong again). Redirects are not followed: a destination URL is configured, not discovered.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

import httpx

from scrape_contracts.adapters.destinations.messages import Request
from scrape_contracts.adapters.fetch.policy import retry_after_seconds


class DeliveryStatus(str, Enum):
    DELIVERED = "delivered"
    DEAD = "dead"  # final failure: a 4xx, or every attempt failed


@dataclass(frozen=True)
class DeliveryPolicy:
    timeout_s: float = 10.0
    max_attempts: int = 3
    backoff_s: tuple[float, ...] = (2.0, 4.0, 8.0)
    max_wait_s: float = 60.0

    def wait_before(self, attempt: int, retry_after: float | None) -> float:
        """Seconds to wait before attempt ``attempt`` (2, 3, ...)."""
        base = self.backoff_s[min(attempt - 2, len(self.backoff_s) - 1)]
        return min(self.max_wait_s, max(base, retry_after or 0.0))


@dataclass(frozen=True)
class Attempt:
    number: int
    status: int | None  # HTTP status, None when no answer came
    duration_s: float
    error: str | None = None
    retry_after_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class DeliveryResult:
    status: DeliveryStatus
    attempts: tuple[Attempt, ...] = field(default_factory=tuple)

    @property
    def reason(self) -> str:
        last = self.attempts[-1] if self.attempts else None
        if last is None:
            return "not attempted"
        return last.error or f"HTTP {last.status}"


def _retryable(status: int) -> bool:
    return status == 429 or status >= 500


def deliver(request: Request, client: httpx.Client, policy: DeliveryPolicy = DeliveryPolicy(), *,
            sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic
            ) -> DeliveryResult:
    attempts: list[Attempt] = []
    for number in range(1, policy.max_attempts + 1):
        if attempts:
            sleep(policy.wait_before(number, attempts[-1].retry_after_s))
        started = clock()
        try:
            response = client.post(request.url, content=request.body, headers=request.headers,
                                   timeout=policy.timeout_s, follow_redirects=False)
        except httpx.HTTPError as exc:
            # the message names the exception type only: a URL in it may carry a token (Slack, Telegram)
            attempts.append(Attempt(number, None, clock() - started,
                                    f"{type(exc).__name__} sending to {request.shown_as}"))
            continue
        retry_after = retry_after_seconds(response.headers.get("retry-after"))
        status = response.status_code
        if 200 <= status < 300:
            attempts.append(Attempt(number, status, clock() - started))
            return DeliveryResult(DeliveryStatus.DELIVERED, tuple(attempts))
        error = f"{request.shown_as} answered HTTP {status}"
        attempts.append(Attempt(number, status, clock() - started, error, retry_after))
        if not _retryable(status):
            break
    return DeliveryResult(DeliveryStatus.DEAD, tuple(attempts))
