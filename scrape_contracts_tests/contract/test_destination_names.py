"""Destination names a contract notifies are checked against destinations.yaml when the contracts load."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from scrape_contracts.cli import main
from scrape_contracts.contract.loader import load_contracts

DESTINATIONS = """
destinations:
  deals_webhook: {type: webhook, url: "https://hooks.example.com/x", secret: "${DEALS_SECRET}"}
  ops_slack: {type: slack, url: "${SLACK_URL}"}
"""

SHOP = """
name: shop
targets:
  - {url: "https://shop.example.com/p/1", key: p1}
  - {url: "https://shop.example.com/p/2", key: p2, canary: {notify: [pager]}}
fields:
  price: {selector: "#price", type: price}
activations:
  - name: price_drop
    when: {field: price, decreased_by_more_than: 10%}
    notify: [deals_webhook, deals_hook]
canary:
  schedule: "0 */4 * * *"
  notify: [ops_slack]
"""

GOOD = """
name: books
targets: [https://books.example.com/1.html]
fields:
  title: {selector: h1}
activations:
  - name: anything
    when: {field: title, changed: true}
    notify: [deals_webhook]
"""


def _write(folder: Path, name: str, text: str) -> None:
    (folder / name).write_text(textwrap.dedent(text))


def test_an_unknown_destination_fails_its_contract_at_load_naming_it_and_the_known_ones(tmp_path: Path) -> None:
    _write(tmp_path, "destinations.yaml", DESTINATIONS)
    _write(tmp_path, "shop.yaml", SHOP)
    _write(tmp_path, "books.yaml", GOOD)
    result = load_contracts(tmp_path)
    assert sorted(result.by_name()) == ["books"]  # the others still load
    found = {(e.field, e.line): e.message for e in result.errors}
    known = "destinations.yaml declares deals_webhook, ops_slack"
    assert found == {
        ("activations[0].notify", 11): f"unknown destination 'deals_hook': {known}",
        ("targets[1].canary.notify", 5): f"unknown destination 'pager': {known}",
    }
    assert all(e.file == str(tmp_path / "shop.yaml") for e in result.errors)


def test_without_destinations_yaml_the_error_says_where_to_declare_them(tmp_path: Path) -> None:
    _write(tmp_path, "books.yaml", GOOD)
    (error,) = load_contracts(tmp_path).errors
    assert (error.field, error.line) == ("activations[0].notify", 9)
    assert error.message == ("unknown destination 'deals_webhook': there is no destinations.yaml beside the "
                             "contracts declaring any (see docs/activations.md#destinations)")


def test_a_broken_destinations_yaml_is_an_error_of_its_own(tmp_path: Path) -> None:
    _write(tmp_path, "books.yaml", GOOD)
    _write(tmp_path, "destinations.yaml", "destinations:\n  deals_webhook: {type: pager}\n")
    result = load_contracts(tmp_path)
    (error,) = result.errors
    assert error.file == str(tmp_path / "destinations.yaml") and "deals_webhook" in error.message
    assert sorted(result.by_name()) == ["books"]  # its names cannot be checked: reported, not fatal


def test_validate_prints_one_line_per_unknown_destination_and_exits_1(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path, "destinations.yaml", DESTINATIONS)
    _write(tmp_path, "shop.yaml", SHOP)
    assert main(["--contracts-dir", str(tmp_path), "validate"]) == 1
    captured = capsys.readouterr()
    out = captured.out + captured.err
    assert "Traceback" not in out
    errors = [line for line in out.splitlines() if "unknown destination" in line]
    assert len(errors) == 2 and all(f"{tmp_path / 'shop.yaml'}:" in line for line in errors)
    assert any("'deals_hook'" in line and "deals_webhook, ops_slack" in line for line in errors)
