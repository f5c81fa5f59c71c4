"""Server-Sent Events of the event trail: one poller per API process, fanned out to every open stream.

With a poller per stream, 200 open streams on PostgreSQL read every contract's events 200 times a second, each
stream checking its token and taking the high-water lock on its own, and the process stopped answering
(``/health/live`` took seconds). Here one task (``EventHub``) reads the trail of every contract once per
poll into a bounded window of recent events, checks every open stream's token in one query, and wakes the
streams; each stream sends the events of the contracts its token's owner may see. A stream that starts
behind the window (a ``Last-Event-ID`` from long ago, or a client slower than the window) catches up with
paged reads of its own, then joins the window. Streams are capped: one more than ``max_streams`` is refused.
"""

from __future__ import annotations

import asyncio
import bisect
import json
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.concurrency import run_in_threadpool

from scrape_contracts.api import models as m
from scrape_contracts.api.ops import FrontDoor, Refused
from scrape_contracts.api.tokens import Principal
from scrape_contracts.api.trail import Cursor

log = logging.getLogger("scrape_contracts.api")

KEEPALIVE_S = 15.0
PAGE = 500  # events per read, the hub's and a catching-up stream's
WINDOW = 10_000  # recent events the hub keeps for its streams


class TooManyStreams(Exception):
    """``max_streams`` streams are open in this process already."""


@dataclass(eq=False)
class Subscriber:
    token: str
    principal: Principal
    contract: str | None
    names: frozenset[str] = frozenset()  # the contracts this stream may show, as of the hub's last poll
    ended: str | None = None  # why the hub ended the stream (its token revoked, its contract gone)
    woken: asyncio.Event = field(default_factory=asyncio.Event)  # set by the hub after each poll


@dataclass
class _Poll:
    principals: dict[str, Principal | None]
    owners: dict[str, frozenset[str]]
    head: Cursor  # where the reads of this poll started
    events: list[m.TrailEvent] = field(default_factory=list)
    tail: Cursor | None = None


class EventHub:
    def __init__(self, door: Any, *, poll_s: float, max_streams: int, window: int = WINDOW) -> None:
        self.door: FrontDoor = door
        self.poll_s = poll_s
        self.max_streams = max_streams
        self.window = window
        self._events: list[m.TrailEvent] = []
        self._cursors: list[Cursor] = []
        self._floor: Cursor | None = None  # every event after it, up to the tail, is in the window
        self._tail: Cursor | None = None
        self._subscribers: set[Subscriber] = set()
        self._task: asyncio.Task[None] | None = None
        self.polls = 0

    @property
    def open_streams(self) -> int:
        return len(self._subscribers)

    def subscribe(self, token: str, principal: Principal, contract: str | None, names: frozenset[str]
                  ) -> Subscriber:
        """A slot for a new stream showing the contracts ``names``, or ``TooManyStreams``; the stream gives
        it back when it ends."""
        if len(self._subscribers) >= self.max_streams:
            raise TooManyStreams(f"{self.max_streams} event streams are open on this API process "
                                 "(SCRAPE_CONTRACTS_API_MAX_STREAMS); retry later, or poll GET /events")
        subscriber = Subscriber(token, principal, contract, names)
        self._subscribers.add(subscriber)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(self._run())
        return subscriber

    async def stream(self, subscriber: Subscriber, after: Cursor) -> AsyncIterator[str]:
        try:
            # at once, so the client has the response (and its headers) before the first event exists
            yield f"retry: {int(self.poll_s * 2000)}\n\n"
            async for chunk in self._events_of(subscriber, after):
                yield chunk
        finally:
            self._subscribers.discard(subscriber)

    async def _events_of(self, subscriber: Subscriber, cursor: Cursor) -> AsyncIterator[str]:
        loop = asyncio.get_running_loop()
        quiet_since = loop.time()
        while True:
            subscriber.woken.clear()  # before looking: a poll that ends while this stream sends wakes it again
            if subscriber.ended is not None:
                yield _end(subscriber.ended)
                return
            if self._floor is not None and cursor >= self._floor:
                start = bisect.bisect_right(self._cursors, cursor)
                shown = [e for e in self._events[start:] if e.contract in subscriber.names]
                tail = self._tail or cursor
                for event in shown:
                    yield _sse(event)
                    quiet_since = loop.time()
                cursor = max(cursor, tail)
            else:
                # behind the window, or before the hub's first poll: this stream's own paged reads
                try:
                    page = await run_in_threadpool(self.door.list_events, subscriber.principal,
                                                   contract=subscriber.contract, after=str(cursor), limit=PAGE)
                except Refused as exc:
                    yield _end(str(exc))
                    return
                for event in page.events:
                    yield _sse(event)
                    quiet_since = loop.time()
                cursor = Cursor.parse(page.next)
                if page.events:
                    continue
                if self._floor is not None:
                    # nothing for this stream up to the high-water mark, which the window's floor is below
                    cursor = max(cursor, self._floor)
                    continue
            if loop.time() - quiet_since >= KEEPALIVE_S:
                # a comment line now and then: proxies close a connection that carries nothing for long
                yield ": keepalive\n\n"
                quiet_since = loop.time()
            try:
                await asyncio.wait_for(subscriber.woken.wait(), KEEPALIVE_S)
            except asyncio.TimeoutError:
                pass

    async def _run(self) -> None:
        while self._subscribers:
            try:
                found = await run_in_threadpool(self._poll, list(self._subscribers))
                self._apply(found)
                self.polls += 1
            except Exception as exc:  # noqa: BLE001 (a database hiccup: the streams wait for the next poll)
                log.warning("event stream poll failed: %s", type(exc).__name__)
            for subscriber in self._subscribers:
                subscriber.woken.set()
            await asyncio.sleep(self.poll_s)

    def _poll(self, subscribers: list[Subscriber]) -> _Poll:
        """The database work of one poll, in a worker thread; ``_apply`` changes the hub on the event loop."""
        found = _Poll(principals=self.door.resolve_tokens({s.token for s in subscribers}),
                      owners=self.door.contract_owners(),
                      head=self._tail if self._tail is not None else self.door.trail_head())
        tail = found.head
        for _ in range(self.window // PAGE):
            events, tail = self.door.trail_after(sorted(found.owners), tail, PAGE)
            found.events += events
            if len(events) < PAGE:
                break
        found.tail = tail
        return found

    def _apply(self, found: _Poll) -> None:
        if self._floor is None:
            self._floor = found.head
        self._events += found.events
        self._cursors += [Cursor.parse(e.id) for e in found.events]
        self._tail = found.tail
        extra = len(self._events) - self.window
        if extra > 0:
            self._floor = self._cursors[extra - 1]
            del self._events[:extra], self._cursors[:extra]
        for subscriber in self._subscribers:
            if subscriber.token not in found.principals:
                continue  # it subscribed while the poll ran: its token was checked then
            principal = found.principals[subscriber.token]
            if principal is None:
                subscriber.ended = ("a valid API token is required: this stream's token is unknown or revoked "
                                    "(`scrape-contracts tokens create`)")
                continue
            subscriber.principal = principal
            owned = {name for name, owners in found.owners.items() if principal.owner in owners}
            if subscriber.contract is not None and subscriber.contract not in owned:
                subscriber.ended = f"no valid contract named {subscriber.contract!r}"
                continue
            subscriber.names = frozenset({subscriber.contract} if subscriber.contract else owned)


def _sse(event: m.TrailEvent) -> str:
    return f"id: {event.id}\nevent: trail\ndata: {json.dumps(event.model_dump(), default=str)}\n\n"


def _end(detail: str) -> str:
    return f"event: end\ndata: {json.dumps({'detail': detail})}\n\n"
