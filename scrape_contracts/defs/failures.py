"""``scrape_C_failures_job``: a contract's dead letters in the UI, and their replay as one batch.

Launched from the Launchpad (or by ``scrape-contracts failures C --replay`` and the API), it lists the targets
whose last ``last`` runs failed, grouped by reason, as an observation of ``scrape/C/candidate`` (a table in
the asset's Events, and the run's log). With ``replay: true`` it then scrapes them in this run, as the batch
job would (each target's story on its partition), and lists what is still failing: the list drains as they
recover.
"""

from collections.abc import Iterator
from typing import Any

import dagster as dg
from pydantic import Field

from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.defs.batch import BatchConfig, scrape_targets
from scrape_contracts.defs.metadata import bounded
from scrape_contracts.defs.names import candidate_key, failures_job_name, scrape_pool
from scrape_contracts.defs.resources import PageStoreResource, FetchResource, ProjectStoreResource
from scrape_contracts.service.failures import DEFAULT_LAST, FailureGroup, count, dead_letters, replayable

FAILURES_STAGE = "dead_letters"


class FailuresConfig(dg.Config):
    last: int = Field(default=DEFAULT_LAST, ge=1, le=1000,
                      description="A target is listed when its last `last` runs failed (fetch failed, or "
                                  "rejected).")
    replay: bool = Field(default=False,
                         description="Scrape the listed targets (not paused) again, as one batch.")


def groups_table(groups: list[FailureGroup]) -> str:
    """The dead letters as a Markdown table: one row per reason, a few targets each."""
    rows = ["| reason | targets | e.g. |", "|---|---|---|"]
    for group in groups:
        shown = ", ".join(t.partition for t in group.targets[:5]) + (" …" if len(group.targets) > 5 else "")
        rows.append(f"| {group.reason.replace('|', '/')} | {len(group.targets)} | {shown} |")
    return "\n".join(rows) if groups else "no target failed its last runs"


def failures_observation(name: str, groups: list[FailureGroup], last: int, stage: str) -> dg.AssetObservation:
    return dg.AssetObservation(asset_key=candidate_key(name), metadata={
        "stage": stage, "last": last, "targets": count(groups), "reasons": len(groups),
        "dead_letters": dg.MetadataValue.md(groups_table(groups)),
        "groups": dg.MetadataValue.json(bounded([g.as_dict() for g in groups]))},
        description=f"{stage}: {count(groups)} target(s) failed their last {last} run(s), "
                    f"{len(groups)} reason(s)")


def build_failures_job(loaded: LoadedContract) -> dg.JobDefinition:
    name = loaded.contract.name

    # in the contract's pool, as every step that fetches for it: a replay is a batch
    @dg.op(name=f"{name}_failures", out={}, tags={"scrape_contracts/contract": name}, pool=scrape_pool(name))
    def failures(context: dg.OpExecutionContext, config: FailuresConfig, store: ProjectStoreResource,
                 artifacts: PageStoreResource, fetcher: FetchResource) -> Iterator[Any]:
        """List the targets whose last runs failed, grouped by reason; with ``replay``, scrape them again."""
        groups = dead_letters(store.get(), loaded, last=config.last)
        for group in groups:
            context.log.warning(f"{len(group.targets)} target(s): {group.reason}: "
                                + ", ".join(t.partition for t in group.targets[:20]))
        yield failures_observation(name, groups, config.last, FAILURES_STAGE)
        keys = replayable(groups)
        if not config.replay:
            return
        if not keys:
            context.log.info(f"nothing to replay: {name} has no target failing its last {config.last} run(s) "
                             "that is not paused")
            return
        context.log.info(f"replaying {len(keys)} target(s) of {name} as one batch")
        yield from scrape_targets(context, loaded, BatchConfig(partitions=keys), store, artifacts, fetcher)
        remaining = dead_letters(store.get(), loaded, last=config.last)
        context.log.info(f"after the replay: {count(remaining)} target(s) still failing their last "
                         f"{config.last} run(s)")
        yield failures_observation(name, remaining, config.last, f"{FAILURES_STAGE}_after_replay")

    @dg.job(name=failures_job_name(name), executor_def=dg.in_process_executor,
            tags={"scrape_contracts/contract": name, "scrape_contracts/kind": "failures"},
            description=f"Dead letters of {name!r}: the targets whose last runs failed, grouped by reason "
                        "(config replay: true scrapes them again as one batch).")
    def failures_job() -> None:
        failures()

    return failures_job
