"""Forward proxies on loopback and a site that hands out a session cookie, both logging what they saw.

Not mocks: the fetchers speak HTTP to them through sockets, as to a Squid and a shop. A ``ForwardProxy``
takes absolute-form requests (``GET http://site/path``) and opens ``CONNECT host:port`` tunnels (relaying
the bytes both ways: the TLS inside is the client's and the site's), may ask for credentials (407), answers
502 while it is ``failing`` (or for its first ``fail_first`` requests), waits ``delay_s`` before forwarding
(``slow``), and logs every request it received: which proxy, which method and URL (``host:port`` for a
CONNECT), what it answered, whether the credentials came.
``refused_port()`` is a port nobody listens on (a proxy that refuses connections). ``SessionSite`` serves
product pages, sets ``sid`` on an answer to a request that brought none, and logs the Cookie header each
request brought; with ``tls`` (an ``ssl.SSLContext``, see ``site_certificate``) it serves HTTPS.
"""

from __future__ import annotations

import base64
import datetime
import http.client
import http.server
import ipaddress
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
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
    method: str = "GET"


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    tls: ssl.SSLContext | None = None

    def finish_request(self, request, client_address) -> None:  # noqa: ANN001 (the base's signature)
        if self.tls is not None:
            # the handshake in the connection's own thread, not in the accepting one
            try:
                request = self.tls.wrap_socket(request, server_side=True)
            except (ssl.SSLError, OSError):
                return  # a client that did not trust the certificate hung up: nothing to serve
        super().finish_request(request, client_address)


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
    def _start(self, handler: type[http.server.BaseHTTPRequestHandler], tls: ssl.SSLContext | None = None) -> None:
        self._server = _Server(("127.0.0.1", 0), handler)
        self._server.tls = tls
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
                 credentials: tuple[str, str] | None = None, tls: ssl.SSLContext | None = None) -> None:
        self.name, self.failing, self.fail_first, self.delay_s = name, failing, fail_first, delay_s
        self.log: list[Carried] = []
        self._lock = threading.Lock()
        self.ask_for(credentials)
        self.scheme = "http" if tls is None else "https"  # https: TLS to the proxy itself
        self._start(_ProxyHandler, tls)

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    def ask_for(self, credentials: tuple[str, str] | None) -> None:
        """From now on, answer 407 unless these come (None: ask for none)."""
        with self._lock:
            self._expected = None if credentials is None else \
                "Basic " + base64.b64encode(f"{credentials[0]}:{credentials[1]}".encode()).decode()

    def carried(self, status: int | None = None) -> list[Carried]:
        with self._lock:
            return [c for c in self.log if status is None or c.status == status]

    def _record(self, url: str, status: int, authorized: bool, method: str = "GET") -> None:
        with self._lock:
            self.log.append(Carried(self.name, url, status, authorized, time.monotonic(), method))


class _ProxyHandler(_Quiet):
    def _verdict(self) -> tuple[ForwardProxy, bool, bool]:
        proxy: ForwardProxy = self.server.owner  # type: ignore[attr-defined]
        authorized = proxy._expected is None or self.headers.get("Proxy-Authorization") == proxy._expected
        with proxy._lock:
            failing = proxy.failing or len(proxy.log) < proxy.fail_first
        return proxy, authorized, failing

    def do_CONNECT(self) -> None:  # noqa: N802 (the base's name)
        proxy, authorized, failing = self._verdict()
        host, _, port = self.path.rpartition(":")
        if not authorized:
            proxy._record(self.path, 407, authorized, "CONNECT")
            self._send(407, b"credentials needed", [("Proxy-Authenticate", 'Basic realm="test"')])
            return
        if failing or not port.isdigit():
            proxy._record(self.path, 502, authorized, "CONNECT")
            self._send(502, b"bad gateway (this proxy is failing)")
            return
        try:
            upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=10)
        except OSError as exc:
            proxy._record(self.path, 502, authorized, "CONNECT")
            self._send(502, f"could not reach {self.path}: {exc}".encode())
            return
        proxy._record(self.path, 200, authorized, "CONNECT")
        self.send_response(200, "Connection established")
        self.end_headers()
        self.wfile.flush()
        self.close_connection = True
        with upstream:
            relay(self.connection, upstream)

    def do_GET(self) -> None:  # noqa: N802 (the base's name)
        proxy, authorized, failing = self._verdict()
        url = self.path
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


def relay(client: socket.socket, upstream: socket.socket) -> None:
    """Bytes both ways until either side closes (the client sends nothing before the tunnel is open: no
    buffered data)."""
    with selectors.DefaultSelector() as selector:
        selector.register(client, selectors.EVENT_READ, upstream)
        selector.register(upstream, selectors.EVENT_READ, client)
        while True:
            for key, _ in selector.select(timeout=30):
                try:
                    data = key.fileobj.recv(1 << 16)  # type: ignore[union-attr]
                    if not data:
                        return
                    key.data.sendall(data)
                except OSError:
                    return


def site_certificate(folder: Path) -> tuple[Path, ssl.SSLContext]:
    """A CA made for this test (its PEM file, the ``fetch.ca_file`` to trust) and the TLS context of a site
    whose certificate it signed, for 127.0.0.1 and localhost."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, site_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "scrape-contracts test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    site = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(site_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    folder.mkdir(parents=True, exist_ok=True)
    ca_file, chain, key = folder / "test-ca.pem", folder / "site.pem", folder / "site.key"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    chain.write_bytes(site.public_bytes(serialization.Encoding.PEM))
    key.write_bytes(site_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return ca_file, site_context(folder)


def site_context(folder: Path) -> ssl.SSLContext:
    """A server's TLS context with the certificate ``site_certificate`` made in ``folder`` (another server on
    127.0.0.1, a proxy, may show it too)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "site.pem", folder / "site.key")
    return context


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

    def __init__(self, page: Callable[[str], str], *, delay_s: float = 0.0, tls: ssl.SSLContext | None = None) -> None:
        self.page, self.delay_s = page, delay_s
        self.scheme = "http" if tls is None else "https"
        self.visits: list[Visit] = []
        self._lock = threading.Lock()
        self._sessions = 0
        self._start(_SiteHandler, tls)

    def url(self, path: str) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}{path}"

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
