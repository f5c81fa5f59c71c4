"""Materialising from the asset graph, as the UI's Materialize button does: Dagster's implicit __ASSET_JOB."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
from dagster_graphql.test.utils import materialize_assets

from scrape_contracts import settings
from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.cli import main
from scrape_contracts.defs import build_definitions
from scrape_contracts.defs.names import accepted_key, candidate_key
from scrape_contracts_tests.conftest import stop_daemon

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
WORKSPACE = str(REPO / "workspace.yaml")


def _launch_from_the_asset_graph(instance: dg.DagsterInstance, partitions: list[str]) -> list[str]:
    """The UI's launch: GraphQL launchPipelineExecution of __ASSET_JOB with the assets and a partition tag."""
    # Dagster's own test plumbing (a workspace as the webserver loads it): tests may lean on it, the package not
    from dagster import __version__
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import WorkspaceFileTarget

    with WorkspaceProcessContext(instance, WorkspaceFileTarget([WORKSPACE]), version=__version__) as process:
        results = materialize_assets(process.create_request_context(),
                                     [candidate_key("books"), accepted_key("books")], partitions)
    return [r.data["launchPipelineExecution"]["run"]["runId"] for r in results]


def _wait(instance: dg.DagsterInstance, run_ids: list[str], timeout: float = 280) -> list[dg.DagsterRun]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = [instance.get_run_by_id(run_id) for run_id in run_ids]
        if all(r is not None and r.is_finished for r in runs):
            return runs
        time.sleep(0.5)
    raise AssertionError(f"runs {run_ids} did not finish in {timeout}s")


def _ran_in_process(instance: dg.DagsterInstance, run: dg.DagsterRun, partition: str) -> None:
    assert run.job_name == "__ASSET_JOB" and run.tags["dagster/partition"] == partition
    # every step in the run's own process: no step subprocesses
    assert not instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_WORKER_STARTING)
    steps = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_SUCCESS)
    assert len({e.dagster_event.pid for e in steps}) == 1


@pytest.mark.slow
# two waits of up to 280 s on the daemon's runs (a safety bound for a loaded machine) and the daemon's start
# and stop: more than the suite's default 300 s
@pytest.mark.timeout(720)
def test_asset_graph_job_runs_in_process_on_the_stock_queue(demo_home: Path) -> None:
    assert build_definitions().resolve_implicit_global_asset_job_def().executor_def.name == "in_process"
    instance = dg.DagsterInstance.get()
    assert type(instance.run_coordinator) is dg.QueuedRunCoordinator  # the demo's dagster.yaml: Dagster's own
    store = ProjectStore(settings.db_url())
    # right after the demo, as a user clicks Materialize: queued, and started by the daemon
    run_ids = _launch_from_the_asset_graph(instance, ["dune", "neuromancer"])
    assert all(instance.get_run_by_id(r).status == dg.DagsterRunStatus.QUEUED for r in run_ids)
    daemon = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", WORKSPACE], cwd=REPO,
                              env={**os.environ}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        runs = _wait(instance, run_ids)
        for run, partition in zip(runs, ["dune", "neuromancer"]):
            _ran_in_process(instance, run, partition)
            assert run.status == dg.DagsterRunStatus.SUCCESS
        # the code location reads examples/site/v1, the layout the contract was written for, after the demo
        # healed its selectors on v2: the contract's own selectors read it again, no heal, no budget spent
        dune = store.latest_candidate("books", "dune", run_id=run_ids[0])
        assert (dune.outcome, dune.record["price"]) == ("valid", 12.99)  # 13.49 on v2, within the limit
        # neuromancer's page is byte for byte the one accepted in round 1: its record, found again
        neuromancer = store.latest_candidate("books", "neuromancer", run_id=run_ids[1])
        assert neuromancer.outcome == "unchanged"
        assert neuromancer.record == {"title": "Neuromancer", "sku": "BK-0002", "price": 9.5,
                                      "in_stock": True}
        # still the reviewer's call
        assert store.pending_review("books", "neuromancer").record["price"] == 29.0

        # the README goes on: the reviewer accepts 29.00; v1's 9.50 is then a -67% change, which the contract
        # sends to review: that is the rule working, not a misreading of the page
        assert main(["review", "accept", "books", "neuromancer", "--reviewer", "alice",
                     "--reason", "new edition"]) == 0
        [again] = _wait(instance, _launch_from_the_asset_graph(instance, ["neuromancer"]))
    finally:
        stop_daemon(daemon)
    _ran_in_process(instance, again, "neuromancer")
    back = store.latest_candidate("books", "neuromancer", run_id=again.run_id)
    assert back.record["price"] == 9.5 and back.record["in_stock"] is True
    assert back.outcome == "review_required"
    assert [v["check"] for v in back.details["violations"]] == ["change_within_limit"]
    assert [v.version for v in store.selector_history("books")] == [1, 2]
    assert all(store.state("books", key).heal_attempts == 0 for key in ("dune", "neuromancer"))
