"""A scrape contract as an Open Data Contract Standard (ODCS v3.1.0) document (``scrape-contracts export odcs``).

The document describes the contract's table of accepted records, the PostgreSQL view
``accepted.<contract>`` (``contract/columns.py``, ``adapters/store/views.py``): its columns and their types
from the fields (and the JSON Schema), the rules a record must keep as ODCS quality rules (bounds as
``logicalTypeOptions``, expected values, a list contract's record counts and coverage as SQL on the view),
the owners as the team, the schedule as service levels, the view as the server. What ODCS has no words for
(change limits between two accepted versions, records dropped within tolerance, JSON Schema keywords without
a counterpart, the schedule's time zone) is kept as custom properties and listed in
``notExpressedInOdcs`` and ``description.limitations``: ``datacontract test`` does not check those,
scrape-contracts does, before anything is accepted.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from scrape_contracts.contract.columns import (
    LAST_SUCCESS, PG_TYPES, VIEW_SCHEMA, Column, ColumnType, sql_identifier, sql_literal, view_columns, view_name,
)
from scrape_contracts.contract.records import RECORD_KEY

if TYPE_CHECKING:
    from scrape_contracts.contract.model import Contract
    from scrape_contracts.contract.schedule import Schedule

API_VERSION = "v3.1.0"
# JSON Schema keywords of a field's property that ODCS says in logicalTypeOptions (the rest: notExpressedInOdcs)
_OPTIONS = {ColumnType.NUMBER: ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
            ColumnType.INTEGER: ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"),
            ColumnType.STRING: ("minLength", "maxLength", "pattern", "format")}
_PLAIN = {"type", "format", "description", "title", "enum", "minimum", "maximum", "exclusiveMinimum",
          "exclusiveMaximum", "multipleOf", "minLength", "maxLength", "pattern"}


@dataclass(frozen=True)
class Server:
    """Where the view is: the PostgreSQL project store (no credentials: datacontract-cli reads them from
    DATACONTRACT_POSTGRES_USERNAME / _PASSWORD)."""

    host: str
    port: int
    database: str


def odcs_document(contract: Contract, server: Server | None = None) -> dict[str, Any]:
    notes: list[str] = []
    schema_object = _schema_object(contract, notes)
    sla = _service_levels(contract.schedule, contract.name, notes) if contract.schedule else []
    if contract.schedule:
        schema_object["quality"].append(_freshness_rule(contract))
    doc: dict[str, Any] = {
        "apiVersion": API_VERSION, "kind": "DataContract", "id": f"scrape-contracts:{contract.name}",
        "name": contract.name,
        # what decides the data (fields, rules, schema): a new one whenever they change
        "version": f"0.0.0+{contract.fingerprint}", "status": "active",
        "description": {"purpose": contract.description or f"Accepted records of the scrape contract "
                                                            f"{contract.name}.",
                        "usage": "Read accepted data only: candidates that break a rule are quarantined or "
                                 "rejected by scrape-contracts and never reach this table."},
        "schema": [schema_object],
    }
    if contract.owners:
        doc["team"] = {"name": f"owners of {contract.name}",
                       "members": [{"username": owner, "role": "owner"} for owner in contract.owners]}
    if server is not None:
        doc["servers"] = [{"server": "production", "type": "postgres", "host": server.host, "port": server.port,
                           "database": server.database, "schema": VIEW_SCHEMA,
                           "description": "The project store: the view of accepted records."}]
    if sla:
        doc["slaProperties"] = sla
    if notes:
        doc["description"]["limitations"] = "Not expressed in ODCS, enforced by scrape-contracts before "\
                                            "acceptance: " + "; ".join(notes) + "."
    doc["customProperties"] = [
        {"property": "scrapeContractsFingerprint", "value": contract.fingerprint,
         "description": "Changes when the fields, rules or JSON Schema do."},
        {"property": "notExpressedInOdcs", "value": notes or ["nothing"],
         "description": "What the scrape contract says that this document cannot (datacontract test does not "
                        "check it)."}]
    return doc


def _schema_object(contract: Contract, notes: list[str]) -> dict[str, Any]:
    declared = contract.json_schema or {}
    declared_props = declared.get("properties", {}) if isinstance(declared.get("properties"), dict) else {}
    declared_required = set(declared.get("required") or [])
    properties = []
    for column in view_columns(contract):
        prop = _property(column, contract.is_list)
        if column.field:
            _field_details(contract, column, prop, declared_props.get(column.name), notes)
            if column.name in declared_required:
                prop["required"] = True
        properties.append(prop)
    quality = [_expected_rule(contract, name) for name in contract.fields if _targets_expect(contract, name)]
    obj: dict[str, Any] = {
        "name": contract.name, "physicalName": contract.name, "physicalType": "view",
        "description": f"Accepted records of {contract.name} (view {VIEW_SCHEMA}.{contract.name}).",
        "dataGranularityDescription": "One row per record of each target's latest accepted set."
        if contract.is_list else "One row per target: its latest accepted record.",
        "properties": properties, "quality": [q for q in quality if q],
    }
    custom: list[dict[str, Any]] = []
    if contract.is_list:
        obj["quality"] += _list_rules(contract, notes, custom)
    if contract.json_schema is not None:
        custom.append({"property": "jsonSchema", "value": contract.json_schema,
                       "description": "The JSON Schema every accepted record satisfied."})
        unmapped = sorted({k for k in declared if k not in ("$schema", "type", "properties", "required",
                                                            "additionalProperties", "title", "description")})
        if unmapped:
            notes.append(f"the JSON Schema's {', '.join(unmapped)} (kept whole as the custom property jsonSchema)")
    if custom:
        obj["customProperties"] = custom
    return obj


def _property(column: Column, is_list: bool) -> dict[str, Any]:
    prop: dict[str, Any] = {"name": column.name, "logicalType": column.type.value,
                            "physicalType": PG_TYPES[column.type], "required": column.required,
                            "description": column.description}
    key_position = {"partition": 1, RECORD_KEY: 2} if is_list else {"partition": 1}
    if column.name in key_position and not column.field:
        prop["primaryKey"], prop["primaryKeyPosition"] = True, key_position[column.name]
    return prop


def _field_details(contract: Contract, column: Column, prop: dict[str, Any], declared: Any,
                   notes: list[str]) -> None:
    spec = contract.fields[column.name]
    options: dict[str, Any] = {}
    if spec.json_format == "uri":
        options["format"] = "uri"
    if spec.rules.min is not None:
        options["minimum"] = spec.rules.min
    if spec.rules.max is not None:
        options["maximum"] = spec.rules.max
    quality = []
    if isinstance(declared, dict):
        options.update({k: declared[k] for k in _OPTIONS.get(column.type, ()) if k in declared})
        if "enum" in declared:
            quality.append({"type": "library", "metric": "invalidValues", "arguments": {"validValues":
                            list(declared["enum"])}, "mustBe": 0, "description": f"{column.name} is one of the "
                                                                                  "JSON Schema's enum"})
        other = sorted(set(declared) - _PLAIN - set(options))
        if other:
            notes.append(f"{column.name}: the JSON Schema's {', '.join(other)}")
    if options:
        prop["logicalTypeOptions"] = options
    custom = [{"property": "selector", "value": spec.selector, "description": "Where the value is read."}]
    if spec.pattern:
        custom.append({"property": "pattern", "value": spec.pattern, "description": "Regex applied to the "
                                                                                   "extracted text."})
    if spec.normalise:
        custom.append({"property": "normalise", "value": list(spec.normalise)})
    if spec.rules.max_change_pct is not None:
        custom.append({"property": "maxChangePct", "value": spec.rules.max_change_pct,
                       "description": "Largest change against the target's previous accepted value, in percent; "
                                      "a larger one waits for review."})
        notes.append(f"{column.name} changes by at most {spec.rules.max_change_pct:g}% between two accepted "
                     "versions of a target (custom property maxChangePct: ODCS checks one table, not a change)")
    prop["customProperties"] = custom
    if spec.rules.expected is not None and not _targets_expect(contract, column.name):
        quality.append({"type": "library", "metric": "invalidValues",
                        "arguments": {"validValues": [spec.rules.expected]}, "mustBe": 0,
                        "description": f"{column.name} is {spec.rules.expected!r} on every record"})
    if quality:
        prop["quality"] = quality


def _targets_expect(contract: Contract, field: str) -> bool:
    """Whether a listed target expects its own value of ``field`` (one SQL rule over all targets)."""
    return any(field in t.expected for t in contract.static_targets)


def _expected_rule(contract: Contract, field: str) -> dict[str, Any]:
    column = next(c for c in view_columns(contract) if c.name == field)
    pairs = [(t.partition_key, contract.expected_for(t.partition_key)[field]) for t in contract.static_targets
             if field in contract.expected_for(t.partition_key)]
    values = ", ".join(f"({sql_literal(key)}, {sql_literal(_text(value))})" for key, value in pairs)
    query = (f"SELECT COUNT(*) FROM {view_name(contract.name)} t JOIN (VALUES {values}) AS e(target, expected) "
             f"ON t.partition = e.target WHERE t.{sql_identifier(field)} IS DISTINCT FROM "
             f"CAST(e.expected AS {PG_TYPES[column.type]})")
    return {"type": "sql", "name": f"{field}_as_expected", "dimension": "accuracy", "query": query, "mustBe": 0,
            "description": f"Each target has the {field} it expects (its `expected:`): "
                           + ", ".join(f"{key}={value!r}" for key, value in pairs)}


def _text(value: Any) -> str:
    return json.dumps(value) if isinstance(value, bool) else str(value)


def _list_rules(contract: Contract, notes: list[str], custom: list[dict[str, Any]]) -> list[dict[str, Any]]:
    records = contract.records
    view = view_name(contract.name)
    bounds = f"COUNT(*) < {records.min_records}" + (
        f" OR COUNT(*) > {records.max_records}" if records.max_records is not None else "")
    rules = [{"type": "sql", "name": "record_count_within_bounds", "dimension": "completeness",
              "query": f"SELECT COUNT(*) FROM (SELECT partition FROM {view} GROUP BY partition "
                       f"HAVING {bounds}) AS outside", "mustBe": 0,
              "description": f"Every target has at least {records.min_records} record(s)"
                             + (f" and at most {records.max_records}" if records.max_records else "")}]
    for field, pct in records.coverage.items():
        rules.append({"type": "sql", "name": f"{field}_coverage", "dimension": "completeness",
                      "query": f"SELECT COUNT(*) FROM (SELECT partition FROM {view} GROUP BY partition HAVING "
                               f"100.0 * COUNT({sql_identifier(field)}) / COUNT(*) < {pct:g}) AS below",
                      "mustBe": 0, "description": f"{field} is on at least {pct:g}% of each target's records"})
    limits = {"maxRemovedPct": records.max_removed_pct, "maxAddedPct": records.max_added_pct,
              "maxChangedPct": records.max_changed_pct}
    said = [f"{name} {value:g}%" for name, value in limits.items() if value is not None]
    custom += [{"property": name, "value": value, "description": "Largest share (percent) of a target's last "
                "accepted records that may go, come or change at once; more waits for review."}
               for name, value in limits.items() if value is not None]
    if records.tolerance_pct:
        custom.append({"property": "tolerancePct", "value": records.tolerance_pct,
                       "description": "Share (percent) of a target's records that may break a rule; they are "
                                      "dropped, not accepted."})
    if said:
        notes.append("a target's set of records changes by at most " + ", ".join(said) + " between two accepted "
                     "versions (custom properties of the schema)")
    if records.tolerance_pct:
        notes.append(f"up to {records.tolerance_pct:g}% of a target's records may break a rule: they are "
                     "dropped before acceptance, so this table never has them")
    return rules


def _freshness_rule(contract: Contract) -> dict[str, Any]:
    minutes = 2 * _largest_gap_minutes(contract.schedule)
    return {"type": "sql", "name": "targets_fresh", "dimension": "timeliness",
            "query": f"SELECT COUNT(*) FROM (SELECT DISTINCT partition FROM {view_name(contract.name)} WHERE "
                     f"{LAST_SUCCESS} IS NULL OR {LAST_SUCCESS} < NOW() - INTERVAL '{minutes} minutes') AS stale",
            "mustBe": 0, "description": "Every target succeeded within two intervals of its schedule (the "
                                        "latest tick's run may still be going)"}


def _service_levels(schedule: Schedule, name: str, notes: list[str]) -> list[dict[str, Any]]:
    minutes = 2 * _largest_gap_minutes(schedule)
    unit, value = next((u, minutes // f) for u, f in (("d", 1440), ("h", 60), ("min", 1)) if minutes % f == 0)
    if schedule.timezone != "UTC":
        notes.append(f"the schedule's cron is in {schedule.timezone} (ODCS has no time zone for it)")
    return [{"property": "frequency", "value": schedule.cron, "scheduler": "cron", "schedule": schedule.cron,
             "description": f"Scraped on this schedule ({schedule.timezone})."},
            {"property": "freshness", "value": value, "unit": unit, "element": f"{name}.{LAST_SUCCESS}",
             "description": "The newest success is at most two schedule intervals old."}]


def _largest_gap_minutes(schedule: Schedule) -> int:
    """The longest time between two ticks over the next 1,000 (from a fixed date: the same document each
    time; daylight-saving changes included)."""
    from croniter import croniter

    start = dt.datetime(2025, 1, 1, tzinfo=ZoneInfo(schedule.timezone))
    ticks = croniter(schedule.cron, start)
    previous = ticks.get_next(dt.datetime).astimezone(dt.timezone.utc)
    largest = 0.0
    for _ in range(1000):
        # in UTC: two times of one zone subtract as wall-clock times, a daylight-saving hour lost
        tick = ticks.get_next(dt.datetime).astimezone(dt.timezone.utc)
        largest = max(largest, (tick - previous).total_seconds())
        previous = tick
    return max(1, int(-(-largest // 60)))
