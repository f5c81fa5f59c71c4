"""health_schedule keeps scrape/_health current: its tick requests a run that materialises it."""

from __future__ import annotations

from typing import Any

import dagster as dg

from scrape_contracts.defs.health import HEALTH_KEY
from scrape_contracts_tests.conftest import Harness


def _shop(harness: Harness, site: Any) -> None:
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})


def test_health_schedule_materialises_health(sqlite_harness: Harness, site: Any) -> None:
    harness = sqlite_harness
    _shop(harness, site)
    defs = harness.definitions()
    schedule = defs.resolve_schedule_def("health_schedule")
    assert schedule.cron_schedule == "*/15 * * * *"
    assert schedule.default_status == dg.DefaultScheduleStatus.RUNNING
    with dg.build_schedule_context(instance=harness.instance) as context:
        (request,) = schedule.evaluate_tick(context).run_requests
    result = defs.resolve_job_def(schedule.job_name).execute_in_process(instance=harness.instance,
                                                                         tags=request.tags)
    assert [e.asset_key for e in result.get_asset_materialization_events()] == [HEALTH_KEY]
