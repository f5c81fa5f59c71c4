"""Selectors: one syntax check, one way to apply them, one way to read an element's text.

A selector is CSS (with parsel's ``::text`` / ``::attr(name)`` pseudo-elements) unless it starts with
``/``, ``./`` or ``(``, in which case it is XPath. Everything that applies a selector to a page goes
through this module, so the contract loader, the extractor and the healer agree on what a selector means.
"""

from __future__ import annotations

import re
from functools import lru_cache

import parsel
from cssselect.parser import SelectorError as _CssSyntaxError
from cssselect.xpath import ExpressionError as _CssExpressionError
from lxml import etree
from parsel.csstranslator import css2xpath

_WS = re.compile(r"\s+")
_NON_CONTENT = ("script", "style", "noscript", "template")


class SelectorError(ValueError):
    """A selector that cannot be parsed."""


def is_xpath(selector: str) -> bool:
    stripped = selector.lstrip()
    return stripped.startswith(("/", "./", "("))


@lru_cache(maxsize=4096)
def compile_selector(selector: str) -> str:
    """Return the XPath for ``selector``, or raise SelectorError with a readable message."""
    if not selector or not selector.strip():
        raise SelectorError("selector is empty")
    if is_xpath(selector):
        try:
            etree.XPath(selector)
        except etree.XPathSyntaxError as exc:
            raise SelectorError(f"invalid XPath {selector!r}: {exc}") from None
        return selector
    try:
        return css2xpath(selector)
    except (_CssSyntaxError, _CssExpressionError) as exc:
        raise SelectorError(f"invalid CSS selector {selector!r}: {exc}") from None


def parse_html(html: str) -> parsel.Selector:
    # parsel tolerates broken markup the way browsers do (lxml's HTML parser recovers)
    return parsel.Selector(text=html or "<html></html>", type="html")


def select(root: parsel.Selector, selector: str) -> parsel.SelectorList:
    return root.xpath(compile_selector(selector))


def normalise_space(text: str) -> str:
    return _WS.sub(" ", text).strip()


def node_text(node: parsel.Selector) -> str:
    """Visible text of an element (script/style excluded), or the value of an attribute/text node."""
    root = node.root
    if isinstance(root, str):
        return normalise_space(root)
    if not hasattr(root, "tag"):
        return normalise_space(str(root))
    return normalise_space(" ".join(_visible_text(root)))


def _visible_text(element) -> list[str]:
    parts: list[str] = []
    if isinstance(element.tag, str) and element.tag not in _NON_CONTENT:
        if element.text:
            parts.append(element.text)
        for child in element:
            parts.extend(_visible_text(child))
            if child.tail:
                parts.append(child.tail)
    return parts


def select_texts(root: parsel.Selector, selector: str) -> list[str]:
    return [node_text(n) for n in select(root, selector)]
