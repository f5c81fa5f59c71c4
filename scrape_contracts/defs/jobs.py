"""Jobs: one scrape job per contract (candidate, checks, accepted) for schedules, sensors and the CLI."""

from __future__ import annotations

import dagster as dg

from scrape_contracts.contract.model import Contract
from scrape_contracts.defs.names import CONTRACT_TAG, accepted_key, candidate_key, scrape_job_name






def build_scrape_job(contract: Contract) -> dg.UnresolvedAssetJobDefinition:
    return dg.define_asset_job(
        scrape_job_name(contract.name),
        selection=dg.AssetSelection.assets(candidate_key(contract.name), accepted_key(contract.name)),
        description=f"Scrape one target of {contract.name!r}: fetch → extract → validate → heal → checks → accept.",
        # one process per run, not per step: a scrape is small, and step subprocesses cost seconds
        executor_def=dg.in_process_executor,
        tags={CONTRACT_TAG: contract.name},
    )
