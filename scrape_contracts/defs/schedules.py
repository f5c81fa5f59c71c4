"""One schedule per contract that declares ``schedule:``; paused partitions are skipped with a reason."""

import dagster as dg

from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.defs.jobs import scrape_job_name
from scrape_contracts.defs.partitions import partitions_for
from scrape_contracts.defs.resources import ProjectStoreResource


def schedule_name(contract: str) -> str:
    return f"scrape_{contract}_schedule"


def build_schedule(loaded: LoadedContract) -> dg.ScheduleDefinition | None:
    contract = loaded.contract
    if contract.schedule is None:
        return None
    partitions_def = partitions_for(contract)

    @dg.schedule(
        name=schedule_name(contract.name), job_name=scrape_job_name(contract.name),
        cron_schedule=contract.schedule.cron,  # from the contract's schedule: block
        execution_timezone=contract.schedule.timezone, default_status=dg.DefaultScheduleStatus.STOPPED,
        description=f"Scrapes every target of {contract.name!r} that is not paused.",
    )
    def scrape_schedule(context: dg.ScheduleEvaluationContext, store: ProjectStoreResource
                        ) -> list[dg.RunRequest] | dg.SkipReason:
        keys = partitions_def.get_partition_keys(dynamic_partitions_store=context.instance)
        paused = store.get().paused_partitions(contract.name)
        # run_key = tick time + partition: a tick re-evaluated after a daemon restart launches nothing twice
        tick = context.scheduled_execution_time.isoformat() if context.scheduled_execution_time else "manual"
        requests = [
            dg.RunRequest(run_key=f"{contract.name}:{key}:{tick}", partition_key=key,
                          tags={"scrape_contracts/trigger": "schedule"})
            for key in keys if key not in paused
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
