"""The production profile: PostgreSQL instance config, queued runs, idempotent launches."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from scrape_contracts.cli import main
from scrape_contracts.defs.launching import idempotent_run_id
from scrape_contracts_tests.conftest import stop_daemon, clean_env, finished_run
from scrape_contracts_tests.readme import blocks_run_by, project_folder
from scrape_contracts_tests.conftest import Harness, product_page

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_readme_production_setup_on_postgres(pg_database: str, tmp_path: Path) -> None:
    """The PostgreSQL block of docs/production.md as written; only the two values a reader replaces are
    replaced (the folder, which does not exist yet, and the database URL)."""
    [block] = blocks_run_by(__file__, "test_readme_production_setup_on_postgres")
    home = tmp_path / "srv" / "dagster"
    url = "postgresql://dagster:secret@db.internal:5432/dagster"
    assert url in block.text
    commands = block.text.replace("/srv/dagster", str(home)).replace(url, pg_database)
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", commands], cwd=project_folder(tmp_path),
                          env=clean_env(PATH=f"{BIN}:{os.environ['PATH']}"), capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for expected in ("PostgresRunStorage", "PostgresEventLogStorage", "PostgresScheduleStorage",
                     "run_monitoring", "DefaultRunLauncher"):
        assert expected in done.stdout, done.stdout
    # the project store's tables, beside Dagster's in the same database (each keeps its own version table)
    from scrape_contracts.adapters.migrations import HEAD

    assert f"upgraded the schema from an empty database to {HEAD} (head)" in done.stdout, done.stdout
    os.environ["DAGSTER_PG_URL"] = pg_database
    try:
        instance = dg.DagsterInstance.from_config(str(home))
        # Dagster's own classes: nothing of this project's is named by the instance
        assert type(instance.run_coordinator) is dg.QueuedRunCoordinator
        assert type(instance.run_launcher) is dg.DefaultRunLauncher
        limits = {limit["key"]: limit for limit in instance.get_concurrency_config().run_queue_config
                  .tag_concurrency_limits}
        # optional admission control only: the per-contract cap (leases keep one scraper per target)
        assert limits["scrape_contracts/contract"]["value"] == {"applyLimitPerUniqueValue": True}
        assert "dagster/partition" not in limits  # global across contracts: would throttle unrelated targets
        assert instance.run_monitoring_enabled and instance.run_retries_enabled
        instance.dispose()
    finally:
        del os.environ["DAGSTER_PG_URL"]


def test_idempotency_key_twice_gives_one_run(sqlite_harness: Harness, site, capsys,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    harness = sqlite_harness
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    monkeypatch.setenv("SCRAPE_CONTRACTS_DIR", str(harness.contracts_dir))
    args = ["--contracts-dir", str(harness.contracts_dir), "run", "shop", "--partition", "p1",
            "--idempotency-key", "nightly-2026-11-29", "--queue"]
    assert main(args) == 0
    first = capsys.readouterr().out
    run_id = idempotent_run_id("shop", "p1", "nightly-2026-11-29")
    assert f"queued run {run_id}" in first
    assert main(args) == 0
    assert f"already started with this key: run {run_id}" in capsys.readouterr().out
    runs = harness.instance.get_runs(dg.RunsFilter(tags={"scrape_contracts/idempotency_key": "nightly-2026-11-29"}))
    assert [r.run_id for r in runs] == [run_id]
    # the instance's coordinator queued it: the daemon (a real dagster-daemon process) starts it
    assert runs[0].status == dg.DagsterRunStatus.QUEUED
    daemon = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", str(REPO / "workspace.yaml")],
                              env={**os.environ}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        finished = finished_run(harness.instance, run_id)
    finally:
        stop_daemon(daemon)
    assert finished.status == dg.DagsterRunStatus.SUCCESS
    assert harness.accepted("shop", "p1")["price"] == 100.0
    assert len(site.requests_to("/p/1")) == 1


def test_run_without_partition_runs_batches_once(sqlite_harness: Harness, site, capsys,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    harness = sqlite_harness
    for i in range(5):
        site.set_page(f"/p/{i}", product_page(f"Book {i}", f"BK-{i}", f"${10 + i}.00"))
    site.set_page("/p/404", "gone", status=404)
    urls = {f"t{i}": site.url(f"/p/{i}") for i in range(5)} | {"t9": site.url("/p/404")}
    path = harness.write_product_contract("shop", urls)
    path.write_text(path.read_text() + "\nbatch_size: 4\n")
    monkeypatch.setenv("SCRAPE_CONTRACTS_DIR", str(harness.contracts_dir))
    args = ["--contracts-dir", str(harness.contracts_dir), "run", "shop", "--idempotency-key", "sweep-1"]
    # the command's default: the runs are executed here, one after the other (the queue's path is the test above);
    # a target that could not be scraped makes the exit status 1
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "shop batch 1/2 (4 targets): run" in out and "shop batch 2/2 (2 targets): run" in out
    assert "shop: 6 target(s)" in out and "accepted 5" in out and "failed 1" in out
    assert "404 Not Found" in out and "1 target(s) (t9)" in out  # each cause once, with its targets
    # the same key starts nothing again, here or through the queue
    assert main([*args, "--queue"]) == 0
    assert capsys.readouterr().out.count("already started") == 2
    runs = harness.instance.get_runs(dg.RunsFilter(tags={"scrape_contracts/idempotency_key": "sweep-1"}))
    assert len(runs) == 2 and all(r.job_name == "scrape_shop_batch_job" for r in runs)
    # run here, the step's console prints nothing per event (a DEBUG line per event was a fifth of a big run)
    for run in runs:
        for err in (harness.backend.home / "storage" / run.run_id / "compute_logs").glob("*.err"):
            assert "ASSET_MATERIALIZATION" not in err.read_text()
    assert {r.tags["scrape_contracts/batch"] for r in runs} == {"shop/1-of-2", "shop/2-of-2"}
    assert sorted(v.partition for v in harness.store.latest_accepted_all("shop")) == [f"t{i}" for i in range(5)]


def test_one_batch_of_every_target_lists_none_in_its_config(tmp_path: Path) -> None:
    """`run C` without --partition: a single batch's config says "every target not paused" (an empty list,
    which the batch op expands and filters when it runs) instead of carrying every key; several batches
    carry their keys."""
    import dataclasses

    from scrape_contracts.defs import launching as launch
    from scrape_contracts.contract.loader import load_contracts

    (tmp_path / "shop.yaml").write_text(
        "name: shop\ntargets:\n" + "".join(f"  - url: http://127.0.0.1:9/{i}\n    key: t{i}\n" for i in range(5))
        + "fetch:\n  allow_private_addresses: true\nfields:\n  title:\n    selector: h1\nbatch_size: 10\n")
    [loaded] = load_contracts(tmp_path).contracts
    keys = [f"t{i}" for i in range(5)]

    def partitions(specs: list) -> list:
        return [s.run_config["ops"]["shop_scrape_batch"]["config"]["partitions"] for s in specs]

    assert partitions(launch.run_specs(loaded, keys, idempotency_key="k", all_targets=True)) == [[]]
    assert partitions(launch.run_specs(loaded, keys[:3], idempotency_key="k")) == [keys[:3]]  # a selection
    small = dataclasses.replace(loaded, contract=loaded.contract.model_copy(update={"batch_size": 3}))
    assert partitions(launch.run_specs(small, keys, idempotency_key="k", all_targets=True)) == [keys[:3], keys[3:]]
