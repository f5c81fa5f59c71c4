"""Decoys: values in a context the field was not in — crossed out ("was $25"), a related or recommended
item, another item's card in a repeated list, page chrome (nav, breadcrumbs, footer) — and look-alikes:
candidates that resemble, or carry the name of, another element of the old page."""

from __future__ import annotations

from enum import StrEnum
from functools import lru_cache
from itertools import islice
from typing import TYPE_CHECKING

from lxml import etree

from scrape_contracts.engine.heal.fingerprint import similarity
from scrape_contracts.engine.heal.labels import clean_label, heading_of, label_of
from scrape_contracts.engine.heal.sequence import is_sequence_link
from scrape_contracts.engine.heal.vocabulary import (
    CHROME_TOKENS,
    CONTENT_HEADS,
    NUMBER_TOKEN,
    RELATED_HEADING,
    RELATED_TOKENS,
    SIDE_TOKENS,
    STRIKE_LABEL,
    STRIKE_TAGS,
    STRIKE_TOKENS,
    words_of,
)

if TYPE_CHECKING:
    from scrape_contracts.engine.heal.candidates import Candidate
    from scrape_contracts.engine.heal.context import Context
    from scrape_contracts.engine.heal.page import Page


class Flag(StrEnum):
    """Where an element sits, as far as a value in it can be trusted."""

    STRIKE = "strike"  # crossed out or labelled as a previous price
    RELATED = "related"  # a related/recommended section
    CHROME = "chrome"  # navigation, breadcrumbs, footer, site header
    CARD = "card"  # one of several look-alike linked items
    SEQUENCE = "sequence"  # a link to the previous or next item (``sequence``)
    SIDE = "side"  # in the page's side column (<aside>, role=complementary, a "sidebar")


# in this order: the first that the candidate has and the old element had not names the decoy
DECOY_FLAGS = (Flag.STRIKE, Flag.RELATED, Flag.CARD)
DECOY_MESSAGES = {
    Flag.STRIKE: "crossed-out or previous value",
    Flag.RELATED: "related/recommended item",
    Flag.CARD: "another item's card in a repeated list",
}

CARD_DEPTH = 6  # ancestors looked at for a repeated card
CARD_REPEATS = 3  # look-alike linked siblings that make a list of cards
STRIKE_DEPTH = 3  # a <del> or "old-price" class this close above the value crosses it out
STRIKE_TEXT = 40  # a value's own text this short may say "was"
LINK_ITEM_DEPTH = 3  # ancestors looked at for the list item of a link list...
LINK_ITEM_TEXT = 60  # ...whose text is this short


def is_card(page: Page, el: etree._Element) -> bool:
    """Inside one of several look-alike siblings that link elsewhere (product/listing/article cards)."""
    cur = el
    for _ in range(CARD_DEPTH):
        parent = cur.getparent()
        if parent is None or parent.tag in ("body", "html"):
            return False
        if parent not in page.cards:
            page.cards[parent] = _repeats_links(page, parent)
        if page.cards[parent]:
            if _linked_lookalikes(page, parent).get(_signature(page, cur), 0) >= CARD_REPEATS:
                return True
        cur = parent
    return False


def _signature(page: Page, el: etree._Element) -> tuple[str, frozenset[str]]:
    return el.tag, frozenset(page.classes(el))


def _linked_lookalikes(page: Page, parent: etree._Element) -> dict[tuple[str, frozenset[str]], int]:
    """Per child signature, how many children of ``parent`` share it (when any of them holds a link)."""
    cached = page.lookalikes.get(parent)
    if cached is None:
        counts: dict[tuple[str, frozenset[str]], int] = {}
        linked: set[tuple[str, frozenset[str]]] = set()
        holding = _holding_links(page)
        for child in parent:
            if isinstance(child.tag, str):
                sig = _signature(page, child)
                counts[sig] = counts.get(sig, 0) + 1
                if child in holding:
                    linked.add(sig)
        cached = page.lookalikes[parent] = {sig: n for sig, n in counts.items() if sig in linked}
    return cached


def _repeats_links(page: Page, parent: etree._Element) -> bool:
    children = [c for c in parent if isinstance(c.tag, str)]
    if len(children) < CARD_REPEATS:
        return False
    holding = _holding_links(page)
    return sum(1 for c in children if c in holding) >= CARD_REPEATS


def _holding_links(page: Page) -> set[etree._Element]:
    """The page's links and every element holding one: "is or holds a link" as one set lookup, worked out
    once per page instead of searching each card's subtree."""
    found = page.memo.get("holding_links")
    if found is None:
        found = page.memo["holding_links"] = set()
        for link in page.sel.root.iter("a"):
            node = link
            while node is not None and node not in found:
                found.add(node)
                node = node.getparent()
    return found


def flags_of(page: Page, el: etree._Element) -> frozenset[Flag]:
    """Context of ``el``: strike (crossed out / was), related (recommendations), chrome, card."""
    cached = page.flags.get(el)
    if cached is None:
        cached = page.flags[el] = _compute_flags(page, el)
    return cached


def _compute_flags(page: Page, el: etree._Element) -> frozenset[Flag]:
    flags: set[Flag] = set(_section_flags(page, el))
    for node in (el, *islice(el.iterancestors(), STRIKE_DEPTH)):
        if (
            node.tag in STRIKE_TAGS
            or page.context_words(node) & STRIKE_TOKENS
            or "line-through" in node.get("style", "").replace(" ", "")
        ):
            flags.add(Flag.STRIKE)
    label = label_of(page, el)
    own = page.text.get(el, "")
    if (
        label
        and STRIKE_LABEL.search(label)
        or len(own) <= STRIKE_TEXT
        and STRIKE_LABEL.search(clean_label(own))
    ):
        flags.add(Flag.STRIKE)
    heading = heading_of(page, el)
    if heading and RELATED_HEADING.search(heading):
        flags.add(Flag.RELATED)
    if is_card(page, el):
        flags.add(Flag.CARD)
    if in_link_list(page, el):
        flags.add(Flag.CHROME)
    if is_sequence_link(page, el):
        flags.add(Flag.SEQUENCE)
    return frozenset(flags)


def _section_flags(page: Page, el: etree._Element) -> frozenset[Flag]:
    """RELATED and CHROME from ``el`` and every element above it: worked out once per element of the
    page, each from its parent's (a loop: pages nest deeper than Python recurses)."""
    cache = page.section_flags
    chain = []
    cur = el
    while cur is not None and cur not in cache:
        chain.append(cur)
        cur = cur.getparent()
    flags = cache[cur] if cur is not None else frozenset()
    for node in reversed(chain):
        own = _own_section_flags(page, node)
        flags = cache[node] = flags | own if own else flags
    return flags


def _own_section_flags(page: Page, node: etree._Element) -> frozenset[Flag]:
    tag = node.tag if isinstance(node.tag, str) else ""
    tokens = page.context_words(node)
    flags: set[Flag] = set()
    if tokens & RELATED_TOKENS:
        flags.add(Flag.RELATED)
    if tag == "aside" or node.get("role") == "complementary" or tokens & SIDE_TOKENS:
        flags.add(Flag.SIDE)
    if (
        tag in ("nav", "footer")
        or node.get("role") in ("navigation", "contentinfo", "banner")
        or tokens & CHROME_TOKENS and any(chrome_name(name) for name in _names_of(node))
    ):
        flags.add(Flag.CHROME)
    if (
        tag == "header"
        and not any(a.tag in ("main", "article") for a in node.iterancestors())
        and not _holds_title(page, node)
    ):
        flags.add(Flag.CHROME)
    return frozenset(flags)


def _names_of(node: etree._Element) -> list[str]:
    """The names ``Page.context_words`` reads, one by one: each class, the id, naming attributes."""
    names = (node.get("class") or "").split()
    names += [v for a, v in node.attrib.items()
              if a == "id" or a.startswith("data-") or a in ("aria-label", "role")]
    return names


@lru_cache(maxsize=1 << 14)  # pure; the same class names recur on every page of a site
def chrome_name(name: str) -> bool:
    """A name of page chrome: a chrome word not followed by a word for content ("site-nav", "navbar",
    "nav-links"; not "page-nav-content", "menu-body", "breadcrumb-main", whose subject is the content)."""
    words = words_of(name)
    for i, word in enumerate(words):
        if word in CHROME_TOKENS and not any(later in CONTENT_HEADS for later in words[i + 1:]):
            return True
    return False


def _holds_title(page: Page, header: etree._Element) -> bool:
    """A header holding the page's own heading, not just a linked site name: a page hero, content."""
    for h1 in header.iter("h1"):
        text = page.text.get(h1, "")
        linked = " ".join(page.text.get(a, "") for a in h1.iter("a"))
        if text and len(linked) < len(text):
            return True
    return False


def in_link_list(page: Page, el: etree._Element) -> bool:
    """Inside a list whose items are bare links: breadcrumbs, menus, tag lists."""
    item = next((n for n in (el, *islice(el.iterancestors(), LINK_ITEM_DEPTH)) if n.tag == "li"), None)
    if item is None or len(page.text.get(item, "")) > LINK_ITEM_TEXT:
        return False
    parent = item.getparent()
    if parent is None:
        return False
    if parent not in page.bare_links:
        page.bare_links[parent] = sum(1 for li in parent if li.tag == "li" and _bare_link(page, li))
    own = _bare_link(page, item)
    links = page.bare_links[parent] - own
    # the current page's own crumb is often plain text after the links
    return links >= 2 or (links >= 1 and own)


def _bare_link(page: Page, item: etree._Element) -> bool:
    text = page.text.get(item, "")
    return bool(text) and any(page.text.get(a) == text for a in item.iter("a"))


def holder_of(page: Page, el: etree._Element, raw: str, numeric: bool) -> etree._Element:
    """The innermost descendant that actually carries the value ("Price: <del>$25</del>" -> the del)."""
    token = NUMBER_TOKEN.search(raw) if numeric else None
    needle = token.group(0) if token else raw
    cur = el
    while True:
        inner = [c for c in cur if isinstance(c.tag, str) and needle in page.text.get(c, "")]
        if len(inner) != 1:
            return cur
        cur = inner[0]


def decoy_reason(ctx: Context, el: etree._Element, raw: str = "") -> Flag | None:
    """Why a candidate is a decoy: a context the old element did not share (crossed out, related, card)."""
    flags = flags_of(ctx.after, el)
    if raw and len(el):
        flags = flags | flags_of(ctx.after, holder_of(ctx.after, el, raw, ctx.spec.numeric))
    if stepping(ctx, flags):
        # the pager of a post often sits in a "related" block ("read next", class "pagination-related"):
        # for a field that was a step to the previous or next item, another such step is no recommendation
        flags = flags - {Flag.RELATED, Flag.CARD}
    for flag in DECOY_FLAGS:
        if flag in flags and flag not in ctx.target_flags:
            return flag
    return None


def stepping(ctx: Context, flags: frozenset[Flag]) -> bool:
    """The field was a link to the previous or next item, and so is the element with these flags."""
    return Flag.SEQUENCE in flags and Flag.SEQUENCE in ctx.target_flags


def distractor_score(ctx: Context, cand: Candidate, struct: float) -> float:
    """How much better the candidate matches a NON-target element of the old page with the same text."""
    if cand.src != "text" or not ctx.targets:
        return 0.0
    worst = 0.0
    scoring = ctx.policy.anchors
    for other in ctx.recall.twins(cand.raw, scoring.distractor_twins):
        sim = similarity(cand.fp, other, ctx.policy.similarity)
        worst = max(worst, sim - struct)
    return max(0.0, worst - scoring.distractor_slack)


def identity_conflict(ctx: Context, cand: Candidate) -> float:
    """1.0 when the candidate carries a strong name (id, data-testid, itemprop) that on the last good page
    belonged to another element than the field's; less for a class name; 0 otherwise. Wrappers holding the
    same text count as the candidate (a data-testid on the inner div names the outer one's value too).
    A name on many elements (a shared "stars" class) says what kind of thing, not which one: not foreign."""
    scoring = ctx.policy.anchors
    names: set[str] = set()
    for node in _slot_chain(ctx.after, cand):
        names |= ctx.after.identity(node)
    worst = 0.0
    for token in names - ctx.target_identity:
        if ctx.recall.foreign(token):
            worst = max(worst, scoring.identity_class if token.startswith("c:") else 1.0)
    return worst


def _slot_chain(page: Page, cand: Candidate) -> list[etree._Element]:
    """The slot's elements holding exactly the candidate's text, outermost wrapper down to the innermost."""
    if cand.src != "text" or cand.slot is None:
        return [cand.el]
    text = page.text.get(cand.el)
    chain = [cand.slot]
    cur = cand.slot
    while True:
        inner = [c for c in cur if isinstance(c.tag, str) and page.text.get(c) == text]
        if len(inner) != 1:
            return chain
        cur = inner[0]
        chain.append(cur)
