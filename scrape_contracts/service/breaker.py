"""A host that keeps failing is not asked again for the rest of a batch (a circuit breaker per host).

Without it, a site that is down costs every one of its targets the full retry schedule: 2,000 targets of a
host refusing connections kept a batch busy for six and a half minutes (three tries and 1.5 s of back-off
each, eight at a time) to learn what the first few fetches had said. After ``trip_after`` failures in a
row that say the host itself is unwell (no connection, timeouts, 429 or 5xx after the retries), the rest of
its targets fail at once with a reason that says so; one target is let through every ``probe_every_s``
seconds, and the first answer closes the breaker again. Any answer counts (a 404 is the target's own
business: the host is up); a blocked address or an invalid URL says nothing about the host.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from scrape_contracts.adapters.fetch.page import FetchError

# what says the host is unwell, not the page: the fetch's error kinds (see FetchError) and statuses
_HOST_KINDS = frozenset({"connection", "timeout"})
_HOST_STATUSES = frozenset({429, 500, 502, 503, 504})


def says_host_is_down(exc: BaseException) -> bool:
    kind = getattr(exc, "kind", None)
    return kind in _HOST_KINDS or (kind == "http_status" and getattr(exc, "status", None) in _HOST_STATUSES)


@dataclass
class _State:
    failures: int = 0
    last_error: str = ""
    closed_until: float = 0.0  # while tripped: when the next probe may go


class HostBreaker:
    def __init__(self, trip_after: int = 5, probe_every_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if trip_after < 1:
            raise ValueError("trip_after must be at least 1")
        self.trip_after = trip_after
        self.probe_every_s = probe_every_s
        self.clock = clock
        self._hosts: dict[str, _State] = {}

    def refuse(self, host: str, url: str) -> FetchError | None:
        """The error to record instead of fetching ``url``, or None: go ahead (possibly as the probe)."""
        state = self._hosts.get(host)
        if state is None or state.failures < self.trip_after:
            return None
        now = self.clock()
        if now >= state.closed_until:
            state.closed_until = now + self.probe_every_s  # this one is the probe; the others keep waiting
            return None
        return FetchError(
            f"not fetched: {host} failed {state.failures} fetches in a row (last: {state.last_error}), so the "
            "rest of its targets in this run were not tried; the last accepted data stays. Run again when the "
            "site is back", kind="host_down", url=url, transient=True)

    def record(self, host: str, outcome: object) -> None:
        """After a fetch: its page, or the exception it raised."""
        if isinstance(outcome, BaseException) and says_host_is_down(outcome):
            state = self._hosts.setdefault(host, _State())
            state.failures += 1
            state.last_error = str(outcome).split("\n")[0][:200]
            if state.failures == self.trip_after:
                state.closed_until = self.clock() + self.probe_every_s
        elif not isinstance(outcome, BaseException) or getattr(outcome, "kind", None) == "http_status":
            self._hosts.pop(host, None)  # an answer: the host is up
