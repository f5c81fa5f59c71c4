from __future__ import annotations

from scrape_contracts.contract.fields import FieldSpec
from scrape_contracts.engine.diff import diff_records
from scrape_contracts.engine.outcome import Outcome, decide_outcome
from scrape_contracts.engine.validate import validate_rules, validate_schema

FIELDS = {
    "title": FieldSpec(selector="h1", normalise=["lower"]),
    "sku": FieldSpec(selector="#sku"),
    "price": FieldSpec(selector="#p", type="price", rules={"min": 0, "max_change_pct": 50}),
}
SCHEMA = {"type": "object", "properties": {"price": {"type": "number", "maximum": 1000}},
          "required": ["price"]}


def test_schema_violations_are_structured() -> None:
    violations = validate_schema({"price": 5000.0}, SCHEMA)
    assert [(v.check, v.field, v.rule) for v in violations] == [("matches_schema", "price", "schema.maximum")]
    assert "5000" in violations[0].message


def test_rules_required_expected_bounds_change() -> None:
    found = validate_rules({"title": "Dune", "sku": "X-2", "price": -1.0}, FIELDS, previous={"price": 100.0},
                           expected={"sku": "X-1"})
    by_check = {v.check: v for v in found}
    assert set(by_check) == {"sku_matches_expected", "price_within_bounds", "change_within_limit"}
    assert by_check["sku_matches_expected"].old == "X-1" and by_check["sku_matches_expected"].new == "X-2"
    assert "below the minimum 0" in by_check["price_within_bounds"].message
    missing = validate_rules({"title": None, "sku": "X-1", "price": 1.0}, FIELDS)
    assert [(v.check, v.field) for v in missing] == [("required_fields_present", "title")]


def test_change_limit_110_ok_900_not() -> None:
    assert validate_rules({"title": "a", "sku": "s", "price": 110.0}, FIELDS, previous={"price": 100.0}) == []
    [violation] = validate_rules({"title": "a", "sku": "s", "price": 900.0}, FIELDS, previous={"price": 100.0})
    assert violation.check == "change_within_limit" and violation.old == 100.0 and violation.new == 900.0


def test_formatting_only_changes_are_unchanged() -> None:
    old = {"title": "The  Great Gatsby", "sku": "GG-1", "price": 1299.0}
    new = {"title": "the great gatsby ", "sku": "GG-1", "price": 1299.00}
    assert diff_records(old, new, FIELDS) == []
    assert decide_outcome([], diff_records(old, new, FIELDS), healed=False, has_previous=True) is Outcome.UNCHANGED
    [change] = diff_records(old, {**new, "price": 1300.0}, FIELDS)
    assert change.field == "price" and round(change.change_pct, 3) == 0.077


def test_outcomes() -> None:
    change_only = validate_rules({"title": "a", "sku": "s", "price": 900.0}, FIELDS, previous={"price": 100.0})
    assert decide_outcome(change_only, [], healed=False, has_previous=True) is Outcome.REVIEW_REQUIRED
    bad = validate_rules({"title": "a", "sku": "s", "price": -900.0}, FIELDS, previous={"price": 100.0})
    assert decide_outcome(bad, [], healed=False, has_previous=True) is Outcome.REJECTED
    assert decide_outcome([], [], healed=True, has_previous=True) is Outcome.HEALED
    assert decide_outcome([], [], healed=False, has_previous=False) is Outcome.VALID
