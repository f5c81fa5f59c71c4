"""Proxy health across runs, in the project store on a real SQLite file and a real PostgreSQL database: a
proxy one run quarantined is not handed the next run's requests until its rest is over, then one request
re-checks it; asserted from the proxies' logs (which proxy each run's requests reached) and the store's rows.
The wall clock the rows are written and read with is the test's (moved, never waited for)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from scrape_contracts.adapters.fetch import HttpFetcher
from scrape_contracts.adapters.fetch.proxy_book import ProxyBook
from scrape_contracts.adapters.proxies import ProxyEndpoint
from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts_tests.conftest import product_page
from scrape_contracts_tests.proxy_site import ForwardProxy, SessionSite


class WallClock:
    def __init__(self) -> None:
        self.now = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)

    def __call__(self) -> dt.datetime:
        return self.now


def test_a_proxy_quarantined_by_one_run_rests_out_its_quarantine_in_the_next(both_stores: ProjectStore) -> None:
    store_url = both_stores.url
    clock = WallClock()
    with SessionSite(lambda path: product_page(f"Book {path}")) as site, \
            ForwardProxy("locked", credentials=("someone", "else")) as locked, ForwardProxy("good") as good:
        endpoints = [ProxyEndpoint("locked", locked.url), ProxyEndpoint("good", good.url)]

        def run(run_id: str, path: str) -> list[str | None]:
            book = ProxyBook(store_url, "shop", run_id, clock=clock)
            with HttpFetcher(allow_private_addresses=True, proxies=endpoints, proxy_recheck_s=300,
                             proxy_book=book) as fetcher:
                return [a.get("proxy") for a in fetcher.fetch(site.url(path)).attempts]

        def rows() -> dict[str, object]:
            return {r.proxy: r for r in ProjectStore(store_url).proxy_health("shop")}

        # run 1: the first proxy asks for credentials nobody set: quarantined, its request retried through good
        assert run("run-1", "/p/1") == ["locked", "good"]
        first = rows()
        assert first["locked"].quarantined and first["locked"].recheck_at == pytest.approx(
            clock.now + dt.timedelta(seconds=300), abs=dt.timedelta(seconds=5))
        assert (first["locked"].quarantines, first["locked"].failures, first["locked"].run_id) == (1, 1, "run-1")
        assert not first["good"].quarantined and first["good"].requests == 1

        # run 2, ten seconds later: a fresh fetcher, but the quarantine lasts: nothing goes to locked
        clock.now += dt.timedelta(seconds=10)
        assert run("run-2", "/p/2") == ["good"]
        assert [c.url for c in locked.carried()] == [site.url("/p/1")]
        second = rows()
        assert second["locked"].quarantined and second["locked"].run_id == "run-2"
        assert second["locked"].recheck_at == pytest.approx(first["locked"].recheck_at, abs=dt.timedelta(seconds=5))

        # run 3, once its rest is over: the first request re-checks it; still refusing, it rests twice as long
        clock.now += dt.timedelta(seconds=291)
        assert run("run-3", "/p/3") == ["locked", "good"]
        third = rows()
        assert third["locked"].quarantined and third["locked"].rest_s == 600 and third["locked"].rechecks == 1

        # run 4, after that rest, with the proxy fixed: the re-check passes and it is back in rotation
        locked.ask_for(None)
        clock.now += dt.timedelta(seconds=601)
        assert run("run-4", "/p/4") == ["locked"]
        fourth = rows()
        assert not fourth["locked"].quarantined and fourth["locked"].recheck_at is None
        assert [c.status for c in locked.carried()] == [407, 407, 200]
        assert [v.path for v in site.visits] == ["/p/1", "/p/2", "/p/3", "/p/4"]


def test_a_store_that_cannot_be_reached_costs_no_page(tmp_path: Path) -> None:
    with SessionSite(lambda path: product_page(f"Book {path}")) as site, ForwardProxy("good") as good:
        # a PostgreSQL port nobody listens on: the book can neither read nor write, the fetch goes on
        book = ProxyBook("postgresql://postgres@127.0.0.1:1/none", "shop", "run-1")
        with HttpFetcher(allow_private_addresses=True, proxies=[ProxyEndpoint("good", good.url)],
                         proxy_book=book) as fetcher:
            assert fetcher.fetch(site.url("/p/1")).proxy == "good"
        assert [c.url for c in good.carried()] == [site.url("/p/1")]
