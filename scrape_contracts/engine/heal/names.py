"""Which names on a page are stable: authored ids, classes and naming attributes, as opposed to generated
ones (css-1x2y3z, sc-AxjAm, Button_root__3kX9a) that change with every build."""

from __future__ import annotations

import re
from functools import lru_cache

from lxml import etree

from scrape_contracts.engine.heal.vocabulary import (
    FRAMEWORK_WORDS,
    HASH_PREFIX,
    REL_HOW,
    SEMANTIC_ATTRS,
    STOP,
    UTILITY_CLASS,
    words_of,
)
from scrape_contracts.engine.select import normalise_space

MAX_NAME_LENGTH = 60  # longer ids and attribute values are data, not names
ID_NAME = re.compile(r"[A-Za-z][\w-]*")


def _random_segment(segment: str) -> bool:
    if not segment:
        return False
    if segment.isdigit():
        return len(segment) >= 3  # instance ids (product-48213) differ between pages of one contract
    has_digit = any(c.isdigit() for c in segment)
    has_alpha = any(c.isalpha() for c in segment)
    if has_digit and has_alpha:
        # short layout counters (h2, col12, step3) are authored, hashes interleave digits
        return re.fullmatch(r"[A-Za-z]{1,12}\d{1,2}", segment) is None
    if has_alpha and len(segment) >= 5 and not re.search(r"[aeiouy]", segment, re.I):
        return True
    if has_alpha and any(c.isupper() for c in segment[1:]) and not segment.isupper():
        words = re.findall(r"[A-Z][a-z]*|[a-z]+", segment)
        if any(len(w) <= 2 for w in words[1:]):
            return True
    return False


# pure functions of strings, memoised across calls (the cache holds immutable answers only): the same class
# names and attribute values recur on every page of a site and on both pages of a heal
NAME_CACHE = 1 << 16


@lru_cache(maxsize=NAME_CACHE)
def is_unstable_token(token: str) -> bool:
    """True for generated names (css-1x2y3z, sc-AxjAm, jsx-123, Button_root__3kX9a, a8f3k2, uuid-like)."""
    if not token or len(token) > MAX_NAME_LENGTH:
        return True
    if HASH_PREFIX.match(token):
        return True
    if re.fullmatch(r"[0-9a-f]{8,}(?:-[0-9a-f]{4,})*", token, re.I) and re.search(r"\d", token):
        return True
    return any(_random_segment(seg) for seg in re.split(r"[-_:.]+", token))


@lru_cache(maxsize=NAME_CACHE)
def class_words(class_attr: str) -> frozenset[str]:
    """Meaningful words of all class names, generated ones included: CSS modules keep the author's name
    next to the hash ("Bathrooms_root__95ori" -> bathroom)."""
    words: set[str] = set()
    for cls in class_attr.split():
        if HASH_PREFIX.match(cls) or UTILITY_CLASS.match(cls):
            continue
        for segment in re.split(r"[-_]+", cls):
            if segment and not _random_segment(segment):
                words.update(w for w in words_of(segment) if w not in STOP and w not in FRAMEWORK_WORDS)
    return frozenset(words)


def stable_classes(el: etree._Element) -> tuple[str, ...]:
    return tuple(c for c in (el.get("class") or "").split() if not is_unstable_token(c))


def stable_id_of(el: etree._Element) -> str | None:
    return stable_id(el.get("id"))


def stable_id(id_attr: str | None) -> str | None:
    """An ``id`` attribute's value when it is an authored name, else None."""
    value = (id_attr or "").strip()
    if not value or is_unstable_token(value) or not ID_NAME.fullmatch(value):
        return None
    return value


@lru_cache(maxsize=NAME_CACHE)
def stable_attr_value(value: str) -> bool:
    value = re.sub(r"^https?://", "", value.strip())  # itemtype="https://schema.org/Product"
    if not value or len(value) > MAX_NAME_LENGTH or re.search(r"\d{2,}", value):
        return False
    return not any(is_unstable_token(part) for part in re.split(r"[\s/#?&=]+", value) if part)


def semantic_attrs(el: etree._Element) -> frozenset[tuple[str, str]]:
    return semantic_of(tuple(el.attrib.items()))


@lru_cache(maxsize=NAME_CACHE)
def semantic_of(attributes: tuple[tuple[str, str], ...]) -> frozenset[tuple[str, str]]:
    """The naming attributes among an element's ``attributes`` (items), with stable values."""
    out = set()
    for attr, value in attributes:
        if attr in SEMANTIC_ATTRS or (attr.startswith("data-") and attr not in ("data-reactid",)):
            value = normalise_space(value)
            if attr == "rel" and (not value or set(value.split()) & REL_HOW):
                continue
            if attr.startswith("data-") and attr not in SEMANTIC_ATTRS and not re.search(r"[A-Za-z]", value):
                continue  # data-price="19.99": a value, not a name
            if stable_attr_value(value):
                out.add((attr, value))
    return frozenset(out)
