"""The front door's operations in-process: what both doors rely on, without a server."""

from __future__ import annotations

import dagster as dg

from scrape_contracts.defs.names import candidate_key
from scrape_contracts.api import FrontDoor
from scrape_contracts_tests.conftest import Harness

CONTRACT = """
name: {name}
owners: [team:shop]
targets:
  - url: https://shop.example/{name}/1
    key: p1
fetch:
  adapter: http
  headers: {{Authorization: "Bearer site-secret-123"}}
fields:
  title:
    selector: "#title"
"""


def _door(harness: Harness) -> FrontDoor:
    for name in ("alpha", "beta"):
        harness.write(f"{name}.yaml", CONTRACT.format(name=name))
    return FrontDoor(contracts_dir=harness.contracts_dir, db_url=harness.backend.db_url, instance=harness.instance)


def test_contract_definition_hides_request_headers(sqlite_harness: Harness) -> None:
    door = _door(sqlite_harness)
    principal = door.authenticate(door.tokens.create("shop", "read")[1])
    detail = door.get_contract(principal, "alpha")
    assert detail.definition["fetch"]["headers"] == {"Authorization": "(hidden)"}
    assert "site-secret-123" not in detail.model_dump_json()


def test_event_pages_over_several_contracts_are_the_whole_trail_in_order(sqlite_harness: Harness) -> None:
    """Small pages over two contracts whose events interleave: every event once, in storage-id order."""
    door = _door(sqlite_harness)
    principal = door.authenticate(door.tokens.create("shop", "read")[1])
    for i in range(12):
        # uneven: alpha gets runs of three, so one contract's page fills before the other's
        name = "alpha" if i % 4 else "beta"
        sqlite_harness.instance.report_runless_asset_event(dg.AssetObservation(
            asset_key=candidate_key(name), partition="p1", metadata={"stage": "probe", "n": i}))
    whole = door.list_events(principal, limit=1000).events
    assert [e.metadata["n"] for e in whole] == list(range(12))
    paged, after = [], None
    while True:
        page = door.list_events(principal, after=after, limit=2)
        if not page.events:
            break
        assert len(page.events) <= 2
        paged += page.events
        after = page.next
    assert paged == whole
    assert [e.contract for e in door.list_events(principal, contract="beta").events] == ["beta"] * 3


def test_detailed_health_gives_each_proxy_as_the_last_run_left_it(sqlite_harness: Harness) -> None:
    sqlite_harness.write("gamma.yaml", CONTRACT.format(name="gamma").replace(
        "  adapter: http\n", "  adapter: http\n  proxies:\n    - {name: gw, url: \"http://127.0.0.1:3128\"}\n"))
    door = _door(sqlite_harness)
    door.store.save_proxy_health("gamma", "run-7", [{
        "proxy": "gw", "success": 0.2, "latency_s": 0.25, "rest_s": 60.0, "recheck_at": None, "score": 0.1,
        "requests": 9, "failures": 4, "quarantines": 1, "rechecks": 0}])
    principal = door.authenticate(door.tokens.create("shop", "read")[1])
    [gamma] = [c for c in door.health(principal).contracts if c.contract == "gamma"]
    [gw] = gamma.proxies
    assert (gw.proxy, gw.requests, gw.failures, gw.quarantines, gw.run_id, gw.latency_ms) == (
        "gw", 9, 4, 1, "run-7", 250.0)
    # nothing the service gives is left out of the API's record (it once dropped the proxies silently)
    from dataclasses import fields

    from scrape_contracts.api.models import ContractHealthRecord
    from scrape_contracts.service.health import ContractHealth

    assert {f.name for f in fields(ContractHealth)} <= set(ContractHealthRecord.model_fields)
