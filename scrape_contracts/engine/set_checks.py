"""The checks of a record set, and its diff against the last accepted set, by record key.

Per record, the contract's schema and rules apply as for a single record; a record that breaks them is
dropped (and counted) while the broken share stays within the tolerance, and fails the set above it. On the
whole set: how many records, unique keys, field coverage, and how much changed at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from scrape_contracts.engine.diff import FieldChange, diff_records
from scrape_contracts.engine.limits import DEFAULT_LIMITS, Limits
from scrape_contracts.engine.lists import RECORD_KEY
from scrape_contracts.engine.validate import (
    CHANGE_CHECK, REQUIRED_CHECK, SCHEMA_CHECK, SET_CHANGE_CHECK, FieldRulesLike, Violation, validate_rules,
    validate_schema,
)

RECORD_COUNT_CHECK = "record_count_within_bounds"
KEYS_UNIQUE_CHECK = "record_keys_unique"
COVERAGE_CHECK = "field_coverage"
TOLERANCE_CHECK = "records_within_tolerance"


class SetLimitsLike(Protocol):
    """What the checks need of ``records:`` (``contract.records.RecordsSpec`` satisfies it)."""

    min_records: int
    max_records: int | None
    coverage: dict[str, float]
    tolerance_pct: float
    max_removed_pct: float | None
    max_added_pct: float | None
    max_changed_pct: float | None


def set_check_names(limits: SetLimitsLike, fields: Mapping[str, FieldRulesLike]) -> list[str]:
    """Every check a list contract gets, in a stable order."""
    names = [RECORD_COUNT_CHECK, KEYS_UNIQUE_CHECK, TOLERANCE_CHECK]
    if limits.coverage:
        names.append(COVERAGE_CHECK)
    if any(spec.rules.max_change_pct is not None for spec in fields.values()):
        names.append(CHANGE_CHECK)
    names.append(SET_CHANGE_CHECK)
    return names


@dataclass(frozen=True)
class SetDiff:
    """Records added, removed and changed by key, against the last accepted set."""

    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    previous_count: int = 0
    changes: tuple[FieldChange, ...] = ()  # one per record: field = its key, old/new = the records

    def counts(self) -> dict[str, int]:
        return {"added": len(self.added), "removed": len(self.removed), "changed": len(self.changed),
                "previous_records": self.previous_count}


def _values(record: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in record.items() if k != RECORD_KEY}


def diff_sets(old: Sequence[Mapping[str, Any]] | None, new: Sequence[Mapping[str, Any]],
              fields: Mapping[str, Any] | None = None) -> SetDiff:
    """``new`` against ``old`` by record key (every record is added when there is no old set)."""
    before = {r[RECORD_KEY]: r for r in old or []}
    after = {r[RECORD_KEY]: r for r in new}
    added = tuple(k for k in after if k not in before)
    removed = tuple(k for k in before if k not in after)
    changed = tuple(k for k in after
                    if k in before and diff_records(_values(before[k]), _values(after[k]), fields))
    changes = tuple([FieldChange(k, None, dict(after[k]), None) for k in added]
                    + [FieldChange(k, dict(before[k]), None, None) for k in removed]
                    + [FieldChange(k, dict(before[k]), dict(after[k]), None) for k in changed])
    return SetDiff(added, removed, changed, len(before), changes)


@dataclass(frozen=True)
class JudgedSet:
    records: tuple[dict[str, Any], ...]  # the records kept
    dropped: tuple[dict[str, Any], ...]  # record_key and reasons of each record dropped under the tolerance
    violations: tuple[Violation, ...]
    diff: SetDiff
    bad: int = 0  # records breaking a per-record rule (dropped, or failing the set above the tolerance)
    summary: dict[str, Any] = field(default_factory=dict)


def judge_set(records: Sequence[Mapping[str, Any]], fields: Mapping[str, FieldRulesLike],
              schema: Mapping[str, Any], limits: SetLimitsLike,
              previous: Sequence[Mapping[str, Any]] | None, *, already_dropped: int = 0,
              engine_limits: Limits = DEFAULT_LIMITS) -> JudgedSet:
    """Per-record rules (drop under the tolerance), then the set's checks and its diff against ``previous``.

    ``already_dropped``: records dropped when the set was first judged (judging a stored set again counts
    them towards the tolerance as before).
    """
    before = {r[RECORD_KEY]: r for r in previous or []}
    kept, dropped, review = [], [], []
    for record in records:
        key = record[RECORD_KEY]
        values = _values(record)
        found = validate_schema(values, schema, limits=engine_limits) + validate_rules(
            values, fields, _values(before[key]) if key in before else None)
        missing = {v.field for v in found if v.check == REQUIRED_CHECK}
        # a missing field also breaks its schema type: said once, as missing
        broken = [v for v in found
                  if v.check != CHANGE_CHECK and not (v.check == SCHEMA_CHECK and v.field in missing)]
        review += [Violation(v.check, v.field, v.rule, f"record {key}: {v.message}", v.new, v.old)
                   for v in found if v.check == CHANGE_CHECK]
        if broken:
            dropped.append({RECORD_KEY: key, "reasons": [v.message for v in broken]})
        else:
            kept.append(dict(record))
    total = len(records) + already_dropped
    bad = len(dropped) + already_dropped
    violations: list[Violation] = []
    if total and bad * 100 > limits.tolerance_pct * total:
        first = dropped[0] if dropped else {RECORD_KEY: "?", "reasons": ["dropped earlier"]}
        violations.append(Violation(
            TOLERANCE_CHECK, None, f"tolerance_pct {limits.tolerance_pct:g}",
            f"{bad} of {total} records ({bad * 100 / total:.1f}%) break the contract, more than the "
            f"tolerated {limits.tolerance_pct:g}% (first: record {first[RECORD_KEY]}: {'; '.join(first['reasons'])})",
            new={"bad": bad, "records": total, "dropped": dropped[:20]}))
        kept = [dict(r) for r in records]  # the set fails whole: nothing is dropped from it
    count = len(kept)
    if count < limits.min_records or (limits.max_records is not None and count > limits.max_records):
        bounds = f"{limits.min_records}..{limits.max_records if limits.max_records is not None else '∞'}"
        violations.append(Violation(RECORD_COUNT_CHECK, None, f"records {bounds}",
                                    f"{count} records, outside the bounds {bounds}", new=count))
    seen: dict[str, int] = {}
    for record in kept:
        seen[record[RECORD_KEY]] = seen.get(record[RECORD_KEY], 0) + 1
    duplicates = {k: n for k, n in seen.items() if n > 1}
    if duplicates:
        shown = ", ".join(f"{k!r} ×{n}" for k, n in list(duplicates.items())[:5])
        violations.append(Violation(KEYS_UNIQUE_CHECK, None, "unique keys",
                                    f"{len(duplicates)} record key(s) repeat: {shown}; make records.key name "
                                    "fields that identify a record", new=dict(list(duplicates.items())[:20])))
    for name, pct in limits.coverage.items():
        present = sum(1 for r in kept if r.get(name) is not None)
        share = present * 100 / count if count else 0.0
        if share < pct:
            violations.append(Violation(COVERAGE_CHECK, name, f"coverage {pct:g}%",
                                        f"{name} is on {present} of {count} records ({share:.1f}%), "
                                        f"fewer than {pct:g}%", new=round(share, 1), old=pct))
    violations += review
    diff = diff_sets(list(before.values()) if previous is not None else None, kept, fields)
    if previous is not None and before:
        for what, keys, limit in (("removed", diff.removed, limits.max_removed_pct),
                                  ("added", diff.added, limits.max_added_pct),
                                  ("changed", diff.changed, limits.max_changed_pct)):
            share = len(keys) * 100 / len(before)
            if limit is not None and share > limit:
                violations.append(Violation(
                    SET_CHANGE_CHECK, None, f"max_{what}_pct {limit:g}",
                    f"{len(keys)} of {len(before)} records {what} at once ({share:.1f}%), more than the "
                    f"allowed {limit:g}%: a person must review it", new=diff.counts(), old=len(before)))
    summary = {"records": count, "dropped": len(dropped) if not any(
        v.check == TOLERANCE_CHECK for v in violations) else 0, "bad": bad, **diff.counts()}
    return JudgedSet(tuple(kept), tuple(dropped), tuple(violations), diff, bad, summary)
