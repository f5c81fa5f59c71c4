"""Relocating a list's items: where did the records of the last accepted set go on the changed page?

The item selector matched nothing (or too little): each known record is looked up on the new page by its
most telling value (a text of it that occurs exactly once on the page); the elements holding those values
must sit in several similar siblings of one parent, one record each: those siblings are the items. Their
selector is built from what they share that is stable (a naming attribute, a stable class, a named
parent), never from a position, and verified: it must match every sibling found and nothing outside their
parent. Anything less clear is refused, like any heal: the list is escalated, not guessed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lxml import etree

from scrape_contracts.engine.heal.names import is_unstable_token, stable_classes, stable_id_of
from scrape_contracts.engine.limits import DEFAULT_LIMITS, LimitExceeded, Limits
from scrape_contracts.engine.select import SelectorBudget, normalise_space, parse_html, select

MIN_ITEMS = 2  # several similar siblings, never one
MIN_AGREEMENT = 0.8  # share of the found records whose items share one parent and one tag
MIN_PROBE_LENGTH = 4  # shorter values ("Ana", "4") occur all over a page
MAX_PROBES = 40  # records looked up; enough to see the pattern, cheap on long lists


@dataclass(frozen=True)
class ItemRelocation:
    selector: str | None
    confidence: float
    evidence: dict[str, Any] = field(default_factory=dict)
    refusal: str | None = None
    # record key → the new page's item element holding it (for healing the fields inside items)
    items: dict[str, etree._Element] = field(default_factory=dict, repr=False, compare=False)

    @property
    def healed(self) -> bool:
        return self.selector is not None


def _refuse(reason: str, **evidence: Any) -> ItemRelocation:
    return ItemRelocation(None, 0.0, evidence, reason)


def _probe(record: Mapping[str, Any], key_field: str) -> list[str]:
    """The record's texts most likely to be unique on the page, longest first."""
    values = [normalise_space(str(v)) for k, v in record.items()
              if k != key_field and isinstance(v, str) and len(normalise_space(v)) >= MIN_PROBE_LENGTH]
    return sorted(values, key=len, reverse=True)


def _holders(root: etree._Element) -> dict[str, list[etree._Element]]:
    """Normalised own text → elements whose own text (or a value attribute) it is."""
    found: dict[str, list[etree._Element]] = {}
    for el in root.iter():
        if not isinstance(el.tag, str) or el.tag in ("script", "style", "head", "title"):
            continue
        texts = [normalise_space("".join(el.itertext()))]
        texts += [normalise_space(v) for a, v in el.attrib.items() if a in ("datetime", "content", "value")]
        for text in texts:
            if text:
                found.setdefault(text, []).append(el)
    return found


def _haystack(item: etree._Element) -> str:
    """An item's texts and attribute values: where each value of its record must be."""
    values = [v for el in item.iter() if isinstance(el.tag, str) for v in el.attrib.values()]
    return normalise_space(" ".join([*item.itertext(), *values]))


def _innermost(elements: list[etree._Element]) -> list[etree._Element]:
    # a text is the whole text of its element and of every ancestor holding only it: keep the deepest
    ancestors = {a for el in elements for a in el.iterancestors()}
    return [el for el in elements if el not in ancestors]


def _child_towards(parent: etree._Element, el: etree._Element) -> etree._Element:
    while el.getparent() is not parent:
        el = el.getparent()
    return el


def _common_ancestor(a: etree._Element, b: etree._Element) -> etree._Element | None:
    mine = [a, *a.iterancestors()]
    theirs = set([b, *b.iterancestors()])
    return next((el for el in mine if el in theirs), None)


def relocate_items(after_html: str, records: Sequence[Mapping[str, Any]], key_field: str, *,
                   limits: Limits = DEFAULT_LIMITS) -> ItemRelocation:
    """A selector for the items of ``after_html`` (the first page of the changed listing), found from
    ``records`` (the last accepted set: ``key_field`` names each), or a refusal saying why."""
    page = parse_html(after_html)
    root = page.root
    holders = _holders(root)
    anchors: dict[str, etree._Element] = {}
    probes: dict[str, list[str]] = {}
    for record in records:
        texts = _probe(record, key_field)
        # only the record's most telling text anchors it: a shorter one (an author's name) can be another
        # record's on this page
        places = _innermost(holders.get(texts[0], [])) if texts else []
        if len(places) == 1:
            anchors[str(record[key_field])] = places[0]
            probes[str(record[key_field])] = texts
        if len(anchors) >= MAX_PROBES:
            break
    if len(anchors) < MIN_ITEMS:
        return _refuse(f"{len(anchors)} of the last accepted records found on the new page (at least "
                       f"{MIN_ITEMS} needed to see a list): the records are gone or changed",
                       found=len(anchors))
    keys = list(anchors)
    parents = Counter(_common_ancestor(anchors[a], anchors[b]) for a, b in zip(keys, keys[1:]))
    parent, agreeing = parents.most_common(1)[0]
    if parent is None or agreeing < MIN_AGREEMENT * (len(keys) - 1):
        return _refuse("the records found are not in one list (no parent holds most of them)",
                       found=len(keys))
    items = {k: _child_towards(parent, anchors[k]) for k in keys if parent in set(anchors[k].iterancestors())}
    distinct = set(items.values())
    if len(distinct) < len(items):
        return _refuse("two records share one element of the list: no item per record", found=len(items))
    tags = Counter(el.tag for el in distinct)
    tag, same = tags.most_common(1)[0]
    if len(distinct) < MIN_ITEMS or same < MIN_AGREEMENT * len(distinct):
        return _refuse("the records' elements are not similar siblings", tags=dict(tags))
    # confirmed: every text of the record is in its item (the item holds that record, not a neighbour's)
    items = {k: el for k, el in items.items() if el.tag == tag and all(t in _haystack(el) for t in probes[k])}
    if len(items) < MIN_ITEMS:
        return _refuse("fewer than two items hold a whole last accepted record", found=len(anchors))
    selector, how = _item_selector(parent, list(items.values()), tag)
    if selector is None:
        return _refuse("the items have nothing stable in common to select them by (only generated class "
                       "names or positions)", tag=tag)
    try:
        matched = select(page, selector, SelectorBudget(page, limits.selector_max_cost))
    except LimitExceeded as exc:
        return _refuse(str(exc))
    # the selector must give back every item found, and nothing but siblings of theirs
    got = {m.root for m in matched if not isinstance(m.root, str)}
    siblings = {el for el in parent if el.tag == tag}
    if not set(items.values()) <= got or not got <= siblings:
        return _refuse(f"selector {selector!r} does not select exactly the list's items", selector=selector,
                       matched=len(got), items=len(items))
    confidence = round(len(items) / len(anchors) * (1.0 if how != "parent" else 0.9), 3)
    return ItemRelocation(selector, confidence, {"found": len(anchors), "items": len(got), "by": how,
                                                 "tag": tag}, items=items)


_NAMING_PREFIXES = ("itemprop", "itemtype", "data-", "role", "aria-")


def _item_selector(parent: etree._Element, items: list[etree._Element], tag: str) -> tuple[str | None, str]:
    """The most stable selector the items share, and what it rests on."""
    shared_attrs = set.intersection(*({a for a in el.attrib if a != "class" and a != "id"} for el in items))
    naming = sorted(a for a in shared_attrs if a.startswith(_NAMING_PREFIXES))
    for attr in naming:
        values = {el.get(attr) for el in items}
        if len(values) == 1 and not is_unstable_token((next(iter(values)) or "").split("/")[-1] or "x"):
            value = next(iter(values))
            return f'{tag}[{attr}="{value}"]', "attribute"
    for attr in naming:
        if attr.startswith("data-") and not is_unstable_token(attr[5:]):
            return f"{tag}[{attr}]", "attribute"
    classes = set.intersection(*(set(stable_classes(el)) for el in items))
    if classes:
        return f"{tag}.{sorted(classes)[0]}", "class"
    anchor = stable_id_of(parent)
    if anchor:
        return f"#{anchor} > {tag}", "parent"
    parent_classes = stable_classes(parent)
    if parent_classes:
        return f"{parent.tag}.{parent_classes[0]} > {tag}", "parent"
    return None, "none"


def item_html(item: etree._Element) -> str:
    """One item on its own, for healing the fields inside it."""
    return etree.tostring(item, encoding="unicode", method="html")


__all__ = ["ItemRelocation", "item_html", "relocate_items"]
