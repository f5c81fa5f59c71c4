"""Hostile pages through the whole pipeline: a refusal caused by a limit or a deep page spends the heal
budget like any other refusal, and big values are not copied into every event."""

from __future__ import annotations

import json

import pytest

from scrape_contracts.defs.history import read_trail
from scrape_contracts_tests.conftest import Harness, failed_checks, product_page


def _deep(depth: int, inner: str) -> str:
    return "<span>" * depth + inner + "</span>" * depth


def test_heal_on_a_deep_page_is_a_refusal_that_spends_the_budget(sqlite_harness: Harness, site) -> None:
    harness = sqlite_harness
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    assert harness.run("shop", "p1").success

    # the facts are gone and the headline nests 1,500 elements deep (RecursionError in the healer before)
    gone = product_page("Dune", layout="gone").replace(
        '<h2 class="headline">Dune</h2>', f'<h2 class="headline">{_deep(1500, "Dune")}</h2>')
    site.set_page("/p/1", gone)
    for attempt in (1, 2, 3):
        result = harness.run("shop", "p1")
        assert failed_checks(result)  # rejected
        assert harness.store.state("shop", "p1").heal_attempts == attempt
    state = harness.store.state("shop", "p1")
    assert state.paused and "healing budget exhausted" in state.pause_reason
    assert harness.accepted("shop", "p1") == {"title": "Dune", "sku": "BK-1", "price": 100.0}


def test_heal_over_the_element_limit_is_a_refusal_that_spends_the_budget(
        sqlite_harness: Harness, site, monkeypatch: pytest.MonkeyPatch) -> None:
    harness = sqlite_harness
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    assert harness.run("shop", "p1").success

    monkeypatch.setenv("SCRAPE_CONTRACTS_HEAL_MAX_ELEMENTS", "10")
    site.set_page("/p/1", product_page("Dune", "BK-1", "$104.00", layout="renamed"))  # healable, but too big
    result = harness.run("shop", "p1")
    assert failed_checks(result)  # rejected
    assert harness.store.state("shop", "p1").heal_attempts == 1
    [healing] = [e for e in read_trail(harness.instance, "shop", partition="p1")[0]
                 if e.stage == "healing" and e.run_id == result.run_id]
    assert "heal_max_elements" in json.dumps(healing.metadata)

    monkeypatch.delenv("SCRAPE_CONTRACTS_HEAL_MAX_ELEMENTS")
    result = harness.run("shop", "p1")
    assert result.success and harness.accepted("shop", "p1")["price"] == 104.0


def test_trail_is_read_in_pages_dagster_accepts(sqlite_harness: Harness, site,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from scrape_contracts.defs import history as events

    harness = sqlite_harness
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    assert harness.run("shop", "p1").success
    site.set_page("/p/1", product_page("Dune", "BK-1", "$104.00"))
    assert harness.run("shop", "p1").success
    whole, cursor = read_trail(harness.instance, "shop", limit=100_000)  # more than Dagster's 10,000 per call
    assert len({e.storage_id for e in whole}) > 4
    monkeypatch.setattr(events, "_PAGE", 2)  # the same trail, two records per call
    assert read_trail(harness.instance, "shop", limit=100_000) == (whole, cursor)
    first, middle = read_trail(harness.instance, "shop", limit=3)
    rest, end = read_trail(harness.instance, "shop", after=middle, limit=100_000)
    assert first + rest == whole and end == cursor


def _stored_bytes(instance, run_id: str) -> int:
    import dagster as dg

    return sum(len(dg.serialize_value(entry)) for entry in instance.all_logs(run_id))


def test_a_huge_field_value_is_not_copied_into_every_event(sqlite_harness: Harness, site) -> None:
    harness = sqlite_harness
    huge = "Dune " * 200_000  # a 1 MB title
    site.set_page("/p/1", product_page(huge.strip(), "BK-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    result = harness.run("shop", "p1")
    assert result.success
    assert len(harness.accepted("shop", "p1")["title"]) == len(huge.strip())  # stored whole, once
    assert _stored_bytes(harness.instance, result.run_id) < 300_000  # was more than 3 MB: one copy per event
    extracted = next(e for e in read_trail(harness.instance, "shop", partition="p1")[0] if e.stage == "extracted")
    title = extracted.metadata["record"]["title"]
    assert len(title) < 3000 and "truncated: 999,999 characters" in title
    assert "SCRAPE_CONTRACTS_METADATA_MAX_CHARS" in title

    # a violation quoting the value (its price moved beyond the limit) is cut the same way
    site.set_page("/p/1", product_page(huge.strip(), "BK-1", "$900.00"))
    result = harness.run("shop", "p1")
    assert not result.success
    assert _stored_bytes(harness.instance, result.run_id) < 300_000


def test_every_schema_error_of_a_record_is_reported(sqlite_harness: Harness, site) -> None:
    harness = sqlite_harness
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")}, extra=(
        "schema:\n  type: object\n  properties:\n    title: {type: string, maxLength: 2}\n"
        "    sku: {type: string, pattern: '^X-'}\n"))
    result = harness.run("shop", "p1")
    failed = failed_checks(result)["matches_schema"]
    assert {v["field"] for v in failed["violations"]} == {"title", "sku"}
    [evaluation] = [e.event_specific_data for e in result.all_events
                    if e.event_type_value == "ASSET_CHECK_EVALUATION"
                    and e.event_specific_data.check_name == "matches_schema"]
    assert "title:" in evaluation.description and "sku:" in evaluation.description
