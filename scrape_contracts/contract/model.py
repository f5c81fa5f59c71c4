"""The pydantic model of a scrape contract.

A contract is data, not code: it is read from YAML, validated here in full (every mistake is reported in
one pass, with its location), and then turned into Dagster objects by ``scrape_contracts.defs``.

A contract extracts one record per target page (``fields``), or, with ``records:`` (contract/records.py),
one record per item on the target's pages: the field specs are written relative to a record root, so both
forms share ``FieldSpec`` and the engine; ``records:`` only changes which element is the root.

The parts of a contract have modules of their own: ``fields`` (FieldSpec, Rules), ``targets`` (Target,
DynamicTargets, partition keys), ``fetch`` (FetchSettings, BrowserSettings), ``records``, ``schedule``,
``activations``; ``base`` holds what they share (strict models, the selector and path checks).
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Collection
from typing import Any

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from scrape_contracts.contract.activations import Activation, activation_problems
from scrape_contracts.contract.base import Strict
from scrape_contracts.contract.discover import Discover
from scrape_contracts.contract.fetch import FetchSettings
from scrape_contracts.contract.fields import FieldSpec
from scrape_contracts.contract.records import ITEM_SELECTOR, RecordsSpec, records_problems
from scrape_contracts.contract.schedule import Canary, Schedule
from scrape_contracts.contract.targets import DynamicTargets, Target, target_problems

NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")


class Healing(Strict):
    enabled: bool = True
    budget: int = Field(3, ge=0, le=100, description="Heal attempts per partition before it is paused.")


class Contract(Strict):
    name: str
    description: str = ""
    owners: list[str] = Field(default_factory=list)
    targets: list[Target] | DynamicTargets
    discover: Discover | None = Field(
        None, description="Sitemaps and listing pages that scrape/C/targets reads for the contract's dynamic "
                          "targets (contract/discover.py); `targets: {dynamic: true}` is then the default.")
    fetch: FetchSettings = Field(default_factory=FetchSettings)
    fields: dict[str, FieldSpec] = Field(min_length=1)
    records: RecordsSpec | None = Field(
        None, description="A list contract: many records per target (fields are read inside each item), "
                          "optionally across pages; see contract/records.py.")
    json_schema: dict[str, Any] | None = Field(
        None, alias="schema", description="JSON Schema of one record; derived from fields when absent."
    )
    schedule: Schedule | None = None
    healing: Healing = Field(default_factory=Healing)
    batch_size: int = Field(
        2000, ge=1, le=20_000,
        description="Targets per batched run: `scrape-contracts run` and the schedule launch one run per batch. "
                    "Each run pays a few seconds to start and its own worker processes: on a small machine fewer, "
                    "larger runs are faster; lower it to spread a contract over several run workers.",
    )

    canary: Canary | None = Field(
        None, description="Every target is a canary: scraped on its own schedule, alerting after "
                          "failing_after failed or rejected scrapes in a row (contract/schedule.py).")
    activations: list[Activation] = Field(
        default_factory=list,
        description="Rules that send events to destinations (destinations.yaml) when accepted data changes "
                    "(`when:`) or trouble starts (`on:`); see contract/activations.py.")

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @model_validator(mode="after")
    def _activations_fit_fields(self) -> Contract:
        problems = activation_problems(self.activations, {n: spec.type for n, spec in self.fields.items()})
        if self.records is not None:
            problems += records_problems(self.records, dict(self.fields))
        else:
            problems += [f"activation {rule.name!r}: `record:` conditions are for list contracts (records:); "
                         "a single-record contract tests its fields with `field:`"
                         for rule in self.activations if rule.when is not None and rule.when.uses_records()]
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _canaries_complete(self) -> Contract:
        problems = []
        if self.canary is not None and self.canary.missing():
            problems.append(f"canary needs {' and '.join(self.canary.missing())} (e.g. canary: {{schedule: "
                            f"\"0 */4 * * *\", notify: [ops_slack]}})")
        for target in self.static_targets:
            if target.canary is True and self.canary is None:
                problems.append(f"target {target.partition_key!r}: `canary: true` takes its settings from the "
                                "contract's canary:, which is missing; write canary: {schedule: ..., notify: [...]} "
                                "on the target or on the contract")
            elif isinstance(target.canary, Canary) and target.canary.over(self.canary).missing():
                problems.append(f"target {target.partition_key!r}: its canary needs "
                                f"{' and '.join(target.canary.over(self.canary).missing())} (on the target, or on "
                                "the contract's canary: for every target)")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @field_validator("name")
    @classmethod
    def _name_is_identifier(cls, value: str) -> str:
        if not NAME_RE.match(value):
            raise ValueError(
                f"contract name {value!r} must be lower-case letters, digits and '_', starting with a letter"
            )
        return value

    @field_validator("targets", mode="before")
    @classmethod
    def _coerce_url_strings(cls, value: Any) -> Any:
        if isinstance(value, list):
            return [{"url": v} if isinstance(v, str) else v for v in value]
        return value

    @field_validator("fields")
    @classmethod
    def _field_names_are_identifiers(cls, value: dict[str, FieldSpec]) -> dict[str, FieldSpec]:
        for name in value:
            if not re.match(r"^[a-z_][a-z0-9_]*$", name):
                raise ValueError(f"field name {name!r} must be lower-case letters, digits and '_'")
        return value

    @field_validator("json_schema")
    @classmethod
    def _schema_is_valid(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            from scrape_contracts.engine.schema import schema_problems

            # every problem at once, and no $ref that would be downloaded at run time
            problems = schema_problems(value)
            if problems:
                raise ValueError(f"invalid JSON Schema: {'; '.join(problems)}")
        return value

    @model_validator(mode="wrap")
    @classmethod
    def _targets_fit_fields(cls, data: Any, handler: Any) -> Contract:
        """Checks across targets and fields, on the raw data: reported together with the errors of single
        fields (an "after" validator only runs once every field is valid), every problem at once."""
        if isinstance(data, dict) and data.get("discover") is not None and "targets" not in data:
            data = {**data, "targets": {"dynamic": True}}  # discovered targets are dynamic ones
        problems = target_problems(data) if isinstance(data, dict) else []
        discovering = isinstance(data, dict) and data.get("discover") is not None
        if discovering and isinstance(data.get("targets"), list):
            problems.append((("discover",), "adds targets at runtime, so the contract's targets must be "
                                            "dynamic: write `targets: {dynamic: true}` (or leave targets "
                                            "out)"))
        try:
            contract = handler(data)
        except ValidationError as exc:
            if not problems:
                raise
            raise _with_problems(cls.__name__, exc.errors(), problems) from None
        if problems:
            raise _with_problems(cls.__name__, [], problems)
        return contract

    @property
    def is_dynamic(self) -> bool:
        return isinstance(self.targets, DynamicTargets)

    @property
    def skips_unchanged(self) -> bool:
        """Sweeps leave out targets whose sitemap lastmod is not after their last success."""
        return self.discover is not None and self.discover.skip_unchanged

    @property
    def static_targets(self) -> list[Target]:
        return [] if isinstance(self.targets, DynamicTargets) else list(self.targets)

    def with_only(self, partitions: Collection[str]) -> Contract:
        """This contract with only the listed targets of its own (a dynamic contract as it is): what a batched
        run sends its worker processes, each a pickled copy, so that a run's cost does not grow with the
        targets of other runs (docs/performance.md). Not validated again: the targets kept were validated
        with the contract; nothing cached on this one (its fingerprint, the targets' expectations) is carried
        over, so what the copy works out is about its own targets."""
        if self.is_dynamic:
            return self
        keep = set(partitions)
        values = {name: getattr(self, name) for name in type(self).model_fields}
        values["targets"] = [t for t in self.targets if t.partition_key in keep]
        return type(self).model_construct(_fields_set=set(self.model_fields_set), **values)

    def record_schema(self) -> dict[str, Any]:
        """The JSON Schema a record must satisfy: the declared one, or one derived from the fields."""
        if self.json_schema is not None:
            return self.json_schema
        properties = {}
        for name, spec in self.fields.items():
            properties[name] = {"type": spec.json_type if spec.required else [spec.json_type, "null"]}
            if spec.json_format:
                properties[name]["format"] = spec.json_format
        return {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "type": "object",
            "properties": properties,
            "required": [name for name, spec in self.fields.items() if spec.required],
        }

    def expected_for(self, partition: str) -> dict[str, Any]:
        """Expected values for one target: field-level rules.expected, overridden per target."""
        expected = {n: s.rules.expected for n, s in self.fields.items() if s.rules.expected is not None}
        expected.update(self._expected_by_target.get(partition, {}))
        return expected

    @functools.cached_property
    def _expected_by_target(self) -> dict[str, dict[str, Any]]:
        # one pass over the targets: scanning them for every target made a 2,000-target batch quadratic
        merged: dict[str, dict[str, Any]] = {}
        for target in self.static_targets:
            if target.expected:
                merged.setdefault(target.partition_key, {}).update(target.expected)
        return merged

    def canary_of(self, target: Target) -> Canary | None:
        """The canary settings of a listed target (complete), or None when it is not a canary."""
        if target.canary is False:
            return None
        if target.canary is None or target.canary is True:
            return self.canary
        return target.canary.over(self.canary)

    def canary_for(self, partition: str) -> Canary | None:
        """The canary settings of a target by partition key (a dynamic target: the contract's)."""
        if self.is_dynamic:
            return self.canary
        return self.canaries_by_key.get(partition)

    @functools.cached_property
    def canaries_by_key(self) -> dict[str, Canary | None]:
        # read per outbox row and per target: one pass over the targets, not one per question
        return {t.partition_key: self.canary_of(t) for t in self.static_targets}

    @property
    def has_canaries(self) -> bool:
        return self.canary is not None or any(isinstance(t.canary, Canary) or t.canary is True
                                              for t in self.static_targets)

    def has_expected(self, field: str) -> bool:
        return self.fields[field].rules.expected is not None or any(
            field in t.expected for t in self.static_targets)

    @property
    def is_list(self) -> bool:
        """Many records per target (``records:``) rather than one."""
        return self.records is not None

    def selectors(self) -> dict[str, str]:
        selectors = {name: spec.selector for name, spec in self.fields.items()}
        if self.records is not None:
            selectors[ITEM_SELECTOR] = self.records.item
        return selectors

    @functools.cached_property
    def fingerprint(self) -> str:
        """What decides extraction, validation and gating: the fields (selectors, types, patterns, normalise,
        rules) and the schema; not the description, owners, targets, fetch settings or schedule. An accepted
        version remembers the fingerprint it was extracted under, and a page that did not change is only
        taken as unchanged under the same fingerprint (an edited contract re-extracts the stored page)."""
        decisive = {"fields": {name: spec.model_dump(mode="json") for name, spec in self.fields.items()},
                    "schema": self.json_schema}
        if self.records is not None:  # only then: single-record contracts keep the fingerprints they had
            decisive["records"] = self.records.model_dump(mode="json")
        return hashlib.sha256(json.dumps(decisive, sort_keys=True, default=str).encode("utf-8")).hexdigest()[:16]



def _with_problems(title: str, errors: list[Any], problems: list[tuple[tuple[str | int, ...], str]]
                   ) -> ValidationError:
    details: list[Any] = [{"type": e["type"], "loc": e["loc"], "input": e.get("input"),
                           **({"ctx": e["ctx"]} if "ctx" in e else {})} for e in errors]
    details += [{"type": "value_error", "loc": loc, "input": None, "ctx": {"error": ValueError(message)}}
                for loc, message in problems]
    return ValidationError.from_exception_data(title, details)
