"""Which activation rules a change of accepted data fires (pure: records in, fired rules out).

Values are compared the way the diff compares them (``engine/diff.py``): typed, strings after the field's
normalisation, so a formatting-only change (``1,299.00`` → ``1299``, extra spaces) fires nothing. A target's
first accepted version fires no data rule: nothing changed, there was nothing before. A list target's rules
are tested on each record added, removed or changed (``fired_set_rules``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from scrape_contracts.engine.diff import comparable, diff_records
from scrape_contracts.engine.extract import FieldLike
from scrape_contracts.engine.lists import RECORD_KEY

if TYPE_CHECKING:  # the contract layer builds on the engine, not the other way round: types only
    from scrape_contracts.contract.activations import Activation, Threshold, When


@dataclass(frozen=True)
class Fired:
    """A data rule that holds for one change: where it goes, what it says and why."""

    rule: str
    destinations: tuple[str, ...]
    payload: dict[str, Any]
    reasons: tuple[str, ...]


def fired_rules(rules: list[Activation], old: Mapping[str, Any] | None, new: Mapping[str, Any],
                fields: Mapping[str, FieldLike]) -> list[Fired]:
    if old is None:
        return []
    fired = []
    for rule in rules:
        if rule.when is None:
            continue
        holds, reasons = _holds(rule.when, old, new, fields)
        if holds:
            wanted = rule.payload if rule.payload is not None else tuple(sorted(new))
            fired.append(Fired(rule.name, rule.notify, {k: new.get(k) for k in wanted}, tuple(reasons)))
    return fired


_SHOWN_RECORDS = 50  # records sent with one fired rule of a list target; the count is always whole


def fired_set_rules(rules: list[Activation], old: Sequence[Mapping[str, Any]] | None,
                    new: Sequence[Mapping[str, Any]], fields: Mapping[str, FieldLike]) -> list[Fired]:
    """The rules a change of a list target's accepted set fires: each condition is tested on every record
    added, removed or changed (by record key); a rule fires once for all the records it holds for."""
    if old is None:
        return []
    before = {r[RECORD_KEY]: r for r in old}
    after = {r[RECORD_KEY]: r for r in new}
    moved: list[tuple[str, str]] = []
    for key in [*after, *(k for k in before if k not in after)]:
        if key not in before:
            moved.append((key, "added"))
        elif key not in after:
            moved.append((key, "removed"))
        elif diff_records(_values(before[key]), _values(after[key]), fields):
            moved.append((key, "changed"))
    fired = []
    for rule in rules:
        if rule.when is None:
            continue
        keys, reasons = [], []
        for key, status in moved:
            holds, why = _holds(rule.when, before.get(key, {}), after.get(key, {}), fields, status)
            if holds:
                keys.append(key)
                reasons += [f"record {key}: {r}" for r in why]
        if keys:
            shown = [after.get(k) or before[k] for k in keys[:_SHOWN_RECORDS]]
            wanted = rule.payload
            records = [{k: r.get(k) for k in (wanted if wanted is not None else sorted(r))} for r in shown]
            fired.append(Fired(rule.name, rule.notify, {"count": len(keys), "records": records},
                               tuple(reasons[:_SHOWN_RECORDS])))
    return fired


def _values(record: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != RECORD_KEY}


def _holds(when: When, old: Mapping[str, Any], new: Mapping[str, Any], fields: Mapping[str, FieldLike],
           status: str | None = None) -> tuple[bool, list[str]]:
    if when.all is not None:
        results = [_holds(c, old, new, fields, status) for c in when.all]
        return all(ok for ok, _ in results), [r for ok, rs in results if ok for r in rs]
    if when.any is not None:
        results = [_holds(c, old, new, fields, status) for c in when.any]
        return any(ok for ok, _ in results), [r for ok, rs in results if ok for r in rs]
    reasons = []
    if when.record is not None:
        if status != when.record.value:
            return False, []
        reasons.append(f"{status}")
    if when.field is None:
        return True, reasons
    name = when.field
    before, after = old.get(name), new.get(name)
    spec = fields.get(name)
    for test in when.tests():
        ok, reason = _test(test, getattr(when, test), name, before, after, spec)
        if not ok:
            return False, []
        reasons.append(reason)
    return True, reasons


def _test(test: str, expected: Any, name: str, before: Any, after: Any, spec: FieldLike | None
          ) -> tuple[bool, str]:
    def same(a: Any, b: Any) -> bool:
        return comparable(a, spec) == comparable(b, spec)

    changed = not same(before, after)
    moved = f"{name} changed from {before!r} to {after!r}"
    if test == "changed":
        return changed, moved
    if test == "changed_from":
        return changed and same(before, expected), moved
    if test == "changed_to":
        return changed and same(after, expected), moved
    if test == "becomes":
        return same(after, expected) and not same(before, expected), f"{name} became {after!r} (was {before!r})"
    if test == "stops_being":
        return same(before, expected) and not same(after, expected), f"{name} is no longer {expected!r} ({after!r})"
    if test == "appears":
        return before is None and after is not None, f"{name} appeared: {after!r}"
    if test == "disappears":
        return before is not None and after is None, f"{name} disappeared (was {before!r})"
    if test in ("above", "below"):
        if not _number(after):
            return False, ""
        ok = after > expected if test == "above" else after < expected
        return ok, f"{name} is {after!r}, {test} {expected:g}"
    up = test == "increased_by_more_than"
    return _moved_by(expected, before, after, up=up, name=name)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _moved_by(threshold: Threshold, before: Any, after: Any, *, up: bool, name: str) -> tuple[bool, str]:
    if not (_number(before) and _number(after)):
        return False, ""
    delta = (after - before) if up else (before - after)
    if delta <= 0:
        return False, ""
    if threshold.percent:
        pct = float("inf") if before == 0 else delta / abs(before) * 100.0
        ok = pct > threshold.amount
        amount = f"{pct:.1f}%"
    else:
        ok = delta > threshold.amount
        amount = f"{delta:g}"
    word = "increased" if up else "decreased"
    return ok, f"{name} {word} by {amount} (from {before!r} to {after!r}; rule: more than {threshold})"
