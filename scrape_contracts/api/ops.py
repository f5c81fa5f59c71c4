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
import uuid
import warnings
from pathlib import Path
from typing import Any

import dagster as dg
import sqlalchemy as sa

from scrape_contracts import settings
from scrape_contracts.defs import launching as launch
from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.contract.loader import LoadedContract, load_contracts
from scrape_contracts.contract.targets import without_userinfo
from scrape_contracts.api import models as m
from scrape_contracts.api.audit import AuditTrail
from scrape_contracts.api.idempotency import IdempotencyKeys, KeyUse, request_hash
from scrape_contracts.api.recovery import RecoveryOps
from scrape_contracts.api.refusals import Refusal, Refused
from scrape_contracts.api.tokens import Principal, TokenStore, normal_owner
from scrape_contracts.api.trail import Cursor, HighWater, read_events

REPO_ROOT = Path(__file__).resolve().parents[2]
log = logging.getLogger("scrape_contracts.api")
# a run the API has asked Dagster's queue for, which the instance does not show yet
SUBMITTED = "SUBMITTED"


def owns(principal: Principal, loaded: LoadedContract) -> bool:
    return principal.owner in {normal_owner(o) for o in loaded.contract.owners}


class FrontDoor(RecoveryOps):
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
        self._queuing: set[str] = set()  # run ids this process is handing to Dagster's queue now
        self._queuing_lock = threading.Lock()
        self._queuers: list[threading.Thread] = []

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
        if loaded is None or not owns(principal, loaded):
            # another owner's contract answers as a missing one does: neither its existence nor its owners leak
            raise Refused(Refusal.NOT_FOUND, f"no valid contract named {name!r} that {principal.owner} owns")
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
        gone = self.store.gone_targets(name) if contract.is_dynamic else {}
        targets = []
        for key, url in urls.items():
            state, candidate = states.get(key), latest.get(key)
            targets.append(m.TargetStatus(
                key=key, url=without_userinfo(url), paused=bool(state and state.paused),
                pause_reason=state.pause_reason if state and state.paused else None,
                failure_streak=state.failure_streak if state else 0,
                last_outcome=str(candidate.status) if candidate else None,
                last_run_id=candidate.run_id if candidate else None,
                last_scraped_at=candidate.created_at.isoformat() if candidate else None,
                gone_since=gone[key].isoformat() if key in gone else None,
                repair_proposal=self._proposal(candidate)))
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
        events, last = read_events(self.instance, names, cursor, limit, self._ceiling(wait_s))
        return m.EventPage(events=events, next=str(last))

    def _ceiling(self, wait_s: float) -> int:
        """The highest event id a read of several contracts may show, taken before it reads: the contracts are
        read one after another, and an event committed between two of those reads must not be passed over
        (on SQLite ids become visible in order, so every id up to the newest one is there already)."""
        mark = self.high_water.mark(wait_s)
        return mark if mark is not None else (self.instance.event_log_storage.get_maximum_record_id() or 0)

    # ---- for the event hub (api/stream.py): one reader of the trail for every open stream ----------
    def visible_contracts(self, principal: Principal, contract: str | None) -> frozenset[str]:
        """The contracts a stream of ``principal`` shows: ``contract`` (refused as missing unless owned), or
        all of the owner's."""
        if contract is not None:
            return frozenset({self._contract(principal, contract).contract.name})
        return frozenset(c.contract.name for c in self._owned(principal))

    def contract_owners(self) -> dict[str, frozenset[str]]:
        return {name: frozenset(normal_owner(o) for o in c.contract.owners) for name, c in self._loaded().items()}

    def resolve_tokens(self, tokens: set[str]) -> dict[str, Principal | None]:
        return self.tokens.resolve_many(tokens)

    def trail_head(self) -> Cursor:
        """A cursor after every event that exists now (on PostgreSQL: below which none can still appear)."""
        return Cursor(self._ceiling(0.2))

    def trail_after(self, names: list[str], after: Cursor, limit: int) -> tuple[list[m.TrailEvent], Cursor]:
        """Every listed contract's events after ``after``, unfiltered by owner (the hub filters per stream)."""
        return read_events(self.instance, names, after, limit, self._ceiling(0.2))

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
        loaded = self._contract(principal, name, write=True)
        key = (idempotency_key or "").strip()
        if not key or len(key) > 256:
            raise Refused(Refusal.INVALID, "an Idempotency-Key header (1 to 256 characters) is required: "
                                           "the same key again returns the same runs")
        sha = request_hash(body.model_dump())
        used = self.keys.find(name, key)
        if used is not None:
            return self._replay(principal, loaded, key, body, sha, used)
        specs, skipped = self._run_specs(loaded, body, key, principal)
        run_ids = [spec.run_id for spec in specs]
        # the key is claimed (and the launch audited) before anything is launched: a concurrent request with
        # the same key finds the claim and launches nothing
        claimed = self.keys.claim(name, key, sha, run_ids, principal.token_id, then=lambda conn: self.audit.record(
            principal, "run", name, body.partition or "*", "", request_id, "launching " + ", ".join(run_ids),
            conn=conn))
        if claimed is not None:
            return self._replay(principal, loaded, key, body, sha, claimed)
        self._queue_later(name, specs)
        return m.RunLaunch(contract=name, idempotency_key=key, replayed=False, skipped_paused=skipped,
                           runs=[m.LaunchedRun(run_id=spec.run_id, status=SUBMITTED, label=spec.label)
                                 for spec in specs])

    def _run_specs(self, loaded: LoadedContract, body: m.RunRequestBody, key: str,
                   principal: Principal) -> tuple[list[launch.RunSpec], list[str]]:
        from scrape_contracts.defs.partitions import partitions_for

        name = loaded.contract.name
        all_keys = partitions_for(loaded.contract).get_partition_keys(dynamic_partitions_store=self.instance)
        paused = self.store.skipped_partitions(name, unchanged=loaded.contract.skips_unchanged)
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
        return specs, skipped

    def _queue_later(self, name: str, specs: list[launch.RunSpec]) -> None:
        """Hand the runs to Dagster's queue after the answer: `dagster job launch` loads the code location
        (seconds), and the run ids, derived from the claimed key, are known already. A run this process is
        queueing already is not queued twice; one that fails to queue is queued by the same request again."""
        with self._queuing_lock:
            specs = [spec for spec in specs if spec.run_id not in self._queuing]
            self._queuing.update(spec.run_id for spec in specs)
        if specs:
            thread = threading.Thread(target=self._queue_now, args=(name, specs), daemon=True,
                                      name=f"queue-{name}")
            thread.start()
            with self._queuing_lock:
                self._queuers = [t for t in self._queuers if t.is_alive()] + [thread]

    def settle(self, timeout: float | None = None) -> None:
        """Wait until every run this process was asked for has been handed to Dagster's queue (or failed to)."""
        with self._queuing_lock:
            threads = list(self._queuers)
        for thread in threads:
            thread.join(timeout)

    def _queue_now(self, name: str, specs: list[launch.RunSpec]) -> None:
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message="Error loading repository location", category=UserWarning)
                launch.queue(self.instance, self.workspace, specs, lambda *_: None)
        except Exception as exc:  # noqa: BLE001 - a thread of its own: said in the log; a replay queues again
            log.error("cannot queue the runs of %s (%s): %s; the same request with the same Idempotency-Key "
                      "queues them", name, ", ".join(spec.run_id for spec in specs), exc)
        finally:
            with self._queuing_lock:
                self._queuing.difference_update(spec.run_id for spec in specs)

    def _replay(self, principal: Principal, loaded: LoadedContract, key: str, body: m.RunRequestBody, sha: str,
                used: KeyUse) -> m.RunLaunch:
        name = loaded.contract.name
        if used.request_sha256 != sha:
            raise Refused(Refusal.CONFLICT, f"idempotency key {key!r} was used for another request to {name!r}; "
                                            "use a new key for a different request")
        found = launch.runs_by_id(self.instance, used.run_ids)
        missing = [run_id for run_id in used.run_ids if run_id not in found]
        if missing:
            # claimed, then the launch failed or the process died: launch what the claim names
            specs = [spec for spec in self._run_specs(loaded, body, key, principal)[0] if spec.run_id in missing]
            self._queue_later(name, specs)
        runs = []
        for run_id in used.run_ids:
            run = found.get(run_id)
            runs.append(m.LaunchedRun(run_id=run_id, status=run.status.value if run else SUBMITTED,
                                      label=(run.tags.get("scrape_contracts/batch") or
                                             run.tags.get("scrape_contracts/target") or "") if run else ""))
        return m.RunLaunch(contract=name, idempotency_key=key, replayed=True, runs=runs, skipped_paused=[])

    def add_targets(self, principal: Principal, name: str, urls: list[str], request_id: str) -> m.TargetsAdded:
        from scrape_contracts.defs.targets import add_targets, keys_for, require_dynamic

        loaded = self._contract(principal, name, write=True)
        try:
            require_dynamic(loaded)
            keyed = keys_for(urls, allow_private=loaded.contract.fetch.allow_private_addresses)
        except ValueError as exc:
            raise Refused(Refusal.INVALID, str(exc)) from None
        entry = self._audit_first(principal, "add_targets", name, ",".join(keyed)[:2000] or "-", "", request_id,
                                  f"adding {len(keyed)} target(s)")
        try:
            added = add_targets(loaded, urls, self.instance, self.store)
        except ValueError as exc:
            self.audit.finish(entry, f"refused: {exc}")
            raise Refused(Refusal.INVALID, str(exc)) from None
        self.audit.finish(entry, f"added {len(added)} target(s)")
        return m.TargetsAdded(contract=name, added={k: without_userinfo(u) for k, u in added.items()})

    def set_paused(self, principal: Principal, name: str, key: str, *, paused: bool, reason: str,
                   request_id: str) -> m.TargetState:
        loaded = self._contract(principal, name, write=True)
        self._require_target(loaded, key)
        if paused and not reason.strip():
            raise Refused(Refusal.INVALID, "pausing a target needs a reason")
        config = {"contract": name, "partition": key, "action": "pause" if paused else "resume",
                  "by": principal.name, "reason": reason}
        run_id = str(uuid.uuid4())
        entry = self._audit_first(principal, "pause" if paused else "resume", name, key, reason, request_id,
                                  f"run {run_id}")
        result = self._job("target_state_job", {"set_target_state": {"config": config}}, run_id)
        if not result.success:
            self.audit.finish(entry, f"run {run_id}: {launch.failure_reason(result)}")
            raise Refused(Refusal.CONFLICT, launch.failure_reason(result))
        state = self.store.state(name, key)
        recorded = state.pause_reason if state.paused else f"resumed by {principal.name}"
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
        run_id = str(uuid.uuid4())
        entry = self._audit_first(principal, f"review_{body.decision}", name, partition, body.reason, request_id,
                                  f"run {run_id}")
        # the review job, as the CLI and the launchpad run it: the decision is in run history with who and why
        result = self._job("review_job", {"review_decision": {"config": config}}, run_id)
        self.audit.finish(entry, f"run {run_id}: " + ("ok" if result.success else launch.failure_reason(result)))
        if not result.success:
            raise Refused(Refusal.CONFLICT, launch.failure_reason(result))
        latest = self.store.latest_accepted(name, partition)
        version = latest.version if latest is not None and body.decision == "accept" else None
        return m.ReviewResult(contract=name, partition=partition, decision=body.decision,
                              reviewer=principal.name, run_id=result.run_id, accepted_version=version)

    def _proposal(self, candidate: Any) -> m.RepairProposalView | None:
        from scrape_contracts.service.repair_review import proposal_of

        if candidate is None or candidate.status != "quarantined":
            return None
        proposal = proposal_of(self.store, candidate)
        if proposal is None or proposal.state != "proposed":
            return None
        return m.RepairProposalView(proposal_id=proposal.id, repair_id=proposal.repair_id,
                                    candidate_id=candidate.id, fields=proposal.fields,
                                    selectors=proposal.selectors, values=proposal.values, cost=proposal.cost)

    def _audit_first(self, principal: Principal, action: str, contract: str, target: str, reason: str,
                     request_id: str, outcome: str) -> int:
        """The audit entry of a change about to be made; when it cannot be written the change is not made."""
        try:
            return self.audit.record(principal, action, contract, target, reason, request_id, outcome)
        except sa.exc.SQLAlchemyError as exc:
            log.error("request %s: audit entry not written (%s): %s refused", request_id, type(exc).__name__,
                      action)
            raise Refused(Refusal.UNAVAILABLE, f"the audit trail cannot be written ({type(exc).__name__}); "
                                               "nothing was changed: try again later") from None

    def _require_target(self, loaded: LoadedContract, key: str) -> None:
        from scrape_contracts.defs.partitions import partitions_for

        keys = partitions_for(loaded.contract).get_partition_keys(dynamic_partitions_store=self.instance)
        if key not in keys and key not in self.store.list_targets(loaded.contract.name):
            raise Refused(Refusal.NOT_FOUND, f"{loaded.contract.name!r} has no target {key!r}")

    def _job(self, job_name: str, ops: dict[str, Any], run_id: str) -> dg.ExecuteInProcessResult:
        from scrape_contracts.defs import build_definitions

        defs = build_definitions(self.contracts_dir)
        return launch.run_in_process(
            defs.resolve_job_def(job_name), run_config={**launch.QUIET, "ops": ops}, instance=self.instance, raise_on_error=False,
            tags={"scrape_contracts/trigger": "api"}, run_id=run_id)


def _summary(loaded: LoadedContract) -> m.ContractSummary:
    contract = loaded.contract
    schedule = getattr(contract.schedule, "cron", None) if contract.schedule else None
    return m.ContractSummary(name=contract.name, description=contract.description, owners=list(contract.owners),
                             dynamic=contract.is_dynamic, schedule=schedule)
