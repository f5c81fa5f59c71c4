"""The MCP server (``scrape-contracts mcp``): the front door's operations as tools for agents.

Same service layer and authorisation as the REST API: every tool call resolves its token (over stdio the
one the server was started with, over HTTP the caller's bearer token), so a revoked token stops working on
the next call, and acts only on its owner's contracts; a read
token cannot launch or review. Refusals are tool errors whose text says what to do; the token is never in
them. Transports: stdio (an agent starts the process) and streamable HTTP (``--transport http``), whose Host
and Origin headers are always checked against an explicit list (``transport_security``).
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import anyio.to_thread
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from starlette.requests import Request
from pydantic import Field
from typing_extensions import Annotated

from scrape_contracts import settings
from scrape_contracts.api import FrontDoor, Refusal, Refused
from scrape_contracts.api import models as m
from scrape_contracts.api.serving import RequestLimits, is_loopback, server_config

INSTRUCTIONS = """\
scrape_contracts turns web pages into validated records. A *contract* (YAML) names target pages, the fields
to extract and the rules the data must meet; each run scrapes targets, heals broken selectors, and either
accepts the new data or quarantines it for a person to review. Start with list_contracts; read data with
get_accepted; follow what happens with list_events (pass the last event id as `after` to continue); launch
scrapes with run_contract (always with an idempotency key, so a retry never scrapes twice); decide
quarantined data with review. You can only see and act on the contracts your token's owner owns."""


class _FrontDoorTokens:
    """The SDK's ``TokenVerifier`` over the front door's tokens: an HTTP caller is who its bearer token says."""

    def __init__(self, door: FrontDoor) -> None:
        self.door = door

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            principal = await anyio.to_thread.run_sync(self.door.authenticate, token)
        except Refused:
            return None  # the SDK answers 401; the token is in no message
        return AccessToken(token=token, client_id=principal.token_id, scopes=[principal.scope.value])


def build_server(token: str | None, *, contracts_dir: str | Path | None = None,
                 front_door: FrontDoor | None = None, http_url: str | None = None) -> MCPServer:
    """Over stdio the tools act with ``token`` (the agent that started the process holds it); over HTTP
    (``http_url``, the server's own address) with each caller's ``Authorization: Bearer`` token, checked on
    every request, so one server serves many callers each with their own owner and scope."""
    door = front_door or FrontDoor(contracts_dir=contracts_dir)
    auth: dict[str, Any] = {}
    if http_url is not None:
        auth = {"token_verifier": _FrontDoorTokens(door),
                "auth": AuthSettings(issuer_url=http_url, resource_server_url=f"{http_url}/mcp")}
    server = MCPServer("scrape-contracts", instructions=INSTRUCTIONS, **auth)

    async def call(operation: Any, *args: Any, **kwargs: Any) -> Any:
        caller = get_access_token() if http_url is not None else None
        acting = caller.token if caller is not None else token

        def run() -> Any:
            if acting is None:
                raise Refused(Refusal.UNAUTHENTICATED, "no token: send Authorization: Bearer <token>")
            principal = door.authenticate(acting)
            return operation(principal, *args, **kwargs)

        try:
            return await anyio.to_thread.run_sync(run)
        except Refused as exc:
            raise ToolError(f"{exc.kind.value}: {exc}") from None

    def request_id() -> str:
        return f"mcp-{uuid.uuid4().hex[:16]}"

    @server.tool(description=(
        "List the scrape contracts you may use: name, description, owners, whether targets are added at "
        "runtime (dynamic) and the schedule. Call this first to learn the contract names other tools take."))
    async def list_contracts() -> list[m.ContractSummary]:
        return await call(door.list_contracts)

    @server.tool(description=(
        "One contract in detail: its definition (fields, selectors, rules) and every target (partition key, "
        "URL, paused or not, last outcome: accepted, quarantined, rejected, unchanged). Use the target keys "
        "as `partition` in other tools."))
    async def get_contract(contract: Annotated[m.Text, Field(max_length=m.NAME_MAX,
                                                             description="contract name from list_contracts")]
                           ) -> m.ContractDetail:
        return await call(door.get_contract, contract)

    @server.tool(description=(
        "The latest accepted record of each target of a contract (only data that passed its checks or a "
        "person accepted; quarantined data never appears). Paginated with limit and offset; `total` is the "
        "number of targets with accepted data."))
    async def get_accepted(
            contract: Annotated[m.Text, Field(max_length=m.NAME_MAX, description="contract name")],
            partition: Annotated[m.PartitionText | None, Field(description="one target's key; omit for all")]
            = None,
            limit: Annotated[int, Field(ge=1, le=1000)] = 100,
            offset: Annotated[int, Field(ge=0)] = 0) -> m.AcceptedPage:
        return await call(door.get_accepted, contract, partition=partition, limit=limit, offset=offset)

    @server.tool(description=(
        "Launch scrape runs of a contract through the Dagster instance's run queue (a daemon starts them). "
        "Needs a write token. Without `partition`, every target that is not paused is scraped, in batched "
        "runs. `idempotency_key` is required: calling again with the same key and arguments returns the same "
        "runs instead of launching new ones (safe to retry); the same key with other arguments is refused. "
        "Returns the run ids; follow their progress with list_events."))
    async def run_contract(
            contract: Annotated[m.Text, Field(max_length=m.NAME_MAX, description="contract name")],
            idempotency_key: Annotated[m.Text, Field(min_length=1, max_length=256,
                                                     description="a new unique string for each new launch")],
            partition: Annotated[m.PartitionText | None, Field(description="one target's key; omit for all")]
            = None,
            force: Annotated[bool, Field(description="fetch again even if the page did not change")] = False,
    ) -> m.RunLaunch:
        return await call(door.run_contract, contract, m.RunRequestBody(partition=partition, force=force),
                          idempotency_key, request_id())

    @server.tool(description=(
        "The event trail, oldest first: every stage of every run (fetched, extracted, violation_found, "
        "healing, quarantined, accepted, reviewed, paused, ...) with its run id, target and details. Pass the "
        "`next` cursor of one call as `after` of the next to get only newer events; an empty list means "
        "nothing new yet. Omit `contract` for all of yours."))
    async def list_events(
            contract: Annotated[m.Text | None, Field(max_length=m.NAME_MAX,
                                                     description="one contract; omit for all of yours")] = None,
            after: Annotated[m.Text | None, Field(max_length=40, description="an event id or `next` cursor from a "
                                                                             "previous call")] = None,
            limit: Annotated[int, Field(ge=1, le=1000)] = 100) -> m.EventPage:
        return await call(door.list_events, contract=contract, after=after, limit=limit)

    @server.tool(description=(
        "Accept or reject the quarantined candidate of one target (data that failed a rule such as a too "
        "large price change, waiting for a person). Needs a write token; you are recorded as the reviewer "
        "with your reason. Accepting makes it the accepted data; rejecting keeps the previous accepted data. "
        "Find quarantined targets with get_contract (last_outcome: quarantined)."))
    async def review(
            contract: Annotated[m.Text, Field(max_length=m.NAME_MAX, description="contract name")],
            partition: Annotated[m.PartitionText, Field(description="the target's key")],
            decision: Literal["accept", "reject"],
            reason: Annotated[m.ReasonText, Field(min_length=1, description="why, for the audit trail")],
            candidate_id: Annotated[int | None, Field(description="the candidate you looked at")] = None,
    ) -> m.ReviewResult:
        body = m.ReviewBody(decision=decision, reason=reason, candidate_id=candidate_id)
        return await call(door.review, contract, partition, body, request_id())

    @server.tool(description=(
        "Decide a target paused as `indeterminate` (a submit to the hosted scraping provider may have made a "
        "job whose id was never recorded: nothing more is submitted for it until this is decided). Needs a "
        "write token. Give `job_id` to adopt the job the provider did run (find it by the label "
        "<contract>/<target>; its page then goes through the contract's checks), or `resubmit: true` when "
        "the provider has none. The target is then scraped by a queued run. `idempotency_key` is required: "
        "the same key returns the same runs."))
    async def reconcile(
            contract: Annotated[m.Text, Field(max_length=m.NAME_MAX, description="contract name")],
            partition: Annotated[m.PartitionText, Field(description="the target's key")],
            idempotency_key: Annotated[m.Text, Field(min_length=1, max_length=256,
                                                     description="a new unique string for each decision")],
            job_id: Annotated[m.Text | None, Field(max_length=256,
                                                   description="the provider's job to adopt")] = None,
            resubmit: Annotated[bool, Field(description="the provider has no job for it")] = False,
            reason: Annotated[m.ReasonText, Field(description="why, for the audit trail")] = "",
    ) -> m.ReconcileResult:
        body = m.ReconcileBody(job_id=job_id, resubmit=resubmit, reason=reason)
        return await call(door.reconcile, contract, partition, body, idempotency_key, request_id())

    @server.tool(description=(
        "Dead letters of a contract: the targets whose last `last` runs all failed (the fetch failed, or the "
        "checks rejected the data), grouped by reason. Replay them with replay_failures once the cause is "
        "fixed."))
    async def list_failures(
            contract: Annotated[m.Text, Field(max_length=m.NAME_MAX, description="contract name")],
            last: Annotated[int, Field(ge=1, le=1000, description="failed runs in a row")] = 3,
    ) -> m.FailureReport:
        return await call(door.list_failures, contract, last=last)

    @server.tool(description=(
        "Scrape a contract's dead letters (see list_failures) again, as one batch in one queued run. Needs a "
        "write token; `idempotency_key` is required: the same key returns the same run."))
    async def replay_failures(
            contract: Annotated[m.Text, Field(max_length=m.NAME_MAX, description="contract name")],
            idempotency_key: Annotated[m.Text, Field(min_length=1, max_length=256,
                                                     description="a new unique string for each replay")],
            last: Annotated[int, Field(ge=1, le=1000, description="failed runs in a row")] = 3,
    ) -> m.RunLaunch:
        return await call(door.replay_failures, contract, m.ReplayBody(last=last), idempotency_key,
                          request_id())

    return server


def transport_security(host: str, port: int, allowed_hosts: Sequence[str] = (),
                       allowed_origins: Sequence[str] = ()) -> TransportSecuritySettings:
    """Host and Origin checks, always on: a web page in a browser must not reach the server by DNS
    rebinding, whatever address it listens on. On a loopback address the loopback names are allowed;
    beyond it only the ``allowed_hosts`` (the Host header clients send: ``name:port``) and origins given."""
    hosts, origins = list(allowed_hosts), list(allowed_origins)
    if is_loopback(host):
        hosts += [f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"]
        origins += [f"http://127.0.0.1:{port}", f"http://localhost:{port}", f"http://[::1]:{port}"]
    elif not hosts:
        raise ValueError(f"the MCP server listening on {host} needs --allowed-host NAME:PORT (the Host header its "
                         "clients send, e.g. mcp.internal:8001): without one every request would be refused")
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts,
                                     allowed_origins=origins)


def run(server: MCPServer, transport: Literal["stdio", "http"], host: str = "127.0.0.1", port: int = 8001,
        security: TransportSecuritySettings | None = None) -> None:
    if transport == "stdio":
        server.run("stdio")
        return
    import uvicorn

    app = http_app(server, security or transport_security(host, port))
    uvicorn.Server(server_config(app, host, port)).run()


def http_app(server: MCPServer, security: TransportSecuritySettings,
             max_body_bytes: int | None = None) -> Any:
    """The streamable HTTP transport as served: the size limits first (a body over ``max_body_bytes``,
    default the setting, is refused before it is read and before the Host check and the token's), then the
    Host and Origin checks, then the SDK's app and its bearer token."""
    limit = max_body_bytes if max_body_bytes is not None else settings.api_max_body_bytes()
    app = server.streamable_http_app(transport_security=security, max_request_body_size=limit)
    return RequestLimits(_HostCheck(app, security), max_body_bytes=limit,
                         max_header_bytes=settings.api_max_header_bytes())


class _HostCheck:
    """The SDK's Host and Origin checks, before everything else: its transport makes them after the bearer
    token's, so a request from a rebound name was told 401 rather than refused for its Host."""

    def __init__(self, app: Any, security: TransportSecuritySettings) -> None:
        self.app = app
        self.checks = TransportSecurityMiddleware(security)

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            refused = await self.checks.validate_request(Request(scope), is_post=False)
            if refused is not None:
                await refused(scope, receive, send)
                return
        await self.app(scope, receive, send)
