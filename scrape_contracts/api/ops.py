"""The front door's operations: what the REST API and the MCP server both call, with one authorisation.

Every operation takes the caller's ``Principal``: a token acts only on contracts whose ``owners:`` include its
owner, and only a write-scoped token changes anything. Writes go the way the CLI's do (launches through the
instance's run coordinator, reviews and pauses as runs of ``review_job`` / ``target_state_job``, targets through
``defs.targets``) and each is recorded in the audit trail. Refusals are ``Refused`` with a ``Refusal`` kind
that the API turns into a status code and the MCP server into a tool error.
"""

from __future__ import annotations

import logging
import threading
import warnings
from pathlib import Path
from typing import Any

import dagster as dg
import sqlalchemy as sa

from scrape_contracts import settings
from scrape_contracts.defs import launching as launch
from scrape_contracts.adapters.schema import TextEnum
from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.contract.loader import LoadedContract, load_contracts
from scrape_contracts.contract.targets import without_userinfo
from scrape_contracts.api import models as m
from scrape_contracts.api.audit import AuditTrail
from scrape_contracts.api.idempotency import IdempotencyKeys, request_hash
from scrape_contracts.api.tokens import Principal, TokenStore, normal_owner
from scrape_contracts.api.trail import Cursor, HighWater, read_events

REPO_ROOT = Path(__file__).resolve().parents[2]
# a run the API has asked Dagster's queue for, which the instance does not show yet
SUBMITTED = "SUBMITTED"
logger = logging.getLogger(__name__)


class Refusal(TextEnum):
    UNAUTHENTICATED = "unauthenticated"
    FORBIDDEN = "forbidden"
    NOT_FOUND = "not_found"
    CONFLICT = "conflict"
    INVALID = "invalid"
    UNAVAILABLE = "unavailable"


class Refused(Exception):
    """A request the front door will not carry out; the message says why and never contains a token."""

    def __init__(self, kind: Refusal, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def owns(principal: Principal, loaded: LoadedContract) -> bool:
    return principal.owner in {normal_owner(o) for o in loaded.contract.owners}


class FrontDoor:
    def __init__(self, *, contracts_dir: str | Path | None = None, db_url: str | None = None,
                 instance: dg.DagsterInstance | None = None, workspace: str | Path | None = None) -> None:
        self.contracts_dir = Path(contracts_dir).resolve() if contracts_dir else None
        if db_url is None and (settings.db_url().startswith("sqlite")):
            settings.dagster_home().mkdir(parents=True, exist_ok=True)
        self.store = ProjectStore(db_url or settings.db_url())
        self.instance = instance or dg.DagsterInstance.get()
        self.workspace = str(workspace or REPO_ROOT / "workspace.yaml")
        self.tokens = TokenStore(self.store.engine)
        self.audit = AuditTrail(self.store.engine)
        self.keys = IdempotencyKeys(self.store.engine)
        self.high_water = HighWater(self.instance)

    # ---- who ------------------------------------------------------------------------------------
    def authenticate(self, token: str | None) -> Principal:
        principal = self.tokens.resolve(token) if token else None
        if principal is None:
            raise Refused(Refusal.UNAUTHENTICATED, "a valid API token is required (Authorization: Bearer "
                                                   "<token>; `scrape-contracts tokens create`): missing, "
                                                   "unknown or revoked")
        return principal

    def _loaded(self) -> dict[str, LoadedContract]:
        return load_contracts(self.contracts_dir).by_name()

    def _contract(self, principal: Principal, name: str, *, write: bool = False) -> LoadedContract:
        loaded = self._loaded().get(name)
        if loaded is None:
            raise Refused(Refusal.NOT_FOUND, f"no valid contract named {name!r}")
        if not owns(principal, loaded):
            raise Refused(Refusal.FORBIDDEN, f"contract {name!r} is not owned by {principal.owner} "
                                             f"(its owners: {', '.join(loaded.contract.owners) or 'none'})")
        if write and not principal.can_write:
            raise Refused(Refusal.FORBIDDEN, "this token has read scope; changes need a write token")
        return loaded

    def _owned(self, principal: Principal) -> list[LoadedContract]:
        return [c for _, c in sorted(self._loaded().items()) if owns(principal, c)]

    # ---- reading --------------------------------------------------------------------------------
    def list_contracts(self, principal: Principal) -> list[m.ContractSummary]:
        return [_summary(c) for c in self._owned(principal)]

    def get_contract(self, principal: Principal, name: str) -> m.ContractDetail:
        loaded = self._contract(principal, name)
        contract = loaded.contract
        urls = self.store.list_targets(name) if contract.is_dynamic else \
            {t.partition_key: t.url for t in contract.static_targets}
        states = self.store.states(name)
        latest = self.store.latest_candidates(name)
        targets = []
        for key, url in urls.items():
            state, candidate = states.get(key), latest.get(key)
            targets.append(m.TargetStatus(
                key=key, url=without_userinfo(url), paused=bool(state and state.paused),
                pause_reason=state.pause_reason if state and state.paused else None,
                failure_streak=state.failure_streak if state else 0,
                last_outcome=str(candidate.status) if candidate else None,
                last_run_id=candidate.run_id if candidate else None,
                last_scraped_at=candidate.created_at.isoformat() if candidate else None))
        definition = contract.model_dump(mode="json", by_alias=True, exclude_none=True)
        fetch = definition.get("fetch") or {}
        # request headers are where a contract keeps credentials for its site: names only
        fetch["headers"] = {name: "(hidden)" for name in fetch.get("headers") or {}}
        return m.ContractDetail(contract=_summary(loaded), definition=definition, targets=targets)

    def get_accepted(self, principal: Principal, name: str, *, partition: str | None = None, limit: int = 100,
                     offset: int = 0) -> m.AcceptedPage:
        self._contract(principal, name)
        versions = self.store.latest_accepted_all(name, [partition] if partition else None)
        items = [m.AcceptedRecord(partition=v.partition, url=without_userinfo(v.url), version=v.version,
                                  record=v.record, accepted_at=v.created_at.isoformat(), run_id=v.run_id)
                 for v in versions[offset:offset + limit]]
        return m.AcceptedPage(contract=name, items=items, total=len(versions), offset=offset, limit=limit)

    def list_events(self, principal: Principal, *, contract: str | None = None, after: str | None = None,
                    limit: int = 100, wait_s: float = 1.0) -> m.EventPage:
        try:
            cursor = Cursor.parse(after)
        except ValueError as exc:
            raise Refused(Refusal.INVALID, str(exc)) from None
        names = [self._contract(principal, contract).contract.name] if contract else \
            [c.contract.name for c in self._owned(principal)]
        events, last = read_events(self.instance, names, cursor, limit, self.high_water.mark(wait_s))
        return m.EventPage(events=events, next=str(last))

    def ready(self) -> m.Health:
        checks = {}
        for name, probe in (("project_store", self._probe_store), ("dagster_instance", self._probe_instance)):
            try:
                probe()
                checks[name] = "ok"
            except Exception as exc:  # noqa: BLE001 (any failure means "not ready"; the kind is enough)
                checks[name] = f"unavailable: {type(exc).__name__}"
        return m.Health(status="ok" if all(v == "ok" for v in checks.values()) else "unavailable", checks=checks)

    def _probe_store(self) -> None:
        with self.store.engine.connect() as conn:
            conn.execute(sa.text("SELECT 1"))

    def _probe_instance(self) -> None:
        self.instance.get_run_records(limit=1)

    def health(self, principal: Principal) -> m.DetailedHealth:
        from scrape_contracts.service.health import contract_health

        found = contract_health(self.store, self._owned(principal))
        return m.DetailedHealth(status="ok", contracts=[m.ContractHealthRecord(**h.as_dict()) for h in found])

    # ---- writing --------------------------------------------------------------------------------
    def run_contract(self, principal: Principal, name: str, body: m.RunRequestBody, idempotency_key: str,
                     request_id: str) -> m.RunLaunch:
        from scrape_contracts.defs.partitions import partitions_for

        loaded = self._contract(principal, name, write=True)
        key = (idempotency_key or "").strip()
        if not key or len(key) > 256:
            raise Refused(Refusal.INVALID, "an Idempotency-Key header (1 to 256 characters) is required: "
                                           "the same key again returns the same runs")
        sha = request_hash(body.model_dump())
        used = self.keys.find(name, key)
        if used is not None:
            return self._replay(name, key, sha, used.request_sha256, used.run_ids)
        all_keys = partitions_for(loaded.contract).get_partition_keys(dynamic_partitions_store=self.instance)
        paused = self.store.paused_partitions(name)
        if body.partition is not None:
            if body.partition not in all_keys:
                raise Refused(Refusal.NOT_FOUND, f"{name!r} has no target {body.partition!r}")
            keys, skipped = [], []
        else:
            keys = [k for k in all_keys if k not in paused]
            skipped = sorted(set(all_keys) & set(paused))
        if body.partition is None and not keys:
            raise Refused(Refusal.CONFLICT, f"nothing to scrape: {name!r} has no target that is not paused")
        # the CLI's way of cutting targets into runs (single target, or batches of batch_size), one source
        specs = launch.run_specs(loaded, keys, idempotency_key=key, partition=body.partition, force=body.force)
        for spec in specs:
            spec.tags["scrape_contracts/trigger"] = "api"
            spec.tags["scrape_contracts/principal"] = principal.name
        # the key and the runs it stands for are recorded before anything is queued (one row, unique key): of
        # two requests racing with one key, the one that lost the insert queues nothing
        run_ids = [spec.run_id for spec in specs]
        use = self.keys.remember(name, key, sha, run_ids, principal.token_id)
        if use.request_sha256 != sha or use.run_ids != run_ids:
            return self._replay(name, key, sha, use.request_sha256, use.run_ids)
        self.audit.record(principal, "run", name, body.partition or "*", "", request_id,
                          "queued " + ", ".join(run_ids))
        existing = launch.runs_by_id(self.instance, run_ids)
        # `dagster job launch` loads the code location (seconds): it runs after the answer, and the run ids,
        # derived from the key, are known now
        threading.Thread(target=self._queue, args=(name, specs), daemon=True,
                         name=f"queue-{name}-{key[:16]}").start()
        return m.RunLaunch(contract=name, idempotency_key=key, replayed=False, skipped_paused=skipped,
                           runs=[m.LaunchedRun(run_id=spec.run_id, label=spec.label,
                                               status=existing[spec.run_id].status.value
                                               if spec.run_id in existing else SUBMITTED)
                                 for spec in specs])

    def _queue(self, name: str, specs: list[launch.RunSpec]) -> None:
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Error loading repository location", category=UserWarning)
                launch.queue(self.instance, self.workspace, specs, lambda *_: None)
        except Exception as exc:  # noqa: BLE001 - a thread of its own: said in the log, and the runs stay absent
            logger.error("cannot queue the runs of %s (%s): %s", name, ", ".join(s.run_id for s in specs), exc)

    def _replay(self, name: str, key: str, sha: str, recorded: str, run_ids: list[str]) -> m.RunLaunch:
        if recorded != sha:
            raise Refused(Refusal.CONFLICT, f"idempotency key {key!r} was used for another request to {name!r}; "
                                            "use a new key for a different request")
        runs = []
        for run_id in run_ids:
            run = self.instance.get_run_by_id(run_id)
            runs.append(m.LaunchedRun(run_id=run_id, status=run.status.value if run else SUBMITTED,
                                      label=(run.tags.get("scrape_contracts/batch") or
                                             run.tags.get("scrape_contracts/target") or "") if run else ""))
        return m.RunLaunch(contract=name, idempotency_key=key, replayed=True, runs=runs, skipped_paused=[])

    def add_targets(self, principal: Principal, name: str, urls: list[str], request_id: str) -> m.TargetsAdded:
        from scrape_contracts.defs.targets import add_targets

        loaded = self._contract(principal, name, write=True)
        try:
            added = add_targets(loaded, urls, self.instance, self.store)
        except ValueError as exc:
            raise Refused(Refusal.INVALID, str(exc)) from None
        self.audit.record(principal, "add_targets", name, ",".join(added) or "-", "", request_id,
                          f"added {len(added)} target(s)")
        return m.TargetsAdded(contract=name, added={k: without_userinfo(u) for k, u in added.items()})

    def set_paused(self, principal: Principal, name: str, key: str, *, paused: bool, reason: str,
                   request_id: str) -> m.TargetState:
        loaded = self._contract(principal, name, write=True)
        self._require_target(loaded, key)
        if paused and not reason.strip():
            raise Refused(Refusal.INVALID, "pausing a target needs a reason")
        config = {"contract": name, "partition": key, "action": "pause" if paused else "resume",
                  "by": principal.name, "reason": reason}
        result = self._job("target_state_job", {"set_target_state": {"config": config}})
        if not result.success:
            raise Refused(Refusal.CONFLICT, launch.failure_reason(result))
        state = self.store.state(name, key)
        recorded = state.pause_reason if state.paused else f"resumed by {principal.name}"
        self.audit.record(principal, "pause" if paused else "resume", name, key, reason, request_id,
                          f"run {result.run_id}")
        return m.TargetState(contract=name, key=key, paused=state.paused, reason=recorded or "",
                             run_id=result.run_id)

    def review(self, principal: Principal, name: str, partition: str, body: m.ReviewBody,
               request_id: str) -> m.ReviewResult:
        loaded = self._contract(principal, name, write=True)
        self._require_target(loaded, partition)
        config: dict[str, Any] = {"contract": name, "partition": partition, "decision": body.decision,
                                  "reviewer": principal.name, "reason": body.reason}
        if body.candidate_id is not None:
            config["candidate_id"] = body.candidate_id
        # the review job, as the CLI and the launchpad run it: the decision is in run history with who and why
        result = self._job("review_job", {"review_decision": {"config": config}})
        outcome = f"run {result.run_id}: " + ("ok" if result.success else launch.failure_reason(result))
        self.audit.record(principal, f"review_{body.decision}", name, partition, body.reason, request_id, outcome)
        if not result.success:
            raise Refused(Refusal.CONFLICT, launch.failure_reason(result))
        latest = self.store.latest_accepted(name, partition)
        version = latest.version if latest is not None and body.decision == "accept" else None
        return m.ReviewResult(contract=name, partition=partition, decision=body.decision,
                              reviewer=principal.name, run_id=result.run_id, accepted_version=version)

    def _require_target(self, loaded: LoadedContract, key: str) -> None:
        from scrape_contracts.defs.partitions import partitions_for

        keys = partitions_for(loaded.contract).get_partition_keys(dynamic_partitions_store=self.instance)
        if key not in keys and key not in self.store.list_targets(loaded.contract.name):
            raise Refused(Refusal.NOT_FOUND, f"{loaded.contract.name!r} has no target {key!r}")

    def _job(self, job_name: str, ops: dict[str, Any]) -> dg.ExecuteInProcessResult:
        from scrape_contracts.defs import build_definitions

        defs = build_definitions(self.contracts_dir)
        return defs.resolve_job_def(job_name).execute_in_process(
            run_config={**launch.QUIET, "ops": ops}, instance=self.instance, raise_on_error=False,
            tags={"scrape_contracts/trigger": "api"})


def _summary(loaded: LoadedContract) -> m.ContractSummary:
    contract = loaded.contract
    schedule = getattr(contract.schedule, "cron", None) if contract.schedule else None
    return m.ContractSummary(name=contract.name, description=contract.description, owners=list(contract.owners),
                             dynamic=contract.is_dynamic, schedule=schedule)
