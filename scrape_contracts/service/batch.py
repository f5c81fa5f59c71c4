"""Many targets of one contract in one run: fetch concurrently, parse on every core, gate in chunks.

Two kinds of work overlap:

- worker processes each fetch a share of the targets on their own asyncio loop (the contract's
  ``fetch.concurrency`` per host and the global connection cap are split between them), store each page
  and run the pure stages (extract, validate, decide);
- the run's own process heals (it writes selector versions and tells the workers), records each chunk of
  outcomes in one store transaction, and hands the committed chunk to the caller (the Dagster op turns it
  into events, which costs the run's process most of its time on the SQLite instance).

Fetching in the workers rather than in a thread of the run's process was measured: the run's process is
busy writing Dagster events, and a fetch loop beside it fought for its interpreter lock (2,000 pages, first
sweep: 66 pages/s with the fetch thread, see the README for the figures now). Memory is bounded by the
concurrency, not by the number of targets: a worker holds at most its lanes' pages; what travels back is
small (a record and its story, no page). One target's failure, timeout or quarantine never holds up the
others, and a chunk is committed whole or not at all, so a crash leaves every target either recorded
once or not at all; running the batch again finds the recorded ones unchanged.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from scrape_contracts.adapters.artifacts import ArtifactStore
from scrape_contracts.adapters.store import ProjectStore, SelectorVersion
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.engine.outcome import Outcome
from scrape_contracts.service import gate, scrape
from scrape_contracts.service.breaker import HostBreaker
from scrape_contracts.service.records import (
    FetchFailure, Previous, Recorded, ScrapeResult, Stage, StageEvent, StoryRecorder, Validated,
)


@dataclass(frozen=True)
class BatchTarget:
    partition: str
    url: str


@dataclass(frozen=True)
class BatchSettings:
    per_host: int = 4
    max_connections: int = 32
    parse_workers: int = 2  # processes that fetch and parse; 0: one thread of the run's process
    chunk_size: int = 100  # targets per store transaction
    flush_seconds: float = 1.0  # commit a partial chunk after this long, so progress shows while fetching


@dataclass(frozen=True)
class TargetOutcome:
    """One target's story in a batch: the result and what the store made of it, or why it failed."""

    partition: str
    url: str
    story: tuple[StageEvent, ...]
    result: ScrapeResult | None = None
    recorded: Recorded | None = None
    failure: FetchFailure | None = None

    @property
    def outcome(self) -> Outcome:
        return self.result.outcome if self.result is not None else Outcome.FAILED


@dataclass
class BatchStats:
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, outcome: TargetOutcome) -> None:
        self.counts[outcome.outcome.value] += 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def seconds(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    @property
    def pages_per_second(self) -> float:
        return self.total / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class _Done:
    worker: int
    error: str | None = None


@dataclass(frozen=True)
class _Item:
    target: BatchTarget
    story: tuple[StageEvent, ...]
    result: ScrapeResult | Validated | None = None
    failure: FetchFailure | None = None


@dataclass(frozen=True)
class _Share:
    """What one worker needs to fetch and process its share of a batch (pickled once per worker)."""

    index: int
    loaded: LoadedContract
    fetch_settings: Any  # FetchSettings, with deployment overrides applied
    artifacts_root: str
    targets: tuple[BatchTarget, ...]
    previous: dict[str, Previous]
    validators: dict[str, tuple[str | None, str | None]]
    selectors: SelectorVersion
    per_host: int
    max_connections: int
    force: bool = False  # no validators, no unchanged shortcut: every page fetched and extracted again
    stored_pages: dict[str, str] | None = None  # re-extraction: partition → sha256 of its last fetched page
    earlier: dict[str, tuple[str, ...]] = field(default_factory=dict)  # selectors of earlier versions


@dataclass(frozen=True)
class StoredPage:
    """A page read back from the artifact store instead of fetched: what re-extraction works on."""

    url: str
    html: str
    sha256: str
    status: int = 200
    requested_url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    elapsed_s: float = 0.0
    encoding: str | None = "utf-8"
    not_modified: bool = False
    etag: str | None = None
    last_modified: str | None = None
    attempts: tuple[dict[str, Any], ...] = ()


class _ArtifactFetcher:
    """The fetcher of a re-extraction: the target's last fetched page, from the artifact store."""

    def __init__(self, artifacts: ArtifactStore, pages: dict[str, str], urls: dict[str, str]) -> None:
        self.artifacts, self.pages, self.partitions = artifacts, pages, {u: p for p, u in urls.items()}

    async def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> StoredPage:
        partition = self.partitions[url]
        sha = self.pages.get(partition)
        html = self.artifacts.get(sha) if sha else None
        if html is None:
            raise LookupError(f"no stored page for {partition!r} (never fetched, or pruned): re-extraction "
                              "skips it; scrape it with `scrape-contracts run` instead")
        return StoredPage(url=url, html=html, sha256=sha, requested_url=url)

    async def aclose(self) -> None:
        return None


# ---- the workers: each fetches and processes its share --------------------------------------------------
_SEND_AT = 25  # results per message to the run's process
_SEND_EVERY_S = 0.1  # or sooner
def _worker_main(share: _Share, results: Any, control: Any) -> None:
    """A worker's life: fetch its targets concurrently, process each page, hand back small results."""
    try:
        asyncio.run(_Worker(share, results, control).run())
    except BaseException as exc:  # noqa: BLE001 (reported to the run, which records the targets as failed)
        results.put(_Done(share.index, f"{type(exc).__name__}: {exc}"))
        return
    results.put(_Done(share.index))


class _Worker:
    def __init__(self, share: _Share, results: Any, control: Any) -> None:
        self.share = share
        self.loaded = share.loaded
        self.artifacts = ArtifactStore(share.artifacts_root)
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
            fetcher: Any = _ArtifactFetcher(self.artifacts, share.stored_pages, {t.partition: t.url for t in share.targets})
        else:
            fetcher = async_fetcher_for(share.fetch_settings, self.loaded.base_dir,
                                        max_connections=share.max_connections)
            if self.loaded.contract.is_list:  # every page of a target, found with the item selector in force
                from scrape_contracts.adapters.fetch.paging import paged
                from scrape_contracts.service.lists import item_selector

                in_force = item_selector(self.loaded, share.selectors.selectors)
                fetcher = paged(fetcher, self.loaded.contract, in_force)

        # results go back in small lists: one queue put per target cost a tenth of an unchanged sweep's worker
        # time (a lock handshake with the queue's feeder thread each); a list leaves when it is full or
        # _SEND_EVERY_S old, so progress still shows as it happens
        outbox: list[_Item] = []

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

    def process(self, target: BatchTarget, page: Any) -> _Item:
        if isinstance(page, Exception):
            return _failure(self.loaded.contract.name, target, page)
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
            return _Item(target, tuple(story.events), out)
        except Exception as exc:  # noqa: BLE001
            return _failure(self.loaded.contract.name, target, exc)


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


class BatchRunner:
    def __init__(self, loaded: LoadedContract, store: ProjectStore, artifacts: ArtifactStore, run_id: str,
                 fetch_settings: Any, settings: BatchSettings = BatchSettings(), *, force: bool = False,
                 reextract: bool = False) -> None:
        self.loaded = loaded
        self.contract = loaded.contract
        self.store = store
        self.artifacts = artifacts
        self.run_id = run_id
        self.fetch_settings = fetch_settings
        self.settings = settings
        self.force = force
        self.reextract = reextract  # work on each target's last fetched page instead of fetching
        self.stats = BatchStats()
        self._selectors = store.current_selectors(self.contract.name, self.contract.selectors())
        self._controls: list[Any] = []

    def run(self, targets: Sequence[BatchTarget]) -> Iterator[list[TargetOutcome]]:
        """Scrape ``targets``; yields each chunk of outcomes after it is committed to the store."""
        self.stats = BatchStats()
        names = [t.partition for t in targets]
        previous = scrape.previous_all(self.store, self.contract.name, names)
        states = self.store.states(self.contract.name, names)
        pages = self.store.last_pages(self.contract.name, names) if self.reextract else None
        earlier = scrape.earlier_selectors(self.store.selector_history(self.contract.name))
        # never more workers than requests allowed per host: each worker gets a whole share of the politeness
        count = max(1, min(self.settings.parse_workers, self.settings.per_host, len(targets) or 1))
        in_threads = self.settings.parse_workers <= 0
        ctx = None if in_threads else worker_context()
        results: Any = queue.Queue() if in_threads else ctx.Queue()
        self._controls = [queue.Queue() if in_threads else ctx.Queue() for _ in range(count)]
        per_host = max(1, self.settings.per_host // count)
        connections = max(1, self.settings.max_connections // count)
        workers = []
        for index in range(count):
            mine = tuple(targets[index::count])
            share = _Share(index, self.loaded, self.fetch_settings, str(self.artifacts.root), mine,
                           {t.partition: previous[t.partition] for t in mine if t.partition in previous},
                           {t.partition: (states[t.partition].etag, states[t.partition].last_modified)
                            for t in mine if t.partition in states},
                           self._selectors, per_host, connections, self.force,
                           {t.partition: pages[t.partition] for t in mine if t.partition in pages}
                           if pages is not None else None, earlier)
            args = (share, results, self._controls[index])
            worker = (threading.Thread(target=_worker_main, args=args, daemon=True) if in_threads
                      else ctx.Process(target=_worker_main, args=args, daemon=True))
            worker.start()
            workers.append(worker)
        try:
            yield from self._consume(results, workers, targets)
        finally:
            for worker in workers:
                worker.join(timeout=10)
                if worker.is_alive() and not in_threads:
                    worker.terminate()
            self.stats.finished = time.monotonic()

    # -- heal, commit, report -------------------------------------------------------------------------------
    def _consume(self, results: Any, workers: list[Any], targets: Sequence[BatchTarget]
                 ) -> Iterator[list[TargetOutcome]]:
        pending: list[_Item] = []
        seen: set[str] = set()
        finished: dict[int, str | None] = {}
        last_flush = time.monotonic()
        while len(finished) < len(workers):
            try:
                item = results.get(timeout=self.settings.flush_seconds)
            except queue.Empty:
                item = None
                for index, worker in enumerate(workers):
                    if index not in finished and not worker.is_alive():
                        # died without a word (killed, out of memory): its unreported targets fail below
                        finished[index] = f"batch worker {index} died (exit code {getattr(worker, 'exitcode', '?')})"
            if isinstance(item, _Done):
                finished[item.worker] = item.error
            elif item is not None:
                for one in item:
                    seen.add(one.target.partition)
                    pending.append(self._settle(one))
            due = time.monotonic() - last_flush >= self.settings.flush_seconds
            if pending and (len(pending) >= self.settings.chunk_size or due):
                yield self._commit(pending)
                pending, last_flush = [], time.monotonic()
        errors = "; ".join(e for e in finished.values() if e)
        for target in targets:
            if target.partition not in seen:
                pending.append(_failure(self.contract.name, target,
                                        RuntimeError(errors or "the batch worker stopped before this target")))
        if pending:
            yield self._commit(pending)

    def _settle(self, item: _Item) -> _Item:
        """Finish what a worker could not: re-extract after a heal elsewhere in the batch, or heal."""
        if not isinstance(item.result, Validated):
            return item
        story = StoryRecorder()
        story.events.extend(item.story)
        validated = item.result
        current = self._selectors
        if validated.extracted.selector_version != current.version and validated.fetched.page_sha256:
            # another target of this batch healed meanwhile: try its selectors before healing again
            html = self.artifacts.get(validated.fetched.page_sha256)
            earlier = scrape.earlier_selectors(self.store.selector_history(self.contract.name))
            out = scrape.process_page(self.loaded, validated.fetched, html, current, story, earlier)
            if isinstance(out, ScrapeResult):
                return _Item(item.target, tuple(story.events), out)
            validated = out
        result = scrape.heal_and_decide(self.loaded, validated, self.run_id, self.artifacts, self.store, story)
        if result.heal.selector_version:
            self._selectors = self.store.current_selectors(self.contract.name, self.contract.selectors())
            for control in self._controls:
                control.put(self._selectors)
        return _Item(item.target, tuple(story.events), result)

    def _commit(self, items: list[_Item]) -> list[TargetOutcome]:
        results = [i.result for i in items if isinstance(i.result, ScrapeResult)]
        recorded = iter(gate.record_results(self.store, results, self.run_id, self.loaded) if results else [])
        self.store.record_failures(self.contract.name, [(i.target.partition, i.failure.message)
                                                        for i in items if i.failure is not None])
        outcomes = []
        for item in items:
            if isinstance(item.result, ScrapeResult):
                result, rec = next(recorded)
                story = item.story + (_decision_event(result, rec),)
                outcome = TargetOutcome(item.target.partition, item.target.url, story, result, rec)
            else:
                outcome = TargetOutcome(item.target.partition, item.target.url, item.story, failure=item.failure)
            self.stats.add(outcome)
            outcomes.append(outcome)
        return outcomes


def _failure(contract: str, target: BatchTarget, exc: Exception) -> _Item:
    kind = getattr(exc, "kind", "error")
    message = str(exc) if hasattr(exc, "kind") else f"{type(exc).__name__}: {exc}"
    failure = FetchFailure(contract, target.partition, target.url, kind, message,
                           bool(getattr(exc, "transient", False)), tuple(getattr(exc, "attempts", ())))
    stage = Stage.FETCH_FAILED
    event = StageEvent(stage, {"url": target.url, "error": message, "kind": kind,
                               "attempts": [dict(a) for a in failure.attempts]})
    return _Item(target, (event,), failure=failure)


def _decision_event(result: ScrapeResult, recorded: Recorded) -> StageEvent:
    if recorded.status == "accepted":
        return StageEvent(Stage.ACCEPTED, {"version": recorded.accepted_version, "outcome": result.outcome.value,
                                           "candidate_id": recorded.candidate_id})
    if recorded.status == "quarantined":
        return StageEvent(Stage.QUARANTINED, {"candidate_id": recorded.candidate_id,
                                              "reasons": [v.message for v in result.violations]})
    if recorded.status == "rejected":
        return StageEvent(Stage.REJECTED, {"candidate_id": recorded.candidate_id,
                                           "reasons": [v.message for v in result.violations]})
    return StageEvent(Stage.UNCHANGED if recorded.status == "unchanged" else Stage.SKIPPED,
                      {"candidate_id": recorded.candidate_id, "status": recorded.status})
