"""Extraction of one record from a page: selectors → text → typed values, with structured problems.

A problem (no match, several different matches, an unparseable value) never becomes a guessed value: the
field is ``None`` and the problem says why, so validation and the healer can act on it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any, Protocol

import parsel
import regex
from price_parser import Price

from scrape_contracts.engine.dates import DateParseError, parse_date, parse_datetime
from scrape_contracts.engine.limits import DEFAULT_LIMITS, LimitExceeded, Limits
from scrape_contracts.engine.select import SelectorBudget, SharedSteps, parse_html, select_texts
from scrape_contracts.engine.urls import UrlParseError, page_base, parse_url


class FieldLike(Protocol):
    """What extraction needs of a field; ``contract.fields.FieldSpec`` satisfies it."""

    selector: str
    type: str
    pattern: str | None
    normalise: list[str]


@dataclass(frozen=True)
class FieldProblem:
    field: str
    kind: str  # no_match | multiple_matches | unparseable | pattern_no_match | limit_exceeded
    message: str
    matches: int = 0


@dataclass(frozen=True)
class Extraction:
    record: dict[str, Any]
    raw: dict[str, str | None]
    problems: tuple[FieldProblem, ...] = field(default_factory=tuple)

    def problem_fields(self) -> set[str]:
        return {p.field for p in self.problems}


class ValueParseError(ValueError):
    pass


_TEXT_TYPES = {
    "date": lambda text, _: parse_date(text),
    "datetime": lambda text, _: parse_datetime(text),
    "url": parse_url,
}
_TRUE = {"true", "yes", "1", "in stock", "available", "y"}
_FALSE = {"false", "no", "0", "out of stock", "unavailable", "sold out", "n"}
PLAIN_DIGITS = 15  # a text of only this many ASCII digits is read directly (checked against price-parser)
_DIGIT = re.compile(r"\d")
_NEGATIVE = re.compile(r"^\s*\S{0,3}\s*-\s*\d")  # "-5", "$ -5", "EUR - 5"


def boolean_of(text: str) -> bool | None:
    """The yes/no a (stripped) text says, or None."""
    lowered = text.lower()
    return True if lowered in _TRUE else False if lowered in _FALSE else None


def apply_normalise(text: str, steps: Iterable[str]) -> str:
    for step in steps:
        if step == "lower":
            text = text.lower()
        elif step == "upper":
            text = text.upper()
        elif step == "casefold":
            text = text.casefold()
        elif step == "digits_only":
            text = re.sub(r"\D+", "", text)
    return text


def _to_number(text: str, field_type: str) -> Decimal:
    if field_type != "price" and not _DIGIT.search(text):
        raise ValueParseError(f"no number in {text!r}")  # price-parser reads "free" as 0: prices only
    if text.isascii() and text.isdigit() and len(text) <= PLAIN_DIGITS:
        return Decimal(text)  # what price-parser reads a bare count as, 50 times faster
    # price-parser knows thousands/decimal separators in both conventions ("1.299,00", "1,299.00") and
    # ignores currency symbols wherever they stand; Decimal keeps "12.50" exact for diffing.
    amount = Price.fromstring(text).amount
    if amount is None:
        raise ValueParseError(f"no number in {text!r}")
    if text.strip().startswith("-") or _NEGATIVE.match(text):
        amount = -abs(amount)
    return amount


def pattern_search(pattern: str, text: str, timeout_s: float) -> regex.Match[str] | None:
    """``pattern`` searched in ``text`` for at most ``timeout_s`` (the ``regex`` module can stop a match;
    ``re`` cannot, and ``^(a|a)+$`` on a long line backtracks for ever)."""
    try:
        return regex.search(pattern, text, timeout=timeout_s)
    except TimeoutError:
        what = f"pattern {pattern!r} took too long on a text of {len(text):,} characters"
        raise LimitExceeded("regex_timeout_s", timeout_s, what) from None


def parse_value(text: str, field_type: str, pattern: str | None = None,
                normalise: Iterable[str] = (), *, limits: Limits = DEFAULT_LIMITS,
                base_url: str | None = None) -> Any:
    """Turn extracted text into a typed value, or raise ValueParseError (LimitExceeded on a slow pattern).

    Dates and date-times become ISO 8601 strings (``engine/dates.py``); links become absolute URLs,
    resolved against ``base_url`` (``engine/urls.py``)."""
    if pattern is not None:
        match = pattern_search(pattern, text, limits.regex_timeout_s)
        if match is None:
            raise ValueParseError(f"pattern {pattern!r} does not match {text!r}")
        text = match.group(1) if match.groups() else match.group(0)
    text = apply_normalise(text.strip(), normalise)
    if field_type == "string":
        return text
    if field_type in _TEXT_TYPES:
        try:
            return _TEXT_TYPES[field_type](text, base_url)
        except (DateParseError, UrlParseError) as exc:
            raise ValueParseError(str(exc)) from None
    if field_type == "boolean":
        answer = boolean_of(text)
        if answer is None:
            raise ValueParseError(f"{text!r} is not a yes/no value")
        return answer
    number = _to_number(text, field_type)
    if field_type == "integer":
        try:
            if number != number.to_integral_value():
                raise ValueParseError(f"{text!r} is not a whole number")
        except InvalidOperation:
            raise ValueParseError(f"{text!r} is not a whole number") from None
        return int(number)
    # number and price: float for JSON Schema and pandas; the diff normalises precision
    return float(number)


def extract_field(root: parsel.Selector, name: str, spec: FieldLike, selector: str | None = None, *,
                  limits: Limits = DEFAULT_LIMITS, budget: SelectorBudget | None = None,
                  base_url: str | None = None, shared: SharedSteps | None = None
                  ) -> tuple[Any, str | None, FieldProblem | None]:
    """(value, raw text, problem) for one field; ``selector`` overrides the spec's (healed selectors);
    links resolve against ``base_url`` (the page's own URL or ``<base href>``); ``shared``: the first steps
    the record's selectors have in common, run once on this page."""
    selector = selector or spec.selector
    try:
        return _extract_field(root, name, spec, selector, limits,
                              budget or SelectorBudget(root, limits.selector_max_cost), base_url, shared)
    except LimitExceeded as exc:
        return None, None, FieldProblem(name, "limit_exceeded", str(exc))


def _extract_field(root: parsel.Selector, name: str, spec: FieldLike, selector: str, limits: Limits,
                   budget: SelectorBudget, base_url: str | None, shared: SharedSteps | None
                   ) -> tuple[Any, str | None, FieldProblem | None]:
    texts = [t for t in select_texts(root, selector, budget, shared) if t != ""]
    if not texts:
        return None, None, FieldProblem(name, "no_match", f"selector {selector!r} matched nothing", 0)
    if len(set(texts)) > 1:
        shown = ", ".join(repr(t[:40]) for t in texts[:3])
        return None, None, FieldProblem(
            name, "multiple_matches",
            f"selector {selector!r} matched {len(texts)} elements with different values ({shown})", len(texts),
        )
    raw = texts[0]
    try:
        value = parse_value(raw, spec.type, spec.pattern, spec.normalise, limits=limits, base_url=base_url)
        return value, raw, None
    except ValueParseError as exc:
        kind = "pattern_no_match" if spec.pattern and "pattern" in str(exc) else "unparseable"
        return None, raw, FieldProblem(name, kind, f"{spec.type} field from {selector!r}: {exc}", len(texts))


def extract_record(html: str | parsel.Selector, fields: Mapping[str, FieldLike],
                   selectors: Mapping[str, str] | None = None, *,
                   limits: Limits = DEFAULT_LIMITS, page_url: str | None = None) -> Extraction:
    """Extract one record. ``selectors`` (field → selector) overrides the specs' selectors; ``page_url`` is
    where the page came from (``url`` fields resolve relative links against it)."""
    root = parse_html(html) if isinstance(html, str) else html
    base_url = base_of(root, page_url) if any(f.type == "url" for f in fields.values()) else page_url
    budget = SelectorBudget(root, limits.selector_max_cost)  # measures the page once, for every field
    return extract_fields(root, fields, chosen_selectors(fields, selectors), budget=budget, base_url=base_url,
                          limits=limits)


def chosen_selectors(fields: Mapping[str, FieldLike], selectors: Mapping[str, str] | None) -> dict[str, str]:
    """field → the selector in force: the override (a healed selector) or the spec's."""
    return {name: (selectors or {}).get(name) or spec.selector for name, spec in fields.items()}


def extract_fields(root: parsel.Selector, fields: Mapping[str, FieldLike], chosen: Mapping[str, str], *,
                   budget: SelectorBudget, base_url: str | None, limits: Limits = DEFAULT_LIMITS) -> Extraction:
    """One record read from ``root`` (a page, or an item of a list) with what the caller measured once:
    the selectors in force, the budget and the base links resolve against."""
    shared = SharedSteps(root, chosen.values())
    record: dict[str, Any] = {}
    raw: dict[str, str | None] = {}
    problems: list[FieldProblem] = []
    for name, spec in fields.items():
        value, text, problem = extract_field(root, name, spec, chosen[name], limits=limits,
                                             budget=budget, base_url=base_url, shared=shared)
        record[name], raw[name] = value, text
        if problem is not None:
            problems.append(problem)
    return Extraction(record, raw, tuple(problems))


def base_of(root: parsel.Selector, page_url: str | None) -> str | None:
    """What relative links on the page resolve against: its ``<base href>``, else ``page_url``."""
    base_href = root.xpath("//base/@href").get()
    return page_base(page_url, base_href)
