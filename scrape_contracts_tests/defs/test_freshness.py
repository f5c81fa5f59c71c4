"""Freshness: a paused target shows as stale, per partition, in process and over GraphQL on a running
webserver; a target that keeps succeeding stays fresh."""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
import pytest

from scrape_contracts.defs.names import accepted_key
from scrape_contracts.defs.freshness import FRESHNESS_CHECK
from scrape_contracts_tests.conftest import Harness, clean_env, product_page, sqlite_overrides
from scrape_contracts_tests.defs.test_load_report import BIN, LOCATIONS, REPO, Ui, _free_port, _stop

CHECK_STATUS = """
query ($key: AssetKeyInput!) {
  assetNodeOrError(assetKey: $key) {
    ... on AssetNode {
      assetChecksOrError { ... on AssetChecks { checks { name blocking
        partitionStatuses { __typename ... on AssetCheckDefaultPartitionStatuses {
          succeededPartitions failedPartitions } } } } }
    }
  }
}
"""
EXECUTIONS = """
query ($key: AssetKeyInput!, $check: String!) {
  assetCheckExecutions(assetKey: $key, checkName: $check, limit: 10) {
    status partition evaluation { success severity description }
  }
}
"""


def _shop(harness: Harness, site: Any) -> None:
    for path in ("/p/1", "/p/2"):
        site.set_page(path, product_page("Kettle", "K-1", "$100.00"))
    harness.write("shop.yaml", f"""
        name: shop
        targets:
          - {{url: "{site.url('/p/1')}", key: p1}}
          - {{url: "{site.url('/p/2')}", key: p2}}
        fetch: {{adapter: http, retries: 0, timeout_s: 5, allow_private_addresses: true}}
        fields:
          title: {{selector: "#title"}}
          price: {{selector: "#price", type: price}}
        schedule: {{cron: "0 6 * * *"}}    # daily: a target scraped today is fresh
        """)


def _freshness_round(harness: Harness, defs: dg.Definitions) -> dg.SensorResult:
    """One freshness_sensor tick and the freshness_job run it requests, as the daemon would launch it."""
    sensor = defs.resolve_sensor_def("freshness_sensor")
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    with dg.build_sensor_context(instance=harness.instance, resources=defs.resources) as context:
        tick = sensor(context)
    for request in tick.run_requests or []:
        assert defs.resolve_job_def("freshness_job").execute_in_process(
            instance=harness.instance, tags=request.tags).success
    return tick


def _shown(harness: Harness) -> dict[str, str]:
    from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

    check = dg.AssetCheckKey(accepted_key("shop"), FRESHNESS_CHECK)
    infos = harness.instance.event_log_storage.get_asset_check_partition_info([check])
    return {i.partition_key: AssetCheckExecutionRecordStatus(i.latest_execution_status).value
            for i in infos if i.is_current}


def test_a_paused_target_turns_stale_and_only_changes_are_recorded(harness: Harness, site: Any) -> None:
    _shop(harness, site)
    defs = harness.definitions()
    spec = defs.resolve_assets_def(accepted_key("shop")).specs_by_key[accepted_key("shop")]
    assert spec.freshness_policy is not None and spec.freshness_policy.deadline_cron == "0 6 * * *"
    assert _freshness_round(harness, defs).run_requests  # never scraped: both stale
    assert _shown(harness) == {"p1": "FAILED", "p2": "FAILED"}
    for key in ("p1", "p2"):
        assert harness.run("shop", key, defs).success
    _freshness_round(harness, defs)
    assert _shown(harness) == {"p1": "SUCCEEDED", "p2": "SUCCEEDED"}
    again = _freshness_round(harness, defs)
    assert not again.run_requests and "no target's freshness changed" in again.skip_reason.skip_message
    harness.store.pause("shop", "p2", "held by hand")
    _freshness_round(harness, defs)
    assert _shown(harness) == {"p1": "SUCCEEDED", "p2": "FAILED"}
    # Execute on the check in the UI evaluates one target the same way
    check = dg.AssetCheckKey(accepted_key("shop"), FRESHNESS_CHECK)
    job = defs.resolve_implicit_global_asset_job_def().get_subset(asset_selection=set(),
                                                                  asset_check_selection={check})
    (evaluation,) = job.execute_in_process(instance=harness.instance, partition_key="p2").get_asset_check_evaluations()
    assert not evaluation.passed and "stale: paused (held by hand)" in evaluation.description
    # an unchanged page is a success too, though a batched run records no materialisation for it
    harness.store.resume("shop", "p2")
    defs.resolve_job_def("scrape_shop_batch_job").execute_in_process(
        run_config={"ops": {"shop_scrape_batch": {"config": {"partitions": ["p2"]}}}}, instance=harness.instance)
    assert harness.store.state("shop", "p2").last_success_at is not None
    _freshness_round(harness, defs)
    assert _shown(harness) == {"p1": "SUCCEEDED", "p2": "SUCCEEDED"}


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A laptop instance (the repository's dagster.yaml) shared by this process and the webserver."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    for name in ("SCRAPE_CONTRACTS_DB_URL", "SCRAPE_CONTRACTS_ARTIFACTS_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def test_a_paused_target_shows_as_stale_over_graphql(home: Path, tmp_path: Path, site: Any) -> None:
    from scrape_contracts_tests.conftest import Backend

    with dg.instance_for_test(temp_dir=str(home), overrides=sqlite_overrides(home)) as instance:
        harness = Harness(Backend("sqlite", instance, f"sqlite:///{home / 'scrape_contracts.db'}", home), tmp_path)
        _shop(harness, site)
        defs = harness.definitions()
        for key in ("p1", "p2"):
            assert harness.run("shop", key, defs).success
        harness.store.pause("shop", "p2", "held by hand")
        _freshness_round(harness, defs)
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text("load_from:\n  - python_module:\n      module_name: scrape_contracts.definitions\n"
                         "      location_name: scrape_contracts\n")
    port, log = _free_port(), tmp_path / "ui.log"
    with log.open("w") as out:
        webserver = subprocess.Popen(
            [str(BIN / "dagster-webserver"), "-w", str(workspace), "-h", "127.0.0.1", "-p", str(port)],
            cwd=tmp_path, env=clean_env(DAGSTER_HOME=str(home), SCRAPE_CONTRACTS_DIR=str(harness.contracts_dir)),
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        ui = Ui(f"http://127.0.0.1:{port}", log)
        deadline = time.monotonic() + 120
        while True:
            try:
                if ui.query(LOCATIONS)["workspaceOrError"]["locationEntries"][0]["loadStatus"] == "LOADED":
                    break
            except (httpx.HTTPError, KeyError, IndexError):
                pass
            assert webserver.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        key = {"path": list(accepted_key("shop").path)}
        checks = ui.query(CHECK_STATUS, {"key": key})["assetNodeOrError"]["assetChecksOrError"]["checks"]
        (check,) = [c for c in checks if c["name"] == FRESHNESS_CHECK]
        assert not check["blocking"]
        statuses = check["partitionStatuses"]
        assert (statuses["succeededPartitions"], statuses["failedPartitions"]) == (["p1"], ["p2"]), statuses
        executions = ui.query(EXECUTIONS, {"key": key, "check": FRESHNESS_CHECK})["assetCheckExecutions"]
        latest = {e["partition"]: e for e in reversed(executions)}
        assert latest["p2"]["evaluation"]["severity"] == "WARN" and not latest["p2"]["evaluation"]["success"]
        assert "stale: paused (held by hand)" in latest["p2"]["evaluation"]["description"]
    finally:
        _stop(webserver)


@pytest.mark.parametrize("shipped", ["dagster.yaml", "deploy/dagster.postgres.yaml"])
def test_the_shipped_instances_evaluate_freshness(shipped: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  request: pytest.FixtureRequest) -> None:
    """The demo's and production's dagster.yaml turn Dagster's freshness daemon on (scrape/C's policy) and
    run the sensor daemon that evaluates refreshed_on_schedule per target."""
    if "postgres" in shipped:
        monkeypatch.setenv("DAGSTER_PG_URL", request.getfixturevalue("pg_database"))
    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPO / shipped, home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert instance.get_settings("freshness") == {"enabled": True}  # said, not left to Dagster's default
        assert instance.freshness_enabled
        assert {"FRESHNESS_DAEMON", "SENSOR"} <= set(instance.get_required_daemon_types())
