"""Batched runs: many targets in one run, each with the outcome a single-target run would give it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from scrape_contracts.defs.history import read_trail
from scrape_contracts_tests.conftest import Harness, product_page
from scrape_contracts_tests.fixture_site import Response

REPO = Path(__file__).resolve().parents[2]
KEYS = [f"p{i:02d}" for i in range(50)]
# one of every kind of target, plus two plain ones: the single-target path runs these for comparison
SAMPLE = ["p00", "p10", "p11", "p12", "p13", "p14", "p20", "p21"]


def run_batch(harness: Harness, contract: str, partitions: list[str] | None = None,
              defs: dg.Definitions | None = None) -> dg.ExecuteInProcessResult:
    return harness.run_batch(contract, partitions, defs)


def _price(i: int) -> float:
    return 10.0 + i


def _serve_first_sweep(site: Any) -> None:
    for i, key in enumerate(KEYS):
        site.set_page(f"/p/{key}", product_page(f"Book {i}", f"BK-{i}", f"${_price(i):.2f}"))


def _serve_second_sweep(site: Any) -> None:
    # one redesigned page heals the contract's selectors; every other page is byte-for-byte unchanged
    site.set_page("/p/p00", product_page("Book 0", "BK-0", "$10.00", layout="renamed"))


def _serve_third_sweep(site: Any) -> None:
    # the redesign reaches more pages: the healed selectors read them
    site.set_page("/p/p10", product_page("Book 10", "BK-10", "$24.00", layout="renamed"))  # +20%: a new version
    site.set_page("/p/p11", product_page("Book 11", "BK-11", "$63.00", layout="renamed"))  # +200%: for review
    site.set_page("/p/p12", product_page("Book 12", layout="gone"))  # facts gone: the healer refuses, rejected
    site.set_handler("/p/p13", lambda _request: Response(-1))  # never answers: times out
    site.set_page("/p/p14", "gone", status=404)


def _write_contracts(harness: Harness, site: Any) -> None:
    urls = {key: site.url(f"/p/{key}") for key in KEYS}
    for name, targets in (("batched", urls), ("single", {k: urls[k] for k in SAMPLE})):
        path = harness.write_product_contract(name, targets)
        # the target that never answers costs its timeout (and, on the single path, its retries)
        path.write_text(path.read_text().replace("timeout_s: 5", "timeout_s: 1"))


def _outcomes(harness: Harness, contract: str, run_ids: set[str]) -> dict[str, str]:
    found = {}
    for key in KEYS:
        candidate = harness.store.latest_candidate(contract, key)
        if candidate is not None and candidate.run_id in run_ids:
            found[key] = candidate.outcome
    return found


def _graphql(harness: Harness, query: str, variables: dict[str, Any]) -> dict[str, Any]:
    from dagster_graphql.test.utils import define_out_of_process_context, execute_dagster_graphql

    os.environ["SCRAPE_CONTRACTS_DIR"] = str(harness.contracts_dir)
    with define_out_of_process_context(str(REPO / "workspace.yaml"), None, harness.instance) as context:
        result = execute_dagster_graphql(context, query, variables)
    assert not result.errors, result.errors
    return result.data


CHECK_EXECUTIONS = """
query ($key: AssetKeyInput!, $check: String!, $partition: String) {
  assetCheckExecutions(assetKey: $key, checkName: $check, partition: $partition, limit: 5) {
    runId status partition
    evaluation { success metadataEntries { label ... on TextMetadataEntry { text } } }
  }
}
"""

MATERIALISATIONS = """
query ($key: AssetKeyInput!) {
  assetOrError(assetKey: $key) { ... on Asset { assetMaterializations(limit: 200) { partition runId } } }
}
"""


@pytest.mark.slow
def test_batch_gives_each_target_the_single_path_outcome(harness: Harness, site, monkeypatch) -> None:
    monkeypatch.setenv("SCRAPE_CONTRACTS_DIR", str(harness.contracts_dir))
    _serve_first_sweep(site)
    _write_contracts(harness, site)
    defs = harness.definitions()
    first = run_batch(harness, "batched", defs=defs)
    assert first.success
    assert all(harness.run("single", key, defs).success for key in SAMPLE)
    assert len(harness.store.latest_accepted_all("batched")) == 50

    def sweep() -> tuple[dg.ExecuteInProcessResult, dict[str, str], dict[str, str], dict[str, Any]]:
        batch_run = run_batch(harness, "batched", defs=defs)
        single_runs = {key: harness.run("single", key, defs) for key in SAMPLE}
        batch = _outcomes(harness, "batched", {batch_run.run_id})
        single = _outcomes(harness, "single", {r.run_id for r in single_runs.values()})
        assert {k: batch[k] for k in single} == single
        for key in SAMPLE:
            b, s = harness.store.accepted_history("batched", key), harness.store.accepted_history("single", key)
            assert [(v.version, v.record) for v in b] == [(v.version, v.record) for v in s], key
        return batch_run, batch, single, single_runs

    _serve_second_sweep(site)
    second, batch, single, _ = sweep()
    assert second.success
    assert single == {"p00": "healed", **{k: "unchanged" for k in SAMPLE[1:]}}
    assert set(batch.values()) == {"healed", "unchanged"} and len(batch) == 50

    _serve_third_sweep(site)
    third, batch, single, single_runs = sweep()
    # a quarantine, a rejection, a timeout and a 404 do not fail the batch: they are outcomes of targets
    assert third.success
    assert single == {"p00": "unchanged", "p10": "valid", "p11": "review_required", "p12": "rejected",
                      "p20": "unchanged", "p21": "unchanged"}
    assert "p13" not in batch and "p14" not in batch  # no page, no candidate: the accepted data stays
    assert not single_runs["p13"].success and not single_runs["p14"].success
    assert sum(1 for o in batch.values() if o == "unchanged") == 50 - 5
    assert harness.accepted("batched", "p13") == {"title": "Book 13", "sku": "BK-13", "price": 23.0}
    assert harness.store.state("batched", "p11").paused  # waiting for review, like the single path

    # what the UI shows, per partition, over GraphQL
    key = {"path": ["scrape", "batched", "candidate"]}
    change = _graphql(harness, CHECK_EXECUTIONS, {"key": key, "check": "change_within_limit", "partition": "p11"})
    latest = change["assetCheckExecutions"][0]
    assert (latest["runId"], latest["status"], latest["evaluation"]["success"]) == (third.run_id, "FAILED", False)
    entries = {e["label"]: e.get("text") for e in latest["evaluation"]["metadataEntries"]}
    assert (entries["field"], entries["old"], entries["new"]) == ("price", "21.0", "63.0")
    assert entries["rule"] == "max_change_pct 50"
    required = _graphql(harness, CHECK_EXECUTIONS, {"key": key, "check": "required_fields_present",
                                                    "partition": "p12"})["assetCheckExecutions"][0]
    assert (required["runId"], required["evaluation"]["success"]) == (third.run_id, False)
    mats = _graphql(harness, MATERIALISATIONS, {"key": {"path": ["scrape", "batched"]}})
    in_run = {run.run_id: sorted(m["partition"] for m in mats["assetOrError"]["assetMaterializations"]
                                 if m["runId"] == run.run_id) for run in (second, third)}
    assert in_run == {second.run_id: ["p00"], third.run_id: ["p10"]}  # only targets with newly accepted data
    assert len([m for m in mats["assetOrError"]["assetMaterializations"] if m["runId"] == first.run_id]) == 50

    # each target's story is in the trail
    trail = read_trail(harness.instance, "batched", partition="p00", limit=1000)[0]
    stages = [e.stage for e in trail if e.run_id == second.run_id]
    assert stages.index("fetched") < stages.index("healing") < stages.index("re_extracted") \
        < stages.index("accepted")
    trail = read_trail(harness.instance, "batched", partition="p13", limit=1000)[0]
    assert any(e.stage == "fetch_failed" and "timed out" in e.summary and e.run_id == third.run_id for e in trail)
    trail = read_trail(harness.instance, "batched", partition="p30", limit=1000)[0]
    assert [e.stage for e in trail if e.run_id == third.run_id] == ["unchanged"]


def test_review_accept_after_a_batch_quarantine_and_next_batch_skips_paused(sqlite_harness: Harness, site,
                                                                           monkeypatch) -> None:
    harness = sqlite_harness
    site.set_page("/p/a", product_page("A", "BK-A", "$10.00"))
    site.set_page("/p/b", product_page("B", "BK-B", "$20.00"))
    harness.write_product_contract("shop", {"a": site.url("/p/a"), "b": site.url("/p/b")})
    assert run_batch(harness, "shop").success
    site.set_page("/p/a", product_page("A", "BK-A", "$100.00"))
    assert run_batch(harness, "shop").success
    assert harness.store.pending_review("shop", "a") is not None
    third = run_batch(harness, "shop")
    assert third.success
    assert {c.partition for c in harness.store.candidates_of_run(third.run_id)} == {"b"}  # a is paused
    assert harness.review("shop", "a", "accept").success
    assert harness.accepted("shop", "a")["price"] == 100.0


SLOW_WORKER = """
import os, sys, warnings
warnings.filterwarnings("ignore")
import dagster as dg
from scrape_contracts.defs import build_definitions
from scrape_contracts.defs.names import batch_job_name
if __name__ == "__main__":  # the batch's worker processes are spawned: they import this file
    defs = build_definitions(sys.argv[1])
    instance = dg.DagsterInstance.get()
    job = defs.resolve_job_def(batch_job_name("shop"))
    result = job.execute_in_process(instance=instance, raise_on_error=False)
    print("SUCCESS" if result.success else "FAILED", result.run_id)
"""


@pytest.mark.slow
def test_sigkill_mid_batch_keeps_every_committed_target_and_a_rerun_finishes(sqlite_harness: Harness, site,
                                                                            tmp_path: Path) -> None:
    harness = sqlite_harness
    keys = [f"k{i:02d}" for i in range(40)]

    def slow(i: int) -> Any:
        body = product_page(f"Book {i}", f"BK-{i}", f"${10 + i}.00").encode()

        def handler(_request: Any) -> Response:
            time.sleep(0.25)
            return Response(200, body)
        return handler

    for i, key in enumerate(keys):
        site.set_handler(f"/p/{key}", slow(i))
    harness.write_product_contract("shop", {k: site.url(f"/p/{k}") for k in keys})
    # one request at a time per host: the batch takes ~10 s and commits as it goes
    path = harness.contracts_dir / "shop.yaml"
    path.write_text(path.read_text().replace("retries: 0", "retries: 0\n  concurrency: 1"))
    script = tmp_path / "worker.py"
    script.write_text(SLOW_WORKER)
    env = {**os.environ, "SCRAPE_CONTRACTS_PARSE_WORKERS": "1"}
    worker = subprocess.Popen([sys.executable, str(script), str(harness.contracts_dir)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True)
    store = harness.store
    deadline = time.monotonic() + 120
    while len(store.latest_accepted_all("shop")) < 8:
        assert worker.poll() is None, "the batch ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.1)
    os.killpg(worker.pid, signal.SIGKILL)
    worker.wait(timeout=30)
    kept = {v.partition: v for v in store.latest_accepted_all("shop")}
    assert 8 <= len(kept) < 40
    assert all(v.version == 1 for v in kept.values())

    # the run worker died holding the leases of the targets it had not committed: a new batch finds them
    # busy until they expire, or at once when the dead run is marked failed (as run monitoring or a person
    # does, through the instance the worker used)
    [holder] = {store.lease("shop", k).holder for k in keys if k not in kept}
    instance = dg.DagsterInstance.get()
    try:
        instance.report_run_failed(instance.get_run_by_id(holder))
    finally:
        instance.dispose()
    rerun = subprocess.run([sys.executable, str(script), str(harness.contracts_dir)], env=env,
                           capture_output=True, text=True, timeout=180)
    assert rerun.stdout.startswith("SUCCESS"), rerun.stdout + rerun.stderr[-2000:]
    final = {v.partition: v for v in store.latest_accepted_all("shop")}
    assert sorted(final) == keys
    for key, version in final.items():
        history = store.accepted_history("shop", key)
        assert [v.version for v in history] == [1], key  # never accepted twice
        if key in kept:
            assert version.run_id == kept[key].run_id  # what the killed run committed stays as it was


@pytest.mark.parametrize("workers", ["0", "1"])
def test_batch_runs_in_a_thread_or_in_worker_processes(sqlite_harness: Harness, site, monkeypatch,
                                                       workers: str) -> None:
    monkeypatch.setenv("SCRAPE_CONTRACTS_PARSE_WORKERS", workers)
    harness = sqlite_harness
    for i in range(6):
        site.set_page(f"/p/{i}", product_page(f"B{i}", f"BK-{i}", f"${i + 1}.00"))
    harness.write_product_contract("shop", {f"t{i}": site.url(f"/p/{i}") for i in range(6)})
    result = run_batch(harness, "shop", partitions=["t1", "t3"])
    assert result.success
    assert sorted(v.partition for v in harness.store.latest_accepted_all("shop")) == ["t1", "t3"]
    assert harness.accepted("shop", "t3") == {"title": "B3", "sku": "BK-3", "price": 4.0}


def test_a_host_that_is_down_is_not_asked_for_every_target(sqlite_harness: Harness, site) -> None:
    """2,000 targets of a host that refused connections kept a batch busy for minutes (every target's full
    retry schedule); now the rest of that host's targets fail at once, and other hosts are untouched."""
    import socket
    import threading

    from scrape_contracts.defs.history import batch_summaries

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted = []

    def hang_up() -> None:  # accepts and closes at once: the fetcher sees a dropped connection, we count it
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(1)
            conn.close()

    threading.Thread(target=hang_up, daemon=True).start()
    down = f"http://127.0.0.1:{listener.getsockname()[1]}"
    urls = {f"d{i:02d}": f"{down}/p/{i}" for i in range(60)}
    for i in range(3):
        site.set_page(f"/p/{i}", product_page(f"Book {i}", f"BK-{i}", f"${10 + i}.00"))
        urls[f"up{i}"] = site.url(f"/p/{i}")
    path = sqlite_harness.write_product_contract("shop", urls)
    # robots ignored: a host that is down has no robots.txt to read either, and none of its pages would be
    # asked (test_politeness.py); here it is the breaker's turn. The adaptive throttle off: it spaces a
    # failing host's tries up to 4 s apart (test_pace.py), which would make this a minute of waiting
    path.write_text(path.read_text().replace("retries: 0", "retries: 2\n  robots: ignore\n  throttle: false"))
    try:
        result = run_batch(sqlite_harness, "shop")
    finally:
        listener.close()
    assert result.success
    [summary] = batch_summaries(sqlite_harness.instance, "shop", [result.run_id])
    reasons = {f["partition"]: f["reason"] for f in summary["failures"]}
    assert set(reasons) == set(k for k in urls if k.startswith("d"))
    not_tried = [k for k, reason in reasons.items() if "so the rest of its targets in this run were not tried" in reason]
    assert len(not_tried) >= 35, reasons
    # three tries for each of the 5 failures that open the breaker, its 3 probes and the 4 in flight,
    # instead of 180 connections in all
    assert len(accepted) <= 3 * (5 + 3 + 4), len(accepted)
    for i in range(3):
        assert sqlite_harness.accepted("shop", f"up{i}")["price"] == 10.0 + i


def test_a_short_outage_of_the_host_costs_a_probe_not_the_rest_of_the_batch(sqlite_harness: Harness, site) -> None:
    """The site answers 503 for its first two seconds, then recovers: the targets that waited for the probe
    are scraped, none is written off as host_down."""
    from scrape_contracts.defs.history import batch_summaries

    started: list[float] = []

    def flaky(i: int):
        def handler(_request: Any) -> Response:
            started.append(started[0] if started else time.monotonic())
            if time.monotonic() - started[0] < 2.0:
                return Response(503, b"maintenance")
            return Response(200, product_page(f"Book {i}", f"BK-{i}", f"${10 + i}.00").encode())
        return handler

    urls = {}
    for i in range(60):
        site.set_handler(f"/p/{i}", flaky(i))
        urls[f"p{i:02d}"] = site.url(f"/p/{i}")
    path = sqlite_harness.write_product_contract("shop", urls)
    path.write_text(path.read_text().replace("retries: 0", "retries: 1"))
    result = run_batch(sqlite_harness, "shop")
    assert result.success
    [summary] = batch_summaries(sqlite_harness.instance, "shop", [result.run_id])
    reasons = [f["reason"] for f in summary["failures"]]
    assert not any("not tried" in reason for reason in reasons), reasons
    accepted = [k for k in urls if sqlite_harness.accepted("shop", k) is not None]
    # the targets that failed their retries while it lasted (the 5 that open each worker's breaker, and
    # those in flight) failed; every other one was scraped once it was back
    assert len(accepted) >= 40 and len(accepted) + len(reasons) == 60, (accepted, reasons)


def test_a_batch_on_postgres_writes_its_events_over_held_connections(pg_database: str, tmp_path: Path, site,
                                                                     monkeypatch) -> None:
    """Dagster's PostgreSQL storages connect anew for every write unless told to hold a pool: 40 accepted
    targets are 40 materialisations, two connections each without it (116 in all here, 23 with the pool: the
    run's own events before the batch op starts, and the project store's)."""
    import sqlalchemy as sa

    from scrape_contracts_tests.conftest import STOCK_LAUNCHER, Backend

    home = tmp_path / "dagster_home"
    home.mkdir()
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("SCRAPE_CONTRACTS_DB_URL", pg_database)
    monkeypatch.setenv("SCRAPE_CONTRACTS_ARTIFACTS_DIR", str(home / "artifacts"))
    overrides = {"storage": {"postgres": {"postgres_url": pg_database}}, "run_launcher": STOCK_LAUNCHER}
    database = pg_database.rsplit("/", 1)[1]
    admin = sa.create_engine(pg_database.rsplit("/", 1)[0] + "/postgres", isolation_level="AUTOCOMMIT")

    def sessions() -> int:  # connections ever made to the test's database (PostgreSQL 14+)
        with admin.connect() as conn:
            conn.execute(sa.text("SELECT pg_stat_clear_snapshot()"))
            return conn.execute(sa.text("SELECT sessions FROM pg_stat_database WHERE datname = :d"),
                                {"d": database}).scalar_one()

    with dg.instance_for_test(temp_dir=str(home), overrides=overrides) as instance:
        harness = Harness(Backend("postgres", instance, pg_database, home), tmp_path)
        for i in range(40):
            site.set_page(f"/p/{i}", product_page(f"B{i}", f"BK-{i}", f"${i + 1}.00"))
        harness.write_product_contract("shop", {f"t{i:02d}": site.url(f"/p/{i}") for i in range(40)})
        defs = harness.definitions()
        before = sessions()
        result = run_batch(harness, "shop", defs=defs)
        opened = sessions() - before
    admin.dispose()
    assert result.success
    assert len(harness.store.latest_accepted_all("shop")) == 40
    materialisations = [e for e in result.all_events if e.is_step_materialization]
    assert len(materialisations) == 40
    assert opened < len(materialisations), f"{opened} connections for {len(materialisations)} materialisations"
