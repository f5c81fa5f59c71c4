"""A SOCKS5 proxy on loopback that logs every tunnel it was asked for (RFC 1928, with RFC 1929's user name
and password authentication); not a mock: the fetchers speak SOCKS5 to it through a socket, as to Dante or
a provider's gateway.

``SocksProxy(name, credentials=, failing=)``: with ``credentials`` it accepts only user name and password
authentication with those; while ``failing`` it answers every CONNECT with "general SOCKS server failure".
``proxy.log`` holds one ``Tunnel`` per request: the destination as the client sent it (a host name is passed
on as a name: the proxy resolves it), whether the credentials came, and the reply code it sent.
"""

from __future__ import annotations

import ipaddress
import socket
import socketserver
import struct
import threading
from dataclasses import dataclass

from scrape_contracts_tests.proxy_site import relay

SUCCEEDED, GENERAL_FAILURE, REFUSED, NOT_SUPPORTED = 0, 1, 5, 7
_NO_AUTH, _USER_PASSWORD, _NO_ACCEPTABLE = 0x00, 0x02, 0xFF


@dataclass(frozen=True)
class Tunnel:
    proxy: str
    destination: str  # host:port as the client asked for it
    authorized: bool  # authenticated with the expected credentials (True when none are expected)
    reply: int  # the SOCKS5 reply code sent (0: succeeded); -1: the client was turned away before a CONNECT


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


class SocksProxy:
    def __init__(self, name: str, *, credentials: tuple[str, str] | None = None, failing: bool = False) -> None:
        self.name, self.credentials, self.failing = name, credentials, failing
        self.log: list[Tunnel] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.owner = self  # type: ignore[attr-defined]
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"socks5://127.0.0.1:{self.port}"

    def tunnels(self, reply: int | None = None) -> list[Tunnel]:
        with self._lock:
            return [t for t in self.log if reply is None or t.reply == reply]

    def _record(self, destination: str, authorized: bool, reply: int) -> None:
        with self._lock:
            self.log.append(Tunnel(self.name, destination, authorized, reply))

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> SocksProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        part = sock.recv(n - len(data))
        if not part:
            raise ConnectionError("the client hung up")
        data += part
    return data


class _Handler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        proxy: SocksProxy = self.server.owner  # type: ignore[attr-defined]
        sock: socket.socket = self.request
        try:
            authorized = self._authenticate(proxy, sock)
            if authorized is None:
                return
            version, command, _, kind = _exactly(sock, 4)
            if kind == 1:
                host = str(ipaddress.IPv4Address(_exactly(sock, 4)))
            elif kind == 4:
                host = str(ipaddress.IPv6Address(_exactly(sock, 16)))
            else:
                host = _exactly(sock, _exactly(sock, 1)[0]).decode("idna")
            port = struct.unpack("!H", _exactly(sock, 2))[0]
            destination = f"{host}:{port}"
            if version != 5 or command != 1:
                return self._reply(proxy, sock, destination, authorized, NOT_SUPPORTED)
            if proxy.failing:
                return self._reply(proxy, sock, destination, authorized, GENERAL_FAILURE)
            try:
                upstream = socket.create_connection((host, port), timeout=10)
            except OSError:
                return self._reply(proxy, sock, destination, authorized, REFUSED)
            with upstream:
                self._reply(proxy, sock, destination, authorized, SUCCEEDED)
                relay(sock, upstream)
        except (ConnectionError, OSError):
            pass

    def _authenticate(self, proxy: SocksProxy, sock: socket.socket) -> bool | None:
        version, count = _exactly(sock, 2)
        methods = set(_exactly(sock, count))
        wanted = _NO_AUTH if proxy.credentials is None else _USER_PASSWORD
        if version != 5 or wanted not in methods:
            proxy._record("", False, -1)  # before the answer: the client may look at the log as soon as it has it
            sock.sendall(bytes([5, _NO_ACCEPTABLE]))
            return None
        sock.sendall(bytes([5, wanted]))
        if proxy.credentials is None:
            return True
        _, length = _exactly(sock, 2)
        user = _exactly(sock, length).decode()
        password = _exactly(sock, _exactly(sock, 1)[0]).decode()
        ok = (user, password) == proxy.credentials
        if not ok:
            proxy._record("", False, -1)
        sock.sendall(bytes([1, 0 if ok else 1]))
        return True if ok else None

    def _reply(self, proxy: SocksProxy, sock: socket.socket, destination: str, authorized: bool, code: int) -> None:
        proxy._record(destination, authorized, code)
        # the bound address is not used by clients that only relay: zeros
        sock.sendall(bytes([5, code, 0, 1]) + bytes(4) + struct.pack("!H", 0))
