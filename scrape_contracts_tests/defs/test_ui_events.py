"""What the Dagster UI reads, from Dagster's own events: check evaluations per partition, observations with
their stage as description, the pause reason next to the data served, healed selectors as markdown."""

from __future__ import annotations

from typing import Any

import dagster as dg
import pytest

from scrape_contracts.defs.names import accepted_key, candidate_key
from scrape_contracts_tests.conftest import Harness, failed_checks, materialized_keys, product_page
from scrape_contracts_tests.defs.test_batch import run_batch


def _observations(harness: Harness, key: dg.AssetKey, partition: str) -> list[Any]:
    records = harness.instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition]), limit=100, ascending=True).records
    return [r.asset_observation for r in records]


def _paused(harness: Harness, contract: str, partition: str) -> str | None:
    """What the accepted data's partition says about pausing (its latest observation), None when silent."""
    said = [o.metadata["paused"].value for o in _observations(harness, accepted_key(contract), partition)
            if "paused" in o.metadata]
    return said[-1] if said else None


def _check_partition(harness: Harness, contract: str, check: str, partition: str) -> str:
    """What the check's Partitions tab shows for a partition: the status of its latest evaluation when that
    evaluation is about the partition's latest candidate materialisation, "MISSING" otherwise."""
    [info] = harness.instance.event_log_storage.get_asset_check_partition_info(
        [dg.AssetCheckKey(candidate_key(contract), check)], partition_keys=[partition])
    return info.latest_execution_status.value if info.is_current else "MISSING"


def _shop(harness: Harness, site) -> None:
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    assert harness.run("shop", "p1").success


@pytest.mark.parametrize("path", ["single", "batch"])
def test_quarantine_pauses_on_the_partition_and_accept_passes_the_check(sqlite_harness: Harness, site,
                                                                       monkeypatch, path: str) -> None:
    harness = sqlite_harness
    monkeypatch.setenv("SCRAPE_CONTRACTS_PARSE_WORKERS", "0")
    _shop(harness, site)
    site.set_page("/p/1", product_page("Dune", "BK-1", "$900.00"))
    result = harness.run("shop", "p1") if path == "single" else run_batch(harness, "shop", ["p1"])
    failed = failed_checks(result)["change_within_limit"]
    assert (failed["old"], failed["new"], failed["rule"]) == ("100.0", "900.0", "max_change_pct 50")
    assert "scrape-contracts review accept|reject shop p1 --reviewer NAME --reason WHY" in failed["review"]
    assert _check_partition(harness, "shop", "change_within_limit", "p1") == "FAILED"
    assert _paused(harness, "shop", "p1").startswith("review required: price changed 100.0 → 900.0")

    if path == "single":
        # materialised by hand while the review waits (the page is back to the accepted one): the new
        # materialisation, which the partition page shows first, still says the target is paused and why
        site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
        again = harness.run("shop", "p1")
        [latest] = [e.event_specific_data.materialization for e in again.get_asset_materialization_events()
                    if e.asset_key == accepted_key("shop")]
        assert latest.metadata["outcome"].value == "unchanged" and not latest.metadata["new_version"].value
        assert latest.metadata["paused"].value.startswith("review required: price changed 100.0 → 900.0")

    review = harness.review("shop", "p1", "accept", reviewer="alice", reason="publisher confirmed")
    [evaluation] = [e.event_specific_data for e in review.all_events
                    if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert (evaluation.check_name, evaluation.passed, evaluation.partition) == ("change_within_limit", True, "p1")
    assert evaluation.description == "accepted by alice: publisher confirmed"
    assert evaluation.metadata["reviewer"].value == "alice" and evaluation.metadata["new"].value == "900.0"
    assert _paused(harness, "shop", "p1") == "no"
    assert _check_partition(harness, "shop", "change_within_limit", "p1") == "SUCCEEDED"


@pytest.mark.parametrize("path", ["single", "batch"])
def test_rejected_candidate_is_not_materialised_and_its_checks_say_why(sqlite_harness: Harness, site,
                                                                       monkeypatch, path: str) -> None:
    harness = sqlite_harness
    monkeypatch.setenv("SCRAPE_CONTRACTS_PARSE_WORKERS", "0")
    _shop(harness, site)
    site.set_page("/p/1", product_page("Dune", "BK-9", "$100.00"))  # wrong product: sku_matches_expected
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    path = harness.contracts_dir / "shop.yaml"
    path.write_text(path.read_text().replace("key: p1", "key: p1\n    expected: {sku: BK-1}"))
    result = harness.run("shop", "p1") if path == "single" else run_batch(harness, "shop", ["p1"])
    assert materialized_keys(result) == set()
    evaluations = {e.event_specific_data.check_name: e.event_specific_data for e in result.all_events
                   if e.event_type_value == "ASSET_CHECK_EVALUATION"}
    assert not evaluations["sku_matches_expected"].passed
    assert all(evaluation.passed for name, evaluation in evaluations.items() if name != "sku_matches_expected")
    # the check's Partitions tab agrees with its list: failed on p1 (not "missing" for want of a new
    # materialisation of the rejected candidate)
    assert _check_partition(harness, "shop", "sku_matches_expected", "p1") == "FAILED"
    [rejected] = [o for o in _observations(harness, candidate_key("shop"), "p1") if o.metadata["stage"].value
                  == "rejected"]
    assert rejected.description.startswith("rejected: sku is 'BK-9'")


def test_every_stage_names_itself_and_a_heal_shows_old_and_new_selector(sqlite_harness: Harness, site) -> None:
    harness = sqlite_harness
    _shop(harness, site)
    site.set_page("/p/1", product_page("Dune", "BK-1", "$101.00", layout="renamed"))
    result = harness.run("shop", "p1")
    observations = _observations(harness, candidate_key("shop"), "p1")
    assert all(o.description and o.description.split(":")[0] == o.metadata["stage"].value for o in observations)
    [healing] = [o for o in observations if o.metadata["stage"].value == "healing"]
    [accepted] = [e.event_specific_data.materialization for e in result.get_asset_materialization_events()
                  if e.asset_key == accepted_key("shop")]
    for metadata in (healing.metadata, accepted.metadata):
        assert "**price**: `#price` → `strong[data-field=\"price\"]`" in metadata["healed_selectors"].value


@pytest.mark.parametrize("path", ["single", "batch"])
def test_accepted_data_has_a_row_count_and_the_contracts_columns(sqlite_harness: Harness, site, monkeypatch,
                                                                 path: str) -> None:
    harness = sqlite_harness
    monkeypatch.setenv("SCRAPE_CONTRACTS_PARSE_WORKERS", "0")
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    result = harness.run("shop", "p1") if path == "single" else run_batch(harness, "shop", ["p1"])
    assert result.success
    site.set_page("/p/1", product_page("Dune", "BK-1", "$900.00"))
    harness.run("shop", "p1")
    harness.review("shop", "p1", "accept", reviewer="alice", reason="publisher confirmed")
    materialisations = harness.instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=accepted_key("shop"), asset_partitions=["p1"]), limit=10).records
    assert len(materialisations) == 2  # the scrape's, and the reviewer's accept
    for record in materialisations:
        assert record.asset_materialization.metadata["dagster/row_count"].value == 1  # one record per target

    spec = harness.definitions().resolve_assets_def(accepted_key("shop")).specs_by_key[accepted_key("shop")]
    columns = {c.name: c for c in spec.metadata["dagster/column_schema"].columns}
    assert list(columns) == ["title", "sku", "price"]
    assert columns["price"].type == "price"
    assert columns["price"].constraints.other == ["min 0", "max_change_pct 50"]
    assert columns["sku"].description == "selector in the contract: #sku"
    assert not columns["title"].constraints.nullable
