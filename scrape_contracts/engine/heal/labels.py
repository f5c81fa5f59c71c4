"""Labels: the text that says what a value is ("Price:", "3 beds", a table's column header)."""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING

from lxml import etree

from scrape_contracts.engine.dates import without_dates
from scrape_contracts.engine.heal.vocabulary import (
    DATED,
    HEADINGS,
    LETTER_WORD,
    NOT_LABEL,
    NUMBER_TOKEN,
    NUMERIC,
    content_words,
    jaccard,
    matching_words,
    trigrams,
)
from scrape_contracts.engine.select import normalise_space

if TYPE_CHECKING:
    from scrape_contracts.engine.heal.page import Page

LABEL_CHARS = 40  # a label is short...
LABEL_WORDS = 5  # ...a few words...
LABEL_KEPT = 60  # ...and compared on its first characters
UNIT_WORDS = 2  # a unit after a value ("3 beds") is one or two words
LABEL_WRAPPERS = 3  # wrappers holding only the value, climbed to find the text before it
HEADING_DEPTH = 12  # ancestors climbed to find a section heading...
HEADING_SIBLINGS = 6  # ...and preceding siblings looked at on each level
LETTER = re.compile(r"[A-Za-z]")
LETTERS = re.compile(r"[A-Za-z]{2,}")
NUMBERS_AND_SIGNS = re.compile(r"[\d$€£¥₹%]+")
PUNCTUATION = re.compile(r"[^\w\s]+")


@lru_cache(maxsize=1 << 14)  # pure: each neighbour text is asked about for every value beside it
def label_like(text: str) -> bool:
    # a neighbour carrying digits is another value ("Parking: 3 spaces"), not a label
    text = text.strip()
    return (
        0 < len(text) <= LABEL_CHARS
        and LETTERS.search(text) is not None
        and not any(c.isdigit() for c in text)
        and len(text.split()) <= LABEL_WORDS
    )



@lru_cache(maxsize=1 << 14)  # pure: the same neighbour texts label many candidates
def clean_label(text: str) -> str:
    text = NUMBERS_AND_SIGNS.sub(" ", text or "")
    text = PUNCTUATION.sub(" ", text)
    return normalise_space(text).lower()[:LABEL_KEPT]



def inline_label(raw: str, ftype: str) -> tuple[str, bool]:
    """The words inside a number's or a date's own text, cleaned ("3 beds" -> "beds", "Last updated on 5
    March 2024." -> "last updated on"), and whether they come before the value; ("", False) for a text
    type, whose whole text is the value."""
    if ftype in NUMERIC:
        token = NUMBER_TOKEN.search(raw)
        return clean_label(raw), bool(token and LETTER_WORD.search(raw[: token.start()]))
    if ftype in DATED:
        words = without_dates(raw)
        inline = clean_label(words)
        return inline, bool(inline) and raw.lower().startswith(words.split()[0].lower())
    return "", False


def label_similarity(a: str, b: str, trigram_min: float) -> float:
    """Word overlap (synonyms and stems count), or trigram overlap of at least ``trigram_min``."""
    if not a or not b:
        return 0.0
    if a == b:
        return 1.0
    wa, wb = content_words(a), content_words(b)
    words = 0.0
    if wa and wb:
        words = (len(matching_words(wa, wb)) + len(matching_words(wb, wa))) / (len(wa) + len(wb))
    # characters only vouch for near-identical spellings ("Sq.ft" / "Sq ft"): "bathrooms" and "bedrooms"
    # share most trigrams and name different things
    chars = jaccard(trigrams(a), trigrams(b))
    return max(words, chars if chars >= trigram_min else 0.0)


def label_of(page: Page, el: etree._Element) -> str:
    """The cleaned text that labels ``el``: aria-label/title, a referenced label, the text before it (up
    through wrappers holding only it), a unit after it, or its table column header."""
    if el not in page.labels:
        page.labels[el] = clean_label(_find_label(page, el))
    return page.labels[el]


def _find_label(page: Page, el: etree._Element) -> str:
    for attr in ("aria-label", "title"):
        value = el.get(attr)
        if value and LETTER.search(value):
            return value
    ref = (el.get("aria-labelledby") or "").split()
    if ref and ref[0] in _first_by(page, "id"):
        return page.text.get(_first_by(page, "id")[ref[0]], "")
    if el.get("id") and el.get("id") in _first_by(page, "for"):
        return page.text.get(_first_by(page, "for")[el.get("id")], "")
    cur = el
    for _ in range(LABEL_WRAPPERS):
        found = _adjacent_label(page, cur, cur is el)
        if found:
            return found
        parent = cur.getparent()
        if parent is None or parent.tag in ("body", "html"):
            break
        if page.text.get(parent) != page.text.get(cur):
            break  # the container holds other things: its neighbours label those, not this value
        cur = parent
    if el.tag == "td" or cur.tag == "td":
        return column_header(page, cur if cur.tag == "td" else el)
    return ""


def _first_by(page: Page, attr: str) -> dict[str, etree._Element]:
    """The first element (for ``for``: the first <label>) carrying each value of ``attr``, once per page: a
    dictionary, not an XPath with the value as a variable (an id may hold characters XPath refuses)."""
    key = f"labels_by_{attr}"
    if key not in page.memo:
        found: dict[str, etree._Element] = {}
        for el in page.elements:
            value = el.get(attr)
            if value and (attr != "for" or el.tag == "label"):
                found.setdefault(value, el)
        page.memo[key] = found
    return page.memo[key]


def _adjacent_label(page: Page, el: etree._Element, own: bool) -> str:
    """Text right before ``el`` (a text node or short element), or a unit right after the value itpage."""
    parent = el.getparent()
    if parent is None:
        return ""
    prev = el.getprevious()
    while prev is not None and not isinstance(prev.tag, str):
        prev = prev.getprevious()
    lead = (prev.tail if prev is not None else parent.text) or ""
    if label_like(lead):
        return lead
    if prev is not None and prev.tag not in NOT_LABEL:
        text = page.text.get(prev, "")
        if label_like(text):
            return text
    if not own:
        return ""
    # "3 <span>beds</span>" / "3 beds": a short unit after the value (never another value, "Was $25")
    tail = el.tail or ""
    if label_like(tail) and len(tail.split()) <= UNIT_WORDS:
        return tail
    nxt = el.getnext()
    if nxt is not None and isinstance(nxt.tag, str) and prev is None and nxt.tag not in NOT_LABEL:
        text = page.text.get(nxt, "")
        if label_like(text) and len(text.split()) <= UNIT_WORDS:
            return text
    return ""


def column_header(page: Page, td: etree._Element) -> str:
    row = td.getparent()
    if row is None:
        return ""
    col = [c for c in row if isinstance(c.tag, str)].index(td)
    table = row.getparent()
    while table is not None and table.tag != "table":
        table = table.getparent()
    if table is None:
        return ""
    for header_row in table.iter("tr"):
        cells = [c for c in header_row if isinstance(c.tag, str)]
        if cells and all(c.tag == "th" for c in cells) and header_row is not row:
            return page.text.get(cells[col], "") if col < len(cells) else ""
        break
    return ""


def heading_of(page: Page, el: etree._Element) -> str:
    """Text of the nearest section heading (h2-h6) above ``el``, or its section's aria-label."""
    cur = el
    for _ in range(HEADING_DEPTH):
        if cur not in page.headings:
            page.headings[cur] = _heading_beside(page, cur)
        found = page.headings[cur]
        if found is not None:
            return found
        cur = cur.getparent()
    return ""


def _heading_beside(page: Page, cur: etree._Element) -> str | None:
    """One level of ``heading_of``: its parent's aria-label or a heading among the siblings before ``cur``
    ("" at the top of the page); None to look one level up. The same for every element below ``cur``, so
    each level is looked at once per page."""
    parent = cur.getparent()
    if parent is None:
        return ""
    label = parent.get("aria-label")
    if label and parent.tag in ("section", "aside", "div", "ul", "ol", "nav", "article"):
        return label
    sib = cur.getprevious()
    for _ in range(HEADING_SIBLINGS):
        if sib is None:
            break
        if isinstance(sib.tag, str):
            if sib.tag in HEADINGS or sib.get("role") == "heading":
                return page.text.get(sib, "")
            # a wrapper holding nothing but a heading (<div class="head"><h2>..</h2></div>)
            inner = next((h for h in sib.iter(*HEADINGS)), None)
            if inner is not None and page.text.get(inner) == page.text.get(sib):
                return page.text.get(inner, "")
        sib = sib.getprevious()
    return None
