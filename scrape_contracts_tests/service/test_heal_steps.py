"""What the service tells the healer about a field comes from the contract, item rule included."""

from __future__ import annotations

from scrape_contracts.contract.fields import FieldSpec
from scrape_contracts.engine.heal import ItemPick, ItemRule
from scrape_contracts.service.heal_steps import heal_spec


def test_a_positional_fields_item_rule_reaches_the_healer() -> None:
    field = FieldSpec.model_validate({"selector": "ul.news li:first-child a::text", "item": "first"})
    spec = heal_spec("headline", field, field.selector, "Old news")
    assert spec.item == ItemRule(ItemPick.FIRST)
    keyed = FieldSpec.model_validate({"selector": "tr:nth-of-type(2) td.rate::text", "type": "number",
                                      "item": {"pick": "key", "key": "EUR"}, "rules": {"min": 0}})
    spec = heal_spec("eur", keyed, keyed.selector, 1.08)
    assert (spec.item, spec.minimum, spec.type) == (ItemRule(ItemPick.KEY, "EUR"), 0, "number")


def test_a_field_without_an_item_rule_has_none() -> None:
    field = FieldSpec.model_validate({"selector": "#price", "type": "price"})
    assert heal_spec("price", field, field.selector, 9.5).item is None
