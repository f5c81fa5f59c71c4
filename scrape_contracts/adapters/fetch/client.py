"""What the sync and the async HTTP fetcher share: settings, policy, address guard, client options."""

from __future__ import annotations

import functools
import ssl
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import httpx

from scrape_contracts.adapters.fetch.body import ACCEPT_ENCODING
from scrape_contracts.adapters.fetch.policy import FetchPolicy, retry_after_seconds
from scrape_contracts.adapters.fetch.secrets import Scrubber
from scrape_contracts.adapters.netguard import AddressGuard, Resolver


@functools.cache
def default_ssl_context() -> ssl.SSLContext:
    """httpx's default verification, built once: loading the CA bundle costs ~20 ms per fetcher otherwise."""
    return httpx.create_ssl_context()


class _Cookies(httpx.Cookies):
    """The client's cookie jar, which reads a response only when it sets a cookie.

    httpx hands every response to the jar, which wraps it and its request in urllib objects to look for
    Set-Cookie headers: 7% of an async fetch's CPU on pages that set none. The jar keeps and sends the
    cookies a site sets exactly as before; a response without Set-Cookie or Set-Cookie2 would add none.
    """

    def extract_cookies(self, response: httpx.Response) -> None:
        headers = response.headers
        if "set-cookie" in headers or "set-cookie2" in headers:
            super().extract_cookies(response)


class HttpFetcherBase:
    """Settings of an HTTP fetcher. ``sleep``, ``clock`` (monotonic) and ``wall_clock`` (for Retry-After
    dates) are injectable so tests can observe waits instead of waiting; ``max_connections`` sizes the
    connection pool. ``pacer``: the hosts' budgets each attempt waits its turn with (adapters/fetch/pace.py;
    none: no limit but the pool); ``robots_agent``: obey robots.txt for this user agent (none: not read)."""

    @staticmethod
    def _default_sleep(seconds: float) -> Any:
        raise NotImplementedError

    def __init__(
        self,
        *,
        timeout_s: float = 10.0,
        headers: Mapping[str, str] | None = None,
        max_bytes: int = 5_000_000,
        max_redirects: int = 5,
        retries: int = 2,
        allow_private_addresses: bool = False,
        deadline_s: float = 60.0,
        backoff_s: float = 0.5,
        user_agent: str = "scrape-contracts/0.1",
        allowed_hosts: Iterable[str] = (),
        resolver: Callable[[str], Any] | None = None,
        secrets: Iterable[str] = (),
        max_connections: int = 100,
        sleep: Callable[[float], Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
        keep_body: bool = False,
        pacer: Any = None,
        robots_agent: str | None = None,
    ) -> None:
        if max_connections < 1:
            raise ValueError("max_connections must be at least 1")
        caller_headers = dict(headers or {})
        self.policy = FetchPolicy(
            timeout_s=timeout_s,
            max_bytes=max_bytes,
            max_redirects=max_redirects,
            retries=retries,
            deadline_s=deadline_s,
            backoff_s=backoff_s,
            headers=caller_headers,
            # ``secrets``: values substituted into the headers (see fetcher_for); listed on their own so a
            # short token inside "Bearer <token>" is scrubbed even when a server echoes only the token
            scrub=Scrubber([*caller_headers.values(), *secrets]),
            clock=clock,
            wall_clock=wall_clock,
            keep_body=keep_body,
        )
        self.allow_private_addresses = allow_private_addresses
        self.max_connections = max_connections
        self.pacer = pacer
        self.robots_agent = robots_agent
        self._robots: dict[str, Any] = {}  # host → its rules (a future of them, in the async fetcher)
        self._clock = clock
        self._sleep = sleep or self._default_sleep
        self._guard = AddressGuard(
            allow_private=allow_private_addresses,
            allowed_hosts=allowed_hosts,
            resolver=self._guard_resolver(resolver),
        )
        # trust_env=False: proxy variables and ~/.netrc must not silently change where requests go
        # (the address guard checks the target, not a proxy) or add credentials.
        self._client = self._open_client(
            max_connections,
            timeout=httpx.Timeout(timeout_s),
            follow_redirects=False,
            trust_env=False,
            headers={
                "User-Agent": user_agent,
                "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
                "Accept-Encoding": ACCEPT_ENCODING,
            },
        )

        # (httpx keeps the jar in ``_cookies`` and reads it through the ``cookies`` property: if a release
        # renamed it, this would only be slower again, never send or keep other cookies)
        self._client._cookies = _Cookies(self._client.cookies)

    def _give_back(self, ticket: Any, answer: Any) -> None:  # None: what the caller holds now
        """An attempt's slot back to the pacer, with what it learnt of the host (status, Retry-After)."""
        status = getattr(answer, "status", None)
        retry_after = None
        if status in (429, 503):
            retry_after = retry_after_seconds(answer.headers.get("retry-after"), now=self.policy.wall_clock())
        self.pacer.give_back(ticket, status, retry_after)

    def _guard_resolver(self, resolver: Callable[[str], Any] | None) -> Resolver | None:
        return resolver

    def _open_client(self, max_connections: int, **options: Any) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        # header names only: values are credentials as often as not
        policy = self.policy
        return (
            f"{type(self).__name__}(timeout_s={policy.timeout_s}, max_bytes={policy.max_bytes}, "
            f"max_redirects={policy.max_redirects}, retries={policy.retries}, "
            f"deadline_s={policy.deadline_s}, allow_private_addresses={self.allow_private_addresses}, "
            f"max_connections={self.max_connections}, header_names={sorted(policy.headers)})"
        )
