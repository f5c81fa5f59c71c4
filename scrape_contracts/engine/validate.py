"""Validation of a record: JSON Schema plus the contract's semantic rules, as structured violations.

Each violation names its check (the asset check that reports it), the field, the rule, the old and new
value, and a message a person understands without reading code.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from referencing.exceptions import Unresolvable

from scrape_contracts.engine.diff import change_pct, comparable
from scrape_contracts.engine.limits import DEFAULT_LIMITS, Limits
from scrape_contracts.engine.schema import describe_unresolvable, record_validator


class RulesLike(Protocol):
    expected: Any
    min: float | None
    max: float | None
    max_change_pct: float | None


class FieldRulesLike(Protocol):
    required: bool
    rules: RulesLike


@dataclass(frozen=True)
class Violation:
    check: str  # asset check name: matches_schema, required_fields_present, <f>_matches_expected, ...
    field: str | None
    rule: str
    message: str
    new: Any = None
    old: Any = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def bounds_check_name(field: str) -> str:
    return f"{field}_within_bounds"


def expected_check_name(field: str) -> str:
    return f"{field}_matches_expected"


SCHEMA_CHECK = "matches_schema"
REQUIRED_CHECK = "required_fields_present"
CHANGE_CHECK = "change_within_limit"
SET_CHANGE_CHECK = "set_change_within_limit"  # list contracts: too many records added/removed/changed at once
# a failure of these sends the candidate to a person (quarantine); any other failure rejects it
REVIEW_CHECKS = frozenset({CHANGE_CHECK, SET_CHANGE_CHECK})


def validate_schema(record: Mapping[str, Any], schema: Mapping[str, Any], *,
                    limits: Limits = DEFAULT_LIMITS) -> list[Violation]:
    """Every schema error of ``record`` (not only the first), one violation each."""
    validator = record_validator(schema, limits.regex_timeout_s)
    try:
        errors = list(validator.iter_errors(dict(record)))
    except Unresolvable as exc:  # jsonschema wraps it in its own subclass
        # the loader refuses such schemas; a contract model built in code could still carry one
        ref = getattr(exc, "ref", "")
        return [Violation(SCHEMA_CHECK, None, "schema.$ref",
                          f"record: the schema's $ref {ref!r} {describe_unresolvable(exc)}")]
    violations = []
    for error in sorted(errors, key=lambda e: [str(p) for p in e.path]):
        field = str(error.path[0]) if error.path else None
        if error.validator == "required" and not error.path:
            continue  # reported once, per field, by required_fields_present
        violations.append(Violation(SCHEMA_CHECK, field, f"schema.{error.validator}",
                                    f"{field or 'record'}: {error.message}", new=error.instance if field else None))
    return violations


def validate_rules(record: Mapping[str, Any], fields: Mapping[str, FieldRulesLike],
                   previous: Mapping[str, Any] | None = None,
                   expected: Mapping[str, Any] | None = None) -> list[Violation]:
    """Required, expected, min/max and max_change_pct (against ``previous``, the last accepted record).

    ``expected`` (field → value) overrides the fields' ``rules.expected``: targets carry their own identity.
    """
    violations = []
    for name, spec in fields.items():
        value = record.get(name)
        rules = spec.rules
        want = (expected or {}).get(name, rules.expected)
        if value is None:
            if spec.required:
                violations.append(Violation(REQUIRED_CHECK, name, "required",
                                            f"{name} is required but was not found on the page"))
            continue
        if want is not None and comparable(value, spec) != comparable(want, spec):
            violations.append(Violation(expected_check_name(name), name, f"expected == {want!r}",
                                        f"{name} is {value!r}, the contract expects {want!r}",
                                        new=value, old=want))
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        if numeric and rules.min is not None and value < rules.min:
            violations.append(Violation(bounds_check_name(name), name, f"min {rules.min:g}",
                                        f"{name} is {value:g}, below the minimum {rules.min:g}", new=value))
        if numeric and rules.max is not None and value > rules.max:
            violations.append(Violation(bounds_check_name(name), name, f"max {rules.max:g}",
                                        f"{name} is {value:g}, above the maximum {rules.max:g}", new=value))
        old = (previous or {}).get(name)
        if rules.max_change_pct is not None and old is not None:
            pct = change_pct(old, value)
            if pct is not None and (math.isinf(pct) or pct > rules.max_change_pct):
                violations.append(Violation(
                    CHANGE_CHECK, name, f"max_change_pct {rules.max_change_pct:g}",
                    f"{name} changed {old!r} → {value!r} ({'∞' if math.isinf(pct) else f'{pct:.1f}'}%), "
                    f"more than the allowed {rules.max_change_pct:g}%: a person must review it",
                    new=value, old=old,
                ))
    return violations


def check_names(fields: Mapping[str, FieldRulesLike], expected_fields: Iterable[str] = ()) -> list[str]:
    """Every check a contract gets, in a stable order."""
    names = [SCHEMA_CHECK, REQUIRED_CHECK]
    for name, spec in fields.items():
        if spec.rules.expected is not None or name in set(expected_fields):
            names.append(expected_check_name(name))
        if spec.rules.min is not None or spec.rules.max is not None:
            names.append(bounds_check_name(name))
    if any(spec.rules.max_change_pct is not None for spec in fields.values()):
        names.append(CHANGE_CHECK)
    return names
