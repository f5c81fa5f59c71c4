"""A batch's worker processes: each fetches its share of the targets on its own asyncio loop, stores each page
and runs the pure stages (extract, validate, decide), and hands small results back to the run's process
(service/batch.py), which heals, records and reports."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import queue
import threading
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from scrape_contracts.adapters.pages import open_pages
from scrape_contracts.adapters.store import (
    LostLease,
    SelectorVersion,
)
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.service import scrape
from scrape_contracts.service.breaker import HostBreaker
from scrape_contracts.service.records import (
    FetchFailure,
    Previous,
    ScrapeResult,
    Stage,
    StageEvent,
    StoryRecorder,
    Validated,
)
from scrape_contracts.service.stored_pages import ArtifactFetcher


@dataclass(frozen=True)
class BatchTarget:
    partition: str
    url: str


@dataclass(frozen=True)
class Done:
    worker: int
    error: str | None = None


@dataclass(frozen=True)
class Item:
    target: BatchTarget
    story: tuple[StageEvent, ...]
    result: ScrapeResult | Validated | None = None
    failure: FetchFailure | None = None
    lost: LostLease | None = None  # its lease was lost before it could be recorded


@dataclass(frozen=True)
class Share:
    """What one worker needs to fetch and process its share of a batch (pickled once per worker)."""

    index: int
    loaded: LoadedContract
    fetch_settings: Any  # FetchSettings, with deployment overrides applied
    pages: str  # the page storage's location, opened again in the worker
    targets: tuple[BatchTarget, ...]
    previous: dict[str, Previous]
    validators: dict[str, tuple[str | None, str | None]]
    selectors: SelectorVersion
    per_host: int
    max_connections: int
    force: bool = False  # no validators, no unchanged shortcut: every page fetched and extracted again
    stored_pages: dict[str, str] | None = None  # re-extraction: partition → sha256 of its last fetched page
    earlier: dict[str, tuple[str, ...]] = field(default_factory=dict)  # selectors of earlier versions
    jobs: Any = None  # the provider adapter's job book (picklable: it opens the store in the worker)


# ---- the workers: each fetches and processes its share --------------------------------------------------
_SEND_AT = 25  # results per message to the run's process
_SEND_EVERY_S = 0.1  # or sooner
OWNER_GONE_EXIT = 75  # a worker's exit status when the run's process died under it


def worker_main(share: Share, results: Any, control: Any, owner: Any = None) -> None:
    """A worker's life: fetch its targets concurrently, process each page, hand back small results.

    ``owner`` is the read end of a pipe whose only write end the run's process holds (``None`` for a worker
    thread). Nothing is ever written to it: it reads end of file when the run's process is gone, however it
    died (SIGKILL, out of memory). The worker then exits at once: nobody reads its results any more, and
    without this it went on fetching its share, then blocked for ever at exit flushing into the results
    queue, an orphan of init holding its memory. An end-of-file has no race to lose, unlike watching a
    pid (reused) or PR_SET_PDEATHSIG (the parent of a forkserver's child is the forkserver, not the run).
    """
    if owner is not None:
        threading.Thread(target=_exit_when_gone, args=(owner,), name="owner-watch", daemon=True).start()
    try:
        asyncio.run(Worker(share, results, control).run())
    except BaseException as exc:  # noqa: BLE001 (reported to the run, which records the targets as failed)
        results.put(Done(share.index, f"{type(exc).__name__}: {exc}"))
        return
    results.put(Done(share.index))


def _exit_when_gone(owner: Any) -> None:
    try:
        while os.read(owner.fileno(), 1):
            pass  # nothing is written to it; a byte would not mean the run is gone
    except OSError:
        pass
    os._exit(OWNER_GONE_EXIT)  # no queue flush, no clean-up that could wait for a reader that is gone


class Worker:
    def __init__(self, share: Share, results: Any, control: Any) -> None:
        self.share = share
        self.loaded = share.loaded
        self.artifacts = open_pages(share.pages)
        self.results = results
        self.control = control
        self.selectors = share.selectors
        self.breaker = HostBreaker()

    def _latest_selectors(self) -> SelectorVersion:
        # a heal elsewhere in the batch: use its selectors from now on
        while True:
            try:
                self.selectors = self.control.get_nowait()
            except queue.Empty:
                return self.selectors

    async def run(self) -> None:
        from scrape_contracts.adapters.fetch import async_fetcher_for

        share = self.share
        per_host: dict[str, asyncio.Semaphore] = defaultdict(lambda: asyncio.Semaphore(share.per_host))
        hosts = {urlsplit(t.url).hostname for t in share.targets}
        lanes = max(1, min(share.max_connections, share.per_host * len(hosts), len(share.targets)))
        pending = iter(share.targets)
        if share.stored_pages is not None:
            fetcher: Any = ArtifactFetcher(self.artifacts, share.stored_pages, {t.partition: t.url for t in share.targets})
        else:
            fetcher = async_fetcher_for(share.fetch_settings, self.loaded.base_dir,
                                        max_connections=share.max_connections, jobs=share.jobs)
            if self.loaded.contract.is_list:  # every page of a target, found with the item selector in force
                from scrape_contracts.adapters.fetch.paging import paged
                from scrape_contracts.service.lists import item_selector

                in_force = item_selector(self.loaded, share.selectors.selectors)
                fetcher = paged(fetcher, self.loaded.contract, in_force)

        # results go back in small lists: one queue put per target cost a tenth of an unchanged sweep's worker
        # time (a lock handshake with the queue's feeder thread each); a list leaves when it is full or
        # _SEND_EVERY_S old, so progress still shows as it happens
        outbox: list[Item] = []

        def send() -> None:
            if outbox:
                self.results.put(outbox.copy())
                outbox.clear()

        async def lane() -> None:
            for target in pending:
                where = urlsplit(target.url)
                while True:
                    # a host that keeps failing: wait for its probe, or fail at once when it is down
                    item, probe = await self.breaker.admit(where.netloc, target.url)
                    if item is not None:
                        break
                    async with per_host[where.hostname or ""]:
                        if not probe and self.breaker.is_open(where.netloc):
                            continue  # it opened while this one waited for a slot: back to waiting
                        item = await self.fetch(fetcher, target)
                    self.breaker.record(where.netloc, item, probe)
                    break
                # parsing here holds the loop for a few ms: the other lanes' bytes wait in the kernel
                outbox.append(self.process(target, item))
                if len(outbox) >= _SEND_AT:
                    send()

        async def sender() -> None:
            while True:
                await asyncio.sleep(_SEND_EVERY_S)
                send()

        ticker = asyncio.create_task(sender())
        try:
            await asyncio.gather(*(lane() for _ in range(lanes)))
        finally:
            ticker.cancel()
            send()
            await fetcher.aclose()

    async def fetch(self, fetcher: Any, target: BatchTarget) -> Any:
        before = self.share.previous.get(target.partition)
        # validators are only worth sending when there is accepted data to fall back on
        etag, last_modified = self.share.validators.get(target.partition, (None, None)) \
            if before and not self.share.force else (None, None)
        try:
            return await fetcher.fetch(target.url, etag=etag, last_modified=last_modified)
        except Exception as exc:  # noqa: BLE001 (one target's failure is its own, never the batch's)
            return exc

    def process(self, target: BatchTarget, page: Any) -> Item:
        if isinstance(page, Exception):
            return failure_item(self.loaded.contract.name, target, page)
        try:
            story = StoryRecorder()
            before = self.share.previous.get(target.partition)
            fetched = scrape.observe_page(self.loaded, target.partition, target.url, page, before, self.artifacts,
                                          story, force=self.share.force)
            selectors = self._latest_selectors()
            # an unchanged page costs nothing more, unless the contract or the selectors changed since
            html = None if scrape.shortcut_holds(self.loaded, fetched, selectors) else \
                scrape.page_html(fetched, page.html, self.artifacts)
            out = scrape.process_page(self.loaded, fetched, html, selectors, story, self.share.earlier)
            return Item(target, tuple(story.events), out)
        except Exception as exc:  # noqa: BLE001
            return failure_item(self.loaded.contract.name, target, exc)


# ---- the runner: the run's own process ------------------------------------------------------------------
def worker_context() -> Any:
    """Parse workers start from the standard library's forkserver, which has imported this module once.

    Not fork: the run's process has threads (Dagster's), and a forked child would inherit their locks
    mid-flight. Not spawn: each worker would import this package again (about 0.6 s before its first page).
    The forkserver is a single-threaded process that imported it already, so a worker is one fork of it.
    """
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


def failure_item(contract: str, target: BatchTarget, exc: Exception) -> Item:
    kind = getattr(exc, "kind", "error")
    message = str(exc) if hasattr(exc, "kind") else f"{type(exc).__name__}: {exc}"
    failure = FetchFailure(contract, target.partition, target.url, kind, message,
                           bool(getattr(exc, "transient", False)), tuple(getattr(exc, "attempts", ())))
    stage = Stage.FETCH_FAILED
    event = StageEvent(stage, {"url": target.url, "error": message, "kind": kind,
                               "attempts": [dict(a) for a in failure.attempts]})
    return Item(target, (event,), failure=failure)


