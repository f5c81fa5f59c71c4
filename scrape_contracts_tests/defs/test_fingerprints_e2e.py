"""Fingerprints at acceptance, on both run paths: stored with the accepted candidate, and a heal after the
last accepted page was deleted works from them alone."""

from __future__ import annotations

import pytest

from scrape_contracts import settings
from scrape_contracts.adapters.pages.folder import FolderPages
from scrape_contracts.adapters.fingerprints import SqlFingerprintStore
from scrape_contracts.engine.heal import FieldMemory
from scrape_contracts_tests.conftest import Harness, product_page


@pytest.mark.parametrize("path", ["single", "batch"])
def test_heal_from_fingerprints_after_the_page_is_gone(sqlite_harness: Harness, site, monkeypatch,
                                                         path: str) -> None:
    harness = sqlite_harness
    monkeypatch.setenv("SCRAPE_CONTRACTS_PARSE_WORKERS", "0")  # the batch's worker code, in a thread
    # retention may prune every page, the last accepted ones too: only then are fingerprints taken
    monkeypatch.setenv("SCRAPE_CONTRACTS_RETENTION_KEEP_LAST", "false")
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})


    assert harness.scrape_outcome("shop", "p1", path) == "valid"
    first = harness.store.latest_accepted("shop", "p1")
    stored = SqlFingerprintStore(harness.store.engine).load(first.candidate_id)
    assert set(stored) == {"title", "sku", "price"}
    price = FieldMemory.from_json(stored["price"])
    assert price.selector == "#price" and price.targets[0].id == "price" and price.target_raw == "$100.00"

    # the raw page is deleted (retention): only the fingerprints are left of it
    artifacts = FolderPages(settings.artifacts_dir())
    assert artifacts.prune(keep=set()) >= 1 and artifacts.get(first.page_sha256) is None
    site.set_page("/p/1", product_page("Dune", "BK-1", "$101.00", layout="renamed"))
    assert harness.scrape_outcome("shop", "p1", path) == "healed"
    assert harness.accepted("shop", "p1") == {"title": "Dune", "sku": "BK-1", "price": 101.0}
    healed = harness.store.selector_history("shop")[-1]
    assert healed.selectors["price"] == 'strong[data-field="price"]'
    assert {c["evidence"]["from"] for c in healed.changes.values()} == {"fingerprint"}
    # and the healed record has fingerprints of its own
    second = harness.store.latest_accepted("shop", "p1")
    stored = SqlFingerprintStore(harness.store.engine).load(second.candidate_id)
    assert set(stored) == {"title", "sku", "price"}


def test_no_page_and_no_fingerprints_refuses_with_the_reason(sqlite_harness: Harness, site) -> None:
    harness = sqlite_harness
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    assert harness.run("shop", "p1").success
    accepted = harness.store.latest_accepted("shop", "p1")
    SqlFingerprintStore(harness.store.engine).delete([accepted.candidate_id])
    FolderPages(settings.artifacts_dir()).prune(keep=set())
    site.set_page("/p/1", product_page("Dune", "BK-1", "$101.00", layout="renamed"))
    result = harness.run("shop", "p1")
    candidate = harness.store.latest_candidate("shop", "p1", run_id=result.run_id)
    assert candidate.outcome == "rejected"
    assert "pruned and no fingerprints" in candidate.details["heal"]["reason"]


def test_no_fingerprints_while_retention_keeps_the_last_accepted_page(sqlite_harness: Harness, site) -> None:
    """The default: the page a heal reads is kept, so its fingerprints (15-25 ms a page) are not taken."""
    harness = sqlite_harness
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    assert harness.run("shop", "p1").success
    accepted = harness.store.latest_accepted("shop", "p1")
    assert SqlFingerprintStore(harness.store.engine).load(accepted.candidate_id) == {}
    assert harness.accepted("shop", "p1")["price"] == 100.0  # the last accepted data survives
