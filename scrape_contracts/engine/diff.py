"""Diffing a candidate record against the last accepted one, after normalisation.

Formatting-only changes (whitespace, declared case-insensitivity, thousands separators, where the currency
symbol stands, a date-time given in another UTC offset) compare equal: values are compared as typed values,
strings after the field's normalisation.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from scrape_contracts.engine.extract import FieldLike, apply_normalise
from scrape_contracts.engine.select import normalise_space


@dataclass(frozen=True)
class FieldChange:
    field: str
    old: Any
    new: Any
    change_pct: float | None  # relative change for numbers, None otherwise

    def as_dict(self) -> dict[str, Any]:
        # not dataclasses.asdict: its recursive copy was a tenth of a batched run's own time (py-spy)
        return {"field": self.field, "old": self.old, "new": self.new, "change_pct": self.change_pct}


def comparable(value: Any, spec: FieldLike | None = None) -> Any:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return round(float(value), 6)
    if isinstance(value, str) and spec is not None and spec.type == "datetime":
        return _instant(value)
    if isinstance(value, str):
        text = normalise_space(value)
        return apply_normalise(text, spec.normalise) if spec is not None else text
    return value


def _instant(value: str) -> str:
    """An ISO date-time with an offset as the same moment in UTC; one without an offset as it is."""
    try:
        moment = dt.datetime.fromisoformat(value.strip())
    except ValueError:
        return normalise_space(value)
    return moment.astimezone(dt.timezone.utc).isoformat() if moment.tzinfo else moment.isoformat()


def change_pct(old: Any, new: Any) -> float | None:
    if isinstance(old, bool) or isinstance(new, bool):
        return None
    if not isinstance(old, (int, float)) or not isinstance(new, (int, float)):
        return None
    if old == 0:
        return 0.0 if new == 0 else float("inf")
    return abs(float(new) - float(old)) / abs(float(old)) * 100.0


def diff_records(old: Mapping[str, Any] | None, new: Mapping[str, Any],
                 fields: Mapping[str, FieldLike] | None = None) -> list[FieldChange]:
    """Field changes from ``old`` to ``new`` (every field is a change when there is no old record)."""
    changes = []
    for name in sorted(set(new) | set(old or {})):
        spec = (fields or {}).get(name)
        before = (old or {}).get(name)
        after = new.get(name)
        if old is not None and comparable(before, spec) == comparable(after, spec):
            continue
        changes.append(FieldChange(name, before, after, change_pct(before, after) if old is not None else None))
    return changes
