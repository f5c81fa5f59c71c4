"""A batch's fetching process: every target of the run fetched on one event loop, so each site host has one
budget (concurrency, rate, back-off, robots.txt read once) whatever the targets' order; the pages go to the
parse workers (service/batch_worker.py) through one queue, which each takes from as it is free.

Why one fetching process rather than each parse worker fetching a share: a host's budget split between
workers was the slot bug (a host whose targets all landed in one worker got half its slots, an odd
concurrency lost one). Dealing targets to workers by host would keep each budget whole too, but ties a
host's parsing to one worker (a one-host shop: one worker parses everything, however many cores) and
leaves the connection cap, robots.txt and the breaker split by worker. Measured (docs/performance.md,
Politeness): the 32-host site's fetching took 45 s against 50 s before, and a one-host batch of 600 pages
ran as fast with one parse worker as with two on this 2-core machine, so the extra hop of the pages costs
nothing visible there.

The process starts in two steps, so that the run's own preparation does not hold up its first request: it is
started first with what is known at once (``FetchJob``: the contract, the fetch settings, the site hosts),
builds its fetcher and reads each host's robots.txt, while the run takes its targets' leases and reads their
last states; the targets then come in one message (``FetchWork``). A host whose targets all turn out to be
held by another run has had its robots.txt read for nothing: one request.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from scrape_contracts.adapters.store.outages import as_the_run_does
from scrape_contracts.adapters.pages import open_pages
from scrape_contracts.adapters.fetch.pace import AsyncPacer, HostLimits, limits_for
from scrape_contracts.adapters.fetch.robots import host_key
from scrape_contracts.adapters.store import SelectorVersion
from scrape_contracts.adapters.store.host_budgets import HostBudgets
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.service.batch_worker import BatchTarget, Done, adopt_environment, watch_owner
from scrape_contracts.service.breaker import HostBreaker
from scrape_contracts.service.crawl import Crawl
from scrape_contracts.service.records import Previous
from scrape_contracts.service.stored_pages import ArtifactFetcher

_SEND_AT = 16  # pages per message to the parse workers
_SEND_EVERY_S = 0.05  # or sooner


@dataclass(frozen=True)
class FetchJob:
    """What the fetching process needs from its start (pickled once); its targets come later (``FetchWork``)."""

    index: int  # its number among the run's processes, for Done
    loaded: LoadedContract
    fetch_settings: Any  # FetchSettings, with deployment overrides applied
    pages: str  # the page storage's location, opened again in this process
    hosts: tuple[str, ...]  # the site hosts of the run's targets: their robots.txt is read before these come
    selectors: SelectorVersion  # for a list's pages: the item selector in force
    max_connections: int
    parsers: int  # parse workers to tell when the pages end
    force: bool = False
    reextract: bool = False  # stored pages instead of fetching (they come with the targets: FetchWork)
    jobs: Any = None  # the provider adapter's job book (picklable: it opens the store in this process)
    # the project store when it keeps every host's budget for all processes (PostgreSQL): see pace.py
    budgets_url: str | None = None
    environ: dict[str, str] | None = None  # the run's environment (batch_worker.adopt_environment)
    proxy_book: Any = None  # where the proxies' health lasts between runs (adapters/fetch/proxy_book.py)
    waits_for_database: bool = True  # as the run does (adapters/store/outages.py)


@dataclass(frozen=True)
class FetchWork:
    """The run's targets, sent once the run holds their leases (None instead: nothing to fetch)."""

    targets: tuple[BatchTarget, ...]
    previous: dict[str, Previous]
    validators: dict[str, tuple[str | None, str | None]]
    stored_pages: dict[str, str] | None = None  # re-extraction: partition → sha256 of its last fetched page


def fetch_main(job: FetchJob, work: Any, pages: Any, results: Any, owner: Any = None) -> None:
    """The fetching process's life: fetch every target, hand each page on, then tell the parsers it ended.
    ``work``: where its ``FetchWork`` comes from (a pipe's read end, or a queue for a thread). ``owner``: as
    for the parse workers (``batch_worker.watch_owner``), it ends with the run's process."""
    watch_owner(owner)
    if owner is not None:  # a process of its own (a thread shares the run's environment)
        adopt_environment(job.environ)
        as_the_run_does(job.waits_for_database)
    error = None
    fetching = Fetching(job, pages)
    try:
        asyncio.run(fetching.run(work))
    except BaseException as exc:  # noqa: BLE001 (reported to the run, which records the targets as failed)
        error = f"{type(exc).__name__}: {exc}"
    for _ in range(job.parsers):
        pages.put(None)
    results.put(Done(job.index, error, tuple(fetching.proxy_health)))


def _received(work: Any) -> asyncio.Future[FetchWork | None]:
    """The run's ``FetchWork``, waited for in a thread of its own: not the loop's default executor, which
    ``asyncio.run`` waits for at its end (a fetching process that failed before its work came would hang)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[FetchWork | None] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if not future.done():
            future.set_exception(error) if error is not None else future.set_result(value)

    def wait() -> None:
        value, error = None, None
        try:
            value = work.recv() if hasattr(work, "recv") else work.get()
        except EOFError:  # the run closed its end without sending: nothing to fetch
            pass
        except BaseException as exc:  # noqa: BLE001 (handed to the loop)
            error = exc
        try:
            loop.call_soon_threadsafe(settle, value, error)
        except RuntimeError:  # the loop ended meanwhile
            pass

    threading.Thread(target=wait, name="fetch-work", daemon=True).start()
    return future


class Fetching:
    def __init__(self, job: FetchJob, pages: Any) -> None:
        self.job = job
        self.pages = pages
        self.breaker = HostBreaker()
        self._outbox: list[tuple[BatchTarget, Any, Previous | None]] = []
        self._sender = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="pages")
        self._sending: set[asyncio.Future[None]] = set()
        self.proxy_health: list[dict[str, object]] = []  # each proxy's, once the fetching ended
        self._http: Any = None  # the run's fetcher that keeps the proxies' health (http, browser)

    def _fetcher(self, pacer: AsyncPacer, work: FetchWork | None) -> tuple[Any, bool]:
        """The run's fetcher, and whether it takes its turns per attempt (else: one turn per target).
        ``work``: needed for re-extraction only (the stored pages), which is why that fetcher comes late."""
        from scrape_contracts.adapters.fetch import AsyncHttpFetcher, async_fetcher_for

        job, loaded = self.job, self.job.loaded
        if job.reextract:
            assert work is not None and work.stored_pages is not None
            artifacts = open_pages(job.pages)
            return ArtifactFetcher(artifacts, work.stored_pages, {t.partition: t.url for t in work.targets}), True
        fetcher = async_fetcher_for(job.fetch_settings, loaded.base_dir, max_connections=job.max_connections,
                                    pacer=pacer, jobs=job.jobs, proxy_book=job.proxy_book)
        paced = isinstance(fetcher, AsyncHttpFetcher) or job.fetch_settings.adapter == "fixture"
        # the fetcher that keeps the proxies' health: the HTTP one, or the browser inside its robots.txt check
        self._http = _within(fetcher, "proxy_health")
        if loaded.contract.is_list:  # every page of a target, found with the item selector in force
            from scrape_contracts.adapters.fetch.paging import paged
            from scrape_contracts.service.lists import item_selector

            fetcher = paged(fetcher, loaded.contract, item_selector(loaded, job.selectors.selectors))
        return fetcher, paced

    def _read_robots(self, fetcher: Any) -> list[asyncio.Task[Any]]:
        """Start reading every host's robots.txt now, each once (the fetcher keeps it for the run): the
        targets' own checks then find it read, or being read. Nothing when robots.txt is not obeyed."""
        reader = _within(fetcher, "robots_refusal")
        if reader is None or getattr(reader, "robots_agent", None) is None:
            return []
        return [asyncio.create_task(reader.robots_refusal(f"{host}/")) for host in self.job.hosts]

    async def run(self, work_from: Any) -> None:
        job = self.job
        offline = job.reextract or job.fetch_settings.adapter == "fixture"
        # no site is asked for stored pages or fixture files: the connection cap is the only limit
        limits = HostLimits(concurrency=job.max_connections, throttle=False) if offline \
            else limits_for(job.fetch_settings)
        budgets = HostBudgets(job.budgets_url) if job.budgets_url and not offline else None
        pacer = AsyncPacer(limits, shared=budgets, hold_s=getattr(job.fetch_settings, "deadline_s", 60.0))
        fetcher: Any = None
        ahead: list[asyncio.Task[Any]] = []
        tick: asyncio.Task[None] | None = None
        # room for the pages on their way to the parsers: when they fall behind, fetching waits
        room = asyncio.Semaphore(max(job.max_connections, _SEND_AT * 2))
        try:
            if not job.reextract:
                fetcher, paced = self._fetcher(pacer, None)
                ahead = self._read_robots(fetcher)
            work = await _received(work_from)
            if work is None:
                return
            if fetcher is None:
                fetcher, paced = self._fetcher(pacer, work)

            async def fetch_one(target: BatchTarget) -> None:
                outcome = await self._fetch(fetcher, pacer, paced, target, work)
                await room.acquire()
                self._outbox.append((target, outcome, work.previous.get(target.partition)))
                if len(self._outbox) >= _SEND_AT:
                    self._send(room)

            async def ticker() -> None:
                while True:
                    await asyncio.sleep(_SEND_EVERY_S)
                    self._send(room)

            tick = asyncio.create_task(ticker())
            await Crawl(pacer, job.max_connections).run(work.targets, lambda t: t.url, fetch_one)
        finally:
            for task in ahead:  # a host none of whose targets came: its robots.txt may still be on its way
                task.cancel()
            if ahead:
                await asyncio.gather(*ahead, return_exceptions=True)
            if tick is not None:
                tick.cancel()
            self._send(room)
            if self._sending:
                await asyncio.gather(*self._sending, return_exceptions=True)
            self._sender.shutdown(wait=True)
            if self._http is not None:
                self.proxy_health = self._http.proxy_health()
            if fetcher is not None:
                await fetcher.aclose()
            if budgets is not None:
                pacer.close()
                budgets.close()

    def _send(self, room: asyncio.Semaphore) -> None:
        if not self._outbox:
            return
        batch, self._outbox = self._outbox, []
        # put() blocks while the queue is full (the parsers behind): in a thread, so fetching goes on
        future = asyncio.get_running_loop().run_in_executor(self._sender, self.pages.put, batch)
        self._sending.add(future)

        def sent(done: asyncio.Future[None]) -> None:
            self._sending.discard(done)
            for _ in batch:
                room.release()

        future.add_done_callback(sent)

    async def _fetch(self, fetcher: Any, pacer: AsyncPacer, paced: bool, target: BatchTarget,
                     work: FetchWork) -> Any:
        where = urlsplit(target.url)
        # a host that keeps failing: wait for its probe, or fail at once when it is down
        refusal, probe = await self.breaker.admit(where.netloc, target.url)
        if refusal is not None:
            return refusal
        outcome = await self._fetch_once(fetcher, pacer, paced, target, work)
        self.breaker.record(where.netloc, outcome, probe)
        return outcome

    async def _fetch_once(self, fetcher: Any, pacer: AsyncPacer, paced: bool, target: BatchTarget,
                          work: FetchWork) -> Any:
        before = work.previous.get(target.partition)
        # validators are only worth sending when there is accepted data to fall back on
        etag, last_modified = work.validators.get(target.partition, (None, None)) \
            if before and not self.job.force else (None, None)
        ticket = None if paced else await pacer.take(host_key(target.url))
        page: Any = None
        try:
            page = await fetcher.fetch(target.url, etag=etag, last_modified=last_modified)
            return page
        except Exception as exc:  # noqa: BLE001 (one target's failure is its own, never the batch's)
            return exc
        finally:
            if ticket is not None:
                pacer.give_back(ticket, getattr(page, "status", None))


def _within(fetcher: Any, attribute: str) -> Any:
    """``fetcher``, or the first fetcher it wraps (``.fetcher``, as paging and the browser do) that has
    ``attribute``; None when none has."""
    while fetcher is not None and not hasattr(fetcher, attribute):
        fetcher = getattr(fetcher, "fetcher", None)
    return fetcher
