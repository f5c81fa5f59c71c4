"""The REST API (``scrape-contracts serve``): FastAPI over the front door's operations, one source of truth.

Every route but the liveness and readiness probes resolves a principal from ``Authorization: Bearer
<token>`` on each request (a revoked token is refused on its next one). ``Refused`` becomes a status code:
401 no or bad token, 403 not the token's contract or not its scope, 404, 409, 400, 503. An unexpected error
is a 500 that names the request id, never the request's headers. ``/events/stream`` is Server-Sent Events:
each event's id is its trail cursor (api/trail.py), so ``Last-Event-ID`` resumes on any API process.
"""

# no `from __future__ import annotations`: FastAPI reads the routes' annotations, some defined in create_app

import asyncio
import json
import logging
import re
import sys
import threading
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated

from fastapi import Body, Depends, FastAPI, Header, Path as PathParam, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from scrape_contracts.api import FrontDoor, Principal, Refusal, Refused
from scrape_contracts.api import models as m
from scrape_contracts.api.trail import CURSOR_PATTERN

log = logging.getLogger("scrape_contracts.api")

STATUS = {Refusal.UNAUTHENTICATED: 401, Refusal.FORBIDDEN: 403, Refusal.NOT_FOUND: 404, Refusal.CONFLICT: 409,
          Refusal.INVALID: 400, Refusal.UNAVAILABLE: 503}
ERRORS = {401: {"model": m.Problem, "description": "no token, or an unknown or revoked one"},
          403: {"model": m.Problem, "description": "the contract is not the token's owner's, or the token "
                                                   "has read scope and the route writes"},
          404: {"model": m.Problem, "description": "no such contract or target"}}
WRITE_ERRORS = {**ERRORS, 400: {"model": m.Problem}, 409: {"model": m.Problem}}
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
# how often an open stream looks for new events and checks its token again (the issue allows up to 30 s)
STREAM_POLL_S = 1.0
KEEPALIVE_S = 15.0

_bearer = HTTPBearer(auto_error=False, description="an API token from `scrape-contracts tokens create`")

Name = Annotated[str, PathParam(description="the contract's name", max_length=128)]
Key = Annotated[str, PathParam(description="the target's partition key", max_length=256)]


def create_app(*, contracts_dir: str | Path | None = None, front_door: FrontDoor | None = None,
               stream_poll_s: float = STREAM_POLL_S) -> FastAPI:
    door = _LazyDoor(front_door, contracts_dir)
    app = FastAPI(title="scrape-contracts", version="1",
                  description="Contracts, runs, accepted data and the event trail of a scrape_contracts project. "
                              "Authenticate with `Authorization: Bearer <token>` "
                              "(`scrape-contracts tokens create --owner ... --scope read|write`).")
    app.state.door = door

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
                     partition: Annotated[str | None, Query(max_length=256)] = None,
                     limit: Annotated[int, Query(ge=1, le=1000)] = 100,
                     offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0) -> m.AcceptedPage:
        return door.get_accepted(who, name, partition=partition, limit=limit, offset=offset)

    @app.post("/contracts/{name}/runs", response_model=m.RunLaunch, status_code=202, responses=WRITE_ERRORS,
              tags=["runs"], summary="Launch scrape runs through the instance's run coordinator, idempotently")
    def run_contract(request: Request, name: Name, who: Who,
                     idempotency_key: Annotated[str, Header(min_length=1, max_length=256, description=(
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

    @app.post("/reviews/{name}/{partition}", response_model=m.ReviewResult, responses=WRITE_ERRORS,
              tags=["reviews"], summary="Accept or reject a quarantined candidate; the token's principal is the "
                                        "reviewer")
    def review(request: Request, name: Name, partition: Key, who: Who, body: m.ReviewBody) -> m.ReviewResult:
        return door.review(who, name, partition, body, rid(request))

    After = Annotated[str | None, Query(pattern=CURSOR_PATTERN, description="an event id: events after it")]
    Contract = Annotated[str | None, Query(max_length=128, description="one contract (default: all of the "
                                                                       "owner's)")]

    @app.get("/events", response_model=m.EventPage, responses={**ERRORS, 400: {"model": m.Problem}},
             tags=["events"], summary="The event trail, oldest first, in pages (`next` is the cursor)")
    def list_events(who: Who, contract: Contract = None, after: After = None,
                    limit: Annotated[int, Query(ge=1, le=1000)] = 100) -> m.EventPage:
        return door.list_events(who, contract=contract, after=after, limit=limit)

    @app.get("/events/stream", responses={**ERRORS, 200: {"content": {"text/event-stream": {}},
                                                          "description": "Server-Sent Events"}},
             response_class=StreamingResponse, tags=["events"],
             summary="The event trail as Server-Sent Events; reconnect with Last-Event-ID to resume")
    async def stream_events(request: Request, who: Who, contract: Contract = None, after: After = None,
                            last_event_id: Annotated[str | None, Header(pattern=CURSOR_PATTERN)] = None
                            ) -> StreamingResponse:
        token = request.headers["authorization"].split(" ", 1)[1].strip()
        cursor = last_event_id or after
        first = await run_in_threadpool(door.list_events, who, contract=contract, after=cursor, limit=500)
        return StreamingResponse(_stream(request, door, token, contract, first, stream_poll_s),
                                 media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    @app.get("/health/live", tags=["health"], summary="The process answers (no token needed)")
    def live() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/health/ready", response_model=m.Health, tags=["health"],
             responses={503: {"model": m.Health, "description": "the database or the instance is unreachable"}},
             summary="The project store and the Dagster instance are reachable (no token needed)")
    def ready() -> JSONResponse:
        health = door.ready()
        return JSONResponse(health.model_dump(), status_code=200 if health.status == "ok" else 503)

    @app.get("/health/detailed", response_model=m.DetailedHealth, responses=ERRORS, tags=["health"],
             summary="Per contract: last success, its age, failure streaks, review backlog")
    def detailed(who: Who) -> m.DetailedHealth:
        return door.health(who)

    return app


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


def _sse(event: m.TrailEvent) -> str:
    return f"id: {event.id}\nevent: trail\ndata: {json.dumps(event.model_dump(), default=str)}\n\n"


async def _stream(request: Request, door: FrontDoor, token: str, contract: str | None, page: m.EventPage,
                  poll_s: float) -> AsyncIterator[str]:
    loop = asyncio.get_running_loop()
    quiet_since = loop.time()
    # at once, so the client has the response (and its headers) before the first event exists
    yield f"retry: {int(poll_s * 2000)}\n\n"
    while True:
        for event in page.events:
            yield _sse(event)
        if page.events:
            quiet_since = loop.time()
        elif loop.time() - quiet_since >= KEEPALIVE_S:
            yield ": keepalive\n\n"
            quiet_since = loop.time()
        if await request.is_disconnected():
            return
        await asyncio.sleep(poll_s)
        try:
            # the token again at every poll: a revoked one ends the stream
            who = await run_in_threadpool(door.authenticate, token)
            page = await run_in_threadpool(door.list_events, who, contract=contract, after=page.next, limit=500)
        except Refused as exc:
            yield f"event: end\ndata: {json.dumps({'detail': str(exc)})}\n\n"
            return


if __name__ == "__main__":
    write_openapi(Path(sys.argv[1] if len(sys.argv) > 1 else str(Path(__file__).with_name("openapi.json"))))
