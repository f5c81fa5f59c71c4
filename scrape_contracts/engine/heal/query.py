"""Selectors against a heal ``Page``: which elements a selector matches (memoised per page, cost-limited),
the (element selector, value source) split of a field's selector, and whether two elements lie on one branch."""

from __future__ import annotations

import re

from lxml import etree

from scrape_contracts.engine.heal import matcher
from scrape_contracts.engine.heal.page import Page
from scrape_contracts.engine.limits import LimitExceeded
from scrape_contracts.engine.select import SelectorError, is_xpath, select_nodes

# the value source at the end of a selector: ::text / ::attr(name) in CSS, /text() / /@name in XPath
CSS_SOURCE = re.compile(r"::(text|attr\(\s*([^)\s]+)\s*\))\s*$")
XPATH_SOURCE = re.compile(r"/(text\(\)|@([\w:.-]+))\s*$")


def on_one_branch(a: etree._Element, b: etree._Element) -> bool:
    """``a`` is ``b``, or one contains the other."""
    if a is b:
        return True
    return any(x is b for x in a.iterancestors()) or any(x is a for x in b.iterancestors())


def split_selector(selector: str) -> tuple[str, str]:
    """(element selector, value source): source is "text" or "attr:<name>"."""
    selector = selector.strip()
    if is_xpath(selector):
        match = XPATH_SOURCE.search(selector)
    else:
        match = CSS_SOURCE.search(selector)
    if not match:
        return selector, "text"
    element = selector[: match.start()].rstrip() or "*"
    return element, f"attr:{match.group(2)}" if match.group(2) else "text"


def select_elements(page: Page, selector: str, *, own: bool = False) -> list[etree._Element]:
    """Elements ``selector`` matches; a selector over the cost limit raises for the contract's ``own``
    selector (the field is refused, naming the limit) and matches nothing for one the healer made up.
    Memoised per page: the fields of one call try many of the same selectors."""
    found = page.selected.get(selector)
    if found is None:
        try:
            simple = matcher.parse(selector)
            if simple is not None:
                page.budget.check(selector)  # the same refusal as by XPath
                found = matcher.match(page, simple)
            if found is None:
                nodes = select_nodes(page.sel, selector, page.budget)
                found = [n for n in nodes if isinstance(getattr(n, "tag", None), str)]
        except (SelectorError, ValueError, etree.XPathError):
            found = []
        except LimitExceeded as exc:
            found = exc
        page.selected[selector] = found
    if isinstance(found, LimitExceeded):
        if own:
            raise found
        return []
    return list(found)
