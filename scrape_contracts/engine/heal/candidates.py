"""Candidates: every place on the new page that holds a value of the field's type and shape."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from lxml import etree

from scrape_contracts.engine.heal.page import Page
from scrape_contracts.engine.heal.query import split_selector
from scrape_contracts.engine.heal.spec import UNPARSEABLE, HealSpec, same_value
from scrape_contracts.engine.heal.vocabulary import (
    ALNUM,
    CURRENCY,
    DIGIT,
    GLUED_NUMBER,
    LETTER_WORD,
    NUMBER_TOKEN,
    RATING_SCALE,
    VALUE_ATTRS,
)
from scrape_contracts.engine.select import normalise_space

if TYPE_CHECKING:
    from scrape_contracts.engine.heal.decoys import Flag
    from scrape_contracts.engine.heal.fingerprint import Fingerprint
    from scrape_contracts.engine.heal.scoring import Part

NON_DIGIT = re.compile(r"\D")
CURRENCY_BESIDE = 4  # "$" or "EUR" in a sibling: the parent's text besides the value is this short


def value_sources(
    page: Page, spec: HealSpec, accept=None, old_raw: str = "", *, equal: bool = False
) -> Iterator[tuple[etree._Element, str, str, Any]]:
    """(element, source, raw text, typed value) for every place on the page that holds a valid value (and
    whose value ``accept`` accepts, when given). ``equal``: only places that may hold the last accepted value
    itself (a number's texts must contain its digits), which spares parsing every number of the page to find
    one."""
    _, old_src = split_selector(spec.selector)
    needle = _digits_of(spec.before) if equal and spec.numeric else None
    if equal and spec.type == "string" and spec.pattern is None and not spec.normalise and spec.before:
        needle = f"={spec.before}"  # a plain string field's value is its text: only that text can equal it
    # what the scan depends on besides the page: fields alike share one scan (the text fields of a page
    # with short values all read the same texts)
    if spec.numeric:
        key: tuple = (
            len(NUMBER_TOKEN.findall(old_raw)),
            len(LETTER_WORD.findall(old_raw)),
            bool(CURRENCY.search(old_raw)),
            len(str(spec.before or "")),
        )
    elif spec.type == "boolean":
        key = (old_raw.strip().isdigit(),)
    else:
        key = (_longest_text(page, spec),)
    key = (needle, spec.type, spec.pattern, spec.normalise, old_src, *key)
    if key not in page.scan_cache:
        page.scan_cache[key] = list(_scan_values(page, spec, old_src, old_raw, needle))
    if accept is None:
        return iter(page.scan_cache[key])
    return ((el, src, raw, value) for el, src, raw, value in page.scan_cache[key] if accept(value))


def _longest_text(page: Page, spec: HealSpec) -> int:
    """The longest text read as one value of a text field (or of a patterned number)."""
    return max(page.policy.max_string_text, 2 * len(str(spec.before or "")))


def _digits_of(value: Any) -> str | None:
    """The significant digits of a number, which any text showing it contains, whatever its separators
    ("1299" in "1,299.00" for 1299.0; "18" in "1,80" for 1.8): texts without them need no parsing."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    digits = NON_DIGIT.sub("", format(Decimal(repr(abs(value))).normalize(), "f")).lstrip("0")
    return digits or None


def _scan_values(
    page: Page, spec: HealSpec, old_src: str, old_raw: str, needle: str | None = None
) -> Iterator[tuple[etree._Element, str, str, Any]]:
    old_attr = old_src[5:] if old_src.startswith("attr:") else None
    allowed_numbers = max(1, len(NUMBER_TOKEN.findall(old_raw)))
    policy = page.policy
    old_words = len(LETTER_WORD.findall(old_raw))
    allowed_words = max(policy.min_allowed_words, old_words + policy.extra_allowed_words)
    old_has_currency = bool(CURRENCY.search(old_raw))
    bare = spec.bare
    max_string = _longest_text(page, spec)
    exact = needle[1:] if needle is not None and needle.startswith("=") else None
    # every site's text is normalised (stripped): the one text a plain string equals is looked up, and a
    # number's texts are among those with a digit
    if exact is not None:
        sites = page.sites_of(exact)
    else:
        sites = page.digit_sites() if spec.numeric else page.sites()
    if old_attr and old_attr not in VALUE_ATTRS:
        extra = [
            (el, old_src, normalise_space(el.get(old_attr) or ""))
            for el in page.elements
            if el.get(old_attr) and (el not in page.hidden or el.tag == "meta")
        ]
        sites = sites + [site for site in extra if exact is None or site[2].strip() == exact]
    parse = page.parse
    if spec.numeric:
        longest = policy.max_numeric_text if spec.pattern is None else max_string
        shaped = spec.pattern is None
        price = spec.type == "price"
        # a price and a number read a text alike (Page.parse): they share its shape
        shape_type = "number" if spec.type in ("price", "number") and not spec.normalise else spec.type

        def number_text(raw: str) -> bool:
            """What depends on the text alone: asked once per text (wrappers repeat their child's)."""
            if len(raw) > longest or not DIGIT.search(raw):
                return False
            if needle is not None and needle not in raw and needle not in NON_DIGIT.sub("", raw):
                return False
            if shaped:
                key = (raw, shape_type, spec.normalise, allowed_numbers, allowed_words)
                ok = page.shape_cache.get(key)
                if ok is None:
                    ok = page.shape_cache[key] = _number_like(
                        page, spec, raw, allowed_numbers, allowed_words, bare
                    )
                if not ok:
                    return False
            # a count never reads "£103.00"
            return price or old_has_currency or not page.has_currency(raw)

        texts: dict[str, bool] = {}
        for el, src, raw in sites:
            ok = texts.get(raw)
            if ok is None:
                ok = texts[raw] = number_text(raw)
            if not ok:
                continue
            if price and old_has_currency and not _currency_near(page, el, raw):
                continue  # a price that lost its currency is more likely a count ("Tickets left: 142")
            value = parse(spec, raw)
            if value is not UNPARSEABLE:
                yield el, src, raw, value
        return
    boolean = spec.type == "boolean"
    counted = old_raw.strip().isdigit()
    for el, src, raw in sites:
        if boolean:
            if len(raw) > policy.max_boolean_text or raw.isdigit() and not counted:
                continue  # "1" is a count far more often than a yes
        elif len(raw) > max_string or not ALNUM.search(raw):
            continue  # "·" separators and icons are not values
        value = parse(spec, raw)
        if value is not UNPARSEABLE:
            yield el, src, raw, value


def _currency_near(page: Page, el: etree._Element, raw: str) -> bool:
    """A currency in the text itself or right beside it (<span>$</span><span>19.99</span>)."""
    if page.has_currency(raw):
        return True
    parent = el.getparent()
    if parent is None:
        return False
    rest = page.text.get(parent, "").replace(raw, "", 1).strip()
    return len(rest) <= CURRENCY_BESIDE and bool(CURRENCY.search(rest))


def _number_like(
    page: Page,
    spec: HealSpec,
    raw: str,
    allowed_numbers: int,
    allowed_words: int,
    bare: HealSpec | None = None,
) -> bool:
    """Text that states one number (plus a label or unit), as opposed to text that merely contains digits.

    price-parser is lenient by design ("Desk X681" -> 681, "January 4, 2023" -> 4.2023), so a candidate is
    only a number when its number stands alone, is the one the parser read, and the text around it is short.
    """
    if GLUED_NUMBER.search(raw):
        return False  # model numbers and codes: "X681", "H2O"
    tokens = NUMBER_TOKEN.findall(raw)
    if not tokens:
        return False
    if len(tokens) > allowed_numbers and not (len(tokens) == 2 and RATING_SCALE.search(raw)):
        return False  # "3 beds · 2 baths": which number is meant would be a guess
    if len(LETTER_WORD.findall(raw)) > allowed_words:
        return False
    whole = page.parse(spec, raw)
    if whole is UNPARSEABLE:
        return False
    alone = whole if tokens[0] == raw else page.parse(bare or spec.bare, tokens[0])
    return alone is not UNPARSEABLE and whole is not UNPARSEABLE and same_value(abs(alone), abs(whole))


@dataclass
class Candidate:
    """One place on the new page holding a valid value, and the evidence gathered for it."""

    el: etree._Element
    src: str
    raw: str
    value: Any
    fp: Fingerprint | None = None
    slot: etree._Element | None = None
    parts: dict[Part, float] = field(default_factory=dict)
    score: float = 0.0
    decoy: Flag | None = None


def slot_of(page: Page, el: etree._Element, src: str) -> etree._Element:
    """Outermost ancestor carrying the same text: wrappers around one value are one place, not rivals."""
    if src != "text":
        return el
    text = page.text[el]
    cur = el
    parent = cur.getparent()
    while parent is not None and parent.tag not in ("body", "html") and page.text.get(parent) == text:
        cur = parent
        parent = cur.getparent()
    return cur
