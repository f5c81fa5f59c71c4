"""The ODCS document of a contract: what maps, and what is said not to (issue 26). datacontract-cli itself
reads these documents in service/test_odcs_datacontract.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from scrape_contracts.cli import main
from scrape_contracts.contract.loader import load_contracts
from scrape_contracts.contract.odcs import Server, odcs_document

REPO = Path(__file__).resolve().parents[2]


def _props(document: dict) -> dict[str, dict]:
    return {p["name"]: p for p in document["schema"][0]["properties"]}


def test_fields_rules_owners_and_schedule_map_and_a_change_limit_is_said_not_to() -> None:
    books = load_contracts(REPO / "contracts").by_name()["books"].contract
    doc = odcs_document(books, Server("db.internal", 5432, "scrape"))
    props = _props(doc)
    assert list(props) == ["partition", "url", "title", "sku", "price", "in_stock", "_version", "_accepted_at",
                           "_run_id", "_last_success_at"]
    assert props["partition"]["primaryKey"] and props["price"]["logicalType"] == "number"
    assert props["price"]["logicalTypeOptions"] == {"minimum": 0}
    assert props["in_stock"] | {"logicalType": "boolean", "required": True} == props["in_stock"]
    assert {"property": "maxChangePct", "value": 50} in [{k: c[k] for k in ("property", "value")}
                                                         for c in props["price"]["customProperties"]]
    assert any("price changes by at most 50%" in n for n in doc["customProperties"][1]["value"])
    assert "price changes by at most 50%" in doc["description"]["limitations"]
    # each target's expected SKU, in one rule over the view
    (expected,) = [q for q in doc["schema"][0]["quality"] if q["name"] == "sku_as_expected"]
    assert "('dune', 'BK-0001')" in expected["query"] and 'accepted."books"' in expected["query"]
    assert doc["team"]["members"] == [{"username": "data-team@example.com", "role": "owner"}]
    frequency, freshness = doc["slaProperties"]
    assert frequency["schedule"] == "0 6 * * *" and "Europe/Berlin" in frequency["description"]
    # daily at 06:00 Berlin: the longest interval is 25 h (the autumn clock change), two of them 50 h
    assert (freshness["value"], freshness["unit"], freshness["element"]) == (50, "h", "books._last_success_at")
    assert doc["servers"] == [{"server": "production", "type": "postgres", "host": "db.internal", "port": 5432,
                               "database": "scrape", "schema": "accepted",
                               "description": "The project store: the view of accepted records."}]
    assert "servers" not in odcs_document(books)


def test_a_new_required_field_changes_the_export(tmp_path: Path) -> None:
    contracts = tmp_path / "contracts"
    contracts.mkdir()
    source = (REPO / "contracts" / "books.yaml").read_text()
    (contracts / "books.yaml").write_text(source)
    before = odcs_document(load_contracts(contracts).by_name()["books"].contract)
    (contracts / "books.yaml").write_text(source.replace(
        "fields:\n", "fields:\n  isbn:\n    selector: \"#isbn\"\n    pattern: '(\\d{13})'\n", 1))
    after = odcs_document(load_contracts(contracts).by_name()["books"].contract)
    assert "isbn" not in _props(before)
    assert {"name": "isbn", "logicalType": "string", "required": True}.items() <= _props(after)["isbn"].items()
    assert after["version"] != before["version"]
    assert after["customProperties"][0]["value"] != before["customProperties"][0]["value"]
    # the rest is as it was
    assert {k: v for k, v in _props(after).items() if k != "isbn"} == _props(before)


def test_a_list_contract_keys_its_records_and_counts_them_per_target() -> None:
    reviews = load_contracts(REPO / "contracts").by_name()["reviews"].contract
    doc = odcs_document(reviews)
    props = _props(doc)
    assert (props["partition"]["primaryKeyPosition"], props["record_key"]["primaryKeyPosition"]) == (1, 2)
    assert props["date"]["logicalType"] == "date" and props["rating"]["logicalTypeOptions"] == {"minimum": 1,
                                                                                                "maximum": 5}
    rules = {q["name"]: q for q in doc["schema"][0]["quality"]}
    assert "HAVING COUNT(*) < 1" in rules["record_count_within_bounds"]["query"]
    assert "< 95) AS below" in rules["rating_coverage"]["query"]
    custom = {c["property"]: c["value"] for c in doc["schema"][0]["customProperties"]}
    assert custom == {"maxRemovedPct": 30, "tolerancePct": 5}
    notes = doc["customProperties"][1]["value"]
    assert any("up to 5% of a target's records may break a rule" in n for n in notes)


def test_a_json_schema_maps_what_odcs_can_say_and_names_the_rest(tmp_path: Path) -> None:
    contracts = tmp_path / "contracts"
    contracts.mkdir()
    (contracts / "shop.yaml").write_text("""
name: shop
targets: [https://shop.example.com/p/1]
fields:
  title: {selector: h1}
  size: {selector: .size}
schema:
  type: object
  properties:
    title: {type: string, maxLength: 80}
    size: {type: string, enum: [S, M, L], not: {const: XL}}
  required: [title, size]
  dependentRequired: {size: [title]}
""")
    doc = odcs_document(load_contracts(contracts).by_name()["shop"].contract)
    props = _props(doc)
    assert props["title"]["logicalTypeOptions"] == {"maxLength": 80}
    assert props["size"]["quality"][0]["arguments"] == {"validValues": ["S", "M", "L"]}
    notes = doc["customProperties"][1]["value"]
    assert "size: the JSON Schema's not" in notes
    assert any("dependentRequired" in n for n in notes)
    assert doc["schema"][0]["customProperties"][0]["property"] == "jsonSchema"


def test_export_odcs_on_the_sqlite_store_writes_the_document_and_says_there_is_no_server(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SCRAPE_CONTRACTS_DB_URL", raising=False)
    assert main(["--contracts-dir", str(REPO / "contracts"), "export", "odcs", "jobs"]) == 0
    out, err = capsys.readouterr()
    doc = yaml.safe_load(out)
    assert doc["apiVersion"] == "v3.1.0" and doc["name"] == "jobs" and "servers" not in doc
    assert "the project store is SQLite" in err
    assert not (tmp_path / "home" / "scrape_contracts.db").exists()  # a document needs no store
    assert main(["--contracts-dir", str(REPO / "contracts"), "export", "odcs", "job"]) == 1
    assert "no valid contract named 'job'" in capsys.readouterr().err
