"""One parsed page for one heal call: its elements, their texts, and per-call caches.

Every cache lives on the ``Page`` of one ``heal`` call, so concurrent calls share nothing mutable. The
modules that read a page (labels, decoys, fingerprint, candidates) keep their caches here too.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import parsel
from lxml import etree

from scrape_contracts.engine.extract import ValueParseError, base_of, boolean_of, parse_value
from scrape_contracts.engine.heal import matcher
from scrape_contracts.engine.heal.names import is_unstable_token, semantic_attrs, semantic_of, stable_id
from scrape_contracts.engine.heal.policy import DEFAULT_POLICY, HealPolicy
from scrape_contracts.engine.heal.spec import UNPARSEABLE, HealSpec
from scrape_contracts.engine.heal.vocabulary import (
    CURRENCY,
    DIGIT,
    NON_CONTENT,
    NOT_CANDIDATE,
    STOP,
    STRONG_ANCHOR_ATTRS,
    UTILITY_CLASS,
    VALUE_ATTRS,
    words_of,
)
from scrape_contracts.engine.limits import DEFAULT_LIMITS, LimitExceeded, Limits
from scrape_contracts.engine.select import (
    SelectorBudget,
    normalise_space,
    parse_html,
)

if TYPE_CHECKING:
    from scrape_contracts.engine.heal.fingerprint import Fingerprint

# page-sized texts are never values or labels: not worth re-normalising at every ancestor
LONG_TEXT = 4000


class Deadline:
    """The time one heal call may take; checked where the work grows with the page (each text parsed, each
    selector tried), so a page that would take minutes is refused after ``seconds``."""

    def __init__(self, clock: Callable[[], float], seconds: float) -> None:
        self.clock = clock
        self.seconds = seconds
        self.at = clock() + seconds

    def check(self) -> None:
        if self.clock() > self.at:
            raise LimitExceeded("heal_timeout_s", self.seconds, "the heal took too long")


class Texts:
    """What a text says, whichever page of one heal call it is on: its typed value per field type, and
    whether it reads as one number. The last good page and the new one share most of their texts."""

    def __init__(self) -> None:
        self.parsed: dict[tuple, Any] = {}
        self.shapes: dict[tuple, bool] = {}


class Page:
    """One parsed page plus lazily computed, per-call caches (never shared between calls)."""

    def __init__(self, html: str | parsel.Selector, limits: Limits = DEFAULT_LIMITS,
                 deadline: Deadline | None = None, policy: HealPolicy = DEFAULT_POLICY,
                 url: str | None = None, texts: Texts | None = None) -> None:
        # a tree the caller already parsed (for extraction) is read, never changed
        self.sel = html if isinstance(html, parsel.Selector) else parse_html(html)
        self.limits = limits
        self.policy = policy
        self.base_url = base_of(self.sel, url)  # what url fields' relative links resolve against
        self.deadline = deadline or Deadline(time.monotonic, limits.heal_timeout_s)
        self.budget = SelectorBudget(self.sel, limits.selector_max_cost)
        root = self.sel.root
        elements = int(root.xpath("count(//*)"))
        if elements > limits.heal_max_elements:
            # every cache below is per element: refuse before building them (219 s at 200,000 elements)
            raise LimitExceeded("heal_max_elements", limits.heal_max_elements,
                                f"the page has {elements:,} elements, too many to heal")
        self.elements: list[etree._Element] = list(root.iter(etree.Element))  # elements, in page order
        self.index = {el: i for i, el in enumerate(self.elements)}
        self.text = self._texts()
        self.hidden = self._hidden()
        # caches of the modules that read the page (labels, decoys, fingerprint, candidates)
        self.fingerprints: dict[tuple[etree._Element, str], Fingerprint] = {}
        self.ancestries: dict[etree._Element | None, dict[str, float]] = {}  # fingerprint: per parent
        self.as_sibling: dict[etree._Element, frozenset[str]] = {}  # fingerprint: per neighbour
        self.labels: dict[etree._Element, str] = {}
        self.headings: dict[etree._Element, str | None] = {}  # labels.heading_of, per level
        self.flags: dict[etree._Element, frozenset[str]] = {}
        self.section_flags: dict[etree._Element, frozenset[str]] = {}  # decoys: flags from above
        self.cards: dict[etree._Element, bool] = {}
        self.lookalikes: dict[etree._Element, dict[tuple[str, frozenset[str]], int]] = {}
        self.bare_links: dict[etree._Element, int] = {}
        self.scan_cache: dict[tuple, list[tuple[etree._Element, str, str, Any]]] = {}
        self._sites: list[tuple[etree._Element, str, str]] | None = None
        self._digit_sites: list[tuple[etree._Element, str, str]] | None = None
        self._sites_by_raw: dict[str, list[tuple[etree._Element, str, str]]] | None = None
        texts = texts or Texts()
        self.shape_cache = texts.shapes
        self.selected: dict[str, list[etree._Element] | LimitExceeded] = {}  # select_elements' answers
        self._selector_index: matcher.SelectorIndex | None = None
        self.memo: dict[str, Any] = {}  # page-wide indexes of other modules (memory's look-alike index)
        self._classes: dict[etree._Element, tuple[str, ...]] = {}
        self._unstable: dict[str, bool] = {}
        self._node_tokens: dict[etree._Element, tuple[str, ...]] = {}
        self._context_words: dict[etree._Element, frozenset[str]] = {}
        self._parsed = texts.parsed
        self._tag_counts: dict[str, int] | None = None
        self._identity_index: dict[str, list[etree._Element]] | None = None
        self._identities: dict[etree._Element, frozenset[str]] = {}
        self._semantic: dict[etree._Element, frozenset[tuple[str, str]]] = {}
        self._currency: dict[str, bool] = {}
        self._by_text: dict[str, list[etree._Element]] | None = None
        self._jsonld: list[tuple[frozenset[str], Any, bool]] | None = None

    def _texts(self) -> dict[etree._Element, str]:
        # same rule as select.node_text, bottom-up so each element is visited once; each text and tail is
        # normalised once, where it stands, and joined to the children's already normalised texts (the
        # same string as normalising the whole joined text again at every ancestor)
        out: dict[etree._Element, str] = {}
        for el in reversed(self.elements):
            if el.tag in NON_CONTENT:
                out[el] = ""
                continue
            if not len(el):  # a leaf (most elements): its own text
                text = el.text or ""
                out[el] = text if len(text) > LONG_TEXT else normalise_space(text)
                continue
            parts = [el.text or ""]
            for child in el:
                if isinstance(child.tag, str):
                    parts.append(out.get(child, ""))
                parts.append(child.tail or "")
            if sum(map(len, parts)) + len(parts) - 1 > LONG_TEXT:
                out[el] = " ".join(parts)
                continue
            pieces = [normalise_space(el.text)] if el.text else []
            for child in el:
                if isinstance(child.tag, str):
                    pieces.append(out.get(child, ""))
                if child.tail:
                    pieces.append(normalise_space(child.tail))
            out[el] = " ".join([piece for piece in pieces if piece])
        return out

    def _hidden(self) -> set[etree._Element]:
        """The elements inside a script, style, noscript or template (those included)."""
        return {el for top in self.sel.root.iter(*NON_CONTENT) for el in top.iter(etree.Element)}

    def classes(self, el: etree._Element) -> tuple[str, ...]:
        """Stable class names of ``el`` (generated ones dropped)."""
        cached = self._classes.get(el)
        if cached is None:
            out = []
            for cls in (el.get("class") or "").split():
                unstable = self._unstable.get(cls)
                if unstable is None:
                    unstable = self._unstable[cls] = is_unstable_token(cls)
                if not unstable:
                    out.append(cls)
            cached = self._classes[el] = tuple(out)
        return cached

    def semantic(self, el: etree._Element) -> frozenset[tuple[str, str]]:
        """``names.semantic_attrs`` of ``el``, memoised per element."""
        cached = self._semantic.get(el)
        if cached is None:
            cached = self._semantic[el] = semantic_attrs(el)
        return cached

    def node_tokens(self, el: etree._Element) -> tuple[str, ...]:
        """What an ancestor contributes to a descendant's context: tag, stable classes/id, semantics."""
        cached = self._node_tokens.get(el)
        if cached is None:
            cached = self._node_tokens[el] = _node_tokens(el.tag, tuple(el.attrib.items()))
        return cached

    def context_words(self, el: etree._Element) -> frozenset[str]:
        """Words of the naming attributes of one element, for decoy/section keywords."""
        cached = self._context_words.get(el)
        if cached is None:
            text = " ".join(
                [el.get("class") or "", el.get("id") or ""]
                + [v for a, v in el.attrib.items() if a.startswith("data-") or a in ("aria-label", "role")]
            )
            cached = self._context_words[el] = _word_set(text)
        return cached

    def tag_count(self, tag: str) -> int:
        if self._tag_counts is None:
            counts: dict[str, int] = {}
            for el in self.elements:
                counts[el.tag] = counts.get(el.tag, 0) + 1
            self._tag_counts = counts
        return self._tag_counts.get(tag, 0)

    def identity(self, el: etree._Element) -> frozenset[str]:
        """Names that say which element this is within one snapshot: id, classes, naming attributes.
        Generated names count here (they are stable between two fetches of one build); utility classes
        (text-lg, mt-2) do not, they are shared by unrelated elements."""
        cached = self._identities.get(el)
        if cached is None:
            cached = self._identities[el] = _identity(tuple(el.attrib.items()))
        return cached

    def identity_index(self) -> dict[str, list[etree._Element]]:
        if self._identity_index is None:
            index: dict[str, list[etree._Element]] = {}
            for el in self.elements:
                if el not in self.hidden or el.tag == "meta":
                    for token in self.identity(el):
                        index.setdefault(token, []).append(el)
            self._identity_index = index
        return self._identity_index

    def pos(self, el: etree._Element) -> float:
        return self.index.get(el, 0) / max(1, len(self.elements))

    def by_text(self) -> dict[str, list[etree._Element]]:
        if self._by_text is None:
            index: dict[str, list[etree._Element]] = {}
            for el in self.elements:
                text = self.text[el]
                if text and len(text) <= self.policy.max_string_text and el not in self.hidden:
                    index.setdefault(text, []).append(el)
            self._by_text = index
        return self._by_text

    def parse(self, spec: HealSpec, raw: str) -> Any:
        """``spec.parse(raw)`` memoised per call (price parsing dominates on big pages), or UNPARSEABLE."""
        if spec.pattern is None and not spec.normalise and spec.type in ("string", "boolean"):
            # what parse_value makes of a plain string or yes/no (no pattern, no normalise steps)
            if spec.type == "string":
                return raw.strip()
            answer = boolean_of(raw.strip())
            return UNPARSEABLE if answer is None else answer
        if spec.numeric and spec.pattern is None and not spec.normalise:
            # number and price parse identically, integer adds a whole-number check: parse each text once
            number = self._parse_key(raw, "number", None, ())
            if spec.type != "integer" or number is UNPARSEABLE:
                return number
            return int(number) if float(number).is_integer() else UNPARSEABLE
        return self._parse_key(raw, spec.type, spec.pattern, spec.normalise)

    def _parse_key(self, raw: str, ftype: str, pattern: str | None, normalise: tuple[str, ...]) -> Any:
        key = (raw, ftype, pattern, normalise, self.base_url)
        if key not in self._parsed:
            self.deadline.check()
            try:
                self._parsed[key] = parse_value(raw, ftype, pattern, normalise, limits=self.limits,
                                                base_url=self.base_url)
            except ValueParseError:
                self._parsed[key] = UNPARSEABLE
        return self._parsed[key]

    def sites(self) -> list[tuple[etree._Element, str, str]]:
        """(element, source, raw text) of every visible text and value attribute that could hold a value."""
        if self._sites is None:
            out: list[tuple[etree._Element, str, str]] = []
            limit = self.policy.max_site_text
            for el in self.elements:
                if el in self.hidden and el.tag != "meta":
                    continue
                if el.tag not in NOT_CANDIDATE and el.tag != "meta":
                    text = self.text.get(el, "")
                    if text and len(text) <= limit:
                        out.append((el, "text", text))
                for attr in VALUE_ATTRS:
                    value = el.get(attr)
                    if value and (attr != "content" or el.tag == "meta" or el.get("itemprop")):
                        out.append((el, f"attr:{attr}", normalise_space(value)))
            self._sites = out
        return self._sites

    def has_currency(self, raw: str) -> bool:
        """A currency sign or code in ``raw`` (asked of the same texts for every numeric field)."""
        found = self._currency.get(raw)
        if found is None:
            found = self._currency[raw] = CURRENCY.search(raw) is not None
        return found

    def digit_sites(self) -> list[tuple[etree._Element, str, str]]:
        """The ``sites`` whose text has a digit: the only ones a number can come from."""
        if self._digit_sites is None:
            self._digit_sites = [site for site in self.sites() if DIGIT.search(site[2])]
        return self._digit_sites

    def sites_of(self, raw: str) -> list[tuple[etree._Element, str, str]]:
        """The ``sites`` whose text is exactly ``raw``."""
        if self._sites_by_raw is None:
            index: dict[str, list[tuple[etree._Element, str, str]]] = {}
            for site in self.sites():
                index.setdefault(site[2], []).append(site)
            self._sites_by_raw = index
        return self._sites_by_raw.get(raw, [])

    def selector_index(self) -> matcher.SelectorIndex:
        """The page's elements by tag, id and class, for ``matcher``."""
        if self._selector_index is None:
            self._selector_index = matcher.SelectorIndex(self.sel.root, self.elements, self.index)
        return self._selector_index

    def raw_value(self, el: etree._Element, src: str) -> str:
        if src == "text":
            return self.text.get(el, "")
        return normalise_space(el.get(src[5:], ""))

    def jsonld(self) -> list[tuple[frozenset[str], Any, bool]]:
        """(key words, scalar, inside a related/list branch) for every JSON-LD scalar on the page."""
        if self._jsonld is None:
            out: list[tuple[frozenset[str], Any, bool]] = []
            for script in self.sel.root.xpath('//script[contains(@type, "ld+json")]'):
                raw = (script.text or "").strip()
                raw = re.sub(r"^\s*(<!--|//<!\[CDATA\[)|(-->|//\]\]>)\s*$", "", raw)
                try:
                    doc = json.loads(raw)
                except (ValueError, RecursionError):  # deeper than json will nest: no evidence
                    continue
                _walk_jsonld(doc, (), False, out)
            self._jsonld = out
        return self._jsonld


@lru_cache(maxsize=1 << 14)  # pure; elements with the same attributes abound (and recur page after page)
def _identity(attributes: tuple[tuple[str, str], ...]) -> frozenset[str]:
    """``Page.identity`` of an element with these attributes."""
    named = dict(attributes)
    tokens = {f"c:{c}" for c in (named.get("class") or "").split() if not _utility(c)}
    if named.get("id"):
        tokens.add(f"i:{named['id'].strip()}")
    tokens |= {f"a:{a}={v}" for a, v in semantic_of(attributes) if a in STRONG_ANCHOR_ATTRS}
    return frozenset(tokens)


@lru_cache(maxsize=1 << 14)  # pure; elements with the same tag and attributes abound
def _node_tokens(tag: str, attributes: tuple[tuple[str, str], ...]) -> tuple[str, ...]:
    """``Page.node_tokens`` of an element with this tag and these attributes."""
    named = dict(attributes)
    classes = [c for c in (named.get("class") or "").split() if not is_unstable_token(c)]
    tokens = [
        f"t:{tag}",
        *(f"c:{c}" for c in classes),
        *(f"w:{w}" for c in classes for w in words_of(c) if w not in STOP),
    ]
    node_id = stable_id(named.get("id"))
    if node_id:
        tokens += [f"i:{node_id}", *(f"w:{w}" for w in words_of(node_id) if w not in STOP)]
    tokens += [f"a:{a}={v}" for a, v in semantic_of(attributes) if a != "aria-label"]
    if named.get("itemscope") is not None:
        tokens.append(f"s:{(named.get('itemtype') or '').rsplit('/', 1)[-1]}")
    return tuple(tokens)


@lru_cache(maxsize=1 << 14)  # pure; the same names recur on every page of a site
def _word_set(text: str) -> frozenset[str]:
    return frozenset(words_of(text)) if text.strip() else frozenset()


@lru_cache(maxsize=1 << 14)  # pure; class names recur on every page of a site
def _utility(cls: str) -> bool:
    return UTILITY_CLASS.match(cls) is not None


RELATED_JSONLD_KEYS = frozenset(
    "isRelatedTo isSimilarTo relatedLink itemListElement isAccessoryOrSparePartFor recommendations "
    "hasPart".split()
)


def _walk_jsonld(node: Any, path: tuple[str, ...], related: bool, out: list) -> None:
    """Leaves of a JSON-LD document in order, with the last keys above them (a loop: JSON nests deep)."""
    stack: list[tuple[Any, tuple[str, ...], bool]] = [(node, path, related)]
    while stack:
        node, path, related = stack.pop()
        if isinstance(node, dict):
            stack.extend((value, (*path[-2:], key), related or key in RELATED_JSONLD_KEYS)
                         for key, value in reversed(list(node.items())))
        elif isinstance(node, list):
            stack.extend((item, path, related) for item in reversed(node))
        elif node is not None:
            if path and path[-1].startswith("@") and path[-1] != "@value":
                continue
            out.append((frozenset(w for k in path for w in words_of(k)), node, related))
