"""The HTTP fetchers against a real 127.0.0.1 server (FixtureSite): no mocked HTTP.

Every test that takes ``make_fetcher``, ``open_fetcher`` or ``for_contract`` runs twice: once with the
sync ``HttpFetcher`` and once with ``AsyncHttpFetcher`` driven on its own event loop, so both paths are
held to the same guarantees. Waits go through an injected sleep (``FakeTime``) wherever the test is about
how long the fetcher waits rather than about a real network timeout.

Only 127.0.0.1 is ever contacted; other hosts appear only behind an injected resolver, and the address
guard refuses them before any connection is made.
"""

from __future__ import annotations

import asyncio
import gzip
import hashlib
import pickle
import socket
import threading
import time
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from email.utils import formatdate
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from scrape_contracts.adapters.fetch import (
    AsyncHttpFetcher,
    FetchError,
    HttpFetcher,
    Page,
    async_fetcher_for,
    fetcher_for,
)
from scrape_contracts.adapters.netguard import ResolutionFailed
from scrape_contracts.contract.fetch import FetchSettings
from scrape_contracts_tests.fixture_site import FixtureSite, Request, Response

pytestmark = pytest.mark.timeout(60)

SECRETS = {
    "Authorization": "Bearer s3cr3t-token-value-123",
    "X-Api-Key": "apikey-0123456789abcdef",
    "Cookie": "session=cookie-secret-abcdef42",
}


class FakeTime:
    """Injected sleep and clocks: sleeping advances the clocks instead of waiting."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0  # doubles as the wall clock, so Retry-After dates are exact
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds

    async def asleep(self, seconds: float) -> None:
        self.sleep(seconds)


class Blocking:
    """An async fetcher driven from a test on its own event loop, so one test body checks both paths."""

    def __init__(self, fetcher: Any) -> None:
        self.fetcher = fetcher
        self._loop = asyncio.new_event_loop()

    def __repr__(self) -> str:
        return repr(self.fetcher)

    def fetch(self, url: str, **validators: str | None) -> Page:
        return self._loop.run_until_complete(self.fetcher.fetch(url, **validators))

    def close(self) -> None:
        if not self._loop.is_closed():
            self._loop.run_until_complete(self.fetcher.aclose())
            self._loop.close()

    def __enter__(self) -> Blocking:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def unwrap(fetcher: Any) -> Any:
    return fetcher.fetcher if isinstance(fetcher, Blocking) else fetcher


def _serve() -> Iterator[FixtureSite]:
    server = FixtureSite()
    yield server
    # FixtureSite.close() waits out serve_forever's poll; doing that in the background keeps the
    # file's runtime down without leaving the server running.
    threading.Thread(target=server.close, daemon=True).start()


@pytest.fixture
def site() -> Iterator[FixtureSite]:
    yield from _serve()


@pytest.fixture
def other_site() -> Iterator[FixtureSite]:
    yield from _serve()


def host_port(site: FixtureSite) -> str:
    return urlsplit(site.base_url).netloc


@pytest.fixture(params=["sync", "async"])
def mode(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def fake_time() -> FakeTime:
    return FakeTime()


@pytest.fixture
def open_fetcher(mode: str) -> Iterator[Callable[..., Any]]:
    """``open_fetcher(**options)``: an HttpFetcher, or a Blocking AsyncHttpFetcher, closed after the test;
    ``fake_time=`` injects a FakeTime's sleep and clocks."""
    created: list[Any] = []

    def open_(*, fake_time: FakeTime | None = None, **options: Any) -> Any:
        if fake_time is not None:
            sleep = fake_time.sleep if mode == "sync" else fake_time.asleep
            options.update(sleep=sleep, clock=fake_time.clock, wall_clock=fake_time.clock)
        fetcher = HttpFetcher(**options) if mode == "sync" else Blocking(AsyncHttpFetcher(**options))
        created.append(fetcher)
        return fetcher

    yield open_
    for fetcher in created:
        fetcher.close()


@pytest.fixture
def make_fetcher(site: FixtureSite, open_fetcher: Callable[..., Any]) -> Callable[..., Any]:
    """A fetcher whose guard lets through only ``site`` (first hops in tests)."""

    def make(**options: Any) -> Any:
        options.setdefault("allowed_hosts", (host_port(site),))
        options.setdefault("backoff_s", 0.01)
        options.setdefault("timeout_s", 5.0)
        return open_fetcher(**options)

    return make


@pytest.fixture
def for_contract(mode: str) -> Callable[..., Any]:
    """``fetcher_for``, or ``async_fetcher_for`` behind a Blocking face."""

    def build(settings: FetchSettings, base_dir: Path, **options: Any) -> Any:
        if mode == "sync":
            return fetcher_for(settings, base_dir, **options)
        return Blocking(async_fetcher_for(settings, base_dir, **options))

    return build


def sequence(*responses: Response) -> Callable[[Request], Response]:
    """Answers with ``responses`` in order, repeating the last one."""
    answers = iter(responses)
    last: list[Response] = []
    lock = threading.Lock()

    def handler(_request: Request) -> Response:
        with lock:
            last[:] = [next(answers, last[0] if last else responses[-1])]
            return last[0]

    return handler


def resolver_from(table: dict[str, list[str]]) -> Callable[[str], list[str]]:
    def resolve(host: str) -> list[str]:
        if host not in table:
            raise ResolutionFailed(f"test resolver has no entry for {host!r}")
        return table[host]

    return resolve


# --- plain fetches -------------------------------------------------------------------------------


def test_fetch_returns_page_with_hash_headers_and_attempts(site: FixtureSite, make_fetcher) -> None:
    body = "<html><body><h1>Prices</h1><p>naïve 12 €</p></body></html>"
    stamp = "Wed, 01 Jan 2025 00:00:00 GMT"
    site.set_page("/p/1?x=1", body, headers={"ETag": '"abc"', "Last-Modified": stamp})

    page = make_fetcher().fetch(site.url("/p/1?x=1"))

    assert isinstance(page, Page)
    assert (page.status, page.url, page.requested_url) == (200, site.url("/p/1?x=1"), site.url("/p/1?x=1"))
    assert page.html == body
    assert page.sha256 == hashlib.sha256(body.encode("utf-8")).hexdigest()
    assert page.encoding == "utf-8"
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    assert all(name == name.lower() for name in page.headers)
    assert (page.etag, page.last_modified) == ('"abc"', stamp)
    assert not page.not_modified
    assert page.attempts == ({"attempt": 1, "status": 200, "error": None, "waited_s": 0.0},)
    assert page.elapsed_s > 0
    assert body not in repr(page)


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_compressed_body_is_inflated_and_hashed_as_served_html(
    site: FixtureSite, make_fetcher, coding: str
) -> None:
    html = "<html><body>" + "<p>row</p>" * 1000 + "</body></html>"
    compress = gzip.compress if coding == "gzip" else zlib.compress
    site.set_page("/gz", compress(html.encode()), headers={"Content-Encoding": coding})

    page = make_fetcher().fetch(site.url("/gz"))

    assert page.html == html
    assert page.sha256 == hashlib.sha256(html.encode()).hexdigest()


def test_one_sync_fetcher_serves_many_threads(site: FixtureSite) -> None:
    # (tasks sharing one async fetcher: test_fetch_async.py)
    for n in range(10):
        site.set_page(f"/t/{n}", f"<p>page {n}</p>")

    with HttpFetcher(allowed_hosts=(host_port(site),)) as fetcher, ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda n: (n, fetcher.fetch(site.url(f"/t/{n % 10}")).html), range(40)))

    assert all(html == f"<p>page {n % 10}</p>" for n, html in results)
    assert len(site.requests) == 40


# --- retries -------------------------------------------------------------------------------------


def test_429_with_retry_after_twice_then_success(
    site: FixtureSite, make_fetcher, fake_time: FakeTime
) -> None:
    limited = Response(429, b"slow down", {"Retry-After": "1"})
    site.set_handler("/rl", sequence(limited, limited, Response(200, b"<p>ok</p>")))

    page = make_fetcher(backoff_s=0.01, fake_time=fake_time).fetch(site.url("/rl"))

    assert page.html == "<p>ok</p>"
    assert fake_time.slept == [1.0, 1.0]  # Retry-After, not the 0.01 s backoff
    assert [a["status"] for a in page.attempts] == [429, 429, 200]
    assert [a["attempt"] for a in page.attempts] == [1, 2, 3]
    assert [a["waited_s"] for a in page.attempts] == [0.0, 1.0, 1.0]
    assert page.attempts[0]["error"] == "HTTP 429"
    assert page.elapsed_s >= 2.0


def test_retry_after_as_http_date_is_honoured(site: FixtureSite, make_fetcher, fake_time: FakeTime) -> None:
    when = formatdate(fake_time.now + 7, usegmt=True)
    site.set_handler("/date", sequence(Response(503, b"", {"Retry-After": when}), Response(200, b"ok")))

    page = make_fetcher(fake_time=fake_time).fetch(site.url("/date"))

    assert [a["status"] for a in page.attempts] == [503, 200]
    assert fake_time.slept == [7.0]
    assert page.attempts[1]["waited_s"] == 7.0


def test_default_sleep_really_waits(site: FixtureSite, make_fetcher) -> None:
    site.set_handler("/rl", sequence(Response(503, b"", {"Retry-After": "0.2"}), Response(200, b"ok")))

    page = make_fetcher().fetch(site.url("/rl"))

    assert page.attempts[1]["waited_s"] == 0.2
    assert page.elapsed_s >= 0.2


def test_503_then_success_uses_backoff(site: FixtureSite, make_fetcher, fake_time: FakeTime) -> None:
    site.set_handler("/flaky", sequence(Response(503, b"busy"), Response(200, b"<p>ok</p>")))

    page = make_fetcher(backoff_s=0.25, fake_time=fake_time).fetch(site.url("/flaky"))

    assert page.status == 200
    assert fake_time.slept == [0.25]
    assert [(a["status"], a["waited_s"]) for a in page.attempts] == [(503, 0.0), (200, 0.25)]


def test_persistent_500_fails_transient_after_all_retries(
    site: FixtureSite, make_fetcher, fake_time: FakeTime
) -> None:
    site.set_page("/down", "oops", status=500)

    with pytest.raises(FetchError) as caught:
        make_fetcher(retries=2, backoff_s=0.5, fake_time=fake_time).fetch(site.url("/down"))

    error = caught.value
    assert (error.kind, error.status, error.transient) == ("http_status", 500, True)
    assert fake_time.slept == [0.5, 1.0]  # exponential backoff
    assert [a["waited_s"] for a in error.attempts] == [0.0, 0.5, 1.0]
    assert len(site.requests_to("/down")) == 3
    assert site.url("/down") in str(error) and "after 3 attempts" in str(error)
    assert "\n" not in str(error)


def test_backoff_is_capped(site: FixtureSite, make_fetcher, fake_time: FakeTime) -> None:
    site.set_page("/down", "", status=502)

    with pytest.raises(FetchError):
        make_fetcher(retries=4, backoff_s=10, deadline_s=1000, fake_time=fake_time).fetch(site.url("/down"))

    assert fake_time.slept == [10, 20, 30, 30]


def test_404_fails_at_once_without_retry(site: FixtureSite, make_fetcher, fake_time: FakeTime) -> None:
    with pytest.raises(FetchError) as caught:
        make_fetcher(retries=5, fake_time=fake_time).fetch(site.url("/missing"))

    error = caught.value
    assert (error.kind, error.status, error.transient) == ("http_status", 404, False)
    assert len(error.attempts) == 1 and len(site.requests_to("/missing")) == 1
    assert fake_time.slept == []
    assert str(error).startswith(f"GET {site.url('/missing')} failed: HTTP 404")
    assert "check the URL in the contract" in str(error)


def test_retry_after_beyond_deadline_fails_without_waiting(
    site: FixtureSite, make_fetcher, fake_time: FakeTime
) -> None:
    site.set_page("/later", "", status=429, headers={"Retry-After": "120"})

    with pytest.raises(FetchError) as caught:
        make_fetcher(deadline_s=5, fake_time=fake_time).fetch(site.url("/later"))

    assert fake_time.slept == []
    error = caught.value
    assert (error.kind, error.status, error.transient) == ("http_status", 429, True)
    assert "Retry-After of 120s" in str(error) and "deadline of 5s" in str(error)
    assert len(site.requests_to("/later")) == 1


def test_retries_stop_where_the_next_wait_would_pass_the_deadline(
    site: FixtureSite, make_fetcher, fake_time: FakeTime
) -> None:
    site.set_page("/down", "", status=503)

    with pytest.raises(FetchError) as caught:
        make_fetcher(retries=10, backoff_s=1, deadline_s=5, fake_time=fake_time).fetch(site.url("/down"))

    # waits of 1 and 2 s fit in 5 s; the next one (4 s) would end at 7 s, so it gives up at once
    assert fake_time.slept == [1, 2]
    assert len(site.requests_to("/down")) == 3
    error = caught.value
    assert (error.kind, error.status, error.transient) == ("http_status", 503, True)
    assert "the next retry would pass the fetch deadline of 5s" in str(error)


class OversleepingTime(FakeTime):
    """A sleep after which the clock has moved on further (a suspended machine, a saturated loop)."""

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds * 10


def test_deadline_spent_while_waiting_ends_the_fetch(site: FixtureSite, make_fetcher) -> None:
    site.set_handler("/rl", sequence(Response(429, b"", {"Retry-After": "1"}), Response(200, b"ok")))
    fake_time = OversleepingTime()

    with pytest.raises(FetchError) as caught:
        make_fetcher(deadline_s=5, fake_time=fake_time).fetch(site.url("/rl"))

    assert fake_time.slept == [1]
    assert caught.value.kind == "timeout"
    assert "the fetch deadline of 5s passed after 1 attempt" in str(caught.value)
    assert len(site.requests_to("/rl")) == 1


# --- timeouts ------------------------------------------------------------------------------------


def test_server_that_never_answers_times_out(site: FixtureSite, make_fetcher) -> None:
    site.set_handler("/hang", lambda _request: Response(-1))

    started = time.monotonic()
    with pytest.raises(FetchError) as caught:
        make_fetcher(timeout_s=0.5, retries=0).fetch(site.url("/hang"))

    assert time.monotonic() - started < 3
    error = caught.value
    assert (error.kind, error.transient, error.status) == ("timeout", True, None)
    assert error.attempts[0]["error"] == "no response within 0.5s"
    assert "timed out" in str(error) and "fetch.timeout_s" in str(error)


def test_deadline_caps_each_attempt_timeout(site: FixtureSite, make_fetcher) -> None:
    site.set_handler("/hang", lambda _request: Response(-1))

    with pytest.raises(FetchError) as caught:
        make_fetcher(timeout_s=10, retries=3, deadline_s=0.5).fetch(site.url("/hang"))

    error = caught.value
    assert error.kind == "timeout"
    # the first attempt waited only what was left of the deadline, and no retry followed
    assert error.attempts[0]["error"] == "no response within 0.5s" and len(error.attempts) == 1
    assert "fetch deadline of 0.5s passed" in str(error)


# --- size limit ----------------------------------------------------------------------------------


def test_20mb_page_is_refused_from_content_length(site: FixtureSite, make_fetcher) -> None:
    site.set_page("/huge", b"x" * 20_000_000)

    with pytest.raises(FetchError) as caught:
        make_fetcher().fetch(site.url("/huge"))

    error = caught.value
    assert (error.kind, error.transient, error.status) == ("too_large", False, 200)
    assert str(error) == (
        f"GET {site.url('/huge')} refused: response is larger than max_bytes=5000000 (Content-Length is "
        "20000000 bytes; raise fetch.max_bytes in the contract if the page is legitimately this big)"
    )


@pytest.mark.parametrize("coding", ["gzip", "deflate"])
def test_size_limit_applies_while_streaming(site: FixtureSite, make_fetcher, coding: str) -> None:
    # A 20 KB body inflating to 20 MB: Content-Length is honest and small, so only the streaming
    # check can catch it, and it must do so without ever holding the 20 MB.
    compress = gzip.compress if coding == "gzip" else zlib.compress
    bomb = compress(b"<html>" + b"a" * 20_000_000, 9)
    site.set_page("/bomb", bomb, headers={"Content-Encoding": coding})
    fetcher = make_fetcher(max_bytes=5_000_000)

    tracemalloc.start()
    try:
        with pytest.raises(FetchError) as caught:
            fetcher.fetch(site.url("/bomb"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert caught.value.kind == "too_large"
    assert "stopped reading after" in str(caught.value)
    assert peak < 15_000_000


# --- conditional requests ------------------------------------------------------------------------


def test_conditional_request_returns_not_modified(site: FixtureSite, make_fetcher) -> None:
    stamp = "Wed, 01 Jan 2025 00:00:00 GMT"

    def handler(request: Request) -> Response:
        headers = {"ETag": '"v1"', "Last-Modified": stamp}
        if request.headers.get("if-none-match") == '"v1"':
            return Response(304, b"", headers)
        return Response(200, b"<p>v1</p>", headers)

    site.set_handler("/c", handler)
    fetcher = make_fetcher()

    first = fetcher.fetch(site.url("/c"))
    second = fetcher.fetch(site.url("/c"), etag=first.etag, last_modified=first.last_modified)

    assert (first.status, first.not_modified) == (200, False)
    assert (second.status, second.not_modified, second.html, second.sha256) == (304, True, "", "")
    assert (second.etag, second.last_modified) == ('"v1"', stamp)
    sent = site.requests_to("/c")[1].headers
    assert (sent["if-none-match"], sent["if-modified-since"]) == ('"v1"', stamp)
    assert "if-none-match" not in site.requests_to("/c")[0].headers
    # a 304 leaves the connection usable: an unchanged sweep does not open one connection per target
    for _ in range(5):
        assert fetcher.fetch(site.url("/c"), etag=first.etag).not_modified
    assert len({r.client_port for r in site.requests_to("/c")}) == 1


# --- charsets ------------------------------------------------------------------------------------


def test_windows_1252_page_without_declared_charset(site: FixtureSite, make_fetcher) -> None:
    text = "<html><body><p>Café – 12,50 €</p><p>Crème brûlée – 7,00 €</p></body></html>"
    site.set_page("/menu", text.encode("cp1252"), headers={"Content-Type": "text/html"})

    page = make_fetcher().fetch(site.url("/menu"))

    assert page.html == text
    assert page.encoding == "cp1252"
    assert page.sha256 == hashlib.sha256(text.encode("cp1252")).hexdigest()


def test_declared_charset_is_used(site: FixtureSite, make_fetcher) -> None:
    text = "<p>Привет, мир</p>"
    site.set_page("/ru", text.encode("koi8-r"), headers={"Content-Type": "text/html; charset=KOI8-R"})

    page = make_fetcher().fetch(site.url("/ru"))

    assert (page.html, page.encoding) == (text, "koi8-r")


# --- redirects -----------------------------------------------------------------------------------


def test_redirects_are_followed(site: FixtureSite, make_fetcher) -> None:
    site.set_page("/old", "", status=301, headers={"Location": "/mid?x=1"})
    site.set_page("/mid?x=1", "", status=302, headers={"Location": site.url("/new")})
    site.set_page("/new", "<p>here</p>")

    page = make_fetcher().fetch(site.url("/old"))

    assert (page.url, page.requested_url, page.html) == (site.url("/new"), site.url("/old"), "<p>here</p>")
    assert [a["status"] for a in page.attempts] == [301, 302, 200]


def test_redirect_limit(site: FixtureSite, make_fetcher) -> None:
    for n in range(4):
        site.set_page(f"/r{n}", "", status=302, headers={"Location": f"/r{n + 1}"})
    site.set_page("/r4", "<p>end</p>")

    assert make_fetcher(max_redirects=4).fetch(site.url("/r0")).html == "<p>end</p>"
    with pytest.raises(FetchError) as caught:
        make_fetcher(max_redirects=3).fetch(site.url("/r0"))

    error = caught.value
    assert (error.kind, error.transient) == ("too_many_redirects", False)
    assert "max_redirects=3" in str(error) and "fetch.max_redirects" in str(error)
    assert len(error.attempts) == 4
    assert len(site.requests_to("/r4")) == 1  # only the successful fetch reached the end


def test_redirect_without_location_fails(site: FixtureSite, make_fetcher) -> None:
    site.set_page("/nowhere", "", status=302)

    with pytest.raises(FetchError) as caught:
        make_fetcher().fetch(site.url("/nowhere"))

    assert (caught.value.kind, caught.value.status) == ("http_status", 302)
    assert "redirect without a Location header" in str(caught.value)


def test_cross_origin_redirect_drops_caller_headers(
    site: FixtureSite, other_site: FixtureSite, make_fetcher
) -> None:
    site.set_page("/go", "", status=302, headers={"Location": other_site.url("/landing")})
    other_site.set_page("/landing", "<p>landed</p>")
    fetcher = make_fetcher(headers=SECRETS, allowed_hosts=(host_port(site), host_port(other_site)))

    assert fetcher.fetch(site.url("/go")).html == "<p>landed</p>"
    assert site.requests_to("/go")[0].headers["x-api-key"] == SECRETS["X-Api-Key"]
    landing = other_site.requests_to("/landing")[0].headers
    assert not {"authorization", "cookie", "x-api-key"} & set(landing)


# --- address guard -------------------------------------------------------------------------------


def test_guard_refuses_loopback_by_default(site: FixtureSite, open_fetcher) -> None:
    site.set_page("/p", "<p>hi</p>")
    with pytest.raises(FetchError) as caught:
        open_fetcher().fetch(site.url("/p"))

    error = caught.value
    assert (error.kind, error.transient) == ("blocked_address", False)
    assert "loopback" in str(error) and "fetch.allow_private_addresses: true" in str(error)
    assert site.requests == []


def test_allow_private_addresses_opts_in(site: FixtureSite, open_fetcher) -> None:
    site.set_page("/p", "<p>hi</p>")
    assert open_fetcher(allow_private_addresses=True).fetch(site.url("/p")).html == "<p>hi</p>"


def test_host_names_resolve_with_the_default_resolver(site: FixtureSite, open_fetcher) -> None:
    # "localhost" goes through real DNS resolution (on the executor, for the async fetcher)
    site.set_page("/p", "<p>hi</p>")
    url = site.url("/p").replace("127.0.0.1", "localhost")

    with pytest.raises(FetchError) as caught:
        open_fetcher().fetch(url)
    assert "'localhost' resolves to" in str(caught.value) and caught.value.kind == "blocked_address"

    assert open_fetcher(allow_private_addresses=True).fetch(url).html == "<p>hi</p>"


def test_redirect_to_another_loopback_port_is_refused(
    site: FixtureSite, other_site: FixtureSite, make_fetcher
) -> None:
    site.set_page("/go", "", status=302, headers={"Location": other_site.url("/admin")})
    other_site.set_page("/admin", "<p>internal</p>")

    with pytest.raises(FetchError) as caught:
        make_fetcher().fetch(site.url("/go"))

    assert caught.value.kind == "blocked_address"
    assert f"redirected to {other_site.url('/admin')}" in str(caught.value)
    assert [a["status"] for a in caught.value.attempts] == [302]
    assert other_site.requests == []


def test_redirect_to_host_resolving_to_private_address_is_refused(site: FixtureSite, make_fetcher) -> None:
    site.set_page("/go", "", status=302, headers={"Location": "http://intranet.test/secrets"})
    fetcher = make_fetcher(resolver=resolver_from({"intranet.test": ["10.0.0.7"]}))

    with pytest.raises(FetchError) as caught:
        fetcher.fetch(site.url("/go"))

    assert caught.value.kind == "blocked_address"
    assert "'intranet.test' resolves to 10.0.0.7, a private address" in str(caught.value)


def test_every_hop_of_a_chain_is_checked(site: FixtureSite, make_fetcher) -> None:
    # public.test → (allowed) → a second redirect to a private host: the second hop is refused
    site.set_page("/a", "", status=302, headers={"Location": site.url("/b")})
    site.set_page("/b", "", status=302, headers={"Location": "http://intranet.test/"})
    fetcher = make_fetcher(resolver=resolver_from({"intranet.test": ["192.168.0.3"]}))

    with pytest.raises(FetchError) as caught:
        fetcher.fetch(site.url("/a"))

    assert caught.value.kind == "blocked_address"
    assert [a["status"] for a in caught.value.attempts] == [302, 302]


def test_redirect_to_non_http_scheme_is_refused(site: FixtureSite, make_fetcher) -> None:
    site.set_page("/go", "", status=302, headers={"Location": "file:///etc/passwd"})
    with pytest.raises(FetchError) as caught:
        make_fetcher(allow_private_addresses=True).fetch(site.url("/go"))
    assert caught.value.kind == "blocked_address"
    assert "scheme 'file' is not allowed" in str(caught.value)


def test_host_with_any_private_address_is_refused_before_connecting(open_fetcher) -> None:
    # the resolver also offers a public address, but one loopback answer is enough to refuse
    resolver = resolver_from({"public-looking.test": ["93.184.216.34", "127.0.0.1"]})
    with pytest.raises(FetchError) as caught:
        open_fetcher(resolver=resolver).fetch("http://public-looking.test/page")
    assert caught.value.kind == "blocked_address"
    assert "resolves to 127.0.0.1, a loopback address" in str(caught.value)
    assert caught.value.attempts == ()  # refused before any HTTP attempt


@pytest.mark.parametrize("url", ["ftp://example.test/f", "not a url", "http:///no-host", "http://h:99999/"])
def test_invalid_urls_are_refused_without_network(open_fetcher, url: str) -> None:
    with pytest.raises(FetchError) as caught:
        open_fetcher().fetch(url)
    assert (caught.value.kind, caught.value.transient, caught.value.attempts) == ("invalid_url", False, ())
    assert "fix the URL in the contract" in str(caught.value)


def test_unresolvable_host_is_a_transient_connection_error(open_fetcher, fake_time: FakeTime) -> None:
    fetcher = open_fetcher(resolver=resolver_from({}), retries=1, backoff_s=0.5, fake_time=fake_time)
    with pytest.raises(FetchError) as caught:
        fetcher.fetch("https://nowhere.test/")
    assert (caught.value.kind, caught.value.transient, len(caught.value.attempts)) == ("connection", True, 2)
    assert "nowhere.test" in str(caught.value)
    assert fake_time.slept == [0.5]


def test_refused_connection_is_retried_then_transient(open_fetcher, fake_time: FakeTime) -> None:
    free = FixtureSite()
    url = free.url("/gone")
    free.close()  # nothing listens on that port any more

    with pytest.raises(FetchError) as caught:
        open_fetcher(allow_private_addresses=True, retries=2, fake_time=fake_time).fetch(url)

    error = caught.value
    assert (error.kind, error.transient, len(error.attempts)) == ("connection", True, 3)
    assert "connection failed: ConnectError" in str(error) and "usually temporary" in str(error)


# --- secrets -------------------------------------------------------------------------------------


def assert_no_secret(*texts: str) -> None:
    for text in texts:
        for secret in SECRETS.values():
            assert secret not in text
        assert "s3cr3t-token-value-123" not in text and "cookie-secret-abcdef42" not in text


def test_secret_headers_never_appear_in_errors(site: FixtureSite, make_fetcher) -> None:
    def echo(request: Request) -> Response:
        # a misbehaving server reflecting credentials back in its error answer
        credential = request.headers["authorization"]
        return Response(500, credential.encode(), {"X-Echo": credential})

    site.set_handler("/echo", echo)
    fetcher = make_fetcher(headers=SECRETS, retries=1)

    with pytest.raises(FetchError) as caught:
        fetcher.fetch(site.url("/echo"))

    assert site.requests_to("/echo")[0].headers["authorization"] == SECRETS["Authorization"]  # really sent
    error = caught.value
    assert_no_secret(str(error), repr(error), repr(error.attempts), repr(fetcher), error.url)
    assert "X-Api-Key" in repr(fetcher)  # names are fine, values are not


def test_secret_headers_never_appear_in_page(site: FixtureSite, make_fetcher) -> None:
    def echo(request: Request) -> Response:
        return Response(
            200,
            b"<p>ok</p>",
            {
                "X-Echo": request.headers["authorization"],
                "X-Key-Echo": f"key={request.headers['x-api-key']}",
                "Set-Cookie": "session=cookie-secret-abcdef42; HttpOnly",
            },
        )

    site.set_handler("/echo", echo)
    page = make_fetcher(headers=SECRETS).fetch(site.url("/echo"))

    assert "set-cookie" not in page.headers
    assert page.headers["x-echo"] == "***" and page.headers["x-key-echo"] == "key=***"
    assert_no_secret(repr(page), repr(page.headers), repr(page.attempts))


def test_cookies_a_site_sets_are_sent_back_to_it(site: FixtureSite, make_fetcher) -> None:
    site.set_handler("/login", lambda _r: Response(200, b"<p>in</p>", {"Set-Cookie": "session=abc123; Path=/"}))
    site.set_handler("/plain", lambda _r: Response(200, b"<p>plain</p>"))
    site.set_handler("/whoami", lambda r: Response(200, f"<p>{r.headers.get('cookie')}</p>".encode()))
    fetcher = make_fetcher()

    assert fetcher.fetch(site.url("/whoami")).html == "<p>None</p>"
    fetcher.fetch(site.url("/login"))
    fetcher.fetch(site.url("/plain"))  # sets none: the session stays
    assert fetcher.fetch(site.url("/whoami")).html == "<p>session=abc123</p>"


def test_secret_headers_never_appear_in_logs(
    site: FixtureSite, make_fetcher, caplog: pytest.LogCaptureFixture
) -> None:
    # httpx and httpcore log requests at DEBUG; neither logs header values
    site.set_handler("/echo", lambda request: Response(500, request.headers["authorization"].encode()))
    caplog.set_level("DEBUG")

    with pytest.raises(FetchError):
        make_fetcher(headers=SECRETS, retries=0).fetch(site.url("/echo"))

    assert caplog.records, "expected httpx/httpcore debug records"
    assert_no_secret(caplog.text)


def test_url_credentials_are_redacted(site: FixtureSite, make_fetcher) -> None:
    url = site.url("/private").replace("http://", "http://scraper:hunter2-password@")
    with pytest.raises(FetchError) as caught:
        make_fetcher().fetch(url)

    error = caught.value
    assert error.kind == "http_status"
    assert "hunter2-password" not in str(error) + repr(error) + error.url
    assert f"http://***@{host_port(site)}/private" in str(error)
    assert site.requests_to("/private")[0].headers["authorization"].startswith("Basic ")

    site.set_page("/private", "<p>members</p>")
    page = make_fetcher().fetch(url)
    assert page.url == page.requested_url == f"http://***@{host_port(site)}/private"


# --- wiring from the contract --------------------------------------------------------------------


def test_fetcher_for_builds_the_configured_adapter(tmp_path: Path, for_contract, mode: str) -> None:
    settings = FetchSettings(
        adapter="http", timeout_s=3, headers={"X-Api-Key": "k-123456789"}, max_bytes=1000, max_redirects=1,
        retries=4, allow_private_addresses=True,
    )
    with for_contract(settings, tmp_path) as fetcher:
        http = unwrap(fetcher)
        assert isinstance(http, HttpFetcher if mode == "sync" else AsyncHttpFetcher)
        policy = http.policy
        assert (policy.timeout_s, policy.max_bytes, policy.max_redirects, policy.retries) == (3, 1000, 1, 4)
        assert http.allow_private_addresses
        assert "k-123456789" not in repr(http)


def test_env_references_in_headers_are_expanded_at_fetch_time(
    site: FixtureSite, tmp_path: Path, for_contract
) -> None:
    token = "tok-" + "9f8e7d6c5b4a"
    site.set_handler(
        "/api", lambda request: Response(200, b"<p>ok</p>", {"X-Echo": request.headers["authorization"]})
    )
    settings = FetchSettings(
        headers={"Authorization": "Bearer ${SHOP_API_TOKEN}", "X-Static": "cost: $5 ${ not a reference"},
        allow_private_addresses=True,
    )
    # the contract model keeps the reference, not the value
    assert "${SHOP_API_TOKEN}" in settings.model_dump_json()

    with for_contract(settings, tmp_path, environ={"SHOP_API_TOKEN": token}) as http:
        page = http.fetch(site.url("/api"))
        assert token not in repr(http)
    sent = site.requests_to("/api")[0].headers
    assert sent["authorization"] == f"Bearer {token}"
    assert sent["x-static"] == "cost: $5 ${ not a reference"
    # an echoed secret is scrubbed like a literal header value would be
    assert page.headers["x-echo"] == "***"

    # the variable is read when the fetcher is made, so a rotated secret is used by the next fetch
    with for_contract(settings, tmp_path, environ={"SHOP_API_TOKEN": "rotated-0123456789"}) as http:
        http.fetch(site.url("/api"))
    assert site.requests_to("/api")[1].headers["authorization"] == "Bearer rotated-0123456789"


def test_expanded_short_secret_is_scrubbed_even_when_echoed_alone(
    site: FixtureSite, tmp_path: Path, for_contract
) -> None:
    # "k9Z2x" is below the 8-character token threshold: only knowing it is a secret gets it scrubbed
    site.set_handler("/short", lambda request: Response(
        200, b"<p>ok</p>", {"X-Echo": request.headers["authorization"].split()[-1]}))
    settings = FetchSettings(headers={"Authorization": "Key ${SHORT_KEY}"}, allow_private_addresses=True)
    with for_contract(settings, tmp_path, environ={"SHORT_KEY": "k9Z2x"}) as http:
        page = http.fetch(site.url("/short"))
    assert site.requests_to("/short")[0].headers["authorization"] == "Key k9Z2x"
    assert page.headers["x-echo"] == "***"


@pytest.mark.parametrize(
    ("environ", "problem"),
    [
        ({}, "environment variable not set: ${SHOP_API_TOKEN} in header 'Authorization'"),
        ({"SHOP_API_TOKEN": ""}, "environment variable empty: ${SHOP_API_TOKEN} in header 'Authorization'"),
    ],
)
def test_missing_header_variable_is_a_clear_config_error_without_a_request(
    site: FixtureSite, tmp_path: Path, for_contract, environ: dict[str, str], problem: str
) -> None:
    settings = FetchSettings(
        headers={"Authorization": "Bearer ${SHOP_API_TOKEN}", "X-Api-Key": "${OTHER_KEY}"},
        allow_private_addresses=True,
    )
    other_value = "other-secret-value-42"
    with for_contract(settings, tmp_path, environ={**environ, "OTHER_KEY": other_value}) as fetcher:
        with pytest.raises(FetchError) as caught:
            fetcher.fetch(site.url("/api"))

    error = caught.value
    assert (error.kind, error.transient, error.url) == ("invalid_config", False, site.url("/api"))
    assert problem in str(error)
    assert "fetch.headers" in str(error) and site.url("/api") in str(error)
    # the variables that are set are not part of the problem, and their values never appear
    assert "OTHER_KEY" not in str(error)
    assert other_value not in str(error) + repr(error) + repr(fetcher)
    assert site.requests_to("/api") == []
    # non-transient and picklable, so Dagster reports it once instead of retrying it
    assert pickle.loads(pickle.dumps(error)).kind == "invalid_config"


def test_every_missing_variable_is_named(tmp_path: Path, for_contract) -> None:
    settings = FetchSettings(headers={"A": "${ONE}-${TWO}", "B": "${THREE}"})
    with for_contract(settings, tmp_path, environ={"TWO": "x"}) as fetcher:
        with pytest.raises(FetchError) as caught:
            fetcher.fetch("https://example.test/")
    message = str(caught.value)
    assert "${ONE} in header 'A'" in message and "${THREE} in header 'B'" in message
    assert "${TWO}" not in message


# --- hostile servers -----------------------------------------------------------------------------


class TricklingServer:
    """Answers every request on 127.0.0.1 with ``head`` + ``body``, one byte every ``interval`` seconds
    from byte ``fast_bytes`` on: a server that keeps each read under the read timeout forever."""

    def __init__(self, head: bytes, body: bytes = b"", *, fast_bytes: int = 0, interval: float = 0.1) -> None:
        self._data, self._fast_bytes, self._interval = head + body, fast_bytes, interval
        self._stop = threading.Event()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.1)
        self.host_port = "127.0.0.1:%d" % self._listener.getsockname()[1]
        self.url = f"http://{self.host_port}/"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self._listener.accept()
            except OSError:
                continue
            threading.Thread(target=self._drip, args=(connection,), daemon=True).start()

    def _drip(self, connection: socket.socket) -> None:
        with connection:
            connection.recv(65536)
            try:
                connection.sendall(self._data[: self._fast_bytes])
                for byte in self._data[self._fast_bytes :]:
                    if self._stop.wait(self._interval):
                        return
                    connection.sendall(bytes([byte]))
            except OSError:
                return

    def close(self) -> None:
        self._stop.set()
        self._listener.close()


@pytest.fixture
def trickling() -> Iterator[Callable[..., TricklingServer]]:
    servers: list[TricklingServer] = []

    def start(head: bytes, body: bytes = b"", **options: Any) -> TricklingServer:
        servers.append(TricklingServer(head, body, **options))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def test_deadline_holds_while_headers_trickle(trickling, make_fetcher) -> None:
    # each header byte arrives well within the 5 s read timeout; only the 1 s deadline can end this
    head = b"HTTP/1.1 200 OK\r\n" + b"X-Padding: " + b"a" * 2000 + b"\r\n\r\n"
    server = trickling(head, interval=0.05)

    fetcher = make_fetcher(allowed_hosts=(server.host_port,), timeout_s=5, deadline_s=1, retries=3)

    started = time.monotonic()
    with pytest.raises(FetchError) as caught:
        fetcher.fetch(server.url)

    assert time.monotonic() - started < 2.5
    assert caught.value.kind == "timeout" and "fetch deadline of 1s passed" in str(caught.value)


def test_deadline_holds_while_the_body_trickles(trickling, make_fetcher) -> None:
    body = b"<p>" + b"x" * 2000 + b"</p>"
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: %d\r\n\r\n" % len(body)
    server = trickling(head, body, fast_bytes=len(head) + 10, interval=0.05)

    fetcher = make_fetcher(allowed_hosts=(server.host_port,), timeout_s=5, deadline_s=1, retries=3)

    started = time.monotonic()
    with pytest.raises(FetchError) as caught:
        fetcher.fetch(server.url)

    assert time.monotonic() - started < 2.5
    assert caught.value.kind == "timeout" and "fetch deadline of 1s passed" in str(caught.value)


@pytest.mark.parametrize("layers", [2, 3])
def test_stacked_encodings_are_bounded_layer_by_layer(site: FixtureSite, make_fetcher, layers: int) -> None:
    # 20 MB of zeros gzipped twice is a few hundred bytes; undone in one go it would be 20 MB at once
    bomb = b"<html>" + b"\0" * 20_000_000
    for _ in range(layers):
        bomb = gzip.compress(bomb, 9)
    site.set_page("/bomb", bomb, headers={"Content-Encoding": ", ".join(["gzip"] * layers)})
    fetcher = make_fetcher(max_bytes=1_000_000)

    tracemalloc.start()
    try:
        with pytest.raises(FetchError) as caught:
            fetcher.fetch(site.url("/bomb"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert peak < 5_000_000
    if layers == 2:
        assert caught.value.kind == "too_large" and "stopped reading after" in str(caught.value)
    else:
        assert (caught.value.kind, caught.value.transient) == ("bad_encoding", False)
        assert "'gzip, gzip, gzip'" in str(caught.value)


def test_two_stacked_encodings_are_undone_in_order(site: FixtureSite, make_fetcher) -> None:
    html = "<p>" + "row " * 500 + "</p>"
    twice = zlib.compress(gzip.compress(html.encode()))
    site.set_page("/two", twice, headers={"Content-Encoding": "gzip, deflate"})

    assert make_fetcher().fetch(site.url("/two")).html == html


def test_an_encoding_we_did_not_ask_for_is_refused(site: FixtureSite, make_fetcher) -> None:
    site.set_page("/br", b"\x8b\x02\x80hello\x03", headers={"Content-Encoding": "br"})

    with pytest.raises(FetchError) as caught:
        make_fetcher().fetch(site.url("/br"))

    assert (caught.value.kind, caught.value.transient) == ("bad_encoding", False)
    assert "'br'" in str(caught.value) and "gzip and deflate" in str(caught.value)


def test_the_time_spent_reading_robots_txt_does_not_count_against_the_pages_deadline(
    site: FixtureSite, make_fetcher, fake_time: FakeTime
) -> None:
    # robots.txt asks for 40 s (its host's turn, as a frozen worker holding every shared slot would), then the
    # page asks for 30 s: 70 s in all, past the 60 s deadline, but only the page's own 30 s count against it
    site.set_handler("/robots.txt", sequence(Response(503, b"", {"Retry-After": "40"}),
                                             Response(200, b"User-agent: *\nAllow: /\n")))
    site.set_handler("/p", sequence(Response(503, b"", {"Retry-After": "30"}), Response(200, b"<p>ok</p>")))

    page = make_fetcher(deadline_s=60.0, robots_agent="test-agent", fake_time=fake_time).fetch(site.url("/p"))

    assert page.html == "<p>ok</p>" and fake_time.slept == [40.0, 30.0]
    assert [a["status"] for a in page.attempts] == [503, 200]
