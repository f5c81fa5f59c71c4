"""Proxies and sessions in the HTTP fetchers: the pool's rules on their own (an injected clock), then both
fetchers through real forward proxies on loopback in front of a real site, asserted from the proxies' and
the site's logs (which proxy carried which request, what cookie came back)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from scrape_contracts.adapters.fetch import AsyncHttpFetcher, FetchError, HttpFetcher, fetcher_for
from scrape_contracts.adapters.fetch.cookies import Sessions
from scrape_contracts.adapters.proxies import Fault, ProxyEndpoint, ProxyPool
from scrape_contracts.contract.fetch import FetchSettings
from scrape_contracts_tests.conftest import PRODUCT_CONTRACT, product_page
from scrape_contracts_tests.proxy_site import ForwardProxy, SessionSite, refused_port

SECRET = "s3cr3t-proxy-pass"


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _pool(*names: str, **kw: object) -> ProxyPool:
    return ProxyPool([ProxyEndpoint(n, f"http://{n}:3128") for n in names], **kw)  # type: ignore[arg-type]


def test_equal_proxies_take_turns_and_a_slow_one_gets_its_floor_share() -> None:
    pool = _pool("a", "b", "c")
    assert [pool.choose("h").name for _ in range(6)] == ["a", "b", "c", "a", "b", "c"]
    for name, seconds in (("a", 0.01), ("b", 0.01), ("c", 1.0)):
        pool.report(pool.choose("h").__class__(name, False), Fault.NONE, seconds)
    picks = [pool.choose("h").name for _ in range(100)]
    assert picks.count("c") < 10 and picks.count("c") >= 1  # measured again now and then, never starved
    assert abs(picks.count("a") - picks.count("b")) <= 1


def test_a_refusing_proxy_is_quarantined_at_once_a_flaky_one_after_two_and_both_are_rechecked() -> None:
    clock = Clock()
    pool = _pool("a", "b", "c", recheck_s=30, clock=clock)
    a = pool.choose("h")
    pool.report(a, Fault.HARD, 0.0)
    assert {pool.choose("h").name for _ in range(10)} == {"b", "c"}
    b = pool.choose("h")
    assert b.name == "b"
    pool.report(b, Fault.SOFT, 0.0)
    assert [h["quarantined"] for h in pool.health()] == [True, False, False]
    pool.report(pool.choose("x").__class__("b", False), Fault.SOFT, 0.0)
    assert [h["quarantined"] for h in pool.health()] == [True, True, False]
    assert {pool.choose("h").name for _ in range(5)} == {"c"}
    clock.now += 30
    probe = pool.choose("h")
    assert probe.name == "a" and probe.probe
    pool.report(probe, Fault.HARD, 0.0)  # still refusing: rests twice as long
    assert pool.health()[0]["recheck_in_s"] == 60
    probe = pool.choose("h")
    assert probe.name == "b" and probe.probe  # b's rest is over too
    pool.report(probe, Fault.NONE, 0.01)
    assert [h["quarantined"] for h in pool.health()] == [True, False, False]
    assert pool.health()[0]["quarantines"] == 2 and pool.health()[0]["rechecks"] == 1


def test_sticky_hosts_keep_their_proxy_until_it_is_quarantined() -> None:
    pool = _pool("a", "b", sticky=True)
    first = {host: pool.choose(host).name for host in ("h1", "h2", "h3")}
    assert first == {"h1": "a", "h2": "b", "h3": "a"}
    assert all(pool.choose(h).name == p for h, p in first.items() for _ in range(3))
    pool.report(pool.choose("h1"), Fault.HARD, 0.0)
    assert {pool.choose(h).name for h in ("h1", "h2", "h3")} == {"b"}


@pytest.fixture()
def site():
    with SessionSite(lambda path: product_page(f"Book {path}", "BK-1", "$10.00")) as served:
        yield served


def test_the_sync_fetcher_goes_around_a_failing_and_a_refusing_proxy_and_says_which_carried_the_page(
        site: SessionSite) -> None:
    with ForwardProxy("failing", failing=True) as failing, ForwardProxy("good") as good:
        dead = ProxyEndpoint("dead", f"http://127.0.0.1:{refused_port()}")
        endpoints = [dead, ProxyEndpoint("failing", failing.url), ProxyEndpoint("good", good.url)]
        with HttpFetcher(allow_private_addresses=True, proxies=endpoints, retries=2, backoff_s=0.05) as fetcher:
            page = fetcher.fetch(site.url("/p/1"))
            assert page.status == 200 and page.proxy == "good"
            assert [a.get("proxy") for a in page.attempts] == ["dead", "failing", "good"]
            assert "proxy dead could not be reached" in page.attempts[0]["error"]
            # the proxy's own failure is retried at once through another; a 502 (maybe the site's) backs off
            assert page.attempts[1]["waited_s"] == 0.0 and page.attempts[1]["status"] == 502
            assert page.attempts[2]["waited_s"] > 0
            for i in range(2, 6):
                assert fetcher.fetch(site.url(f"/p/{i}")).proxy == "good"
            health = {h["proxy"]: h for h in fetcher.proxy_health()}
        # two 502s in a row at most (the first page's, maybe the next one's): then it rests
        assert 1 <= len(failing.carried(502)) == len(failing.carried()) <= 2
        assert health["failing"]["quarantined"]
        assert health["dead"]["quarantined"] and health["dead"]["failures"] == 1
        assert not health["good"]["quarantined"] and health["good"]["requests"] == 5
        assert SECRET not in str(health)
        assert [c.url for c in good.carried()] == [site.url(f"/p/{i}") for i in range(1, 6)]


def test_credentials_come_from_the_environment_and_never_show(site: SessionSite) -> None:
    settings = FetchSettings.model_validate({
        "adapter": "http", "allow_private_addresses": True, "retries": 1, "robots": "ignore",
        "proxies": [{"url": "http://127.0.0.1:1", "name": "locked", "username_env": "PX_USER",
                     "password_env": "PX_PASS"}]})
    with ForwardProxy("locked", credentials=("scraper", SECRET)) as locked:
        settings = settings.model_copy(update={"proxies": [settings.proxies[0].model_copy(update={"url": locked.url})]})
        unset = fetcher_for(settings, ".", environ={})
        with pytest.raises(FetchError) as refused:
            unset.fetch(site.url("/p/1"))
        assert "${PX_USER} for proxy locked" in str(refused.value) and refused.value.kind == "invalid_config"

        wrong = fetcher_for(settings, ".", environ={"PX_USER": "scraper", "PX_PASS": "wrong-" + SECRET})
        with pytest.raises(FetchError) as denied:
            wrong.fetch(site.url("/p/1"))
        assert "proxy locked answered 407" in str(denied.value)
        assert SECRET not in str(denied.value) and SECRET not in repr(denied.value.attempts)
        assert [c.status for c in locked.carried()] == [407, 407]

        right = fetcher_for(settings, ".", environ={"PX_USER": "scraper", "PX_PASS": SECRET})
        page = right.fetch(site.url("/p/2"))
        assert page.proxy == "locked" and locked.carried()[-1].authorized
        assert SECRET not in repr(right) and SECRET not in str(page.attempts) and SECRET not in str(page.headers)


def test_proxy_urls_with_credentials_are_refused_without_repeating_them(tmp_path: Path) -> None:
    from scrape_contracts.contract.loader import load_contract_file

    contract = tmp_path / "shop.yaml"
    contract.write_text(PRODUCT_CONTRACT.format(name="shop", targets="  - url: https://shop.example/p/1\n    key: p1",
                                                extra="").replace(
        "  retries: 0\n", f"  retries: 0\n  proxies:\n    - url: http://me:{SECRET}@proxy:3128\n"))
    loaded, errors = load_contract_file(contract)
    assert loaded is None and len(errors) == 1
    assert "username_env and password_env" in str(errors[0]) and SECRET not in str(errors[0])


def test_the_async_fetcher_rotates_quarantines_and_rechecks_with_the_run_clock(site: SessionSite) -> None:
    clock = Clock()
    with ForwardProxy("good") as good, ForwardProxy("flaky", failing=True) as flaky, \
            ForwardProxy("slow", delay_s=1.5) as slow:
        endpoints = [ProxyEndpoint(p.name, p.url) for p in (flaky, good, slow)]

        async def sweep(fetcher: AsyncHttpFetcher, paths: list[str]) -> list[str | None]:
            pages = await asyncio.gather(*(fetcher.fetch(site.url(p)) for p in paths))
            return [p.proxy for p in pages]

        async def main() -> None:
            async with AsyncHttpFetcher(allow_private_addresses=True, proxies=endpoints, retries=2,
                                        proxy_recheck_s=30, clock=clock, backoff_s=0.0) as fetcher:
                # first wave: one each, in the contract's order (flaky's 502 retried through another)
                await sweep(fetcher, ["/a/1", "/a/2", "/a/3"])
                assert [c.url for c in slow.carried()] == [site.url("/a/3")]
                before = {p.name: len(p.carried()) for p in (good, slow)}
                await sweep(fetcher, [f"/b/{i}" for i in range(12)])
                # flaky answered 502 twice (and to whatever was sent its way meanwhile): quarantined
                assert len(flaky.carried()) >= 2 and {c.status for c in flaky.carried()} == {502}
                assert fetcher.proxy_health()[0]["quarantined"]
                # the slow proxy's score fell with its latency (1.5 s more than the good one's, by construction):
                # in the second wave the good one carried more. How much more depends on the good one's own
                # latency, which the machine's load sets (8 against 4 with three suites on two cores)
                wave = {p.name: len(p.carried()) - before[p.name] for p in (good, slow)}
                assert wave["good"] > wave["slow"], wave
                resting = len(flaky.carried())
                await sweep(fetcher, [f"/c/{i}" for i in range(6)])
                assert len(flaky.carried()) == resting  # resting (the run's clock stands still): nothing its way
                flaky.failing = False
                clock.now += 30  # its rest is over: the next request re-checks it, and it answers now
                await fetcher.fetch(site.url("/c/9"))
                assert flaky.carried()[-1].status == 200 and not fetcher.proxy_health()[0]["quarantined"]
                await sweep(fetcher, [f"/d/{i}" for i in range(6)])
                assert len(flaky.carried(200)) >= 2  # back in rotation
                health = fetcher.proxy_health()
                assert health[0]["rechecks"] == 1 and health[0]["quarantines"] == 1

        asyncio.run(main())


def test_a_site_hosts_cookies_come_back_whichever_proxy_carries_the_request(site: SessionSite) -> None:
    with ForwardProxy("a") as a, ForwardProxy("b") as b:
        endpoints = [ProxyEndpoint("a", a.url), ProxyEndpoint("b", b.url)]
        sessions = Sessions(cookies={"consent": "necessary"})
        with HttpFetcher(allow_private_addresses=True, proxies=endpoints, sessions=sessions) as fetcher:
            for i in range(4):
                fetcher.fetch(site.url(f"/p/{i}"))
        assert {c.proxy for c in a.carried() + b.carried()} == {"a", "b"}  # not sticky: they took turns
        first, *later = site.visits
        assert first.cookie == "consent=necessary" and first.set_cookie.startswith("sid=s1")
        assert all(v.cookie == "consent=necessary; sid=s1" and not v.set_cookie for v in later)

    with HttpFetcher(allow_private_addresses=True, sessions=Sessions(keep=False)) as fetcher:
        fetcher.fetch(site.url("/q/1"))
        fetcher.fetch(site.url("/q/2"))
    assert [v.cookie for v in site.visits[-2:]] == ["", ""]  # sessions off: nothing kept


def test_the_docs_example_is_a_valid_fetch_block() -> None:
    import re

    import yaml

    text = (Path(__file__).parents[2] / "docs" / "proxies.md").read_text()
    block, *others = re.findall(r"^```yaml\n(.*?)^```", text, re.S | re.M)
    fetch = FetchSettings.model_validate(yaml.safe_load(block)["fetch"])
    for other in others:  # the page's other examples are valid fetch blocks too
        FetchSettings.model_validate(yaml.safe_load(other)["fetch"])
    assert [p.label for p in fetch.proxies] == ["proxy-a", "http://proxy-b.internal:3128"]
    assert not fetch.sticky and fetch.host_cookies == {"https://shop.example": {"region": "eu"}}
    assert FetchSettings(proxies=fetch.proxies).sticky  # sessions on: sticky unless told otherwise


def test_a_site_host_is_the_same_with_or_without_its_default_port() -> None:
    from scrape_contracts.adapters.fetch.robots import host_key

    assert host_key("https://Shop.example:443/p/1") == host_key("https://shop.example/") == "https://shop.example"
    assert host_key("http://user:pw@shop.example:80/x") == "http://shop.example"
    assert host_key("http://[::1]:80/") == "http://[::1]"
    # another port, or the other scheme's default, is another site host
    assert host_key("https://shop.example:8443/") == "https://shop.example:8443"
    assert host_key("https://shop.example:80/") == "https://shop.example:80"
    assert host_key("http://shop.example:8080/") == "http://shop.example:8080"
    # so a host_cookies key that spells out the port still reaches the host
    sessions = Sessions(host_cookies={"https://shop.example:443": {"region": "eu"}})
    request = httpx.Request("GET", "https://shop.example/p/1")
    sessions.prepare(request)
    assert request.headers["cookie"] == "region=eu"
