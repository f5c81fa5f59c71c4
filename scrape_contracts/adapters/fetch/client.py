"""What the sync and the async HTTP fetcher share: settings, policy, address guard, client options."""

from __future__ import annotations

import contextlib
import functools
import ssl
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from scrape_contracts.adapters.fetch.body import ACCEPT_ENCODING
from scrape_contracts.adapters.fetch.cookies import NoCookies, Sessions
from scrape_contracts.adapters.fetch.deadline import handshake_failure
from scrape_contracts.adapters.fetch.exchange import Exchange
from scrape_contracts.adapters.fetch.policy import FetchPolicy, retry_after_seconds
from scrape_contracts.adapters.fetch.secrets import Scrubber
from scrape_contracts.adapters.netguard import AddressGuard, Resolver
from scrape_contracts.adapters.proxies import Fault, ProxyChoice, ProxyEndpoint, ProxyPool
from scrape_contracts.adapters.fetch.robots import host_key

class ProxyRefused(httpx.ProxyError):
    """The proxy itself said no (407): its fault, named, already worded for the contract's author."""


_ASKED_FOR_CREDENTIALS = ("proxy {name} answered 407 Proxy Authentication Required to {to} (check the "
                          "environment variables its username_env and password_env name)")

# how httpcore words a SOCKS5 proxy's refusal of the credentials (or of the way they were offered)
_SOCKS_AUTH_REFUSED = ("Invalid username/password", "Requested ")
_SOCKS_CREDENTIALS = ("SOCKS5 proxy {name} refused the credentials ({said}; check the environment variables its "
                      "username_env and password_env name, or set them if it asks for credentials)")

# answers a forward proxy gives when it, not the site, could not do its part
_GATEWAY_STATUSES = frozenset({502, 504})


@dataclass
class _Carried:
    """One attempt through ``proxy`` (None: direct): when it started, and what it said of the proxy."""

    proxy: ProxyChoice | None
    started: float
    fault: Fault = Fault.NONE


@functools.cache
def default_ssl_context() -> ssl.SSLContext:
    """httpx's default verification, built once: loading the CA bundle costs ~20 ms per fetcher otherwise."""
    return httpx.create_ssl_context()


def trusting(ca_file: str | None) -> ssl.SSLContext:
    """The default verification, also trusting the CA certificates in the PEM file ``ca_file`` (None: the
    default alone). Raises OSError or ssl.SSLError when the file cannot be read as certificates."""
    if ca_file is None:
        return default_ssl_context()
    context = httpx.create_ssl_context()
    context.load_verify_locations(cafile=ca_file)
    return context


class HttpFetcherBase:
    """Settings of an HTTP fetcher. ``sleep``, ``clock`` (monotonic) and ``wall_clock`` (for Retry-After
    dates) are injectable so tests can observe waits instead of waiting; ``max_connections`` sizes the
    connection pool. ``pacer``: the hosts' budgets each attempt waits its turn with (adapters/fetch/pace.py;
    none: no limit but the pool); ``robots_agent``: obey robots.txt for this user agent (none: not read).
    ``proxies``: every request goes through one of them (adapters/proxies.py: rotation, ``sticky_proxy`` per
    site host, quarantine and a re-check after ``proxy_recheck_s``), their health read from ``proxy_book``
    when the fetcher is made and written back when it closes (none: for this fetcher's life); ``sessions``: the cookie jars per site
    host (default: keep what each host sets, for this fetcher's life)."""

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
        proxies: Sequence[ProxyEndpoint] = (),
        sticky_proxy: bool = False,
        proxy_recheck_s: float = 30.0,
        sessions: Sessions | None = None,
        ssl_context: ssl.SSLContext | None = None,
        proxy_book: Any = None,
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
            scrub=Scrubber([*caller_headers.values(), *secrets,
                            *(v for p in proxies for v in (p.username, p.password) if v)]),
            clock=clock,
            wall_clock=wall_clock,
            keep_body=keep_body,
        )
        self.allow_private_addresses = allow_private_addresses
        self.max_connections = max_connections
        self.pacer = pacer
        self.robots_agent = robots_agent
        self.proxies = ProxyPool(proxies, sticky=sticky_proxy, recheck_s=proxy_recheck_s, clock=clock) \
            if proxies else None
        # where the proxies' health lasts between runs (adapters/fetch/proxy_book.py): read now, written at close
        self.proxy_book = proxy_book if proxies else None
        if self.proxy_book is not None:
            self.proxies.restore(self.proxy_book.load())
        self.sessions = sessions or Sessions()
        # which certificates the sites (and https:// proxies) may show; verification is never off
        self.ssl_context = ssl_context or default_ssl_context()
        self._robots: dict[str, Any] = {}  # host → its rules (a future of them, in the async fetcher)
        self._clock = clock
        self._sleep = sleep or self._default_sleep
        self._guard = AddressGuard(
            allow_private=allow_private_addresses,
            allowed_hosts=allowed_hosts,
            resolver=self._guard_resolver(resolver),
        )
        # trust_env=False: proxy variables and ~/.netrc must not silently change where requests go
        # (the address guard checks the target; the contract names its proxies) or add credentials.
        options = dict(
            timeout=httpx.Timeout(timeout_s),
            follow_redirects=False,
            trust_env=False,
            headers={
                "User-Agent": user_agent,
                "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
                "Accept-Encoding": ACCEPT_ENCODING,
            },
        )
        # one client per proxy (a client has one transport), else one to the sites: None
        self._clients: dict[str | None, Any] = {
            p.name: self._open_proxy_client(p, max_connections, **options) for p in proxies
        } if proxies else {None: self._open_client(max_connections, **options)}
        self._client = next(iter(self._clients.values()))
        for client in self._clients.values():
            # the fetcher's Sessions keep the cookies, whichever client carried the answer that set them
            client._cookies = NoCookies()

    def _route(self, exchange: Exchange) -> tuple[Any, ProxyChoice | None]:
        """The client for this attempt, and the proxy carrying it (recorded on the attempt)."""
        if self.proxies is None:
            return self._clients[None], None
        choice = self.proxies.choose(host_key(exchange.url))
        exchange.via(choice.name)
        return self._clients[choice.name], choice

    def _proxy_failure(self, choice: ProxyChoice, exc: Exception) -> tuple[Fault, Exception]:
        """What ``exc`` says of the proxy, and the error the policy is given: the proxy's own failures become
        ``httpx.ProxyError`` naming it (the policy retries them at once, through another proxy)."""
        name = choice.name
        handshake = handshake_failure(exc)
        if handshake is not None and (handshake.over_tls or not self.proxies.endpoint(name).url.startswith("https://")):
            # the handshake with the site, inside the tunnel the proxy opened: the proxy did its part
            return Fault.NONE, exc
        if isinstance(exc, ProxyRefused):
            return Fault.HARD, exc
        if isinstance(exc, httpx.ProxyError):  # its answer to CONNECT (HTTP or SOCKS5)
            if str(exc).startswith("407"):
                return Fault.HARD, ProxyRefused(_ASKED_FOR_CREDENTIALS.format(name=name, to="a CONNECT"))
            if str(exc).startswith(_SOCKS_AUTH_REFUSED):
                return Fault.HARD, ProxyRefused(_SOCKS_CREDENTIALS.format(name=name, said=exc))
            return Fault.SOFT, httpx.ProxyError(f"proxy {name} refused the tunnel: {exc}")
        if isinstance(exc, httpx.ConnectError):  # the only connection made is to the proxy
            return Fault.HARD, httpx.ProxyError(f"proxy {name} could not be reached: {exc}")
        if isinstance(exc, httpx.TransportError):
            return Fault.SOFT, exc
        return Fault.NONE, exc

    def _proxy_answer(self, choice: ProxyChoice, status: int) -> Fault:
        if status == 407:
            raise ProxyRefused(_ASKED_FOR_CREDENTIALS.format(name=choice.name, to="the request"))
        return Fault.SOFT if status in _GATEWAY_STATUSES else Fault.NONE

    @contextlib.contextmanager
    def _carried(self, choice: ProxyChoice | None) -> Iterator[_Carried]:
        """Around one attempt's exchange (both fetchers): what it says of the proxy that carried it, reported
        to the pool when it ends; the proxy's own failures raised as ``httpx.ProxyError`` naming it."""
        # latency is measured, not decided, so it is read on the real clock whatever ``clock`` the run injects
        carried = _Carried(choice, time.monotonic())
        try:
            yield carried
        except Exception as exc:
            if choice is None:
                raise
            carried.fault, error = self._proxy_failure(choice, exc)
            if error is not exc:
                raise error from None
            raise
        finally:
            if choice is not None and self.proxies is not None:
                self.proxies.report(choice, carried.fault, time.monotonic() - carried.started)

    def proxy_health(self) -> list[dict[str, object]]:
        """Per proxy of this fetcher's run: requests, failures, quarantine, score (no credentials)."""
        return self.proxies.health() if self.proxies is not None else []

    def _save_proxy_health(self) -> None:
        """What lasts of the proxies' health, for the next run (once: a second close writes nothing)."""
        book, self.proxy_book = self.proxy_book, None
        if book is not None and self.proxies is not None:
            book.save(self.proxies.saved(), self.proxies.health())

    def _give_back(self, ticket: Any, answer: Any, *, about_host: bool = True) -> None:  # None: held now
        """An attempt's slot back to the pacer, with what it learnt of the host (status, Retry-After);
        ``about_host`` False: the attempt failed at its proxy, which says nothing of the host."""
        status = getattr(answer, "status", None)
        retry_after = None
        if status in (429, 503):
            retry_after = retry_after_seconds(answer.headers.get("retry-after"), now=self.policy.wall_clock())
        self.pacer.give_back(ticket, status, retry_after, about_host=about_host)

    def _guard_resolver(self, resolver: Callable[[str], Any] | None) -> Resolver | None:
        return resolver

    def _open_client(self, max_connections: int, **options: Any) -> Any:
        raise NotImplementedError

    def _open_proxy_client(self, proxy: ProxyEndpoint, max_connections: int, **options: Any) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        # header names only: values are credentials as often as not
        policy = self.policy
        return (
            f"{type(self).__name__}(timeout_s={policy.timeout_s}, max_bytes={policy.max_bytes}, "
            f"max_redirects={policy.max_redirects}, retries={policy.retries}, "
            f"deadline_s={policy.deadline_s}, allow_private_addresses={self.allow_private_addresses}, "
            f"max_connections={self.max_connections}, header_names={sorted(policy.headers)}, "
            f"proxies={self.proxies.names if self.proxies else []})"
        )
