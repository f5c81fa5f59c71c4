"""The order a batch's targets are fetched in: each site host kept as busy as its budget allows.

Targets are queued per site host, and a host's next target starts when the host has room, whatever order
the targets came in: a lane that took the next target of a busy host would wait on it while other hosts
idle (sorted targets made a sweep go host by host). A host has room while fewer of its fetches are under
way than its pacer's slots, not counting the ones waiting out a retry (they hold no slot). The pacer still
decides when each attempt may go (adapters/fetch/pace.py); this only keeps every host's queue in front of
it. ``max_active`` bounds the fetches under way over all hosts; when it binds, the host with the most work
left (targets × its latency) goes first, so the slowest host does not end the sweep alone.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from scrape_contracts.adapters.fetch.pace import AsyncPacer
from scrape_contracts.adapters.fetch.robots import host_key

T = TypeVar("T")


class Crawl:
    """``await Crawl(pacer, max_active).run(targets, url_of, work)``: ``work(target)`` for every target."""

    def __init__(self, pacer: AsyncPacer, max_active: int) -> None:
        if max_active < 1:
            raise ValueError("max_active must be at least 1")
        self.pacer = pacer
        self.max_active = max_active
        self._pending: dict[str, deque[object]] = {}
        self._active: dict[str, int] = {}
        self._total = 0
        self._starved: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._work: Callable[[object], Awaitable[None]] | None = None
        self._failed: BaseException | None = None
        self._done = asyncio.Event()

    async def run(self, targets: Iterable[T], url_of: Callable[[T], str],
                  work: Callable[[T], Awaitable[None]]) -> None:
        for target in targets:
            self._pending.setdefault(host_key(url_of(target)), deque()).append(target)
        if not self._pending:
            return
        self._work = work  # type: ignore[assignment]
        self.pacer.listeners.append(self._changed)
        self.pacer.demand.append(self._wants)
        try:
            for host in list(self._pending):
                self._kick(host)
            await self._done.wait()
        finally:
            self.pacer.listeners.remove(self._changed)
            self.pacer.demand.remove(self._wants)
            for task in self._tasks:
                task.cancel()
            if self._tasks:
                await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._failed is not None:
            raise self._failed

    def _wants(self, host: str) -> bool:
        # targets of the host still to start: a slot its fetch gives back is handed on to the next (pace.py)
        return bool(self._pending.get(host))

    def _room(self, host: str) -> bool:
        return self._active.get(host, 0) - self.pacer.sleeping(host) < self.pacer.slots(host)

    def _kick(self, host: str) -> None:
        queue = self._pending.get(host)
        while queue and self._room(host):
            if self._total - self.pacer.resting >= self.max_active:
                self._starved.add(host)
                return
            self._start(host, queue.popleft())
        if not queue:
            self._pending.pop(host, None)
            self._starved.discard(host)
            if not self._pending and not self._tasks:
                self._done.set()

    def _start(self, host: str, target: object) -> None:
        assert self._work is not None
        self._active[host] = self._active.get(host, 0) + 1
        self._total += 1
        task = asyncio.get_running_loop().create_task(self._work(target))
        self._tasks.add(task)
        task.add_done_callback(lambda done: self._finished(host, done))

    def _finished(self, host: str, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._active[host] -= 1
        self._total -= 1
        if not task.cancelled() and task.exception() is not None and self._failed is None:
            self._failed = task.exception()  # work() reports a target's own failure; this is a bug: stop
            self._done.set()
            return
        self._kick(host)
        self._kick_starved()
        if not self._pending and not self._tasks:
            self._done.set()

    def _changed(self, host: str) -> None:
        # a slot came free, or a fetch began waiting out a retry (which frees room over all hosts too)
        if host in self._pending:
            self._kick(host)
        self._kick_starved()

    def _kick_starved(self) -> None:
        while self._starved and self._total - self.pacer.resting < self.max_active:
            host = max(self._starved, key=self._work_left)
            self._starved.discard(host)
            self._kick(host)

    def _work_left(self, host: str) -> float:
        latency = self.pacer.pace(host).latency
        return len(self._pending.get(host, ())) * (latency if latency is not None else 1.0) / self.pacer.slots(host)
