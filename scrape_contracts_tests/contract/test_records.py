"""The records: block of a list contract: a malformed one is reported with file, line, field and what to
do."""

from __future__ import annotations

import textwrap
from pathlib import Path

from scrape_contracts.contract.loader import load_contracts

BAD_RECORDS = """
name: listing
targets: [https://shop.example.com/list]
records:
  item: "li.result::text"
  key: [sku]
  coverage: {{price: 120, colour: 50}}
  min_records: 10
  max_records: 5
  pagination:
    next: "a.next::attr(href)"
    url_template: "https://shop.example.com/list?p=2"
  tolerence_pct: 5
fields:
  title: {{selector: h2}}
  price: {{selector: .price, type: price, required: false}}
  record_key: {{selector: .id}}
activations:
  - name: cheaper
    when: {{field: price, below: 10}}
    notify: [team]
"""


def test_malformed_records_block_gives_one_clear_message_per_mistake(tmp_path: Path) -> None:
    (tmp_path / "listing.yaml").write_text(textwrap.dedent(BAD_RECORDS.format()))
    result = load_contracts(tmp_path)
    assert not result.contracts
    messages = "\n".join(str(e) for e in result.errors)
    assert "listing.yaml:5: records.item:" in messages and "must select elements" in messages
    assert "records.coverage" in messages and "between 0 and 100" in messages
    assert "listing.yaml:12: records.pagination.url_template:" in messages and "has no {page}" in messages
    assert "listing.yaml:13: records.tolerence_pct: unknown field" in messages  # a typo is not ignored


def test_records_fields_must_exist_and_keys_be_required(tmp_path: Path) -> None:
    (tmp_path / "listing.yaml").write_text(textwrap.dedent("""
        name: listing
        targets: [https://shop.example.com/list]
        records:
          item: li.result
          key: [sku, price]
          coverage: {colour: 50}
        fields:
          title: {selector: h2}
          price: {selector: .price, type: price, required: false}
          record_key: {selector: .id}
        """))
    messages = "\n".join(str(e) for e in load_contracts(tmp_path).errors)
    assert "records.key names field 'sku', which the contract does not have" in messages
    assert "records.key field 'price' is optional" in messages and "required: true" in messages
    assert "records.coverage names field 'colour'" in messages

    assert "field name 'record_key' is reserved" in messages


def test_a_good_list_contract_loads_with_its_item_selector_versioned(tmp_path: Path) -> None:
    (tmp_path / "listing.yaml").write_text(textwrap.dedent("""
        name: listing
        targets: [https://shop.example.com/list]
        records:
          item: li.result
          key: sku
          pagination: {url_template: "{url}?page={page}", max_pages: 3}
        fields:
          sku: {selector: "::attr(data-sku)"}
          title: {selector: h2}
        """))
    result = load_contracts(tmp_path)
    assert not result.errors, result.errors
    contract = result.contracts[0].contract
    assert contract.is_list and contract.records.key == ["sku"]
    assert contract.selectors() == {"sku": "::attr(data-sku)", "title": "h2", "@item": "li.result"}


def test_pagination_needs_one_way_to_the_next_page(tmp_path: Path) -> None:
    (tmp_path / "listing.yaml").write_text(textwrap.dedent("""
        name: listing
        targets: [https://shop.example.com/list]
        records:
          item: li.result
          pagination: {next: "a.next::attr(href)", url_template: "{url}?page={page}"}
        fields:
          title: {selector: h2}
        """))
    (error,) = load_contracts(tmp_path).errors
    assert "listing.yaml:6: records.pagination: pagination needs exactly one of `next`" in str(error)


def test_record_conditions_are_for_list_contracts(tmp_path: Path) -> None:
    (tmp_path / "single.yaml").write_text(textwrap.dedent("""
        name: single
        targets: [https://shop.example.com/p/1]
        fields:
          title: {selector: h2}
        activations:
          - name: new_thing
            when: {record: added}
            notify: [team]
        """))
    (error,) = load_contracts(tmp_path).errors
    assert "activation 'new_thing': `record:` conditions are for list contracts (records:)" in str(error)
