"""Each site host's budget for one run: requests in flight, the request rate, and adaptive back-off.

``HostPace`` is the pure part (every method takes ``now``): it says when the next request to its host may
start and learns from each answer. ``AsyncPacer`` (one per event loop) and ``SyncPacer`` (one per sync
fetcher) make requests wait their turn with it; the HTTP fetchers take a turn for every attempt and give it
back when that attempt's exchange ends, so a page waiting out a Retry-After holds no slot.

Back-off (``throttle``), like Scrapy's AutoThrottle in spirit, as a window of slots (AIMD):

- 429: the window halves (at least 1 slot), and its Retry-After holds every request to the host until then;
- 503 or no answer (timeout, broken connection): one slot less, and from the second in a row the window
  halves; a lone 503 with a Retry-After costs no slot (the server said how long that page is to wait, the
  page waits it out, nothing says the host is congested); a cut happens once per round trip however many
  answers say so
  (a 503's Retry-After is waited out by the page that got it, by the fetch policy, holding no slot); from
  the second such answer in a row (``failing``) the host is held a little longer each time
  (``FAILING_HOLD_S``, doubling) and its waiting retries count as its fetches, so a host in trouble is not
  handed target after target while the earlier ones wait to retry (one 503 now and then costs nothing);
- an answer much slower than the host's fastest (``SLOW_FACTOR`` times it, and ``SLOW_MARGIN_S`` more): one
  slot less;
- any other answer: the window grows back by 1/window (one slot per window's worth of answers), up to the
  contract's concurrency. With steady latencies nothing is ever held back.

Across processes (chunk steps of one batched run, or several runs, on several worker hosts), ``shared`` bounds
the total: a ``SharedBudget`` (adapters/store/host_budgets.py, on the PostgreSQL project store) hands out the
host's ``concurrency`` slots and spaces its starts by ``interval_s`` over every process. The local pace still
decides first (its window may be smaller than the contract's concurrency, a Retry-After holds it); then the
request waits for a shared slot and its shared start time. ``AsyncPacer`` hands a shared slot on from a
request that ended to the host's next one instead of giving it back and taking it again
(adapters/fetch/shared_slots.py); ``SyncPacer`` (a single target's few pages) goes to the store each time.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from scrape_contracts.adapters.fetch.shared_slots import HAND_ON_S, SHARED_POLL_S, SharedBudget, SharedSlots

SLOW_FACTOR = 3.0
SLOW_MARGIN_S = 0.5
MAX_HOLD_S = 120.0  # longest interval or Retry-After hold a host may impose (a hostile robots.txt or header)
FAILING_HOLD_S = 0.25
MAX_FAILING_HOLD_S = 4.0  # a host that is down is the breaker's to give up on (service/breaker.py), not this
_BACK_OFF_STATUSES = frozenset({429, 503})


@dataclass(frozen=True)
class HostLimits:
    """``concurrency``: requests in flight at once; ``interval_s``: least seconds between two starts."""

    concurrency: int = 4
    interval_s: float = 0.0
    throttle: bool = True

    def __post_init__(self) -> None:
        if self.concurrency < 1 or self.interval_s < 0:
            raise ValueError("HostLimits needs concurrency >= 1 and interval_s >= 0")


@dataclass
class HostPace:
    limits: HostLimits
    in_flight: int = 0
    window: float = 0.0
    interval_s: float = 0.0
    next_start: float = float("-inf")
    hold_until: float = float("-inf")
    fastest: float | None = None
    latency: float | None = None  # smoothed
    last_cut: float = float("-inf")
    failing: int = 0  # back-off answers in a row
    started: int = 0
    peak: int = 0

    def __post_init__(self) -> None:
        self.window = float(self.limits.concurrency)
        self.interval_s = self.limits.interval_s

    @property
    def slots(self) -> int:
        return max(1, int(self.window))

    def delay(self, now: float) -> float | None:
        """None: every slot is taken (wait for one back); else seconds before the next may start (0: now)."""
        if self.in_flight >= self.slots:
            return None
        return max(0.0, self.next_start - now, self.hold_until - now)

    def start(self, now: float) -> None:
        self.in_flight += 1
        self.started += 1
        self.peak = max(self.peak, self.in_flight)
        self.next_start = now + self.interval_s

    def at_least(self, interval_s: float) -> None:
        """A least interval between starts asked elsewhere (robots.txt Crawl-delay): the slower one wins."""
        self.interval_s = max(self.interval_s, min(interval_s, MAX_HOLD_S))

    def finish(self, now: float, started: float, status: int | None, retry_after_s: float | None = None,
               *, about_host: bool = True) -> None:
        """An attempt that started at ``started`` ended: ``status`` None when no answer came; ``about_host``
        False: it failed at a proxy before reaching the host, which says nothing of the host."""
        self.in_flight -= 1
        if not about_host:
            return
        if status is None or status in _BACK_OFF_STATUSES:
            # counted with the throttle off too: a failing host's fetches waiting out a retry keep their room
            # (``AsyncPacer.sleeping``), else a batch starts every target of a host that is down before the
            # breaker has seen enough of them fail to open
            self.failing += 1
            if not self.limits.throttle:
                return
            if status == 429 and retry_after_s:
                self.hold_until = max(self.hold_until, now + min(retry_after_s, MAX_HOLD_S))
            if self.failing >= 2:
                hold = min(MAX_FAILING_HOLD_S, FAILING_HOLD_S * 2 ** min(self.failing - 2, 16))
                self.hold_until = max(self.hold_until, now + hold)
            if status == 503 and retry_after_s and self.failing < 2:
                # an explicit instruction for that page, waited out by it holding no slot: no congestion
                # signal (cutting a slot here, then three answers to grow it back, cost the slowest hosts
                # of benchmarks/politeness.py most of the product's in-sweep loss against the bound)
                return
            # a 429 is about this client's pace; one 503 now and then may be one page's trouble
            self._cut(now, halve=status == 429 or self.failing >= 2)
            return
        self.failing = 0
        if not self.limits.throttle:
            return
        took = max(0.0, now - started)
        self.fastest = took if self.fastest is None else min(self.fastest, took)
        self.latency = took if self.latency is None else 0.7 * self.latency + 0.3 * took
        if self.latency > SLOW_FACTOR * self.fastest and self.latency - self.fastest > SLOW_MARGIN_S:
            self._cut(now, halve=False)
        elif self.window < self.limits.concurrency:
            self.window = min(float(self.limits.concurrency), self.window + 1.0 / self.window)

    def _cut(self, now: float, *, halve: bool) -> None:
        # one cut per round trip: the answers to requests sent before the last cut say nothing new
        if now - self.last_cut < (self.latency or 0.0):
            return
        self.last_cut = now
        self.window = max(1.0, self.window / 2 if halve else self.window - 1.0)


@dataclass(frozen=True)
class Ticket:
    host: str
    started: float
    slot: int | None = None  # the shared slot it holds


class _Base:
    def __init__(self, limits: HostLimits, clock: Callable[[], float]) -> None:
        self.limits = limits
        self.clock = clock
        self._paces: dict[str, HostPace] = {}

    def pace(self, host: str) -> HostPace:
        found = self._paces.get(host)
        if found is None:
            found = self._paces[host] = HostPace(self.limits)
        return found

    def peaks(self) -> dict[str, int]:
        """Most requests in flight at once, per host, so far."""
        return {host: pace.peak for host, pace in self._paces.items()}


@dataclass
class _Gate:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # FIFO: the first to wait goes first
    freed: asyncio.Event = field(default_factory=asyncio.Event)
    sleeping: int = 0
    waiting: int = 0  # requests inside take()


class AsyncPacer(_Base):
    """The hosts' budgets for every task of one event loop. ``on_change(host)`` is called when a slot of
    ``host`` comes free or a request of it starts waiting out a retry (the batch's dispatcher listens)."""

    def __init__(self, limits: HostLimits, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
                 shared: SharedBudget | None = None, hold_s: float = 60.0, hand_on_s: float = HAND_ON_S) -> None:
        super().__init__(limits, clock)
        self.sleep = sleep
        self.shared_slots = SharedSlots(shared, limits.concurrency, hold_s, limits.interval_s, clock=clock,
                                        sleep=sleep, hand_on_s=hand_on_s) if shared is not None else None
        self._gates: dict[str, _Gate] = {}
        self.listeners: list[Callable[[str], None]] = []
        # whether more of a host's requests are about to ask for a slot (the batch's dispatcher says): then
        # a shared slot given back is handed on to the next one (shared_slots.py)
        self.demand: list[Callable[[str], bool]] = []
        self.resting = 0  # requests waiting out a retry, over all hosts

    def _gate(self, host: str) -> _Gate:
        gate = self._gates.get(host)
        if gate is None:
            gate = self._gates[host] = _Gate()
        return gate

    def slots(self, host: str) -> int:
        return self.pace(host).slots

    def sleeping(self, host: str) -> int:
        """Requests of ``host`` waiting out a retry, holding no slot (none while the host is failing: then
        they count as its fetches, see the module's notes)."""
        gate = self._gates.get(host)
        return gate.sleeping if gate and self.pace(host).failing < 2 else 0

    async def take(self, host: str) -> Ticket:
        pace, gate = self.pace(host), self._gate(host)
        gate.waiting += 1
        try:
            async with gate.lock:
                while True:
                    wait = pace.delay(self.clock())
                    if wait == 0:
                        break
                    if wait is None:
                        freed = gate.freed
                        await freed.wait()
                    else:
                        await self.sleep(wait)
                slot = await self.shared_slots.take(host) if self.shared_slots is not None else None
                now = self.clock()
                pace.start(now)
                return Ticket(host, now, slot)
        finally:
            gate.waiting -= 1

    def close(self) -> None:
        """Every shared slot back to the store; wait for the last give-backs."""
        if self.shared_slots is not None:
            self.shared_slots.close()

    def give_back(self, ticket: Ticket, status: int | None, retry_after_s: float | None = None, *,
                  about_host: bool = True) -> None:
        pace = self.pace(ticket.host)
        pace.finish(self.clock(), ticket.started, status, retry_after_s, about_host=about_host)
        gate = self._gate(ticket.host)
        if ticket.slot is not None and self.shared_slots is not None:
            # the host's next request may go at once and one is waiting or about to: it gets this slot
            wanted = gate.waiting > 0 or any(wants(ticket.host) for wants in self.demand)
            if wanted and pace.delay(self.clock()) == 0:
                self.shared_slots.hand_on(ticket.host, ticket.slot)
            else:
                self.shared_slots.give_back(ticket.host, ticket.slot)
        gate.freed.set()
        gate.freed = asyncio.Event()
        self._changed(ticket.host)

    async def pause(self, host: str, seconds: float,
                    sleep: Callable[[float], Awaitable[None]] | None = None) -> None:
        """Wait ``seconds`` for a retry, holding no slot: the host's other targets may go meanwhile."""
        gate = self._gate(host)
        gate.sleeping += 1
        self.resting += 1
        self._changed(host)
        try:
            await (sleep or self.sleep)(seconds)
        finally:
            gate.sleeping -= 1
            self.resting -= 1

    def _changed(self, host: str) -> None:
        for listener in self.listeners:
            listener(host)


class SyncPacer(_Base):
    """The hosts' budgets for the threads of one sync fetcher (a single-target run: its pages in turn).

    ``shared``: as for ``AsyncPacer``, the budget every process on the PostgreSQL project store shares, so
    single-target runs side by side (a UI launch, a sensor's, a batch's chunks) stay within the host's
    ``fetch.concurrency`` and ``fetch.rate`` together. Its calls are made one at a time (one connection)."""

    def __init__(self, limits: HostLimits, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep, shared: SharedBudget | None = None,
                 hold_s: float = 60.0) -> None:
        super().__init__(limits, clock)
        self.sleep = sleep
        self.shared, self.hold_s = shared, hold_s
        self._cond = threading.Condition()
        self._shared_lock = threading.Lock()

    def take(self, host: str) -> Ticket:
        pace = self.pace(host)
        while True:
            with self._cond:
                wait = pace.delay(self.clock())
                if wait == 0:
                    pace.start(self.clock())  # the local slot first, so this fetcher's threads queue here
                    break
                if wait is None:
                    self._cond.wait()
                    continue
            self.sleep(wait)
        try:
            slot = self._take_shared(host) if self.shared is not None else None
        except BaseException:
            self._local_back(host, self.clock(), None, None, about_host=False)
            raise
        return Ticket(host, self.clock(), slot)

    def _take_shared(self, host: str) -> int:
        assert self.shared is not None
        poll = SHARED_POLL_S[0]
        while True:
            with self._shared_lock:
                slot = self.shared.take(host, self.limits.concurrency, self.hold_s)
            if slot is not None:
                break
            self.sleep(poll)  # every slot is held elsewhere: they come back as requests end
            poll = min(SHARED_POLL_S[1], poll * 2)
        if self.limits.interval_s:
            with self._shared_lock:
                wait = self.shared.next_start(host, self.limits.interval_s)
            if wait:
                self.sleep(wait)
        return slot

    def give_back(self, ticket: Ticket, status: int | None, retry_after_s: float | None = None, *,
                  about_host: bool = True) -> None:
        if ticket.slot is not None and self.shared is not None:
            with self._shared_lock:
                self.shared.give_back(ticket.host, ticket.slot)
        self._local_back(ticket.host, ticket.started, status, retry_after_s, about_host=about_host)

    def _local_back(self, host: str, started: float, status: int | None, retry_after_s: float | None, *,
                    about_host: bool) -> None:
        with self._cond:
            self.pace(host).finish(self.clock(), started, status, retry_after_s, about_host=about_host)
            self._cond.notify_all()

    def pause(self, host: str, seconds: float, sleep: Callable[[float], None] | None = None) -> None:
        (sleep or self.sleep)(seconds)

    def close(self) -> None:
        close = getattr(self.shared, "close", None)
        if close is not None:
            close()


def limits_for(settings: object) -> HostLimits:
    """The contract's ``fetch:`` as host limits (``concurrency``, ``rate``, ``throttle``)."""
    rate = getattr(settings, "rate", None)
    return HostLimits(concurrency=getattr(settings, "concurrency", 4), interval_s=1.0 / rate if rate else 0.0,
                      throttle=getattr(settings, "throttle", True))
