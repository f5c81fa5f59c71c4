"""How the doors are put on the network: request size limits, the HTTP server's settings, the bind warning.

Both ``serve`` (the REST API) and ``mcp --transport http`` go through ``server_config``: uvicorn with its h11
parser, whose limit on a request's line and headers is ours (the httptools parser uvicorn picks by default
has none, and accepted 100 KB of headers), and ``RequestLimits``, which refuses headers and a body that are
too large before anything reads the body, before authentication too: a caller without a token must not be
able to make the process hold 100 MB.
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from scrape_contracts import settings

# ASGI callables (scope, receive, send); typed loosely, as the servers that call them do
Scope = dict[str, Any]


class RequestLimits:
    """Answer 431 to a request whose line and headers are larger than ``max_header_bytes`` and 413 to one
    whose body is larger than ``max_body_bytes``, before the application sees either.

    The parser's own limit (``server_config``) only bounds headers that arrive in pieces; a request that
    arrives whole is measured here. A declared ``Content-Length`` over the limit is refused without reading a
    byte of the body; a body without one (chunked) is read here, and reading stops with 413 at the first
    chunk past the limit, so no more than ``max_body_bytes`` of a request is ever held. The application then
    reads the body from here.
    """

    def __init__(self, app: Any, max_body_bytes: int, max_header_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_body_bytes
        self.max_header_bytes = max_header_bytes

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = scope.get("headers") or []
        size = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"") + sum(
            len(name) + len(value) + 4 for name, value in headers)
        if size > self.max_header_bytes:
            await _refuse(send, 431, f"request line and headers larger than {self.max_header_bytes} bytes "
                                     "(SCRAPE_CONTRACTS_API_MAX_HEADER_BYTES)")
            return
        declared = dict(headers).get(b"content-length")
        if declared is not None and (not declared.strip().isdigit() or int(declared) > self.max_bytes):
            await _too_large(send, self.max_bytes)
            return
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away before it finished sending
                return
            body += message.get("body", b"")
            if len(body) > self.max_bytes:
                await _too_large(send, self.max_bytes)
                return
            if not message.get("more_body", False):
                break
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": bytes(body), "more_body": False}
            return await receive()  # after the body: the disconnect a stream waits for

        await self.app(scope, replay, send)


async def _too_large(send: Any, max_bytes: int) -> None:
    await _refuse(send, 413, f"request body larger than {max_bytes} bytes (SCRAPE_CONTRACTS_API_MAX_BODY_BYTES)")


async def _refuse(send: Any, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    # Connection: close: the rest of the request is never read, so this connection cannot carry another one
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            (b"connection", b"close")]})
    await send({"type": "http.response.body", "body": body})


def server_config(app: Any, host: str, port: int) -> Any:  # -> uvicorn.Config
    import uvicorn

    return uvicorn.Config(app, host=host, port=port, log_level="warning", http="h11",
                          h11_max_incomplete_event_size=settings.api_max_header_bytes())


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def bind_warning(host: str, command: str) -> str | None:
    """What to print when a door listens beyond this machine: tokens would cross the network in clear text."""
    if is_loopback(host):
        return None
    return (f"warning: `{command}` listens on {host}, beyond this machine, over plain HTTP: API tokens cross the "
            "network in clear text. Keep it on 127.0.0.1 behind a reverse proxy that terminates TLS "
            "(docs/api.md, \"TLS\").")
