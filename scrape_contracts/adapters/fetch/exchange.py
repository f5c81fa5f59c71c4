"""One attempt's GET as the fetch plan hands it to its client (``Exchange``), and the fetch it belongs to.

The client sends the request and feeds the body through the exchange as it arrives; the exchange decodes
and bounds it (adapters/fetch/body.py) and keeps to the fetch's deadline. What fails here is raised to the
plan (adapters/fetch/policy.py), which words every failure: ``DeclaredTooLarge`` and ``DeadlinePassed`` are
the exchange's own, the others come from the body reader or the client.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from scrape_contracts.adapters.fetch.body import BodyReader
from scrape_contracts.adapters.fetch.steps import Answer


class DeadlinePassed(Exception):
    """The fetch's deadline passed while the body was still arriving."""


class DeclaredTooLarge(Exception):
    """The response's Content-Length is over ``max_bytes``: refused before a byte of the body is read."""

    def __init__(self, declared: int) -> None:
        super().__init__(declared)
        self.declared = declared


@dataclass
class FetchState:
    """One ``fetch`` call; never shared, which keeps a fetcher safe to use from many threads or tasks."""

    requested_url: str
    clock: Callable[[], float]
    deadline_s: float
    robots: bool = True
    started: float = 0.0
    attempts: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def elapsed(self) -> float:
        return self.clock() - self.started

    def remaining(self) -> float:
        return self.deadline_s - self.elapsed()


class Exchange:
    """One GET for the client to send. It reports the response with ``start(status, reason, headers)``
    and, when that returns True, ``feed``s every chunk of the body as sent on the wire (httpx's
    ``iter_raw()``, as it arrives); when it returns False and ``drain`` is set, it reads the (empty) body to
    its end without feeding it, so the connection can be used again; it then returns ``finish()``.

    ``timeout`` bounds each network operation; no operation may outlast ``budget_s``, what is left of
    the fetch deadline. A new connection goes to ``addresses``, the ones the guard checked (None: connect
    to the host as named, a literal IP or a host exempt from the check).
    """

    def __init__(
        self, url: str, headers: dict[str, str], timeout: float, state: FetchState, max_bytes: int,
        record: dict[str, Any], addresses: tuple[str, ...] | None = None,
    ) -> None:
        self.url = url
        self.addresses = addresses
        self.headers = headers
        self.timeout = timeout
        self.budget_s = state.remaining()
        self._state = state
        self._max_bytes = max_bytes
        self._record = record
        self._answer: Answer | None = None
        self._reader: BodyReader | None = None
        self.drain = False

    def via(self, proxy: str) -> None:
        """The attempt goes through ``proxy`` (its shown name): recorded with it."""
        self._record["proxy"] = proxy

    def start(self, status: int, reason: str, headers: httpx.Headers) -> bool:
        self._record["status"] = status
        self._answer = Answer(status, reason, headers, None)
        # a 304 has no body (HTTP semantics; h11 reads none whatever the server sends): reading its end costs
        # nothing and keeps the connection for the next request, where closing it unread would drop it; an
        # unchanged sweep is mostly 304s, and a new connection per target was a fifth of its fetch time
        self.drain = status == 304
        if not 200 <= status < 300:
            # error and redirect bodies are never used; closing unread drops the connection cheaply
            return False
        declared = headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self._max_bytes:
            raise DeclaredTooLarge(int(declared))
        self._reader = BodyReader(headers.get("content-encoding", ""), self._max_bytes)
        return True

    def feed(self, chunk: bytes) -> None:
        # a read timeout restarts with every chunk; the sockets enforce the deadline too (``deadline``),
        # this check holds it on the policy's own clock
        if self._state.remaining() < 0:
            raise DeadlinePassed
        assert self._reader is not None, "feed() before start() returned True"
        self._reader.feed(chunk)

    def finish(self) -> Answer:
        assert self._answer is not None, "finish() before start()"
        if self._reader is not None:
            self._answer.body = self._reader.finish()
        return self._answer
