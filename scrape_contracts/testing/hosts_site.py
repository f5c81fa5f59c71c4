"""Several site hosts on loopback addresses (127.0.0.2, 127.0.0.3, ...), each its own HTTP/1.1 server, that
log every request: which host, which path, when it started and ended, what it answered, who asked.

Not a mock: requests go through sockets and the product's fetchers as in production. Each host answers
after its own latency, may hold requests until enough are in flight at once (so a test can see that a
concurrency is reached without timing it), serves a robots.txt, scripted answers per path (a 503 with
Retry-After first, then the page) and ETag/If-None-Match → 304. Used by the politeness tests, by
benchmarks/politeness.py and, served from a network namespace of its own (``enter``), by the multi-host
harness (``scrape_contracts.testing.netns``) and benchmarks/multihost.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Seen:
    host: str
    path: str
    start: float  # time.monotonic() on the server
    end: float
    status: int
    agent: str
    client: str = ""  # the address the request came from: which worker host asked


@dataclass
class HostPlan:
    latency_s: float = 0.0  # every answer (robots.txt too) leaves this long after the request came
    robots: str | None = None  # None: robots.txt is 404
    robots_status: int = 200
    # hold the pages until this many of the host's requests are in flight at once (then no more holding), or
    # until hold_timeout_s: the test sees a concurrency reached (``reached``) without timing anything
    hold_for: int = 0
    hold_timeout_s: float = 10.0
    # path → answers for its first requests, in order: (status, headers); then the page
    scripted: dict[str, list[tuple[int, dict[str, str]]]] = field(default_factory=dict)
    # path → seconds: since ``reset()``, its first request is a 503 with that Retry-After, and so is every
    # request before those seconds have passed (a client that ignores Retry-After gets 503s again)
    busy: dict[str, float] = field(default_factory=dict)
    page: Callable[[str], str] = lambda path: f"<html><body><h1 id='title'>{path}</h1></body></html>"


class _Host:
    def __init__(self, address: str, plan: HostPlan) -> None:
        self.address, self.plan = address, plan
        self.in_flight = 0
        self.peak = 0
        self.reached = False
        self.busy_since: dict[str, float] = {}
        self.changed: asyncio.Condition | None = None
        self.server: asyncio.AbstractServer | None = None
        self.port = 0


class HostsSite:
    """``HostsSite({"127.0.0.2": HostPlan(latency_s=0.1), ...})``; ``site.url("127.0.0.2", "/p/1")``;
    ``site.seen`` (the log), ``site.peak(host)`` (most requests in flight at once)."""

    def __init__(self, plans: dict[str, HostPlan], *, enter: Callable[[], None] | None = None,
                 hold: Callable[[str, str], threading.Event | None] | None = None) -> None:
        # ``hold(client, path)``: an event the answer waits for (in a thread, the other requests go on), or
        # None; a test holds one client's pages while it stops that client's machine
        self._hold = hold
        # ``enter`` runs in the serving thread before any socket is made: e.g. joining a network namespace,
        # which on Linux is per thread, so the test's other threads stay where they are
        self._enter = enter
        self._error: BaseException | None = None
        self.hosts = {address: _Host(address, plan) for address, plan in plans.items()}
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()
        if not self._ready.wait(10) or self._error is not None:
            raise RuntimeError(f"the hosts did not start: {self._error}") from self._error

    # -- the test's side ----------------------------------------------------------------------------------
    def url(self, host: str, path: str) -> str:
        return f"http://{host}:{self.hosts[host].port}{path}"

    def peak(self, host: str) -> int:
        return self.hosts[host].peak

    def reached(self, host: str) -> bool:
        """Whether the host's ``hold_for`` requests were in flight at once."""
        return self.hosts[host].reached

    def requests(self, host: str | None = None, path: str | None = None) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if (host is None or s.host == host) and (path is None or s.path == path)]

    def reset(self) -> None:
        """Forget the log and the peaks (scripted answers already given stay given)."""
        with self._lock:
            self.seen.clear()
        for host in self.hosts.values():
            host.peak = 0
            host.busy_since.clear()

    def close(self) -> None:
        async def stop() -> None:
            for host in self.hosts.values():
                if host.server is not None:
                    host.server.close()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    def __enter__(self) -> HostsSite:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the server's side --------------------------------------------------------------------------------
    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            for host in self.hosts.values():
                host.changed = asyncio.Condition()
                host.server = await asyncio.start_server(
                    lambda r, w, h=host: self._connection(h, r, w), host.address, 0, backlog=512)
                host.port = host.server.sockets[0].getsockname()[1]

        try:
            if self._enter is not None:
                self._enter()
            self._loop.run_until_complete(start())
        except BaseException as exc:  # noqa: BLE001 (raised by the constructor, in the test's thread)
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        self._loop.run_forever()

    async def _connection(self, host: _Host, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        client = str(peer[0]) if peer else ""
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path = lines[0].split(" ")[:2]
                headers = {k.strip().lower(): v.strip() for k, v in (x.split(":", 1) for x in lines[1:] if ":" in x)}
                status, extra, body = await self._answer(host, path, headers, client)
                reason = {200: "OK", 304: "Not Modified", 404: "Not Found", 429: "Too Many Requests",
                          503: "Service Unavailable"}.get(status, "Status")
                out = [f"HTTP/1.1 {status} {reason}", f"Content-Length: {len(body)}",
                       "Content-Type: text/html; charset=utf-8"] + [f"{k}: {v}" for k, v in extra.items()]
                writer.write(("\r\n".join(out) + "\r\n\r\n").encode() + (body if method == "GET" else b""))
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def _answer(self, host: _Host, path: str, headers: dict[str, str],
                      client: str) -> tuple[int, dict[str, str], bytes]:
        plan, start = host.plan, time.monotonic()
        assert host.changed is not None
        host.in_flight += 1
        host.peak = max(host.peak, host.in_flight)
        if plan.hold_for and host.in_flight >= plan.hold_for:
            host.reached = True
        async with host.changed:
            host.changed.notify_all()
        status, extra, body = 200, {}, b""
        try:
            gate = self._hold(client, path) if self._hold is not None and path != "/robots.txt" else None
            if gate is not None and not gate.is_set():
                await asyncio.to_thread(gate.wait)
            if path == "/robots.txt":
                status = plan.robots_status if plan.robots is not None else 404
                body = (plan.robots or "").encode()
            else:
                if plan.hold_for and not host.reached:
                    async with host.changed:
                        try:
                            await asyncio.wait_for(host.changed.wait_for(lambda: host.reached),
                                                   plan.hold_timeout_s)
                        except asyncio.TimeoutError:
                            pass
                script = plan.scripted.get(path)
                busy_for = plan.busy.get(path)
                since = host.busy_since.setdefault(path, start) if busy_for else 0.0
                if script:
                    status, extra = script.pop(0)
                elif busy_for and start - since < busy_for:
                    status, extra = 503, {"Retry-After": str(max(1, round(busy_for - (start - since))))}
                else:
                    body = plan.page(path).encode()
                    etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
                    extra = {"ETag": etag}
                    if headers.get("if-none-match") == etag:
                        status, body = 304, b""
            wait = plan.latency_s - (time.monotonic() - start)
            if wait > 0:
                await asyncio.sleep(wait)  # the host's own latency: what the benchmark is bound by
            return status, extra, body
        finally:
            host.in_flight -= 1
            with self._lock:
                self.seen.append(Seen(host.address, path, start, time.monotonic(), status,
                                      headers.get("user-agent", ""), client))
