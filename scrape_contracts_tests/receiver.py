"""A real HTTP receiver on 127.0.0.1 for outgoing events: records every POST, answers as scripted.

Stands in for a team's webhook endpoint, and for Slack's and Telegram's APIs (which cannot be reached
from here): the tests check the request shape each real API documents, not what our code happens to send.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


class Receiver:
    """``receiver.script(503, 503, 200)`` answers the next three POSTs so (then 200 for ever).

    ``check``: called on every request first; a status it returns is the answer (e.g. 401 for a signature that
    does not verify), None lets the script answer."""

    def __init__(self, host: str = "127.0.0.1", check: Callable[[Received], int | None] | None = None) -> None:
        self.received: list[Received] = []
        self.check = check
        self.hold_seconds = 0.0  # wait this long before answering (a slow receiver; a sender killed meanwhile)
        self.answer_bytes = 0  # a body of this many bytes instead of {"ok": ...} (a hostile receiver)
        self.drip_seconds = 0.0  # send the body one byte at a time, this long apart
        self.written: list[int] = []  # body bytes each answer got out before the sender hung up
        self._script: deque[tuple[int, dict[str, str]]] = deque()
        self._lock = threading.Lock()
        receiver = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server naming)
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                got = Received(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                refused = receiver.check(got) if receiver.check else None
                with receiver._lock:
                    receiver.received.append(got)
                    status, headers = receiver._script.popleft() if receiver._script else (200, {})
                if refused is not None:
                    status, headers = refused, {}
                answer = b'{"ok": true}' if status < 300 else b'{"ok": false}'
                if receiver.answer_bytes:
                    answer = b"x" * receiver.answer_bytes
                deadline = time.monotonic() + receiver.hold_seconds
                while time.monotonic() < deadline and receiver.hold_seconds:
                    time.sleep(0.05)
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(answer)))
                self.end_headers()
                receiver.written.append(self._write(answer))

            def _write(self, answer: bytes) -> int:
                step = 1 if receiver.drip_seconds else 1 << 16
                written = 0
                try:
                    for start in range(0, len(answer), step):
                        self.wfile.write(answer[start:start + step])
                        self.wfile.flush()
                        written += len(answer[start:start + step])
                        if receiver.drip_seconds:
                            time.sleep(receiver.drip_seconds)
                except OSError:  # the sender hung up
                    self.close_connection = True
                return written

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer((host, 0), _Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)
        self._thread.start()

    def script(self, *statuses: int | tuple[int, dict[str, str]]) -> None:
        with self._lock:
            self._script.extend(s if isinstance(s, tuple) else (s, {}) for s in statuses)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> Receiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
