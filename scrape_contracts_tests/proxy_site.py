"""Forward proxies on loopback and a site that hands out a session cookie, both logging what they saw.

Not mocks: the fetchers speak HTTP to them through sockets, as to a Squid and a shop. A ``ForwardProxy``
takes absolute-form requests (``GET http://site/path``), may ask for credentials (407), answers 502 while
it is ``failing`` (or for its first ``fail_first`` requests), waits ``delay_s`` before forwarding (``slow``),
and logs every request it received: which proxy, which URL, what it answered, whether the credentials came.
``refused_port()`` is a port nobody listens on (a proxy that refuses connections). ``SessionSite`` serves
product pages, sets ``sid`` on an answer to a request that brought none, and logs the Cookie header each
request brought.
"""

from __future__ import annotations

import base64
import http.client
import http.server
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

_HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
                         "trailer", "transfer-encoding", "upgrade", "proxy-connection"})


@dataclass(frozen=True)
class Carried:
    proxy: str
    url: str
    status: int
    authorized: bool  # the request brought the credentials this proxy expects (True when it expects none)
    at: float  # time.monotonic() when it came


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class _Quiet(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base's name)
        pass

    def _send(self, status: int, body: bytes, headers: list[tuple[str, str]] = ()) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class _Serving:
    def _start(self, handler: type[http.server.BaseHTTPRequestHandler]) -> None:
        self._server = _Server(("127.0.0.1", 0), handler)
        self._server.owner = self  # type: ignore[attr-defined]
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self):  # noqa: ANN204
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class ForwardProxy(_Serving):
    def __init__(self, name: str, *, failing: bool = False, fail_first: int = 0, delay_s: float = 0.0,
                 credentials: tuple[str, str] | None = None) -> None:
        self.name, self.failing, self.fail_first, self.delay_s = name, failing, fail_first, delay_s
        self._expected = None if credentials is None else \
            "Basic " + base64.b64encode(f"{credentials[0]}:{credentials[1]}".encode()).decode()
        self.log: list[Carried] = []
        self._lock = threading.Lock()
        self._start(_ProxyHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def carried(self, status: int | None = None) -> list[Carried]:
        with self._lock:
            return [c for c in self.log if status is None or c.status == status]

    def _record(self, url: str, status: int, authorized: bool) -> None:
        with self._lock:
            self.log.append(Carried(self.name, url, status, authorized, time.monotonic()))


class _ProxyHandler(_Quiet):
    def do_GET(self) -> None:  # noqa: N802 (the base's name)
        proxy: ForwardProxy = self.server.owner  # type: ignore[attr-defined]
        url = self.path
        authorized = proxy._expected is None or self.headers.get("Proxy-Authorization") == proxy._expected
        with proxy._lock:
            failing = proxy.failing or len(proxy.log) < proxy.fail_first
        if not url.startswith("http://"):
            status, body, headers = 400, b"absolute-form requests only", []
        elif not authorized:
            status, body, headers = 407, b"credentials needed", [("Proxy-Authenticate", 'Basic realm="test"')]
        elif failing:
            status, body, headers = 502, b"bad gateway (this proxy is failing)", []
        else:
            if proxy.delay_s:
                time.sleep(proxy.delay_s)  # the slow proxy: its answers leave this much later, by construction
            status, body, headers = self._forward(url)
        proxy._record(url, status, authorized)
        self._send(status, body, headers)

    def _forward(self, url: str) -> tuple[int, bytes, list[tuple[str, str]]]:
        parts = urlsplit(url)
        connection = http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=10)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
            connection.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""), headers=headers)
            answer = connection.getresponse()
            body = answer.read()
            kept = [(k, v) for k, v in answer.getheaders() if k.lower() not in _HOP_BY_HOP | {"content-length"}]
            return answer.status, body, kept
        except OSError as exc:
            return 502, f"could not reach {parts.netloc}: {exc}".encode(), []
        finally:
            connection.close()


def refused_port() -> int:
    """A loopback port nobody listens on: connecting to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass(frozen=True)
class Visit:
    path: str
    cookie: str  # the Cookie header as it came ("" when none)
    set_cookie: str  # what the answer set ("" when nothing)


class SessionSite(_Serving):
    """``SessionSite(page, delay_s=)``: ``page(path) -> html``, each page answered ``delay_s`` after it was
    asked; ``site.url(path)``; ``site.visits``."""

    def __init__(self, page: Callable[[str], str], *, delay_s: float = 0.0) -> None:
        self.page, self.delay_s = page, delay_s
        self.visits: list[Visit] = []
        self._lock = threading.Lock()
        self._sessions = 0
        self._start(_SiteHandler)

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def _new_session(self) -> str:
        with self._lock:
            self._sessions += 1
            return f"s{self._sessions}"


class _SiteHandler(_Quiet):
    def do_GET(self) -> None:  # noqa: N802
        site: SessionSite = self.server.owner  # type: ignore[attr-defined]
        cookie = self.headers.get("Cookie", "")
        headers = [("Content-Type", "text/html; charset=utf-8")]
        set_cookie = ""
        if "sid=" not in cookie:
            set_cookie = f"sid={site._new_session()}; Path=/; HttpOnly"
            headers.append(("Set-Cookie", set_cookie))
        with site._lock:
            site.visits.append(Visit(self.path, cookie, set_cookie))
        if site.delay_s and self.path != "/robots.txt":
            time.sleep(site.delay_s)  # a sweep lasts at least this per page and slot, however fast the machine
        if self.path == "/robots.txt":
            self._send(404, b"", headers)
            return
        self._send(200, site.page(self.path).encode(), headers)
