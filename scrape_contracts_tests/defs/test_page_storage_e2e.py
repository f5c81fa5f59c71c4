"""Page storages every worker host reaches: a target scraped with its pages in the project store or in an
object store, then healed after a redesign from the page stored there, with no local folder of pages."""

from __future__ import annotations

from pathlib import Path

import pytest

from scrape_contracts.adapters.pages import open_pages
from scrape_contracts_tests.adapters.test_pages import S3Server
from scrape_contracts_tests.conftest import Harness, product_page


def _scrape_and_heal(harness: Harness, site, path: str, location: str) -> None:
    page = product_page("Dune", "BK-1", "$100.00")
    site.set_page("/p/1", page)
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})


    assert harness.scrape_outcome("shop", "p1", path) == "valid"
    first = harness.store.latest_accepted("shop", "p1")
    pages = open_pages(location)
    assert pages.get(first.page_sha256) == page
    # nothing in a folder of this host: a worker elsewhere would find the page where this one put it
    assert not (harness.backend.home / "artifacts").exists()
    site.set_page("/p/1", product_page("Dune", "BK-1", "$101.00", layout="renamed"))
    assert harness.scrape_outcome("shop", "p1", path) == "healed"
    assert harness.accepted("shop", "p1") == {"title": "Dune", "sku": "BK-1", "price": 101.0}
    healed = harness.store.selector_history("shop")[-1]
    assert healed.selectors["price"] == 'strong[data-field="price"]'
    # healed from the stored page itself, not from the fingerprints kept beside the record
    assert "fingerprint" not in {c["evidence"].get("from") for c in healed.changes.values()}
    assert pages.count() == 2


def test_pages_in_the_project_store(harness: Harness, site, monkeypatch: pytest.MonkeyPatch) -> None:
    """The project store's database (SQLite and PostgreSQL), on the batched path."""
    monkeypatch.setenv("SCRAPE_CONTRACTS_PAGES", "store")
    monkeypatch.setenv("SCRAPE_CONTRACTS_PARSE_WORKERS", "1")  # a worker process opens the storage itself
    _scrape_and_heal(harness, site, "batch", harness.backend.db_url)


def test_pages_in_an_object_store(sqlite_harness: Harness, site, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """An S3-compatible object store (moto's S3 server on loopback), on the single-target path."""
    server = S3Server(tmp_path)
    try:
        for name, value in server.environ().items():
            monkeypatch.setenv(name, value)
        server.make_bucket("team-pages")
        monkeypatch.setenv("SCRAPE_CONTRACTS_PAGES", "s3://team-pages/scrapes")
        _scrape_and_heal(sqlite_harness, site, "single", "s3://team-pages/scrapes")
    finally:
        server.stop()
