"""A run's fetching against several real site hosts on loopback addresses, asserted from the servers' logs:
each host's concurrency reached and never passed whatever the targets' order, no slot held through a
Retry-After, a 429 holding its host, robots.txt read once and obeyed, Crawl-delay as a rate."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from scrape_contracts.adapters.fetch import FetchError, async_fetcher_for, fetcher_for
from scrape_contracts.adapters.fetch.robots import host_key
from scrape_contracts.contract.fetch import DEFAULT_USER_AGENT, FetchSettings
from scrape_contracts.service.crawl import Crawl
from scrape_contracts_tests.hosts_site import HostPlan, HostsSite, Seen

A, B, C = "127.0.0.2", "127.0.0.3", "127.0.0.4"


def crawl(site: HostsSite, urls: list[str], tmp_path: Path, *, starts: list[tuple[str, float]] | None = None,
          **fetch: Any) -> dict[str, Any]:
    """Fetch ``urls`` as a batch's fetching process does: one fetcher, one pacer, the host-aware order.
    ``starts``: each request's (host, start time) as its pacer let it start, on the pacer's clock."""
    settings = FetchSettings(**{"allow_private_addresses": True, "retries": 2, **fetch})
    outcomes: dict[str, Any] = {}

    async def main() -> None:
        fetcher: Any = async_fetcher_for(settings, tmp_path, max_connections=64)
        if starts is not None:
            take = fetcher.pacer.take

            async def noted(host: str) -> Any:
                ticket = await take(host)
                starts.append((host, ticket.started))
                return ticket

            fetcher.pacer.take = noted

        async def work(url: str) -> None:
            try:
                outcomes[url] = await fetcher.fetch(url)
            except FetchError as exc:
                outcomes[url] = exc

        try:
            await Crawl(fetcher.pacer, 64).run(urls, lambda url: url, work)
        finally:
            await fetcher.aclose()

    asyncio.run(main())
    return outcomes


def pages(seen: list[Seen]) -> list[Seen]:
    return sorted((s for s in seen if s.path != "/robots.txt"), key=lambda s: s.start)


def test_each_host_gets_its_whole_concurrency_whatever_the_order_of_the_targets(tmp_path: Path) -> None:
    # every target of A first, then every target of B: lanes taking targets in order would all wait on A
    with HostsSite({A: HostPlan(hold_for=3), B: HostPlan(hold_for=3)}) as site:
        urls = [site.url(A, f"/a/{i}") for i in range(15)] + [site.url(B, f"/b/{i}") for i in range(15)]
        outcomes = crawl(site, urls, tmp_path, concurrency=3)
        assert all(not isinstance(o, Exception) for o in outcomes.values())
        assert site.reached(A) and site.reached(B)  # 3 at once on each (an odd concurrency loses none)
        assert site.peak(A) == 3 and site.peak(B) == 3  # and never more
        first_b = min(s.start for s in site.requests(B) if s.path != "/robots.txt")
        assert first_b < max(s.start for s in site.requests(A))  # both hosts busy at once, not one after the other


def test_a_page_waiting_out_a_503_s_retry_after_leaves_its_slot_to_the_others(tmp_path: Path) -> None:
    plan = HostPlan(scripted={"/p/0": [(503, {"Retry-After": "2"})]})
    with HostsSite({A: plan}) as site:
        urls = [site.url(A, f"/p/{i}") for i in range(5)]
        outcomes = crawl(site, urls, tmp_path, concurrency=1)
        assert all(not isinstance(o, Exception) for o in outcomes.values()), outcomes
        first, retry = site.requests(A, "/p/0")
        others = [s for s in pages(site.requests(A)) if s.path != "/p/0"]
        assert first.status == 503 and retry.status == 200
        assert retry.start - first.end >= 1.95  # the host's Retry-After, honoured
        # the only slot went to another page meanwhile (held through the wait, it could not have); how many
        # fit in the wait depends on the machine's load, that one does is the point
        assert any(first.end <= s.start and s.end <= retry.start for s in others)
        assert site.peak(A) == 1


def test_a_429_with_retry_after_holds_its_host_but_no_other(tmp_path: Path) -> None:
    plan = HostPlan(scripted={"/a/0": [(429, {"Retry-After": "1"})]}, latency_s=0.05)
    with HostsSite({A: plan, B: HostPlan(latency_s=0.05)}) as site:
        urls = [site.url(A, f"/a/{i}") for i in range(6)] + [site.url(B, f"/b/{i}") for i in range(30)]
        outcomes = crawl(site, urls, tmp_path, concurrency=2)
        assert all(not isinstance(o, Exception) for o in outcomes.values()), outcomes
        [refused] = [s for s in site.requests(A) if s.status == 429]
        started_after = [s.start for s in pages(site.requests(A)) if s.start > refused.end]
        assert min(started_after) - refused.end >= 0.95  # nothing asked of A before its Retry-After ran out
        b_during = [s for s in site.requests(B) if refused.end < s.start < refused.end + 0.9]
        assert b_during  # B went on meanwhile
        assert site.peak(A) <= 2 and site.peak(B) <= 2


def test_robots_txt_is_read_once_per_host_obeyed_and_its_crawl_delay_is_a_rate(tmp_path: Path) -> None:
    robots = "User-agent: *\nDisallow: /private\nCrawl-delay: 0.3\n"
    with HostsSite({A: HostPlan(robots=robots), B: HostPlan()}) as site:
        urls = ([site.url(A, f"/public/{i}") for i in range(4)] + [site.url(A, f"/private/{i}") for i in range(2)]
                + [site.url(B, f"/b/{i}") for i in range(3)])
        starts: list[tuple[str, float]] = []
        outcomes = crawl(site, urls, tmp_path, concurrency=4, starts=starts)
        assert len(site.requests(A, "/robots.txt")) == 1 and len(site.requests(B, "/robots.txt")) == 1
        assert not [s for s in site.requests(A) if s.path.startswith("/private")]  # never asked
        for i in range(2):
            refused = outcomes[site.url(A, f"/private/{i}")]
            assert isinstance(refused, FetchError) and refused.kind == "robots_disallowed"
            assert "robots.txt disallows it" in str(refused) and "fetch.robots: ignore" in str(refused)
            assert not refused.transient
        assert len(pages(site.requests(A))) == 4
        # Crawl-delay 0.3 between the starts the pacer allowed (its robots.txt read is the first of A's): on
        # the client's clock, as the server's arrival times also carry the machine's scheduling delays
        of_a = [started for host, started in starts if host == host_key(site.url(A, "/"))][1:]
        assert len(of_a) == 4 and all(b - a >= 0.3 - 1e-6 for a, b in zip(of_a, of_a[1:])), of_a
        assert {s.agent for s in site.seen} == {DEFAULT_USER_AGENT}
        assert all(not isinstance(outcomes[site.url(B, f"/b/{i}")], Exception) for i in range(3))


@pytest.mark.parametrize("status, fetched", [(404, True), (403, True), (503, False)])
def test_a_missing_robots_txt_allows_everything_and_an_unreachable_one_nothing(status: int, fetched: bool,
                                                                               tmp_path: Path) -> None:
    with HostsSite({A: HostPlan(robots="User-agent: *\nDisallow: /\n", robots_status=status)}) as site:
        outcomes = crawl(site, [site.url(A, f"/p/{i}") for i in range(3)], tmp_path, retries=1)
        asked = pages(site.requests(A))
        if fetched:
            assert len(asked) == 3 and all(not isinstance(o, Exception) for o in outcomes.values())
        else:
            assert asked == [] and len(site.requests(A, "/robots.txt")) == 2  # its retries, then no page
            for outcome in outcomes.values():
                assert isinstance(outcome, FetchError) and outcome.kind == "robots_unavailable"
                assert "could not be read (HTTP 503)" in str(outcome) and outcome.transient


def test_robots_ignore_never_asks_for_robots_txt_and_the_contract_names_its_agent(tmp_path: Path) -> None:
    with HostsSite({A: HostPlan(robots="User-agent: *\nDisallow: /\n")}) as site:
        outcomes = crawl(site, [site.url(A, "/p/1")], tmp_path, robots="ignore", user_agent="acme-bot/2 (+https://acme.example/bot)")
        assert not isinstance(outcomes[site.url(A, "/p/1")], Exception)
        assert [s.path for s in site.seen] == ["/p/1"] and site.seen[0].agent == "acme-bot/2 (+https://acme.example/bot)"


def test_the_single_path_fetcher_obeys_robots_and_paces_its_host_too(tmp_path: Path) -> None:
    robots = "User-agent: scrape-contracts\nDisallow: /private\nCrawl-delay: 0.3\n"
    with HostsSite({A: HostPlan(robots=robots)}) as site:
        with fetcher_for(FetchSettings(allow_private_addresses=True), tmp_path) as fetcher:
            for i in range(3):
                fetcher.fetch(site.url(A, f"/p/{i}"))
            with pytest.raises(FetchError) as refused:
                fetcher.fetch(site.url(A, "/private/x"))
        assert refused.value.kind == "robots_disallowed"
        assert len(site.requests(A, "/robots.txt")) == 1
        starts = [s.start for s in pages(site.requests(A))]
        assert len(starts) == 3 and all(b - a >= 0.28 for a, b in zip(starts, starts[1:]))


def test_on_the_postgres_store_a_host_s_shared_slots_go_from_page_to_page_not_back_and_forth(
        tmp_path: Path, pg_database: str) -> None:
    from scrape_contracts.adapters.fetch.pace import AsyncPacer, limits_for
    from scrape_contracts.adapters.store import ProjectStore
    from scrape_contracts_tests.adapters.test_pace import StoreCalls

    ProjectStore(pg_database)
    budget = StoreCalls(pg_database)
    settings = FetchSettings(allow_private_addresses=True, retries=0, concurrency=2)
    with HostsSite({A: HostPlan(latency_s=0.02)}) as site:
        urls = [site.url(A, f"/p/{i}") for i in range(20)]

        async def main() -> None:
            pacer = AsyncPacer(limits_for(settings), shared=budget, hold_s=settings.deadline_s)
            fetcher: Any = async_fetcher_for(settings, tmp_path, max_connections=64, pacer=pacer)

            async def work(url: str) -> None:
                await fetcher.fetch(url)

            try:
                await Crawl(pacer, 64).run(urls, lambda url: url, work)
            finally:
                await fetcher.aclose()
                pacer.close()

        asyncio.run(main())
        assert len(pages(site.requests(A))) == 20 and site.peak(A) == 2
    # robots.txt and 20 pages, two at a time: the dispatcher had the host's next page ready each time a
    # request ended, so the slot went to it (without that, 21 takes and 21 give-backs)
    assert budget.takes <= 3, budget.takes
    assert budget.held() == 0 and budget.give_backs == budget.takes
    budget.close()
