"""Locating the old element on the last good page: what the old selector read the last accepted value
from, or where that value is, plus its visible twins."""

from __future__ import annotations

from enum import StrEnum

from lxml import etree

from scrape_contracts.engine.heal.candidates import value_sources
from scrape_contracts.engine.heal.decoys import Flag, flags_of
from scrape_contracts.engine.heal.page import Page
from scrape_contracts.engine.heal.query import on_one_branch, select_elements, split_selector
from scrape_contracts.engine.heal.spec import HealSpec, same_value, specificity


class Located(StrEnum):
    """How the old element was found on the last good page."""

    OLD_SELECTOR = "old_selector"  # the old selector matches it and it holds the last accepted value
    VALUE_SEARCH = "value_search"  # the old selector no longer does; the value occurs in a few places
    AMBIGUOUS = "ambiguous"  # the value occurs in too many places to say which
    NONE = "none"  # not found: the heal works without a fingerprint


def locate_targets(page: Page, spec: HealSpec) -> tuple[list[tuple[etree._Element, str]], Located]:
    """The element(s) the old selector read the last accepted value from on the last good page."""
    most = page.policy.max_targets
    element_sel, src = split_selector(spec.selector)
    matched = select_elements(page, element_sel, own=True)
    if spec.before is None:
        return [(el, src) for el in matched[:most]], Located.OLD_SELECTOR if matched else Located.NONE
    good = [
        (el, src) for el in matched if same_value(page.parse(spec, page.raw_value(el, src)), spec.before)
    ]
    if good:
        return good[:most], Located.OLD_SELECTOR
    # the old selector no longer describes the last good page: find the value itself
    found = innermost(
        [(el, csrc) for el, csrc, _, _ in value_sources(page, spec, lambda v: same_value(v, spec.before),
                                                        equal=True)]
    )
    if 0 < len(found) <= most:
        return found, Located.VALUE_SEARCH
    return [], Located.AMBIGUOUS if found else Located.NONE


def find_aliases(
    page: Page, spec: HealSpec, targets: list[tuple[etree._Element, str]], old_raw: str
) -> list[tuple[etree._Element, str]]:
    """Other places of the last good page showing the same specific value (the visible twin of a meta tag)."""
    if spec.before is None or not targets:
        return []
    found = innermost(
        [
            (el, src)
            for el, src, raw, _ in value_sources(page, spec, lambda v: same_value(v, spec.before), old_raw,
                                                 equal=True)
            if specificity(spec, raw, page.policy.value) >= page.policy.value.specific
        ]
    )
    out = [
        (el, src)
        for el, src in found
        if not any(on_one_branch(el, t) for t, _ in targets)
        and not flags_of(page, el) & set(Flag)
    ]
    return out if len(out) <= page.policy.max_aliases else []


def innermost(items: list[tuple[etree._Element, str]]) -> list[tuple[etree._Element, str]]:
    """Drop texts that merely wrap another found text: the inner element is the place."""
    elements = {el for el, _ in items}
    return [
        (el, src)
        for el, src in items
        if src != "text" or not any(d in elements for d in el.iterdescendants())
    ]
