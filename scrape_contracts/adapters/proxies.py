"""A contract's proxies for one run: which one carries the next request, and how each is doing.

Pure and thread-safe (no I/O; the clock is injected): the HTTP fetchers ask ``choose(host)`` before each
attempt and ``report(...)`` after it. Health lives in memory for the run; the fetchers hand ``health()`` to
whoever records it (the batch summary, a page's metadata), and what lasts to the next run, ``saved()``, to
the project store, whose rows ``restore(...)`` takes back when the next run's pool is made: a proxy the last
run quarantined rests out the rest of its rest, then one request re-checks it (``scrape/_health`` shows them).

- **Score** (0–1): a smoothed success rate times how fast the proxy answers against the fastest of the
  pool (smoothed latencies of the answers each carried). A proxy that answers is never starved: its weight
  has a floor, so a slow proxy keeps being measured and comes back when it speeds up.
- **Rotation**: among the healthy proxies, smooth weighted round-robin by score (deterministic: with equal
  scores, strict rotation in the contract's order).
- **Sticky** (``sticky``): a site host keeps the proxy it was given while that proxy answers, so its
  cookies keep arriving from one address; a failed request moves the host (its retry goes elsewhere).
- **Quarantine**: a proxy that refused the connection, asked for credentials (407) or failed a CONNECT is
  quarantined at once; timeouts and gateway errors (502, 504) after ``SOFT_FAILURES`` in a row. It rests
  ``recheck_s``, then one request re-checks it (the next one to any host); an answer puts it back in
  rotation, a failure doubles the rest (at most ``MAX_RECHECK_S``).
- Every proxy quarantined: the one whose re-check is nearest carries the request. No request ever goes
  around the proxies.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

SOFT_FAILURES = 2  # timeouts or gateway errors in a row before a quarantine
MAX_RECHECK_S = 600.0
MIN_WEIGHT = 0.05  # a slow proxy's share never falls below this (relative to a perfect one)
_SMOOTHING = 0.3  # weight of the newest observation in the moving averages


class Fault(Enum):
    """What an attempt through a proxy came to, as far as the proxy is concerned."""

    NONE = "none"  # an answer from the site (whatever its status)
    HARD = "hard"  # the proxy refused: no connection, 407, a failed CONNECT
    SOFT = "soft"  # a timeout, or a gateway error the proxy may have made itself (502, 504)


@dataclass(frozen=True)
class ProxyEndpoint:
    """A proxy as the fetcher uses it: ``url`` holds no credentials; ``name`` is what is shown."""

    name: str
    url: str
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)


@dataclass
class _Health:
    endpoint: ProxyEndpoint
    requests: int = 0
    failures: int = 0
    in_a_row: int = 0
    success: float = 1.0  # smoothed
    latency: float | None = None  # smoothed seconds of the answers it carried
    quarantined_until: float | None = None
    rest_s: float = 0.0
    quarantines: int = 0
    rechecks: int = 0
    probing: bool = False
    current: float = 0.0  # smooth weighted round-robin state

    @property
    def in_rotation(self) -> bool:
        return self.quarantined_until is None


@dataclass(frozen=True)
class SavedHealth:
    """What one run leaves of a proxy for the next: its smoothed success and latency, its rest, and (when
    quarantined) how long until it may be re-checked, counted from the moment it was saved."""

    proxy: str
    success: float
    latency_s: float | None
    rest_s: float
    recheck_in_s: float | None  # None: in rotation
    score: float = 1.0  # as the run ended, for showing


@dataclass(frozen=True)
class ProxyChoice:
    name: str
    probe: bool  # this request re-checks a quarantined proxy
    fallback: bool = False  # every proxy was quarantined: this one carries it anyway
    host: str = ""  # the site host it was chosen for


class ProxyPool:
    def __init__(self, endpoints: Sequence[ProxyEndpoint], *, sticky: bool = False, recheck_s: float = 30.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not endpoints:
            raise ValueError("a ProxyPool needs at least one proxy")
        self._proxies = {e.name: _Health(e) for e in endpoints}
        self.sticky = sticky
        self.recheck_s = recheck_s
        self._clock = clock
        self._hosts: dict[str, str] = {}  # site host → its proxy (sticky)
        self._lock = threading.Lock()

    @property
    def names(self) -> list[str]:
        return list(self._proxies)

    def endpoint(self, name: str) -> ProxyEndpoint:
        return self._proxies[name].endpoint

    def choose(self, host: str) -> ProxyChoice:
        """The proxy for the next attempt at ``host``."""
        with self._lock:
            now = self._clock()
            for health in self._proxies.values():
                if not health.in_rotation and not health.probing and now >= (health.quarantined_until or 0):
                    health.probing = True
                    health.rechecks += 1
                    return ProxyChoice(health.endpoint.name, True, host=host)
            healthy = [h for h in self._proxies.values() if h.in_rotation]
            if not healthy:
                nearest = min(self._proxies.values(), key=lambda h: h.quarantined_until or 0.0)
                return ProxyChoice(nearest.endpoint.name, False, fallback=True, host=host)
            if self.sticky:
                kept = self._proxies.get(self._hosts.get(host, ""))
                if kept is not None and kept.in_rotation:
                    return ProxyChoice(kept.endpoint.name, False, host=host)
            chosen = self._rotate(healthy)
            if self.sticky:
                self._hosts[host] = chosen.endpoint.name
            return ProxyChoice(chosen.endpoint.name, False, host=host)

    def _rotate(self, healthy: list[_Health]) -> _Health:
        weights = {h.endpoint.name: max(MIN_WEIGHT, self._score(h)) for h in healthy}
        total = sum(weights.values())
        for h in healthy:
            h.current += weights[h.endpoint.name]
        chosen = max(healthy, key=lambda h: h.current)  # the first of equals: the contract's order
        chosen.current -= total
        return chosen

    def report(self, choice: ProxyChoice, fault: Fault, seconds: float) -> None:
        """The attempt ``choice`` carried ended with ``fault`` after ``seconds``."""
        with self._lock:
            health = self._proxies[choice.name]
            health.requests += 1
            if choice.probe:
                health.probing = False
            # a request sent before the quarantine and answered after it says nothing of the proxy now
            checks = choice.probe or choice.fallback
            if fault is Fault.NONE:
                health.in_a_row = 0
                health.success = (1 - _SMOOTHING) * health.success + _SMOOTHING
                health.latency = seconds if health.latency is None else \
                    (1 - _SMOOTHING) * health.latency + _SMOOTHING * seconds
                if checks and not health.in_rotation:  # the re-check answered: back in rotation
                    health.quarantined_until, health.rest_s = None, 0.0
                return
            health.failures += 1
            health.in_a_row += 1
            if self._hosts.get(choice.host) == choice.name:
                del self._hosts[choice.host]  # its retry goes through another proxy; the cookies follow
            health.success = (1 - _SMOOTHING) * health.success
            if not health.in_rotation:
                if checks:
                    self._quarantine(health, longer=True)
            elif fault is Fault.HARD or health.in_a_row >= SOFT_FAILURES:
                self._quarantine(health, longer=False)

    def _quarantine(self, health: _Health, *, longer: bool) -> None:
        health.rest_s = min(MAX_RECHECK_S, health.rest_s * 2 if longer and health.rest_s else self.recheck_s)
        health.quarantined_until = self._clock() + health.rest_s
        health.quarantines += 1
        health.current = 0.0
        for host in [h for h, name in self._hosts.items() if name == health.endpoint.name]:
            del self._hosts[host]  # its hosts move to another proxy (their cookies go with them)

    def _score(self, health: _Health) -> float:
        fastest = min((h.latency for h in self._proxies.values() if h.latency is not None), default=None)
        speed = 1.0 if health.latency is None or not fastest or not health.latency else \
            min(1.0, fastest / health.latency)
        return health.success * speed

    def saved(self) -> list[SavedHealth]:
        """Each proxy's lasting health now, in the contract's order (no secret)."""
        with self._lock:
            now = self._clock()
            return [SavedHealth(h.endpoint.name, h.success, h.latency, h.rest_s,
                                None if h.in_rotation else max(0.0, (h.quarantined_until or now) - now),
                                round(self._score(h), 3))
                    for h in self._proxies.values()]

    def restore(self, saved: Sequence[SavedHealth]) -> None:
        """Take back what an earlier run left (proxies no longer in the contract are ignored): a quarantined
        proxy stays out for what is left of its rest, then the next request re-checks it."""
        with self._lock:
            now = self._clock()
            for entry in saved:
                health = self._proxies.get(entry.proxy)
                if health is None:
                    continue
                health.success = min(1.0, max(0.0, entry.success))
                health.latency = entry.latency_s
                health.rest_s = min(MAX_RECHECK_S, max(0.0, entry.rest_s))
                if entry.recheck_in_s is not None:
                    health.quarantined_until = now + min(MAX_RECHECK_S, max(0.0, entry.recheck_in_s))
                    health.rest_s = health.rest_s or self.recheck_s

    def health(self) -> list[dict[str, object]]:
        """Per proxy, in the contract's order: what the run's summary and ``scrape/_health`` show (no secret)."""
        with self._lock:
            now = self._clock()
            return [{
                "proxy": h.endpoint.name, "requests": h.requests, "failures": h.failures,
                "quarantined": not h.in_rotation, "quarantines": h.quarantines, "rechecks": h.rechecks,
                "score": round(self._score(h), 3),
                "latency_ms": None if h.latency is None else round(h.latency * 1000, 1),
                "recheck_in_s": None if h.in_rotation else round(max(0.0, (h.quarantined_until or now) - now), 1),
            } for h in self._proxies.values()]
