"""Many targets of one contract in one run: fetch concurrently, parse on every core, gate in chunks.

Three kinds of work overlap:

- one fetching process fetches every target of the run on its own asyncio loop (service/batch_fetch.py):
  each site host has one budget (the contract's ``fetch.concurrency``, ``rate``, back-off, robots.txt),
  and the connection cap is the run's;
- parse workers take the fetched pages from one queue as each is free, store each page and run the pure
  stages (extract, validate, decide);
- the run's own process heals (it writes selector versions and tells the workers), records each chunk of
  outcomes in one store transaction, and hands the committed chunk to the caller (the Dagster op turns it
  into events, which costs the run's process most of its time on the SQLite instance).

Fetching in a process of its own rather than in a thread of the run's process was measured: the run's
process is busy writing Dagster events, and a fetch loop beside it fought for its interpreter lock (2,000
pages, first sweep: 66 pages/s with the fetch thread). Memory is bounded by the concurrency, not by the
number of targets: the fetching process holds at most the pages in flight and a few lists on their way
(when the parsers fall behind, it waits); what travels back is small (a record and its story, no page). One target's failure, timeout or quarantine never holds up the
others, and a chunk is committed whole or not at all, so a crash leaves every target either recorded
once or not at all; running the batch again finds the recorded ones unchanged.
"""

from __future__ import annotations

import contextlib
import os
import queue
import threading
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from scrape_contracts.adapters.pages import PageStore
from scrape_contracts.adapters.fetch.proxy_book import ProxyBook
from scrape_contracts.adapters.fetch.robots import host_key
from scrape_contracts.adapters.store.host_budgets import budgets_url_for
from scrape_contracts.adapters.store.outages import waiting
from scrape_contracts.adapters.store import (
    Candidate, LeaseLost, LostLease, ProjectStore, StoreGone, StoreUnavailable, unavailable,
)
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.engine.outcome import Outcome
from scrape_contracts.service import gate, leases, scrape
from scrape_contracts.service.batch_leases import BatchLeases
from scrape_contracts.service.batch_summary import BatchSummary, summarise
from scrape_contracts.service.records import (
    FetchFailure, LeaseRefusal, Recorded, ScrapeResult, Stage, StageEvent, StoryRecorder, Validated,
)
from scrape_contracts.service.batch_fetch import FetchJob, FetchWork, fetch_main
from scrape_contracts.service.forkserver import worker_context
from scrape_contracts.service.batch_worker import (
    BatchTarget, Done, Item, ParseJob, failure_item, worker_main,
)


@dataclass(frozen=True)
class BatchSettings:
    # requests in flight over all hosts (each host's budget: the contract's fetch:); None: enough for every host
    # of the batch to use its whole concurrency at once, at least 32 and at most 256
    max_connections: int | None = None
    parse_workers: int = 2  # processes that parse; 0: one thread of the run's process (and one that fetches)
    chunk_size: int = 100  # targets per store transaction
    flush_seconds: float = 1.0  # commit a partial chunk after this long, so progress shows while fetching


@dataclass(frozen=True)
class TargetOutcome:
    """One target's story in a batch: the result and what the store made of it, or why it failed, or why
    this run recorded nothing for it (``refusal``: another run holds or took over its lease)."""

    partition: str
    url: str
    story: tuple[StageEvent, ...]
    result: ScrapeResult | None = None
    recorded: Recorded | None = None
    failure: FetchFailure | None = None
    refusal: LeaseRefusal | None = None

    @property
    def outcome(self) -> Outcome:
        return self.result.outcome if self.result is not None else Outcome.FAILED


@dataclass
class BatchStats:
    started: float = field(default_factory=time.monotonic)
    finished: float | None = None
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, outcome: TargetOutcome) -> None:
        self.counts[outcome.refusal.kind.value if outcome.refusal else outcome.outcome.value] += 1

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def seconds(self) -> float:
        return (self.finished or time.monotonic()) - self.started

    @property
    def pages_per_second(self) -> float:
        return self.total / self.seconds if self.seconds > 0 else 0.0


@dataclass
class _Crew:
    """A run's parse workers, then its fetching process (``workers``), and the queues between them."""

    results: Any
    fetched: Any
    work: Any  # where the fetching process's FetchWork goes: a pipe's write end, or a queue for a thread
    workers: list[Any]
    parsers: int
    sent: bool = False

    def send(self, work: FetchWork | None) -> None:  # once; None: nothing to fetch
        if self.sent:
            return
        self.sent = True
        try:
            if hasattr(self.work, "send"):
                self.work.send(work)
                self.work.close()
            else:
                self.work.put(work)
        except (BrokenPipeError, OSError):
            pass  # the fetching process is gone: the run reports it (_consume)


class BatchRunner:
    def __init__(self, loaded: LoadedContract, store: ProjectStore, artifacts: PageStore, run_id: str,
                 fetch_settings: Any, settings: BatchSettings = BatchSettings(), *, force: bool = False,
                 reextract: bool = False, ended: leases.Ended | None = None, jobs: Any = None,
                 holder: str | None = None, skip_recorded: bool = False) -> None:
        self.loaded = loaded
        self.contract = loaded.contract
        self.store = store
        self.artifacts = artifacts
        self.run_id = run_id
        self.fetch_settings = fetch_settings
        self.settings = settings
        self.force = force
        self.reextract = reextract  # work on each target's last fetched page instead of fetching
        self.jobs = jobs  # the provider adapter's job book (adapters/fetch/provider), for the fetcher
        self.stats = BatchStats()
        self.failures: list[FetchFailure] = []
        self.proxies: list[dict[str, object]] = []  # each proxy's health when the fetching ended (no secret)
        # the leases' holder: the run, or one attempt at one chunk step of it (defs/leases.py, chunk_holder)
        self.leases = BatchLeases(store, self.contract.name, holder or run_id, leases.duration_for(fetch_settings),
                                  ended)
        self._selectors = store.current_selectors(self.contract.name, self.contract.selectors())
        self._controls: list[Any] = []
        # a chunk handed out again: the targets its run already recorded are left out (``earlier``)
        self.skip_recorded = skip_recorded
        self.earlier: dict[str, Candidate] = {}

    def summary(self) -> BatchSummary:
        """The batch so far: counts, failed targets and each cause once (``batch_summary``)."""
        return summarise(self.stats.total, self.stats.counts, self.failures)

    def run(self, targets: Sequence[BatchTarget]) -> Iterator[list[TargetOutcome]]:
        """Scrape ``targets``; yields each chunk of outcomes after it is committed to the store. The targets
        another run holds come first, as ``busy`` refusals, and are not fetched (service/batch_leases.py).
        The leases and last states are read while the processes start (``_crew``)."""
        self.stats, self.failures = BatchStats(), []
        targets = list({t.partition: t for t in targets}.values())  # one lease, one scrape per target
        with self._crew(targets) as crew:
            busy = self.leases.take([t.partition for t in targets])
            refused = [TargetOutcome(t.partition, t.url, (), refusal=busy[t.partition]) for t in targets
                       if t.partition in busy]
            with self.leases:
                held = [t.partition for t in targets if t.partition not in busy]
                if self.skip_recorded and held:
                    # read with the leases held: from here on an earlier attempt still alive can commit nothing
                    # (its tokens are stale), so what it did commit is all here, and is not scraped again
                    self.earlier = self.store.recorded_by_run(self.contract.name, self.run_id, held)
                    self.leases.release(list(self.earlier))
                if refused:
                    for outcome in refused:
                        self.stats.add(outcome)
                    yield refused
                yield from self._run(
                    [t for t in targets if t.partition not in busy and t.partition not in self.earlier], crew)

    @contextlib.contextmanager
    def _crew(self, targets: Sequence[BatchTarget]) -> Iterator[_Crew]:
        """The run's parse workers and fetching process (threads with ``parse_workers: 0``), started for
        ``targets`` before any is known to be this run's: the fetching process waits for its ``FetchWork``."""
        names = [t.partition for t in targets]
        in_threads = self.settings.parse_workers <= 0
        count = max(1, min(self.settings.parse_workers, len(targets) or 1))
        ctx = None if in_threads else worker_context()
        make_queue = queue.Queue if in_threads else ctx.Queue
        results: Any = make_queue()
        # fetched pages on their way to the parsers: a few lists each, so memory stays bounded by the concurrency
        fetched: Any = make_queue(maxsize=2 * count)
        # the fetching process's targets, sent once: through a pipe, whose end closes with this process
        work_in, work_out = (make_queue(),) * 2 if in_threads else ctx.Pipe(duplex=False)
        self._controls = [make_queue() for _ in range(count)]
        # the workers' way to know this process died: it holds the only write end (service/batch_worker.py)
        owner, owner_end = (None, None) if in_threads else ctx.Pipe(duplex=False)
        environ = None if in_threads else dict(os.environ)  # a forkserver's children have its, not ours
        # each process is sent a copy: of the run's own targets, not every target of the contract
        sent = self.loaded if in_threads else replace(
            self.loaded, contract=self.loaded.contract.with_only(names))
        started: list[Any] = []

        def start(target: Any, args: tuple[Any, ...]) -> Any:
            worker = (threading.Thread(target=target, args=args, daemon=True) if in_threads
                      else ctx.Process(target=target, args=args, daemon=True))
            worker.start()
            started.append(worker)
            return worker

        crew = _Crew(results, fetched, work_out, [], count)
        try:
            # the fetching process first: its first requests (robots.txt) wait for nothing else
            hosts = tuple(dict.fromkeys(host_key(t.url) for t in targets))
            fetch_job = FetchJob(count, sent, self.fetch_settings, self.artifacts.location, hosts, self._selectors,
                                 self._connections(len(hosts)), count, self.force, self.reextract, self.jobs,
                                 budgets_url_for(self.store.engine), environ, self._proxy_book(),
                                 waits_for_database=waiting())
            fetcher = start(fetch_main, (fetch_job, work_in, fetched, results, owner))
            if not in_threads:
                work_in.close()  # the fetching process has its copy: its end of file is this end closing
            earlier = scrape.earlier_selectors(self.store.selector_history(self.contract.name))
            for index in range(count):
                job = ParseJob(index, sent, self.artifacts.location, self._selectors, self.force, earlier,
                               environ, waits_for_database=waiting())
                start(worker_main, (job, fetched, results, self._controls[index], owner))
            crew.workers = started[1:] + [fetcher]  # as _consume counts them: the parsers, then the fetcher
            if owner is not None:
                owner.close()  # the workers have their copies; this process keeps only the write end
            yield crew
        finally:
            crew.send(None)  # not sent yet (every target busy, or this process failed first): nothing to fetch
            for worker in started:
                worker.join(timeout=10)
                if worker.is_alive() and not in_threads:
                    worker.terminate()
            if owner_end is not None:
                owner_end.close()
            self.stats.finished = time.monotonic()

    def _run(self, targets: Sequence[BatchTarget], crew: _Crew) -> Iterator[list[TargetOutcome]]:
        names = [t.partition for t in targets]
        previous = scrape.previous_all(self.store, self.contract.name, names)
        states = self.store.states(self.contract.name, names)
        pages = self.store.last_pages(self.contract.name, names) if self.reextract else None
        crew.send(FetchWork(tuple(targets), previous,
                            {t.partition: (states[t.partition].etag, states[t.partition].last_modified)
                             for t in targets if t.partition in states}, pages))
        yield from self._consume(crew.results, crew.workers, targets, crew.fetched, crew.parsers)

    def _proxy_book(self) -> ProxyBook | None:
        """Where the contract's proxies' health lasts between runs (None: it names no proxy)."""
        if not getattr(self.fetch_settings, "proxies", None):
            return None
        return ProxyBook(self.store.url, self.contract.name, self.run_id)

    def _connections(self, hosts: int) -> int:
        if self.settings.max_connections is not None:
            return self.settings.max_connections
        return min(256, max(32, hosts * getattr(self.fetch_settings, "concurrency", 4)))

    # -- heal, commit, report -------------------------------------------------------------------------------
    def _consume(self, results: Any, workers: list[Any], targets: Sequence[BatchTarget], fetched: Any,
                 parsers: int) -> Iterator[list[TargetOutcome]]:
        """``workers``: the parse workers, then the fetching process (number ``parsers``)."""
        pending: list[Item] = []
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
                        what = "fetching process" if index == parsers else f"batch worker {index}"
                        finished[index] = f"{what} died (exit code {getattr(worker, 'exitcode', '?')})"
                        if index == parsers:
                            for _ in range(parsers):  # the parsers wait for pages that will not come
                                fetched.put(None)
                fetcher = workers[parsers]
                if parsers not in finished and all(i in finished for i in range(parsers)) \
                        and hasattr(fetcher, "terminate"):
                    # no parser left to take pages: the fetching process would wait for room for ever
                    fetcher.terminate()
                    finished[parsers] = "every batch worker stopped before its pages were parsed"
            if isinstance(item, Done):
                finished[item.worker] = item.error
                if item.proxies:
                    self.proxies = [dict(p) for p in item.proxies]
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
                pending.append(failure_item(self.contract.name, target,
                                        RuntimeError(errors or "the batch worker stopped before this target")))
        if pending:
            yield self._commit(pending)

    def _settle(self, item: Item) -> Item:
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
                return Item(item.target, tuple(story.events), out)
            validated = out
        try:
            result = scrape.heal_and_decide(self.loaded, validated, self.run_id, self.artifacts,
                                            self.leases.fenced([item.target.partition]), story)
        except LeaseLost as lost:  # its heal (selectors, attempts, a pause) was not recorded either
            return Item(item.target, tuple(story.events), lost=lost.lost[0])
        if result.heal.selector_version:
            self._selectors = self.store.current_selectors(self.contract.name, self.contract.selectors())
            for control in self._controls:
                control.put(self._selectors)
        return Item(item.target, tuple(story.events), result)

    def _commit(self, items: list[Item]) -> list[TargetOutcome]:
        results = [i.result for i in items if isinstance(i.result, ScrapeResult) and i.lost is None]
        try:
            fenced = self.leases.fenced([i.target.partition for i in items])
            recorded = iter(gate.record_results(fenced, results, self.run_id, self.loaded) if results else [])
            lost = self.leases.record_failures([(i.target.partition, i.failure.message) for i in items
                                                if i.failure is not None])
        except StoreGone as exc:  # waited for the database (adapters/store/outages.py): its reason says it all
            raise StoreGone(f"{exc} — stopped after {self.stats.total} target(s) were committed") from None
        except Exception as exc:
            down = unavailable(exc, self.store.engine.url.render_as_string(hide_password=True))
            if down is None:
                raise
            # one line for the run's failure: every chunk committed before this one is kept
            raise StoreUnavailable(f"{down} — stopped after {self.stats.total} target(s) were committed; "
                                   "run the batch again once it answers") from None
        outcomes = []
        for item in items:
            if isinstance(item.result, ScrapeResult) and item.lost is None:
                result, rec = next(recorded)
                if isinstance(rec, LostLease):
                    outcome = _refused(item, rec)
                else:
                    story = item.story + (_decision_event(result, rec),)
                    outcome = TargetOutcome(item.target.partition, item.target.url, story, result, rec)
            elif item.lost is not None or item.target.partition in lost:
                outcome = _refused(item, item.lost or lost[item.target.partition])
            else:
                outcome = TargetOutcome(item.target.partition, item.target.url, item.story, failure=item.failure)
                if item.failure is not None:
                    self.failures.append(item.failure)
            self.stats.add(outcome)
            outcomes.append(outcome)
        self.leases.release([i.target.partition for i in items])  # recorded or given up: freed within a second
        return outcomes


def _refused(item: Item, lost: LostLease) -> TargetOutcome:
    event = StageEvent(Stage.LEASE_LOST, {"reason": lost.message})
    return TargetOutcome(item.target.partition, item.target.url, item.story + (event,),
                         refusal=LeaseRefusal.lost(lost))


def _decision_event(result: ScrapeResult, recorded: Recorded) -> StageEvent:
    if recorded.status == "accepted":
        return StageEvent(Stage.ACCEPTED, {"version": recorded.accepted_version, "outcome": result.outcome.value,
                                           "candidate_id": recorded.candidate_id})
    if recorded.status == "quarantined":
        return StageEvent(Stage.QUARANTINED, {"candidate_id": recorded.candidate_id,
                                              "reasons": gate.quarantine_reasons(result)})
    if recorded.status == "rejected":
        return StageEvent(Stage.REJECTED, {"candidate_id": recorded.candidate_id,
                                           "reasons": [v.message for v in result.violations]})
    return StageEvent(Stage.UNCHANGED if recorded.status == "unchanged" else Stage.SKIPPED,
                      {"candidate_id": recorded.candidate_id, "status": recorded.status})
