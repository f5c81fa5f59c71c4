"""The gate under races: two runs of one target never both pass the change limit against the same version."""

from __future__ import annotations

import threading
from typing import Any

from scrape_contracts.contract.loader import load_contracts
from scrape_contracts.service import gate, scrape
from scrape_contracts.service.records import Extracted, Fetched, HealReport, ScrapeResult, no_emit
from scrape_contracts_tests.conftest import Harness, product_page


def _setup(harness: Harness, site: Any) -> Any:
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    assert harness.run("shop", "p1").success  # v1: price 100
    return load_contracts(harness.contracts_dir).by_name()["shop"]


def _candidate(loaded: Any, harness: Harness, price: float) -> ScrapeResult:
    """What a run that read the accepted version now and then saw ``price`` would decide."""
    previous = scrape.previous_of(harness.store, "shop", "p1")
    fetched = Fetched("shop", "p1", "http://x/p/1", "http://x/p/1", None, False, (), None, None, previous)
    extracted = Extracted(fetched, {"title": "Dune", "sku": "BK-1", "price": price}, (), 1, {})
    return scrape.decide(loaded, scrape.validate(loaded, extracted, no_emit), HealReport(), no_emit)


def test_overlapping_changes_are_each_diffed_against_their_true_predecessor(harness: Harness, site) -> None:
    loaded = _setup(harness, site)
    store = harness.store
    # both runs read v1 (100) before either recorded: +40% and -40% are each within the 50% limit of v1
    up, down = _candidate(loaded, harness, 140.0), _candidate(loaded, harness, 60.0)
    assert up.outcome.value == down.outcome.value == "valid"
    [(_, first)] = gate.record_results(store, [up], "run-a", loaded)
    assert (first.status, first.accepted_version) == ("accepted", 2)
    # the batch path: against v2 (140), 60 is -57%: a person must look at it
    [(result, second)] = gate.record_results(store, [down], "run-b", loaded)
    assert second.status == "quarantined" and result.outcome.value == "review_required"
    assert "140.0 → 60.0" in second.quarantine_reason
    assert [v.version for v in store.accepted_history("shop", "p1")] == [1, 2]
    assert store.pending_review("shop", "p1").record["price"] == 60.0

    # the single-target path: the candidate is stored first, then accepted after its checks passed
    harness.review("shop", "p1", "reject")
    late = _candidate(loaded, harness, 100.0)  # read v2 (140): -28.6%, fine
    stored = gate.store_candidate(store, late, "run-c")
    [(_, racing)] = gate.record_results(store, [_candidate(loaded, harness, 30.0 * 7)], "run-d", loaded)  # 210
    assert racing.accepted_version == 3
    recorded = gate.accept(store, store.candidate(stored.candidate_id), "run-c", loaded)
    # against v3 (210), 100 is -52%: not accepted; and as newer data is accepted already, nothing to review
    assert (recorded.outcome.value, recorded.status) == ("review_required", "superseded")
    assert store.pending_review("shop", "p1") is None
    assert [v.record["price"] for v in store.accepted_history("shop", "p1")] == [100.0, 140.0, 210.0]


def test_racing_accepts_both_commit_in_order(harness: Harness, site) -> None:
    loaded = _setup(harness, site)
    store = harness.store
    results = [_candidate(loaded, harness, 110.0), _candidate(loaded, harness, 115.0)]
    barrier = threading.Barrier(2)
    outcomes: list[Any] = [None, None]

    def record(i: int) -> None:
        barrier.wait()
        outcomes[i] = gate.record_results(store, [results[i]], f"run-{i}", loaded)[0]

    threads = [threading.Thread(target=record, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(o[1].accepted_version for o in outcomes) == [2, 3]
    history = store.accepted_history("shop", "p1")
    assert [v.version for v in history] == [1, 2, 3]
    # the later one was diffed against the earlier one, not against v1
    later = store.candidate(history[2].candidate_id)
    assert later.details["previous_version"] == 2
    assert later.details["previous"]["price"] == history[1].record["price"]
