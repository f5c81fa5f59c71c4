"""A site going back to the layout the contract was written for, after a heal: no heal, no budget spent."""

from __future__ import annotations

import pytest

from scrape_contracts.defs.history import read_trail
from scrape_contracts_tests.conftest import Harness, product_page


@pytest.mark.parametrize("path", ["single", "batch"])
def test_back_to_the_contract_layout_after_a_heal(sqlite_harness: Harness, site, monkeypatch, path: str) -> None:
    harness = sqlite_harness
    monkeypatch.setenv("SCRAPE_CONTRACTS_PARSE_WORKERS", "0")  # the batch's worker code, in a thread
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})


    assert harness.scrape_outcome("shop", "p1", path) == "valid"
    site.set_page("/p/1", product_page("Dune", "BK-1", "$101.00", layout="renamed"))
    assert harness.scrape_outcome("shop", "p1", path) == "healed"
    healed = harness.store.selector_history("shop")[-1]
    assert healed.selectors["price"] == 'strong[data-field="price"]'  # matches nothing on the old layout
    site.set_page("/p/1", product_page("Dune", "BK-1", "$102.00"))  # the redesign is rolled back
    assert harness.scrape_outcome("shop", "p1", path) == "valid"
    assert harness.accepted("shop", "p1")["price"] == 102.0
    assert [v.version for v in harness.store.selector_history("shop")] == [1, 2]  # nothing healed again
    assert harness.store.state("shop", "p1").heal_attempts == 0
    trail = [e for e in read_trail(harness.instance, "shop", partition="p1")[0] if e.stage == "extracted"]
    assert trail[-1].metadata["contract_selectors"] == {"price": "#price"}


def _third_layout(price: str) -> str:
    """A third design: itemprop anchors only (not the contract's ids, not the second design's data-field)."""
    return ("<!doctype html><html><head><meta charset='utf-8'><title>Dune</title></head><body>"
            "<main itemscope>"
            "<h1 class='t-xl' itemprop='name'>Dune</h1><p>SKU: <span itemprop='sku'>BK-1</span></p>"
            f"<p class='buy-row'>Price: <span class='amount' itemprop='price'>{price}</span></p></main>"
            "<aside class='related'><h3>You may also like</h3><span class='price'>$7.99</span></aside>"
            "</body></html>")


@pytest.mark.parametrize("path", ["single", "batch"])
def test_back_to_an_earlier_healed_layout(sqlite_harness: Harness, site, monkeypatch, path: str) -> None:
    """Older selector versions are candidates too: design 1 → 2 (heal) → 3 (heal) → 2 again needs no heal."""
    harness = sqlite_harness
    monkeypatch.setenv("SCRAPE_CONTRACTS_PARSE_WORKERS", "0")
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})

    def scrape(page: str) -> str:
        site.set_page("/p/1", page)
        return harness.scrape_outcome("shop", "p1", path)

    assert scrape(product_page("Dune", "BK-1", "$100.00")) == "valid"
    assert scrape(product_page("Dune", "BK-1", "$101.00", layout="renamed")) == "healed"
    second = harness.store.selector_history("shop")[-1].selectors["price"]
    assert scrape(_third_layout("$102.00")) == "healed"
    assert harness.store.selector_history("shop")[-1].selectors["price"] != second
    assert scrape(product_page("Dune", "BK-1", "$103.00", layout="renamed")) == "valid"  # design 2 is back
    assert harness.accepted("shop", "p1")["price"] == 103.0
    assert len(harness.store.selector_history("shop")) == 3  # nothing healed again
    assert harness.store.state("shop", "p1").heal_attempts == 0
    trail = [e for e in read_trail(harness.instance, "shop", partition="p1")[0] if e.stage == "extracted"]
    assert trail[-1].metadata["contract_selectors"] == {"price": second}
