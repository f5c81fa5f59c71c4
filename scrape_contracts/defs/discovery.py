"""``scrape/C/targets``: a contract's targets found in its sitemaps and listing pages; its job and schedule.

Materialising it reads the sources (``service/discovery.py``), records new, back and gone targets in the
project store, and adds the new ones to the contract's dynamic partitions (the store first: a partition
never exists without its URL). The next sweep (the contract's schedule, ``scrape-contracts run``) scrapes
them; a gone target keeps its partition and its accepted data, and sweeps leave it out until it is back.
"""


from dataclasses import dataclass
from typing import Any

import dagster as dg

from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.defs.metadata import bounded
from scrape_contracts.defs.names import (
    CONTRACT_TAG, TRIGGER_TAG, accepted_key, discover_job_name, discover_schedule_name, targets_key,
)
from scrape_contracts.defs.partitions import dynamic_partitions_name
from scrape_contracts.defs.resources import FetchResource, ProjectStoreResource
from scrape_contracts.service import discovery

# gone and back targets each get an observation on scrape/C's partition (its page says so); past this
# many in one run only the run's metadata lists them (a sitemap that lost 20,000 URLs is one event)
_OBSERVED = 200


@dataclass(frozen=True)
class DiscoveryDefs:
    asset: dg.AssetsDefinition
    job: Any  # what define_asset_job returns (resolved by Definitions)
    schedule: dg.ScheduleDefinition


def build_discovery_defs(loaded: LoadedContract, *, group_name: str | None = None) -> DiscoveryDefs | None:
    contract = loaded.contract
    if contract.discover is None:
        return None
    name = contract.name
    sources = contract.discover.sources()

    @dg.asset(
        key=targets_key(name), group_name=group_name or name, kinds={"sitemap"}, tags={CONTRACT_TAG: name},
        description=f"Targets of contract {name!r} found in {len(sources)} source(s): "
                    + ", ".join(sources[:3]) + (" ..." if len(sources) > 3 else ""),
    )
    def targets(context: dg.AssetExecutionContext, store: ProjectStoreResource,
                fetcher: FetchResource) -> dg.MaterializeResult:
        """The targets the contract's sitemaps and listing pages list: new ones become partitions."""
        found = discovery.discover(loaded, store.get(), fetcher.settings_for(contract.fetch),
                                   run_id=context.run.run_id)
        changes = found.changes
        assert changes is not None
        if not found.found and not found.complete:
            raise dg.Failure(description=f"no source of {name} could be read: "
                             + "; ".join(p for s in found.sources for p in s.problems[:2])[:1500],
                             allow_retries=False, metadata=_metadata(found))
        partitions = dynamic_partitions_name(name)
        existing = set(context.instance.get_dynamic_partitions(partitions))
        missing = [key for key in found.found if key not in existing]
        if missing:
            context.instance.add_dynamic_partitions(partitions, missing)
        for key in changes.gone[:_OBSERVED]:
            context.log_event(dg.AssetObservation(
                asset_key=accepted_key(name), partition=key, metadata={"gone": "yes"},
                description="gone: its source no longer lists it; its accepted data stays, sweeps skip it"))
        for key in changes.back[:_OBSERVED]:
            context.log_event(dg.AssetObservation(
                asset_key=accepted_key(name), partition=key, metadata={"gone": "no"},
                description="back: its source lists it again; sweeps scrape it again"))
        for report in found.sources:
            if not report.complete:
                context.log.warning(f"{report.url} was not read in full, so none of its targets is marked "
                                    "gone: " + "; ".join(report.problems[:3]))
        context.log.info(f"{name}: {len(found.found)} target(s) found, {len(changes.new)} new, "
                         f"{len(changes.back)} back, {len(changes.gone)} gone")
        return dg.MaterializeResult(metadata=_metadata(found))

    job = dg.define_asset_job(
        discover_job_name(name), selection=dg.AssetSelection.assets(targets_key(name)),
        description=f"Read the sources of {name!r} (discover:) and add the targets they list.",
        executor_def=dg.in_process_executor, tags={CONTRACT_TAG: name})
    schedule = contract.discover.schedule
    return DiscoveryDefs(targets, job, dg.ScheduleDefinition(
        name=discover_schedule_name(name), job=job,
        cron_schedule=schedule.cron,  # from the contract's discover.schedule (default: daily at midnight)
        execution_timezone=schedule.timezone, default_status=dg.DefaultScheduleStatus.STOPPED,
        tags={TRIGGER_TAG: "schedule"},
        description=f"Materialises scrape/{name}/targets: reads its sitemaps and listings for new and gone "
                    "targets."))


def _metadata(found: discovery.Discovery) -> dict[str, Any]:
    changes = found.changes
    assert changes is not None
    return {
        "targets": len(found.found), "new": len(changes.new), "back": len(changes.back),
        "gone": len(changes.gone), "unchanged": changes.seen, "ignored": found.ignored,
        "refused": found.refused_count, "fetched": len(found.fetched()),
        "complete": all(s.complete for s in found.sources),
        "sources": dg.MetadataValue.json(bounded([s.as_dict() for s in found.sources])),
        "changes": dg.MetadataValue.json(bounded({"new": changes.new[:100], "back": changes.back[:100],
                                                  "gone": changes.gone[:100]})),
        "refused_urls": dg.MetadataValue.json(found.refused),
    }
