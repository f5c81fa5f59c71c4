"""Activation rules: which changes of accepted data fire which rule (pure: no Dagster, no HTTP)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from scrape_contracts.contract.activations import Activation
from scrape_contracts.contract.model import Contract
from scrape_contracts.engine.activations import fired_rules

CONTRACT = {
    "name": "shop",
    "targets": ["http://127.0.0.1:9/p/1"],
    "fields": {
        "title": {"selector": "h1"},
        "price": {"selector": ".price", "type": "price"},
        "in_stock": {"selector": ".stock", "type": "boolean", "required": False},
        "badge": {"selector": ".badge", "required": False, "normalise": ["casefold"]},
    },
}


def _contract(activations: list[dict]) -> Contract:
    return Contract.model_validate({**CONTRACT, "activations": activations})


def _fired(activations: list[dict], old: dict | None, new: dict) -> list[str]:
    contract = _contract(activations)
    return [f.rule for f in fired_rules(contract.activations, old, new, contract.fields)]


OLD = {"title": "Kettle", "price": 100.0, "in_stock": False, "badge": "New"}


@pytest.mark.parametrize(("when", "new", "fires"), [
    ({"field": "price", "decreased_by_more_than": "10%"}, {"price": 88.0}, True),
    ({"field": "price", "decreased_by_more_than": "10%"}, {"price": 91.0}, False),
    ({"field": "price", "decreased_by_more_than": "10%"}, {"price": 120.0}, False),
    ({"field": "price", "increased_by_more_than": 15}, {"price": 116.0}, True),
    ({"field": "price", "increased_by_more_than": 15}, {"price": 114.0}, False),
    ({"field": "in_stock", "changed_from": False, "changed_to": True}, {"in_stock": True}, True),
    ({"field": "in_stock", "changed_from": True, "changed_to": False}, {"in_stock": True}, False),
    ({"field": "in_stock", "becomes": True}, {"in_stock": True}, True),
    ({"field": "in_stock", "stops_being": False}, {"in_stock": None}, True),
    ({"field": "badge", "disappears": True}, {"badge": None}, True),
    ({"field": "badge", "changed": True}, {"badge": "  NEW "}, False),  # formatting only (casefold, spaces)
    ({"field": "badge", "changed": True}, {"badge": "Sale"}, True),
    ({"field": "title", "changed": True}, {}, False),
    ({"all": [{"field": "in_stock", "becomes": True}, {"field": "price", "below": 90}]},
     {"in_stock": True, "price": 95.0}, False),
    ({"any": [{"field": "in_stock", "becomes": True}, {"field": "price", "below": 90}]},
     {"in_stock": True, "price": 95.0}, True),
])
def test_a_rule_fires_exactly_when_its_condition_holds(when: dict, new: dict, fires: bool) -> None:
    assert _fired([{"name": "r", "when": when, "notify": ["hook"]}], OLD, {**OLD, **new}) == (["r"] if fires else [])


def test_a_fired_rule_says_why_and_sends_only_its_payload_fields() -> None:
    contract = _contract([{"name": "price_drop", "when": {"field": "price", "decreased_by_more_than": "10%"},
                           "notify": ["hook", "slack"], "payload": ["title", "price"]}])
    (fired,) = fired_rules(contract.activations, OLD, {**OLD, "price": 88.0}, contract.fields)
    assert fired.destinations == ("hook", "slack") and fired.payload == {"title": "Kettle", "price": 88.0}
    assert fired.reasons == ("price decreased by 12.0% (from 100.0 to 88.0; rule: more than 10%)",)


def test_a_first_accepted_version_fires_no_data_rule() -> None:
    assert _fired([{"name": "r", "when": {"field": "title", "appears": True}, "notify": ["hook"]}], None, OLD) == []


@pytest.mark.parametrize(("rule", "message"), [
    ({"name": "r", "when": {"field": "colour", "changed": True}, "notify": ["h"]}, "names field 'colour'"),
    ({"name": "r", "when": {"field": "title", "decreased_by_more_than": "5%"}, "notify": ["h"]}, "as a number"),
    ({"name": "r", "when": {"field": "title"}, "notify": ["h"]}, "say what to test"),
    ({"name": "r", "when": {"field": "price", "decreased_by_more_than": "ten"}, "notify": ["h"]}, "percentage"),
    ({"name": "r", "notify": ["h"]}, "either `when:`"),
    ({"name": "r", "when": {"all": []}, "notify": ["h"]}, "at least one condition"),
    ({"name": "r", "on": "exploded", "notify": ["h"]}, "quarantined"),
    ({"name": "r", "when": {"field": "price", "changed": True}, "notify": []}, "at least 1"),
])
def test_a_wrong_rule_is_refused_with_what_to_fix(rule: dict, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        _contract([rule])


def test_operational_rules_parse() -> None:
    (rule,) = _contract([{"name": "ops", "on": ["quarantined", "failing"], "failing_after": 3,
                          "notify": ["slack"]}]).activations
    assert isinstance(rule, Activation) and [o.value for o in rule.on or ()] == ["quarantined", "failing"]
