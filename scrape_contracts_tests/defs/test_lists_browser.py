"""A listing rendered by JavaScript behind a consent overlay (examples/browser/new_arrivals.yaml): read
through the browser adapter with the real system Chromium; over plain HTTP it yields nothing and says so."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from scrape_contracts.engine.lists import set_records
from scrape_contracts.engine.rendering import BROWSER_HINT
from scrape_contracts.service.accepted import read_accepted
from scrape_contracts_tests.browser_site import REPO, SHOP, require_chromium
from scrape_contracts_tests.conftest import Harness, failed_checks, failure_text
from scrape_contracts_tests.defs.test_fetch_e2e import stage_metadata
from scrape_contracts_tests.fixture_site import FixtureSite

pytestmark = pytest.mark.timeout(180)

PARTITION = "p1"
CONTRACT = REPO / "examples" / "browser" / "new_arrivals.yaml"
PRODUCTS = json.loads((SHOP / "new-arrivals.json").read_text())


def serve_listing(site: FixtureSite) -> str:
    site.set_page("/shop/new-arrivals.html", (SHOP / "new-arrivals.html").read_bytes())
    site.set_page("/shop/new-arrivals.json", json.dumps(PRODUCTS),
                  headers={"Content-Type": "application/json"})
    return site.url("/shop/new-arrivals.html")


def write_contract(harness: Harness, url: str, **fetch: Any) -> None:
    contract = yaml.safe_load(CONTRACT.read_text())
    contract["targets"] = [{"url": url, "key": PARTITION}]
    merged = {**contract["fetch"], "timeout_s": 5, **fetch}
    contract["fetch"] = {key: value for key, value in merged.items() if value is not None}
    harness.write("new_arrivals.yaml", yaml.safe_dump(contract, sort_keys=False))


def test_javascript_listing_behind_a_consent_overlay_is_read_through_the_browser(sqlite_harness: Harness,
                                                                                 site: FixtureSite) -> None:
    require_chromium()
    harness = sqlite_harness
    write_contract(harness, serve_listing(site))
    result = harness.run("new_arrivals", PARTITION)
    assert result.success, failure_text(result)
    records = set_records(harness.accepted("new_arrivals", PARTITION))
    assert [(r["record_key"], r["title"], r["price"]) for r in records] == [
        (p["sku"], p["title"], float(p["price"].lstrip("$"))) for p in PRODUCTS]
    assert len(PRODUCTS) == 8
    frame = read_accepted("new_arrivals")
    assert list(frame["record_key"]) == [p["sku"] for p in PRODUCTS]


def test_the_same_listing_over_http_yields_nothing_and_says_it_needs_the_browser(sqlite_harness: Harness,
                                                                                 site: FixtureSite) -> None:
    harness = sqlite_harness
    write_contract(harness, serve_listing(site), adapter="http", browser=None, retries=0)
    result = harness.run("new_arrivals", PARTITION)
    assert harness.accepted("new_arrivals", PARTITION) is None
    assert harness.store.latest_candidate("new_arrivals", PARTITION).outcome == "rejected"
    failed = failed_checks(result)
    assert "0 records, outside the bounds 1..∞" in failed["record_count_within_bounds"]["message"]
    assert BROWSER_HINT in failed["record_count_within_bounds"]["message"]
    [extracted] = stage_metadata(harness, "new_arrivals", result.run_id, "extracted")
    assert extracted["records"] == 0 and extracted["hint"] == BROWSER_HINT
