"""Admission control for every launch, the UI's included: the steps that fetch for a contract run in its op
concurrency pool (``scrape/C``), unlimited until a platform team sets a limit (docs/production.md)."""

from __future__ import annotations

import threading
import time

from scrape_contracts.defs.names import batch_job_name, scrape_pool
from scrape_contracts_tests.conftest import Harness, product_page


def _until(condition, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_a_single_target_run_waits_for_a_slot_of_its_contracts_pool(harness: Harness, site) -> None:
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    defs = harness.definitions()
    assert defs.resolve_job_def(batch_job_name("shop")).graph.node_defs[0].pool == scrape_pool("shop")
    storage = harness.instance.event_log_storage
    pool = scrape_pool("shop")
    storage.set_concurrency_slots(pool, 1)
    # another run's step holds the pool's only slot
    storage.claim_concurrency_slot(pool, "another-run", "another_step")
    results = []
    runner = threading.Thread(target=lambda: results.append(harness.run("shop", "p1", defs)), daemon=True)
    runner.start()
    _until(lambda: storage.get_concurrency_info(pool).pending_step_count == 1, "the run's step to wait")
    assert runner.is_alive() and site.requests_to("/p/1") == []  # waiting, nothing fetched
    storage.free_concurrency_slot_for_step("another-run", "another_step")
    runner.join(timeout=300)
    assert not runner.is_alive() and results[0].success
    assert harness.accepted("shop", "p1") == {"title": "Dune", "sku": "BK-1", "price": 100.0}
