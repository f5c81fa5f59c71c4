"""The I/O steps a fetch plan asks its client to perform (adapters/fetch/policy.py), but the exchange itself."""

from __future__ import annotations

from dataclasses import dataclass

import httpx


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
