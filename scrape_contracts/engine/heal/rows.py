"""Positional fields: a field whose selector picks an element by its place in a list (``li:first-child``,
``tr:nth-of-type(2)``, ``//li[1]``), or whose contract says which item it means (``item``).

Such a field means an item of a list, not a value: when the list grows at the top, the last accepted value
is still on the page, in another row, and healing to it would keep an item that is no longer the first.
So the rows are found on both pages: on the last good page, the row the field was read from and the value
at the field's place in every row; on the new page, where those values are now (each in exactly one
place), hence the new list, its rows in order and the field's place inside a row. Then:

- without an ``item`` rule, the field heals only while every row found kept its position (and only to its
  own row); a list that moved is refused (``ITEM_MOVED``): the contract has to say what the item is;
- with one, the field heals to that meaning — the first or last row, the row whose one date is the newest
  (only when the rows are in date order, so a first/last selector keeps meaning it), the row holding a
  key — with a selector that says so, or is refused (``ITEM_NOT_FOUND``).

A list of labelled rows (a specification table, "Beds" / "Baths") is keyed by its labels, not positional:
the ordinary heal follows the label.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from lxml import etree

from scrape_contracts.engine.dates import DateParseError, parse_date
from scrape_contracts.engine.heal.candidates import value_sources
from scrape_contracts.engine.heal.decoys import Flag, flags_of
from scrape_contracts.engine.heal.fingerprint import fingerprint_of, similarity
from scrape_contracts.engine.heal.labels import inline_label, label_of
from scrape_contracts.engine.heal.locate import innermost
from scrape_contracts.engine.heal.page import Page
from scrape_contracts.engine.heal.query import select_elements, split_selector
from scrape_contracts.engine.heal.spec import UNPARSEABLE, HealSpec, ItemPick, same_value
from scrape_contracts.engine.select import is_xpath

if TYPE_CHECKING:
    from scrape_contracts.engine.heal.context import Context

POSITIONAL_CSS = re.compile(
    r":(?:nth-(?:last-)?(?:child|of-type)\([^)]*\)|(?:first|last|only)-(?:child|of-type))")
POSITIONAL_XPATH = re.compile(r"\[\s*(?:\d+|last\(\)[^\]]*|position\(\)[^\]]*)\s*\]")
COMBINATOR = re.compile(r"\s*[ >+~]\s*")
ROW_DEPTH = 6  # an item rule without a positional step: its row is at most this far above the element
MIN_ROWS = 2  # a list has several rows holding a value of the field's type
MAX_PROBES = 12  # rows looked up on the new page
MIN_AGREEMENT = 0.8  # share of the rows found that one list must hold
MAX_PLACES = 4  # a row's value in more places than this (a tag cloud, a repeated menu) locates nothing
LIST_DEPTH = 8  # a row is at most this far above the field's element
# a list's copy elsewhere: in the side column, or crossed out. (Not "related": a listing names its own
# rows "recent posts" as often as a sidebar does)
LIST_DECOYS = frozenset({Flag.STRIKE, Flag.SIDE})
LIST_MARGIN = 0.05  # likeness by which one of two lists holding as many rows must be the field's
# items of a list by their tag; other rows are items when they carry a class (post cards, result rows)
LIST_ROWS = frozenset({"li", "tr", "article", "dd", "dt"})


@dataclass(frozen=True)
class OldRows:
    """The field's list on the last good page: the raw value at the field's place in each row (""
    where a row has none), and the field's own row."""

    values: tuple[str, ...]
    index: int


@dataclass(frozen=True)
class NewRows:
    """The list on the new page: its rows in order, the field's place in a row, each old row's new index."""

    rows: tuple[etree._Element, ...]
    path: tuple[tuple[str, int], ...]
    src: str
    moved: dict[int, int]  # old index -> new index, for the rows found

    def at(self, row: etree._Element) -> etree._Element | None:
        return follow(row, self.path)


def positional_steps(selector: str) -> list[str]:
    """The old selector up to each of its positional steps, the last first (a table cell's column comes
    after its row's place)."""
    element_sel, _ = split_selector(selector)
    if is_xpath(element_sel):
        # a place among a parent's children; following-sibling::span[1] is the element after a label
        found = [m for m in POSITIONAL_XPATH.finditer(element_sel)
                 if "::" not in (step := element_sel[element_sel.rfind("/", 0, m.start()) + 1: m.start()])
                 or step.startswith(("child::", "descendant::", "descendant-or-self::"))]
        return [element_sel[: m.end()] for m in reversed(found)]
    out = []
    for match in reversed(list(POSITIONAL_CSS.finditer(element_sel))):
        rest = COMBINATOR.search(element_sel, match.end())
        out.append(element_sel[: rest.start()] if rest else element_sel)
    return out


def path_of(row: etree._Element, el: etree._Element) -> tuple[tuple[str, int], ...] | None:
    """Steps (tag, index among that tag's siblings) from ``row`` down to ``el``; None when not inside."""
    steps: list[tuple[str, int]] = []
    cur = el
    while cur is not row:
        parent = cur.getparent()
        if parent is None:
            return None
        steps.append((cur.tag, [c for c in parent if c.tag == cur.tag].index(cur)))
        cur = parent
    return tuple(reversed(steps))


def follow(row: etree._Element, path: tuple[tuple[str, int], ...]) -> etree._Element | None:
    cur = row
    for tag, index in path:
        same = [c for c in cur if c.tag == tag]
        if index >= len(same):
            return None
        cur = same[index]
    return cur


def old_rows(page: Page, spec: HealSpec, target: etree._Element, src: str) -> OldRows | None:
    """The field's list on the last good page, when the field is positional (its selector picks by place,
    or its contract names an ``item``) and sits in a list of unlabelled rows of its type."""
    for row in _rows_of(page, spec, target):
        found = _list_of(page, spec, row, target, src)
        if found is not None:
            return found
    return None


def _list_of(page: Page, spec: HealSpec, row: etree._Element, target: etree._Element,
             src: str) -> OldRows | None:
    """``row`` and its like siblings as the field's list: two or more of them hold a value of the field's
    type at the field's place."""
    parent = row.getparent()
    path = path_of(row, target)
    if parent is None or path is None:
        return None
    rows = [c for c in parent if c.tag == row.tag]
    places = [follow(r, path) for r in rows]
    values = tuple(page.raw_value(el, src) if el is not None else "" for el in places)
    if row.tag not in LIST_ROWS and not page.classes(row):
        return None  # paragraphs of a text, the parts of a layout: a path, not a list's items
    alike = [r for r, v in zip(rows, values)
             if v and page.parse(spec, v) is not UNPARSEABLE and _shape(page, r) == _shape(page, row)]
    if len(alike) < MIN_ROWS:
        # one value among other things (a label and its value), or the parts of a layout: not a list of
        # items, which look alike
        return None
    labels = [f"{label_of(page, el)} {inline_label(page.raw_value(el, src), spec.type)[0]}".strip()
              for el in places if el is not None]
    if spec.item is None and all(labels) and len(set(labels)) == len(labels):
        # each row says what it is ("Beds: 3", "2 baths", "185 comments"): keyed by its label, not by place
        return None
    return OldRows(values, rows.index(row))


def _shape(page: Page, row: etree._Element) -> tuple:
    """What items of one list share: tag, stable classes, and their children's tags in order."""
    return row.tag, page.classes(row), tuple(c.tag for c in row if isinstance(c.tag, str))


def _rows_of(page: Page, spec: HealSpec, target: etree._Element) -> list[etree._Element]:
    """The elements that may be the field's row: what each positional step of its selector picked, the
    last first; for an item rule without one, the target and its ancestors that have like siblings."""
    if spec.item is None and spec.expected is not None:
        return []  # the contract pins the value: wherever it moved, it is the field's
    chain = [target, *target.iterancestors()]
    steps = positional_steps(spec.selector)
    if steps:
        on_chain = set(chain)
        picked = (next((el for el in select_elements(page, step) if el in on_chain), None) for step in steps)
        return [el for el in picked if el is not None]
    if spec.item is None:
        return []
    return [el for el in chain[:ROW_DEPTH] if el.getparent() is not None and el.tag not in ("body", "html")
            and sum(1 for c in el.getparent() if c.tag == el.tag) >= MIN_ROWS]


def new_rows(ctx: Context, old: OldRows) -> NewRows | None:
    """Where the old rows' values are on the new page, hence its list; None when fewer than two rows are
    found, or they are not rows of one list with one place for the field.

    A row's value may be printed in more than one place: twice in its own row (a post's title links to it
    and so does "read more") or in a second list (a sidebar lists the same posts). Every list the values
    make (rows under one parent, one place for the field in each, each row in its own child) is a
    candidate: the one finding the most rows wins, and between lists finding as many, the one whose places
    are most like the old element, by a margin; otherwise which list is the field's cannot be told."""
    after, spec = ctx.after, ctx.spec
    places: dict[int, list[tuple[etree._Element, str]]] = {}
    for i, raw in enumerate(old.values[:MAX_PROBES]):
        typed = after.parse(spec, raw) if raw else UNPARSEABLE
        if typed is UNPARSEABLE or any(same_value(typed, after.parse(spec, o)) for j, o in
                                       enumerate(old.values) if j != i and o):
            continue  # a value two rows share says nothing about where either went
        probe = replace(spec, before=typed, item=None)
        same = lambda v, t=typed: same_value(v, t)  # noqa: E731 - bound to this row's value
        sources = value_sources(after, probe, same, raw, equal=True)
        found = list(dict.fromkeys(innermost([(el, src) for el, src, _, _ in sources])))
        # a copy in the side column is set aside when the value is also elsewhere; a value shown only
        # there is where the row went (a redesign may move a block into a side column)
        found = [(el, src) for el, src in found if not _decoy(ctx, el)] or found
        if 0 < len(found) <= MAX_PLACES:
            places[i] = found
    if len(places) < MIN_ROWS:
        return None
    lists = sorted(_lists(ctx, places), key=lambda c: (-len(c.found), -c.likeness))
    if not lists or len(lists[0].found) < max(MIN_ROWS, MIN_AGREEMENT * len(places)):
        return None
    best = lists[0]
    rival = next((c for c in lists[1:] if c.parent is not best.parent), None)
    tied = rival is not None and len(rival.found) == len(best.found)
    if tied and best.likeness - rival.likeness < LIST_MARGIN:
        return None  # two lists hold the same rows alike (the posts, and a sidebar listing them)
    rows = tuple(c for c in best.parent if c.tag == best.tag)
    return NewRows(rows, best.path, best.src, {i: rows.index(child) for i, (child, _) in best.found.items()})


@dataclass
class _List:
    """A list the old rows' values make on the new page: its parent, its rows' tag, the field's place in a
    row, and per old row found, its new row and the field's element there."""

    parent: etree._Element
    tag: str
    path: tuple[tuple[str, int], ...]
    src: str
    found: dict[int, tuple[etree._Element, etree._Element]]
    likeness: float = 0.0  # mean similarity of its places to the old element


def _lists(ctx: Context, places: dict[int, list[tuple[etree._Element, str]]]) -> list[_List]:
    """Every list the places make: rows of one parent, each old row in its own child at one path."""
    seen: dict[tuple, dict[int, list[tuple[etree._Element, etree._Element]]]] = {}
    for i, found in places.items():
        for el, src in found:
            child = el
            for _ in range(LIST_DEPTH):
                parent = child.getparent()
                if parent is None or parent.tag in ("body", "html"):
                    break
                key = (parent, child.tag, path_of(child, el), src)
                seen.setdefault(key, {}).setdefault(i, []).append((child, el))
                child = parent
    out = []
    for (parent, tag, path, src), rows in seen.items():
        found = {i: hits[0] for i, hits in rows.items() if len(hits) == 1}
        if len(found) < MIN_ROWS or len({child for child, _ in found.values()}) < len(found):
            continue  # one row twice in this list, or two old rows in one of its rows: not this list
        likeness = sum(_likeness(ctx, el, src) for _, el in found.values()) / len(found)
        out.append(_List(parent, tag, path, src, found, likeness))
    return out


def _decoy(ctx: Context, el: etree._Element) -> bool:
    """In the page's side column (a sidebar listing the same posts), or crossed out, where the field's
    element was not: another list's copy of the row's value. (Every row of a list is a card, so
    being one says nothing here.)"""
    return bool(flags_of(ctx.after, el) & LIST_DECOYS - ctx.target_flags)


def _likeness(ctx: Context, el: etree._Element, src: str) -> float:
    fp = fingerprint_of(ctx.after, el, src)
    return max((similarity(fp, target, ctx.policy.similarity) for target in ctx.targets), default=0.0)


def kept_row(old: OldRows, new: NewRows) -> etree._Element | str:
    """The field's row on the new page when every row found kept its position, else why not."""
    shifted = {i: j for i, j in new.moved.items() if i != j}
    if shifted:
        i, j = next(iter(shifted.items()))
        return (f"the list changed: the item of row {i + 1} is now in row {j + 1}, so the field's row holds "
                "another item; say in the contract which item the field means (item: first, last, newest "
                "or a key)")
    if old.index >= len(new.rows):
        return f"the list has {len(new.rows)} rows now, the field was in row {old.index + 1}"
    return new.rows[old.index]


def picked_row(ctx: Context, new: NewRows) -> tuple[etree._Element, ItemPick] | str:
    """The row the contract's item rule means (``NEWEST`` as the first or last row, the rows being in date
    order), or why it cannot be told."""
    rule = ctx.spec.item
    assert rule is not None
    rows = [r for r in new.rows if new.at(r) is not None]
    if not rows:
        return "no row of the list holds the field"
    if rule.pick is ItemPick.FIRST:
        return rows[0], ItemPick.FIRST
    if rule.pick is ItemPick.LAST:
        return rows[-1], ItemPick.LAST
    if rule.pick is ItemPick.KEY:
        holding = [r for r in rows if any(ctx.after.text.get(el) == rule.key for el in r.iter(etree.Element))]
        if len(holding) != 1:
            return f"{len(holding)} rows hold the key {rule.key!r}, not exactly one"
        return holding[0], ItemPick.KEY
    dates = [_row_date(ctx.after, r) for r in rows]
    if any(d is None for d in dates):
        return "a row shows no date, or more than one: which is the newest cannot be told"
    if len(set(dates)) != len(dates):
        return "two rows show the same date: which is the newest cannot be told"
    if dates == sorted(dates, reverse=True):
        return rows[0], ItemPick.FIRST
    if dates == sorted(dates):
        return rows[-1], ItemPick.LAST
    return "the rows are not in date order: no selector would keep meaning the newest"


def _row_date(page: Page, row: etree._Element) -> str | None:
    """The one date a row shows (in its texts or datetime attributes), or None."""
    found: set[str] = set()
    for el in row.iter(etree.Element):
        for raw in (el.get("datetime"), page.text.get(el) if not len(el) else None):
            if raw:
                try:
                    found.add(parse_date(raw))
                except DateParseError:
                    continue
    return found.pop() if len(found) == 1 else None
