"""The fetch deadline, down to the socket: no connect, read or write waits past what is left of it.

httpx's timeouts apply to each network operation, and a read timeout restarts with every byte, so a
server dripping its headers or its body one byte a second never trips one. The client states the
deadline of the exchange under way with ``deadline_within(seconds)``; the streams of these network
backends read it from a context variable (one per thread and per asyncio task) before every operation.
They connect only to the addresses the address guard checked (``connect``).
"""

from __future__ import annotations

import ssl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import httpcore
from httpcore._utils import is_socket_readable

from scrape_contracts.adapters.fetch.connect import addresses_for

_DEADLINE: ContextVar[float | None] = ContextVar("fetch_deadline", default=None)


@contextmanager
def deadline_within(seconds: float) -> Iterator[None]:
    token = _DEADLINE.set(time.monotonic() + seconds)
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def _bounded(timeout: float | None, error: type[Exception]) -> float | None:
    deadline = _DEADLINE.get()
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise error("the fetch deadline passed")
    return left if timeout is None else min(timeout, left)


class TlsHandshakeFailed(httpcore.ConnectError):
    """A TLS handshake failed. ``over_tls``: on a stream that already was TLS, so the handshake was with the
    site at the end of a tunnel through an https:// proxy, not with the proxy."""

    def __init__(self, message: str, *, over_tls: bool) -> None:
        super().__init__(message)
        self.over_tls = over_tls


def handshake_failure(exc: BaseException) -> TlsHandshakeFailed | None:
    """The failed TLS handshake behind ``exc`` (an httpx error), if that is what it was."""
    seen: BaseException | None = exc
    while seen is not None and not isinstance(seen, TlsHandshakeFailed):
        seen = seen.__cause__ or seen.__context__
    return seen


def untrusted_certificate(exc: BaseException) -> str | None:
    """Why the certificate shown was not trusted, when that is what ``exc`` (an httpx error) came to."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return seen.verify_message or str(seen)
        seen = seen.__cause__ or seen.__context__
    return None


class _Stream(httpcore.NetworkStream):
    def __init__(self, stream: httpcore.NetworkStream, *, tls: bool = False) -> None:
        self._stream = stream
        self._tls = tls

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> _Stream:
        timeout = _bounded(timeout, httpcore.ConnectTimeout)
        try:
            return _Stream(self._stream.start_tls(ssl_context, server_hostname, timeout), tls=True)
        except httpcore.ConnectError as exc:
            raise TlsHandshakeFailed(str(exc), over_tls=self._tls) from exc

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self) -> None:
        self._backend = httpcore.SyncBackend()

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, **options: Any) -> _Stream:
        failure: Exception | None = None
        for address in addresses_for(host):
            try:
                bounded = _bounded(timeout, httpcore.ConnectTimeout)
                return _Stream(self._backend.connect_tcp(address, port, bounded, **options))
            except httpcore.ConnectError as exc:
                failure = exc
        assert failure is not None
        raise failure

    def sleep(self, seconds: float) -> None:
        self._backend.sleep(seconds)


class _AsyncStream(httpcore.AsyncNetworkStream):
    def __init__(self, stream: httpcore.AsyncNetworkStream, *, tls: bool = False) -> None:
        self._stream = stream
        self._tls = tls
        self._socket: Any = None

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._stream.read(max_bytes, _bounded(timeout, httpcore.ReadTimeout))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._stream.write(buffer, _bounded(timeout, httpcore.WriteTimeout))

    async def aclose(self) -> None:
        await self._stream.aclose()

    async def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> _AsyncStream:
        timeout = _bounded(timeout, httpcore.ConnectTimeout)
        try:
            return _AsyncStream(await self._stream.start_tls(ssl_context, server_hostname, timeout), tls=True)
        except httpcore.ConnectError as exc:
            raise TlsHandshakeFailed(str(exc), over_tls=self._tls) from exc

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable":
            # asked of every idle connection taken from the pool (a server may have closed it): httpcore's
            # answer looks the socket up through anyio's typed attributes each time, 3% of a fetch's CPU;
            # the socket of a stream never changes, so it is looked up once and tested the same way
            if self._socket is None:
                self._socket = self._stream.get_extra_info("socket")
            return is_socket_readable(self._socket)
        return self._stream.get_extra_info(info)


class AsyncDeadlineBackend(httpcore.AsyncNetworkBackend):
    def __init__(self) -> None:
        self._backend = httpcore.AnyIOBackend()

    async def connect_tcp(
        self, host: str, port: int, timeout: float | None = None, **options: Any
    ) -> _AsyncStream:
        failure: Exception | None = None
        for address in addresses_for(host):
            try:
                bounded = _bounded(timeout, httpcore.ConnectTimeout)
                return _AsyncStream(await self._backend.connect_tcp(address, port, bounded, **options))
            except httpcore.ConnectError as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)
