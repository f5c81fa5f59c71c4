"""The REST API (``scrape-contracts serve``): FastAPI over the front door's operations, one source of truth.

Every route but the liveness and readiness probes resolves a principal from ``Authorization: Bearer
<token>`` on each request (a revoked token is refused on its next one). ``Refused`` becomes a status code:
401 no or bad token, 403 a read token writing, 404 (also for another owner's contract), 409, 400, 503; a
request the schema refuses is a 422 that quotes none of its input. An unexpected error is a 500 that names
the request id, never the request's headers. A body larger than the limit is refused before it is read
(api/serving.py). ``/events/stream`` is Server-Sent Events from the process's one poller (api/stream.py);
each event's id is its trail cursor (api/trail.py), so ``Last-Event-ID`` resumes on any API process.
"""

# no `from __future__ import annotations`: FastAPI reads the routes' annotations, some defined in create_app

import json
import logging
import re
import sys
import threading
import uuid
from pathlib import Path
from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI, Header, Path as PathParam, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from scrape_contracts import settings
from scrape_contracts.api import FrontDoor, Principal, Refusal, Refused
from scrape_contracts.api import models as m
from scrape_contracts.api.serving import RequestLimits
from scrape_contracts.api.stream import EventHub, TooManyStreams
from scrape_contracts.api.trail import CURSOR_PATTERN, Cursor

log = logging.getLogger("scrape_contracts.api")

STATUS = {Refusal.UNAUTHENTICATED: 401, Refusal.FORBIDDEN: 403, Refusal.NOT_FOUND: 404, Refusal.CONFLICT: 409,
          Refusal.INVALID: 400, Refusal.UNAVAILABLE: 503}
ERRORS = {401: {"model": m.Problem, "description": "no token, or an unknown or revoked one"},
          403: {"model": m.Problem, "description": "the token has read scope and the route writes"},
          404: {"model": m.Problem, "description": "no such contract or target, or another owner's contract"},
          422: {"model": m.Problem, "description": "the request does not match the schema: the detail names the "
                                                   "field and the rule (never the input)"}}
WRITE_ERRORS = {**ERRORS, 400: {"model": m.Problem}, 409: {"model": m.Problem}}
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
# how often the event hub looks for new events and checks the open streams' tokens again
STREAM_POLL_S = 1.0
DETAIL_MAX = 200  # characters of a 422's detail: it names fields, never quotes what was sent

_bearer = HTTPBearer(auto_error=False, description="an API token from `scrape-contracts tokens create`")

Name = Annotated[m.Text, PathParam(description="the contract's name", max_length=m.NAME_MAX)]
Key = Annotated[m.Text, PathParam(description="the target's partition key", max_length=m.KEY_MAX)]


def create_app(*, contracts_dir: str | Path | None = None, front_door: FrontDoor | None = None,
               stream_poll_s: float = STREAM_POLL_S, max_streams: int | None = None,
               max_body_bytes: int | None = None) -> FastAPI:
    """The API; ``max_streams`` and ``max_body_bytes`` default to the settings."""
    door = _LazyDoor(front_door, contracts_dir)
    app = FastAPI(title="scrape-contracts", version="1",
                  description="Contracts, runs, accepted data and the event trail of a scrape_contracts project. "
                              "Authenticate with `Authorization: Bearer <token>` "
                              "(`scrape-contracts tokens create --owner ... --scope read|write`).")
    app.state.door = door
    hub = EventHub(door, poll_s=stream_poll_s,
                   max_streams=max_streams if max_streams is not None else settings.api_max_streams())
    app.state.hub = hub

    @app.middleware("http")
    async def request_id(request: Request, call_next):  # type: ignore[no-untyped-def]
        given = request.headers.get("x-request-id", "")
        request.state.request_id = given if _REQUEST_ID.match(given) else uuid.uuid4().hex
        response = await call_next(request)
        response.headers["X-Request-ID"] = request.state.request_id
        return response

    @app.exception_handler(Refused)
    async def refused(request: Request, exc: Refused) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if exc.kind == Refusal.UNAUTHENTICATED else None
        return JSONResponse({"detail": str(exc)}, status_code=STATUS[exc.kind], headers=headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _problems(exc.errors())}, status_code=422)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        rid = getattr(request.state, "request_id", "-")
        # the exception's type and the route only: its text could quote what the request carried
        log.error("request %s %s failed: %s", rid, request.url.path, type(exc).__name__)
        return JSONResponse({"detail": f"internal error (request id {rid}); see the server's log"},
                            status_code=500)

    def principal(credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]) -> Principal:
        return door.authenticate(credentials.credentials if credentials else None)

    Who = Annotated[Principal, Depends(principal)]

    def rid(request: Request) -> str:
        return request.state.request_id

    @app.get("/contracts", response_model=list[m.ContractSummary], responses=ERRORS, tags=["contracts"],
             summary="The contracts the token's owner owns")
    def list_contracts(who: Who) -> list[m.ContractSummary]:
        return door.list_contracts(who)

    @app.get("/contracts/{name}", response_model=m.ContractDetail, responses=ERRORS, tags=["contracts"],
             summary="A contract: definition, targets, latest outcome per target")
    def get_contract(name: Name, who: Who) -> m.ContractDetail:
        return door.get_contract(who, name)

    @app.get("/contracts/{name}/accepted", response_model=m.AcceptedPage, responses=ERRORS, tags=["contracts"],
             summary="The latest accepted record of each target (quarantined data never appears)")
    def get_accepted(name: Name, who: Who,
                     partition: Annotated[m.Text | None, Query(max_length=m.KEY_MAX)] = None,
                     limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                     offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0) -> m.AcceptedPage:
        return door.get_accepted(who, name, partition=partition, limit=limit, offset=offset)

    @app.post("/contracts/{name}/runs", response_model=m.RunLaunch, status_code=202, responses=WRITE_ERRORS,
              tags=["runs"], summary="Launch scrape runs through the instance's run coordinator, idempotently")
    def run_contract(request: Request, name: Name, who: Who,
                     idempotency_key: Annotated[m.Text, Header(min_length=1, max_length=256, description=(
                         "the same key (per contract) returns the same runs, also after they finished; "
                         "another body with it is refused with 409"))],
                     body: Annotated[m.RunRequestBody | None, Body()] = None) -> m.RunLaunch:
        return door.run_contract(who, name, body or m.RunRequestBody(), idempotency_key, rid(request))

    @app.post("/contracts/{name}/targets", response_model=m.TargetsAdded, status_code=201,
              responses=WRITE_ERRORS, tags=["targets"], summary="Add target URLs to a dynamic contract")
    def add_targets(request: Request, name: Name, who: Who, body: m.TargetsBody) -> m.TargetsAdded:
        return door.add_targets(who, name, body.urls, rid(request))

    @app.post("/contracts/{name}/targets/{key}/pause", response_model=m.TargetState, responses=WRITE_ERRORS,
              tags=["targets"], summary="Stop scraping a target until it is resumed (its accepted data stays)")
    def pause(request: Request, name: Name, key: Key, who: Who, body: m.StateBody) -> m.TargetState:
        return door.set_paused(who, name, key, paused=True, reason=body.reason, request_id=rid(request))

    @app.post("/contracts/{name}/targets/{key}/resume", response_model=m.TargetState, responses=WRITE_ERRORS,
              tags=["targets"], summary="Resume a paused target (a pause for review too)")
    def resume(request: Request, name: Name, key: Key, who: Who,
               body: Annotated[m.StateBody | None, Body()] = None) -> m.TargetState:
        return door.set_paused(who, name, key, paused=False, reason=(body or m.StateBody()).reason,
                               request_id=rid(request))

    @app.post("/contracts/{name}/targets/{key}/reconcile", response_model=m.ReconcileResult, status_code=202,
              responses=WRITE_ERRORS, tags=["targets"],
              summary="Decide an indeterminate provider submission (adopt its job, or resubmit), then scrape "
                      "the target, idempotently")
    def reconcile(request: Request, name: Name, key: Key, who: Who, body: m.ReconcileBody,
                  idempotency_key: Annotated[m.Text, Header(min_length=1, max_length=256, description=(
                      "the same key (per contract) returns the same decision and scrape run"))],
                  ) -> m.ReconcileResult:
        return door.reconcile(who, name, key, body, idempotency_key, rid(request))

    @app.get("/contracts/{name}/failures", response_model=m.FailureReport, responses=ERRORS, tags=["targets"],
             summary="Dead letters: the targets whose last runs failed, grouped by reason")
    def list_failures(name: Name, who: Who,
                      last: Annotated[int, Query(ge=1, le=1000, description="failed runs in a row")] = 3
                      ) -> m.FailureReport:
        return door.list_failures(who, name, last=last)

    @app.post("/contracts/{name}/failures/replay", response_model=m.RunLaunch, status_code=202,
              responses=WRITE_ERRORS, tags=["targets"],
              summary="Scrape the dead letters again as one batch (a run of the contract's failures job), "
                      "idempotently")
    def replay_failures(request: Request, name: Name, who: Who,
                        idempotency_key: Annotated[m.Text, Header(min_length=1, max_length=256, description=(
                            "the same key (per contract) returns the same run"))],
                        body: Annotated[m.ReplayBody | None, Body()] = None) -> m.RunLaunch:
        return door.replay_failures(who, name, body or m.ReplayBody(), idempotency_key, rid(request))

    @app.post("/reviews/{name}/{partition}", response_model=m.ReviewResult, responses=WRITE_ERRORS,
              tags=["reviews"], summary="Accept or reject a quarantined candidate; the token's principal is the "
                                        "reviewer")
    def review(request: Request, name: Name, partition: Key, who: Who, body: m.ReviewBody) -> m.ReviewResult:
        return door.review(who, name, partition, body, rid(request))

    After = Annotated[str | None, Query(pattern=CURSOR_PATTERN, description="an event id: events after it")]
    Contract = Annotated[m.Text | None, Query(max_length=m.NAME_MAX, description="one contract (default: all of "
                                                                                  "the owner's)")]

    @app.get("/events", response_model=m.EventPage, responses={**ERRORS, 400: {"model": m.Problem}},
             tags=["events"], summary="The event trail, oldest first, in pages (`next` is the cursor)")
    def list_events(who: Who, contract: Contract = None, after: After = None,
                    limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> m.EventPage:
        return door.list_events(who, contract=contract, after=after, limit=limit)

    @app.get("/events/stream", responses={**ERRORS, 200: {"content": {"text/event-stream": {}},
                                                          "description": "Server-Sent Events"},
                                          429: {"model": m.Problem, "description": "too many open streams"}},
             response_class=StreamingResponse, tags=["events"],
             summary="The event trail as Server-Sent Events; reconnect with Last-Event-ID to resume")
    async def stream_events(request: Request, who: Who, contract: Contract = None, after: After = None,
                            last_event_id: Annotated[str | None, Header(pattern=CURSOR_PATTERN)] = None
                            ) -> StreamingResponse:
        token = request.headers["authorization"].split(" ", 1)[1].strip()
        names = await run_in_threadpool(door.visible_contracts, who, contract)
        try:
            subscriber = hub.subscribe(token, who, contract, names)
        except TooManyStreams as exc:
            return JSONResponse({"detail": str(exc)}, status_code=429, headers={"Retry-After": "5"})
        return StreamingResponse(hub.stream(subscriber, Cursor.parse(last_event_id or after)),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    # async: answered on the event loop, never queued behind the worker threads that busy routes hold
    @app.get("/health/live", tags=["health"], summary="The process answers (no token needed)")
    async def live() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/health/ready", response_model=m.Health, tags=["health"],
             responses={503: {"model": m.Health, "description": "the database or the instance is unreachable"}},
             summary="The project store and the Dagster instance are reachable (no token needed)")
    async def ready() -> JSONResponse:
        health = await run_in_threadpool(door.ready)
        return JSONResponse(health.model_dump(), status_code=200 if health.status == "ok" else 503)

    @app.get("/health/detailed", response_model=m.DetailedHealth, responses=ERRORS, tags=["health"],
             summary="Per contract: last success, its age, failure streaks, review backlog")
    def detailed(who: Who) -> m.DetailedHealth:
        return door.health(who)

    # before the routes, so before authentication: no body larger than this is read, whoever sends it
    app.add_middleware(RequestLimits, max_header_bytes=settings.api_max_header_bytes(),
                       max_body_bytes=max_body_bytes if max_body_bytes is not None else settings.api_max_body_bytes())
    return app


def _problems(errors: Any) -> str:
    """What a 422 says: each refused field's place and the rule it broke, at most ``DETAIL_MAX`` characters;
    never the input (it may be megabytes, or text that cannot be encoded)."""
    parts = []
    for error in list(errors)[:3]:
        where = ".".join(_shown(str(p), 40) for p in error.get("loc", ()))
        parts.append(f"{where}: {_shown(str(error.get('msg', 'invalid')).removeprefix('Value error, '), 120)}")
    text = "; ".join(parts) + (f"; and {len(errors) - 3} more" if len(errors) > 3 else "")
    return text if len(text) <= DETAIL_MAX else text[:DETAIL_MAX - 3] + "..."


def _shown(text: str, limit: int) -> str:
    # a field name can come from the request (an unknown key): escaped, and cut short
    text = text.encode("ascii", "backslashreplace").decode("ascii")
    return text if len(text) <= limit else text[:limit - 3] + "..."


class _LazyDoor:
    """The front door, opened on first use: the OpenAPI document can be written without an instance."""

    def __init__(self, door: FrontDoor | None, contracts_dir: str | Path | None) -> None:
        self._door, self._contracts_dir = door, contracts_dir
        self._lock = threading.Lock()

    def open(self) -> FrontDoor:
        with self._lock:
            if self._door is None:
                self._door = FrontDoor(contracts_dir=self._contracts_dir)
            return self._door

    def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
        return getattr(self.open(), name)


def write_openapi(path: Path) -> None:
    """The document the API serves, as checked in: ``python -m scrape_contracts.api.rest`` writes
    ``scrape_contracts/api/openapi.json`` (or the path given)."""
    spec = create_app(front_door=None).openapi()
    path.write_text(json.dumps(spec, indent=2, sort_keys=True) + "\n", encoding="utf-8")


if __name__ == "__main__":
    write_openapi(Path(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).with_name("openapi.json"))))
