"""A real HTTP server on 127.0.0.1 serving fixture pages that a test can change between runs.

Not a mock: requests go through sockets, httpx and the http adapter exactly as in production.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Response:
    status: int = 200
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Request:
    method: str
    path: str
    headers: dict[str, str]
    client_port: int = 0  # the caller's TCP port: the same port, the same (kept-alive) connection


Handler = Callable[[Request], Response]


class FixtureSite:
    """``site.set_page("/p/1", "<html>...")``; ``site.url("/p/1")``; ``site.requests_to("/p/1")``."""

    def __init__(self) -> None:
        self._routes: dict[str, Handler] = {}
        self._lock = threading.Lock()
        self.requests: list[Request] = []
        site = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # buffered: headers and body leave in one write (two small writes on a keep-alive connection
            # meet Nagle and delayed ACK: ~40 ms per request); handle_one_request flushes at the end
            wbufsize = -1

            def do_GET(self) -> None:  # noqa: N802 (http.server naming)
                request = Request("GET", self.path, {k.lower(): v for k, v in self.headers.items()},
                                  self.client_address[1])
                with site._lock:
                    site.requests.append(request)
                    handler = site._routes.get(self.path.split("#")[0])
                response = handler(request) if handler else Response(404, b"not found")
                if response.status == -1:  # never answer: the caller's timeout must fire
                    threading.Event().wait(60)
                    return
                self.send_response(response.status)
                headers = {"Content-Type": "text/html; charset=utf-8", **response.headers}
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(response.body)))
                self.end_headers()
                try:
                    self.wfile.write(response.body)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        # a short poll keeps close() fast: shutdown waits for serve_forever to notice
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def set_page(
        self, path: str, body: str | bytes, status: int = 200, headers: dict[str, str] | None = None
    ) -> None:
        data = body.encode("utf-8") if isinstance(body, str) else body
        response = Response(status, data, dict(headers or {}))
        self.set_handler(path, lambda _request: response)

    def set_handler(self, path: str, handler: Handler) -> None:
        with self._lock:
            self._routes[path] = handler

    def requests_to(self, path: str) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.path == path]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FixtureSite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
