"""One schedule per contract that declares ``schedule:``: batched runs over every target not paused."""

import dagster as dg

from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.defs.batch import BATCH_TAG, batch_job_name
from scrape_contracts.defs.partitions import partitions_for
from scrape_contracts.defs.resources import ProjectStoreResource
from scrape_contracts.launch import chunks


def schedule_name(contract: str) -> str:
    return f"scrape_{contract}_schedule"


def build_schedule(loaded: LoadedContract) -> dg.ScheduleDefinition | None:
    contract = loaded.contract
    if contract.schedule is None:
        return None
    partitions_def = partitions_for(contract)

    @dg.schedule(
        name=schedule_name(contract.name), job_name=batch_job_name(contract.name),
        cron_schedule=contract.schedule.cron,  # from the contract's schedule: block
        execution_timezone=contract.schedule.timezone, default_status=dg.DefaultScheduleStatus.STOPPED,
        description=f"Scrapes every target of {contract.name!r} that is not paused.",
    )
    def scrape_schedule(context: dg.ScheduleEvaluationContext, store: ProjectStoreResource
                        ) -> list[dg.RunRequest] | dg.SkipReason:
        keys = partitions_def.get_partition_keys(dynamic_partitions_store=context.instance)
        paused = store.get().paused_partitions(contract.name)
        # run_key = tick time + batch: a tick re-evaluated after a daemon restart launches nothing twice
        tick = context.scheduled_execution_time.isoformat() if context.scheduled_execution_time else "manual"
        groups = chunks([key for key in keys if key not in paused], contract.batch_size)
        requests = [
            dg.RunRequest(
                run_key=f"{contract.name}:batch-{i}-of-{len(groups)}:{tick}",
                run_config={"ops": {f"{contract.name}_scrape_batch": {"config": {"partitions": group}}}},
                tags={"scrape_contracts/trigger": "schedule", BATCH_TAG: f"{contract.name}/{i}-of-{len(groups)}"})
            for i, group in enumerate(groups, start=1)
        ]
        skipped = [f"{key} ({paused[key]})" for key in keys if key in paused]
        if skipped:
            context.log.info(f"skipping {len(skipped)} paused target(s): {'; '.join(skipped)}")
        if not requests:
            if not keys:
                return dg.SkipReason(f"{contract.name} has no targets yet")
            return dg.SkipReason(f"every target of {contract.name} is paused: {'; '.join(skipped)}")
        return requests

    return scrape_schedule
