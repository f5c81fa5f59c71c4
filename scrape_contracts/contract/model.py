"""The pydantic model of a scrape contract.

A contract is data, not code: it is read from YAML, validated here in full (every mistake is reported in
one pass, with its location), and then turned into Dagster objects by ``scrape_contracts.defs``.

A contract extracts one record per target page (``fields``), or, with ``records:`` (contract/records.py),
one record per item on the target's pages: the field specs are written relative to a record root, so both
forms share ``FieldSpec`` and the engine; ``records:`` only changes which element is the root.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import (
    BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator,
)

from scrape_contracts.contract.activations import Activation, activation_problems
from scrape_contracts.contract.paths import confined_problem
from scrape_contracts.contract.records import ITEM_SELECTOR, RecordsSpec, records_problems
from scrape_contracts.contract.schedule import Canary, Schedule
from scrape_contracts.engine.select import SelectorError, compile_selector

NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
PARTITION_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class _Strict(BaseModel):
    # unknown keys are mistakes (a typo'd "selectr" must not be silently ignored)
    model_config = ConfigDict(extra="forbid", frozen=True)


class Rules(_Strict):
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


# date/datetime: ISO 8601 strings ("2024-03-05", "2024-03-05T14:30:00+01:00"); url: an absolute http(s) URL
FieldType = Literal["string", "number", "integer", "price", "boolean", "date", "datetime", "url"]
NormaliseStep = Literal["lower", "upper", "casefold", "digits_only"]


class FieldSpec(_Strict):
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

    @field_validator("selector")
    @classmethod
    def _selector_compiles(cls, value: str) -> str:
        try:
            compile_selector(value)
        except SelectorError as exc:
            raise ValueError(str(exc)) from None
        return value

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


def _confined(setting: str, value: str | None, info: ValidationInfo) -> str | None:
    # the loader passes the contract's folder; a contract built in code has no folder to be confined to
    contract_dir = (info.context or {}).get("contract_dir")
    if value is not None and contract_dir is not None:
        problem = confined_problem(setting, value, contract_dir)
        if problem:
            raise ValueError(problem)
    return value


class Target(_Strict):
    """One page of a contract; it is one Dagster partition."""

    url: str
    key: str | None = Field(None, description="Partition key; derived from the URL when absent.")
    expected: dict[str, Any] = Field(
        default_factory=dict, description="Values this page must have (e.g. its SKU): field → value."
    )
    canary: Canary | bool | None = Field(
        None, description="A canary with its own schedule ({schedule, notify, failing_after}; what it leaves "
                          "out comes from the contract's canary:), true, or false to leave it out.")

    @field_validator("url")
    @classmethod
    def _url_is_absolute(cls, value: str) -> str:
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"target URL must be absolute http(s), got {without_userinfo(value)!r}")
        if "@" in parts.netloc:
            # a URL is a name: it ends up in partition keys, run history, the store and every log line
            raise ValueError(
                f"target URL {without_userinfo(value)!r} carries a user name or password; URLs are not "
                "secret (they become partition keys and appear in run history), so remove them and send "
                "the credentials as a header read from the environment, e.g. fetch: headers: "
                "{Authorization: 'Basic ${SITE_BASIC_AUTH}'}"
            )
        return value

    @field_validator("key")
    @classmethod
    def _key_is_valid(cls, value: str | None) -> str | None:
        if value is not None and not PARTITION_KEY_RE.match(value):
            raise ValueError(
                f"partition key {value!r} must match {PARTITION_KEY_RE.pattern} (letters, digits, . _ -)"
            )
        return value

    @property
    def partition_key(self) -> str:
        return self.key or partition_key_for_url(self.url)


class DynamicTargets(_Strict):
    """Targets added at runtime (CLI ``targets add`` or the targets-file sensor)."""

    dynamic: Literal[True]
    file: str | None = Field(
        None, description="A text file of URLs (one per line), relative to the contract; a sensor syncs it."
    )

    @field_validator("file")
    @classmethod
    def _file_is_confined(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _confined("targets.file", value, info)


class ClickStep(_Strict):
    """A button the browser clicks after the page loaded: a consent banner, a "load more" button."""

    selector: str = Field(description="CSS selector of the element to click (the first visible match).")
    times: int = Field(
        1, ge=1, le=100, description="Click up to this many times, while the element is there."
    )
    optional: bool = Field(
        False,
        description="No such element is fine (a banner shown to some visitors only); else the fetch fails.",
    )

    @field_validator("selector")
    @classmethod
    def _selector_is_css(cls, value: str) -> str:
        return _css_problem("selector", value)


class BrowserSettings(_Strict):
    """``fetch.browser``: how the browser adapter renders a page before it is extracted."""

    executable: str | None = Field(
        None, description="Chromium to drive; default $SCRAPE_CONTRACTS_CHROMIUM, else chromium on PATH."
    )
    wait_for: str | None = Field(None, description="CSS selector that must be on the page before it is read.")
    network_idle: bool = Field(False, description="Also wait until no request was in flight for 0.5 s.")
    timeout_s: float = Field(
        20.0, gt=0, le=300, description="Longest wait for wait_for, network idle and each click step."
    )
    clicks: list[ClickStep] = Field(default_factory=list, description="Clicked in order, after loading.")
    pages: int = Field(
        4, ge=1, le=32, description="Pages rendered at once by one browser (a batch worker has one browser)."
    )

    @field_validator("wait_for")
    @classmethod
    def _wait_for_is_css(cls, value: str | None) -> str | None:
        return None if value is None else _css_problem("wait_for", value)


def _css_problem(setting: str, value: str) -> str:
    # Chromium runs these selectors, so they are CSS only (no parsel ::text, no XPath)
    from cssselect import GenericTranslator, SelectorError as CssError

    if "::text" in value or "::attr" in value or value.lstrip().startswith(("/", "(")):
        raise ValueError(f"{setting} {value!r} must be a plain CSS selector (no ::text, ::attr or XPath): "
                         "the browser matches it")
    try:
        GenericTranslator().css_to_xpath(value)
    except CssError as exc:
        raise ValueError(f"{setting} {value!r} is not valid CSS: {exc}") from None
    return value


class FetchSettings(_Strict):
    adapter: Literal["fixture", "http", "browser"] = "http"
    fixture_dir: str | None = Field(
        None, description="fixture adapter: directory (relative to the contract) holding <host>/<path> pages."
    )
    timeout_s: float = Field(10.0, gt=0, le=300, description="Longest wait for any one network operation.")
    deadline_s: float = Field(
        60.0, gt=0, le=3600,
        description="Wall-clock limit of one fetch: connecting, headers, body, redirects, retries and waits.",
    )
    headers: dict[str, str] = Field(default_factory=dict)
    max_bytes: int = Field(5_000_000, gt=0, description="Responses larger than this are refused.")
    max_redirects: int = Field(5, ge=0, le=20)
    retries: int = Field(2, ge=0, le=10, description="Retries on connection errors, 429 and 5xx.")
    allow_private_addresses: bool = Field(
        False, description="Allow loopback/private/link-local targets (tests and intranet scrapes only)."
    )
    concurrency: int = Field(
        4, ge=1, le=64,
        description="Batched runs: requests in flight at once per host (politeness; raise it for your own sites).",
    )
    browser: BrowserSettings | None = Field(
        None, description="browser adapter: wait conditions, click steps, the Chromium to drive."
    )

    @field_validator("fixture_dir")
    @classmethod
    def _fixture_dir_is_confined(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _confined("fetch.fixture_dir", value, info) if info.data.get("adapter") == "fixture" else value

    @model_validator(mode="after")
    def _fixture_dir_for_fixture(self) -> FetchSettings:
        if self.adapter == "fixture" and not self.fixture_dir:
            raise ValueError("the fixture adapter needs fixture_dir")
        if self.adapter == "browser" and self.headers:
            # Chromium keeps request headers set by interception on every redirect hop, whatever its origin:
            # credentials meant for the site could reach another one, so none are sent until that is solved
            raise ValueError("fetch.headers are not sent by the browser adapter (a redirect would carry them "
                             "to other sites); remove them, or use the http adapter for pages that need them")
        if self.browser is not None and self.adapter != "browser":
            raise ValueError(f"fetch.browser is only read by the browser adapter; set `adapter: browser` "
                             f"(now {self.adapter!r}) or remove fetch.browser")
        return self

    @property
    def browser_settings(self) -> BrowserSettings:
        """``fetch.browser`` or its defaults."""
        return self.browser or BrowserSettings()


class Healing(_Strict):
    enabled: bool = True
    budget: int = Field(3, ge=0, le=100, description="Heal attempts per partition before it is paused.")


class Contract(_Strict):
    name: str
    description: str = ""
    owners: list[str] = Field(default_factory=list)
    targets: list[Target] | DynamicTargets
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
        problems = _target_problems(data) if isinstance(data, dict) else []
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
    def static_targets(self) -> list[Target]:
        return [] if isinstance(self.targets, DynamicTargets) else list(self.targets)

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


def _target_problems(data: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    """(location, message) of every target that names an unknown field or repeats a partition key; tolerant
    of targets and fields that are themselves invalid (those have their own errors)."""
    targets, fields = data.get("targets"), data.get("fields")
    if not isinstance(targets, list):
        return []
    if not targets:
        return [(("targets",), "targets is empty: list at least one URL, or use {dynamic: true}")]
    names = set(fields) if isinstance(fields, dict) else None
    problems: list[tuple[tuple[str | int, ...], str]] = []
    seen: dict[str, str] = {}
    for i, raw in enumerate(targets):
        target = {"url": raw} if isinstance(raw, str) else raw
        if not isinstance(target, dict) or not isinstance(target.get("url"), str):
            continue
        url, expected = target["url"], target.get("expected")
        if names is not None and isinstance(expected, dict):
            unknown = sorted(str(k) for k in set(expected) - names)
            if unknown:
                problems.append((("targets", i, "expected"),
                                 f"target {url!r} expects unknown field(s) {', '.join(unknown)}"))
        key = target.get("key") if isinstance(target.get("key"), str) else partition_key_for_url(url)
        if key in seen:
            problems.append((("targets", i), f"targets {seen[key]!r} and {url!r} share partition key {key!r}"))
        seen.setdefault(key, url)
    return problems


def _with_problems(title: str, errors: list[Any], problems: list[tuple[tuple[str | int, ...], str]]
                   ) -> ValidationError:
    details: list[Any] = [{"type": e["type"], "loc": e["loc"], "input": e.get("input"),
                           **({"ctx": e["ctx"]} if "ctx" in e else {})} for e in errors]
    details += [{"type": "value_error", "loc": loc, "input": None, "ctx": {"error": ValueError(message)}}
                for loc, message in problems]
    return ValidationError.from_exception_data(title, details)


def partition_key_for_url(url: str) -> str:
    """A valid, stable Dagster partition key for any URL.

    ``<readable slug of host+path+query, at most 60 chars>-<first 10 hex of sha256(url)>``. The slug keeps
    keys recognisable in the UI; the hash keeps them unique and stable whatever characters the URL holds
    (Dagster reserves ``,``, ``...``, ``[`` and control characters in keys, and URLs can be longer than a key
    should be). The same URL always maps to the same key.
    """
    url = without_userinfo(url)  # never part of a key, not even hashed: a short password is guessable
    parts = urlsplit(url)
    readable = parts.netloc + parts.path + (("?" + parts.query) if parts.query else "")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", readable).strip("._-")[:60].rstrip("._-") or "page"
    digest = hashlib.sha256(url.encode("utf-8")).hexdigest()[:10]
    return f"{slug}-{digest}"


def without_userinfo(url: str) -> str:
    """``url`` without ``user:password@``; any other URL unchanged."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return re.sub(r"//[^/?#]*@", "//", url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
