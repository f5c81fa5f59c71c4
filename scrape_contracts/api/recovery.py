"""The front door's recovery operations: reconcile an indeterminate provider submission, list and replay a
contract's dead letters. A part of ``FrontDoor`` (ops.py), with the same authorisation, audit and idempotency
as its other writes: the decision is a run of ``reconcile_job``, the scrape and the replay are runs handed to
Dagster's queue, and an Idempotency-Key answers a repeat with the same runs."""

from __future__ import annotations

import uuid
from typing import Any

from scrape_contracts.api import models as m
from scrape_contracts.api.idempotency import KeyUse, request_hash
from scrape_contracts.api.refusals import Refusal, Refused
from scrape_contracts.api.tokens import Principal
from scrape_contracts.defs import launching as launch
from scrape_contracts.defs.names import RECONCILE_JOB, failures_job_name


class RecoveryOps:
    """Mixed into ``FrontDoor``, which provides what is declared here."""

    store: Any
    instance: Any
    keys: Any
    audit: Any

    def _contract(self, principal: Principal, name: str, *, write: bool = False) -> Any:
        raise NotImplementedError

    def _require_target(self, loaded: Any, key: str) -> None:
        raise NotImplementedError

    def _job(self, job_name: str, ops: dict[str, Any], run_id: str) -> Any:
        raise NotImplementedError

    def _audit_first(self, principal: Principal, action: str, contract: str, target: str, reason: str,
                     request_id: str, outcome: str) -> int:
        raise NotImplementedError

    def _queue_later(self, name: str, specs: list[launch.RunSpec]) -> None:
        raise NotImplementedError

    def reconcile(self, principal: Principal, name: str, key: str, body: m.ReconcileBody,
                  idempotency_key: str, request_id: str) -> m.ReconcileResult:
        loaded = self._contract(principal, name, write=True)
        self._require_target(loaded, key)
        idem = _key(idempotency_key)
        if (body.job_id is None) == (not body.resubmit):
            raise Refused(Refusal.INVALID, "give job_id (adopt the provider's job) or resubmit: true, "
                                           "not both")
        if loaded.contract.fetch.adapter != "provider":
            raise Refused(Refusal.CONFLICT, f"{name!r} does not fetch through a provider (fetch.adapter is "
                                            f"{loaded.contract.fetch.adapter!r}): nothing to reconcile")
        sha = request_hash({"operation": "reconcile", "key": key, **body.model_dump()})
        specs = launch.run_specs(loaded, [], idempotency_key=f"reconcile:{idem}", partition=key)
        for spec in specs:
            spec.tags.update({"scrape_contracts/trigger": "api-reconcile",
                              "scrape_contracts/principal": principal.name})
        used = self.keys.find(name, idem)
        if used is not None:
            return self._reconciled(name, key, body, idem, sha, used, specs, replayed=True)
        run_id = str(uuid.uuid4())
        config = {"contract": name, "partition": key, "job_id": body.job_id, "resubmit": body.resubmit,
                  "by": principal.name, "reason": body.reason}
        entry = self._audit_first(principal, "reconcile", name, key, body.reason, request_id, f"run {run_id}")
        result = self._job(RECONCILE_JOB, {"reconcile_submission": {"config": config}}, run_id)
        if not result.success:
            self.audit.finish(entry, f"run {run_id}: {launch.failure_reason(result)}")
            raise Refused(Refusal.CONFLICT, launch.failure_reason(result))
        mine = KeyUse(sha, [run_id, specs[0].run_id])
        claimed = self.keys.claim(name, idem, sha, mine.run_ids, principal.token_id)
        if claimed is not None:  # another request with the key claimed it meanwhile
            return self._reconciled(name, key, body, idem, sha, claimed, specs, replayed=True)
        self.audit.finish(entry, f"run {run_id}: reconciled; scrape run {specs[0].run_id}")
        self._queue_later(name, specs)
        return self._reconciled(name, key, body, idem, sha, mine, specs, replayed=False)

    def _reconciled(self, name: str, key: str, body: m.ReconcileBody, idem: str, sha: str, used: KeyUse,
                    specs: list[launch.RunSpec], *, replayed: bool) -> m.ReconcileResult:
        _same_request(used, sha, idem, name)
        reconcile_run, scrape_run = used.run_ids
        found = launch.runs_by_id(self.instance, [scrape_run])
        if replayed and scrape_run not in found:
            self._queue_later(name, [s for s in specs if s.run_id == scrape_run])
        run = found.get(scrape_run)
        return m.ReconcileResult(
            contract=name, key=key, action="resubmit" if body.resubmit else "adopted", job_id=body.job_id,
            reconcile_run_id=reconcile_run, idempotency_key=idem, replayed=replayed,
            scrape=m.LaunchedRun(run_id=scrape_run, status=run.status.value if run else "SUBMITTED",
                                 label=f"{name}/{key}"))

    def list_failures(self, principal: Principal, name: str, *, last: int = 3) -> m.FailureReport:
        from scrape_contracts.service.failures import count, dead_letters

        loaded = self._contract(principal, name)
        groups = dead_letters(self.store, loaded, last=last)
        return m.FailureReport(contract=name, last=last, targets=count(groups), groups=[
            m.FailureGroupRecord(reason=g.reason, kind=g.kind, count=len(g.targets), targets=[
                m.DeadLetterRecord(key=t.partition, url=t.url, streak=t.streak, reason=t.reason,
                                   paused=t.paused)
                for t in g.targets]) for g in groups])

    def replay_failures(self, principal: Principal, name: str, body: m.ReplayBody, idempotency_key: str,
                        request_id: str) -> m.RunLaunch:
        from scrape_contracts.service.failures import dead_letters, replayable

        loaded = self._contract(principal, name, write=True)
        idem = _key(idempotency_key)
        sha = request_hash({"operation": "replay_failures", **body.model_dump()})
        spec = launch.RunSpec(failures_job_name(name), launch.idempotent_run_id(name, "replay", idem),
                              {"scrape_contracts/contract": name, "scrape_contracts/trigger": "api-replay",
                               "scrape_contracts/principal": principal.name},
                              {"ops": {f"{name}_failures": {"config": {"last": body.last, "replay": True}}}},
                              label=f"{name} dead letters")
        used = self.keys.find(name, idem)
        if used is None:
            keys = replayable(dead_letters(self.store, loaded, last=body.last))
            if not keys:
                raise Refused(Refusal.CONFLICT, f"nothing to replay: no target of {name!r} that is not "
                                                f"paused failed its last {body.last} run(s)")

            def audited(conn: Any) -> None:
                self.audit.record(principal, "replay_failures", name, ",".join(keys)[:2000], "", request_id,
                                  f"replaying {len(keys)} target(s) in run {spec.run_id}", conn=conn)

            used = self.keys.claim(name, idem, sha, [spec.run_id], principal.token_id, then=audited)
            if used is None:
                self._queue_later(name, [spec])
                queued = m.LaunchedRun(run_id=spec.run_id, status="SUBMITTED", label=spec.label)
                return m.RunLaunch(contract=name, idempotency_key=idem, replayed=False, skipped_paused=[],
                                   runs=[queued])
        _same_request(used, sha, idem, name)
        found = launch.runs_by_id(self.instance, used.run_ids)
        if spec.run_id not in found:
            self._queue_later(name, [spec])
        run = found.get(spec.run_id)
        status = run.status.value if run else "SUBMITTED"
        return m.RunLaunch(contract=name, idempotency_key=idem, replayed=True, skipped_paused=[],
                           runs=[m.LaunchedRun(run_id=spec.run_id, status=status, label=spec.label)])


def _same_request(used: KeyUse, sha: str, key: str, name: str) -> None:
    if used.request_sha256 != sha:
        raise Refused(Refusal.CONFLICT, f"idempotency key {key!r} was used for another request to {name!r}; "
                                        "use a new key for a different request")


def _key(idempotency_key: str) -> str:
    key = (idempotency_key or "").strip()
    if not key or len(key) > 256:
        raise Refused(Refusal.INVALID, "an Idempotency-Key header (1 to 256 characters) is required: the "
                                       "same key again returns the same runs")
    return key
