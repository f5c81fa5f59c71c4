"""Jobs: one scrape job per contract (candidate, checks, accepted) for schedules, sensors and the CLI."""

from __future__ import annotations

import dagster as dg

from scrape_contracts.contract.model import Contract
from scrape_contracts.defs.assets import accepted_key, candidate_key


# "<contract>/<target>": the production queue runs one run per value at a time (deploy/dagster.postgres.yaml)
TARGET_TAG = "scrape_contracts/target"
# the production queue runs at most 4 runs per value at a time; scrape_contracts.queue adds both tags to runs
# launched without them (the asset graph's implicit job, backfills)
CONTRACT_TAG = "scrape_contracts/contract"


def scrape_job_name(contract: str) -> str:
    return f"scrape_{contract}_job"


def build_scrape_job(contract: Contract) -> dg.UnresolvedAssetJobDefinition:
    return dg.define_asset_job(
        scrape_job_name(contract.name),
        selection=dg.AssetSelection.assets(candidate_key(contract.name), accepted_key(contract.name)),
        description=f"Scrape one target of {contract.name!r}: fetch → extract → validate → heal → checks → accept.",
        # one process per run, not per step: a scrape is small, and step subprocesses cost seconds
        executor_def=dg.in_process_executor,
        tags={CONTRACT_TAG: contract.name},
    )
