"""The fetch adapters against a real 127.0.0.1 server (FixtureSite): no mocked HTTP.

Only 127.0.0.1 is ever contacted; other hosts appear only behind an injected resolver, and the address
guard refuses them before any connection is made.
"""

from __future__ import annotations

import gzip
import hashlib
import itertools
import pickle
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from email.utils import formatdate
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from scrape_contracts.adapters.fetch import (
    FetchError,
    FixtureFetcher,
    HttpFetcher,
    Page,
    _TooLarge,
    decode_html,
    expand_header_values,
    fetcher_for,
    read_limited,
    redact_url,
    retry_after_seconds,
)
from scrape_contracts.adapters.netguard import AddressBlocked, AddressGuard, ResolutionFailed
from scrape_contracts.contract.model import FetchSettings
from scrape_contracts_tests.fixture_site import FixtureSite, Request, Response

pytestmark = pytest.mark.timeout(60)

SECRETS = {
    "Authorization": "Bearer s3cr3t-token-value-123",
    "X-Api-Key": "apikey-0123456789abcdef",
    "Cookie": "session=cookie-secret-abcdef42",
}


def _serve() -> Iterator[FixtureSite]:
    server = FixtureSite()
    yield server
    # FixtureSite.close() waits out serve_forever's 0.5 s poll; doing that in the background keeps the
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


@pytest.fixture
def make_fetcher(site: FixtureSite) -> Iterator[Callable[..., HttpFetcher]]:
    """A fetcher whose guard lets through only ``site`` (first hops in tests); closed after the test."""
    created: list[HttpFetcher] = []

    def make(**options: Any) -> HttpFetcher:
        options.setdefault("allowed_hosts", (host_port(site),))
        options.setdefault("backoff_s", 0.01)
        options.setdefault("timeout_s", 5.0)
        fetcher = HttpFetcher(**options)
        created.append(fetcher)
        return fetcher

    yield make
    for fetcher in created:
        fetcher.close()


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


def test_gzip_body_is_inflated_and_hashed_as_served_html(site: FixtureSite, make_fetcher) -> None:
    html = "<html><body>" + "<p>row</p>" * 1000 + "</body></html>"
    site.set_page("/gz", gzip.compress(html.encode()), headers={"Content-Encoding": "gzip"})

    page = make_fetcher().fetch(site.url("/gz"))

    assert page.html == html
    assert page.sha256 == hashlib.sha256(html.encode()).hexdigest()


def test_one_fetcher_serves_many_threads(site: FixtureSite, make_fetcher) -> None:
    for n in range(10):
        site.set_page(f"/t/{n}", f"<p>page {n}</p>")
    fetcher = make_fetcher()

    def fetch(n: int) -> tuple[int, str]:
        return n, fetcher.fetch(site.url(f"/t/{n % 10}")).html

    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(fetch, range(40)))

    assert all(html == f"<p>page {n % 10}</p>" for n, html in results)
    assert len(site.requests) == 40


# --- retries -------------------------------------------------------------------------------------


def test_429_with_retry_after_twice_then_success(site: FixtureSite, make_fetcher) -> None:
    limited = Response(429, b"slow down", {"Retry-After": "1"})
    site.set_handler("/rl", sequence(limited, limited, Response(200, b"<p>ok</p>")))

    started = time.monotonic()
    page = make_fetcher(backoff_s=0.01).fetch(site.url("/rl"))

    assert page.html == "<p>ok</p>"
    assert [a["status"] for a in page.attempts] == [429, 429, 200]
    assert [a["attempt"] for a in page.attempts] == [1, 2, 3]
    assert [a["waited_s"] for a in page.attempts] == [0.0, 1.0, 1.0]
    assert page.attempts[0]["error"] == "HTTP 429"
    assert time.monotonic() - started >= 1.9


def test_retry_after_as_http_date_is_honoured(site: FixtureSite, make_fetcher) -> None:
    when = formatdate(time.time() + 2, usegmt=True)
    site.set_handler("/date", sequence(Response(503, b"", {"Retry-After": when}), Response(200, b"ok")))

    page = make_fetcher().fetch(site.url("/date"))

    assert [a["status"] for a in page.attempts] == [503, 200]
    # HTTP-dates have whole-second resolution, so "now + 2 s" means a wait of 1 to 2 seconds
    assert 0.9 <= page.attempts[1]["waited_s"] <= 2.1


def test_retry_after_parsing() -> None:
    now = 1_700_000_000.0
    assert retry_after_seconds("3") == 3.0
    assert retry_after_seconds(" 0 ") == 0.0
    assert retry_after_seconds(formatdate(now + 30, usegmt=True), now=now) == pytest.approx(30.0)
    assert retry_after_seconds(formatdate(now - 30, usegmt=True), now=now) == 0.0
    assert retry_after_seconds("soon") is None
    assert retry_after_seconds(None) is None


def test_503_then_success_uses_backoff(site: FixtureSite, make_fetcher) -> None:
    site.set_handler("/flaky", sequence(Response(503, b"busy"), Response(200, b"<p>ok</p>")))

    page = make_fetcher(backoff_s=0.01).fetch(site.url("/flaky"))

    assert page.status == 200
    assert [(a["status"], a["waited_s"]) for a in page.attempts] == [(503, 0.0), (200, 0.01)]


def test_persistent_500_fails_transient_after_all_retries(site: FixtureSite, make_fetcher) -> None:
    site.set_page("/down", "oops", status=500)

    with pytest.raises(FetchError) as caught:
        make_fetcher(retries=2, backoff_s=0.01).fetch(site.url("/down"))

    error = caught.value
    assert (error.kind, error.status, error.transient) == ("http_status", 500, True)
    assert [a["waited_s"] for a in error.attempts] == [0.0, 0.01, 0.02]  # exponential backoff
    assert len(site.requests_to("/down")) == 3
    assert site.url("/down") in str(error) and "after 3 attempts" in str(error)
    assert "\n" not in str(error)


def test_404_fails_at_once_without_retry(site: FixtureSite, make_fetcher) -> None:
    with pytest.raises(FetchError) as caught:
        make_fetcher(retries=5).fetch(site.url("/missing"))

    error = caught.value
    assert (error.kind, error.status, error.transient) == ("http_status", 404, False)
    assert len(error.attempts) == 1 and len(site.requests_to("/missing")) == 1
    assert str(error).startswith(f"GET {site.url('/missing')} failed: HTTP 404")
    assert "check the URL in the contract" in str(error)


def test_retry_after_beyond_deadline_fails_immediately(site: FixtureSite, make_fetcher) -> None:
    site.set_page("/later", "", status=429, headers={"Retry-After": "120"})

    started = time.monotonic()
    with pytest.raises(FetchError) as caught:
        make_fetcher(deadline_s=5).fetch(site.url("/later"))

    assert time.monotonic() - started < 1
    error = caught.value
    assert (error.kind, error.status, error.transient) == ("http_status", 429, True)
    assert "Retry-After of 120s" in str(error) and "deadline of 5s" in str(error)
    assert len(site.requests_to("/later")) == 1


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

    started = time.monotonic()
    with pytest.raises(FetchError) as caught:
        make_fetcher(timeout_s=10, retries=3, deadline_s=0.5).fetch(site.url("/hang"))

    assert time.monotonic() - started < 3
    assert caught.value.kind == "timeout"


# --- size limit ----------------------------------------------------------------------------------


def test_20mb_page_is_refused_from_content_length(site: FixtureSite, make_fetcher) -> None:
    site.set_page("/huge", b"x" * 20_000_000)

    started = time.monotonic()
    with pytest.raises(FetchError) as caught:
        make_fetcher().fetch(site.url("/huge"))

    assert time.monotonic() - started < 2
    error = caught.value
    assert (error.kind, error.transient, error.status) == ("too_large", False, 200)
    assert str(error) == (
        f"GET {site.url('/huge')} refused: response is larger than max_bytes=5000000 (Content-Length is "
        "20000000 bytes; raise fetch.max_bytes in the contract if the page is legitimately this big)"
    )


def test_size_limit_applies_while_streaming(site: FixtureSite, make_fetcher) -> None:
    # A 20 KB gzip body inflating to 20 MB: Content-Length is honest and small, so only the streaming
    # check can catch it, and it must do so without ever holding the 20 MB.
    bomb = gzip.compress(b"<html>" + b"a" * 20_000_000, compresslevel=9)
    site.set_page("/bomb", bomb, headers={"Content-Encoding": "gzip"})
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


def test_read_limited_stops_an_endless_stream() -> None:
    with pytest.raises(_TooLarge) as caught:
        read_limited(itertools.repeat(b"x" * 1000), max_bytes=10_000)
    assert caught.value.seen == 11_000
    assert read_limited([b"ab", b"cd"], max_bytes=4) == b"abcd"


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


# --- charsets ------------------------------------------------------------------------------------


def test_windows_1252_page_without_declared_charset(site: FixtureSite, make_fetcher) -> None:
    text = "<html><body><p>Café – 12,50 €</p><p>Crème brûlée – 7,00 €</p></body></html>"
    site.set_page("/menu", text.encode("cp1252"), headers={"Content-Type": "text/html"})

    page = make_fetcher().fetch(site.url("/menu"))

    assert page.html == text
    assert page.encoding == "cp1252"
    assert page.sha256 == hashlib.sha256(text.encode("cp1252")).hexdigest()


@pytest.mark.parametrize(
    ("body", "content_type", "text", "encoding"),
    [
        ("Café €".encode("cp1252"), "text/html; charset=windows-1252", "Café €", "cp1252"),
        ("Café".encode("utf-8"), 'text/html; charset="UTF-8"', "Café", "utf-8"),
        # latin-1 labels are read as windows-1252, as browsers do
        ("Café – €".encode("cp1252"), "text/html; charset=ISO-8859-1", "Café – €", "cp1252"),
        ("<meta charset=windows-1251>Привет".encode("cp1251"), None, "<meta charset=windows-1251>Привет", "cp1251"),
        (
            b'<meta http-equiv="Content-Type" content="text/html; charset=koi8-r">' + "Мир".encode("koi8-r"),
            "text/html",
            '<meta http-equiv="Content-Type" content="text/html; charset=koi8-r">Мир',
            "koi8-r",
        ),
        ("Café".encode("utf-8-sig"), "text/html; charset=cp1252", "Café", "utf-8"),  # BOM wins
        ("déjà vu".encode("utf-8"), None, "déjà vu", "utf-8"),
        # detection alone ranks cp1250 first here, which would turn "è" into "č"
        ("<p>Crème brûlée – 7,00 €</p>".encode("cp1252"), None, "<p>Crème brûlée – 7,00 €</p>", "cp1252"),
        ("x".encode(), "text/html; charset=no-such-charset", "x", "utf-8"),
    ],
)
def test_decode_html(body: bytes, content_type: str | None, text: str, encoding: str) -> None:
    assert decode_html(body, content_type) == (text, encoding)


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


def test_guard_refuses_loopback_by_default(site: FixtureSite) -> None:
    site.set_page("/p", "<p>hi</p>")
    with HttpFetcher() as fetcher, pytest.raises(FetchError) as caught:
        fetcher.fetch(site.url("/p"))

    error = caught.value
    assert (error.kind, error.transient) == ("blocked_address", False)
    assert "loopback" in str(error) and "fetch.allow_private_addresses: true" in str(error)
    assert site.requests == []


def test_allow_private_addresses_opts_in(site: FixtureSite) -> None:
    site.set_page("/p", "<p>hi</p>")
    with HttpFetcher(allow_private_addresses=True) as fetcher:
        assert fetcher.fetch(site.url("/p")).html == "<p>hi</p>"


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


def test_redirect_to_non_http_scheme_is_refused(site: FixtureSite, make_fetcher) -> None:
    site.set_page("/go", "", status=302, headers={"Location": "file:///etc/passwd"})
    with pytest.raises(FetchError) as caught:
        make_fetcher(allow_private_addresses=True).fetch(site.url("/go"))
    assert caught.value.kind == "blocked_address"
    assert "scheme 'file' is not allowed" in str(caught.value)


def test_host_with_any_private_address_is_refused_before_connecting() -> None:
    # the resolver also offers a public address, but one loopback answer is enough to refuse
    resolver = resolver_from({"public-looking.test": ["93.184.216.34", "127.0.0.1"]})
    with HttpFetcher(resolver=resolver) as fetcher, pytest.raises(FetchError) as caught:
        fetcher.fetch("http://public-looking.test/page")
    assert caught.value.kind == "blocked_address"
    assert "resolves to 127.0.0.1, a loopback address" in str(caught.value)
    assert caught.value.attempts == ()  # refused before any HTTP attempt


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1", "127.8.9.10", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.1.1", "0.0.0.0",
        "224.0.0.1", "240.0.0.1", "100.64.0.1", "::1", "::", "fe80::1%eth0", "fc00::1", "ff02::1",
        "::ffff:127.0.0.1", "169.254.169.254", "fd00:ec2::254",
    ],
)
def test_guard_blocks_non_public_addresses(address: str) -> None:
    guard = AddressGuard(resolver=resolver_from({"target.test": [address]}))
    with pytest.raises(AddressBlocked):
        guard.check("https://target.test/")


def test_guard_allows_public_addresses_and_respects_opt_in() -> None:
    resolver = resolver_from(
        {"public.test": ["93.184.216.34", "2606:4700:4700::1111"], "lan.test": ["192.168.1.5"]}
    )
    AddressGuard(resolver=resolver).check("https://public.test/a")
    AddressGuard(resolver=resolver, allow_private=True).check("http://lan.test/")
    AddressGuard(allow_private=True).check("http://127.0.0.1:8080/")

    with pytest.raises(AddressBlocked) as caught:
        AddressGuard(resolver=resolver).check("http://lan.test/")
    assert caught.value.opt_in_helps


def test_guard_metadata_address_stays_blocked_with_opt_in() -> None:
    guard = AddressGuard(allow_private=True)
    urls = ("http://169.254.169.254/latest/", "http://[fd00:ec2::254]/", "http://[::ffff:169.254.169.254]/")
    for url in urls:
        with pytest.raises(AddressBlocked) as caught:
            guard.check(url)
        assert "metadata" in str(caught.value) and not caught.value.opt_in_helps


def test_guard_literal_ip_needs_no_resolver_and_allowed_hosts_are_exact() -> None:
    def no_dns(host: str) -> list[str]:
        raise AssertionError(f"resolver called for {host}")

    guard = AddressGuard(resolver=no_dns, allowed_hosts=("127.0.0.1:8000",))
    guard.check("http://127.0.0.1:8000/x")
    for url in ("http://10.0.0.1/", "http://127.0.0.1:8001/", "http://127.0.0.1/"):
        with pytest.raises(AddressBlocked):
            guard.check(url)
    with pytest.raises(AddressBlocked, match="scheme 'gopher'"):
        guard.check("gopher://127.0.0.1:8000/")


@pytest.mark.parametrize("url", ["ftp://example.test/f", "not a url", "http:///no-host", "http://h:99999/"])
def test_invalid_urls_are_refused_without_network(url: str) -> None:
    with HttpFetcher() as fetcher, pytest.raises(FetchError) as caught:
        fetcher.fetch(url)
    assert (caught.value.kind, caught.value.transient, caught.value.attempts) == ("invalid_url", False, ())
    assert "fix the URL in the contract" in str(caught.value)


def test_unresolvable_host_is_a_transient_connection_error() -> None:
    with HttpFetcher(resolver=resolver_from({}), retries=1, backoff_s=0.01) as fetcher:
        with pytest.raises(FetchError) as caught:
            fetcher.fetch("https://nowhere.test/")
    assert (caught.value.kind, caught.value.transient, len(caught.value.attempts)) == ("connection", True, 2)
    assert "nowhere.test" in str(caught.value)


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


def test_redact_url() -> None:
    assert redact_url("https://user:pw@example.test:8443/a?b=1") == "https://***@example.test:8443/a?b=1"
    assert redact_url("https://token@example.test/") == "https://***@example.test/"
    assert redact_url("https://example.test/a@b") == "https://example.test/a@b"
    assert redact_url("https://example.test/") == "https://example.test/"


def test_fetch_error_survives_pickling() -> None:
    error = FetchError(
        "GET x failed", kind="http_status", url="x", status=503, transient=True, attempts=({"a": 1},)
    )
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.kind, copy.url, copy.status, copy.transient, copy.attempts) == (
        "GET x failed", "http_status", "x", 503, True, ({"a": 1},)
    )


# --- fixture adapter -----------------------------------------------------------------------------


@pytest.fixture
def fixture_root(tmp_path: Path) -> Path:
    root = tmp_path / "fixtures"
    files = {
        "example.test/index.html": "<p>home</p>",
        "example.test/a/b.html": "<p>b</p>",
        "example.test/a/raw": "<p>raw</p>",
        "example.test/dir/index.html": "<p>dir</p>",
        "example.test/menu.html": "<meta charset='windows-1252'><p>Café €</p>",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("cp1252"))
    (tmp_path / "secret.html").write_text("<p>outside</p>")
    return root


@pytest.mark.parametrize(
    ("url", "html"),
    [
        ("https://example.test/", "<p>home</p>"),
        ("https://example.test", "<p>home</p>"),
        ("https://EXAMPLE.test/a/b", "<p>b</p>"),
        ("http://example.test/a/b.html?page=2#top", "<p>b</p>"),
        ("https://example.test/a/raw", "<p>raw</p>"),
        ("https://example.test/dir/", "<p>dir</p>"),
        ("https://example.test/dir", "<p>dir</p>"),
    ],
)
def test_fixture_fetcher_maps_urls_to_files(fixture_root: Path, url: str, html: str) -> None:
    page = FixtureFetcher(fixture_root).fetch(url)
    assert (page.status, page.html, page.url) == (200, html, url)
    assert page.sha256 == page.etag == hashlib.sha256(html.encode()).hexdigest()


def test_fixture_fetcher_decodes_declared_charset(fixture_root: Path) -> None:
    page = FixtureFetcher(fixture_root).fetch("https://example.test/menu")
    assert "Café €" in page.html and page.encoding == "cp1252"


def test_fixture_fetcher_not_modified_when_etag_matches(fixture_root: Path) -> None:
    fetcher = FixtureFetcher(fixture_root)
    first = fetcher.fetch("https://example.test/a/b")
    again = fetcher.fetch("https://example.test/a/b", etag=first.etag)
    assert (again.status, again.not_modified, again.html, again.etag) == (304, True, "", first.sha256)
    assert not fetcher.fetch("https://example.test/a/b", etag="stale").not_modified


@pytest.mark.parametrize(
    "url",
    [
        "https://example.test/../secret.html",
        "https://example.test/a/%2e%2e/%2e%2e/secret.html",
        "https://example.test/a/..%2f..%2fsecret.html",
        "https://example.test/a\\..\\..\\secret.html",
        "ftp://example.test/a/b",
    ],
)
def test_fixture_fetcher_refuses_paths_outside_root(fixture_root: Path, url: str) -> None:
    with pytest.raises(FetchError) as caught:
        FixtureFetcher(fixture_root).fetch(url)
    assert caught.value.kind == "invalid_url"


def test_fixture_fetcher_refuses_symlink_out_of_root(fixture_root: Path) -> None:
    (fixture_root / "example.test" / "link.html").symlink_to(fixture_root.parent / "secret.html")
    with pytest.raises(FetchError) as caught:
        FixtureFetcher(fixture_root).fetch("https://example.test/link.html")
    assert caught.value.kind == "invalid_url"


def test_fixture_fetcher_missing_page_names_the_files_tried(fixture_root: Path) -> None:
    with pytest.raises(FetchError) as caught:
        FixtureFetcher(fixture_root).fetch("https://example.test/nope")
    error = caught.value
    assert (error.kind, error.transient) == ("fixture_missing", False)
    assert str(fixture_root / "example.test" / "nope.html") in str(error)

    with pytest.raises(FetchError, match="does not exist; check fetch.fixture_dir"):
        FixtureFetcher(fixture_root / "absent").fetch("https://example.test/")


# --- wiring from the contract --------------------------------------------------------------------


def test_fetcher_for_builds_the_configured_adapter(tmp_path: Path) -> None:
    fixture = fetcher_for(FetchSettings(adapter="fixture", fixture_dir="pages"), tmp_path)
    assert isinstance(fixture, FixtureFetcher) and fixture.root == tmp_path / "pages"

    settings = FetchSettings(
        adapter="http", timeout_s=3, headers={"X-Api-Key": "k-123456789"}, max_bytes=1000, max_redirects=1,
        retries=4, allow_private_addresses=True,
    )
    with fetcher_for(settings, tmp_path) as http:
        assert isinstance(http, HttpFetcher)
        configured = (http.timeout_s, http.max_bytes, http.max_redirects, http.retries)
        assert configured == (3, 1000, 1, 4) and http.allow_private_addresses
        assert "k-123456789" not in repr(http)


# --- ${NAME} in header values ---------------------------------------------------------------------


def test_env_references_in_headers_are_expanded_at_fetch_time(site: FixtureSite, tmp_path: Path) -> None:
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

    with fetcher_for(settings, tmp_path, environ={"SHOP_API_TOKEN": token}) as http:
        assert isinstance(http, HttpFetcher)
        page = http.fetch(site.url("/api"))
        assert token not in repr(http)
    sent = site.requests_to("/api")[0].headers
    assert sent["authorization"] == f"Bearer {token}"
    assert sent["x-static"] == "cost: $5 ${ not a reference"
    # an echoed secret is scrubbed like a literal header value would be
    assert page.headers["x-echo"] == "***"

    # the variable is read when the fetcher is made, so a rotated secret is used by the next fetch
    with fetcher_for(settings, tmp_path, environ={"SHOP_API_TOKEN": "rotated-0123456789"}) as http:
        http.fetch(site.url("/api"))
    assert site.requests_to("/api")[1].headers["authorization"] == "Bearer rotated-0123456789"


def test_expanded_short_secret_is_scrubbed_even_when_echoed_alone(site: FixtureSite, tmp_path: Path) -> None:
    # "k9Z2x" is below the 8-character token threshold: only knowing it is a secret gets it scrubbed
    site.set_handler("/short", lambda request: Response(
        200, b"<p>ok</p>", {"X-Echo": request.headers["authorization"].split()[-1]}))
    settings = FetchSettings(headers={"Authorization": "Key ${SHORT_KEY}"}, allow_private_addresses=True)
    with fetcher_for(settings, tmp_path, environ={"SHORT_KEY": "k9Z2x"}) as http:
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
    site: FixtureSite, tmp_path: Path, environ: dict[str, str], problem: str
) -> None:
    settings = FetchSettings(
        headers={"Authorization": "Bearer ${SHOP_API_TOKEN}", "X-Api-Key": "${OTHER_KEY}"},
        allow_private_addresses=True,
    )
    other_value = "other-secret-value-42"
    with fetcher_for(settings, tmp_path, environ={**environ, "OTHER_KEY": other_value}) as fetcher:
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


def test_every_missing_variable_is_named(tmp_path: Path) -> None:
    settings = FetchSettings(headers={"A": "${ONE}-${TWO}", "B": "${THREE}"})
    with pytest.raises(FetchError) as caught:
        fetcher_for(settings, tmp_path, environ={"TWO": "x"}).fetch("https://example.test/")
    message = str(caught.value)
    assert "${ONE} in header 'A'" in message and "${THREE} in header 'B'" in message
    assert "${TWO}" not in message


def test_expand_header_values_reads_os_environ_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SC_TEST_TOKEN", "from-the-environment")
    expanded = expand_header_values({"X-Api-Key": "${SC_TEST_TOKEN}", "Accept-Language": "en"})
    assert expanded.headers == {"X-Api-Key": "from-the-environment", "Accept-Language": "en"}
    assert expanded.secrets == ("from-the-environment",)
    assert "from-the-environment" not in repr(expanded)
