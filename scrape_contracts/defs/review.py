"""Review of quarantined candidates: ``review_sensor`` finds them, ``review_job`` records a decision."""

import json
from typing import Any

import dagster as dg

from scrape_contracts.adapters.statuses import OutboxKind
from scrape_contracts.adapters.store import Candidate, ProjectStore, StoreError
from scrape_contracts.contract.loader import LoadedContract, LoadResult
from scrape_contracts.defs.assets import stage_description, target_state_observation
from scrape_contracts.defs.names import accepted_key, candidate_key, review_command
from scrape_contracts.defs.checks import aimed_at_latest
from scrape_contracts.defs.metadata import bounded
from scrape_contracts.defs.resources import PageStoreResource, ProjectStoreResource
from scrape_contracts.engine.lists import is_set, set_records
from scrape_contracts.service import repair_review, repairs
from scrape_contracts.service.records import Emit, Stage


class ReviewConfig(dg.Config):
    contract: str
    partition: str
    decision: str  # accept | reject
    reviewer: str
    reason: str
    candidate_id: int | None = None  # pin the decision to the candidate you looked at


def build_review_job(result: LoadResult) -> dg.JobDefinition:
    """``review_job``: one for every contract; a proposal of the provider's repair is decided with its
    contract's checks (service/repair_review.py), so the job knows the contracts."""
    contracts = result.by_name()

    @dg.op(name="review_decision")
    def review_decision(context: dg.OpExecutionContext, config: ReviewConfig, store: ProjectStoreResource,
                        artifacts: PageStoreResource) -> None:
        """Accept or reject the quarantined candidate of one partition, recording who and why."""
        if config.decision not in ("accept", "reject"):
            raise dg.Failure(f"decision must be 'accept' or 'reject', not {config.decision!r}")
        project_store = store.get()
        waiting = (project_store.candidate(config.candidate_id) if config.candidate_id is not None
                   else project_store.pending_review(config.contract, config.partition))
        proposal = repair_review.proposal_of(project_store, waiting) if waiting is not None \
            and waiting.status == "quarantined" and waiting.partition == config.partition else None
        if proposal is not None and proposal.state == "proposed":
            return _decide_repair(context, config, project_store, artifacts, waiting, proposal,
                                  contracts.get(config.contract))
        try:
            review = project_store.decide(config.contract, config.partition, config.decision,
                                          reviewer=config.reviewer, reason=config.reason, run_id=context.run_id,
                                          candidate_id=config.candidate_id)
        except StoreError as exc:
            raise dg.Failure(description=str(exc), allow_retries=False) from None
        _report(context, config, project_store, review.candidate_id, str(review.decision), review.accepted_version)

    @dg.job(name="review_job", tags={"scrape_contracts/kind": "review"},
            description="Accept or reject a quarantined candidate (contract, partition, decision, reviewer, "
                        "reason); a provider's repair proposal is checked again before it is accepted.")
    def review_job() -> None:
        review_decision()

    return review_job


def _decide_repair(context: dg.OpExecutionContext, config: ReviewConfig, store: ProjectStore,
                   artifacts: PageStoreResource, candidate: Candidate, proposal: Any,
                   loaded: LoadedContract | None) -> None:
    if loaded is None:
        raise dg.Failure(description=f"no valid contract named {config.contract!r}", allow_retries=False)
    emit = _emitter(context, config.contract, config.partition)
    try:
        done = repair_review.decide(store, loaded, artifacts.get(), candidate, proposal, config.decision,
                              reviewer=config.reviewer, reason=config.reason, run_id=context.run_id, emit=emit)
    except repair_review.RepairRefused as exc:
        context.log_event(dg.AssetObservation(
            asset_key=candidate_key(config.contract), partition=config.partition,
            metadata={"stage": Stage.REPAIR_REVIEWED.value, "decision": "accept", "refused": str(exc),
                      "reviewer": config.reviewer, "reason": config.reason, "candidate_id": candidate.id,
                      "proposal_id": proposal.id}, description=f"repair_reviewed: refused: {exc}"[:300]))
        state = store.state(config.contract, config.partition)
        context.log_event(target_state_observation(config.contract, config.partition,
                                                   state.pause_reason if state.paused else None))
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    except StoreError as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    context.log_event(dg.AssetObservation(
        asset_key=candidate_key(config.contract), partition=config.partition,
        metadata={"stage": Stage.REPAIR_REVIEWED.value, "decision": config.decision,
                  "reviewer": config.reviewer, "reason": config.reason, "proposal_id": proposal.id,
                  "repair": dg.MetadataValue.json(bounded(done.proposal.as_dict())),
                  **({"selector_version": done.selector_version} if done.selector_version else {})},
        description=f"repair_reviewed: {config.decision}ed by {config.reviewer}: {config.reason}"[:300]))
    if done.accepted_version is not None:
        accepted = store.latest_accepted(config.contract, config.partition)
        _report(context, config, store, accepted.candidate_id, "accept", done.accepted_version)
    else:
        _report(context, config, store, candidate.id, "reject", None)


def _emitter(context: dg.OpExecutionContext, contract: str, partition: str) -> Emit:
    """The stages of re-checking a repaired record, as observations on the target's candidate partition."""
    def emit(stage: Stage, data: dict[str, Any]) -> None:
        context.log_event(dg.AssetObservation(
            asset_key=candidate_key(contract), partition=partition,
            metadata={"stage": stage.value, **{k: bounded(v) for k, v in data.items()}},
            description=stage_description(stage.value, data)))

    return emit


def _report(context: dg.OpExecutionContext, config: ReviewConfig, store: ProjectStore, candidate_id: int,
            decision: str, accepted_version: int | None) -> None:
    """The decision on the candidate's partition; an acceptance as a materialisation of the accepted data."""
    metadata = {"stage": "reviewed", "decision": decision, "reviewer": config.reviewer,
                "reason": config.reason, "candidate_id": candidate_id}
    verdict = f"{decision}ed by {config.reviewer}: {config.reason}"
    context.log_event(dg.AssetObservation(asset_key=candidate_key(config.contract), partition=config.partition,
                                          metadata=metadata, description=f"reviewed: {verdict}"))
    candidate = store.candidate(candidate_id)
    if decision == "accept":
        # the checks that quarantined it pass now, by the reviewer's word: the UI stops showing them failed
        evaluations = _accepted_evaluations(config.contract, config.partition, candidate, verdict, metadata)
        for evaluation in aimed_at_latest(context.instance, evaluations):
            context.log_event(evaluation)
        context.log_event(dg.AssetMaterialization(
            asset_key=accepted_key(config.contract), partition=config.partition,
            metadata={**metadata, "stage": "accepted", "outcome": "valid", "version": accepted_version,
                      # one record, or a list target's set of them
                      "dagster/row_count":
                          len(set_records(candidate.record)) if is_set(candidate.record) else 1,
                      "record": dg.MetadataValue.json(bounded(candidate.record))},
        ))
    state = store.state(config.contract, config.partition)
    context.log_event(target_state_observation(config.contract, config.partition,
                                               state.pause_reason if state.paused else None))
    context.log.info(f"{config.contract}/{config.partition}: candidate {candidate_id} {verdict}")


def _accepted_evaluations(contract: str, partition: str, candidate, verdict: str,
                          review: dict) -> list[dg.AssetCheckEvaluation]:
    """A passing evaluation of each check the candidate failed, saying who accepted it and why."""
    violations = (candidate.details or {}).get("violations", [])
    evaluations = []
    for check in dict.fromkeys(v["check"] for v in violations):
        first = next(v for v in violations if v["check"] == check)
        evaluations.append(dg.AssetCheckEvaluation(
            asset_key=candidate_key(contract), check_name=check, passed=True, partition=partition,
            severity=dg.AssetCheckSeverity.ERROR, description=verdict,
            metadata={**{k: v for k, v in review.items() if k != "stage"}, "field": first["field"] or "(record)",
                      "rule": first["rule"], "old": json.dumps(first["old"], default=str),
                      "new": json.dumps(first["new"], default=str), "message": first["message"]}))
    return evaluations


class TargetStateConfig(dg.Config):
    contract: str
    partition: str
    action: str  # pause | resume
    by: str
    reason: str


@dg.op(name="set_target_state")
def set_target_state(context: dg.OpExecutionContext, config: TargetStateConfig, store: ProjectStoreResource) -> None:
    """Pause or resume one target by hand, recording who and why."""
    from scrape_contracts.service import targets

    if config.action not in ("pause", "resume"):
        raise dg.Failure(f"action must be 'pause' or 'resume', not {config.action!r}")
    try:
        change = (targets.pause if config.action == "pause" else targets.resume)(
            store.get(), config.contract, config.partition, by=config.by, reason=config.reason)
    except StoreError as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    context.log_event(dg.AssetObservation(
        asset_key=candidate_key(config.contract), partition=config.partition,
        metadata={"stage": "paused" if change.paused else "resumed", "reason": change.reason, "by": config.by},
        description=f"{'paused' if change.paused else 'resumed'}: {change.reason}"))
    context.log_event(target_state_observation(config.contract, config.partition,
                                               change.reason if change.paused else None))
    context.log.info(f"{config.contract}/{config.partition}: {change.reason}")


@dg.job(name="target_state_job", tags={"scrape_contracts/kind": "target_state"},
        description="Pause or resume a target by hand (contract, partition, action, by, reason).")
def target_state_job() -> None:
    set_target_state()


class ReviewNoticeConfig(dg.Config):
    candidate_ids: list[int]


@dg.op(name="announce_review")
def announce_review(context: dg.OpExecutionContext, config: ReviewNoticeConfig,
                    store: ProjectStoreResource) -> None:
    """Tell reviewers about each quarantined candidate: a warning in the run's log and, on its partition, a
    ``review_announced`` observation that says what to do. Destinations (Slack, webhooks) get the same
    outbox row through ``activation_sensor`` when a contract routes ``on: quarantined``."""
    for candidate_id in config.candidate_ids:
        candidate = store.get().candidate(candidate_id)
        if candidate is None or candidate.status != "quarantined":
            context.log.info(f"candidate {candidate_id}: no longer waiting for review, not announced")
            continue
        reasons = [v["message"] for v in (candidate.details or {}).get("violations", [])]
        repair = ((candidate.details or {}).get("heal") or {}).get("repair") or {}
        if repair.get("state") == "proposed":  # what the reviewer decides on is the provider's proposal
            reasons.insert(0, repairs.quarantine_reason(repair))
        what_to_do = review_command(candidate.contract, candidate.partition)
        context.log.warning(f"review required: {candidate.contract}/{candidate.partition} candidate "
                            f"{candidate.id} ({candidate.url}): {'; '.join(reasons)}")
        context.log_event(dg.AssetObservation(
            asset_key=candidate_key(candidate.contract), partition=candidate.partition,
            metadata={"stage": Stage.REVIEW_ANNOUNCED.value, "candidate_id": candidate.id,
                      "reasons": bounded(reasons),
                      "review": what_to_do},
            description=f"review_announced: {'; '.join(reasons)}"[:300]))


@dg.job(name="review_notice_job", tags={"scrape_contracts/kind": "review_notice"},
        description="Announces quarantined candidates to reviewers; launched by review_sensor, one run per "
                    "tick that finds new ones.")
def review_notice_job() -> None:
    announce_review()


def _cursor(raw: str | None) -> tuple[int, int]:
    """(outbox id, candidate id) already announced up to. A cursor written before the sensor read the outbox
    holds a candidate id only: the outbox is read from its start, skipping candidates up to that id."""
    saved = json.loads(raw) if raw else {}
    return int(saved.get("outbox_id", 0)), int(saved.get("after_id", 0))


@dg.sensor(name="review_sensor", job_name="review_notice_job", minimum_interval_seconds=60,
           default_status=dg.DefaultSensorStatus.RUNNING,
           description="Reads the outbox's `quarantined` events after its cursor and requests a "
                       "review_notice_job run that announces those still waiting; other ticks skip.")
def review_sensor(context: dg.SensorEvaluationContext, store: ProjectStoreResource) -> dg.SensorResult:
    # the outbox row is written in the quarantine's own transaction: the one source of "quarantined",
    # read here and by activation_sensor (destinations), so neither can see a quarantine the other misses
    after, legacy_after = _cursor(context.cursor)
    project_store = store.get()
    rows = project_store.outbox().after(after, 100, kinds=[OutboxKind.QUARANTINED])
    if not rows:
        return dg.SensorResult(skip_reason=f"no newly quarantined candidates (after outbox id {after})")
    cursor = json.dumps({"outbox_id": rows[-1].id})
    waiting = [c for c in (project_store.candidate(int(r.data["candidate_id"])) for r in rows
                           if int(r.data["candidate_id"]) > legacy_after)
               if c is not None and c.status == "quarantined"]
    if not waiting:
        return dg.SensorResult(skip_reason=f"no newly quarantined candidates (up to outbox id {rows[-1].id}: "
                                           "decided or superseded already)", cursor=cursor)
    targets = ", ".join(f"{c.contract}/{c.partition}" for c in waiting)
    # a tick that requests a run is marked apart from the skipped ones in the sensor's tick history, and
    # its run says what waits for review; the run key makes a re-evaluated tick launch nothing twice
    context.log.warning(f"{len(waiting)} candidate(s) quarantined, waiting for review: {targets}")
    return dg.SensorResult(
        run_requests=[dg.RunRequest(
            run_key=f"review_notice:outbox-{rows[0].id}-{rows[-1].id}",
            run_config={"ops": {"announce_review": {"config": {"candidate_ids": [c.id for c in waiting]}}}},
            tags={"scrape_contracts/quarantined": targets[:200] + ("…" if len(targets) > 200 else "")})],
        cursor=cursor)
