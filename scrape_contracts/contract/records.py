"""The ``records:`` block of a list contract: many records per target, possibly across several pages.

With ``records:`` the contract's ``fields`` are read inside each element the item selector matches (one
element per record), the record key names a record across runs, and the set-level limits say how the
whole set may look and change. The selector of the items is versioned with the fields' (as ``@item``), so
a healed item selector is kept and shown like a healed field selector.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from scrape_contracts.contract.base import Strict, compiled

ITEM_SELECTOR = "@item"  # the item selector's name in selector versions (no field can be called that)
RECORD_KEY = "record_key"  # the column naming a record; no field of a list contract may use it


class Pagination(Strict):
    """How to reach the next pages of a target: a link to follow, or a URL with the page number in it."""

    next: str | None = Field(
        None, description="Selector of the next page's link, e.g. \"a[rel=next]::attr(href)\" (resolved "
                          "against the page's URL); pagination stops when it matches nothing.")
    url_template: str | None = Field(
        None, description="URL of page N, with {page} and optionally {url} (the target's URL), e.g. "
                          "\"{url}?page={page}\". The target's URL is the first page.")
    first_page: int = Field(1, ge=0, description="url_template: the number of the target's own page.")
    max_pages: int = Field(10, ge=1, le=500, description="Pages read at most per target, the first included.")

    @field_validator("next")
    @classmethod
    def _next_compiles(cls, value: str | None) -> str | None:
        return None if value is None else compiled(value)

    @field_validator("url_template")
    @classmethod
    def _template_has_page(cls, value: str | None) -> str | None:
        if value is not None:
            if "{page}" not in value:
                raise ValueError(f"url_template {value!r} has no {{page}}: write where the page number goes, "
                                 "e.g. \"{url}?page={page}\"")
            try:
                value.format(url="https://x.example/", page=2)
            except (KeyError, IndexError, ValueError) as exc:
                raise ValueError(f"url_template {value!r} may only use {{url}} and {{page}} ({exc})"
                                 ) from None
        return value

    @model_validator(mode="after")
    def _one_way(self) -> Pagination:
        if (self.next is None) == (self.url_template is None):
            raise ValueError("pagination needs exactly one of `next` (a selector of the next page's link) "
                             "or `url_template` (a URL with {page})")
        return self


class RecordsSpec(Strict):
    """``records:``: one record per element the item selector matches, on every page of the target."""

    item: str = Field(description="Selector of one element per record (CSS or XPath, no ::text/::attr); "
                                  "the fields' selectors are read inside it.")
    key: list[str] = Field(
        default_factory=list,
        description="Field(s) naming a record across runs; empty: a hash of the record's values.")
    pagination: Pagination | None = None
    min_records: int = Field(1, ge=0, description="Fewer records than this fails record_count_within_bounds.")
    max_records: int | None = Field(None, ge=1, description="More records than this fails it too.")
    coverage: dict[str, float] = Field(
        default_factory=dict,
        description="field → least share (percent) of records that must have it (field_coverage).")
    tolerance_pct: float = Field(
        0.0, ge=0, le=100,
        description="Share of records that may break the schema or a rule: they are dropped and counted; "
                    "more than this fails records_within_tolerance.")
    max_removed_pct: float | None = Field(
        30.0, gt=0, description="Largest share of the last accepted records that may disappear at once; more "
                                "sends the set to review (set_change_within_limit). null: no limit.")
    max_added_pct: float | None = Field(
        None, gt=0, description="The same for added records (vs the last set).")
    max_changed_pct: float | None = Field(None, gt=0, description="The same for changed records.")

    @field_validator("key", mode="before")
    @classmethod
    def _key_as_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("item")
    @classmethod
    def _item_is_element(cls, value: str) -> str:
        if "::text" in value or "::attr" in value:
            raise ValueError(f"item selector {value!r} must select elements (one per record), not text or an "
                             "attribute: drop ::text/::attr and read values in fields")
        return compiled(value)

    @field_validator("coverage")
    @classmethod
    def _coverage_is_percent(cls, value: dict[str, float]) -> dict[str, float]:
        for name, pct in value.items():
            if not 0 <= pct <= 100:
                raise ValueError(f"coverage of {name!r} is {pct:g}: give a percentage between 0 and 100")
        return value

    @model_validator(mode="after")
    def _bounds_ordered(self) -> RecordsSpec:
        if self.max_records is not None and self.max_records < self.min_records:
            raise ValueError(f"max_records ({self.max_records}) is below min_records ({self.min_records})")
        return self


def records_problems(records: RecordsSpec, fields: dict[str, Any]) -> list[str]:
    """What is wrong with ``records`` given the contract's fields (each problem says what to do)."""
    problems = []
    names = ", ".join(sorted(fields))
    for name in records.key:
        if name not in fields:
            problems.append(f"records.key names field {name!r}, which the contract does not have (fields: "
                            f"{names}); name a field, or leave key out to key records by a hash of their "
                            "values")
        elif not getattr(fields[name], "required", True):
            problems.append(f"records.key field {name!r} is optional: a key must be on every record, so make "
                            "it required (required: true)")
    for name in records.coverage:
        if name not in fields:
            problems.append(f"records.coverage names field {name!r}, which the contract does not have "
                            f"(fields: {names})")
    if RECORD_KEY in fields:
        problems.append(f"field name {RECORD_KEY!r} is reserved in a list contract (it is the column of the "
                        "record key): rename the field")
    return problems
