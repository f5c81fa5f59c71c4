"""Materialisations on a real instance (SQLite and PostgreSQL) against a real HTTP site on 127.0.0.1."""

from __future__ import annotations

import dagster as dg
import pandas as pd
import pytest

from scrape_contracts import read_accepted
from scrape_contracts.service.accepted import AcceptedDataError
from scrape_contracts.cli import main
from scrape_contracts.contract.loader import load_contracts
from scrape_contracts.defs.assets import build_contract_assets
from scrape_contracts.defs.checks import build_contract_checks
from scrape_contracts.defs.io_managers import default_resources
from scrape_contracts.defs.names import accepted_key, candidate_key
from scrape_contracts.defs.partitions import dynamic_partitions_name
from scrape_contracts_tests.conftest import Harness, failed_checks, failure_text, materialized_keys, product_page


def test_static_contract_materialises_from_http(harness: Harness, site) -> None:
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    site.set_page("/p/2", product_page("Emma", "BK-2", "€ 12,50"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1"), "p2": site.url("/p/2")})
    loaded = load_contracts(harness.contracts_dir).by_name()["shop"]
    built = build_contract_assets(loaded)
    result = dg.materialize([built.candidate, built.accepted, *build_contract_checks(loaded)], partition_key="p1",
                            instance=harness.instance, resources=default_resources())
    assert result.success
    assert materialized_keys(result) == {"scrape/shop/candidate", "scrape/shop"}
    assert harness.accepted("shop", "p1") == {"title": "Dune", "sku": "BK-1", "price": 100.0}
    assert harness.accepted("shop", "p2") is None  # only the requested partition ran
    assert len(site.requests_to("/p/1")) == 1
    # each stage is an event of the run, on the candidate asset
    stages = [r.asset_observation.metadata["stage"].value for r in harness.instance.fetch_observations(
        dg.AssetRecordsFilter(asset_key=candidate_key("shop"), asset_partitions=["p1"]), limit=100).records]
    assert {"fetched", "extracted"} <= set(stages)


def test_schema_violation_is_rejected_and_keeps_previous_version(harness: Harness, site) -> None:
    site.set_page("/p/1", product_page(price="$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    assert harness.run("shop", "p1").success
    site.set_page("/p/1", product_page(price="$-3.00"))  # impossible: price_within_bounds fails
    result = harness.run("shop", "p1")
    # rejected: its failed checks say why; neither the candidate nor scrape/shop is materialised, so the UI
    # shows neither a green candidate nor a failed partition of the data still served
    assert materialized_keys(result) == set()
    # and the run fails, as a quarantined one does: run-failure alerts fire for rejected data too
    assert not result.success and "rejected shop/p1" in failure_text(result)
    failed = failed_checks(result)
    assert {"price_within_bounds", "change_within_limit"} == set(failed)  # -3 is also a -103% change
    assert failed["price_within_bounds"]["field"] == "price"
    assert "below the minimum 0" in failed["price_within_bounds"]["message"]
    assert harness.accepted("shop", "p1")["price"] == 100.0
    assert read_accepted("shop", db_url=harness.backend.db_url)["price"].tolist() == [100.0]


def test_dynamic_targets_added_at_runtime(harness: Harness, site, capsys) -> None:
    site.set_page("/job/1", product_page("Job one", "J-1", "$10"))
    harness.write_product_contract("listing", dynamic=True)
    url = site.url("/job/1")
    assert main(["--contracts-dir", str(harness.contracts_dir), "targets", "add", "listing", url]) == 0
    [key] = harness.instance.get_dynamic_partitions(dynamic_partitions_name("listing"))
    assert key in capsys.readouterr().out
    # adding the same URL again is a no-op, a bad URL a clear error
    assert main(["--contracts-dir", str(harness.contracts_dir), "targets", "add", "listing", url]) == 0
    assert main(["--contracts-dir", str(harness.contracts_dir), "targets", "add", "listing", "not a url"]) == 2
    assert "invalid target URL" in capsys.readouterr().err
    assert harness.instance.get_dynamic_partitions(dynamic_partitions_name("listing")) == [key]
    assert main(["--contracts-dir", str(harness.contracts_dir), "targets", "list", "listing"]) == 0
    assert capsys.readouterr().out.split() == [key, url]
    assert harness.run("listing", key).success
    assert harness.accepted("listing", key) == {"title": "Job one", "sku": "J-1", "price": 10.0}


def test_targets_file_sensor_adds_partitions(harness: Harness, site, tmp_path) -> None:
    targets = tmp_path / "targets.txt"
    targets.write_text(f"# comment\n{site.url('/a')}\n{site.url('/b')}\n")
    harness.write_product_contract("listing", dynamic=True)
    path = harness.contracts_dir / "listing.yaml"
    path.write_text(path.read_text().replace("dynamic: true", f"dynamic: true\n  file: {targets}"))
    defs = harness.definitions()
    sensor = defs.resolve_sensor_def("listing_targets_sensor")
    with dg.build_sensor_context(instance=harness.instance, resources=defs.resources) as context:
        result = sensor(context)
    [request] = result.dynamic_partitions_requests
    assert len(request.partition_keys) == 2
    harness.instance.add_dynamic_partitions(request.partitions_def_name, request.partition_keys)
    with dg.build_sensor_context(instance=harness.instance, resources=defs.resources) as context:
        assert sensor(context).skip_reason.skip_message.startswith("no new targets")
    assert sorted(harness.store.list_targets("listing").values()) == [site.url("/a"), site.url("/b")]


def test_downstream_asset_reads_accepted_dataframe(harness: Harness, site) -> None:
    for n in (1, 2):
        site.set_page(f"/p/{n}", product_page(f"Book {n}", f"BK-{n}", f"${n * 10}.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1"), "p2": site.url("/p/2")})
    for key in ("p1", "p2"):
        assert harness.run("shop", key).success

    seen: dict[str, object] = {}

    @dg.asset(ins={"shop": dg.AssetIn(key=accepted_key("shop"))})
    def price_report(shop: pd.DataFrame) -> float:
        seen["frame"] = shop
        return float(shop["price"].sum())

    shop_asset = build_contract_assets(load_contracts(harness.contracts_dir).by_name()["shop"]).accepted
    result = dg.materialize([price_report, shop_asset.to_source_asset()], instance=harness.instance,
                            resources=default_resources())
    assert result.success
    frame = seen["frame"]
    assert sorted(frame["partition"]) == ["p1", "p2"]
    assert result.output_for_node("price_report") == 30.0

    @dg.asset(ins={"shop": dg.AssetIn(key=accepted_key("shop"))}, partitions_def=shop_asset.partitions_def)
    def per_page(shop: dict) -> str:
        return shop["title"]

    result = dg.materialize([per_page, shop_asset.to_source_asset()], instance=harness.instance,
                            resources=default_resources(), partition_key="p2")
    assert result.output_for_node("per_page") == "Book 2"


def test_read_accepted_outside_dagster(harness: Harness, site) -> None:
    site.set_page("/p/1", product_page("Dune", "BK-1", "$100.00"))
    harness.write_product_contract("shop", {"p1": site.url("/p/1")})
    assert harness.run("shop", "p1").success
    frame = read_accepted("shop", db_url=harness.backend.db_url)
    assert frame.loc[0, ["partition", "title", "sku", "price", "_version"]].tolist() == ["p1", "Dune", "BK-1",
                                                                                         100.0, 1]
    assert read_accepted("shop")["title"].tolist() == ["Dune"]  # default: SCRAPE_CONTRACTS_DB_URL
    with pytest.raises(AcceptedDataError, match="no contract 'nothing'"):
        read_accepted("nothing", db_url=harness.backend.db_url)
