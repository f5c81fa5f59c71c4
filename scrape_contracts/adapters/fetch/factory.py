"""The fetcher a contract's ``fetch:`` block asks for, sync (one target) or async (a batch)."""

from __future__ import annotations

import functools
import ssl
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scrape_contracts.adapters.fetch.client import trusting
from scrape_contracts.adapters.fetch.cookies import Sessions
from scrape_contracts.adapters.fetch.fixture import FixtureFetcher
from scrape_contracts.adapters.fetch.http import HttpFetcher
from scrape_contracts.adapters.fetch.http_async import AsyncHttpFetcher
from scrape_contracts.adapters.fetch.pace import AsyncPacer, SharedBudget, SyncPacer, limits_for
from scrape_contracts.adapters.fetch.page import (
    AsyncClosesOnExit, AsyncFetcher, ClosesOnExit, Fetcher, FetchError, Page,
)
from scrape_contracts.adapters.fetch.secrets import expand_header_values
from scrape_contracts.adapters.fetch.urls import redact_url
from scrape_contracts.adapters.proxies import ProxyEndpoint
from scrape_contracts.contract.paths import confined_problem

if TYPE_CHECKING:
    from scrape_contracts.adapters.fetch.provider import JobBook, ProviderFetcher
    from scrape_contracts.adapters.fetch.proxy_book import ProxyBook
    from scrape_contracts.contract.fetch import FetchSettings


class MisconfiguredFetcher(ClosesOnExit):
    """Stands in for a fetcher whose contract cannot be fetched as configured.

    The error is raised by ``fetch`` rather than by ``fetcher_for`` so that it reaches callers through
    the same ``except FetchError`` as every other fetch failure, naming the URL and non-transient (a
    retry cannot set an environment variable).
    """

    def __init__(self, problem: str) -> None:
        self._problem = problem

    def __repr__(self) -> str:
        return f"MisconfiguredFetcher({self._problem!r})"

    def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page:
        safe_url = redact_url(url)
        raise FetchError(
            f"GET {safe_url} refused: {self._problem}", kind="invalid_config", url=safe_url, transient=False
        )


class InlineAsyncFetcher(AsyncClosesOnExit):
    """The async face of a sync fetcher that never waits on the network (fixture files, a configuration
    error): its ``fetch`` runs inline on the event loop."""

    def __init__(self, fetcher: Fetcher) -> None:
        self.fetcher = fetcher

    def __repr__(self) -> str:
        return f"InlineAsyncFetcher({self.fetcher!r})"

    async def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page:
        return self.fetcher.fetch(url, etag=etag, last_modified=last_modified)

    async def aclose(self) -> None:
        self.fetcher.close()


def _adapter_for(
    settings: FetchSettings, base_dir: Path, environ: Mapping[str, str] | None, http: Callable[..., Any],
    jobs: JobBook | None = None,
    proxy_book: ProxyBook | None = None,
    **options: Any,
) -> Any:
    if settings.adapter == "provider":
        return _provider_for(settings, environ, jobs)
    if settings.adapter == "fixture":
        assert settings.fixture_dir, "FetchSettings validation guarantees fixture_dir for the fixture adapter"
        # checked again here, not only at load: a symlink may have been swapped in since, and the
        # deployment's override (FetchResource) replaces fixture_dir after loading
        problem = confined_problem("fetch.fixture_dir", settings.fixture_dir, Path(base_dir))
        if problem:
            return MisconfiguredFetcher(problem)
        return FixtureFetcher(Path(base_dir) / settings.fixture_dir)
    if settings.adapter == "browser":
        return _browser_for(settings, environ, sync=True, proxy_book=proxy_book)  # async_fetcher_for: its own
    expanded = expand_header_values(settings.headers, environ)
    problem = expanded.problem()
    if problem:
        return MisconfiguredFetcher(problem)
    proxies = proxy_endpoints(settings, environ)
    if isinstance(proxies, str):
        return MisconfiguredFetcher(proxies)
    trust = ssl_context_for(settings, base_dir)
    if isinstance(trust, str):
        return MisconfiguredFetcher(trust)
    return http(
        timeout_s=settings.timeout_s,
        deadline_s=settings.deadline_s,
        headers=expanded.headers,
        max_bytes=settings.max_bytes,
        max_redirects=settings.max_redirects,
        retries=settings.retries,
        allow_private_addresses=settings.allow_private_addresses,
        secrets=expanded.secrets,
        user_agent=settings.agent,
        robots_agent=settings.agent if settings.robots == "obey" else None,
        proxies=proxies,
        sticky_proxy=settings.sticky,
        proxy_recheck_s=settings.proxy_recheck_s,
        sessions=Sessions(keep=settings.sessions, cookies=settings.cookies, host_cookies=settings.host_cookies),
        ssl_context=trust,
        **options,
    )


def ssl_context_for(settings: FetchSettings, base_dir: Path) -> ssl.SSLContext | str:
    """The certificates the contract's sites may show: the default CAs, and those of ``fetch.ca_file``; or
    why that file cannot be used (checked again here, as fixture_dir is: a symlink may have been swapped in)."""
    if settings.ca_file is None:
        return trusting(None)
    problem = confined_problem("fetch.ca_file", settings.ca_file, Path(base_dir))
    if problem:
        return problem
    try:
        return trusting(str(Path(base_dir) / settings.ca_file))
    except (OSError, ssl.SSLError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        return (f"fetch.ca_file {settings.ca_file!r} is not a readable PEM file of CA certificates ({reason}); "
                "point it at the PEM file of the CA that signed the sites' certificates")


def proxy_endpoints(settings: FetchSettings, environ: Mapping[str, str] | None) -> list[ProxyEndpoint] | str:
    """``fetch.proxies`` with their credentials read from the environment, or what stops that (naming the
    variables, never a value)."""
    import os

    env = os.environ if environ is None else environ
    endpoints, unset = [], []
    for proxy in settings.proxies:
        username = password = None
        if proxy.username_env is not None and proxy.password_env is not None:
            username, password = env.get(proxy.username_env), env.get(proxy.password_env)
            unset += [f"${{{n}}} for proxy {proxy.label}" for n, v in
                      ((proxy.username_env, username), (proxy.password_env, password)) if not v]
        endpoints.append(ProxyEndpoint(proxy.label, proxy.url, username, password))
    if unset:
        return (f"environment variable not set or empty: {', '.join(unset)} (set it where the code location "
                "and its runs execute, or remove username_env/password_env from fetch.proxies)")
    return endpoints


def _provider_for(settings: FetchSettings, environ: Mapping[str, str] | None,
                  jobs: JobBook | None) -> ProviderFetcher | MisconfiguredFetcher:
    from scrape_contracts import settings as environment
    from scrape_contracts.adapters.fetch.provider import ProviderClient, ProviderFetcher

    endpoint = jobs.endpoint if jobs is not None and jobs.endpoint is not None and environ is None else \
        environment.provider_endpoint(environ)
    if isinstance(endpoint, str):
        return MisconfiguredFetcher(f"the provider adapter cannot reach a provider: {endpoint}")
    if jobs is None:
        # without the store a job id could not be recorded before polling: a crash would lose the job
        return MisconfiguredFetcher("the provider adapter records its jobs in the project store, and this "
                                    "caller gave it none (run the contract's scrape or batch job)")
    url, token = endpoint
    options = settings.provider_settings
    return ProviderFetcher(ProviderClient(url, token, timeout_s=settings.timeout_s), jobs,
                           deadline_s=settings.deadline_s, retries=settings.retries,
                           poll_interval_s=options.poll_interval_s,
                           max_poll_interval_s=options.max_poll_interval_s,
                           max_bytes=settings.max_bytes)


def _browser_for(settings: FetchSettings, environ: Mapping[str, str] | None, *, sync: bool,
                 max_pages: int | None = None, proxy_book: ProxyBook | None = None) -> Any:
    # imported here: Playwright is only loaded by contracts that render pages
    from scrape_contracts.adapters.fetch.browser import AsyncBrowserFetcher, BrowserFetcher

    proxies = proxy_endpoints(settings, environ)
    if isinstance(proxies, str):
        return MisconfiguredFetcher(proxies) if sync else InlineAsyncFetcher(MisconfiguredFetcher(proxies))
    options = dict(browser=settings.browser_settings, timeout_s=settings.timeout_s,
                   deadline_s=settings.deadline_s, max_bytes=settings.max_bytes,
                   max_redirects=settings.max_redirects, user_agent=settings.agent,
                   allow_private_addresses=settings.allow_private_addresses, environ=environ,
                   proxies=proxies, sticky_proxy=settings.sticky, proxy_recheck_s=settings.proxy_recheck_s,
                   proxy_book=proxy_book)
    browser = BrowserFetcher(**options) if sync else AsyncBrowserFetcher(max_pages=max_pages, **options)
    if settings.robots != "obey":
        return browser
    # Chromium asks for the target page itself: robots.txt is read over HTTP, behind the same guard, first
    robots = (HttpFetcher if sync else AsyncHttpFetcher)(
        timeout_s=settings.timeout_s, deadline_s=settings.deadline_s, max_bytes=settings.max_bytes,
        max_redirects=settings.max_redirects, retries=settings.retries, user_agent=settings.agent,
        allow_private_addresses=settings.allow_private_addresses, robots_agent=settings.agent,
        proxies=proxies, sticky_proxy=settings.sticky, proxy_recheck_s=settings.proxy_recheck_s)  # none around them
    return RobotsChecked(browser, robots) if sync else AsyncRobotsChecked(browser, robots)


def _robots_error(url: str, refusal: Any) -> FetchError:
    from scrape_contracts.adapters.fetch.messages import robots

    safe_url = redact_url(url)
    return FetchError(f"GET {safe_url} {robots(refusal.detail, None)}", kind=refusal.kind, url=safe_url,
                      transient=refusal.transient)


class RobotsChecked(ClosesOnExit):
    """A fetcher that does not read robots.txt itself (the browser), asking an HTTP fetcher first."""

    def __init__(self, fetcher: Any, robots: HttpFetcher) -> None:
        self.fetcher, self.robots = fetcher, robots

    def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page:
        refusal = self.robots.robots_refusal(url)
        if refusal is not None:
            raise _robots_error(url, refusal)
        return self.fetcher.fetch(url, etag=etag, last_modified=last_modified)

    def close(self) -> None:
        try:
            self.fetcher.close()
        finally:
            self.robots.close()


class AsyncRobotsChecked(AsyncClosesOnExit):
    """``RobotsChecked`` for a batch."""

    def __init__(self, fetcher: Any, robots: AsyncHttpFetcher) -> None:
        self.fetcher, self.robots = fetcher, robots

    async def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page:
        refusal = await self.robots.robots_refusal(url)
        if refusal is not None:
            raise _robots_error(url, refusal)
        return await self.fetcher.fetch(url, etag=etag, last_modified=last_modified)

    async def aclose(self) -> None:
        try:
            await self.fetcher.aclose()
        finally:
            await self.robots.aclose()


def fetcher_for(
    settings: FetchSettings, base_dir: Path, *, environ: Mapping[str, str] | None = None,
    keep_body: bool = False,
    jobs: JobBook | None = None,
    proxy_book: ProxyBook | None = None,
    budgets: SharedBudget | None = None,
) -> Fetcher:
    """The fetcher a contract asks for; ``fixture_dir`` is relative to ``base_dir``, the contract's folder,
    and must stay inside the folders ``contract.paths`` allows (a fetcher whose ``fetch`` raises FetchError
    'invalid_config' otherwise).

    ``${NAME}`` in ``fetch.headers`` values is expanded here, per fetch, from ``environ`` (default
    ``os.environ``), so secrets stay out of the loaded contract and a rotated secret is picked up by the
    next run. An unset or empty variable gives a fetcher whose ``fetch`` raises FetchError
    'invalid_config' naming the header and the variable. ``keep_body``: each HTTP ``Page`` also holds the
    body's bytes (``Page.body``; fixture pages always do). ``jobs``: where the provider adapter records its
    jobs (``adapters.fetch.provider.JobBook``); the other adapters ignore it. ``budgets``: the host
    budgets shared with other processes (``adapters.store.host_budgets`` on a PostgreSQL project store) that
    the HTTP fetcher's requests also take, so that runs side by side keep each site host's limits together;
    the fetcher closes it. ``proxy_book``: where the proxies' health lasts between runs
    (``adapters.fetch.proxy_book``; none: for this fetcher's life).
    """
    pacer = SyncPacer(limits_for(settings), shared=budgets, hold_s=getattr(settings, "deadline_s", 60.0))
    http = functools.partial(HttpFetcher, pacer=pacer, proxy_book=proxy_book)
    options = {"keep_body": True} if keep_body else {}
    return _adapter_for(settings, base_dir, environ, http, jobs, proxy_book, **options)


def async_fetcher_for(
    settings: FetchSettings,
    base_dir: Path,
    *,
    environ: Mapping[str, str] | None = None,
    max_connections: int = 100,
    pacer: AsyncPacer | None = None,
    jobs: JobBook | None = None,
    proxy_book: ProxyBook | None = None,
) -> AsyncFetcher:
    """``fetcher_for`` for a batch: ``await fetcher.fetch(url, etag=, last_modified=)`` from many tasks,
    then ``await fetcher.aclose()`` (or ``async with``). ``max_connections`` is the HTTP pool size (the
    browser adapter: pages rendered at once, at most ``fetch.browser.pages``); keep the number of fetches in
    flight at or below it, or the rest wait for a free connection. ``pacer``: the run's host budgets (default:
    the contract's ``concurrency``/``rate``/``throttle``, for this fetcher's tasks)."""
    if settings.adapter == "browser":
        # one browser per calling process; max_connections bounds its pages as it bounds HTTP connections
        return _browser_for(settings, environ, sync=False, max_pages=max_connections, proxy_book=proxy_book)
    if settings.adapter == "provider":
        from scrape_contracts.adapters.fetch.provider import AsyncProviderFetcher, ProviderFetcher

        provider = _provider_for(settings, environ, jobs)
        if isinstance(provider, ProviderFetcher):
            return AsyncProviderFetcher(provider, max_connections=max_connections)
        return InlineAsyncFetcher(provider)
    http = functools.partial(AsyncHttpFetcher, max_connections=max_connections,
                             pacer=pacer or AsyncPacer(limits_for(settings)), proxy_book=proxy_book)
    fetcher = _adapter_for(settings, base_dir, environ, http)
    return fetcher if isinstance(fetcher, AsyncHttpFetcher) else InlineAsyncFetcher(fetcher)
