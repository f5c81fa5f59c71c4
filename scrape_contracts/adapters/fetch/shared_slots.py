"""One event loop's share of the site hosts' budgets kept in the project store (``SharedBudget``), for the
``AsyncPacer`` (pace.py).

A request takes one of its host's slots in the store before it starts. Going to the store for every
request costs two round trips per request (a take before it, a give-back after it) through the pacer's one
``host-budget`` thread: at the 50-odd requests a second of a latency-bound sweep that thread's queue made the
slowest host's next request wait 0.1-0.2 s at a time (docs/performance.md, "The in-sweep loss traced").

So a slot is **handed on**: when a request ends while more of its host's requests are waiting or about to
(the pacer's ``demand``), its slot stays held and goes to the host's next request, with no store call. The
guarantee is the store's as before: the slot row stays this process's, and a request starts on a slot only
while its hold has at least ``hold_s`` left (the contract's deadline for one page: no request outlives it).
For that, a take holds a slot for ``hold_s + hand_on_s``: it may be handed on for ``hand_on_s`` seconds,
then it goes back to the store, where every process's takes compete for it again (so a process with endless
work for a host does not keep its slots from the others for longer than that). A slot handed on that nobody
takes within ``LINGER_S`` goes back too. The price: a killed or frozen holder's slots lapse after ``hold_s +
hand_on_s`` instead of ``hold_s``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
from collections.abc import Awaitable, Callable
from typing import Protocol


class SharedBudget(Protocol):
    """A host budget shared with other processes (blocking calls; the pacer makes them from one thread)."""

    def take(self, host: str, slots: int, hold_s: float) -> int | None: ...  # None: every slot is held

    def give_back(self, host: str, slot: int) -> None: ...

    def next_start(self, host: str, interval_s: float) -> float: ...  # seconds to wait before starting


SHARED_POLL_S = (0.005, 0.1)  # first and longest wait between two tries for a shared slot
HAND_ON_S = 10.0  # how long a slot taken from the store may be handed from request to request
LINGER_S = 1.0  # how long a slot handed on waits for its host's next request before it goes back


class SharedSlots:
    """``await take(host)`` → a slot (one handed on, else the store's); ``hand_on`` / ``give_back``."""

    def __init__(self, shared: SharedBudget, concurrency: int, hold_s: float, interval_s: float, *,
                 clock: Callable[[], float], sleep: Callable[[float], Awaitable[None]],
                 hand_on_s: float = HAND_ON_S) -> None:
        self.shared, self.concurrency, self.interval_s = shared, concurrency, interval_s
        self.hold_s, self.hand_on_s = hold_s, hand_on_s
        self.clock, self.sleep = clock, sleep
        self._calls = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="host-budget")
        self._until: dict[tuple[str, int], float] = {}  # each held slot's hold, at the latest, on our clock
        self._spares: dict[str, dict[int, int]] = {}  # host → its slots handed on: slot → when parked (a number)
        self._parked = itertools.count()

    async def take(self, host: str) -> int:
        slot = await self._take(host)
        if self.interval_s:
            loop = asyncio.get_running_loop()
            wait = await loop.run_in_executor(self._calls, self.shared.next_start, host, self.interval_s)
            if wait:
                await self.sleep(wait)
        return slot

    def _spare(self, host: str) -> int | None:
        spares = self._spares.get(host)
        while spares:
            slot, _ = spares.popitem()
            # a request may last hold_s: it starts on this slot only while the store holds it that long still
            if self._until.get((host, slot), float("-inf")) - self.clock() >= self.hold_s:
                return slot
            self.give_back(host, slot)  # handed on long enough: back to the store, where every process competes
        return None

    async def _take(self, host: str) -> int:
        loop, poll = asyncio.get_running_loop(), SHARED_POLL_S[0]
        held_for = self.hold_s + self.hand_on_s
        while True:
            # a spare first, also between two tries: one handed on meanwhile may be the host's last free slot
            slot = self._spare(host)
            if slot is not None:
                return slot
            asked = self.clock()  # the hold counts from no earlier than the store's now(): from here is safe
            slot = await loop.run_in_executor(self._calls, self.shared.take, host, self.concurrency, held_for)
            if slot is not None:
                self._until[(host, slot)] = asked + held_for
                return slot
            await self.sleep(poll)  # every slot is held elsewhere: they come back as requests end
            poll = min(SHARED_POLL_S[1], poll * 2)

    def hand_on(self, host: str, slot: int) -> None:
        """Keep ``slot`` for the host's next request, for ``LINGER_S`` at most."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop to take it from: nothing will ask
            self.give_back(host, slot)
            return
        parked = next(self._parked)
        self._spares.setdefault(host, {})[slot] = parked
        loop.call_later(LINGER_S, self._unclaimed, host, slot, parked)

    def _unclaimed(self, host: str, slot: int, parked: int) -> None:
        spares = self._spares.get(host, {})
        if spares.get(slot) == parked:
            del spares[slot]
            self.give_back(host, slot)

    def give_back(self, host: str, slot: int) -> None:
        self._until.pop((host, slot), None)
        self._calls.submit(self.shared.give_back, host, slot)  # in order, after the takes

    def close(self) -> None:
        """Every spare back to the store, and wait for the last give-backs."""
        for host, spares in self._spares.items():
            for slot in list(spares):
                self.give_back(host, slot)
            spares.clear()
        self._calls.shutdown(wait=True)
