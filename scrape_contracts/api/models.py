"""What the front door answers with: the same records for the REST API (and its OpenAPI document) and MCP."""

from __future__ import annotations

import unicodedata
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from scrape_contracts.contract.targets import URL_MAX_LENGTH

# the longest text a request may carry in one field (a few hundred characters of input are echoed nowhere)
NAME_MAX = 128
KEY_MAX = 256
REASON_MAX = 2000
URL_MAX = URL_MAX_LENGTH


def plain_text(value: str) -> str:
    """Refuse control characters (NUL, ESC, newline, ...) and lone surrogates: PostgreSQL cannot store a NUL,
    a terminal obeys an ESC when a reason is printed, and a lone surrogate cannot be written as UTF-8."""
    for char in value:
        category = unicodedata.category(char)
        if category == "Cc":
            raise ValueError(f"control characters are not allowed (found U+{ord(char):04X})")
        if category == "Cs":
            raise ValueError("lone surrogates are not allowed (the text is not valid Unicode)")
    return value


# every text a caller sends is one of these: the REST API and the MCP server refuse the same things
Text = Annotated[str, AfterValidator(plain_text)]
PartitionText = Annotated[Text, Field(min_length=1, max_length=KEY_MAX)]
ReasonText = Annotated[Text, Field(max_length=REASON_MAX)]
UrlText = Annotated[Text, Field(min_length=1, max_length=URL_MAX)]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True)


class ContractSummary(_Record):
    name: str
    description: str
    owners: list[str]
    dynamic: bool = Field(description="targets are added at runtime (POST .../targets) rather than in the YAML")
    schedule: str | None = Field(description="cron of the contract's schedule, if any")


class RepairProposalView(_Record):
    proposal_id: int
    repair_id: str | None
    candidate_id: int
    fields: dict[str, str] = Field(description="field → the selector that failed")
    selectors: dict[str, str] = Field(description="field → the selector the provider proposes")
    values: dict[str, Any] = Field(description="field → the value the provider says its selector reads")
    cost: float | None


class TargetStatus(_Record):
    key: str = Field(description="the target's partition key")
    url: str
    paused: bool
    pause_reason: str | None
    failure_streak: int
    last_outcome: str | None = Field(description="the latest candidate's status: accepted, quarantined, "
                                                 "rejected, unchanged, superseded or pending")
    last_run_id: str | None
    last_scraped_at: str | None
    gone_since: str | None = Field(
        None, description="when its discovery source stopped listing it (ISO 8601): its data stays, sweeps "
                          "skip it until it is listed again")
    repair_proposal: RepairProposalView | None = Field(
        None, description="the provider's repair proposal its quarantined candidate waits on (accept: applied to "
                          "the stored page and checked again; reject: discarded)")


class ContractDetail(_Record):
    contract: ContractSummary
    definition: dict[str, Any] = Field(description="the contract as loaded from its YAML")
    targets: list[TargetStatus]


class AcceptedRecord(_Record):
    partition: str
    url: str
    version: int
    record: dict[str, Any]
    accepted_at: str
    run_id: str


class AcceptedPage(_Record):
    contract: str
    items: list[AcceptedRecord]
    total: int
    offset: int
    limit: int


class RunRequestBody(_Record):
    model_config = ConfigDict(frozen=True, extra="forbid")
    partition: PartitionText | None = Field(None, description="one target; default every target that is not "
                                                              "paused, as batched runs")
    force: bool = Field(False, description="fetch again without validators and extract even if unchanged")


class LaunchedRun(_Record):
    run_id: str
    status: str
    label: str


class RunLaunch(_Record):
    contract: str
    idempotency_key: str
    replayed: bool = Field(description="true when this key had launched these runs before")
    runs: list[LaunchedRun]
    skipped_paused: list[str]


class TargetsBody(_Record):
    model_config = ConfigDict(frozen=True, extra="forbid")
    urls: list[UrlText] = Field(min_length=1, max_length=1000)


class TargetsAdded(_Record):
    contract: str
    added: dict[str, str] = Field(description="partition key -> URL of each new target")


class StateBody(_Record):
    model_config = ConfigDict(frozen=True, extra="forbid")
    reason: ReasonText = Field("", description="why; required to pause")


class TargetState(_Record):
    contract: str
    key: str
    paused: bool
    reason: str
    run_id: str


class ReviewBody(_Record):
    model_config = ConfigDict(frozen=True, extra="forbid")
    decision: Literal["accept", "reject"]
    reason: ReasonText = Field(min_length=1)
    candidate_id: int | None = Field(None, description="the candidate you looked at (refused if stale)")


class ReviewResult(_Record):
    contract: str
    partition: str
    decision: str
    reviewer: str
    run_id: str
    accepted_version: int | None


class TrailEvent(_Record):
    id: str = Field(description="event cursor: pass it as `after` (or SSE Last-Event-ID) to resume after it")
    contract: str
    timestamp: float
    run_id: str
    partition: str | None
    stage: str
    summary: str
    metadata: dict[str, Any]


class EventPage(_Record):
    events: list[TrailEvent]
    next: str = Field(description="cursor for the next page (the last event's id, or `after` if none)")


class ProxyHealthRecord(_Record):
    """One proxy of a contract's ``fetch.proxies``, as the last run that used it left it."""

    proxy: str
    quarantined: bool
    score: float
    latency_ms: float | None
    recheck_at: str | None = Field(description="when a quarantined proxy may be re-checked (ISO 8601, UTC)")
    recheck_in_s: float | None
    rest_s: float
    requests: int = Field(description="that run's requests through it")
    failures: int
    quarantines: int
    rechecks: int
    run_id: str
    updated_at: str


class ContractHealthRecord(_Record):
    contract: str
    targets: int
    last_success: str | None
    age_s: float | None
    failing_targets: int
    longest_failure_streak: int
    paused: int
    review_backlog: int
    heal_budget_left: int
    indeterminate: int = Field(
        0, description="provider contracts: targets paused until a submission is reconciled")
    provider_spend_today: float | None = Field(
        None, description="provider contracts: what its jobs cost since 00:00 UTC")
    budget_paused: str | None = Field(
        None, description="why the contract is paused for its cost budget, if it is")
    proxies: list[ProxyHealthRecord] = Field(
        default_factory=list, description="contracts with fetch.proxies: each proxy a run has used")


class Health(_Record):
    status: Literal["ok", "unavailable"]
    checks: dict[str, str]


class DetailedHealth(_Record):
    status: Literal["ok"]
    contracts: list[ContractHealthRecord]


class Problem(_Record):
    detail: str


class ReconcileBody(_Record):
    model_config = ConfigDict(frozen=True, extra="forbid")
    job_id: Annotated[Text, Field(min_length=1, max_length=256)] | None = Field(
        None, description="the provider's job for this target, to adopt (its dashboard lists it by the label "
                          "<contract>/<target>)")
    resubmit: bool = Field(False, description="the provider has no job for it: the next scrape submits anew")
    reason: ReasonText = Field("", description="why, for the audit trail")


class ReconcileResult(_Record):
    contract: str
    key: str
    action: Literal["adopted", "resubmit"]
    job_id: str | None = Field(description="the adopted job")
    reconcile_run_id: str = Field(description="the run of reconcile_job that recorded the decision")
    scrape: LaunchedRun = Field(description="the run that scrapes the target now (queued)")
    idempotency_key: str
    replayed: bool


class DeadLetterRecord(_Record):
    key: str
    url: str
    streak: int = Field(description="failed runs in a row")
    reason: str = Field(description="its latest failure, as recorded")
    paused: str | None = Field(description="why it is paused, if it is (a replay skips it)")


class FailureGroupRecord(_Record):
    reason: str = Field(description="what the targets of the group have in common (their own URL left out)")
    kind: Literal["fetch", "rejected", "other"]
    count: int
    targets: list[DeadLetterRecord]


class FailureReport(_Record):
    contract: str
    last: int = Field(description="a target is listed when its last `last` runs failed")
    targets: int
    groups: list[FailureGroupRecord]


class ReplayBody(_Record):
    model_config = ConfigDict(frozen=True, extra="forbid")
    last: int = Field(3, ge=1, le=1000, description="replay the targets whose last `last` runs failed")
