"""Selector synthesis: a stable selector (no generated names, at most two positional steps) that matches
exactly the chosen element and re-extracts its value."""

from __future__ import annotations

import re
from collections.abc import Iterator
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from lxml import etree

from scrape_contracts.engine.extract import ValueParseError
from scrape_contracts.engine.heal.labels import LABEL_WRAPPERS, column_header, label_like
from scrape_contracts.engine.heal.names import semantic_attrs, stable_attr_value, stable_classes, stable_id_of
from scrape_contracts.engine.heal.page import Page
from scrape_contracts.engine.heal.query import select_elements, split_selector
from scrape_contracts.engine.heal.spec import same_value
from scrape_contracts.engine.heal.vocabulary import UTILITY_CLASS, content_words
from scrape_contracts.engine.limits import LimitExceeded
from scrape_contracts.engine.select import SelectorError, element_text, normalise_space

if TYPE_CHECKING:
    from scrape_contracts.engine.heal.candidates import Candidate
    from scrape_contracts.engine.heal.context import Context

MEANINGFUL_CLASS = 4  # a class without a known word names something when at least this long
LONG_ARIA = 40  # a longer aria-label is a sentence, too brittle to select by
ANCHOR_ANCESTORS = 8  # ancestors whose stable names may anchor a descendant selector
POSITIONAL_DEPTH = 3  # a positional path starts at most this far up...
MAX_POSITIONAL = 2  # ...and has at most this many nth-of-type steps


class SelectorKind(StrEnum):
    """The shape of a synthesised selector, most stable first."""

    UNCHANGED = "unchanged"  # the contract's own selector still picks exactly the element
    ATTRIBUTE = "attribute"  # a stable id or naming attribute of the element
    CLASS = "class"  # a meaningful class
    ANCHORED = "anchored"  # under a stably named ancestor
    LABEL = "label"  # an XPath from the text that labels it
    SIBLING = "sibling"  # right after a stably named sibling
    POSITIONAL = "positional"  # nth-of-type steps under a stable ancestor


def _css_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _xpath_string(value: str) -> str | None:
    if '"' not in value:
        return f'"{value}"'
    if "'" not in value:
        return f"'{value}'"
    return None


def _meaningful(cls: str) -> bool:
    return not UTILITY_CLASS.match(cls) and bool(content_words(cls) or len(cls) >= MEANINGFUL_CLASS)


def simple_forms(el: etree._Element, value_text: str) -> list[str]:
    """Single-step CSS for one element, most stable first."""
    forms: list[str] = []
    tag = el.tag
    stable_id = stable_id_of(el)
    if stable_id:
        forms.append(f"#{stable_id}")
    digits = set(re.findall(r"\d+", value_text))
    for attr, value in sorted(semantic_attrs(el), key=lambda av: _attr_rank(av[0])):
        if attr in ("for", "headers") or (digits and set(re.findall(r"\d+", value)) & digits):
            continue
        if attr == "aria-label" and len(value) > LONG_ARIA:
            continue
        forms.append(f"{tag}[{attr}={_css_string(value)}]")
        forms.append(f"[{attr}={_css_string(value)}]")
    classes = [c for c in stable_classes(el) if re.fullmatch(r"-?[A-Za-z_][\w-]*", c)]
    good = [c for c in classes if _meaningful(c)]
    for cls in good:
        forms.append(f"{tag}.{cls}")
        forms.append(f".{cls}")
    if len(good) >= 2:
        forms.append(f"{tag}." + ".".join(good[:2]))
    if tag in ("h1", "time", "address", "title", "main", "article"):
        forms.append(tag)
    for cls in classes:
        if cls not in good:
            forms.append(f"{tag}.{cls}")
    return list(dict.fromkeys(forms))


def _attr_rank(attr: str) -> int:
    order = ("itemprop", "data-testid", "data-test", "data-qa", "data-cy", "data-field", "property", "name")
    return order.index(attr) if attr in order else len(order) + (attr == "aria-label") + (attr == "role") * 2


def anchor_forms(el: etree._Element) -> list[str]:
    forms: list[str] = []
    stable_id = stable_id_of(el)
    if stable_id:
        forms.append(f"#{stable_id}")
    for attr, value in sorted(semantic_attrs(el), key=lambda av: _attr_rank(av[0])):
        if attr in ("for", "headers") or attr == "aria-label" and len(value) > LONG_ARIA:
            continue
        forms.append(f"[{attr}={_css_string(value)}]")
    if el.get("itemscope") is not None and el.get("itemtype") and stable_attr_value(el.get("itemtype")):
        forms.append(f"[itemtype={_css_string(el.get('itemtype'))}]")
    forms += [
        f"{el.tag}.{c}"
        for c in stable_classes(el)
        if _meaningful(c) and re.fullmatch(r"-?[A-Za-z_][\w-]*", c)
    ]
    if el.tag in ("main", "article", "aside", "header", "footer", "nav"):
        forms.append(el.tag)
    return forms


def _selector_candidates(
    page: Page, el: etree._Element, src: str, raw: str
) -> Iterator[tuple[str, SelectorKind]]:
    """(selector, kind) in order of preference; the caller verifies each."""
    suffix = f"::attr({src[5:]})" if src.startswith("attr:") else ""
    own = simple_forms(el, raw)
    for form in own:
        yield form + suffix, SelectorKind.ATTRIBUTE if "[" in form or "#" in form else SelectorKind.CLASS
    ancestors = [a for a in el.iterancestors() if a.tag not in ("html",)][:ANCHOR_ANCESTORS]
    for anc in ancestors:
        for anchor in anchor_forms(anc):
            for form in own or [el.tag]:
                yield f"{anchor} {form}{suffix}", SelectorKind.ANCHORED
            if not own:
                continue
            yield f"{anchor} {el.tag}{suffix}", SelectorKind.ANCHORED
    if src == "text":
        yield from ((s, SelectorKind.LABEL) for s in _label_xpaths(page, el))
    prev = el.getprevious()
    while prev is not None and not isinstance(prev.tag, str):
        prev = prev.getprevious()
    if prev is not None:
        for anchor in anchor_forms(prev) + (
            [prev.tag] if prev.tag in ("h1", "h2", "h3", "label", "dt", "th") else []
        ):
            yield f"{anchor} + {el.tag}{suffix}", SelectorKind.SIBLING
    for anc in ancestors:
        for anchor in anchor_forms(anc):
            yield f"{anchor} {el.tag}{suffix}", SelectorKind.ANCHORED
    yield from ((s + suffix, SelectorKind.POSITIONAL) for s in _positional(el, ancestors))


def _label_xpaths(page: Page, el: etree._Element) -> Iterator[str]:
    """Selectors anchored on the text that labels ``el``: the element or text node before it, or the
    column header of its table cell."""
    if el.tag == "td":
        header = column_header(page, el)
        literal = _xpath_string(header) if label_like(header) else None
        if literal:
            th = f"th[normalize-space(.)={literal}]"
            yield (
                f"//table[.//{th}]//td[count(preceding-sibling::*) = "
                f"count(ancestor::table[1]//{th}/preceding-sibling::*)]"
            )
    cur = el
    for _ in range(LABEL_WRAPPERS):
        prev = cur.getprevious()
        while prev is not None and not isinstance(prev.tag, str):
            prev = prev.getprevious()
        if prev is not None:
            text = page.text.get(prev, "")
            literal = _xpath_string(text)
            if literal and label_like(text):
                tail = f"/following-sibling::{cur.tag}[1]"
                down = "" if cur is el else _descend(cur, el)
                if down is not None:
                    yield f"//{prev.tag}[normalize-space(.)={literal}]{tail}{down}"
        parent = cur.getparent()
        lead = (prev.tail if prev is not None else parent.text if parent is not None else "") or ""
        lead = normalise_space(lead)
        literal = _xpath_string(lead)
        if parent is not None and literal and label_like(lead):
            down = "" if cur is el else _descend(cur, el)
            if down is not None:
                yield (f"//{parent.tag}[text()[normalize-space(.)={literal}]]/{cur.tag}{down}")
        if parent is None or page.text.get(parent) != page.text.get(cur):
            break
        cur = parent


def _descend(top: etree._Element, el: etree._Element) -> str | None:
    steps: list[str] = []
    cur = el
    while cur is not top:
        parent = cur.getparent()
        if parent is None:
            return None
        same = [c for c in parent if c.tag == cur.tag]
        if len(same) != 1:
            return None
        steps.append(cur.tag)
        cur = parent
    return "".join(f"/{s}" for s in reversed(steps))


def _positional(el: etree._Element, ancestors: list[etree._Element]) -> Iterator[str]:
    """Last resort: a stable ancestor plus at most two nth-of-type steps."""
    for depth, anc in enumerate(ancestors[:POSITIONAL_DEPTH]):
        anchors = anchor_forms(anc)
        if not anchors:
            continue
        chain: list[etree._Element] = [el]
        cur = el
        for _ in range(depth):
            cur = cur.getparent()
            chain.append(cur)
        steps: list[str] = []
        positional = 0
        for node in reversed(chain):
            parent = node.getparent()
            same = [c for c in parent if c.tag == node.tag]
            if len(same) == 1:
                steps.append(node.tag)
            else:
                positional += 1
                steps.append(f"{node.tag}:nth-of-type({same.index(node) + 1})")
        if positional <= MAX_POSITIONAL:
            yield f"{anchors[0]} > " + " > ".join(steps)


def build_selector(
    ctx: Context, cand: Candidate, limit: int | None = None
) -> tuple[str, SelectorKind] | None:
    """The first stable selector that matches exactly the candidate and re-extracts its value (at most
    ``limit`` tried, the policy's ``selector_tries`` by default)."""
    limit = ctx.policy.selector_tries if limit is None else limit
    tried = 0
    fallback: tuple[str, SelectorKind] | None = None
    if _unchanged(ctx, cand):
        return ctx.spec.selector, SelectorKind.UNCHANGED
    for selector, kind in _selector_candidates(ctx.after, cand.el, cand.src, cand.raw):
        ctx.after.deadline.check()
        tried += 1
        if tried > limit:
            break
        element_sel, src = split_selector(selector)
        matched = select_elements(ctx.after, element_sel)
        if len(matched) != 1 or matched[0] is not cand.el:
            continue
        # a selector that on the old page picks some other element describes that element, not ours
        if ctx.recall.picks_other(element_sel):
            if fallback is None and reextracts(ctx, selector, src, cand.el, cand.value):
                fallback = (selector, kind)
            continue
        if reextracts(ctx, selector, src, cand.el, cand.value):
            return selector, kind
    return fallback


def _unchanged(ctx: Context, cand: Candidate) -> bool:
    """The contract's own selector picks exactly the candidate and reads its value: nothing to change (the
    heal was asked for another field, or the page kept this part of its layout)."""
    if ctx.old_matches != {cand.el}:
        return False
    _, src = split_selector(ctx.spec.selector)
    return src == cand.src and reextracts(ctx, ctx.spec.selector, src, cand.el, cand.value)


def reextracts(ctx: Context, selector: str, src: str, el: etree._Element, value: Any) -> bool:
    """What the extractor reads with ``selector`` (whose element part matched only ``el``) is ``value``."""
    try:
        ctx.after.budget.check(selector)
    except (SelectorError, LimitExceeded):
        return False
    if src == "text":
        text = element_text(el)
    else:
        raw = el.get(src[5:])
        text = normalise_space(raw) if raw is not None else ""
    if not text:
        return False
    try:
        parsed = ctx.spec.parse(text, ctx.after.limits, ctx.after.base_url)
        return same_value(parsed, value) and ctx.spec.violation(value, ctx.policy) is None
    except ValueParseError:
        return False
