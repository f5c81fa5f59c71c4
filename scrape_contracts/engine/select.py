"""Selectors: one syntax check, one way to apply them, one way to read an element's text.

A selector is CSS (with parsel's ``::text`` / ``::attr(name)`` pseudo-elements) unless it starts with
``/``, ``./`` or ``(``, in which case it is XPath. Everything that applies a selector to a page goes
through this module, so the contract loader, the extractor and the healer agree on what a selector means.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from functools import lru_cache

import parsel
from cssselect.parser import SelectorError as _CssSyntaxError
from cssselect.xpath import ExpressionError as _CssExpressionError
from lxml import etree
from parsel.csstranslator import css2xpath

from scrape_contracts.engine.limits import LimitExceeded
from scrape_contracts.engine.xpath_cost import PageShape, selector_cost, split_steps, stays_inside, step_cost

_NON_CONTENT = ("script", "style", "noscript", "template")
# parsel binds EXSLT's regular expressions (re:test, re:match, re:replace), which lxml runs with Python's
# re module inside the XPath call: no time limit can reach them. A field's ``pattern`` is the bounded way.
# the namespaces parsel binds for every query (EXSLT sets and regular expressions)
_EXSLT = {"re": "http://exslt.org/regular-expressions", "set": "http://exslt.org/sets"}
_EXSLT_REGEX = re.compile(r"(?<![\w.-])re:(?:test|match|replace)\s*\(")


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
        if _EXSLT_REGEX.search(selector):
            raise SelectorError(f"XPath {selector!r} uses an EXSLT regular expression (re:...), which runs "
                                "without a time limit; select the element and use the field's pattern")
        return selector
    try:
        return css2xpath(selector)
    except (_CssSyntaxError, _CssExpressionError) as exc:
        raise SelectorError(f"invalid CSS selector {selector!r}: {exc}") from None


def parse_html(html: str) -> parsel.Selector:
    # parsel tolerates broken markup the way browsers do (lxml's HTML parser recovers)
    return parsel.Selector(text=html or "<html></html>", type="html")


class SelectorBudget:
    """Refuses, before it runs, a selector whose estimated work on this page is over ``max_cost``.

    libxml2 cannot stop an XPath once started, so the bound is on the estimate (``xpath_cost``): the page's
    node and attribute counts first (two cheap counts), and only when a selector looks costly with those
    alone, its real depth and fan-out (one walk over the page).

    ``within(item)`` gives the budget of selectors run from one element of the page (a list's item): one
    that stays inside the item is estimated on the item's own counts, any other on the page's, measured
    once for all items; and every item's selectors draw on the page's one ``max_cost`` together, so many
    items each running a whole-page selector end in the limit instead of a page-sized walk per item.
    """

    def __init__(self, root: parsel.Selector, max_cost: float, *, page: SelectorBudget | None = None) -> None:
        self.root = root
        self.max_cost = max_cost
        self._page = page
        self._shape: PageShape | None = None
        self._measured = False
        self.spent = 0.0  # estimated visits charged by the budgets ``within`` gave (a page's items)

    def within(self, element: parsel.Selector) -> SelectorBudget:
        return SelectorBudget(element, self.max_cost, page=self)

    @property
    def exhausted(self) -> bool:
        return self.spent > self.max_cost

    def shape(self, measured: bool = False) -> PageShape:
        tree = self.root.root
        if self._shape is None:
            counts = _ITEM_COUNTS if self._page is not None else _PAGE_COUNTS
            self._shape = PageShape(nodes=int(counts[0](tree)), attributes=int(counts[1](tree)))
        if measured and not self._measured:
            self._shape, self._measured = page_shape(tree, self._shape), True
        return self._shape

    def check(self, selector: str) -> float:
        """The selector's estimated cost, or LimitExceeded when it is over the budget."""
        xpath = compile_selector(selector)
        page = self._page
        estimating = self if page is None or stays_inside(xpath) else page
        cost = estimating.estimate(selector, xpath, self.root.root)
        if page is not None:
            page.spent += cost
            if page.exhausted:
                shape = page.shape()
                raise LimitExceeded("selector_max_cost", f"{self.max_cost:.3g}",
                                    f"the selectors run inside the items would cost about {page.spent:.3g} node "
                                    f"visits together on this page ({shape.nodes:,} nodes; selector "
                                    f"{selector!r} was next), so the rest were not run")
        return cost

    def estimate(self, selector: str, xpath: str, context: etree._Element) -> float:
        shape = self.shape()
        # the estimate only grows with the counts: rounded up to powers of two, it bounds this page's and is
        # shared by every page of about the same size (an estimate costs ~0.1 ms, a cache hit nothing)
        cost = _rounded_cost(xpath, _pow2(shape.nodes), _pow2(shape.attributes))
        if cost > self.max_cost:
            cost = selector_cost(xpath, shape)
        if cost > self.max_cost:
            cost = selector_cost(xpath, self.shape(measured=True))
        if cost > self.max_cost:
            cost = self._stepwise_cost(xpath, context)
        if cost > self.max_cost:
            shape = self.shape()
            raise LimitExceeded("selector_max_cost", f"{self.max_cost:.3g}",
                                f"selector {selector!r} would cost about {cost:.3g} node visits on this page "
                                f"({shape.nodes:,} nodes, {shape.depth} deep), so it was not run")
        return cost

    def _stepwise_cost(self, xpath: str, context: etree._Element) -> float:
        """The estimate again, step by step from the nodes each step really kept: the whole-page estimate
        assumes every element passes every test, which is far off for ``//dt[.='Price']/following-sibling::dd``
        on a page with one dt. Each prefix runs (from ``context``) only after its own estimate passed."""
        steps = split_steps(xpath)
        if not steps:
            return float("inf")
        shape = self.shape(measured=True)
        nodes: list = [context]
        total, prefix = 0.0, ""
        for i, step in enumerate(steps):
            if not all(isinstance(getattr(n, "tag", None), str) for n in nodes):
                return float("inf")  # text or attribute results in the middle: no cheaper estimate
            total += step_cost(step, shape, len(nodes)) if i else selector_cost(step, shape)
            if total > self.max_cost or i == len(steps) - 1:
                return total
            prefix += step
            nodes = context.xpath(prefix)
        return total


# (nodes, attributes) of the whole document, and of one element's subtree
_PAGE_COUNTS = (etree.XPath("count(//node())"), etree.XPath("count(//@*)"))
_ITEM_COUNTS = (etree.XPath("count(descendant-or-self::node())"), etree.XPath("count(descendant-or-self::*/@*)"))


def _pow2(count: int) -> int:
    return 1 << max(0, count - 1).bit_length()


@lru_cache(maxsize=8192)
def _rounded_cost(xpath: str, nodes: int, attributes: int) -> float:
    return selector_cost(xpath, PageShape(nodes=nodes, attributes=attributes))


def page_shape(tree: etree._Element, counts: PageShape) -> PageShape:
    """Depth, fan-out (largest, and summed squares: all sibling pairs) and most attributes of one element,
    in one pass without recursion."""
    depth = deepest = fanout = attributes = sibling_pairs = 0
    for event, element in etree.iterwalk(tree, events=("start", "end")):
        if event == "start":
            depth += 1
            deepest = max(deepest, depth)
            children = len(element)
            fanout = max(fanout, children)
            sibling_pairs += children * children
            if isinstance(element.tag, str):
                attributes = max(attributes, len(element.attrib))
        else:
            depth -= 1
    return PageShape(counts.nodes, counts.attributes, deepest, fanout, attributes, sibling_pairs)


def select(root: parsel.Selector, selector: str, budget: SelectorBudget | None = None) -> parsel.SelectorList:
    if budget is not None:
        budget.check(selector)
    return root.xpath(compile_selector(selector))


def select_nodes(root: parsel.Selector, selector: str, budget: SelectorBudget | None = None,
                 shared: SharedSteps | None = None) -> list:
    """``select`` without parsel's wrapping: the lxml elements, strings or number the selector yields.
    The healer tries hundreds of selectors per page, and wrapping every element they match in a
    ``parsel.Selector`` cost as much as evaluating them. ``shared``: first steps already run on this page."""
    if budget is not None:
        budget.check(selector)
    xpath = compile_selector(selector)
    result = shared.evaluate(xpath) if shared is not None else None
    if result is None:
        try:
            result = _evaluator(xpath)(root.root)
        except etree.XPathEvalError as exc:  # parsel's words, which callers and messages expect
            raise ValueError(f"XPath error: {exc} in {xpath}") from None
    return result if isinstance(result, list) else [result]


class SharedSteps:
    """The first step that several selectors of one page's extraction begin with, run once for all of them.

    CSS selectors scoped to one part of a page (``.product-main h1``, ``.product-main [itemprop=sku]``) each
    begin by testing every element of the page for the scope; on the throughput benchmark's pages that scan
    was 1.56 of the 1.66 ms its 7 fields took. When the shared first step finds exactly one element, a
    selector's other steps run from that element, which is what the whole path computes (a location path
    ``A/B`` is ``B`` from each node ``A`` finds); otherwise the whole path runs, as without this.
    """

    def __init__(self, root: parsel.Selector, selectors: Iterable[str]) -> None:
        self._element = root.root
        firsts = Counter(split[0] for split in (_split_first(x) for x in _xpaths(selectors)) if split)
        self._shared = {step for step, count in firsts.items() if count > 1}
        self._found: dict[str, etree._Element | None] = {}

    def evaluate(self, xpath: str) -> list | None:
        """What ``xpath`` yields on the page, or None: not one this can answer (run the whole path)."""
        split = _split_first(xpath)
        if split is None or split[0] not in self._shared:
            return None
        first, rest = split
        if first not in self._found:
            self._found[first] = self._one_element(first)
        element = self._found[first]
        if element is None:
            return None
        try:
            return _evaluator(rest)(element)
        except etree.XPathError:
            return None  # the whole path raises it where it always did

    def _one_element(self, step: str) -> etree._Element | None:
        try:
            found = _evaluator(step)(self._element)
        except etree.XPathError:
            return None  # the whole path raises it where it always did
        if isinstance(found, list) and len(found) == 1 and isinstance(found[0], etree._Element):
            return found[0]
        return None


def _xpaths(selectors: Iterable[str]) -> Iterator[str]:
    for selector in selectors:
        try:
            yield compile_selector(selector)
        except SelectorError:
            continue  # raised when that field's selector runs, as before


@lru_cache(maxsize=4096)
def _split_first(xpath: str) -> tuple[str, str] | None:
    """(first step, the other steps as a path from the node it found) of a plain location path, or None."""
    steps = split_steps(xpath)
    if not steps or len(steps) < 2:  # None: not a plain location path
        return None
    return steps[0], "." + "".join(steps[1:])


@lru_cache(maxsize=4096)
def _evaluator(xpath: str) -> etree.XPath:
    return etree.XPath(xpath, namespaces=_EXSLT, smart_strings=False)


def normalise_space(text: str) -> str:
    # str.split() splits on exactly the characters the regex \s matches, three times faster than re.sub
    return " ".join(text.split())


def node_text(node: parsel.Selector) -> str:
    """Visible text of an element (script/style excluded), or the value of an attribute/text node."""
    root = node.root
    if isinstance(root, str):
        return normalise_space(root)
    if not hasattr(root, "tag"):
        return normalise_space(str(root))
    return element_text(root)


def element_text(element: etree._Element) -> str:
    """Visible text of an lxml element (script/style excluded), as ``node_text`` reads it."""
    return normalise_space(" ".join(_visible_text(element)))


def _visible_text(element) -> list[str]:
    """Text of ``element`` and its content descendants in document order, each child's tail after it.

    A loop with its own stack, not recursion: pages nest thousands of elements deep (20,000 raised
    RecursionError here), and the parser keeps up to its own depth limit."""
    parts: list[str] = []
    stack: list = [element]
    while stack:
        item = stack.pop()
        if isinstance(item, str):  # a tail, queued behind its element's subtree
            parts.append(item)
            continue
        if isinstance(item.tag, str) and item.tag not in _NON_CONTENT:
            if item.text:
                parts.append(item.text)
            for child in reversed(item):
                if child.tail:
                    stack.append(child.tail)
                stack.append(child)
    return parts


def select_texts(root: parsel.Selector, selector: str, budget: SelectorBudget | None = None,
                 shared: SharedSteps | None = None) -> list[str]:
    """The text of every node ``selector`` matches, as ``node_text`` reads it.

    Through the compiled, cached evaluator and without parsel's wrapping: parsel compiles the XPath on every
    call, which was a third of a batch worker's time on a first sweep (py-spy, 7 fields per page)."""
    return [element_text(n) if hasattr(n, "tag") else normalise_space(str(n))
            for n in select_nodes(root, selector, budget, shared)]
