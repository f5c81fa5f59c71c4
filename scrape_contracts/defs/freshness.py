"""Freshness of accepted data: a stale target (paused, or failing without anyone noticing) shows in the UI.

Two of Dagster's means, because neither alone shows a stale *target*:

- ``scrape/C`` carries Dagster's ``FreshnessPolicy.cron`` derived from ``schedule:``. Dagster 1.13 evaluates
  it per asset, not per partition (the newest materialisation of any target satisfies it), and only when
  ``freshness: {enabled: true}`` is in ``dagster.yaml``: it says "this contract stopped", never "this one
  target of 500 stopped". And a batched run records no event for an unchanged target, so Dagster's own
  view would call a stable page stale even when it is scraped on time.
- So each target gets the partitioned, non-blocking check ``refreshed_on_schedule`` on ``scrape/C``: it
  fails (WARN) when the target is paused, or has not succeeded (accepted *or* unchanged, from the project
  store) since the tick before the latest tick of its strictest schedule (``engine/freshness.py``).
  ``freshness_sensor`` (running by default) recomputes every target every 5 minutes and, when a verdict
  changed, requests a ``freshness_job`` run that records the new evaluations, aimed at each partition's
  latest materialisation (the UI shows a partition's check only then). Evaluations that did not change
  are not written again, so a steady state costs no events. ``Execute`` on the check evaluates one target.
"""


import datetime as dt
import hashlib
import json
import warnings
from collections.abc import Callable, Sequence

import dagster as dg

from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.contract.loader import LoadedContract, LoadResult
from scrape_contracts.contract.model import Contract
from scrape_contracts.defs.names import accepted_key
from scrape_contracts.defs.partitions import partitions_for
from scrape_contracts.defs.resources import ProjectStoreResource
from scrape_contracts.defs.schedules import canary_schedules
from scrape_contracts.defs.names import schedule_name
from scrape_contracts.engine.freshness import Cadence, Freshness, freshness

FRESHNESS_CHECK = "refreshed_on_schedule"
JOB_NAME = "freshness_job"


def cadences_of(contract: Contract) -> Callable[[str], list[Cadence]]:
    """The schedules that scrape each target (the contract's, and its canary's), worked out once."""
    common = []
    if contract.schedule is not None:
        common.append(Cadence(schedule_name(contract.name), contract.schedule.cron, contract.schedule.timezone))
    own: dict[str, list[Cadence]] = {}
    for item in canary_schedules(contract):
        cadence = Cadence(item.name, item.schedule.cron, item.schedule.timezone)
        if item.targets is None:
            common.append(cadence)
        for key in item.targets or ():
            own.setdefault(key, []).append(cadence)
    return lambda partition: common + own.get(partition, [])


def has_freshness(contract: Contract) -> bool:
    return contract.schedule is not None or bool(canary_schedules(contract))


def freshness_policy(contract: Contract) -> dg.FreshnessPolicy | None:
    """Dagster's asset-level policy for ``scrape/C``: by each tick of ``schedule:``, some target of the
    contract succeeded within the longest gap between two ticks (see the module docstring for its limits)."""
    if contract.schedule is None:
        return None
    from croniter import croniter

    ticks = croniter(contract.schedule.cron, dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
    times = [ticks.get_next(dt.datetime) for _ in range(32)]
    longest = max(b - a for a, b in zip(times, times[1:]))
    return dg.FreshnessPolicy.cron(deadline_cron=contract.schedule.cron, lower_bound_delta=longest,
                                   timezone=contract.schedule.timezone)


def _evaluation(contract: str, partition: str, verdict: Freshness) -> dg.AssetCheckEvaluation:
    return dg.AssetCheckEvaluation(
        asset_key=accepted_key(contract), check_name=FRESHNESS_CHECK, passed=verdict.fresh, partition=partition,
        severity=dg.AssetCheckSeverity.WARN, description=verdict.description, metadata=verdict.metadata())


def verdicts(instance: dg.DagsterInstance, store: ProjectStore, loaded: LoadedContract, now: dt.datetime,
             partitions: Sequence[str] | None = None) -> dict[str, Freshness]:
    contract = loaded.contract
    keys = partitions if partitions is not None else \
        partitions_for(contract).get_partition_keys(dynamic_partitions_store=instance)
    states = store.states(contract.name)
    cadences_for = cadences_of(contract)
    found = {}
    for key in keys:
        cadences = cadences_for(key)
        if not cadences:
            continue
        state = states.get(key)
        found[key] = freshness(cadences, now, state.last_success_at if state else None,
                               (state.pause_reason or "paused") if state and state.paused else None)
    return found


def changed_evaluations(instance: dg.DagsterInstance, store: ProjectStore, loaded: LoadedContract,
                        now: dt.datetime) -> list[dg.AssetCheckEvaluation]:
    """Evaluations of the targets whose verdict differs from the one the UI shows (or shows none)."""
    name = loaded.contract.name
    check = dg.AssetCheckKey(accepted_key(name), FRESHNESS_CHECK)
    shown = {info.partition_key: info for info in instance.event_log_storage.get_asset_check_partition_info([check])}
    changed = []
    for key, verdict in verdicts(instance, store, loaded, now).items():
        info = shown.get(key)
        # the status enum is not exported; its values are its stored names
        status = "SUCCEEDED" if verdict.fresh else "FAILED"
        if info is not None and info.is_current and getattr(info.latest_execution_status, "value", None) == status:
            continue
        changed.append(_evaluation(name, key, verdict))
    return changed


def build_freshness_check(loaded: LoadedContract) -> dg.AssetChecksDefinition | None:
    contract = loaded.contract
    if not has_freshness(contract):
        return None

    def refreshed_on_schedule(context: dg.AssetCheckExecutionContext, store: ProjectStoreResource
                              ) -> dg.AssetCheckResult:
        partition = context.op_execution_context.partition_key
        verdict = verdicts(context.instance, store.get(), loaded, dt.datetime.now(dt.timezone.utc), [partition])
        (found,) = verdict.values()
        return dg.AssetCheckResult(passed=found.fresh, severity=dg.AssetCheckSeverity.WARN,
                                   description=found.description, metadata=found.metadata())

    with warnings.catch_warnings():
        # partitioned asset checks are a preview feature in dagster 1.13; we depend on them on purpose
        warnings.filterwarnings("ignore", message=".*partitions_def on an AssetCheckSpec", category=dg.PreviewWarning)
        return dg.asset_check(
            asset=accepted_key(contract.name), name=FRESHNESS_CHECK, blocking=False,
            partitions_def=partitions_for(contract),
            description="The target is refreshed on its schedule: not paused, and its last success (accepted "
                        "or unchanged) is no older than the tick before its schedule's latest tick. Evaluated "
                        "by freshness_sensor when a verdict changes.",
        )(refreshed_on_schedule)


def build_freshness_defs(result: LoadResult) -> tuple[list[dg.SensorDefinition], list[dg.JobDefinition]]:
    watched = [item for item in result.contracts if has_freshness(item.contract)]

    @dg.op(name="evaluate_freshness")
    def evaluate_freshness(context: dg.OpExecutionContext, store: ProjectStoreResource) -> None:
        """Record the freshness of every target whose verdict changed, on ``refreshed_on_schedule``."""
        from scrape_contracts.defs.checks import aimed_at_latest

        now = dt.datetime.now(dt.timezone.utc)
        stale = 0
        for item in watched:
            evaluations = changed_evaluations(context.instance, store.get(), item, now)
            stale += sum(not e.passed for e in evaluations)
            for evaluation in aimed_at_latest(context.instance, evaluations):
                context.log_event(evaluation)
            if evaluations:
                context.log.info(f"{item.contract.name}: {len(evaluations)} verdict(s) changed")
        context.log.info(f"{stale} target(s) turned stale")

    @dg.job(name=JOB_NAME, executor_def=dg.in_process_executor, tags={"scrape_contracts/kind": "freshness"},
            description="Records the freshness verdicts that changed (requested by freshness_sensor).")
    def freshness_job() -> None:
        evaluate_freshness()

    @dg.sensor(name="freshness_sensor", job_name=JOB_NAME, minimum_interval_seconds=300,
               default_status=dg.DefaultSensorStatus.RUNNING,
               description="Every 5 minutes: requests a freshness_job run when a target turned stale or fresh.")
    def freshness_sensor(context: dg.SensorEvaluationContext, store: ProjectStoreResource) -> dg.SensorResult:
        now = dt.datetime.now(dt.timezone.utc)
        changed = [(e.asset_key.to_user_string(), e.partition, e.passed, e.metadata["expected_since"].value,
                    e.metadata["last_success"].value)
                   for item in watched for e in changed_evaluations(context.instance, store.get(), item, now)]
        if not changed:
            return dg.SensorResult(skip_reason="no target's freshness changed")
        # the same changes give the same key: a tick evaluated twice before the run records them launches once;
        # a target that turns stale again later has another expected_since or last success, so another key
        digest = hashlib.sha256(json.dumps(changed, default=str).encode()).hexdigest()[:16]
        return dg.SensorResult(run_requests=[dg.RunRequest(run_key=f"freshness:{digest}", tags={
            "scrape_contracts/freshness_changes": str(len(changed))})])

    return ([freshness_sensor], [freshness_job]) if watched else ([], [])
