"""A contract that does not load shows in Dagster: on ``scrape/_contracts`` and its check, in process and over
GraphQL on a running webserver; when none loads, the code location itself is errored."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import httpx
import pytest

from scrape_contracts.defs import build_definitions
from scrape_contracts.defs.names import accepted_key, candidate_key
from scrape_contracts.defs.load_report import CONTRACTS_KEY, LOAD_CHECK, NoContractLoaded
from scrape_contracts_tests.conftest import clean_env

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

GOOD = """
name: {name}
targets:
  - url: https://shop.example.com/p/1
    key: p1
fields:
  title:
    selector: "#title"
"""
# the selector on line 9 is not CSS
BROKEN = """
name: broken
targets:
  - url: https://shop.example.com/p/1
    key: p1
fields:
  title:
    selector: "#title"
  price:
    selector: "span[[price"
    type: price
"""
BROKEN_LINE = 9


def _write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


@pytest.fixture
def contracts_dir(tmp_path: Path) -> Path:
    """Two good contracts, one with a bad selector on line 9, one that is not YAML at all."""
    folder = tmp_path / "contracts"
    folder.mkdir()
    _write(folder, "shop.yaml", GOOD.format(name="shop"))
    _write(folder, "news.yaml", GOOD.format(name="news"))
    _write(folder, "broken.yaml", BROKEN)
    _write(folder, "garbled.yaml", "name: [unclosed\n")
    assert (folder / "broken.yaml").read_text().splitlines()[BROKEN_LINE - 1].strip().startswith("selector:")
    return folder


def _check(result: dg.ExecuteInProcessResult) -> dg.AssetCheckEvaluation:
    (evaluation,) = result.get_asset_check_evaluations()
    assert evaluation.check_name == LOAD_CHECK
    return evaluation


def test_broken_contracts_fail_the_load_check_and_the_good_ones_load(contracts_dir: Path) -> None:
    defs = build_definitions(contracts_dir)
    graph = defs.resolve_asset_graph()
    for name in ("shop", "news"):
        assert graph.has(candidate_key(name)) and graph.has(accepted_key(name))
    assert not graph.has(accepted_key("broken"))
    # at load, before anything runs: the asset's and the check's descriptions name file and line
    report = defs.resolve_assets_def(CONTRACTS_KEY)
    assert "| broken.yaml | 9 | fields.price.selector | invalid CSS selector" in report.descriptions_by_key[
        CONTRACTS_KEY]
    (spec,) = report.check_specs
    assert spec.blocking and "broken.yaml line 9: fields.price.selector" in spec.description
    assert "garbled.yaml line 2: invalid YAML" in spec.description
    with dg.instance_for_test() as instance:
        job = defs.resolve_implicit_global_asset_job_def()
        result = job.execute_in_process(asset_selection=[CONTRACTS_KEY], instance=instance,
                                        raise_on_error=False)
        assert not result.success  # the check blocks: the run says so too
        evaluation = _check(result)
        assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.ERROR
        assert "broken.yaml line 9: fields.price.selector: invalid CSS selector" in evaluation.description
        table = evaluation.metadata["load_errors"].value
        assert "| broken.yaml | 9 | fields.price.selector |" in table and "| garbled.yaml |" in table
        assert evaluation.metadata["contracts_loaded"].value == 2
        assert evaluation.metadata["files_failed"].value == 2


def test_sensor_evaluates_the_check_once_per_change_of_what_loaded(contracts_dir: Path) -> None:
    def tick(cursor: str | None) -> dg.SensorResult:
        defs = build_definitions(contracts_dir)
        sensor = defs.resolve_sensor_def("contracts_load_sensor")
        assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
        with dg.instance_for_test() as instance:
            return sensor(dg.build_sensor_context(instance=instance, cursor=cursor))

    first = tick(None)
    (request,) = first.run_requests
    assert list(request.asset_selection) == [CONTRACTS_KEY]
    again = tick(first.cursor)
    assert not again.run_requests and "already reported" in again.skip_reason.skip_message
    assert again.cursor == first.cursor
    (contracts_dir / "garbled.yaml").unlink()
    (contracts_dir / "broken.yaml").write_text(BROKEN.replace("span[[price", "#price"))
    fixed = tick(first.cursor)
    (fixed_request,) = fixed.run_requests
    assert fixed_request.run_key != request.run_key
    defs = build_definitions(contracts_dir)
    with dg.instance_for_test() as instance:
        result = defs.resolve_implicit_global_asset_job_def().execute_in_process(
            asset_selection=[CONTRACTS_KEY], instance=instance)
    evaluation = _check(result)
    assert evaluation.passed and evaluation.metadata["contracts_loaded"].value == 3
    # back to the broken state: a new run, although that state was reported once before
    (contracts_dir / "broken.yaml").write_text(textwrap.dedent(BROKEN).lstrip("\n"))
    _write(contracts_dir, "garbled.yaml", "name: [unclosed\n")
    back = tick(fixed.cursor)
    assert back.run_requests and back.run_requests[0].run_key not in (request.run_key, fixed_request.run_key)


def test_no_contract_loading_errors_the_code_location(tmp_path: Path) -> None:
    folder = tmp_path / "contracts"
    folder.mkdir()
    # an empty folder is not an error: nothing to show, and scrape/_contracts passes
    assert build_definitions(folder).resolve_asset_graph().has(CONTRACTS_KEY)
    _write(folder, "broken.yaml", BROKEN)
    _write(folder, "garbled.yaml", "name: [unclosed\n")
    with pytest.raises(NoContractLoaded) as raised:
        build_definitions(folder)
    message = str(raised.value)
    assert f"no contract loaded from {folder}" in message and "scrape-contracts validate" in message
    assert f"{folder / 'broken.yaml'}:9: fields.price.selector: invalid CSS selector" in message
    assert f"{folder / 'garbled.yaml'}:" in message


# ---- over GraphQL, on a running webserver and daemon ----------------------------------------------------

def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _stop(process: subprocess.Popen) -> None:
    # each was started in its own session: its group holds the code servers it spawned, and nothing else
    for sig, wait in ((signal.SIGINT, 20), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
            process.wait(timeout=wait)
            return
        except ProcessLookupError:
            return
        except subprocess.TimeoutExpired:
            continue


class Ui:
    def __init__(self, base: str, log: Path) -> None:
        self.base, self.log = base, log

    def query(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        response = httpx.post(f"{self.base}/graphql", json={"query": query, "variables": variables or {}},
                              timeout=60)
        response.raise_for_status()
        body = response.json()
        assert not body.get("errors"), body["errors"]
        return body["data"]


@pytest.fixture
def ui(contracts_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Ui]:
    """`dagster-webserver` and `dagster-daemon` on a fresh laptop instance, the code location reading
    ``contracts_dir`` (the workspace names the module; SCRAPE_CONTRACTS_DIR points it at the folder)."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "dagster.yaml", home / "dagster.yaml")
    # the instance's SQLite files are created here first: started together on an empty home, the webserver and
    # the daemon both create them, and one dies on "table alembic_version already exists" (seen under load)
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    dg.DagsterInstance.from_config(str(home)).dispose()
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text("load_from:\n  - python_module:\n      module_name: scrape_contracts.definitions\n"
                         "      location_name: scrape_contracts\n")
    env = clean_env(DAGSTER_HOME=str(home), SCRAPE_CONTRACTS_DIR=str(contracts_dir))
    port = _free_port()
    log = tmp_path / "ui.log"
    with log.open("w") as out:
        started = {"cwd": tmp_path, "env": env, "stdout": out, "stderr": subprocess.STDOUT,
                   "start_new_session": True}
        webserver = subprocess.Popen([str(BIN / "dagster-webserver"), "-w", str(workspace), "-h", "127.0.0.1",
                                      "-p", str(port)], **started)
        daemon = subprocess.Popen([str(BIN / "dagster-daemon"), "run", "-w", str(workspace)], **started)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{base}/server_info", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert webserver.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        ui = Ui(base, log)
        # the webserver answers before its code server has loaded the location on a busy machine
        while ui.query(LOCATIONS)["workspaceOrError"]["locationEntries"][0]["loadStatus"] != "LOADED":
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.5)
        yield ui
    finally:
        _stop(daemon)
        _stop(webserver)


ASSET = """
query ($key: AssetKeyInput!) {
  assetNodeOrError(assetKey: $key) {
    ... on AssetNode {
      description
      assetChecksOrError { ... on AssetChecks { checks { name description blocking
        executionForLatestMaterialization { status evaluation { success description
          metadataEntries { label ... on MarkdownMetadataEntry { mdStr } } } } } } }
    }
  }
}
"""
ASSET_KEYS = "query { assetNodes { assetKey { path } } }"
LOCATIONS = "query { workspaceOrError { ... on Workspace { locationEntries { name loadStatus } } } }"
RELOAD = """
mutation { reloadRepositoryLocation(repositoryLocationName: "scrape_contracts") {
  __typename ... on WorkspaceLocationEntry {
    locationOrLoadError { __typename ... on PythonError { message causes { message } } } }
} }
"""


# how long the daemon may take, at most, to tick contracts_load_sensor: a bound for a broken daemon, not a timing
# (the test polls for the check's evaluation, however soon it comes); under load the daemon's code server alone
# takes tens of seconds to load the location before the first tick
DAEMON_BOUND_S = 420


@pytest.mark.timeout(DAEMON_BOUND_S + 240)  # the sensor's bound, and the webserver's start (120 s) before it
def test_a_broken_contract_shows_in_the_ui_as_a_failed_check(ui: Ui, contracts_dir: Path) -> None:
    key = {"path": list(CONTRACTS_KEY.path)}
    keys = {tuple(node["assetKey"]["path"]) for node in ui.query(ASSET_KEYS)["assetNodes"]}
    assert {("scrape", "shop"), ("scrape", "shop", "candidate"), ("scrape", "news"),
            ("scrape", "_contracts")} <= keys, (keys, ui.log.read_text()[-3000:])
    assert not {k for k in keys if "broken" in k}
    # nobody launches anything: the daemon's sensor has the check evaluated
    deadline = time.monotonic() + DAEMON_BOUND_S
    while True:
        node = ui.query(ASSET, {"key": key})["assetNodeOrError"]
        (check,) = node["assetChecksOrError"]["checks"]
        execution = check["executionForLatestMaterialization"]
        if execution and execution["status"] in ("FAILED", "SUCCEEDED"):
            break
        assert time.monotonic() < deadline, ui.log.read_text()[-3000:]
        time.sleep(1)
    assert "| broken.yaml | 9 | fields.price.selector | invalid CSS selector" in node["description"]
    assert check["name"] == LOAD_CHECK and check["blocking"]
    assert "broken.yaml line 9: fields.price.selector" in check["description"]
    assert execution["status"] == "FAILED" and not execution["evaluation"]["success"]
    described = execution["evaluation"]["description"]
    assert "broken.yaml line 9: fields.price.selector: invalid CSS selector" in described
    table = {e["label"]: e.get("mdStr") for e in execution["evaluation"]["metadataEntries"]}["load_errors"]
    assert "| broken.yaml | 9 | fields.price.selector |" in table and "| garbled.yaml |" in table
    # every contract broken, and the location reloaded: the location itself is errored, saying why
    for name in ("shop.yaml", "news.yaml"):
        (contracts_dir / name).write_text("name: [\n")
    entry = ui.query(RELOAD)["reloadRepositoryLocation"]
    error = entry["locationOrLoadError"]
    assert error["__typename"] == "PythonError", entry
    # the UI shows the error and its causes: ours names the folder and every file
    shown = "\n".join([error["message"], *(cause["message"] for cause in error["causes"])])
    assert f"NoContractLoaded: no contract loaded from {contracts_dir}" in shown, shown
    assert "broken.yaml:9: fields.price.selector" in shown and "shop.yaml:" in shown and "news.yaml:" in shown
