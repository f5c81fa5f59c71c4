"""The Dagster UI in a real browser: Playwright drives the system Chromium, headless, against the webserver
that `scrape-contracts dev` starts on the demo's instance, and asserts what a user reads there.

Screenshots go to ``scrape_contracts_tests/ui_screenshots/`` (git-ignored; ``SCRAPE_CONTRACTS_UI_SHOTS``
moves them). With ``CI=true`` a missing browser or Playwright fails the test instead of skipping it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import httpx
import pytest

from scrape_contracts_tests.readme import blocks_run_by

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
SHOTS = Path(os.environ.get("SCRAPE_CONTRACTS_UI_SHOTS") or REPO / "scrape_contracts_tests" / "ui_screenshots")
JOB_TARGET = "jobs.example.com_jobs_101.html-91e98f1195"


def _missing(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"CI=true but {reason}: .ci/run installs it")
    pytest.skip(reason)


def _chromium() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        _missing("no system Chromium (apt-get install chromium; Playwright cannot download browsers here)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        _missing("Playwright is not installed (pip install -e '.[dev]')")
    return path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.fixture
def ui(demo_home: Path, tmp_path: Path) -> Iterator[str]:
    """The README's `scrape-contracts dev` (webserver and daemon) on a copy of the demo's instance, on a free
    port; its base URL."""
    [block] = blocks_run_by(__file__, "ui")
    program, *args = block.text.split()
    port = _free_port()
    log = (tmp_path / "dev.log").open("w")
    server = subprocess.Popen([str(BIN / program), *args, "--port", str(port)], stdout=log,
                              stderr=subprocess.STDOUT, env={**os.environ}, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(f"{base}/server_info", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "dev.log").read_text()[-3000:]
            time.sleep(0.5)
        said = (tmp_path / "dev.log").read_text()
        # a new user's first screen: no warning about a dagster.yaml that is ignored, or about `dg dev`
        assert "will not be used to configure Dagster" not in said and "is superseded" not in said, said
        yield base
    finally:
        # Ctrl-C is how `dagster dev` shuts its webserver, daemon and code servers down
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(server.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        log.close()


# how long the daemon that `dev` started may take, at most, to tick review_sensor and to finish the run that tick
# requests: a bound for a broken daemon, not a timing (the test waits on the instance holding the tick and the
# run, however soon that is); under load the daemon's code server and the run worker each take tens of seconds
DAEMON_BOUND_S = 420
REVIEW_TICKS = """
query { sensorOrError(sensorSelector: {repositoryLocationName: "scrape_contracts",
    repositoryName: "__repository__", sensorName: "review_sensor"}) {
  ... on Sensor { sensorState { ticks(limit: 50) { status runIds } } } } }
"""


def _announced_by_the_review_sensor(ui: str, timeout: float = DAEMON_BOUND_S) -> dg.DagsterRun:
    """The review_notice_job run that a review_sensor tick requested, once it has finished with its
    ``review_announced`` observations in the event log and the tick that requested it is recorded (the run
    and events read from the instance; the tick over the webserver's GraphQL, where the UI reads it)."""
    deadline = time.monotonic() + timeout

    def waiting(what: str) -> None:
        assert time.monotonic() < deadline, f"{what} within {timeout} s"
        time.sleep(0.5)

    with dg.DagsterInstance.get() as instance:  # the copy of the demo's instance that `dev` serves
        while True:
            runs = instance.get_runs(filters=dg.RunsFilter(job_name="review_notice_job",
                                                           tags={"dagster/sensor_name": "review_sensor"}))
            run = next((run for run in runs if run.is_finished), None)
            if run is not None:
                break
            waiting(f"review_sensor's run did not finish: {[(r.run_id, r.status) for r in runs]}")
        assert run.status == dg.DagsterRunStatus.SUCCESS, run
        observed = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_OBSERVATION)
        stages = [entry.asset_observation.metadata.get("stage") for entry in observed]
        assert "review_announced" in [stage.value for stage in stages if stage is not None], observed
    while True:
        answer = httpx.post(f"{ui}/graphql", json={"query": REVIEW_TICKS}, timeout=60).json()
        ticks = answer["data"]["sensorOrError"]["sensorState"]["ticks"]
        if any(tick["status"] == "SUCCESS" and run.run_id in tick["runIds"] for tick in ticks):
            return run
        waiting(f"no review_sensor tick recorded for run {run.run_id}: {ticks}")


@pytest.mark.slow
@pytest.mark.timeout(DAEMON_BOUND_S + 300)  # the daemon's bound, and the pages read before and after it
def test_the_ui_tells_the_truth(ui: str, demo_home: Path) -> None:
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    chromium = _chromium()
    SHOTS.mkdir(parents=True, exist_ok=True)
    print(f"screenshots: {SHOTS}")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1600, "height": 1100})
        prompted: list[bool] = []

        def show(path: str, wait_for: str) -> str:
            page.goto(ui + path)
            page.get_by_text(wait_for).first.wait_for(timeout=60_000)
            if not prompted:  # Dagster's newsletter prompt, once per fresh instance, a moment after the page
                prompted.append(True)
                try:
                    page.get_by_role("button", name="Skip").click(timeout=10_000)
                except PlaywrightTimeout:
                    pass
            page.wait_for_timeout(1500)  # let the panels that load after the page fill in
            return body()

        def body() -> str:
            return " ".join(page.inner_text("body").split())  # table cells and labels, one space apart

        def check_partitions(asset: str, check: str) -> str:
            """The check's Partitions tab: how many partitions it passes, fails or has no result for."""
            show(f"/assets/{asset}?view=checks", "Latest execution")
            page.get_by_text(check).first.click()
            page.get_by_text("Partitions", exact=True).last.click()
            page.get_by_text("Select a partition to view details").wait_for(timeout=30_000)
            return body()

        def shot(name: str) -> None:
            page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)

        # the quarantined targets' check: old, new and the rule, per partition
        text = show("/assets/scrape/books/candidate?view=checks", "Latest execution")
        page.get_by_text("change_within_limit").first.click()
        text = body()
        shot("1_quarantined_check")
        assert "Failed" in text and "hyperion" in text
        for label, value in (("old", "15.0"), ("new", "34.0"), ("rule", "max_change_pct 50")):
            assert f"{label} {value}" in text, text
        page.get_by_text("Execution history").click()
        page.get_by_text("price changed 9.5 → 29.0").first.wait_for(timeout=30_000)
        text = body()
        shot("2_check_history")
        assert "neuromancer" in text and "more than the allowed 50%" in text

        # the review sensor's tick that found them stands apart from the skipped ones: it requested a run
        # of review_notice_job, which names the quarantined targets and records the command that decides them.
        # The daemon ticks on its own time: the pages are read once the instance holds the tick, its run and
        # the run's events, so what is asserted is what the UI shows of them, not how soon the daemon was
        _announced_by_the_review_sensor(ui)
        text = show("/locations/scrape_contracts/sensors/review_sensor", "review_notice_job")
        page.get_by_text("1 run requested").first.wait_for(timeout=90_000)
        shot("2b_review_sensor_tick")
        text = show("/runs", "review_notice_job")
        shot("2c_review_notice_run")
        assert "scrape_contracts/quarantined: books/neuromancer, books/hyperion" in text, text
        text = show("/assets/scrape/books/candidate?view=events", "review_announced")
        page.get_by_text("review_announced").first.wait_for(timeout=30_000)
        text = body()
        assert "scrape-contracts review accept|reject books" in text, text

        # the reviewer accepts, as the README says: the check passes on that partition, with who and why
        done = subprocess.run([str(BIN / "scrape-contracts"), "review", "accept", "books", "neuromancer",
                               "--reviewer", "alice", "--reason", "new edition"], capture_output=True, text=True,
                              timeout=120, env={**os.environ})
        assert done.returncode == 0, done.stderr
        text = show("/assets/scrape/books/candidate?view=checks", "Latest execution")
        page.get_by_text("accepted by alice: new edition").first.wait_for(timeout=30_000)
        text = body()
        shot("3_check_passed_after_review")
        assert "Passed" in text and "neuromancer" in text and "reviewer alice" in text, text
        # per partition, the list's "Failed" is hyperion, still waiting; neuromancer passes, by the reviewer
        text = check_partitions("scrape/books/candidate", "change_within_limit")
        shot("3b_check_partitions_after_review")
        assert "Failed (1)" in text and "Passed (2)" in text and "Missing (0)" in text, text

        # a paused target says why on its partition, beside the data it still serves; its rejected run failed
        # (run-failure alerts fire for rejected data too), so the partition shows the failed run and the reason
        text = show(f"/assets/scrape/jobs?view=partitions&partition={JOB_TARGET}", "Latest materialization")
        page.get_by_text("healing budget exhausted").first.wait_for(timeout=30_000)
        text = body()
        shot("4_paused_target")
        assert "paused healing budget exhausted after 3 attempts" in text and "Failed (2)" in text, text
        assert "failed, and did not materialize this asset" in text and "Latest materialization" in text, text
        # its rejected candidates were not materialised, yet the check they failed says so per partition
        text = check_partitions("scrape/jobs/candidate", "required_fields_present")
        shot("4b_rejected_check_partitions")
        assert "Failed (2)" in text and "Missing (0)" in text, text

        # the healed target: old and new selector
        text = show("/assets/scrape/books?view=partitions&partition=dune", "Latest materialization")
        page.get_by_text("healed_selectors").first.wait_for(timeout=30_000)
        text = body()
        shot("5_healed_target")
        assert 'price: #price → strong[data-field="price"]' in text, text
        assert "version 2" in text and "dagster/row_count 1" in text, text

        # the accepted data's columns: the contract's fields with their type, rules and selector
        text = show("/assets/scrape/books", "Columns")
        shot("6_columns")
        columns = "price price non-nullable min 0 max_change_pct 50 selector in the contract: #price"
        assert columns in text, text
        browser.close()
