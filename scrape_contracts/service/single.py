"""Scrape one target from start to end: the use case behind a single-target run (the UI's Materialize of one
partition). The batch path does the same per target in service/batch.py.

Under the target's lease: fetch → observe the page → extract → validate → heal → decide → store the
candidate. Every write after the fetch is fenced by the lease, so a run that lost its target meanwhile (it
was paused, partitioned, or killed and revived) commits nothing. A candidate left ``pending`` keeps the lease
for the step that accepts it (``gate.accept``, the run's next step); any other outcome releases it here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from scrape_contracts.adapters.pages import PageStore
from scrape_contracts.adapters.fetch import Fetcher, FetchError, Page, redact_url
from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.service import gate, leases, lists, scrape
from scrape_contracts.service.records import Emit, Recorded, ScrapeResult, Stage

# statuses whose candidate is still to be accepted by the run's next step, under the same lease
KEEPS_LEASE = ("pending", "unchanged")


@dataclass(frozen=True)
class Scraped:
    """What one target's scrape ended with: the decision, the stored candidate, and the pause in force."""

    result: ScrapeResult
    recorded: Recorded
    pause_reason: str | None  # the target is paused (a review pending, a healing budget spent)


class FetchFailed(Exception):
    """The page could not be fetched (the attempts are on ``error``); the failure is recorded.
    ``pause_reason``: the fetch paused the target (a provider submission found indeterminate)."""

    def __init__(self, error: FetchError, url: str, pause_reason: str | None = None) -> None:
        super().__init__(str(error))
        self.error = error
        self.url = url
        self.pause_reason = pause_reason


def scrape_target(loaded: LoadedContract, partition: str, *, store: ProjectStore, artifacts: PageStore,
                  fetcher: Callable[[], Fetcher], run_id: str, emit: Emit, force: bool = False,
                  ended: leases.Ended | None = None) -> Scraped:
    """Scrape ``partition`` of ``loaded`` as run ``run_id`` holding its lease.

    ``fetcher`` makes the contract's fetcher (closed here); ``force`` fetches without validators and never
    reuses the last accepted record; ``ended`` tells whether another holder's run has ended, so that its
    lease is taken over at once. Raises ``TargetBusy`` (another live run scrapes it), ``LeaseLost`` (the
    lease lapsed and another run took it), ``FetchFailed``.
    """
    contract = loaded.contract
    name = contract.name
    url = scrape.target_url(loaded, store, partition)
    duration = leases.duration_for(contract.fetch)
    lease = leases.take_one(store, name, partition, holder=run_id, duration=duration, ended=ended)
    with leases.LeaseKeeper(store, [lease], duration) as keeper:
        fenced = store.fenced([lease])
        try:
            page = _fetch(loaded, partition, url, store, fetcher, force=force)
        except FetchError as exc:
            emit(Stage.FETCH_FAILED, {"url": redact_url(url), "error": str(exc), "kind": exc.kind,
                                      "attempts": [dict(a) for a in exc.attempts]})
            if exc.kind != "budget_spent":  # the contract's cost budget stopped it, not the target
                fenced.record_failures(name, [(partition, str(exc))])
            paused = None
            if exc.kind == "indeterminate":  # the provider adapter paused it with the reason
                paused = store.state(name, partition).pause_reason
                emit(Stage.PAUSED, {"reason": paused, "cause": "indeterminate"})
            keeper.release([lease.key])
            raise FetchFailed(exc, redact_url(url), paused) from None
        # the last accepted version is read once, here: every later stage compares against the same snapshot
        previous = scrape.previous_of(store, name, partition)
        fetched = scrape.observe_page(loaded, partition, url, page, previous, artifacts, emit, force=force)
        selectors = store.current_selectors(name, contract.selectors())
        html = None if scrape.shortcut_holds(loaded, fetched, selectors) else \
            scrape.page_html(fetched, page.html, artifacts)
        earlier = scrape.earlier_selectors(store.selector_history(name)) if html else {}
        extracted = scrape.extract(loaded, fetched, selectors, html, emit, earlier)
        validated = scrape.validate(loaded, extracted, emit)
        result = scrape.heal_and_decide(loaded, validated, run_id, artifacts, fenced, emit)
        recorded = gate.store_candidate(fenced, result, run_id)
        if recorded.status not in KEEPS_LEASE:
            keeper.release([lease.key])  # nothing left to accept: the target is free for the next run
    state = store.state(name, partition)
    return Scraped(result, recorded, state.pause_reason if state.paused else None)


def _fetch(loaded: LoadedContract, partition: str, url: str, store: ProjectStore,
           fetcher: Callable[[], Fetcher], *, force: bool) -> Page:
    contract = loaded.contract
    state = store.state(contract.name, partition)
    client = fetcher()
    if contract.is_list:  # every page of the target, found with the item selector in force
        from scrape_contracts.adapters.fetch.paging import paged

        in_force = store.current_selectors(contract.name, contract.selectors()).selectors
        client = paged(client, contract, lists.item_selector(loaded, in_force))
    try:
        return client.fetch(url, etag=None if force else state.etag,
                            last_modified=None if force else state.last_modified)
    finally:
        client.close()
