"""Schedules: one per contract that declares ``schedule:``, and one per canary (``canary:``).

Each tick requests batched runs over its targets that are not paused, with ``run_key`` = schedule, batch and
tick time: a tick re-evaluated after a daemon restart launches nothing twice.
"""

import hashlib
import re
from dataclasses import dataclass

import dagster as dg

from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.contract.model import Contract
from scrape_contracts.contract.schedule import Canary, Schedule
from scrape_contracts.defs.names import BATCH_TAG, batch_job_name, schedule_name
from scrape_contracts.defs.partitions import partitions_for
from scrape_contracts.defs.resources import ProjectStoreResource
from scrape_contracts.defs.launching import chunks




def build_schedule(loaded: LoadedContract) -> dg.ScheduleDefinition | None:
    contract = loaded.contract
    if contract.schedule is None:
        return None
    return _batched_schedule(contract, schedule_name(contract.name), contract.schedule, None, trigger="schedule",
                             description=f"Scrapes every target of {contract.name!r} that is not paused.")


@dataclass(frozen=True)
class CanarySchedule:
    name: str
    schedule: Schedule
    targets: tuple[str, ...] | None  # None: every target (a dynamic contract's canary)


def canary_schedules(contract: Contract) -> list[CanarySchedule]:
    """``canary_C_schedule`` for the targets on the contract's canary schedule, ``canary_C_<target>_schedule``
    for each target with a schedule of its own."""
    if contract.is_dynamic:
        return [CanarySchedule(f"canary_{contract.name}_schedule", contract.canary.schedule, None)] \
            if contract.canary is not None else []
    groups: dict[str, tuple[Schedule, list[str]]] = {}
    for target in contract.static_targets:
        key = target.partition_key
        canary = contract.canary_of(target)
        if canary is None or canary.schedule is None:
            continue
        shared = contract.canary is not None and canary.schedule == contract.canary.schedule
        own = isinstance(target.canary, Canary) and target.canary.schedule is not None and not shared
        name = _own_name(contract.name, key, groups) if own else f"canary_{contract.name}_schedule"
        groups.setdefault(name, (canary.schedule, []))[1].append(key)
    return [CanarySchedule(name, schedule, tuple(keys)) for name, (schedule, keys) in groups.items()]


def _own_name(contract: str, key: str, taken: dict) -> str:
    # Dagster names are letters, digits and _; two keys that differ only in . or - would clash: add a hash
    slug = re.sub(r"[^A-Za-z0-9_]", "_", key)
    if f"canary_{contract}_{slug}_schedule" in taken:
        slug += "_" + hashlib.sha256(key.encode()).hexdigest()[:6]
    return f"canary_{contract}_{slug}_schedule"


def build_canary_schedules(loaded: LoadedContract) -> list[dg.ScheduleDefinition]:
    contract = loaded.contract
    return [_batched_schedule(
        contract, item.name, item.schedule, item.targets, trigger="canary",
        description=(f"Canary of {contract.name!r}: scrapes "
                     + (", ".join(item.targets) if item.targets is not None else "every target")
                     + " (unless paused); failing_after failed or rejected scrapes in a row send one alert."))
        for item in canary_schedules(contract)]


def _batched_schedule(contract: Contract, name: str, schedule: Schedule, only: tuple[str, ...] | None, *,
                      trigger: str, description: str) -> dg.ScheduleDefinition:
    partitions_def = partitions_for(contract)
    wanted = set(only or ())

    @dg.schedule(
        name=name, job_name=batch_job_name(contract.name),
        cron_schedule=schedule.cron,  # from the contract's schedule: or canary: block
        execution_timezone=schedule.timezone, default_status=dg.DefaultScheduleStatus.STOPPED,
        description=description,
    )
    def batched_schedule(context: dg.ScheduleEvaluationContext, store: ProjectStoreResource
                         ) -> list[dg.RunRequest] | dg.SkipReason:
        keys = partitions_def.get_partition_keys(dynamic_partitions_store=context.instance)
        if only is not None:
            keys = [key for key in keys if key in wanted]
        skipped = store.get().skipped_partitions(contract.name, unchanged=contract.skips_unchanged)
        return _requests(context, contract, name, keys, skipped, trigger)

    return batched_schedule


def _requests(context: dg.ScheduleEvaluationContext, contract: Contract, name: str, keys: list[str],
              paused: dict[str, str], trigger: str) -> list[dg.RunRequest] | dg.SkipReason:
    # run_key = tick time + batch: a tick re-evaluated after a daemon restart launches nothing twice
    tick = context.scheduled_execution_time.isoformat() if context.scheduled_execution_time else "manual"
    groups = chunks([key for key in keys if key not in paused], contract.batch_size)
    # the contract's schedule keeps the run keys it always had; a canary's carry its schedule's name
    base = contract.name if trigger == "schedule" else name
    requests = [
        dg.RunRequest(
            run_key=f"{base}:batch-{i}-of-{len(groups)}:{tick}",
            run_config={"ops": {f"{contract.name}_scrape_batch": {"config": {"partitions": group}}}},
            tags={"scrape_contracts/trigger": trigger, BATCH_TAG: f"{contract.name}/{i}-of-{len(groups)}"})
        for i, group in enumerate(groups, start=1)
    ]
    skipped = [f"{key} ({paused[key]})" for key in keys if key in paused]
    if skipped:
        context.log.info(f"skipping {len(skipped)} target(s) (paused, gone or unchanged): "
                         f"{'; '.join(skipped)}")
    if not requests:
        if not keys:
            return dg.SkipReason(f"{contract.name} has no targets yet")
        # "paused" covers gone and unchanged ones too: each reason says which
        return dg.SkipReason(f"every target of {contract.name} is paused: {'; '.join(skipped)}")
    return requests
