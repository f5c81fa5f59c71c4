"""`deliveries list --status pending`: messages recorded but not sent yet, on a real instance and store.

The sensor's cursor is stored in the instance with `dagster sensor cursor --set` (the daemon keeps it in the
same place), so the listing sees what the daemon would: rows after the cursor, and rows of delivery runs
that have not finished.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from scrape_contracts.adapters.outbox import event_id
from scrape_contracts.cli import main
from scrape_contracts_tests.conftest import Harness, clean_env, product_page
from scrape_contracts_tests.defs.test_activations import RULES, _deliver, _setup, _tick
from scrape_contracts_tests.receiver import Receiver

BIN = Path(sys.executable).parent


def _listed(harness: Harness, capsys: pytest.CaptureFixture[str], *status: str) -> str:
    capsys.readouterr()
    assert main(["--contracts-dir", str(harness.contracts_dir), "deliveries", "list", *status]) == 0
    return capsys.readouterr().out


def _store_cursor(harness: Harness, cursor: str) -> None:
    """What the daemon does after a tick: keep the sensor's cursor in the instance."""
    workspace = harness.contracts_dir.parent / "workspace.yaml"
    workspace.write_text("load_from:\n  - python_module:\n      module_name: scrape_contracts.definitions\n"
                         "      location_name: scrape_contracts\n")
    done = subprocess.run(
        [str(BIN / "dagster"), "sensor", "cursor", "activation_sensor", "--set", cursor, "-w", str(workspace)],
        env=clean_env(DAGSTER_HOME=str(harness.backend.home), SCRAPE_CONTRACTS_DIR=str(harness.contracts_dir),
                      SCRAPE_CONTRACTS_DB_URL=harness.backend.db_url),
        cwd=harness.contracts_dir.parent, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]


def test_pending_lists_what_is_not_sent_yet_and_nothing_passed_over(
        sqlite_harness: Harness, site: Any, receiver: Receiver, capsys: pytest.CaptureFixture[str]) -> None:
    harness = sqlite_harness
    _setup(harness, site, receiver)
    defs = harness.definitions()
    assert harness.run("shop", "p1", defs).success
    site.set_page("/p/1", product_page("Kettle", "K-1", "$88.00"))  # -12%: price_drop
    assert harness.run("shop", "p1", defs).success
    drop = event_id("shop", "p1", 2, "activation:price_drop")

    # no daemon has ticked yet: the message waits for activation_sensor
    out = _listed(harness, capsys, "--status", "pending")
    assert f"{drop} hook (price_drop): pending" in out and out.count("pending") == 1, out

    # a tick requested a delivery run (cursor stored), the run has not started: still pending
    tick = _tick(harness, defs, None)
    (request,) = tick.run_requests
    _store_cursor(harness, tick.cursor)
    harness.instance.create_run_for_job(job_def=defs.resolve_job_def("deliver_events_job"),
                                        run_config=request.run_config, tags=request.tags)
    assert f"{drop} hook (price_drop): pending" in _listed(harness, capsys, "--status", "pending")

    # delivered: no longer pending, listed as delivered
    assert _deliver(harness, defs, request).success and len(receiver.received) == 1
    assert "no deliveries with status pending" in _listed(harness, capsys, "--status", "pending")
    assert f"{drop} hook (price_drop): delivered after 1 attempt(s)" in _listed(harness, capsys)

    # rows the sensor passed over (the contract had no rules then) are not pending once rules come back
    contract = harness.contracts_dir / "shop.yaml"
    with_rules = contract.read_text()
    contract.write_text(with_rules.replace(RULES.format(), ""))
    site.set_page("/p/1", product_page("Kettle", "K-1", "$70.00"))
    assert harness.run("shop", "p1").success
    passed = _tick(harness, harness.definitions(), tick.cursor)
    assert not passed.run_requests and int(passed.cursor) > int(tick.cursor)
    _store_cursor(harness, passed.cursor)
    contract.write_text(with_rules)
    assert "no deliveries with status pending" in _listed(harness, capsys, "--status", "pending")
    # a change after the cursor is
    site.set_page("/p/1", product_page("Kettle", "K-1", "$50.00"))
    assert harness.run("shop", "p1").success
    out = _listed(harness, capsys, "--status", "pending")
    assert f"{event_id('shop', 'p1', 4, 'activation:price_drop')} hook (price_drop): pending" in out
    assert out.count("pending") == 1, out
