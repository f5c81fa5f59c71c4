"""``retention_job`` and its daily schedule: prune raw pages and fingerprints by the retention policy
(``service/retention.py`` states it)."""

import dagster as dg

from scrape_contracts import settings
from scrape_contracts.defs.resources import PageStoreResource, ProjectStoreResource
from scrape_contracts.service.retention import RetentionPolicy, prune

RETENTION_JOB = "retention_job"


class RetentionConfig(dg.Config):
    """Unset values come from SCRAPE_CONTRACTS_RETENTION_DAYS / SCRAPE_CONTRACTS_RETENTION_KEEP_LAST."""

    keep_days: float | None = None  # pages of accepted and quarantined versions are kept this many days
    keep_last_accepted: bool | None = None  # each target's newest accepted page stays whatever its age
    grace_s: float = 3600.0  # pages written this recently are never pruned (runs in flight)


@dg.op(name="prune_raw_pages")
def prune_raw_pages(context: dg.OpExecutionContext, config: RetentionConfig, store: ProjectStoreResource,
                    artifacts: PageStoreResource) -> dict:
    """Delete raw pages and element fingerprints the retention policy no longer keeps."""
    try:
        policy = RetentionPolicy(
            keep_days=settings.retention_days() if config.keep_days is None else config.keep_days,
            keep_last_accepted=(settings.retention_keep_last() if config.keep_last_accepted is None
                                else config.keep_last_accepted),
            grace_s=config.grace_s)
    except ValueError as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    report = prune(store.get(), artifacts.get(), policy)
    context.log.info(f"retention ({policy}): {report.as_dict()}")
    context.add_output_metadata({**report.as_dict(), "keep_days": policy.keep_days,
                                 "keep_last_accepted": policy.keep_last_accepted})
    return report.as_dict()


@dg.job(name=RETENTION_JOB, executor_def=dg.in_process_executor,
        description="Prune raw pages and fingerprints the retention policy no longer keeps.")
def retention_job() -> None:
    prune_raw_pages()


retention_schedule = dg.ScheduleDefinition(
    name="retention_schedule", job=retention_job,
    cron_schedule="30 3 * * *",  # every day at 03:30, after the night's scrapes
    default_status=dg.DefaultScheduleStatus.STOPPED,
    description="Daily retention: prune raw pages older than the policy keeps (turn it on in the UI).",
)
