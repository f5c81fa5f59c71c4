"""How much work an XPath can cost on a page of a given shape, estimated before it runs.

libxml2 evaluates an XPath to the end: it cannot be stopped, and a selector such as
``//*[count(//*[count(//*) > 0]) > 0]`` visits the page once per element per element (cubic: 6.5 s at
800 elements). So a selector's node visits are estimated from the expression and the page's shape, and a
selector over the limit is not run at all.

The estimate is an upper bound of the same order as the real work: each location step visits its input
nodes' axis (children: at most the page's largest fan-out, and all children of distinct nodes are at most
every node; descendants: the page; ancestors: the depth; ...), and each predicate costs its own estimate
once per node it filters. Linear selectors (every CSS selector without ``:nth-*``, ``//a[@href]/text()``)
come out as a small multiple of the page size; nesting paths inside predicates multiplies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

_TOKEN = re.compile(r"""
    \s*(?:
      (?P<literal>"[^"]*"|'[^']*')
    | (?P<number>\d+(?:\.\d*)?|\.\d+)
    | (?P<op>//|::|\.\.|!=|<=|>=|[/\[\]()@,|.=<>+*-])
    | (?P<var>\$[\w.-]+(?::[\w.-]+)?)
    | (?P<name>[A-Za-z_][\w.-]*(?::(?:\*|[A-Za-z_][\w.-]*))?)
    )""", re.VERBOSE)

_OPENERS = frozenset(("op", v) for v in ("@", "::", "(", "[", ",", "/", "//", "|"))
_NODE_TYPES = frozenset({"node", "text", "comment", "processing-instruction"})
_OPERATOR_NAMES = frozenset({"and", "or", "div", "mod"})
_AXES = frozenset({
    "ancestor", "ancestor-or-self", "attribute", "child", "descendant", "descendant-or-self", "following",
    "following-sibling", "namespace", "parent", "preceding", "preceding-sibling", "self",
})
# functions whose node-set argument is not turned into strings (no text is read)
_NO_TEXT = frozenset({"count", "name", "local-name", "namespace-uri", "boolean", "not", "last", "position"})
# axes that leave the subtree of the node a path starts from (the context node's own siblings and ancestors)
_LEAVING = frozenset({"ancestor", "ancestor-or-self", "following", "following-sibling", "parent", "preceding",
                      "preceding-sibling"})


@dataclass(frozen=True)
class PageShape:
    """What the cost of a selector depends on. 0 means unknown, taken as the worst the counts allow."""

    nodes: int  # elements, text and comment nodes
    attributes: int = 0  # attributes on the whole page
    depth: int = 0  # deepest element nesting
    fanout: int = 0  # most children of one element
    attributes_max: int = 0  # most attributes on one element
    sibling_pairs: int = 0  # sum over elements of (children)^2: every sibling of every node, at most

    @property
    def n(self) -> float:
        return float(max(1, self.nodes))

    @property
    def t(self) -> float:
        return float(max(1, self.attributes))

    @property
    def d(self) -> float:
        return float(max(1, self.depth or self.nodes))

    @property
    def f(self) -> float:
        return float(max(1, self.fanout or self.nodes))

    @property
    def s2(self) -> float:
        return float(self.sibling_pairs or self.n * self.f)

    @property
    def a(self) -> float:
        return float(max(1, self.attributes_max or self.attributes))


@dataclass(frozen=True)
class _Val:
    work: float
    pairs: float = 0.0  # nodes in the results, summed over the evaluations (0: not a node-set)
    single: float = 0.0  # nodes in the result of one evaluation
    text: float = 1.0  # cost of reading one result's string value


_State = tuple[float, float, float]


class _Unparsed(Exception):
    pass


def _tokens(expression: str, starts: list[int] | None = None) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos, end = 0, len(expression.rstrip())
    while pos < end:
        match = _TOKEN.match(expression, pos)
        if match is None or match.end() == pos:
            raise _Unparsed(expression[pos:pos + 20])
        kind = match.lastgroup or ""
        value = match.group(kind)
        # XPath's disambiguation: after an operand, '*' multiplies and and/or/div/mod are operators
        prev = out[-1] if out else None
        after_operand = prev is not None and prev[0] != "operator" and prev not in _OPENERS
        if after_operand and ((kind, value) == ("op", "*") or (kind == "name" and value in _OPERATOR_NAMES)):
            kind = "operator"
        elif kind == "op" and value in ("=", "!=", "<", "<=", ">", ">=", "+", "-"):
            kind = "operator"
        out.append((kind, value))
        if starts is not None:
            starts.append(match.start(match.lastgroup or 0))
        pos = match.end()
    return out


class _Estimator:
    """Recursive descent over XPath 1.0. Each method evaluates its expression once for each of ``ctx``
    distinct context nodes (the way a predicate runs) and returns the total work and result."""

    def __init__(self, tokens: list[tuple[str, str]], shape: PageShape) -> None:
        self.tokens = tokens
        self.i = 0
        self.shape = shape
        self.leaves = False  # whether some path can reach a node outside the context node's subtree

    def peek(self, offset: int = 0) -> tuple[str, str]:
        j = self.i + offset
        return self.tokens[j] if j < len(self.tokens) else ("end", "")

    def take(self) -> tuple[str, str]:
        token = self.peek()
        self.i += 1
        return token

    def expect(self, value: str) -> None:
        if self.take()[1] != value:
            raise _Unparsed(value)

    def expr(self, ctx: float) -> _Val:
        left = self.union(ctx)
        while self.peek()[0] == "operator":
            op = self.take()[1]
            right = self.union(ctx)
            work = left.work + right.work
            if op in ("=", "!=", "<", "<=", ">", ">="):
                # comparing node-sets reads the text of every node on both sides
                work += left.pairs * left.text + right.pairs * right.text
            left = _Val(work)
        return left

    def union(self, ctx: float) -> _Val:
        while self.peek() == ("operator", "-"):
            self.take()
        val = self.path(ctx)
        while self.peek() == ("op", "|"):
            self.take()
            more = self.path(ctx)
            val = _Val(val.work + more.work, val.pairs + more.pairs,
                       min(self.shape.n, val.single + more.single), max(val.text, more.text))
        return val

    def path(self, ctx: float) -> _Val:
        kind, value = self.peek()
        if (kind, value) in (("op", "/"), ("op", "//")):
            self.leaves = True
            return self.location(ctx, absolute=True)
        if kind in ("literal", "number", "var") or (kind, value) == ("op", "(") or (
                kind == "name" and self.peek(1) == ("op", "(") and value not in _NODE_TYPES):
            val = self.primary(ctx)
            while self.peek() == ("op", "["):
                val = _Val(val.work + self.filtered(val.pairs), val.pairs, val.single, val.text)
            if self.peek() in (("op", "/"), ("op", "//")):
                rest = self.location(ctx, start=(val.single, val.pairs, min(val.pairs, self.shape.n)))
                val = _Val(val.work + rest.work, rest.pairs, rest.single, rest.text)
            return val
        return self.location(ctx, absolute=False)

    def primary(self, ctx: float) -> _Val:
        kind, value = self.take()
        if kind in ("literal", "number", "var"):
            return _Val(ctx)
        if value == "(":
            val = self.expr(ctx)
            self.expect(")")
            return val
        self.expect("(")  # a function call
        work, pairs = ctx, 0.0
        if self.peek() != ("op", ")"):
            while True:
                arg = self.expr(ctx)
                work += arg.work + (0.0 if value in _NO_TEXT else arg.pairs * arg.text)
                if self.peek() != ("op", ","):
                    break
                self.take()
        self.expect(")")
        if value == "id" or value.startswith("set:"):  # functions that return nodes
            pairs = ctx * self.shape.n
            self.leaves = self.leaves or value == "id"
        return _Val(work, pairs, min(pairs, self.shape.n), self.shape.d)

    def filtered(self, visited: float) -> float:
        """One predicate, run once for each of ``visited`` nodes (some of them the same node again)."""
        distinct = max(1.0, min(visited, self.shape.n))
        return visited / distinct * self.predicate(distinct)

    def predicate(self, ctx: float) -> float:
        self.expect("[")
        work = self.expr(ctx).work
        self.expect("]")
        return work

    def location(self, ctx: float, *, absolute: bool = False, start: _State | None = None) -> _Val:
        """A location path evaluated once per context: from each context node, from the root (absolute),
        or from the node-set ``start`` = (nodes of one evaluation, nodes over all of them)."""
        # one evaluation starts from one node: its context (``ctx`` distinct ones), or the root (the same one)
        state = start if start is not None else (1.0, ctx, 1.0 if absolute else ctx)
        work, text = 0.0, self.shape.d
        if absolute or start is not None:
            if self.take()[1] == "//":
                work, state = self.axis("descendant-or-self", state, work, ctx)
            if absolute and not self.starts_step():
                return _Val(work + ctx, ctx, 1.0, text)  # "/" alone: the root
        while True:
            work, state, text = self.step(state, ctx, work)
            if self.peek() == ("op", "/"):
                self.take()
            elif self.peek() == ("op", "//"):
                self.take()
                work, state = self.axis("descendant-or-self", state, work, ctx)
            else:
                return _Val(work, state[1], state[0], text)

    def starts_step(self) -> bool:
        kind, value = self.peek()
        return kind == "name" or (kind == "op" and value in ("@", ".", "..", "*"))

    def step(self, state: _State, ctx: float, work: float) -> tuple[float, _State, float]:
        kind, value = self.take()
        text = self.shape.d
        if (kind, value) == ("op", "."):
            axis = "self"
        elif (kind, value) == ("op", ".."):
            axis = "parent"
        else:
            axis = "child"
            if (kind, value) == ("op", "@"):
                axis = "attribute"
                kind, value = self.take()
            elif kind == "name" and self.peek() == ("op", "::"):
                if value not in _AXES:
                    raise _Unparsed(value)
                axis = value
                self.take()
                kind, value = self.take()
            if kind == "name" and value in _NODE_TYPES and self.peek() == ("op", "("):
                self.take()
                if self.peek()[0] == "literal":
                    self.take()
                self.expect(")")
                if value != "node":
                    text = 1.0
            elif not (kind == "name" or value == "*"):
                raise _Unparsed(value)
        if axis == "attribute":
            text = 1.0
        self.leaves = self.leaves or axis in _LEAVING
        visited_before = work
        work, state = self.axis(axis, state, work, ctx)
        visited = work - visited_before
        while self.peek() == ("op", "["):
            # predicates run once per node each context's step produced, before the set is merged
            work += self.filtered(visited)
        return work, state, text

    def axis(self, axis: str, state: _State, work: float, ctx: float) -> tuple[float, _State]:
        """One axis step. ``state`` = (nodes in one evaluation's set, nodes over all ``ctx`` evaluations,
        distinct nodes among those); the visits are bounded per evaluation and, over all of them, by what
        the page holds (all children of distinct nodes are at most every node, and so on)."""
        single, total, distinct = state
        distinct = max(1.0, distinct)
        per_evaluation = self.reach(axis, single)
        reached = self.reach(axis, distinct)
        visited = min(ctx * per_evaluation, total / distinct * reached)
        cap = self.shape.t if axis == "attribute" else self.shape.n
        return work + visited, (max(1.0, min(per_evaluation, cap)), max(1.0, min(visited, ctx * cap)),
                                max(1.0, min(reached, cap)))

    def reach(self, axis: str, nodes: float) -> float:
        """Nodes an axis step visits from ``nodes`` distinct nodes."""
        shape = self.shape
        n, d, f = shape.n, shape.d, shape.f
        if axis in ("self", "parent", "namespace"):
            return nodes
        if axis == "child":
            return min(nodes * f, n)
        if axis in ("descendant", "descendant-or-self"):
            return min(nodes * n, n * d)
        if axis in ("ancestor", "ancestor-or-self"):
            return min(nodes * d, n * d)
        if axis in ("following-sibling", "preceding-sibling"):
            return min(nodes * f, shape.s2)
        if axis == "attribute":
            return min(nodes * shape.a, shape.t)
        return nodes * n  # following, preceding


@lru_cache(maxsize=4096)
def _cached_tokens(xpath: str) -> list[tuple[str, str]]:
    # selectors repeat on every page of a contract; tokenizing is most of an estimate's cost
    return _tokens(xpath)


def selector_cost(xpath: str, shape: PageShape) -> float:
    """Estimated node visits of ``xpath`` on a page of ``shape``; a cubic guess when it cannot be read."""
    try:
        estimator = _Estimator(_cached_tokens(xpath), shape)
        work = estimator.expr(1.0).work
        if estimator.peek()[0] != "end":
            raise _Unparsed(estimator.peek()[1])
        return max(work, 1.0)
    except (_Unparsed, IndexError, RecursionError):
        # not understood: assume the worst that one nesting level per bracket could cost
        nesting = 1 + xpath.count("[") + xpath.count("(")
        return float(max(1, shape.nodes)) ** min(nesting, 6)


@lru_cache(maxsize=4096)
def stays_inside(xpath: str) -> bool:
    """Whether ``xpath`` only reaches nodes inside the subtree of the node it runs from (self, child,
    descendant and attribute axes, no absolute path, no ``id()``), so its cost is bounded by that subtree's
    shape: a list item's field selectors are estimated on the item, not on the whole page again."""
    try:
        estimator = _Estimator(_cached_tokens(xpath), PageShape(nodes=1))
        estimator.expr(1.0)
        if estimator.peek()[0] != "end":
            return False
        return not estimator.leaves
    except (_Unparsed, IndexError, RecursionError):
        return False


def split_steps(xpath: str) -> list[str] | None:
    """A plain location path cut before each top-level ``/`` or ``//``: ``["//ul", "/li[1]", "//a"]``;
    None for anything else (a union, a filter expression, arithmetic)."""
    starts: list[int] = []
    try:
        tokens = _tokens(xpath, starts)
    except _Unparsed:
        return None
    cuts, depth = [0], 0
    for i, (kind, value) in enumerate(tokens):
        if value in ("[", "("):
            depth += 1
        elif value in ("]", ")"):
            depth -= 1
        elif depth == 0 and (kind == "operator" or value == "|"):
            return None
        elif depth == 0 and value in ("/", "//") and i > 0:
            cuts.append(starts[i])
    if not tokens or tokens[0][1] == "(":
        return None
    cuts.append(len(xpath))
    return [xpath[a:b].strip() for a, b in zip(cuts, cuts[1:]) if xpath[a:b].strip()]


def step_cost(step: str, shape: PageShape, contexts: int) -> float:
    """Estimated visits of one step of ``split_steps`` (``/x[...]`` or ``//x``) from ``contexts`` distinct
    nodes that are really there (no guess about how many nodes the steps before it kept)."""
    relative = step.removeprefix("//") if step.startswith("//") else step.removeprefix("/")
    if not relative:
        return 1.0
    if step.startswith("//"):
        relative = "descendant-or-self::node()/" + relative
    try:
        estimator = _Estimator(_tokens(relative), shape)
        work = estimator.expr(float(max(1, contexts))).work
        if estimator.peek()[0] != "end":
            raise _Unparsed(estimator.peek()[1])
        return max(work, 1.0)
    except (_Unparsed, IndexError, RecursionError):
        return float("inf")
