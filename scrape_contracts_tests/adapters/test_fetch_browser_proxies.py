"""The browser adapter through the contract's forward proxies, in the real system Chromium: a page and what it
loads leave through one proxy of the pool, with its credentials; a proxy that cannot be reached fails the
render as the proxy's fault (named, retried elsewhere) and is quarantined. Asserted from the proxy's and the
site's logs."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest

from scrape_contracts.adapters.fetch import FetchError
from scrape_contracts.adapters.fetch.browser import BrowserFetcher
from scrape_contracts.adapters.fetch.proxy_book import ProxyBook
from scrape_contracts.adapters.proxies import ProxyEndpoint
from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.contract.fetch import BrowserSettings
from scrape_contracts_tests.browser_site import require_chromium
from scrape_contracts_tests.fixture_site import FixtureSite
from scrape_contracts_tests.proxy_site import ForwardProxy, refused_port

pytestmark = [pytest.mark.timeout(120), pytest.mark.xdist_group("browser_fetch")]

PASSWORD = "s3cret-proxy-pass"
PAGE = '<html><body><h1 id="t">Dune</h1><img src="/cover.png"></body></html>'


def test_a_render_goes_through_one_proxy_with_its_credentials_and_a_dead_one_is_its_own_fault() -> None:
    require_chromium()
    with FixtureSite() as shop, ForwardProxy("good", credentials=("scraper", PASSWORD)) as good:
        shop.set_page("/book", PAGE)
        shop.set_page("/cover.png", b"\x89PNG\r\n", headers={"Content-Type": "image/png"})
        down = ProxyEndpoint("down", f"http://127.0.0.1:{refused_port()}")
        fetcher = BrowserFetcher(browser=BrowserSettings(), timeout_s=5, deadline_s=30, max_bytes=200_000,
                                 allowed_hosts=[urlsplit(shop.base_url).netloc],
                                 proxies=[down, ProxyEndpoint("good", good.url, "scraper", PASSWORD)])
        try:
            with pytest.raises(FetchError) as failed:
                fetcher.fetch(shop.url("/book"))  # the pool's first: the contract's order
            assert shop.requests == []  # nothing went around the proxies
            page = fetcher.fetch(shop.url("/book"))  # the dead one is quarantined: the other carries it
            health = {h["proxy"]: h for h in fetcher.fetcher.proxy_health()}
        finally:
            fetcher.close()

    assert "proxy down could not be reached" in str(failed.value) and failed.value.transient
    assert PASSWORD not in str(failed.value)
    assert "Dune" in page.html and page.proxy == "good"
    carried = good.carried()
    assert {shop.url("/book"), shop.url("/cover.png")} <= {c.url for c in carried}  # the page and its image
    assert all(c.authorized for c in carried)  # each with the proxy's credentials
    assert len(shop.requests) == len(carried)  # every request the site saw came through the proxy
    assert health["down"]["quarantined"] and not health["good"]["quarantined"]
    assert PASSWORD not in repr(health)


def test_a_proxy_the_browser_quarantined_rests_out_its_quarantine_in_the_next_run(tmp_path: Path) -> None:
    require_chromium()
    book = ProxyBook(f"sqlite:///{tmp_path / 'store.db'}", "shop", "run-1")
    with FixtureSite() as shop, ForwardProxy("good") as good:
        shop.set_page("/book", PAGE)
        shop.set_page("/cover.png", b"\x89PNG\r\n", headers={"Content-Type": "image/png"})
        endpoints = [ProxyEndpoint("down", f"http://127.0.0.1:{refused_port()}"), ProxyEndpoint("good", good.url)]

        def run(book: ProxyBook) -> BrowserFetcher:
            return BrowserFetcher(browser=BrowserSettings(), timeout_s=5, deadline_s=30, max_bytes=200_000,
                                  allowed_hosts=[urlsplit(shop.base_url).netloc], proxies=endpoints,
                                  proxy_recheck_s=300, proxy_book=book)

        first = run(book)
        try:
            with pytest.raises(FetchError):
                first.fetch(shop.url("/book"))  # the contract's first proxy is down: quarantined
        finally:
            first.close()
        # a fresh fetcher of the next run, its pool read from the store: the quarantine lasts, so its first
        # render goes through the good proxy (without the store it would try the contract's first again)
        second = run(ProxyBook(book.db_url, "shop", "run-2"))
        try:
            page = second.fetch(shop.url("/book"))
        finally:
            second.close()

    assert page.proxy == "good" and "Dune" in page.html
    stored = {row.proxy: row for row in ProjectStore(book.db_url).proxy_health("shop")}
    assert stored["down"].quarantined and stored["down"].run_id == "run-2"
    assert not stored["good"].quarantined and stored["good"].requests >= 1


def test_a_tunnel_a_page_opens_goes_through_the_upstream_proxy_as_a_connect_with_its_credentials() -> None:
    # Chromium opens a WebSocket through its proxy as a CONNECT tunnel, as it does HTTPS: the guard proxy
    # checks the tunnel's destination, then opens it through the contract's proxy with a CONNECT of its own
    require_chromium()
    with FixtureSite() as shop, ForwardProxy("good", credentials=("scraper", PASSWORD)) as good:
        netloc = urlsplit(shop.base_url).netloc
        shop.set_page("/live", f'<html><body><h1 id="t">Dune</h1><script>'
                      f'const ws = new WebSocket("ws://{netloc}/socket");'
                      'ws.onopen = ws.onerror = () => document.body.insertAdjacentHTML("beforeend", '
                      '"<p id=\\"tried\\">tried</p>");</script></body></html>')
        fetcher = BrowserFetcher(browser=BrowserSettings(wait_for="#tried", timeout_s=30), timeout_s=30, deadline_s=90,
                                 max_bytes=200_000, allowed_hosts=[netloc],
                                 proxies=[ProxyEndpoint("good", good.url, "scraper", PASSWORD)])
        try:
            page = fetcher.fetch(shop.url("/live"))
        finally:
            fetcher.close()

    assert "tried" in page.html and page.proxy == "good"
    tunnels = [c for c in good.carried() if c.method == "CONNECT"]
    assert [(c.url, c.status, c.authorized) for c in tunnels] == [(netloc, 200, True)]
    # the WebSocket's handshake came to the site through that tunnel (the site answers it 404: not a socket)
    assert "/socket" in [r.path for r in shop.requests]
    assert len(shop.requests) == len(good.carried())  # the page in absolute form, the socket in the tunnel
