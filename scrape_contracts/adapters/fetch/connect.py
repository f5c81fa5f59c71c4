"""Where a connection goes: to the addresses the address guard checked, never to a fresh DNS answer.

The guard resolves a host name and checks every address; if the HTTP client then resolved the name again,
a name server answering a public address first and 127.0.0.1 second (DNS rebinding) would get the fetch
through to the loopback. The client states the checked addresses of the exchange under way with
``pinned_to(url, addresses)``; the network backends (``deadline``) connect to those addresses only. The
Host header and TLS (SNI and certificate check) still use the host name: httpcore takes them from the URL,
not from the socket.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar

import httpcore
import httpx

# (host as httpcore passes it to connect_tcp, checked addresses) for the exchange under way
_PINNED: ContextVar[tuple[str, tuple[str, ...]] | None] = ContextVar("fetch_pinned", default=None)


@contextmanager
def pinned_to(url: str, addresses: Sequence[str] | None) -> Iterator[None]:
    """Connections opened inside go to ``addresses`` (None: the host is a literal IP or exempt from the
    check, and is connected to as named)."""
    if addresses is None:
        token = _PINNED.set(None)
    else:
        token = _PINNED.set((httpx.URL(url).raw_host.decode("ascii"), tuple(addresses)))
    try:
        yield
    finally:
        _PINNED.reset(token)


def addresses_for(host: str) -> tuple[str, ...]:
    """The addresses to try for ``host``: the checked ones, or the host itself when nothing was pinned."""
    pinned = _PINNED.get()
    if pinned is None:
        return (host,)
    checked_host, addresses = pinned
    if host != checked_host:
        # one exchange is one origin; anything else would be a connection nobody checked
        raise httpcore.ConnectError(
            f"refusing to connect to {host!r}: the address check was for {checked_host!r}"
        )
    return addresses
