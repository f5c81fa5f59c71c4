"""The address guard in front of the browser: a forward proxy on 127.0.0.1 that every request goes through.

Playwright's request routing does not see the hops of a redirect, nor requests of service workers, nor
WebSockets; a proxy sees all of them, because Chromium opens every connection through it (plain HTTP as
absolute-form requests, HTTPS and WebSockets as ``CONNECT`` tunnels). Each request is checked with the
same ``AddressGuard`` as the http adapter and connected to the addresses the guard checked (never to a
fresh DNS answer, so DNS rebinding cannot slip past), or refused with a 403 and recorded. One proxy serves
one page render, so its refusals and byte count belong to that page.

With an ``upstream`` (one of the contract's ``fetch.proxies``, chosen for the render), each request the
guard allows goes on through that forward proxy instead of straight to the site, as the http adapter's do:
tunnels as a ``CONNECT`` to it, plain HTTP in absolute form, with its credentials (``Proxy-Authorization``,
never shown). The guard still checks the target first; the only connection made is to the proxy, which the
contract names. ``upstream_fault`` says why the proxy failed a request (the first such), for its health.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from scrape_contracts.adapters.fetch.urls import redact_url
from scrape_contracts.adapters.netguard import OPT_IN_HINT, AddressBlocked, AddressGuard, ResolutionFailed
from scrape_contracts.adapters.proxies import ProxyEndpoint

MAX_HEAD_BYTES = 64 * 1024
_PIPE_CHUNK = 64 * 1024
# hop-by-hop headers of the client-proxy leg; the origin gets a request of its own
# on the proxy's own 403: tells a refusal by the guard from a 403 of the site
REFUSED_HEADER = "X-Scrape-Contracts-Guard"
_PROXY_HEADERS = (b"proxy-connection:", b"proxy-authorization:", b"connection:", b"keep-alive:")

Check = Callable[[str], Awaitable[tuple[str, ...] | None]]


@dataclass(frozen=True)
class Refusal:
    """A request of the page that the guard refused (the URL with credentials redacted, and why)."""

    url: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        return {"url": self.url, "reason": self.reason}


class TransferLimit(Exception):
    pass


class GuardProxy:
    """``async with GuardProxy(guard, max_transfer_bytes) as proxy:`` then point a browser context at
    ``proxy.server``. ``refusals`` lists the requests refused, ``received`` counts the bytes the origins
    sent; past ``max_transfer_bytes`` every connection is cut and ``over_limit`` is set."""

    def __init__(self, guard: AddressGuard, max_transfer_bytes: int, connect_timeout_s: float, *,
                 upstream: ProxyEndpoint | None = None, tls: ssl.SSLContext | None = None) -> None:
        self._guard = guard
        self.upstream, self._tls = upstream, tls
        self.upstream_fault: str | None = None
        self.max_transfer_bytes = max_transfer_bytes
        self.connect_timeout_s = connect_timeout_s
        self.refusals: list[Refusal] = []
        self.received = 0
        self.over_limit = False
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def server(self) -> str:
        assert self._server is not None, "the proxy is started by `async with`"
        host, port = self._server.sockets[0].getsockname()[:2]
        return f"http://{host}:{port}"

    async def __aenter__(self) -> GuardProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        with contextlib.suppress(Exception):
            await self._server.wait_closed()

    async def _check(self, url: str) -> tuple[str, ...] | None:
        # the guard resolves names with getaddrinfo: off the loop, so a slow DNS answer delays one request
        return await asyncio.get_running_loop().run_in_executor(None, self._guard.check, url)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._handle(reader, writer)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, TransferLimit, ValueError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > MAX_HEAD_BYTES:
            return
        request_line, _, rest = head.partition(b"\r\n")
        method, target, version = request_line.decode("latin-1").split(" ", 2)
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            # the guard checks URLs; a tunnel (HTTPS, WebSocket) names only host and port
            url, label = f"https://{target}/", f"CONNECT {target}"
            forward = b""
        else:
            url = label = target
            host, port, path = _split_absolute(target)
            headers = [line for line in rest.split(b"\r\n")
                       if line and not line.lower().startswith(_PROXY_HEADERS)]
            # to a forward proxy the absolute form (it connects to the site); to the site, the origin form
            start = f"{method} {target if self.upstream else path} {version}\r\n".encode("latin-1")
            forward = (start + b"".join(line + b"\r\n" for line in headers) + self._authorization()
                       + b"Connection: close\r\n\r\n")
        addresses = await self._allowed(url, label)
        if addresses is False:
            writer.write(b"HTTP/1.1 403 Forbidden\r\n" + REFUSED_HEADER.encode() + b": refused\r\n"
                         b"Content-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
            return
        if self.upstream is not None:
            upstream = await self._through_upstream(target if method == "CONNECT" else None)
        else:
            upstream = await self._connect(addresses or (host.strip("[]"),), int(port))
        if upstream is None:
            writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
            return
        up_reader, up_writer = upstream
        try:
            if method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
                await writer.drain()
            else:
                up_writer.write(forward)
            await asyncio.gather(self._pipe(reader, up_writer, count=False),
                                 self._pipe(up_reader, writer, count=True))
        finally:
            up_writer.close()

    async def _allowed(self, url: str, label: str) -> tuple[str, ...] | None | bool:
        """The addresses to connect to (None: as named), or False when the guard refused (recorded as
        ``label``: the URL, or ``CONNECT host:port`` for a tunnel)."""
        try:
            return await self._check(url)
        except AddressBlocked as exc:
            hint = f" ({OPT_IN_HINT})" if exc.opt_in_helps else ""
            self.refusals.append(Refusal(redact_url(label), f"{exc}{hint}"))
        except ResolutionFailed as exc:
            self.refusals.append(Refusal(redact_url(label), str(exc)))
        return False

    async def _connect(self, addresses: Sequence[str], port: int
                       ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        for address in addresses:
            try:
                return await asyncio.wait_for(asyncio.open_connection(address, port), self.connect_timeout_s)
            except (OSError, asyncio.TimeoutError):
                continue
        return None

    def _authorization(self) -> bytes:
        proxy = self.upstream
        if proxy is None or proxy.username is None or proxy.password is None:
            return b""
        token = base64.b64encode(f"{proxy.username}:{proxy.password}".encode()).decode("ascii")
        return f"Proxy-Authorization: Basic {token}\r\n".encode("ascii")

    async def _through_upstream(self, tunnel: str | None
                                ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection to the upstream proxy; for ``tunnel`` (``host:port``), one its CONNECT opened."""
        from urllib.parse import urlsplit

        assert self.upstream is not None
        parts = urlsplit(self.upstream.url)
        secure = parts.scheme == "https"
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(
                parts.hostname, parts.port or (443 if secure else 80),
                ssl=(self._tls or ssl.create_default_context()) if secure else None), self.connect_timeout_s)
        except (OSError, asyncio.TimeoutError, ssl.SSLError) as exc:
            self._upstream_failed(f"could not be reached ({type(exc).__name__}: {exc})")
            return None
        if tunnel is None:
            return reader, writer
        writer.write(f"CONNECT {tunnel} HTTP/1.1\r\nHost: {tunnel}\r\n".encode("latin-1")
                     + self._authorization() + b"\r\n")
        try:
            await writer.drain()
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.connect_timeout_s)
            status = int(head.split(b" ", 2)[1])
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                ValueError, IndexError):
            status = 0
        if status == 200:
            return reader, writer
        writer.close()
        if status == 407:
            self._upstream_failed("answered 407 Proxy Authentication Required (check the environment "
                                  "variables its username_env and password_env name)")
        else:
            self._upstream_failed(f"refused the tunnel to {tunnel}" + (f" ({status})" if status else ""))
        return None

    def _upstream_failed(self, why: str) -> None:
        if self.upstream_fault is None:
            self.upstream_fault = why

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter, *, count: bool) -> None:
        try:
            while True:
                data = await source.read(_PIPE_CHUNK)
                if not data:
                    break
                if count:
                    self.received += len(data)
                    if self.received > self.max_transfer_bytes:
                        self.over_limit = True
                        raise TransferLimit()
                sink.write(data)
                await sink.drain()
        finally:
            # one side is done: the other must not wait on a connection nobody will use again
            with contextlib.suppress(Exception):
                if sink.can_write_eof():
                    sink.write_eof()
                else:
                    sink.close()
            if count:
                sink.close()


def _split_absolute(target: str) -> tuple[str, str, str]:
    """(host, port, origin-form path) of an absolute-form ``http://host:port/path?query`` request target."""
    from urllib.parse import urlsplit

    parts = urlsplit(target)
    if parts.scheme.lower() != "http" or not parts.hostname:
        raise ValueError(f"not an absolute http URL: {target!r}")
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return parts.hostname, str(parts.port or 80), path
