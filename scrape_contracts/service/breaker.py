"""A host that keeps failing is not asked for every one of its targets (a circuit breaker per host).

Without it, a site that is down costs every one of its targets the full retry schedule: 2,000 targets of a
host refusing connections kept a batch busy for six and a half minutes (three tries and 1.5 s of back-off
each, eight at a time) to learn what the first few fetches had said. After ``trip_after`` failures in a
row that say the host itself is unwell (no connection, timeouts, 429 or 5xx after the retries) the breaker
opens: the host's other targets wait, and one of them is let through every ``probe_every_s`` seconds as a
probe. The first answer closes it and the waiting targets go on (a short outage costs a few seconds, not
the rest of the batch); after ``probes`` failed probes the host is down for this run, and its remaining
targets fail at once with a reason that says so. Any answer counts (a 404, a page too large: the host
is up); a blocked address or an invalid URL says nothing about the host.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from scrape_contracts.adapters.fetch.page import FetchError

# the fetch's error kinds (see FetchError) that say the host is unwell, and those that say it answered
_DOWN_KINDS = frozenset({"connection", "timeout"})
_DOWN_STATUSES = frozenset({429, 500, 502, 503, 504})
_ANSWER_KINDS = frozenset({"http_status", "too_large", "bad_encoding", "too_many_redirects", "untrusted_certificate"})


def says_host_is_down(exc: BaseException) -> bool:
    kind = getattr(exc, "kind", None)
    return kind in _DOWN_KINDS or (kind == "http_status" and getattr(exc, "status", None) in _DOWN_STATUSES)


def _answered(outcome: object) -> bool:
    return not isinstance(outcome, BaseException) or getattr(outcome, "kind", None) in _ANSWER_KINDS


@dataclass
class _Host:
    failures: int = 0  # in a row, before it opened
    failed_probes: int = 0
    probing: bool = False
    next_probe_at: float = 0.0
    last_error: str = ""
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def wake(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


class HostBreaker:
    """One per event loop: its lanes share it, so the first failures of a host are seen by all of them."""

    def __init__(self, trip_after: int = 5, probe_every_s: float = 5.0, probes: int = 3,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        if trip_after < 1 or probes < 1:
            raise ValueError("trip_after and probes must be at least 1")
        self.trip_after, self.probe_every_s, self.probes = trip_after, probe_every_s, probes
        self.clock, self.sleep = clock, sleep
        self._hosts: dict[str, _Host] = {}

    def is_open(self, host: str) -> bool:
        state = self._hosts.get(host)
        return state is not None and state.failures >= self.trip_after

    async def admit(self, host: str, url: str) -> tuple[FetchError | None, bool]:
        """(refusal, probe): fetch ``url`` when the refusal is None; ``probe`` says it goes as the probe."""
        while True:
            if not self.is_open(host):
                return None, False
            state = self._hosts[host]
            if state.failed_probes >= self.probes:
                return FetchError(
                    f"not fetched: {host} failed {state.failures} fetches in a row and {state.failed_probes} "
                    f"probes {self.probe_every_s:g} s apart (last: {state.last_error}), so the rest of its targets "
                    "in this run were not tried; the last accepted data stays. Run again when the site is back",
                    kind="host_down", url=url, transient=True), False
            wait = state.next_probe_at - self.clock()
            if not state.probing and wait <= 0:
                state.probing = True
                return None, True
            changed = state.changed
            if state.probing:
                await changed.wait()  # the probe's answer
            else:
                await self.sleep(wait)

    def record(self, host: str, outcome: object, probe: bool = False) -> None:
        """After a fetch: its page, or the exception it raised; ``probe`` as ``admit`` said."""
        state = self._hosts.get(host)
        if isinstance(outcome, BaseException) and says_host_is_down(outcome):
            state = state or self._hosts.setdefault(host, _Host())
            state.last_error = str(outcome).split("\n")[0][:200]
            if probe:
                state.probing = False
                state.failed_probes += 1
                state.next_probe_at = self.clock() + self.probe_every_s
            elif state.failures < self.trip_after:
                state.failures += 1
                if state.failures == self.trip_after:
                    state.next_probe_at = self.clock() + self.probe_every_s
            state.wake()
        elif _answered(outcome):
            if state is not None:
                del self._hosts[host]  # the host is up: the waiting targets go on
                state.wake()
        elif probe and state is not None:
            state.probing = False  # the probe said nothing about the host: the next one tries
            state.wake()
