"""A batch's parse workers: each takes fetched pages from the run's fetching process (service/batch_fetch.py)
as it is free, stores each page and runs the pure stages (extract, validate, decide), and hands small
results back to the run's process (service/batch.py), which heals, records and reports."""

from __future__ import annotations

import os
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from scrape_contracts.adapters.store.outages import as_the_run_does
from scrape_contracts.adapters.pages import open_pages
from scrape_contracts.adapters.store import (
    LostLease,
    SelectorVersion,
)
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.service import scrape
from scrape_contracts.service.records import (
    FetchFailure,
    Previous,
    ScrapeResult,
    Stage,
    StageEvent,
    StoryRecorder,
    Validated,
)


@dataclass(frozen=True)
class BatchTarget:
    partition: str
    url: str


@dataclass(frozen=True)
class Done:
    worker: int
    error: str | None = None
    proxies: tuple[dict[str, object], ...] = ()  # the fetching process's: each proxy's health at the end


@dataclass(frozen=True)
class Item:
    target: BatchTarget
    story: tuple[StageEvent, ...]
    result: ScrapeResult | Validated | None = None
    failure: FetchFailure | None = None
    lost: LostLease | None = None  # its lease was lost before it could be recorded


@dataclass(frozen=True)
class ParseJob:
    """What one parse worker needs (pickled once per worker); the pages come with their target's previous
    accepted version, from the fetching process (service/batch_fetch.py)."""

    index: int
    loaded: LoadedContract
    pages: str  # the page storage's location, opened again in the worker
    selectors: SelectorVersion
    force: bool = False  # no unchanged shortcut: every page extracted again
    earlier: dict[str, tuple[str, ...]] = field(default_factory=dict)  # selectors of earlier versions
    environ: dict[str, str] | None = None  # the run's environment (``adopt_environment``)
    waits_for_database: bool = True  # as the run does (adapters/store/outages.py)


# ---- the parse workers: each takes pages as it is free ---------------------------------------------------
_SEND_AT = 25  # results per message to the run's process
_SEND_EVERY_S = 0.1  # or sooner


OWNER_GONE_EXIT = 75  # a worker's exit status when the run's process died under it


def adopt_environment(environ: dict[str, str] | None) -> None:
    """Take the run's environment as it is now. A forkserver's child inherits the forkserver's environment,
    which is the process's as it was when the forkserver started (early, service/forkserver.py), not as the
    run has it: a proxy password set since, in a long-lived process, was missing in the fetching process."""
    if environ is not None and environ != os.environ:
        os.environ.clear()
        os.environ.update(environ)


def watch_owner(owner: Any) -> None:
    """Exit this process at once when the run's process is gone.

    ``owner`` is the read end of a pipe whose only write end the run's process holds (``None`` for a worker
    thread). Nothing is ever written to it: it reads end of file when the run's process is gone, however it
    died (SIGKILL, out of memory). Nobody reads this process's results any more, and without this it went on
    working, then blocked for ever at exit flushing into the results queue, an orphan of init holding its
    memory. An end-of-file has no race to lose, unlike watching a pid (reused) or PR_SET_PDEATHSIG (the
    parent of a forkserver's child is the forkserver, not the run).
    """
    if owner is not None:
        threading.Thread(target=_exit_when_gone, args=(owner,), name="owner-watch", daemon=True).start()


def _exit_when_gone(owner: Any) -> None:
    try:
        while os.read(owner.fileno(), 1):
            pass  # nothing is written to it; a byte would not mean the run is gone
    except OSError:
        pass
    os._exit(OWNER_GONE_EXIT)  # no queue flush, no clean-up that could wait for a reader that is gone


# Parse workers yield the CPU to the run's own process. On a first sweep that process is the critical path
# (it writes one Dagster materialisation per accepted target, Dagster's storage one event at a time) and the
# workers are ahead of it: when both cores are busy, a worker at the same priority takes its turn from it.
# A worker still gets every cycle nobody else wants (docs/performance.md, "Parse workers at a lower
# priority").
PARSE_NICENESS = 10


def worker_main(job: ParseJob, pages: Any, results: Any, control: Any, owner: Any = None) -> None:
    """A parse worker's life: process pages until the fetching process says they ended (None)."""
    watch_owner(owner)
    if owner is not None:  # a process of its own (a thread shares the run's environment)
        adopt_environment(job.environ)
        as_the_run_does(job.waits_for_database)
        os.nice(PARSE_NICENESS)
    try:
        Parser(job, results, control).run(pages)
    except BaseException as exc:  # noqa: BLE001 (reported to the run, which records the targets as failed)
        results.put(Done(job.index, f"{type(exc).__name__}: {exc}"))
        return
    results.put(Done(job.index))


class Parser:
    def __init__(self, job: ParseJob, results: Any, control: Any) -> None:
        self.job = job
        self.loaded = job.loaded
        self.artifacts = open_pages(job.pages)
        self.results = results
        self.control = control
        self.selectors = job.selectors

    def _latest_selectors(self) -> SelectorVersion:
        # a heal elsewhere in the batch: use its selectors from now on
        while True:
            try:
                self.selectors = self.control.get_nowait()
            except queue.Empty:
                return self.selectors

    def run(self, pages: Any) -> None:
        # results go back in small lists: one queue put per target cost a tenth of an unchanged sweep's worker
        # time (a lock handshake with the queue's feeder thread each); a list leaves when it is full or
        # _SEND_EVERY_S old, so progress still shows as it happens
        outbox: list[Item] = []
        last_sent = time.monotonic()
        while True:
            try:
                batch = pages.get(timeout=_SEND_EVERY_S)
            except queue.Empty:
                batch = ()
            if batch is None:
                break
            for target, page, previous in batch:
                outbox.append(self.process(target, page, previous))
            if outbox and (len(outbox) >= _SEND_AT or time.monotonic() - last_sent >= _SEND_EVERY_S):
                self.results.put(outbox)
                outbox, last_sent = [], time.monotonic()
        if outbox:
            self.results.put(outbox)

    def process(self, target: BatchTarget, page: Any, before: Previous | None) -> Item:
        if isinstance(page, Exception):
            return failure_item(self.loaded.contract.name, target, page)
        try:
            story = StoryRecorder()
            fetched = scrape.observe_page(self.loaded, target.partition, target.url, page, before, self.artifacts,
                                          story, force=self.job.force)
            selectors = self._latest_selectors()
            # an unchanged page costs nothing more, unless the contract or the selectors changed since
            html = None if scrape.shortcut_holds(self.loaded, fetched, selectors) else \
                scrape.page_html(fetched, page.html, self.artifacts)
            out = scrape.process_page(self.loaded, fetched, html, selectors, story, self.job.earlier)
            return Item(target, tuple(story.events), out)
        except Exception as exc:  # noqa: BLE001
            return failure_item(self.loaded.contract.name, target, exc)


# ---- the runner: the run's own process ------------------------------------------------------------------
def failure_item(contract: str, target: BatchTarget, exc: Exception) -> Item:
    kind = getattr(exc, "kind", "error")
    message = str(exc) if hasattr(exc, "kind") else f"{type(exc).__name__}: {exc}"
    failure = FetchFailure(contract, target.partition, target.url, kind, message,
                           bool(getattr(exc, "transient", False)), tuple(getattr(exc, "attempts", ())))
    stage = Stage.FETCH_FAILED
    event = StageEvent(stage, {"url": target.url, "error": message, "kind": kind,
                               "attempts": [dict(a) for a in failure.attempts]})
    return Item(target, (event,), failure=failure)


