"""A field of a record: its selector, type, pattern, normalisation and semantic rules."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from scrape_contracts.contract.base import Strict, compiled


class Rules(Strict):
    """Semantic rules for one field, enforced by blocking asset checks on the candidate."""

    expected: Any = Field(None, description="The value this field must have (e.g. the SKU of the page).")
    min: float | None = Field(None, description="Inclusive numeric lower bound.")
    max: float | None = Field(None, description="Inclusive numeric upper bound.")
    max_change_pct: float | None = Field(
        None, gt=0, description="Largest relative change against the last accepted value, in percent."
    )

    @model_validator(mode="after")
    def _bounds_ordered(self) -> Rules:
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"min ({self.min}) is greater than max ({self.max})")
        return self


ItemPickName = Literal["first", "last", "newest", "key"]


class Item(Strict):
    """Which item of a list a positional field means; the healer keeps that meaning when the list moves."""

    pick: ItemPickName = Field(description=(
        "first / last: the list's first or last item; newest: the item whose one date is the newest; "
        "key: the item holding `key` as the whole text of one of its elements."))
    key: str | None = Field(None, min_length=1, description="The text that names the item (pick: key).")

    @model_validator(mode="after")
    def _key_with_key(self) -> Item:
        if self.pick == "key" and self.key is None:
            raise ValueError("pick: key needs the key, e.g. item: {pick: key, key: EUR}")
        if self.pick != "key" and self.key is not None:
            raise ValueError(f"a key names the item only with pick: key, not pick: {self.pick}")
        return self


# date/datetime: ISO 8601 strings ("2024-03-05", "2024-03-05T14:30:00+01:00"); url: an absolute http(s) URL
FieldType = Literal["string", "number", "integer", "price", "boolean", "date", "datetime", "url"]
NormaliseStep = Literal["lower", "upper", "casefold", "digits_only"]


class FieldSpec(Strict):
    """How to extract and type one field of a record."""

    selector: str = Field(
        description=(
            "CSS (with parsel's ::text and ::attr(name)) or XPath (starts with '/', './' or '(')."
        )
    )
    type: FieldType = "string"
    required: bool = True
    pattern: str | None = Field(
        None, description="Regex applied to the extracted text; the first group (or whole match) is kept."
    )
    normalise: list[NormaliseStep] = Field(
        default_factory=list,
        description="Extra normalisation after whitespace is collapsed; also applied before diffing.",
    )
    rules: Rules = Field(default_factory=Rules)
    item: Item | None = Field(None, description=(
        "For a field read from one item of a list: which item it means (first, last, newest, or "
        "{pick: key, key: ...}); `item: first` is short for {pick: first}."))

    @field_validator("item", mode="before")
    @classmethod
    def _item_shorthand(cls, value: Any) -> Any:
        return {"pick": value} if isinstance(value, str) else value

    @field_validator("selector")
    @classmethod
    def _selector_compiles(cls, value: str) -> str:
        return compiled(value)

    @field_validator("pattern")
    @classmethod
    def _pattern_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            import regex  # the engine matches with ``regex`` (it can stop a match): check the same syntax

            try:
                regex.compile(value)
            except regex.error as exc:
                raise ValueError(f"invalid regular expression {value!r}: {exc}") from None
        return value

    @model_validator(mode="after")
    def _rules_fit_type(self) -> FieldSpec:
        numeric = self.type in ("number", "integer", "price")
        if not numeric and (self.rules.min is not None or self.rules.max is not None):
            raise ValueError(f"rules min/max need a numeric type (number, integer, price), not {self.type!r}")
        return self

    @property
    def json_type(self) -> str:
        return {"number": "number", "integer": "integer", "price": "number", "boolean": "boolean"}.get(
            self.type, "string")

    @property
    def json_format(self) -> str | None:
        """The JSON Schema ``format`` of a date, date-time or URL field."""
        return {"date": "date", "datetime": "date-time", "url": "uri"}.get(self.type)

