"""The I/O steps a fetch plan asks its client to perform (adapters/fetch/policy.py), but the exchange itself
(adapters/fetch/exchange.py), and the ``Plan`` that hands them out one at a time."""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import httpx

if TYPE_CHECKING:
    from scrape_contracts.adapters.fetch.page import Page
    from scrape_contracts.adapters.fetch.exchange import Exchange  # it reads the body: exchange.py's

    Step: TypeAlias = "Sleep | Turn | CheckRobots | CheckAddress | Exchange"


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class Turn:
    """Wait for a slot at ``url``'s host (concurrency, rate); return the seconds waited. The slot is the
    client's to release when the next ``Exchange`` ends (or at any other step, or the plan's end)."""

    url: str


@dataclass(frozen=True)
class CheckRobots:
    """Does robots.txt let ``url`` be fetched? Return None when it does, else a ``RobotsRefusal``."""

    url: str


@dataclass(frozen=True)
class RobotsRefusal:
    kind: str  # "robots_disallowed" (a rule) or "robots_unavailable" (robots.txt could not be read)
    detail: str
    transient: bool = False


@dataclass(frozen=True)
class CheckAddress:
    """Run the address guard on ``url``: return what ``AddressGuard.check`` returns (the addresses
    checked), or raise AddressBlocked / ResolutionFailed."""

    url: str


@dataclass
class Answer:
    status: int
    reason: str
    headers: httpx.Headers
    body: bytes | None


class Plan:
    """The steps of one fetch. Perform each step inside ``with plan.capture():`` and set ``plan.result``;
    an exception raised there goes back into the plan instead. ``plan.page`` is the outcome."""

    def __init__(self, steps: Generator[Step, Any, Page]) -> None:
        self._steps = steps
        self._error: Exception | None = None
        self._page: Page | None = None
        self.result: Any = None

    def __iter__(self) -> Plan:
        return self

    def __next__(self) -> Step:
        result, error = self.result, self._error
        self.result = self._error = None
        try:
            return self._steps.send(result) if error is None else self._steps.throw(error)
        except StopIteration as done:
            self._page = done.value
            raise StopIteration from None

    @property
    def page(self) -> Page:
        assert self._page is not None, "the plan has not finished"
        return self._page

    def capture(self) -> Plan:
        return self

    def __enter__(self) -> Plan:
        return self

    def __exit__(self, kind: object, error: BaseException | None, traceback: object) -> bool:
        # only Exception: cancellation and KeyboardInterrupt go straight up to the caller
        if isinstance(error, Exception):
            self._error = error
            return True
        return False
