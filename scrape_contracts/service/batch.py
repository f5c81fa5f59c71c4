"""Many targets of one contract in one run: fetch concurrently, parse on every core, gate in chunks.

Three kinds of work overlap:

- an asyncio loop in a thread fetches (a global cap on connections, ``fetch.concurrency`` per host);
- a pool of worker processes stores each page and runs the pure stages (extract, validate, decide);
- the caller's thread heals (it writes selector versions), records each chunk of outcomes in one store
  transaction, and gets the committed chunk back to report it (the Dagster op turns it into events).

Memory is bounded by the concurrency, not by the number of targets: at most ``max_connections`` pages are
being fetched and ``max_inflight`` are waiting for or inside a worker; what queues up behind the caller is
small (a record and its story, no page). One target's failure, timeout or quarantine never holds up the
others, and a chunk is committed whole or not at all, so a crash leaves every target either recorded
once or not at all; running the batch again finds the recorded ones unchanged.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from scrape_contracts.adapters.artifacts import ArtifactStore
from scrape_contracts.adapters.store import PartitionState, ProjectStore, SelectorVersion
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.engine.outcome import Outcome
from scrape_contracts.service import gate, scrape
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
    parse_workers: int = 2  # 0: parse in a thread of this process
    chunk_size: int = 100  # targets per store transaction
    flush_seconds: float = 1.0  # commit a partial chunk after this long, so progress shows while fetching

    @property
    def max_inflight(self) -> int:
        return max(4, 4 * max(1, self.parse_workers))


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
    error: BaseException | None = None


@dataclass(frozen=True)
class _Item:
    target: BatchTarget
    story: tuple[StageEvent, ...]
    result: ScrapeResult | Validated | None = None
    failure: FetchFailure | None = None


# ---- the worker processes -------------------------------------------------------------------------------
_worker: dict[str, Any] = {}


def _init_worker(loaded: LoadedContract, artifacts_root: str) -> None:
    _worker["loaded"] = loaded
    _worker["artifacts"] = ArtifactStore(artifacts_root)


def _process(target: BatchTarget, page: Any, previous: Previous | None, selectors: SelectorVersion
             ) -> tuple[ScrapeResult | Validated, tuple[StageEvent, ...]]:
    """Store the page and run the pure stages; the story travels back with the result."""
    loaded, artifacts = _worker["loaded"], _worker["artifacts"]
    story = StoryRecorder()
    fetched = scrape.observe_page(loaded, target.partition, target.url, page, previous, artifacts, story)
    out = scrape.process_page(loaded, fetched, None if fetched.unchanged else page.html, selectors, story)
    return out, tuple(story.events)


# ---- the runner ----------------------------------------------------------------------------------------
FetcherFactory = Callable[[], Any]  # → an object with ``async fetch(url, etag=, last_modified=)`` and ``aclose()``


class BatchRunner:
    def __init__(self, loaded: LoadedContract, store: ProjectStore, artifacts: ArtifactStore, run_id: str,
                 fetcher_factory: FetcherFactory, settings: BatchSettings = BatchSettings()) -> None:
        self.loaded = loaded
        self.contract = loaded.contract
        self.store = store
        self.artifacts = artifacts
        self.run_id = run_id
        self.fetcher_factory = fetcher_factory
        self.settings = settings
        self.stats = BatchStats()
        self._selectors = store.current_selectors(self.contract.name, self.contract.selectors())

    def run(self, targets: Sequence[BatchTarget]) -> Iterator[list[TargetOutcome]]:
        """Scrape ``targets``; yields each chunk of outcomes after it is committed to the store."""
        self.stats = BatchStats()
        names = [t.partition for t in targets]
        previous = {v.partition: Previous(dict(v.record), v.version, v.page_sha256)
                    for v in self.store.latest_accepted_all(self.contract.name, names)}
        states = self.store.states(self.contract.name)
        handoff: queue.Queue[_Item | _Done] = queue.Queue(maxsize=max(self.settings.chunk_size * 2, 64))
        pool = self._pool()
        thread = threading.Thread(target=self._fetch_thread, args=(targets, previous, states, pool, handoff),
                                  name="scrape-contracts-fetch", daemon=True)
        thread.start()
        try:
            yield from self._consume(handoff)
        finally:
            thread.join(timeout=60)
            pool.shutdown(wait=True, cancel_futures=True)
            self.stats.finished = time.monotonic()

    def _pool(self) -> concurrent.futures.Executor:
        if self.settings.parse_workers <= 0:
            _init_worker(self.loaded, str(self.artifacts.root))
            return concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="scrape-contracts-parse")
        # spawn, not fork: the run's process has threads (Dagster's and the fetch loop), and a forked child
        # would inherit their locks mid-flight
        return concurrent.futures.ProcessPoolExecutor(
            max_workers=self.settings.parse_workers, mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker, initargs=(self.loaded, str(self.artifacts.root)))

    # -- the caller's side: heal, commit, report -----------------------------------------------------------
    def _consume(self, handoff: queue.Queue) -> Iterator[list[TargetOutcome]]:
        pending: list[_Item] = []
        last_flush = time.monotonic()
        while True:
            try:
                item = handoff.get(timeout=self.settings.flush_seconds)
            except queue.Empty:
                item = None
            if isinstance(item, _Done):
                if item.error is not None:
                    raise item.error
                break
            if item is not None:
                pending.append(self._settle(item))
            due = time.monotonic() - last_flush >= self.settings.flush_seconds
            if pending and (len(pending) >= self.settings.chunk_size or due):
                yield self._commit(pending)
                pending, last_flush = [], time.monotonic()
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
            out = scrape.process_page(self.loaded, validated.fetched, html, current, story)
            if isinstance(out, ScrapeResult):
                return _Item(item.target, tuple(story.events), out)
            validated = out
        result = scrape.heal_and_decide(self.loaded, validated, self.run_id, self.artifacts, self.store, story)
        if result.heal.selector_version:
            self._selectors = self.store.current_selectors(self.contract.name, self.contract.selectors())
        return _Item(item.target, tuple(story.events), result)

    def _commit(self, items: list[_Item]) -> list[TargetOutcome]:
        results = [i.result for i in items if isinstance(i.result, ScrapeResult)]
        recorded = iter(gate.record_results(self.store, results, self.run_id) if results else [])
        outcomes = []
        for item in items:
            if isinstance(item.result, ScrapeResult):
                rec = next(recorded)
                story = item.story + (_decision_event(item.result, rec),)
                outcome = TargetOutcome(item.target.partition, item.target.url, story, item.result, rec)
            else:
                outcome = TargetOutcome(item.target.partition, item.target.url, item.story, failure=item.failure)
            self.stats.add(outcome)
            outcomes.append(outcome)
        return outcomes

    # -- the fetch loop's side ----------------------------------------------------------------------------
    def _fetch_thread(self, targets: Sequence[BatchTarget], previous: dict[str, Previous],
                      states: dict[str, PartitionState], pool: concurrent.futures.Executor,
                      handoff: queue.Queue) -> None:
        try:
            asyncio.run(self._fetch_all(targets, previous, states, pool, handoff))
        except BaseException as exc:  # noqa: BLE001 (handed to the caller's thread, which raises it)
            handoff.put(_Done(exc))
            return
        handoff.put(_Done())

    async def _fetch_all(self, targets: Sequence[BatchTarget], previous: dict[str, Previous],
                         states: dict[str, PartitionState], pool: concurrent.futures.Executor,
                         handoff: queue.Queue) -> None:
        loop = asyncio.get_running_loop()
        per_host: dict[str, asyncio.Semaphore] = defaultdict(lambda: asyncio.Semaphore(self.settings.per_host))
        parse_slots = asyncio.Semaphore(self.settings.max_inflight)
        hosts = {urlsplit(t.url).hostname for t in targets}
        lanes = max(1, min(self.settings.max_connections, self.settings.per_host * len(hosts), len(targets)))
        pending = iter(targets)
        fetcher = self.fetcher_factory()

        async def hand(item: _Item) -> None:
            # a full queue means the caller is behind: wait in a thread, never block the loop
            await loop.run_in_executor(None, handoff.put, item)

        async def one(target: BatchTarget) -> _Item:
            before = previous.get(target.partition)
            state = states.get(target.partition)
            # validators are only worth sending when there is accepted data to fall back on
            etag = state.etag if state and before else None
            last_modified = state.last_modified if state and before else None
            try:
                async with per_host[urlsplit(target.url).hostname or ""]:
                    page = await fetcher.fetch(target.url, etag=etag, last_modified=last_modified)
            except Exception as exc:  # noqa: BLE001 (one target's failure is its own, never the batch's)
                return _failure(self.contract.name, target, exc)
            try:
                if page.not_modified and before is not None:
                    # 304: nothing to parse, so no need to cross to a worker
                    story = StoryRecorder()
                    fetched = scrape.observe_page(self.loaded, target.partition, target.url, page, before,
                                                  self.artifacts, story)
                    out = scrape.process_page(self.loaded, fetched, None, self._selectors, story)
                    return _Item(target, tuple(story.events), out)
                async with parse_slots:
                    future = pool.submit(_process, target, page, before, self._selectors)
                    out, story_events = await asyncio.wrap_future(future)
                return _Item(target, story_events, out)
            except Exception as exc:  # noqa: BLE001
                return _failure(self.contract.name, target, exc)

        async def lane() -> None:
            for target in pending:
                await hand(await one(target))

        try:
            await asyncio.gather(*(lane() for _ in range(lanes)))
        finally:
            await fetcher.aclose()


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
