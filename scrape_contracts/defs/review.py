"""Review of quarantined candidates: ``review_sensor`` finds them, ``review_job`` records a decision."""

import json

import dagster as dg

from scrape_contracts.adapters.schema import OutboxKind
from scrape_contracts.adapters.store import StoreError
from scrape_contracts.defs.assets import target_state_observation
from scrape_contracts.defs.names import accepted_key, candidate_key, review_command
from scrape_contracts.defs.checks import aimed_at_latest
from scrape_contracts.defs.metadata import bounded
from scrape_contracts.defs.resources import ProjectStoreResource
from scrape_contracts.engine.lists import is_set, set_records
from scrape_contracts.service.records import Stage


class ReviewConfig(dg.Config):
    contract: str
    partition: str
    decision: str  # accept | reject
    reviewer: str
    reason: str
    candidate_id: int | None = None  # pin the decision to the candidate you looked at


@dg.op(name="review_decision")
def review_decision(context: dg.OpExecutionContext, config: ReviewConfig, store: ProjectStoreResource) -> None:
    """Accept or reject the quarantined candidate of one partition, recording who and why."""
    if config.decision not in ("accept", "reject"):
        raise dg.Failure(f"decision must be 'accept' or 'reject', not {config.decision!r}")
    try:
        review = store.get().decide(config.contract, config.partition, config.decision, reviewer=config.reviewer,
                                    reason=config.reason, run_id=context.run_id, candidate_id=config.candidate_id)
    except StoreError as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    metadata = {"stage": "reviewed", "decision": str(review.decision), "reviewer": review.reviewer,
                "reason": review.reason, "candidate_id": review.candidate_id}
    verdict = f"{review.decision}ed by {review.reviewer}: {review.reason}"
    context.log_event(dg.AssetObservation(asset_key=candidate_key(config.contract), partition=config.partition,
                                          metadata=metadata, description=f"reviewed: {verdict}"))
    candidate = store.get().candidate(review.candidate_id)
    if review.decision == "accept":
        # the checks that quarantined it pass now, by the reviewer's word: the UI stops showing them failed
        evaluations = _accepted_evaluations(config.contract, config.partition, candidate, verdict, metadata)
        for evaluation in aimed_at_latest(context.instance, evaluations):
            context.log_event(evaluation)
        context.log_event(dg.AssetMaterialization(
            asset_key=accepted_key(config.contract), partition=config.partition,
            metadata={**metadata, "stage": "accepted", "outcome": "valid", "version": review.accepted_version,
                      # one record, or a list target's set of them
                      "dagster/row_count":
                          len(set_records(candidate.record)) if is_set(candidate.record) else 1,
                      "record": dg.MetadataValue.json(bounded(candidate.record))},
        ))
    state = store.get().state(config.contract, config.partition)
    context.log_event(target_state_observation(config.contract, config.partition,
                                               state.pause_reason if state.paused else None))
    context.log.info(f"{config.contract}/{config.partition}: candidate {review.candidate_id} {verdict}")


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


@dg.job(name="review_job", tags={"scrape_contracts/kind": "review"},
        description="Accept or reject a quarantined candidate (contract, partition, decision, reviewer, reason).")
def review_job() -> None:
    review_decision()


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
