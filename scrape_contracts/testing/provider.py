"""A local stand-in for a hosted scraping API, for the tests and the demo.

Hosted scraping providers (Bright Data's scraper API, Zyte API, ScrapingBee and the like) cannot run on this
machine, so this HTTP server plays one: it implements the job protocol the ``provider`` fetch adapter speaks
(docs/providers.md), fetches the target page itself when a job is polled to completion, and charges a cost
per job. It is a stand-in, not a provider: what it promises is the protocol, and its knobs make it misbehave
the ways a real one does (slow jobs, failed jobs, polls that go unanswered, a submit accepted whose answer is
lost).

The protocol (every request carries ``Authorization: Bearer <token>``; 401 without it):

- ``POST /v1/jobs`` ``{"url": ..., "label": ...}`` → 201 ``{"job_id", "status": "queued", "cost"}``: the job
  is accepted and charged now (``cost``, in the account's currency);
- ``GET /v1/jobs/<id>`` → 200 ``{"job_id", "status": queued|running|done|failed, "cost", "error"?}``, with
  ``Retry-After`` (seconds) while it is not finished; 404 for a job the provider does not know;
- ``GET /v1/jobs/<id>/result`` → 200 ``{"url", "status", "headers", "body", "encoding"}`` of a done job
  (409 before);
- ``GET /v1/jobs?label=...`` → ``{"jobs": [...]}``: what a person finds in the provider's dashboard;
- optional, repairs: ``POST /v1/repairs`` ``{"url", "label", "job_id", "fields": {name: {"selector", "type",
  "last_value"}}}`` → 201 ``{"repair_id", "status": "queued", "cost"}`` (charged now); ``GET /v1/repairs/<id>``
  → ``{"repair_id", "status", "cost", "error"?, "proposal": {"selectors": {name: selector}, "values": {name:
  value}}}`` once done. A provider without repairs answers 404 (``supports_repair = False`` here).

A real provider's repair looks at the page with its own tools; this stand-in does not: it proposes what the
test told it to (``repair_selectors``: a correct selector, or a wrong one), and reads the value that selector
gives on the job's page, as a provider's proposal would say.

Run it for the demo: ``python -m scrape_contracts.testing.provider --port 8765 --token demo-token``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx

from scrape_contracts.testing.provider_repairs import StandInRepair, read_values


@dataclass
class StandInJob:
    job_id: str
    url: str
    label: str
    cost: float
    status: str = "queued"
    polls: int = 0
    error: str | None = None
    result: dict[str, Any] | None = None

    def shown(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "url": self.url, "label": self.label, "status": self.status,
                "cost": self.cost, **({"error": self.error} if self.error else {})}


@dataclass
class HeldSubmit:
    """A submit the stand-in accepted (the job exists) and does not answer until ``release``: the window in
    which a test kills the caller, between the provider creating the job and the caller learning its id."""

    created: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)
    job_id: str | None = None

    def release(self) -> None:
        self.released.set()


class StandInProvider:
    """``with StandInProvider(token="t") as provider:`` serves on 127.0.0.1; ``provider.url``.

    Knobs (change them between or during runs):

    - ``polls_until_done``: status polls that answer ``running`` before a job is done (slow jobs);
    - ``stall_polls``: the next n status polls get no answer at all (the caller's timeout fires);
    - ``fail``: URL (or a part of one) → error: jobs for it end ``failed`` with that error;
    - ``lose_submits``: the next n submits create their job, then close the connection unanswered;
    - ``hold_next_submit()``: the next submit creates its job and waits for ``release()`` before answering;
    - ``cost_per_job`` and ``costs`` (URL → cost): what each job is charged;
    - ``refund_failed``: a failed job's cost goes back to 0;
    - ``before_poll``: called with the job id before a status poll is answered (a test looks at its store);
    - repairs: ``supports_repair`` (False: 404, as a provider without repairs); ``repair_selectors`` (field →
      the selector proposed: the test's choice, correct or wrong; a field not in it gets no proposal);
      ``repair_fail`` (an error: repairs end ``failed`` with it); ``repair_cost``; ``repair_polls_until_done``.

    ``log`` has every request (method, path, job id, URL); ``submits()`` the submits among them, ``repair_requests()``
    the repair requests.
    """

    def __init__(self, *, token: str = "stand-in-token", cost_per_job: float = 0.01,
                 polls_until_done: int = 1, port: int = 0, fetch_timeout_s: float = 10.0) -> None:
        self.token = token
        self.cost_per_job = cost_per_job
        self.costs: dict[str, float] = {}
        self.polls_until_done = polls_until_done
        self.stall_polls = 0
        self.lose_submits = 0
        self.fail: dict[str, str] = {}
        self.refund_failed = False
        self.fetch_timeout_s = fetch_timeout_s
        self.before_poll: Callable[[str], None] | None = None
        self.jobs: dict[str, StandInJob] = {}
        self.supports_repair = True
        self.repair_selectors: dict[str, str] = {}
        self.repair_fail: str | None = None
        self.repair_cost = 0.05
        self.repair_polls_until_done = 1
        self.repairs: dict[str, StandInRepair] = {}
        self.log: list[dict[str, Any]] = []
        self._held: list[HeldSubmit] = []
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    # ---- the test's side ------------------------------------------------------------------------
    def __enter__(self) -> StandInProvider:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._closing.set()  # held submits and stalled polls let go
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def hold_next_submit(self) -> HeldSubmit:
        held = HeldSubmit()
        with self._lock:
            self._held.append(held)
        return held

    def submits(self) -> list[dict[str, Any]]:
        with self._lock:
            return [entry for entry in self.log if entry["method"] == "POST" and entry["path"] == "/v1/jobs"]

    def repair_requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return [entry for entry in self.log if entry["method"] == "POST" and entry["path"] == "/v1/repairs"]

    def polls(self, job_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.log if e["method"] == "GET" and e["path"] == f"/v1/jobs/{job_id}"]

    def wait_for(self, what: str, condition: Callable[[], bool], timeout: float = 60.0) -> None:
        """Until ``condition()`` holds (a test waits on the provider's state, never on the clock)."""
        deadline = time.monotonic() + timeout
        while not condition():
            if time.monotonic() > deadline:
                raise AssertionError(f"the stand-in provider: {what} did not happen within {timeout:g}s")
            time.sleep(0.02)

    # ---- the protocol ---------------------------------------------------------------------------
    def submit(self, body: dict[str, Any]) -> tuple[StandInJob, HeldSubmit | None, bool]:
        url = str(body.get("url") or "")
        with self._lock:
            job = StandInJob(f"job-{next(self._ids):06d}", url, str(body.get("label") or ""),
                             self.costs.get(url, self.cost_per_job))
            self.jobs[job.job_id] = job
            held = self._held.pop(0) if self._held else None
            lose = self.lose_submits > 0
            if lose:
                self.lose_submits -= 1
        if held is not None:
            held.job_id = job.job_id
            held.created.set()
        return job, held, lose

    def poll(self, job_id: str) -> tuple[StandInJob | None, bool]:
        """(the job after this poll, whether this poll goes unanswered)."""
        with self._lock:
            job = self.jobs.get(job_id)
            if job is None:
                return None, False
            if self.stall_polls > 0:
                self.stall_polls -= 1
                return job, True
            job.polls += 1
            finishing = job.status in ("queued", "running") and job.polls >= self.polls_until_done
            if not finishing and job.status == "queued":
                job.status = "running"
        if finishing:
            self._finish(job)
        return job, False

    def _finish(self, job: StandInJob) -> None:
        failure = next((error for part, error in self.fail.items() if part in job.url), None)
        if failure is None:
            try:
                response = httpx.get(job.url, timeout=self.fetch_timeout_s, follow_redirects=True)
            except httpx.HTTPError as exc:
                failure = f"the provider could not fetch the page: {type(exc).__name__}"
            else:
                result = {"url": str(response.url), "status": response.status_code,
                          "headers": {"content-type": response.headers.get("content-type", "")},
                          "body": response.text, "encoding": response.encoding}
        with self._lock:
            if failure is None:
                job.status, job.result = "done", result
            else:
                job.status, job.error = "failed", failure
                if self.refund_failed:
                    job.cost = 0.0

    def request_repair(self, body: dict[str, Any]) -> StandInRepair:
        with self._lock:
            repair = StandInRepair(f"repair-{next(self._ids):06d}", str(body.get("url") or ""),
                                   str(body.get("label") or ""), body.get("job_id"),
                                   dict(body.get("fields") or {}), self.repair_cost)
            self.repairs[repair.repair_id] = repair
        return repair

    def poll_repair(self, repair_id: str) -> StandInRepair | None:
        with self._lock:
            repair = self.repairs.get(repair_id)
            if repair is None or repair.status in ("done", "failed"):
                return repair
            repair.polls += 1
            if repair.polls < self.repair_polls_until_done:
                repair.status = "running"
                return repair
            if self.repair_fail:
                repair.status, repair.error = "failed", self.repair_fail
                return repair
            job = self.jobs.get(repair.job_id or "")
            page = job.result["body"] if job is not None and job.result else None
        proposed = {name: sel for name, sel in self.repair_selectors.items() if name in repair.fields}
        values = read_values(page, proposed) if page is not None else {}
        with self._lock:
            repair.status, repair.selectors, repair.values = "done", proposed, values
        return repair

    def list_jobs(self, label: str | None) -> list[dict[str, Any]]:
        with self._lock:
            return [job.shown() for job in self.jobs.values() if label is None or job.label == label]

    def record(self, method: str, path: str, **details: Any) -> None:
        with self._lock:
            self.log.append({"method": method, "path": path, "at": time.time(), **details})


def _handler_for(provider: StandInProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        wbufsize = -1

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _authorised(self) -> bool:
            if self.headers.get("Authorization", "") == f"Bearer {provider.token}":
                return True
            self._send(401, {"error": "a valid API token is required"})
            return False

        def _hang_up(self) -> None:
            # no answer: the caller sees the connection closed (a submit) or waits out its timeout (a poll)
            self.close_connection = True

        def do_POST(self) -> None:  # noqa: N802 (http.server naming)
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not self._authorised():
                return
            path = urlsplit(self.path).path
            if path not in ("/v1/jobs", "/v1/repairs") or (path == "/v1/repairs" and not provider.supports_repair):
                self._send(404, {"error": "no such route"})
                return
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                self._send(400, {"error": "the body is not JSON"})
                return
            if path == "/v1/repairs":
                if not isinstance(body, dict) or not body.get("fields"):
                    self._send(400, {"error": "fields are required"})
                    return
                repair = provider.request_repair(body)
                provider.record("POST", path, repair_id=repair.repair_id, job_id=repair.job_id,
                                fields=sorted(repair.fields))
                self._send(201, {"repair_id": repair.repair_id, "status": repair.status, "cost": repair.cost})
                return
            if not isinstance(body, dict) or not body.get("url"):
                self._send(400, {"error": "url is required"})
                return
            job, held, lose = provider.submit(body)
            provider.record("POST", "/v1/jobs", job_id=job.job_id, url=job.url, lost=lose,
                            held=held is not None)
            if held is not None:
                while not held.released.wait(0.05):
                    if provider._closing.is_set():
                        return self._hang_up()
            if lose:
                return self._hang_up()
            self._send(201, {"job_id": job.job_id, "status": job.status, "cost": job.cost})

        def do_GET(self) -> None:  # noqa: N802
            if not self._authorised():
                return
            parts = urlsplit(self.path)
            segments = [s for s in parts.path.split("/") if s]
            if segments == ["v1", "jobs"]:
                label = parse_qs(parts.query).get("label", [None])[0]
                provider.record("GET", parts.path, label=label)
                self._send(200, {"jobs": provider.list_jobs(label)})
                return
            if len(segments) == 3 and segments[:2] == ["v1", "jobs"]:
                if provider.before_poll is not None:
                    provider.before_poll(segments[2])
                job, stalled = provider.poll(segments[2])
                provider.record("GET", parts.path, job_id=segments[2], stalled=stalled)
                if job is None:
                    self._send(404, {"error": f"no job {segments[2]}"})
                elif stalled:
                    provider._closing.wait(60)
                    self._hang_up()
                else:
                    waiting = {} if job.status in ("done", "failed") else {"Retry-After": "0"}
                    self._send(200, job.shown(), waiting)
                return
            if len(segments) == 3 and segments[:2] == ["v1", "repairs"] and provider.supports_repair:
                repair = provider.poll_repair(segments[2])
                provider.record("GET", parts.path, repair_id=segments[2])
                if repair is None:
                    self._send(404, {"error": f"no repair {segments[2]}"})
                else:
                    waiting = {} if repair.status in ("done", "failed") else {"Retry-After": "0"}
                    self._send(200, repair.shown(), waiting)
                return
            if len(segments) == 4 and segments[:2] == ["v1", "jobs"] and segments[3] == "result":
                job = provider.jobs.get(segments[2])
                provider.record("GET", parts.path, job_id=segments[2])
                if job is None:
                    self._send(404, {"error": f"no job {segments[2]}"})
                elif job.result is None:
                    self._send(409, {"error": f"job {job.job_id} is {job.status}"})
                else:
                    self._send(200, job.result)
                return
            self._send(404, {"error": "no such route"})

    return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m scrape_contracts.testing.provider",
        description="A local stand-in for a hosted scraping API (docs/providers.md).")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--token", required=True, help="the API token callers must send")
    parser.add_argument("--cost", type=float, default=0.01, help="cost charged per job")
    parser.add_argument("--polls-until-done", type=int, default=1, help="polls a job answers 'running' first")
    args = parser.parse_args(argv)
    provider = StandInProvider(token=args.token, cost_per_job=args.cost,
                               polls_until_done=args.polls_until_done, port=args.port)
    with provider:
        print(f"stand-in provider at {provider.url} (Ctrl-C stops it)", flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
