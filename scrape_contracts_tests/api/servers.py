"""Real servers for the front door's tests: ``scrape-contracts serve`` as its own process on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "scrape-contracts"), "--contracts-dir", str(REPO / "contracts"), *args],
                          env=env or dict(os.environ), capture_output=True, text=True, timeout=120)


def tokens():  # -> TokenStore of the store DAGSTER_HOME / SCRAPE_CONTRACTS_DB_URL point at
    from scrape_contracts import settings
    from scrape_contracts.adapters.store import ProjectStore
    from scrape_contracts.api.tokens import TokenStore

    return TokenStore(ProjectStore(settings.db_url()).engine)


def new_token(owner: str, scope: str) -> str:
    """A token made in this process (test_tokens.py runs the CLI; here it would cost a process start)."""
    return tokens().create(owner, scope)[1]


# a bound against a hang, not an expectation: the command's start (imports, the definitions) took over 60 s
# at load 30; a server that exits says so at once (its log)
START_S = 180


class ApiServer:
    """``scrape-contracts serve`` on a free port, with the current environment (DAGSTER_HOME); stopped by PID."""

    def __init__(self, home: Path, contracts_dir: Path = REPO / "contracts") -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = home / f"api-{self.port}.log"
        self.contracts_dir = contracts_dir
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> ApiServer:
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [str(BIN / "scrape-contracts"), "--contracts-dir", str(self.contracts_dir), "serve",
                 "--port", str(self.port)], stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ))
        deadline = time.monotonic() + START_S
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log.read_text()
            try:
                if httpx.get(f"{self.url}/health/live", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                time.sleep(0.1)
        raise AssertionError(f"the API did not start: {self.log.read_text()}")

    def __exit__(self, *exc: object) -> None:
        assert self.process is not None
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)


class ThreadedApi:
    """An app served by uvicorn on 127.0.0.1 in a thread of the test, with the settings ``serve`` uses: a real
    HTTP server without a process start (the API's tests on PostgreSQL open its front door in-process)."""

    def __init__(self, app: object, port: int | None = None) -> None:
        self.app = app
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ThreadedApi:
        import threading

        import uvicorn

        from scrape_contracts.api.serving import server_config

        self.server = uvicorn.Server(server_config(self.app, "127.0.0.1", self.port))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + START_S
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "the API did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)


def oversized_posts(port: int, path: str, *, limit_mb: int = 100) -> tuple[bytes, bytes, int]:
    """Two POSTs of ``limit_mb`` MB to ``path`` without a token, as raw HTTP: one declaring its length (no
    byte of the body is sent), one chunked (sent until the server answers). The two answers' first bytes, and
    how much of the chunked body the server let in before answering."""
    head = f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall((head + f"Content-Length: {limit_mb * 1024 * 1024}\r\n\r\n").encode())
        declared = sock.recv(65536)
    sent = 0
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall((head + "Transfer-Encoding: chunked\r\n\r\n").encode())
        chunk = b"10000\r\n" + b"x" * 0x10000 + b"\r\n"
        answer = b""
        try:
            while sent < limit_mb * 1024 * 1024:
                sock.sendall(chunk)
                sent += 0x10000
                sock.setblocking(False)
                try:
                    answer = sock.recv(65536)
                except BlockingIOError:
                    pass
                finally:
                    sock.setblocking(True)
                if answer:
                    break
        except (BrokenPipeError, ConnectionResetError):
            pass
        answer = answer or sock.recv(65536)
    return declared, answer, sent
