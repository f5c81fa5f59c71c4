"""The production profile: PostgreSQL instance config, queued runs, idempotent launches."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from scrape_contracts.cli import idempotent_run_id, main
from scrape_contracts_tests.conftest import Harness, product_page

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_production_dagster_yaml_loads_on_postgres(pg_database: str, tmp_path: Path) -> None:
    shutil.copy(REPO / "deploy" / "dagster.postgres.yaml", tmp_path / "dagster.yaml")
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path), "DAGSTER_PG_URL": pg_database}
    done = subprocess.run([str(BIN / "dagster"), "instance", "info"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    for expected in ("PostgresRunStorage", "PostgresEventLogStorage", "PostgresScheduleStorage",
                     "run_monitoring", "DefaultRunLauncher"):
        assert expected in done.stdout, done.stdout
    os.environ["DAGSTER_PG_URL"] = pg_database
    try:
        instance = dg.DagsterInstance.from_config(str(tmp_path))
        assert type(instance.run_coordinator).__name__ == "QueuedRunCoordinator"
        limits = {limit["key"]: limit for limit in instance.get_concurrency_config().run_queue_config
                  .tag_concurrency_limits}
        assert limits["dagster/partition"]["limit"] == 1
        assert limits["scrape_contracts/contract"]["value"] == {"applyLimitPerUniqueValue": True}
        assert instance.run_monitoring_enabled and instance.run_retries_enabled
        instance.dispose()
    finally:
        del os.environ["DAGSTER_PG_URL"]


def _wait_for(instance: dg.DagsterInstance, run_id: str, timeout: float = 120) -> dg.DagsterRun:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run = instance.get_run_by_id(run_id)
        if run is not None and run.is_finished:
            return run
        time.sleep(0.5)
    raise AssertionError(f"run {run_id} did not finish in {timeout}s")


def test_idempotency_key_twice_gives_one_run(sqlite_harness: Harness, site, capsys,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    harness = sqlite_harness
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    monkeypatch.setenv("SCRAPE_CONTRACTS_DIR", str(harness.contracts_dir))
    args = ["--contracts-dir", str(harness.contracts_dir), "run", "shop", "--partition", "p1",
            "--idempotency-key", "nightly-2026-11-29"]
    assert main(args) == 0
    first = capsys.readouterr().out
    run_id = idempotent_run_id("shop", "p1", "nightly-2026-11-29")
    assert f"launched run {run_id}" in first
    assert main(args) == 0
    assert f"already launched with this key: run {run_id}" in capsys.readouterr().out
    runs = harness.instance.get_runs(dg.RunsFilter(tags={"scrape_contracts/idempotency_key": "nightly-2026-11-29"}))
    assert [r.run_id for r in runs] == [run_id]
    # the instance's coordinator queued it: the daemon (a real dagster-daemon process) starts it
    assert runs[0].status == dg.DagsterRunStatus.QUEUED
    daemon = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")],
                              env={**os.environ}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        finished = _wait_for(harness.instance, run_id)
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)
    assert finished.status == dg.DagsterRunStatus.SUCCESS
    assert harness.accepted("shop", "p1")["price"] == 100.0
    assert len(site.requests_to("/p/1")) == 1
