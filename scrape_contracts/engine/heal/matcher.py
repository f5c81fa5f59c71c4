"""Simple CSS selectors matched on a page's own indexes instead of by XPath.

A heal tries a hundred selectors or so on each page; libxml2 answers each by walking the whole tree
(~0.1 ms on a 60 KB page). Nearly all of them — the healer's own and most contracts' — are chains of
compound selectors (``tag``, ``#id``, ``.class``, ``[attr="value"]``, ``tag:nth-of-type(n)``) joined by
descendant, child or adjacent-sibling combinators. Those are matched here, right to left from an index of
the page, with exactly the meaning ``cssselect`` gives them (the XPath the selector compiles to). Anything
else — another pseudo-class, a comma, an escape, XPath — is not parsed (``parse`` returns None) and goes
to XPath as before.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from lxml import etree

if TYPE_CHECKING:
    from scrape_contracts.engine.heal.page import Page

# only plain ASCII names: cssselect lower-cases tag and attribute names (the HTML parser's are lower case
# already) and reads escapes, which this parser leaves to it
_PART = re.compile(
    r"""\#(?P<id>-?[A-Za-z_][A-Za-z0-9_-]*)
      | \.(?P<cls>-?[A-Za-z_][A-Za-z0-9_-]*)
      | \[(?P<attr>[a-z][a-z0-9_-]*)="(?P<value>(?:[^"\\\n\r\f]|\\")*)"\]
      | :nth-of-type\((?P<nth>[1-9][0-9]{0,5})\)""",
    re.X,
)
_TAG = re.compile(r"[a-z][a-z0-9-]*")
_COMBINATOR = re.compile(r"[ \t\n\r\f]*([>+])[ \t\n\r\f]*|[ \t\n\r\f]+")
_ESCAPED_QUOTE = re.compile(r'\\"')  # the one escape read here; cssselect's others (hex) go to XPath
FAST_POOL = 64  # a compound matching more elements is related top-down from few anchors, or by XPath...
SCANNED = 256  # ...as is one whose narrowest index lists more elements than this to look at
FEW_ANCHORS = 8  # top-down: from at most this many elements
# what XPath's normalize-space() splits a class attribute on
_XML_SPACE = re.compile(r"[ \t\n\r]+")


@dataclass(frozen=True)
class Compound:
    tag: str | None
    ids: tuple[str, ...]
    classes: tuple[str, ...]
    attrs: tuple[tuple[str, str], ...]
    nth: int | None  # :nth-of-type(n), only after a tag (cssselect refuses *:nth-of-type)

    @property
    def bare(self) -> bool:
        """A tag and nothing else: every element of that tag matches."""
        return self.tag is not None and not (self.ids or self.classes or self.attrs) and self.nth is None


# (compounds left to right, the combinator before each but the first: " ", ">" or "+")
Parsed = tuple[tuple[Compound, ...], tuple[str, ...]]


@lru_cache(maxsize=4096)
def parse(selector: str) -> Parsed | None:
    """The selector as compounds and combinators, or None when it is not one this module matches."""
    compounds: list[Compound] = []
    combinators: list[str] = []
    pos, end = 0, len(selector)
    while True:
        compound, pos = _compound(selector, pos)
        if compound is None:
            return None
        compounds.append(compound)
        if pos == end:
            return tuple(compounds), tuple(combinators)
        match = _COMBINATOR.match(selector, pos)
        if match is None or match.end() == end:
            return None
        combinators.append(match.group(1) or " ")
        pos = match.end()


def _compound(selector: str, pos: int) -> tuple[Compound | None, int]:
    tag = _TAG.match(selector, pos)
    if tag:
        pos = tag.end()
    ids: list[str] = []
    classes: list[str] = []
    attrs: list[tuple[str, str]] = []
    nth = None
    while (part := _PART.match(selector, pos)) is not None:
        pos = part.end()
        if part.group("id"):
            ids.append(part.group("id"))
        elif part.group("cls"):
            classes.append(part.group("cls"))
        elif part.group("attr"):
            attrs.append((part.group("attr"), _ESCAPED_QUOTE.sub('"', part.group("value"))))
        elif nth is None and tag:
            nth = int(part.group("nth"))
        else:
            return None, pos
    if not (tag or ids or classes or attrs):
        return None, pos
    return Compound(tag.group(0) if tag else None, tuple(ids), tuple(classes), tuple(attrs), nth), pos


def match(page: Page, parsed: Parsed) -> list[etree._Element] | None:
    """The page's elements ``parsed`` matches, in document order (as XPath returns them); None when that
    would mean relating many elements in Python (libxml2 does that faster)."""
    compounds, combinators = parsed
    index = page.selector_index()
    # left to right, as XPath does: the elements matching the selector up to each compound
    found = index.matching(compounds[0])
    for combinator, compound in zip(combinators, compounds[1:]):
        if found is None or not found:
            return found
        found = _step(index, found, combinator, compound)
    return None if found is None else list(found)


def _step(index: SelectorIndex, left: list[etree._Element], combinator: str,
          compound: Compound) -> list[etree._Element] | None:
    """The elements matching ``compound`` that stand in ``combinator``'s relation to one of ``left``."""
    alone = index.matching(compound)
    if alone is not None:  # few candidates: keep those related to ``left``
        related = _related(index, combinator, left)
        return [el for el in alone if related(el)]
    if compound.tag is None or len(left) > FEW_ANCHORS or combinator == "+":
        return None
    # many elements of this tag, few places to look: down from each (lxml filters the tag in C)
    if combinator == ">":
        found = {el for anchor in left for el in anchor.iterchildren(compound.tag)}
    else:
        found = set()
        end = -1
        for anchor in left:  # in document order: an anchor inside the previous one adds nothing
            if index.order[anchor] > end:
                found.update(anchor.iterdescendants(compound.tag))
                end = index.order[index.last_descendant(anchor)]
    if not compound.bare:
        found = {el for el in found if index.is_(el, compound)}
    return sorted(found, key=index.order.__getitem__)


def _related(index: SelectorIndex, combinator: str,
             left: list[etree._Element]) -> Callable[[etree._Element], bool]:
    """Whether an element stands in ``combinator``'s relation to one of ``left``."""
    if combinator == ">":
        parents = set(left)
        return lambda el: el.getparent() in parents
    if combinator == "+":
        previous = set(left)
        return lambda el: next(el.itersiblings(etree.Element, preceding=True), None) in previous
    # a descendant: strictly inside one of the left elements' spans of the page in document order
    order = index.order
    starts: list[int] = []
    ends: list[int] = []
    for el in left:  # in document order: a span inside the previous one adds nothing
        start = order[el]
        if not ends or start > ends[-1]:
            starts.append(start)
            ends.append(order[index.last_descendant(el)])

    def inside(el: etree._Element) -> bool:
        at = order[el]
        k = bisect_left(starts, at) - 1
        return k >= 0 and at <= ends[k]

    return inside


class SelectorIndex:
    """A page's elements by tag, class and attribute value, each index built on first use, and the
    elements each compound matches on its own."""

    def __init__(self, root: etree._Element, elements: list[etree._Element],
                 order: dict[etree._Element, int]) -> None:
        self.root = root
        self.elements = elements
        self.order = order  # document position of each element
        self._tags: dict[str, list[etree._Element]] = {}
        self._classes: dict[str, list[etree._Element]] | None = None
        self._class_sets: dict[etree._Element, frozenset[str]] = {}
        self._attrs: dict[str, dict[str, list[etree._Element]]] = {}
        self._matching: dict[Compound, list[etree._Element] | None] = {}
        self._ends: dict[etree._Element, etree._Element] = {}

    def matching(self, compound: Compound) -> list[etree._Element] | None:
        """The elements ``compound`` matches on its own, in document order; None for more than
        ``FAST_POOL`` of them (or more than ``SCANNED`` to look at)."""
        if compound not in self._matching:
            pool = min(self._pools(compound), key=len)
            if len(pool) > SCANNED:
                found = None
            elif compound.bare:  # a tag alone: its pool is the answer
                found = list(pool)
            else:
                found = [el for el in pool if self.is_(el, compound)]
            self._matching[compound] = found if found is None or len(found) <= FAST_POOL else None
        return self._matching[compound]

    def _pools(self, compound: Compound) -> list[list[etree._Element]]:
        pools = [self._attr("id").get(i, []) for i in compound.ids]
        pools += [self._class(c) for c in compound.classes]
        pools += [self._attr(name).get(value, []) for name, value in compound.attrs]
        if compound.tag is not None:
            if compound.tag not in self._tags:
                self._tags[compound.tag] = list(self.root.iter(compound.tag))
            pools.append(self._tags[compound.tag])
        return pools

    def _class(self, name: str) -> list[etree._Element]:
        if self._classes is None:
            self._classes = {}
            for el in self.elements:
                attr = el.get("class")
                if attr:
                    # the names XPath's normalize-space() splits @class into
                    names = frozenset(_XML_SPACE.split(attr.strip(" \t\n\r"))) - {""}
                    self._class_sets[el] = names
                    for each in names:
                        self._classes.setdefault(each, []).append(el)
        return self._classes.get(name, [])

    def _attr(self, name: str) -> dict[str, list[etree._Element]]:
        if name not in self._attrs:
            by_value: dict[str, list[etree._Element]] = {}
            for el in self.elements:
                value = el.get(name)
                if value is not None:
                    by_value.setdefault(value, []).append(el)
            self._attrs[name] = by_value
        return self._attrs[name]

    def is_(self, el: etree._Element, compound: Compound) -> bool:
        """``el`` matches ``compound`` on its own."""
        if compound.tag is not None and el.tag != compound.tag:
            return False
        for ident in compound.ids:
            if el.get("id") != ident:
                return False
        if compound.classes:
            self._class(compound.classes[0])  # builds the class sets
            own = self._class_sets.get(el, frozenset())
            for name in compound.classes:
                if name not in own:
                    return False
        for name, value in compound.attrs:
            if el.get(name) != value:
                return False
        if compound.nth is not None:
            before = sum(1 for _ in el.itersiblings(el.tag, preceding=True))
            if before != compound.nth - 1:
                return False
        return True

    def last_descendant(self, el: etree._Element) -> etree._Element:
        """The last element of ``el``'s subtree in document order (``el`` itself when it has none)."""
        path = []
        while el not in self._ends:
            path.append(el)
            child = next(el.iterchildren(etree.Element, reversed=True), None)
            if child is None:
                self._ends[el] = el
                break
            el = child
        last = self._ends[el]
        for node in path:  # every element on the way down ends where the deepest one does
            self._ends[node] = last
        return last
