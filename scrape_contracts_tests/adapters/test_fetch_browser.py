"""The browser adapter against the real local HTTP server, in the real system Chromium.

One site and one browser per module (a browser costs about a second to start); each fetch renders in a
fresh browser context of that browser.
"""

from __future__ import annotations

import asyncio
import os
import signal
import json
import threading
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from scrape_contracts.adapters.fetch import FetchError, Page
from scrape_contracts.adapters.fetch.browser import AsyncBrowserFetcher, BrowserFetcher
from scrape_contracts.contract.fetch import BrowserSettings
from scrape_contracts_tests.browser_site import DEAL, SHOP, require_chromium, serve_deal
from scrape_contracts_tests.fixture_site import FixtureSite, Request, Response

# one pytest-xdist worker runs the module: one Chromium for its module-scoped fetcher
pytestmark = [pytest.mark.timeout(120), pytest.mark.xdist_group("browser_fetch")]

CONSENT = {"clicks": [{"selector": "#accept-cookies", "optional": True}], "wait_for": ".deal-price",
           "timeout_s": 5}


@pytest.fixture(scope="module")
def shop() -> Iterator[FixtureSite]:
    with FixtureSite() as site:
        yield site


@pytest.fixture(scope="module")
def internal() -> Iterator[FixtureSite]:
    """Another service on the loopback that no page may reach: it records every request it gets."""
    with FixtureSite() as site:
        site.set_page("/secret", "internal data")
        yield site


def _fetcher(shop: FixtureSite, **browser: object) -> BrowserFetcher:
    require_chromium()
    # only the shop's own host:port is exempt from the guard; every other loopback port is refused
    return BrowserFetcher(browser=BrowserSettings(**browser), timeout_s=5, deadline_s=30, max_bytes=200_000,
                          allowed_hosts=[urlsplit(shop.base_url).netloc])


@pytest.fixture(scope="module")
def browser(shop: FixtureSite) -> Iterator[BrowserFetcher]:
    fetcher = _fetcher(shop, **CONSENT)
    yield fetcher
    fetcher.close()


def test_script_inserted_content_is_rendered_after_the_consent_click(shop: FixtureSite,
                                                                      browser: BrowserFetcher) -> None:
    url = serve_deal(shop)
    page = browser.fetch(url)
    assert page.status == 200 and page.url == url and page.encoding == "utf-8"
    assert f'<h1 class="deal-title">{DEAL["title"]}</h1>' in page.html
    assert 'id="consent"' not in page.html  # the banner was clicked away
    assert page.attempts[0]["adapter"] == "browser" and page.attempts[0]["requests_refused"] == []
    assert len(shop.requests_to("/shop.example.com/deal.json")) >= 1
    # the HTML as served has none of it: the script put it there
    assert DEAL["title"] not in (SHOP / "deal.html").read_text()


def test_without_the_click_the_content_never_comes_and_wait_for_times_out(shop: FixtureSite) -> None:
    url = serve_deal(shop, "/timeout/deal")
    fetcher = _fetcher(shop, wait_for=".deal-price", timeout_s=1)
    try:
        with pytest.raises(FetchError) as caught:
            fetcher.fetch(url)
    finally:
        fetcher.close()
    error = caught.value
    assert error.kind == "browser_wait" and error.transient
    assert "wait_for '.deal-price' matched nothing within 1s" in str(error)


def test_a_required_click_on_a_missing_element_says_which_step(shop: FixtureSite) -> None:
    shop.set_page("/plain", "<html><body><p>no banner here</p></body></html>")
    fetcher = _fetcher(shop, clicks=[{"selector": "#accept-cookies"}], timeout_s=1)
    try:
        with pytest.raises(FetchError) as caught:
            fetcher.fetch(shop.url("/plain"))
    finally:
        fetcher.close()
    assert caught.value.kind == "browser_step" and "click step 1" in str(caught.value)
    assert "optional: true" in str(caught.value)


def test_every_request_of_the_page_goes_through_the_address_guard(shop: FixtureSite, internal: FixtureSite,
                                                                  browser: BrowserFetcher) -> None:
    secret = internal.url("/secret")
    shop.set_page("/hop", "", status=302, headers={"Location": secret})
    shop.set_page("/hostile", f"""<html><body><div id="out"></div><script>
      fetch("http://169.254.169.254/latest/meta-data/").catch(() => 0);
      fetch("{secret}").catch(() => 0);
      fetch("/hop").catch(() => 0);
      var img = new Image(); img.src = "http://10.1.2.3/pixel.gif";
      try {{ new WebSocket("ws://{urlsplit(internal.base_url).netloc}/socket"); }} catch (e) {{}}
      setTimeout(() => {{
        document.getElementById("out").innerHTML = '<p class="deal-price">done</p>';
      }}, 300);
    </script></body></html>""")
    page = browser.fetch(shop.url("/hostile"))
    refused = {r["url"]: r["reason"] for r in page.attempts[0]["requests_refused"]}
    assert "a cloud metadata address" in refused["http://169.254.169.254/latest/meta-data/"]
    # the redirect hop to the internal port is refused like the direct request (two refusals, one URL)
    assert "a loopback address" in refused[secret]
    assert "a private address" in refused["http://10.1.2.3/pixel.gif"]
    # a WebSocket is a tunnel through the proxy: checked the same way
    assert "a loopback address" in refused[f"CONNECT {urlsplit(internal.base_url).netloc}"]
    assert internal.requests == []  # nothing reached the internal service
    assert len(shop.requests_to("/hop")) == 1


def test_a_page_that_redirects_to_a_refused_address_is_not_fetched(shop: FixtureSite, internal: FixtureSite,
                                                                   browser: BrowserFetcher) -> None:
    shop.set_page("/go", "", status=302, headers={"Location": internal.url("/secret")})
    with pytest.raises(FetchError) as caught:
        browser.fetch(shop.url("/go"))
    assert caught.value.kind == "blocked_address" and not caught.value.transient
    assert f"redirected to {internal.url('/secret')}" in str(caught.value)
    assert "allow_private_addresses: true" in str(caught.value)
    assert internal.requests == []


def test_load_more_is_clicked_up_to_its_bound(shop: FixtureSite) -> None:
    shop.set_page("/more", """<html><body><ul id="items"><li>item 1</li></ul>
      <button id="more">Load more</button>
      <script>
        var n = 1;
        document.getElementById("more").onclick = function () {
          n += 1; var li = document.createElement("li"); li.textContent = "item " + n;
          document.getElementById("items").appendChild(li);
          if (n == 4) this.remove();   // three more, then the list is complete
        };
      </script></body></html>""")
    for times, expected in ((2, 3), (10, 4)):
        fetcher = _fetcher(shop, clicks=[{"selector": "#more", "times": times}], timeout_s=2)
        try:
            html = fetcher.fetch(shop.url("/more")).html
        finally:
            fetcher.close()
        assert html.count("<li>") == expected, (times, html)


def test_a_rendered_page_over_max_bytes_is_refused(shop: FixtureSite, browser: BrowserFetcher) -> None:
    shop.set_page("/big", """<html><body><div id="x"></div><p class="deal-price">1</p><script>
      document.getElementById("x").textContent = "a".repeat(300000);
    </script></body></html>""")
    with pytest.raises(FetchError) as caught:
        browser.fetch(shop.url("/big"))
    assert caught.value.kind == "too_large" and "max_bytes=200000" in str(caught.value)
    assert "the rendered page is" in str(caught.value)


def test_what_the_page_downloads_is_bounded_too(shop: FixtureSite, browser: BrowserFetcher) -> None:
    # 20 × max_bytes (200,000) for the page and everything it loads: a 5 MB script is cut off
    shop.set_page("/huge.js", b"//" + b"x" * 5_000_000, headers={"Content-Type": "text/javascript"})
    shop.set_page("/heavy", '<html><body><p class="deal-price">1</p><script src="/huge.js"></script></body>')
    with pytest.raises(FetchError) as caught:
        browser.fetch(shop.url("/heavy"))
    assert caught.value.kind == "too_large" and "max_bytes=4000000" in str(caught.value)
    assert "what the page downloaded" in str(caught.value)


def test_redirect_chains_are_bounded_by_max_redirects(shop: FixtureSite) -> None:
    for hop in range(3):
        shop.set_page(f"/chain/{hop}", "", status=302, headers={"Location": shop.url(f"/chain/{hop + 1}")})
    shop.set_page("/chain/3", "<html><body>end</body></html>")
    require_chromium()
    for limit, fails in ((2, True), (3, False)):
        fetcher = BrowserFetcher(browser=BrowserSettings(timeout_s=5), max_redirects=limit,
                                 allowed_hosts=[urlsplit(shop.base_url).netloc])
        try:
            if fails:
                with pytest.raises(FetchError) as caught:
                    fetcher.fetch(shop.url("/chain/0"))
                assert caught.value.kind == "too_many_redirects" and "max_redirects=2" in str(caught.value)
            else:
                assert fetcher.fetch(shop.url("/chain/0")).url == shop.url("/chain/3")
        finally:
            fetcher.close()


def test_a_page_that_never_answers_times_out(shop: FixtureSite, browser: BrowserFetcher) -> None:
    shop.set_handler("/stuck", lambda _request: Response(-1))
    fetcher = _fetcher(shop, timeout_s=1)
    try:
        with pytest.raises(FetchError) as caught:
            fetcher.fetch(shop.url("/stuck"))
    finally:
        fetcher.close()
    assert caught.value.kind == "timeout" and "did not load within 1s" in str(caught.value)


def test_missing_chromium_is_one_line_that_says_how_to_install_it(shop: FixtureSite) -> None:
    for settings, environ in (({"executable": "/nonexistent/chromium"}, None),
                              ({}, {"PATH": "/nonexistent"})):
        fetcher = BrowserFetcher(browser=BrowserSettings(**settings), environ=environ)
        try:
            for _ in range(2):  # the same answer every time, without trying to start a browser again
                with pytest.raises(FetchError) as caught:
                    fetcher.fetch(shop.url("/plain"))
                message = str(caught.value)
                assert caught.value.kind == "browser_missing" and not caught.value.transient
                assert "\n" not in message and "apt-get install chromium" in message
                assert "SCRAPE_CONTRACTS_CHROMIUM" in message
        finally:
            fetcher.close()
        assert fetcher.fetcher.launches == 0


def test_one_browser_renders_at_most_max_pages_at_once(shop: FixtureSite) -> None:
    require_chromium()
    lock = threading.Condition()
    now = {"in_flight": 0, "most": 0}

    def slow_deal(_request: Request) -> Response:
        with lock:
            now["in_flight"] += 1
            now["most"] = max(now["most"], now["in_flight"])
            lock.notify_all()
            # the first request waits for a second one, so a busy machine cannot hide that two render at
            # once (a serial pool never sends it: the assertion below fails after the wait)
            lock.wait_for(lambda: now["most"] >= 2, timeout=10)
        time.sleep(0.4)
        with lock:
            now["in_flight"] -= 1
        return Response(200, json.dumps(DEAL).encode(), {"Content-Type": "application/json"})

    urls = []
    for i in range(5):
        urls.append(serve_deal(shop, f"/pool/{i}"))
        shop.set_handler(f"/pool/{i}.json", slow_deal)

    async def render_all() -> tuple[list[Page], int]:
        fetcher = AsyncBrowserFetcher(browser=BrowserSettings(**CONSENT), max_pages=2,
                                      allowed_hosts=[urlsplit(shop.base_url).netloc])
        async with fetcher:
            pages = await asyncio.gather(*(fetcher.fetch(url) for url in urls))
        return list(pages), fetcher.launches

    pages, launches = asyncio.run(render_all())
    assert all(DEAL["title"] in page.html for page in pages)
    assert launches == 1 and now["most"] == 2


def _processes() -> dict[int, tuple[int, str]]:
    """pid → (parent pid, command line) of every process visible in /proc."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                found[int(entry)] = (parent, cmdline.read().replace(b"\0", b" ").decode(errors="replace"))
        except (OSError, ValueError, IndexError):
            continue  # ended meanwhile
    return found


def _descendants(processes: dict[int, tuple[int, str]], root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in processes.items():
        children.setdefault(parent, []).append(pid)
    found, stack = set(), [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.add(child)
            stack.append(child)
    return found


def test_a_crashed_renderer_is_a_named_transient_failure_and_the_browser_renders_on(shop: FixtureSite) -> None:
    # a renderer killed while the page renders, as the kernel kills one whose page's script ate the memory
    # (a real memory-eating page takes gigabytes and tens of seconds to get there on this machine)
    shop.set_page("/hog", "<html><body><p>loading</p><script>fetch('/loaded')</script></body></html>")
    shop.set_page("/loaded", "ok")
    before = _descendants(_processes(), os.getpid())
    fetcher = _fetcher(shop, wait_for=".never", timeout_s=60)
    outcome: list[BaseException] = []

    def render() -> None:
        try:
            fetcher.fetch(shop.url("/hog"))
        except BaseException as exc:  # noqa: BLE001 (handed to the test's thread)
            outcome.append(exc)

    thread = threading.Thread(target=render)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not shop.requests_to("/loaded"):
            assert time.monotonic() < deadline and thread.is_alive(), "the page never rendered"
            time.sleep(0.05)
        processes = _processes()
        renderers = [pid for pid in _descendants(processes, os.getpid()) - before
                     if "--type=renderer" in processes[pid][1]]
        assert renderers
        for pid in renderers:  # this test's own browser's renderers, by their ids
            os.kill(pid, signal.SIGKILL)
        thread.join(timeout=60)
        [error] = outcome
        assert isinstance(error, FetchError), repr(error)
        assert (error.kind, error.transient) == ("browser_crashed", True)
        assert str(error).startswith(f"GET {shop.url('/hog')} failed: the browser's renderer crashed")
        # the browser itself lives on: the next page renders
        shop.set_page("/fine", '<html><body><p class="never">3</p></body></html>')
        assert '<p class="never">3</p>' in fetcher.fetch(shop.url("/fine")).html
    finally:
        thread.join(timeout=60)
        fetcher.close()

