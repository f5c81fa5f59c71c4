"""A password in a target URL is refused wherever a URL comes in (YAML, ``targets add``, targets file) and
never reaches a partition key, the store or the output (issue 10, item 9)."""

from __future__ import annotations

import dagster as dg
import pytest

from scrape_contracts.cli import main
from scrape_contracts.contract.loader import load_contracts
from scrape_contracts.contract.targets import partition_key_for_url
from scrape_contracts.defs.partitions import dynamic_partitions_name
from scrape_contracts_tests.conftest import Harness

SECRET = "hunter2-s3cret"
URL = f"https://scraper:{SECRET}@shop.example.com/p/1"


def test_a_contract_with_credentials_in_a_target_url_is_refused_without_echoing_them(
    sqlite_harness: Harness, capsys
) -> None:
    sqlite_harness.write_product_contract("shop", {"p1": URL})

    assert main(["--contracts-dir", str(sqlite_harness.contracts_dir), "validate"]) == 1

    out = capsys.readouterr().out
    assert "targets[0].url: target URL 'https://shop.example.com/p/1' carries a user name or password" in out
    assert "Authorization" in out and "${" in out
    assert SECRET not in out


@pytest.mark.parametrize("url", [URL, f"https://{SECRET}@shop.example.com/", f"ftp://u:{SECRET}@x/"])
def test_targets_add_refuses_credentials_and_stores_nothing(
    sqlite_harness: Harness, capsys, url: str
) -> None:
    sqlite_harness.write_product_contract("listing", dynamic=True)

    assert main(["--contracts-dir", str(sqlite_harness.contracts_dir), "targets", "add", "listing", url]) == 2

    captured = capsys.readouterr()
    assert "invalid target URL" in captured.err and SECRET not in captured.out + captured.err
    assert sqlite_harness.store.list_targets("listing") == {}
    assert sqlite_harness.instance.get_dynamic_partitions(dynamic_partitions_name("listing")) == []


def test_the_targets_file_sensor_skips_a_url_with_credentials(sqlite_harness: Harness) -> None:
    (sqlite_harness.contracts_dir / "urls.txt").write_text(URL + "\n")
    sqlite_harness.write_product_contract("listing", dynamic=True)
    path = sqlite_harness.contracts_dir / "listing.yaml"
    path.write_text(path.read_text().replace("dynamic: true", "dynamic: true\n  file: urls.txt"))
    defs = sqlite_harness.definitions()

    sensor = defs.resolve_sensor_def("listing_targets_sensor")
    with dg.build_sensor_context(instance=sqlite_harness.instance, resources=defs.resources) as context:
        result = sensor(context)

    reason = result.skip_reason.skip_message
    assert "carries a user name or password" in reason and SECRET not in reason
    assert sqlite_harness.store.list_targets("listing") == {}


def test_targets_list_never_prints_credentials_an_older_store_holds(sqlite_harness: Harness, capsys) -> None:
    sqlite_harness.write_product_contract("listing", dynamic=True)
    sqlite_harness.store.add_targets("listing", {"old-key": URL})  # written before URLs were checked

    assert main(["--contracts-dir", str(sqlite_harness.contracts_dir), "targets", "list", "listing"]) == 0

    assert capsys.readouterr().out.split() == ["old-key", "https://shop.example.com/p/1"]


def test_partition_keys_never_carry_credentials() -> None:
    key = partition_key_for_url(URL)
    assert SECRET not in key and "scraper" not in key
    assert key == partition_key_for_url("https://shop.example.com/p/1")
    # keys of URLs without credentials are unchanged (hash of the whole URL)
    assert partition_key_for_url("https://shop.example.com/p/1").startswith("shop.example.com_p_1-")


def test_contracts_without_credentials_still_load(tmp_path) -> None:
    (tmp_path / "c.yaml").write_text("name: shop\ntargets: [https://shop.example.com/p/1?user=a@b]\n"
                                     "fields: {title: {selector: h1}}\n")
    assert load_contracts(tmp_path).errors == []
