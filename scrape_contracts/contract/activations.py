"""The ``activations:`` section of a contract: what to say, to whom, when accepted data changes or trouble starts.

A data rule looks at the change between a target's previous and new accepted record::

    activations:
      - name: price_drop
        when: {field: price, decreased_by_more_than: 10%}
        notify: [deals_webhook, deals_slack]
        payload: [title, price]
      - name: back_in_stock
        when:
          all:
            - {field: in_stock, changed_from: false, changed_to: true}
            - {field: price, below: 100}
        notify: [deals_webhook]

An operational rule routes trouble instead (``on: quarantined | budget_exhausted | paused | failing``)::

      - name: ops
        on: [quarantined, budget_exhausted, failing]
        notify: [ops_slack]

Destinations are declared once, beside the contracts (``destinations.yaml``); the loader checks that every
name here exists there.
"""

from __future__ import annotations

import re
from enum import Enum
from typing import Any

from pydantic import Field, field_validator, model_validator

from scrape_contracts.contract.base import Strict

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
_THRESHOLD_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(%?)\s*$")


class Operational(str, Enum):
    """Trouble that can be routed to destinations (see ``on:``)."""

    QUARANTINED = "quarantined"  # a candidate waits for review
    BUDGET_EXHAUSTED = "budget_exhausted"  # healing budget spent: the target is paused
    PAUSED = "paused"  # a target was paused (by a person, a review or the healer)
    FAILING = "failing"  # failed or rejected N times in a row (``failing_after``)
    RECOVERED = "recovered"  # succeeded again after a ``failing`` alert


class RecordEvent(str, Enum):
    """What happened to one record of a list target between two accepted sets."""

    ADDED = "added"
    REMOVED = "removed"
    CHANGED = "changed"


class Threshold(Strict):
    """``10%`` (relative to the previous value) or ``5`` (absolute, in the field's unit)."""

    amount: float
    percent: bool

    @classmethod
    def parse(cls, value: Any) -> Threshold:
        if isinstance(value, Threshold):
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise ValueError(f"a threshold is a number (absolute) or a percentage such as '10%', not {value!r}")
        match = _THRESHOLD_RE.match(str(value))
        if not match:
            raise ValueError(f"a threshold is a number (absolute) or a percentage such as '10%', not {value!r}")
        return cls(amount=float(match.group(1)), percent=bool(match.group(2)))

    def __str__(self) -> str:
        return f"{self.amount:g}{'%' if self.percent else ''}"


# tests on one field; those whose value may legitimately be null are told apart by "was it written"
_VALUE_TESTS = ("changed_from", "changed_to", "becomes", "stops_being")
_FLAG_TESTS = ("changed", "appears", "disappears")
_NUMBER_TESTS = ("increased_by_more_than", "decreased_by_more_than", "above", "below")


class When(Strict):
    """A condition: a group (``all`` / ``any`` of conditions) or tests on one ``field`` (all must hold)."""

    all: tuple[When, ...] | None = None
    any: tuple[When, ...] | None = None
    field: str | None = None
    record: RecordEvent | None = Field(
        None, description="list contracts: a record (by record key) was added, removed or changed; with "
                          "`field:` tests, they apply to that record")
    changed: bool | None = Field(None, description="true: the value changed (formatting-only changes do not count)")
    changed_from: Any = Field(None, description="the previous value was this (with changed_to: from A to B)")
    changed_to: Any = Field(None, description="the new value is this, and it changed")
    increased_by_more_than: Threshold | None = None
    decreased_by_more_than: Threshold | None = None
    above: float | None = Field(None, description="the new value is greater than this")
    below: float | None = Field(None, description="the new value is less than this")
    becomes: Any = Field(None, description="the value became equal to this (it was not before)")
    stops_being: Any = Field(None, description="the value was equal to this and is not any more")
    appears: bool | None = Field(None, description="true: the field had no value and has one now")
    disappears: bool | None = Field(None, description="true: the field had a value and has none now")

    @field_validator("increased_by_more_than", "decreased_by_more_than", mode="before")
    @classmethod
    def _threshold(cls, value: Any) -> Threshold | None:
        return None if value is None else Threshold.parse(value)

    @model_validator(mode="after")
    def _one_kind(self) -> When:
        groups = [k for k in ("all", "any") if getattr(self, k) is not None]
        tests = self.tests()
        subject = self.field is not None or self.record is not None
        if len(groups) + subject != 1:
            raise ValueError("a condition is either `all: [...]`, `any: [...]`, `field: NAME` with tests or "
                             "`record: added|removed|changed`")
        if groups and tests:
            raise ValueError(f"`{groups[0]}` groups conditions; put field tests inside it")
        if groups and not getattr(self, groups[0]):
            raise ValueError(f"`{groups[0]}` needs at least one condition")
        if self.field is not None and not tests:
            raise ValueError(f"say what to test on {self.field!r}: one of "
                             + ", ".join(_FLAG_TESTS + _VALUE_TESTS + _NUMBER_TESTS))
        for flag in _FLAG_TESTS:
            if getattr(self, flag) is False:
                raise ValueError(f"`{flag}: false` tests nothing; leave it out")
        return self

    def tests(self) -> list[str]:
        """The tests written on this condition, in a stable order."""
        written = self.model_fields_set
        return [t for t in _FLAG_TESTS + _VALUE_TESTS + _NUMBER_TESTS
                if (t in written if t in _VALUE_TESTS else getattr(self, t) is not None)]

    def uses_records(self) -> bool:
        if self.record is not None:
            return True
        return any(c.uses_records() for c in (self.all or self.any or ()))

    def fields(self) -> set[str]:
        if self.field is not None:
            return {self.field}
        return set().union(*(c.fields() for c in (self.all or self.any or ())))

    def numeric_fields(self) -> set[str]:
        if self.field is not None:
            return {self.field} if set(self.tests()) & set(_NUMBER_TESTS) else set()
        return set().union(*(c.numeric_fields() for c in (self.all or self.any or ())))


class Activation(Strict):
    """One rule: a data condition (``when``) or operational events (``on``), and where it goes."""

    name: str
    when: When | None = None
    on: tuple[Operational, ...] | None = None
    failing_after: int = Field(3, ge=1, le=100, description="for on: failing, consecutive failed or rejected runs")
    notify: tuple[str, ...] = Field(..., min_length=1, description="destination names from destinations.yaml")
    payload: tuple[str, ...] | None = Field(None, description="fields of the record to send; default: all")
    description: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _yaml_on_key(cls, data: Any) -> Any:
        # YAML 1.1 (PyYAML) reads an unquoted `on:` key as the boolean true
        if isinstance(data, dict) and True in data and "on" not in data:
            data = {("on" if k is True else k): v for k, v in data.items()}
        return data

    @field_validator("name")
    @classmethod
    def _name_is_identifier(cls, value: str) -> str:
        if not _NAME_RE.match(value):
            raise ValueError(f"activation name {value!r} must be lowercase letters, digits and _")
        return value

    @field_validator("on", mode="before")
    @classmethod
    def _on_list(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_trigger(self) -> Activation:
        if (self.when is None) == (self.on is None):
            raise ValueError("an activation has either `when:` (a change of the data) or `on:` (operational "
                             "events), not both and not neither")
        return self


def activation_problems(activations: list[Activation], field_types: dict[str, str]) -> list[str]:
    """What is wrong with the rules given the contract's fields (names, numeric tests on numbers, names unique)."""
    problems = []
    seen: set[str] = set()
    for rule in activations:
        if rule.name in seen:
            problems.append(f"activation {rule.name!r} is declared twice")
        seen.add(rule.name)
        used = (rule.when.fields() if rule.when else set()) | set(rule.payload or ())
        for name in sorted(used - set(field_types)):
            problems.append(f"activation {rule.name!r} names field {name!r}, which the contract does not have "
                            f"(fields: {', '.join(sorted(field_types))})")
        for name in sorted((rule.when.numeric_fields() if rule.when else set()) & set(field_types)):
            if field_types[name] not in ("number", "integer", "price"):
                problems.append(f"activation {rule.name!r} compares {name!r} as a number, but it is a "
                                f"{field_types[name]}")
    return problems
