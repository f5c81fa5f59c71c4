"""httpx transports over httpcore with a network backend of our choosing (``deadline``), which
``httpx.HTTPTransport`` does not let us pass; and the httpcore-to-httpx error mapping they share."""

from __future__ import annotations

import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx

from scrape_contracts.adapters.fetch.deadline import DeadlineBackend

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
