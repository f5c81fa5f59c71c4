"""Dagster wiring: turns loaded contracts into assets, checks, jobs, schedules and sensors."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg

if TYPE_CHECKING:
    from scrape_contracts.contract.loader import LoadResult

log = logging.getLogger("scrape_contracts")
# Definitions copies every sensor that targets a job (activation_sensor, contracts_load_sensor) passing
# owners=[], and dagster 1.13 warns that the owners parameter is in beta although we set none: on stderr,
# that notice would be the first line of every CLI error
warnings.filterwarnings("ignore", message="Parameter `owners` of initializer `SensorDefinition.__init__`",
                        category=dg.BetaWarning)


def contract_partitions(contract: str, directory: Path | str | None = None) -> dg.PartitionsDefinition:
    """The partitions of ``scrape/<contract>``, for a downstream asset with one partition per target."""
    from scrape_contracts.contract.loader import load_contracts
    from scrape_contracts.defs.partitions import partitions_for

    result = load_contracts(directory)
    loaded = result.by_name().get(contract)
    if loaded is None:
        raise ValueError(f"no valid contract named {contract!r} (valid: {', '.join(sorted(result.by_name()))}); "
                         "run `scrape-contracts validate`")
    return partitions_for(loaded.contract)


def build_definitions(directory: Path | str | None = None, *, db_url: str | None = None,
                      pages: Path | str | None = None, group_name: str | None = None,
                      resources: dict | None = None, loaded: LoadResult | None = None,
                      chunks: int | None = None, executor: str | dict | None = None) -> dg.Definitions:
    """Definitions for every valid contract, and ``scrape/_contracts`` naming each broken one.

    ``directory``, ``db_url`` (the project store) and ``pages`` (the raw pages' storage: a folder, ``store``
    or ``s3://bucket/prefix``) default to the settings (``SCRAPE_CONTRACTS_DIR``, ``SCRAPE_CONTRACTS_DB_URL``,
    ``SCRAPE_CONTRACTS_PAGES``);
    ``group_name`` puts every asset in that group instead of one group per contract. ``chunks`` and
    ``executor`` (``in_process``, ``celery`` or ``{"celery": {...}}``) are the batched jobs' chunk steps per run
    and executor (default: ``SCRAPE_CONTRACTS_CHUNKS``, ``SCRAPE_CONTRACTS_EXECUTOR``; docs/scale.md). Raises
    ``NoContractLoaded`` when no contract loads at all, so the code location shows as errored.
    """
    # imported here, not at the top: `dg` imports this package (scrape_contracts.ScrapeContracts, through the
    # registry entry point) in every project of the environment, most of which never build these definitions
    from scrape_contracts.contract.loader import load_contracts
    from scrape_contracts.defs.assets import build_contract_assets
    from scrape_contracts.defs.batch import build_batch_job
    from scrape_contracts.defs.chunks import build_chunked_batch_job
    from scrape_contracts.defs.executors import scale_from
    from scrape_contracts.defs.checks import build_contract_checks
    from scrape_contracts.defs.discovery import build_discovery_defs
    from scrape_contracts.defs.failures import build_failures_job
    from scrape_contracts.defs.freshness import build_freshness_check, build_freshness_defs
    from scrape_contracts.defs.health import build_health_asset, health_schedule
    from scrape_contracts.defs.jobs import build_scrape_job
    from scrape_contracts.defs.load_report import build_load_report, require_a_contract
    from scrape_contracts.defs.reconcile import build_reconcile_job
    from scrape_contracts.defs.io_managers import default_resources
    from scrape_contracts.defs.retention import retention_job, retention_schedule
    from scrape_contracts.defs.schedules import build_canary_schedules, build_schedule
    from scrape_contracts.defs.sensors import build_sensors

    result = loaded or load_contracts(directory)
    for error in result.errors:
        # the UI shows them on scrape/_contracts (defs/load_report.py); the code server's log too
        log.error("contract not loaded: %s", error)
    require_a_contract(result)
    scale = scale_from(chunks, executor)
    report, report_sensor = build_load_report(result, group_name=group_name)
    assets: list = [report]
    checks: list = []
    jobs: list = []
    schedules: list = []
    for item in result.contracts:
        built = build_contract_assets(item, group_name=group_name)
        assets += [built.candidate, built.accepted]
        checks += build_contract_checks(item)
        batch_job = build_chunked_batch_job(item, scale) if scale.chunked else build_batch_job(item)
        jobs += [build_scrape_job(item.contract), batch_job, build_failures_job(item)]
        schedule = build_schedule(item)
        if schedule is not None:
            schedules.append(schedule)
        schedules += build_canary_schedules(item)
        discovery = build_discovery_defs(item, group_name=group_name)
        if discovery is not None:
            assets.append(discovery.asset)
            jobs.append(discovery.job)
            schedules.append(discovery.schedule)
    sensors, extra_jobs = build_sensors(result)
    sensors.append(report_sensor)
    assets.append(build_health_asset(result, group_name=group_name))
    schedules.append(health_schedule)
    checks += [check for check in map(build_freshness_check, result.contracts) if check is not None]
    freshness_sensors, freshness_jobs = build_freshness_defs(result)
    sensors += freshness_sensors
    extra_jobs += freshness_jobs
    extra_jobs.append(build_reconcile_job(result))
    return dg.Definitions(
        assets=assets, asset_checks=checks, jobs=jobs + extra_jobs + [retention_job],
        schedules=schedules + [retention_schedule], sensors=sensors,
        resources={**default_resources(db_url=db_url, pages=pages), **(resources or {})},
        # every job without its own executor, including the implicit __ASSET_JOB the UI's Materialize runs:
        # a scrape is small, and a subprocess per step costs seconds (18 s instead of 1 s for one target)
        executor=dg.in_process_executor,
    )
