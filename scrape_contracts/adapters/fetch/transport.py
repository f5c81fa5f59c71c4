"""httpx transports over httpcore with a network backend of our choosing (``deadline``), which
``httpx.HTTPTransport`` does not let us pass; and the httpcore-to-httpx error mapping they share.

``SyncTransport`` connects to the sites; ``ProxyTransport`` / ``AsyncProxyTransport`` go through one forward
proxy (httpcore's proxy pools: absolute-form requests for http:// targets, CONNECT for https://; a socks5://
proxy's SOCKS5 CONNECT for both, the ``socksio`` package), one per proxy of a contract (adapters/proxies.py).
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx

from scrape_contracts.adapters.fetch.deadline import AsyncDeadlineBackend, DeadlineBackend

# httpcore's exceptions as httpx raises them, most specific first (the names match one to one)
_EXCEPTIONS: tuple[tuple[type[Exception], type[Exception]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
    (httpcore.ProxyError, httpx.ProxyError),
)


@contextmanager
def as_httpx_errors() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        for core, mapped in _EXCEPTIONS:
            if isinstance(exc, core):
                raise mapped(str(exc)) from exc
        raise



def core_request(request: httpx.Request) -> httpcore.Request:
    url = request.url
    return httpcore.Request(
        method=request.method,
        url=httpcore.URL(scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path),
        headers=request.headers.raw,
        content=request.stream,
        extensions=request.extensions,
    )


class _Body(httpx.SyncByteStream):
    def __init__(self, stream: Iterator[bytes] | Any) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        with as_httpx_errors():
            yield from self._stream

    def close(self) -> None:
        with as_httpx_errors():
            self._stream.close()


class SyncTransport(httpx.BaseTransport):
    """httpcore's connection pool (thread-safe) over connections that honour the fetch deadline."""

    def __init__(
        self, *, max_connections: int, ssl_context: ssl.SSLContext, keepalive_expiry: float = 5.0
    ) -> None:
        self._pool = httpcore.ConnectionPool(
            ssl_context=ssl_context,
            max_connections=max_connections,
            # every connection the pool may open is worth keeping: the next fetch to that host reuses it
            max_keepalive_connections=max_connections,
            keepalive_expiry=keepalive_expiry,
            network_backend=DeadlineBackend(),
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        with as_httpx_errors():
            response = self._pool.handle_request(core_request(request))
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_Body(response.stream),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._pool.close()


class _AsyncBody(httpx.AsyncByteStream):
    def __init__(self, stream: Any) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with as_httpx_errors():
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        with as_httpx_errors():
            await self._stream.aclose()


def _proxy_options(url: str, username: str | None, password: str | None,
                   ssl_context: ssl.SSLContext) -> dict[str, Any]:
    options = {"proxy_url": url, "proxy_auth": (username, password or "") if username is not None else None,
               "ssl_context": ssl_context}
    if url.startswith("https://"):
        options["proxy_ssl_context"] = ssl_context  # one trust for the sites and the proxy: a ca_file CA may sign either
    return options


class ProxyTransport(SyncTransport):
    """``SyncTransport`` through the forward proxy at ``url`` (no credentials in it; ``username`` and
    ``password`` go in Proxy-Authorization, or in SOCKS5's user name and password authentication)."""

    def __init__(self, url: str, *, username: str | None, password: str | None, max_connections: int,
                 ssl_context: ssl.SSLContext, keepalive_expiry: float = 5.0) -> None:
        pool = httpcore.SOCKSProxy if url.startswith("socks5://") else httpcore.HTTPProxy
        self._pool = pool(
            **_proxy_options(url, username, password, ssl_context), max_connections=max_connections,
            max_keepalive_connections=max_connections, keepalive_expiry=keepalive_expiry,
            network_backend=DeadlineBackend())


class AsyncProxyTransport(httpx.AsyncBaseTransport):
    """``ProxyTransport`` for the async fetcher. httpcore's own pool, not ``AsyncPool``: one proxy carries a
    share of a run's requests, so its cost per request (it grows with the connections) is paid on fewer."""

    def __init__(self, url: str, *, username: str | None, password: str | None, max_connections: int,
                 ssl_context: ssl.SSLContext, keepalive_expiry: float = 5.0) -> None:
        pool = httpcore.AsyncSOCKSProxy if url.startswith("socks5://") else httpcore.AsyncHTTPProxy
        self._pool = pool(
            **_proxy_options(url, username, password, ssl_context), max_connections=max_connections,
            max_keepalive_connections=max_connections, keepalive_expiry=keepalive_expiry,
            network_backend=AsyncDeadlineBackend())

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        with as_httpx_errors():
            response = await self._pool.handle_async_request(core_request(request))
        return httpx.Response(status_code=response.status, headers=response.headers,
                              stream=_AsyncBody(response.stream), extensions=response.extensions)

    async def aclose(self) -> None:
        await self._pool.aclose()
