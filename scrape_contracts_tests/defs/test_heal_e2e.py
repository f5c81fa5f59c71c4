"""Healing in the pipeline: a redesign is healed under one run id; a removed field exhausts the budget."""

from __future__ import annotations

from scrape_contracts.defs.history import read_trail
from scrape_contracts_tests.conftest import Harness, failed_checks, materialized_keys, product_page


def test_layout_change_heals_then_removed_fields_exhaust_budget(harness: Harness, site) -> None:
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    site.set_page("/p/2", product_page("Emma", "BK-2", "$20.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1"), "p2": site.url("/p/2")})
    assert harness.run("shop", "p1").success and harness.run("shop", "p2").success

    # ids renamed and classes hashed; data-field / itemprop anchors kept; the price moved within the limit
    site.set_page("/p/1", product_page("Dune", "BK-1", "$104.00", layout="renamed"))
    result = harness.run("shop", "p1")
    assert result.success
    assert materialized_keys(result) == {"scrape/shop/candidate", "scrape/shop"}
    store = harness.store
    candidate = store.latest_candidate("shop", "p1", run_id=result.run_id)
    assert candidate.outcome == "healed"
    assert harness.accepted("shop", "p1") == {"title": "Dune", "sku": "BK-1", "price": 104.0}
    [v1, v2] = store.selector_history("shop")
    assert (v2.parent_version, v2.source, v2.run_id, v2.partition) == (1, "heal", result.run_id, "p1")
    assert set(v2.changes) == {"title", "sku", "price"}
    assert all("css-" not in selector for selector in v2.selectors.values())  # no hashed class names
    stages = [e.stage for e in read_trail(harness.instance, "shop", partition="p1")[0] if e.run_id == result.run_id]
    assert stages.index("violation_found") < stages.index("healing") < stages.index("re_extracted") \
        < stages.index("accepted")

    # the healed selectors serve every partition of the contract from now on
    site.set_page("/p/2", product_page("Emma", "BK-2", "$20.00", layout="renamed"))
    result = harness.run("shop", "p2")
    assert result.success
    assert store.latest_candidate("shop", "p2", run_id=result.run_id).outcome == "unchanged"
    assert len(store.selector_history("shop")) == 2

    # the facts are gone: the healer refuses, three runs spend the budget, the target pauses
    site.set_page("/p/1", product_page("Dune", layout="gone"))
    for attempt in (1, 2, 3):
        result = harness.run("shop", "p1")
        assert materialized_keys(result) == set()  # rejected: not materialised, its failed checks say why
        assert "required_fields_present" in failed_checks(result)
        assert store.state("shop", "p1").heal_attempts == attempt
    state = store.state("shop", "p1")
    assert state.paused and "healing budget exhausted after 3 attempts" in state.pause_reason
    assert harness.accepted("shop", "p1") == {"title": "Dune", "sku": "BK-1", "price": 104.0}
    assert len(store.selector_history("shop")) == 2  # a refusal never writes selectors
    trail = [e for e in read_trail(harness.instance, "shop", partition="p1")[0]]
    assert any(e.stage == "paused" and "budget exhausted" in e.summary for e in trail)
    assert any(e.stage == "healing_refused" for e in trail)
