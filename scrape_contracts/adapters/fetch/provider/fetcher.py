"""``ProviderFetcher``: one page through a hosted provider's job API, behind the same ``fetch(url)`` as HTTP.

One fetch of a target:

1. the target's job in flight, if any, is resumed: a retry or a restarted run polls the job it recorded and
   submits nothing;
2. otherwise a ``submitting`` marker is written (after the cost budget check), the job is submitted, and its
   id recorded before the first poll. A submit that never reached the provider clears the marker; one whose
   answer was lost leaves it, and the target becomes indeterminate (paused with the reason);
3. a marker without a job id found at the start (a run died between the submit and recording the id) makes
   the target indeterminate too: nothing is submitted until a person reconciles it;
4. the job is polled with backoff (``fetch.provider.poll_interval_s`` doubling up to ``max_poll_interval_s``,
   or the provider's Retry-After when longer) within ``fetch.deadline_s``; a poll that times out is tried
   again up to ``fetch.retries`` times in a row; a job still running at the deadline stays recorded and the
   next run polls it again;
5. a done job's result becomes the ``Page``; a failed job is a ``FetchError`` (the next run submits anew).

The provider's own troubles have kinds of their own (``provider_unreachable``, ``provider_timeout``, ...): a
batch's host breaker (service/breaker.py) reads ``connection`` and ``timeout`` as "the target's host is down",
which a slow job or an unreachable provider does not say. A page the provider fetched with a 5xx does.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from scrape_contracts.adapters.fetch import messages
from scrape_contracts.adapters.fetch.page import AsyncClosesOnExit, ClosesOnExit, FetchError, Page
from scrape_contracts.adapters.fetch.provider.book import JobBook
from scrape_contracts.adapters.fetch.provider.client import (
    JobStatus, NotSent, ProviderClient, ProviderError, Unanswered,
)
from scrape_contracts.adapters.fetch.urls import redact_url
from scrape_contracts.adapters.store import INDETERMINATE_PAUSE, BudgetSpent, ProviderJob


def indeterminate_reason(job: ProviderJob, label: str, why: str) -> str:
    """The pause reason of an indeterminate target: what happened and the two ways out."""
    return (f"{INDETERMINATE_PAUSE}: {why} (run {job.run_id}, {job.submitting_at:%Y-%m-%d %H:%M:%S} UTC), "
            "so the provider may have a job for it that was never recorded; nothing more is submitted for it "
            f"until it is reconciled: find the job labelled {label!r} at the provider and run "
            f"`scrape-contracts reconcile {job.contract} {job.partition} --job-id ID`, or `--resubmit` if "
            "the provider has none")


class ProviderFetcher(ClosesOnExit):
    """Fetches pages through a provider's jobs; safe to share between threads (one client, one book)."""

    def __init__(self, client: ProviderClient, book: JobBook, *, deadline_s: float = 60.0, retries: int = 2,
                 poll_interval_s: float = 1.0, max_poll_interval_s: float = 30.0,
                 max_bytes: int = 5_000_000, sleep: Callable[[float], Any] = time.sleep,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.book = book
        self.deadline_s = deadline_s
        self.retries = retries
        self.poll_interval_s = poll_interval_s
        self.max_poll_interval_s = max(max_poll_interval_s, poll_interval_s)
        self.max_bytes = max_bytes
        self._sleep = sleep
        self._clock = clock

    def __repr__(self) -> str:
        return f"ProviderFetcher({self.client!r}, contract={self.book.contract!r})"

    def close(self) -> None:
        self.client.close()

    def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page:
        # validators are not sent: the provider fetches the page; an unchanged page is found by its hash
        started = self._clock()
        shown = redact_url(url)
        try:
            partition = self.book.partition_for(url)
        except LookupError as exc:
            raise FetchError(f"GET {shown} refused: {exc}", kind="invalid_config", url=shown) from None
        label = self.book.label(partition)
        job = self.book.open_job(partition)
        resumed = job is not None
        if job is None:
            job = self._submit(url, shown, partition, label)
        elif job.job_id is None:
            why = ("a submit for it went out and its answer, the job id, was never recorded"
                   if job.state != "indeterminate" else "its earlier submission is indeterminate")
            known = job.state == "indeterminate" and job.error
            reason = job.error if known else indeterminate_reason(job, label, why)
            self.book.indeterminate(job, reason)
            raise FetchError(f"GET {shown} refused: {reason}", kind="indeterminate", url=shown,
                             transient=False)
        status, polls = self._poll(job, shown, started)
        attempt = {"provider_job": job.job_id, "polls": polls, "cost": status.cost if status.cost is not None
                   else job.cost, "resumed": resumed}
        if status.state == "failed":
            error = status.error or "no reason given"
            self.book.finished(job, done=False, cost=status.cost, error=error, polls=polls)
            raise FetchError(f"GET {shown} failed: provider job {job.job_id} failed: {error[:300]} (the next "
                             "run submits a new job)", kind="provider_job_failed", url=shown, transient=True,
                             attempts=(attempt,))
        try:
            result = self.client.result(job.job_id)
        except ProviderError as exc:
            # the job stays open: the next run downloads the same result, it submits nothing
            raise FetchError(f"GET {shown} failed: {exc} (job {job.job_id} stays recorded; the next run "
                             "downloads its result)", kind="provider", url=shown, transient=True,
                             attempts=(attempt,)) from None
        self.book.finished(job, done=True, cost=status.cost, polls=polls)
        return self._page(url, shown, result, started, attempt)

    def _submit(self, url: str, shown: str, partition: str, label: str) -> ProviderJob:
        try:
            marker = self.book.begin_submit(partition, url)
        except BudgetSpent as exc:
            raise FetchError(f"GET {shown} refused: {exc}", kind="budget_spent", url=shown,
                             transient=True) from None
        try:
            answer = self.client.submit(url, label)
        except NotSent as exc:
            self.book.not_sent(marker, str(exc))
            raise FetchError(f"GET {shown} failed: {exc} (nothing was submitted; usually temporary)",
                             kind="provider_unreachable", url=shown, transient=True) from None
        except Unanswered as exc:
            why = f"the submit's answer was lost ({exc})"
            job = self.book.indeterminate(marker, indeterminate_reason(marker, label, why))
            raise FetchError(f"GET {shown} refused: {job.error}", kind="indeterminate", url=shown,
                             transient=False) from None
        except ProviderError as exc:
            # the provider answered, and its answer was no job: nothing to poll, nothing charged
            self.book.not_sent(marker, str(exc))
            raise FetchError(f"GET {shown} failed: {exc}", kind="provider", url=shown,
                             transient=exc.status is not None and exc.status >= 500) from None
        # recorded before anything polls it: a run that dies from here on is resumed by the next one
        return self.book.submitted(marker, answer.job_id, answer.cost)

    def _poll(self, job: ProviderJob, shown: str, started: float) -> tuple[JobStatus, int]:
        assert job.job_id is not None
        wait, polls, failures = self.poll_interval_s, job.polls, 0
        while True:
            try:
                status = self.client.status(job.job_id)
            except (NotSent, Unanswered) as exc:
                failures += 1
                if failures > self.retries:
                    raise FetchError(f"GET {shown} failed: {exc}, {messages.attempts(failures)} in a row "
                                     f"(job {job.job_id} stays recorded; the next run polls it again)",
                                     kind="provider_unreachable", url=shown, transient=True) from None
                status = None
            except ProviderError as exc:
                if exc.status == 404:
                    self.book.finished(job, done=False, cost=None, error=str(exc), polls=polls)
                    raise FetchError(f"GET {shown} failed: {exc} (the provider does not know job "
                                     f"{job.job_id}; the next run submits a new job)",
                                     kind="provider_job_unknown", url=shown, transient=True) from None
                raise FetchError(f"GET {shown} failed: {exc}", kind="provider", url=shown,
                                 transient=exc.status is None or exc.status >= 500) from None
            else:
                failures = 0
                polls += 1
                if status.finished:
                    return status, polls
            pause = max(wait, status.retry_after_s or 0.0) if status is not None else wait
            if self._clock() - started + pause > self.deadline_s:
                self.book.polled(job, polls)
                state = status.state if status is not None else "unanswered"
                took = messages.seconds(self._clock() - started)
                raise FetchError(f"GET {shown} timed out: provider job {job.job_id} is still {state} after "
                                 f"{took} (fetch.deadline_s {self.deadline_s:g}; the job stays recorded and "
                                 "the next run polls it again)", kind="provider_timeout", url=shown,
                                 transient=True)
            self._sleep(pause)
            wait = min(wait * 2, self.max_poll_interval_s)

    def _page(self, url: str, shown: str, result: Any, started: float, attempt: dict[str, Any]) -> Page:
        html = result.body
        data = html.encode("utf-8")
        if len(data) > self.max_bytes:
            raise FetchError(f"GET {shown} {messages.too_large(self.max_bytes, f'{len(data)} bytes')}",
                             kind="too_large", url=shown, attempts=(attempt,))
        if result.status >= 400:
            failed = messages.failed_status(result.status, "")
            raise FetchError(f"GET {shown} {failed} (as fetched by the provider)", kind="http_status",
                             url=shown, status=result.status,
                             transient=result.status >= 500 or result.status == 429, attempts=(attempt,))
        return Page(url=result.url or url, requested_url=url, status=result.status, html=html,
                    sha256=hashlib.sha256(data).hexdigest(), headers=dict(result.headers),
                    elapsed_s=self._clock() - started, encoding=result.encoding, attempts=(attempt,))


class AsyncProviderFetcher(AsyncClosesOnExit):
    """The batch path's face of ``ProviderFetcher``: each fetch runs in a thread of its own pool (a job's
    fetch is mostly waiting between polls, and the store and the provider's client are blocking)."""

    def __init__(self, fetcher: ProviderFetcher, *, max_connections: int = 32) -> None:
        self.fetcher = fetcher
        self._pool = ThreadPoolExecutor(max_workers=max(1, max_connections), thread_name_prefix="provider")

    def __repr__(self) -> str:
        return f"Async{self.fetcher!r}"

    async def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page:
        return await asyncio.get_running_loop().run_in_executor(self._pool, self.fetcher.fetch, url)

    async def aclose(self) -> None:
        self._pool.shutdown(wait=True)
        self.fetcher.close()
