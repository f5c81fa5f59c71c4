"""``AsyncBrowserFetcher``: pages rendered by headless Chromium, returned as the same ``Page`` as HTTP's.

One browser process per fetcher, started on the first fetch and stopped by ``aclose``; at most ``pages``
pages render at once, each in a fresh browser context (no cookies or storage shared between targets)
behind a guard proxy of its own. A render: load the page, optionally wait for the network to go quiet,
click the contract's click steps, wait for ``wait_for`` (those three: settle.py), then read the DOM as HTML.
Every failure is a ``FetchError`` whose message says what to change, as with the http adapter.

With ``fetch.proxies``, each render goes through one proxy of the pool (adapters/proxies.py: rotation by
health, sticky per site host with ``sticky``, quarantine and re-check), chosen when the render starts: the
page and everything it loads leave from one address, as a person's browser would. What the render came to
is the proxy's health: a proxy that could not be reached, refused the tunnel or asked for credentials (407)
is its fault, not the site's.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from scrape_contracts.adapters.fetch import messages
from scrape_contracts.adapters.fetch.browser.chromium import (
    LAUNCH_ARGS, BrowserUnavailable, find_chromium, launch_problem,
)
from scrape_contracts.adapters.fetch.browser.proxy import REFUSED_HEADER, GuardProxy, Refusal
from scrape_contracts.adapters.fetch.browser.settle import Inflight, settle
from scrape_contracts.adapters.fetch.page import AsyncClosesOnExit, FetchError, Page
from scrape_contracts.adapters.fetch.policy import RETRY_STATUSES
from scrape_contracts.adapters.fetch.urls import origin, redact_url, url_problem
from scrape_contracts.adapters.netguard import AddressGuard
from scrape_contracts.adapters.proxies import Fault, ProxyChoice, ProxyEndpoint, ProxyPool
from scrape_contracts.adapters.fetch.robots import host_key

if TYPE_CHECKING:
    from scrape_contracts.contract.fetch import BrowserSettings

# what a page may download with its scripts, styles and images, in multiples of max_bytes (the rendered
# HTML's own limit): a page that streams for ever is cut off instead of filling the time limit with bytes
TRANSFER_FACTOR = 20
_DROPPED_HEADERS = frozenset({"set-cookie", "set-cookie2"})


class _ProxyFailed(Exception):
    """A render the upstream proxy failed (its fault for the pool): carries the FetchError to raise."""

    def __init__(self, error: FetchError) -> None:
        self.error = error


class AsyncBrowserFetcher(AsyncClosesOnExit):
    """Renders pages in Chromium from many tasks of one event loop; ``await aclose()`` stops the browser."""

    def __init__(
        self,
        *,
        browser: BrowserSettings,
        timeout_s: float = 10.0,
        deadline_s: float = 60.0,
        max_bytes: int = 5_000_000,
        max_redirects: int = 5,
        allow_private_addresses: bool = False,
        allowed_hosts: Iterable[str] = (),
        max_pages: int | None = None,
        environ: Mapping[str, str] | None = None,
        user_agent: str | None = None,
        proxies: Sequence[ProxyEndpoint] = (),
        sticky_proxy: bool = False,
        proxy_recheck_s: float = 30.0,
        proxy_book: Any = None,
    ) -> None:
        self.settings = browser
        self.timeout_s = timeout_s
        self.deadline_s = deadline_s
        self.max_bytes = max_bytes
        self.max_redirects = max_redirects
        self.allow_private_addresses = allow_private_addresses
        self.max_pages = max(1, min(browser.pages, max_pages or browser.pages))
        self.user_agent = user_agent
        self._environ = environ
        self._guard = AddressGuard(allow_private=allow_private_addresses, allowed_hosts=allowed_hosts)
        self._playwright: Any = None
        self._browser: Any = None
        self._unavailable: str | None = None
        self._lock: asyncio.Lock | None = None
        self._slots: asyncio.Semaphore | None = None
        self.launches = 0  # browser processes started (tests check that a run shares one)
        self.proxies = ProxyPool(proxies, sticky=sticky_proxy, recheck_s=proxy_recheck_s) if proxies else None
        # where the proxies' health lasts between runs (``adapters.fetch.proxy_book``), as for the http fetchers
        self.proxy_book = proxy_book if self.proxies is not None else None
        if self.proxy_book is not None:
            self.proxies.restore(self.proxy_book.load())

    def proxy_health(self) -> list[dict[str, object]]:
        """Each proxy's health so far (no credential), as the http fetchers give it."""
        return self.proxies.health() if self.proxies is not None else []

    def __repr__(self) -> str:
        return (f"AsyncBrowserFetcher(wait_for={self.settings.wait_for!r}, "
                f"clicks={len(self.settings.clicks)}, max_pages={self.max_pages}, "
                f"deadline_s={self.deadline_s}, max_bytes={self.max_bytes}, "
                f"allow_private_addresses={self.allow_private_addresses})")

    async def aclose(self) -> None:
        book, self.proxy_book = self.proxy_book, None  # saved once: a second close writes nothing
        try:
            if book is not None and self.proxies is not None:  # one short write, off the event loop
                pool = self.proxies
                await asyncio.get_running_loop().run_in_executor(None, lambda: book.save(pool.saved(),
                                                                                         pool.health()))
        finally:
            await self._shut()

    async def _shut(self) -> None:
        browser, playwright = self._browser, self._playwright
        self._browser = self._playwright = None
        if browser is not None:
            try:
                await browser.close()
            except Exception:  # noqa: BLE001 (already gone: nothing left to close)
                pass
        if playwright is not None:
            await playwright.stop()

    async def _started(self, safe_url: str) -> Any:
        if self._lock is None:
            self._lock = asyncio.Lock()
            self._slots = asyncio.Semaphore(self.max_pages)
        async with self._lock:
            if self._browser is not None and not self._browser.is_connected():
                await self._shut()  # it died (crashed, killed): this fetch starts another
            if self._browser is None and self._unavailable is None:
                self._unavailable = await self._launch()
        if self._unavailable is not None:
            # the same one line for every target: no traceback, nothing to retry until Chromium is installed
            raise FetchError(f"GET {safe_url} refused: {self._unavailable}", kind="browser_missing",
                             url=safe_url, transient=False)
        return self._browser

    async def _launch(self) -> str | None:
        try:
            executable = find_chromium(self.settings.executable, self._environ)
            from playwright.async_api import async_playwright
        except BrowserUnavailable as exc:
            return str(exc)
        except ImportError:
            return "the Playwright package is not installed (pip install playwright; it drives Chromium)"
        self._playwright = await async_playwright().start()
        try:
            self._browser = await self._playwright.chromium.launch(
                executable_path=executable, headless=True, args=list(LAUNCH_ARGS), timeout=30_000,
                handle_sigint=False, handle_sigterm=False, handle_sighup=False)
        except Exception as exc:  # noqa: BLE001 (any launch failure is reported the same way)
            await self._playwright.stop()
            self._playwright = None
            return launch_problem(exc, executable)
        self.launches += 1
        return None

    async def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page:
        """Render ``url``. A browser sends no conditional requests, so ``etag``/``last_modified`` are ignored
        (an unchanged page is still recognised by its content)."""
        safe_url = redact_url(url)
        problem = url_problem(url)
        if problem:
            raise FetchError(f"GET {safe_url} {messages.invalid_url(problem)}", kind="invalid_url",
                             url=safe_url)
        browser = await self._started(safe_url)
        assert self._slots is not None
        started = time.monotonic()
        async with self._slots:
            try:
                return await asyncio.wait_for(self._render(browser, url, safe_url, started), self.deadline_s)
            except asyncio.TimeoutError:
                raise FetchError(
                    f"GET {safe_url} timed out: the fetch deadline of {self.deadline_s:g}s passed while the "
                    "browser rendered the page (the site is slow; raise fetch.deadline_s in the contract)",
                    kind="timeout", url=safe_url, transient=True) from None

    async def _render(self, browser: Any, url: str, safe_url: str, started: float) -> Page:
        choice = self.proxies.choose(host_key(url)) if self.proxies is not None else None
        upstream = self.proxies.endpoint(choice.name) if self.proxies is not None and choice else None
        fault = Fault.NONE
        try:
            page = await self._render_through(browser, url, safe_url, started, choice, upstream)
        except _ProxyFailed as failed:
            fault = Fault.HARD
            raise failed.error from None
        except asyncio.CancelledError:  # the deadline: a slow proxy, or a slow site behind it
            fault = Fault.SOFT
            raise
        finally:
            if choice is not None and self.proxies is not None:
                self.proxies.report(choice, fault, time.monotonic() - started)
        return page

    async def _render_through(self, browser: Any, url: str, safe_url: str, started: float,
                              choice: ProxyChoice | None, upstream: ProxyEndpoint | None) -> Page:
        max_transfer = self.max_bytes * TRANSFER_FACTOR
        async with GuardProxy(self._guard, max_transfer, self.timeout_s, upstream=upstream) as proxy:
            # <-loopback>: Chromium sends requests for localhost past any proxy unless told otherwise
            options: dict[str, Any] = {"proxy": {"server": proxy.server, "bypass": "<-loopback>"},
                                       "service_workers": "block", "accept_downloads": False}
            if self.user_agent:
                options["user_agent"] = self.user_agent
            from playwright.async_api import Error as PlaywrightError

            context = await browser.new_context(**options)
            crashed: list[bool] = []
            try:
                page = await context.new_page()
                page.on("crash", lambda _page: crashed.append(True))
                inflight = Inflight(page)
                response = await self._load(page, url, safe_url, proxy, crashed)
                await settle(page, inflight, self.settings, safe_url)
                html = await page.content()
                final_url = page.url
            except FetchError as error:
                if proxy.upstream_fault is not None and choice is not None:
                    raise _ProxyFailed(FetchError(
                        f"GET {safe_url} failed: proxy {choice.name} {proxy.upstream_fault}", kind="connection",
                        url=safe_url, transient=True)) from None
                if choice is not None and error.status == 407:  # a plain-HTTP page: the proxy's own answer
                    raise _ProxyFailed(FetchError(
                        f"GET {safe_url} failed: proxy {choice.name} answered 407 Proxy Authentication Required "
                        "(check the environment variables its username_env and password_env name)",
                        kind="connection", url=safe_url, transient=True)) from None
                if not proxy.over_limit:
                    raise
                html, final_url, response = "", url, None  # cut off by the proxy: reported below
            except PlaywrightError as exc:
                # a renderer that died (out of memory, killed) fails every call on its page: "Page crashed",
                # TargetClosedError; with the browser gone too, the next fetch starts a new one
                if not crashed and browser.is_connected():
                    raise
                raise self._crashed(safe_url, exc, browser_gone=not browser.is_connected()) from None
            finally:
                try:
                    await context.close()
                except PlaywrightError:
                    pass  # closed with its crashed page or browser
        if proxy.over_limit:
            evidence = "what the page downloaded with its resources"
            raise FetchError(f"GET {safe_url} {messages.too_large(max_transfer, evidence)}", kind="too_large",
                             url=safe_url)
        body = html.encode("utf-8")
        if len(body) > self.max_bytes:
            evidence = f"the rendered page is {len(body)} bytes"
            raise FetchError(f"GET {safe_url} {messages.too_large(self.max_bytes, evidence)}",
                             kind="too_large", url=safe_url)
        status = response.status if response is not None else 200
        headers = {k: v for k, v in (response.headers if response is not None else {}).items()
                   if k.lower() not in _DROPPED_HEADERS}
        attempt = {"attempt": 1, "status": status, "error": None, "waited_s": 0.0, "adapter": "browser",
                   "bytes_received": proxy.received,
                   "requests_refused": [r.as_dict() for r in proxy.refusals]}
        if choice is not None:
            attempt["proxy"] = choice.name
        return Page(url=redact_url(final_url), requested_url=safe_url, status=status, html=html,
                    sha256=hashlib.sha256(body).hexdigest(), headers=headers,
                    elapsed_s=time.monotonic() - started, encoding="utf-8", attempts=(attempt,))

    @staticmethod
    def _crashed(safe_url: str, error: Exception, *, browser_gone: bool) -> FetchError:
        what = "the browser" if browser_gone else "the browser's renderer"
        first = str(error).splitlines()[0][:200] if str(error) else type(error).__name__
        return FetchError(f"GET {safe_url} failed: {what} crashed while rendering the page ({first}); the page's "
                          "scripts may use too much memory (retried like a connection error)",
                          kind="browser_crashed", url=safe_url, transient=True)

    async def _load(self, page: Any, url: str, safe_url: str, proxy: GuardProxy, crashed: list[bool]) -> Any:
        from playwright.async_api import Error as PlaywrightError, TimeoutError as PlaywrightTimeout

        wait_s = self.settings.timeout_s
        try:
            response = await page.goto(url, wait_until="load", timeout=wait_s * 1000)
        except PlaywrightTimeout:
            raise FetchError(f"GET {safe_url} timed out: the page did not load within {wait_s:g}s (the site "
                             "is slow or unreachable; raise fetch.browser.timeout_s if it is just slow)",
                             kind="timeout", url=safe_url, transient=True) from None
        except PlaywrightError as exc:
            if crashed:
                raise self._crashed(safe_url, exc, browser_gone=False) from None
            if proxy.refusals:
                # nothing but the page itself (or a redirect of it) is requested before it loads, so a refusal
                # then is the page's: a refused tunnel or the proxy's 403, which Chromium reports as errors
                raise self._blocked(safe_url, proxy.refusals[-1]) from None
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise FetchError(f"GET {safe_url} failed: {first} (check the URL and that the site is up — "
                             "usually temporary)", kind="connection", url=safe_url, transient=True) from None
        if response is not None and response.headers.get(REFUSED_HEADER.lower()) and proxy.refusals:
            raise self._blocked(safe_url, proxy.refusals[-1])
        hops, request = 0, response.request.redirected_from if response is not None else None
        while request is not None:
            hops, request = hops + 1, request.redirected_from
        if hops > self.max_redirects:
            # every hop was checked by the guard as it happened; the limit keeps chains as short as over HTTP
            message = messages.too_many_redirects(self.max_redirects, redact_url(page.url))
            raise FetchError(f"GET {safe_url} {message}", kind="too_many_redirects", url=safe_url)
        if response is not None and not 200 <= response.status < 300:
            status = response.status
            raise FetchError(f"GET {safe_url} {messages.failed_status(status, response.status_text)}",
                             kind="http_status", url=safe_url, status=status,
                             transient=status in RETRY_STATUSES)
        return response

    @staticmethod
    def _blocked(safe_url: str, refusal: Refusal) -> FetchError:
        """The page itself, or a redirect of it, was refused by the address guard."""
        where = refusal.url
        if where.startswith("CONNECT "):
            scheme, host, port = origin(safe_url)
            same = scheme == "https" and where == f"CONNECT {host}:{port}"
            redirected = "" if same else f"it led to {where.split(' ', 1)[1]}, and "
        else:
            same = where.rstrip("/") == safe_url.rstrip("/")
            redirected = "" if same else f"it redirected to {where}, and "
        return FetchError(f"GET {safe_url} refused: {redirected}{refusal.reason}", kind="blocked_address",
                          url=safe_url)
