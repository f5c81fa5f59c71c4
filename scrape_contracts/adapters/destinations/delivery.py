"""Send one request with the delivery policy, and say what every attempt did.

At most ``max_attempts`` (3) attempts, each within one ``timeout_s`` (10 s) deadline for all of it (connect,
send, the answer's headers and body: a receiver dripping a byte at a time is cut there); between them the
backoff (2, 4, 8 s) or the receiver's ``Retry-After`` when it asks for longer (capped at ``max_wait_s``).
Retried: 429, 5xx and connection errors or timeouts. Any other 4xx is final at once (the request itself is
wrong and would be wrong again). Redirects are not followed: a destination URL is configured, not
discovered. Every attempt goes through the address guard fetching uses (``adapters.netguard``) and connects
only to the addresses it checked; a refused address is final. At most ``max_response_bytes`` of an answer
are read: only its status matters.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

import httpx

from scrape_contracts.adapters.destinations.messages import Request
from scrape_contracts.adapters.fetch.client import default_ssl_context
from scrape_contracts.adapters.fetch.connect import pinned_to
from scrape_contracts.adapters.fetch.deadline import deadline_within
from scrape_contracts.adapters.fetch.policy import retry_after_seconds
from scrape_contracts.adapters.fetch.transport import SyncTransport
from scrape_contracts.adapters.netguard import AddressBlocked, AddressGuard, ResolutionFailed, Resolver


class DeliveryStatus(str, Enum):
    DELIVERED = "delivered"
    DEAD = "dead"  # final failure: a 4xx, a refused address, or every attempt failed


@dataclass(frozen=True)
class DeliveryPolicy:
    timeout_s: float = 10.0  # the deadline of one attempt, whole
    max_attempts: int = 3
    backoff_s: tuple[float, ...] = (2.0, 4.0, 8.0)
    max_wait_s: float = 60.0
    max_response_bytes: int = 65_536  # of an answer's body; the rest is never read

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


class DeliveryClient:
    """Connections for deliveries: pooled, only to the addresses the guard checked, within a deadline.

    ``resolver`` stands in for DNS (the address guard's); the default is the system's."""

    def __init__(self, *, resolver: Resolver | None = None, max_connections: int = 8) -> None:
        transport = SyncTransport(max_connections=max_connections, ssl_context=default_ssl_context())
        self._client = httpx.Client(transport=transport)
        self._resolver = resolver

    def guard(self, request: Request) -> AddressGuard:
        return AddressGuard(allow_private=request.allow_private_addresses, resolver=self._resolver)

    def post(self, request: Request, addresses: tuple[str, ...] | None, policy: DeliveryPolicy
             ) -> tuple[int, str | None]:
        """(status, Retry-After) of one POST, all of it within ``policy.timeout_s``."""
        with deadline_within(policy.timeout_s), pinned_to(request.url, addresses), self._client.stream(
                "POST", request.url, content=request.body, headers=request.headers, timeout=policy.timeout_s,
                follow_redirects=False) as response:
            read = 0
            for chunk in response.iter_raw():
                read += len(chunk)
                if read >= policy.max_response_bytes:
                    break  # closing an answer not read to its end closes its connection: nothing more comes
            return response.status_code, response.headers.get("retry-after")

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> DeliveryClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _retryable(status: int) -> bool:
    return status == 429 or status >= 500


def deliver(request: Request, client: DeliveryClient, policy: DeliveryPolicy = DeliveryPolicy(), *,
            sleep: Callable[[float], None] = time.sleep, clock: Callable[[], float] = time.monotonic
            ) -> DeliveryResult:
    attempts: list[Attempt] = []
    for number in range(1, policy.max_attempts + 1):
        if attempts:
            sleep(policy.wait_before(number, attempts[-1].retry_after_s))
        started = clock()
        try:
            addresses = client.guard(request).check(request.url)
        except AddressBlocked as exc:
            hint = " (set allow_private_addresses: true on the destination if this receiver is intended)" \
                if exc.opt_in_helps else ""
            attempts.append(Attempt(number, None, clock() - started,
                                    f"blocked_address: {request.shown_as}: {exc}{hint}"))
            break  # the same address would be refused again
        except ResolutionFailed:
            attempts.append(Attempt(number, None, clock() - started,
                                    f"the host of {request.shown_as} did not resolve"))
            continue
        try:
            status, retry_header = client.post(request, addresses, policy)
        except httpx.HTTPError as exc:
            # the message names the exception type only: a URL in it may carry a token (Slack, Telegram)
            attempts.append(Attempt(number, None, clock() - started,
                                    f"{type(exc).__name__} sending to {request.shown_as}"))
            continue
        retry_after = retry_after_seconds(retry_header)
        if 200 <= status < 300:
            attempts.append(Attempt(number, status, clock() - started))
            return DeliveryResult(DeliveryStatus.DELIVERED, tuple(attempts))
        error = f"{request.shown_as} answered HTTP {status}"
        attempts.append(Attempt(number, status, clock() - started, error, retry_after))
        if not _retryable(status):
            break
    return DeliveryResult(DeliveryStatus.DEAD, tuple(attempts))
