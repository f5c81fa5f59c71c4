"""The typed input of one field to heal, and how a candidate's value compares with the last accepted one."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from scrape_contracts.engine.extract import ValueParseError, parse_value
from scrape_contracts.engine.heal.policy import HealPolicy, ValueScoring
from scrape_contracts.engine.heal.vocabulary import NUMBER_TOKEN, NUMERIC, jaccard, trigrams
from scrape_contracts.engine.limits import DEFAULT_LIMITS, Limits


class ItemPick(StrEnum):
    """Which item of a list a positional field means (the contract's ``item``)."""

    FIRST = "first"  # the first item of the list
    LAST = "last"  # the last item
    NEWEST = "newest"  # the item whose date is the newest (each item shows one date)
    KEY = "key"  # the item holding ``key`` as the whole text of one of its elements


@dataclass(frozen=True)
class ItemRule:
    """What identifies the item a positional field reads from."""

    pick: ItemPick
    key: str | None = None

    @staticmethod
    def from_mapping(raw: Any) -> ItemRule | None:
        """From ``"first"``, ``{"pick": "key", "key": "EUR"}`` or the contract's ``Item`` (its ``pick`` and
        ``key``)."""
        if raw is None or isinstance(raw, ItemRule):
            return raw
        if isinstance(raw, str):
            return ItemRule(ItemPick(raw))
        pick, key = (raw.get("pick"), raw.get("key")) if isinstance(raw, Mapping) else (raw.pick, raw.key)
        return ItemRule(ItemPick(pick), None if key is None else str(key))


EPSILON = 1e-9  # float noise: 19.99 parsed twice is the same value
UNPARSEABLE = object()  # a memoised "this text is not a value of the type"
ZERO_DECIMALS = re.compile(r"[.,]0+$")


@dataclass(frozen=True)
class HealSpec:
    """What the healer is told about one field: the selector that broke, the last accepted value, and the
    contract's type and rules. ``before`` and ``expected`` are coerced to the field's type."""

    name: str
    selector: str
    before: Any = None
    type: str = "string"
    pattern: str | None = None
    normalise: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    max_change_pct: float | None = None  # None: the policy's default guard applies
    expected: Any = None
    item: ItemRule | None = None  # a positional field: which item of its list it means

    def __post_init__(self) -> None:
        object.__setattr__(self, "normalise", tuple(self.normalise))
        object.__setattr__(self, "before", _coerce(self.before, self.type))
        object.__setattr__(self, "expected", _coerce(self.expected, self.type))

    @staticmethod
    def from_mapping(name: str, raw: Mapping[str, Any]) -> HealSpec:
        """From ``{"selector", "before", "type", "pattern", "normalise", "min", "max", "max_change_pct",
        "expected", "item"}``; the rule keys may also sit under ``"rules"`` (a contract field's layout)."""
        rules = raw.get("rules") or {}

        def pick(key: str) -> Any:
            return raw[key] if raw.get(key) is not None else rules.get(key)

        pct = pick("max_change_pct")
        return HealSpec(
            name=name,
            selector=str(raw.get("selector") or ""),
            before=raw.get("before"),
            type=str(raw.get("type") or "string"),
            pattern=raw.get("pattern"),
            normalise=tuple(raw.get("normalise") or ()),
            minimum=pick("min"),
            maximum=pick("max"),
            max_change_pct=float(pct) if pct is not None else None,
            expected=pick("expected"),
            item=ItemRule.from_mapping(raw.get("item")),
        )

    @property
    def bare(self) -> HealSpec:
        """The same type without pattern/normalisation: how a lone number token reads."""
        return replace(self, pattern=None, normalise=())

    @property
    def numeric(self) -> bool:
        return self.type in NUMERIC

    def change_limit(self, policy: HealPolicy) -> float:
        """The numeric change allowed from the last accepted value, in percent."""
        return self.max_change_pct if self.max_change_pct is not None else policy.default_change_pct

    def parse(self, text: str, limits: Limits = DEFAULT_LIMITS, base_url: str | None = None) -> Any:
        """Typed value exactly as the extractor would produce it, or raise ValueParseError."""
        return parse_value(text, self.type, self.pattern, self.normalise, limits=limits, base_url=base_url)

    def violation(self, value: Any, policy: HealPolicy) -> str | None:
        """Why ``value`` breaks the field's rules (or the healer's own change guard), or None."""
        if self.expected is not None and not same_value(value, self.expected):
            return "differs from expected"
        if self.numeric and isinstance(value, (int, float)):
            if self.minimum is not None and value < self.minimum:
                return "below min"
            if self.maximum is not None and value > self.maximum:
                return "above max"
            if isinstance(self.before, (int, float)) and not isinstance(self.before, bool):
                change = relative_change(value, self.before)
                if change * 100.0 > self.change_limit(policy) + EPSILON:
                    return "change beyond limit"
        return None


def _coerce(value: Any, ftype: str) -> Any:
    if value is None:
        return None
    if ftype in NUMERIC:
        if isinstance(value, bool):
            return None
        if isinstance(value, (int, float)):
            if ftype == "integer":
                return int(value) if float(value).is_integer() else value
            return float(value)
        try:
            return parse_value(str(value), ftype)
        except ValueParseError:
            return None
    if ftype == "boolean":
        if isinstance(value, bool):
            return value
        try:
            return parse_value(str(value), "boolean")
        except ValueParseError:
            return None
    return str(value)


def same_value(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or a == b and type(a) is type(b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=EPSILON, abs_tol=EPSILON)
    return a == b


def relative_change(value: float, before: float) -> float:
    if before == 0:
        return 0.0 if value == 0 else math.inf
    return abs(float(value) - float(before)) / abs(float(before))


def value_score(spec: HealSpec, value: Any, raw: str, policy: HealPolicy) -> float:
    """Proximity to the last accepted value, discounted for values that match by coincidence."""
    before = spec.before
    scoring = policy.value
    if before is None:
        return 0.0
    if spec.type == "boolean":
        return scoring.boolean_same if same_value(value, before) else scoring.boolean_other
    if spec.numeric:
        if not isinstance(before, (int, float)):
            return 0.0
        if same_value(value, before):
            return specificity(spec, raw, scoring)
        change = relative_change(value, before) * 100.0
        limit = max(spec.change_limit(policy), EPSILON)
        return max(0.0, scoring.numeric_changed * (1.0 - change / limit)) * specificity(spec, raw, scoring)
    if value == before:
        return specificity(spec, raw, scoring)
    if isinstance(value, str) and value.lower() == str(before).lower():
        return scoring.case_changed * specificity(spec, raw, scoring)
    sim = jaccard(trigrams(str(value).lower()), trigrams(str(before).lower()))
    return scoring.text_similar * sim if sim >= scoring.text_similar_min else 0.0


def specificity(spec: HealSpec, raw: str, scoring: ValueScoring) -> float:
    """How little a match says by coincidence: "3" is on every page, "1,299.00" or a long title is not."""
    if spec.numeric:
        token = NUMBER_TOKEN.search(raw)
        digits = sum(c.isdigit() for c in ZERO_DECIMALS.sub("", token.group(0) if token else raw))
        by_digits = scoring.digit_specificity
        return by_digits[digits] if digits < len(by_digits) else 1.0
    length = len(raw)
    if length >= scoring.code_length and any(c.isdigit() for c in raw) and any(c.isalpha() for c in raw):
        return 1.0  # codes such as "LMP-204" are as specific as long text
    if length < scoring.short_text:
        return scoring.short_text_specificity
    return scoring.medium_text_specificity if length < scoring.medium_text else 1.0
