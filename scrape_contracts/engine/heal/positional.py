"""The decision for a positional field (``rows``): keep its row while the list keeps its order, heal to the
item the contract names, or refuse. The selector of an item says what the item is: its place from the
start or the end of the list, or the key its row holds (an XPath)."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from cssselect import HTMLTranslator
from cssselect import SelectorError as CssSelectorError
from lxml import etree

from scrape_contracts.engine.heal.context import Context
from scrape_contracts.engine.heal.query import select_elements, split_selector
from scrape_contracts.engine.heal.result import HEALED, HealResult, RefusalReason, refusal
from scrape_contracts.engine.heal.rows import NewRows, kept_row, new_rows, picked_row
from scrape_contracts.engine.heal.selectors import anchor_forms, reextracts, simple_forms
from scrape_contracts.engine.heal.spec import UNPARSEABLE, ItemPick

CONTAINER_DEPTH = 3  # ancestors of the list whose stable names may anchor it
CSS_CLASS = re.compile(r"^-?[A-Za-z_][\w-]*$")
UNKNOWN_ROWS = ("the rows of the last good page's list are not found on the new page (at least two, in one "
                "list that is the field's)")


def row_to_keep(ctx: Context) -> etree._Element | HealResult | None:
    """For a positional field without an item rule: the row its candidates must be in, or a refusal;
    None for a field that is not positional."""
    if ctx.rows is None or ctx.spec.item is not None:
        return None
    new = new_rows(ctx, ctx.rows)
    if new is None:
        return refusal(RefusalReason.ITEM_MOVED, f"{UNKNOWN_ROWS}: whether the field's item moved cannot be "
                       "told", 0, located=ctx.located.value)
    kept = kept_row(ctx.rows, new)
    if isinstance(kept, str):
        return refusal(RefusalReason.ITEM_MOVED, kept, len(new.rows), located=ctx.located.value,
                       moved={str(i + 1): j + 1 for i, j in new.moved.items()})
    return kept


def heal_item(ctx: Context) -> HealResult:
    """Heal a field whose contract names its item (first, last, newest, key), or refuse."""
    spec, after = ctx.spec, ctx.after
    rule = spec.item
    assert rule is not None
    extra: dict[str, Any] = {"located": ctx.located.value, "item": rule.pick.value}
    if ctx.rows is None:
        return refusal(RefusalReason.ITEM_NOT_FOUND, "the field is not in a list on the last good page (two "
                       "rows or more, each holding a value of the field's type)", 0, **extra)
    new = new_rows(ctx, ctx.rows)
    if new is None:
        return refusal(RefusalReason.ITEM_NOT_FOUND, UNKNOWN_ROWS, 0, **extra)
    picked = picked_row(ctx, new)
    if isinstance(picked, str):
        return refusal(RefusalReason.ITEM_NOT_FOUND, picked, len(new.rows), **extra)
    row, how = picked
    el = new.at(row)
    raw = after.raw_value(el, new.src)
    value = after.parse(spec, raw) if raw else UNPARSEABLE
    if value is UNPARSEABLE:
        return refusal(RefusalReason.ITEM_NOT_FOUND, f"the item's place holds {raw!r}, not a {spec.type}",
                       len(new.rows), **extra)
    # another item's value may differ from the last accepted one by any amount: only the contract's own
    # limits apply, not the healer's default change guard
    if spec.max_change_pct is None:
        ctx = replace(ctx, spec=replace(spec, before=None))
    problem = ctx.spec.violation(value, ctx.policy)
    if problem:
        return refusal(RefusalReason.VALUE_OUT_OF_RULES, f"the item's value {raw!r} is {problem}",
                       len(new.rows), **extra)
    selector = _item_selector(ctx, new, row, how, el, value)
    if selector is None:
        return refusal(RefusalReason.NO_STABLE_SELECTOR, "no stable selector names the list and the item's "
                       "place in it", len(new.rows), **extra)
    found = len(new.moved) / max(1, min(len(ctx.rows.values), len(new.rows)))
    evidence = {**extra, "strategy": "item", "reason": HEALED, "detail": None, "runner_up": None,
                "score": None, "candidates": len(new.rows), "row": new.rows.index(row) + 1,
                "rows_found": len(new.moved), "moved": {str(i + 1): j + 1 for i, j in new.moved.items()},
                "selector_kind": "item", "value_raw": raw}
    return HealResult(value, selector, round(0.5 + 0.5 * min(1.0, found), 4), evidence)


def _item_selector(ctx: Context, new: NewRows, row: etree._Element, how: ItemPick, el: etree._Element,
                   value: Any) -> str | None:
    """A selector for ``el`` that names the list, the row by its meaning, and the place in the row."""
    container = row.getparent()
    suffix = f"::attr({new.src[5:]})" if new.src.startswith("attr:") else ""
    position = new.rows.index(row)
    # below the row: the element's own stable form anywhere in it, else the child steps down to it
    inner = [f" {form}" for form in simple_forms(el, "") if "nth" not in form]
    inner.append("".join(f" > {step}" for step in _steps(row, new.path)))
    for anchor in _container_forms(ctx, container):
        if how is ItemPick.KEY:
            tries = [_key_xpath(anchor, row.tag, ctx.spec.item.key, new)]
        else:
            step = (f"{row.tag}:nth-of-type({position + 1})" if how is ItemPick.FIRST else
                    f"{row.tag}:nth-last-of-type({len(new.rows) - position})")
            tries = [f"{anchor} > {step}{form}{suffix}" for form in inner]
        for selector in tries:
            if selector and _picks(ctx, selector, el, value):
                return selector
    if how is ItemPick.KEY:
        return None
    # a list whose element has no stable name (only layout classes): a class every row carries names the
    # rows ("div.index-card"), their place among the container's children of their tag the row
    place = (f"nth-of-type({position + 1})" if how is ItemPick.FIRST else
             f"nth-last-of-type({len(new.rows) - position})")
    for cls in _shared_classes(ctx, new.rows):
        for form in inner:
            selector = f"{row.tag}.{cls}:{place}{form}{suffix}"
            if _picks(ctx, selector, el, value):
                return selector
    return None


def _shared_classes(ctx: Context, rows: tuple[etree._Element, ...]) -> list[str]:
    """Stable classes that every row of the list carries, usable as a plain CSS class."""
    shared = set(ctx.after.classes(rows[0]))
    for row in rows[1:]:
        shared &= set(ctx.after.classes(row))
    return sorted(c for c in shared if CSS_CLASS.match(c))


def _steps(row: etree._Element, path: tuple[tuple[str, int], ...]) -> list[str]:
    """CSS steps for ``path`` below ``row``: a plain tag where it is its parent's only one of that tag."""
    steps, cur = [], row
    for tag, index in path:
        same = [c for c in cur if c.tag == tag]
        steps.append(tag if len(same) == 1 else f"{tag}:nth-of-type({index + 1})")
        cur = same[index]
    return steps


def _container_forms(ctx: Context, container: etree._Element) -> list[str]:
    """Stable selectors matching exactly the list's element on the new page."""
    out = []
    for form in anchor_forms(container):
        if select_elements(ctx.after, form) == [container]:
            out.append(form)
    cur = container
    for _ in range(CONTAINER_DEPTH):
        cur = cur.getparent()
        if cur is None:
            break
        for form in anchor_forms(cur):
            combinator = " > " if cur is container.getparent() else " "
            nested = f"{form}{combinator}{container.tag}"
            if select_elements(ctx.after, nested) == [container]:
                out.append(nested)
    return out


def _key_xpath(anchor: str, tag: str, key: str | None, new: NewRows) -> str | None:
    if key is None or ('"' in key and "'" in key):
        return None
    literal = f'"{key}"' if '"' not in key else f"'{key}'"
    try:
        base = HTMLTranslator().css_to_xpath(anchor, prefix="//")
    except (CssSelectorError, ValueError):
        return None
    steps = "".join(f"/{t}[{i + 1}]" for t, i in new.path)
    source = f"/@{new.src[5:]}" if new.src.startswith("attr:") else ""
    return f"{base}/{tag}[.//*[normalize-space(.)={literal}]]{steps}{source}"


def _picks(ctx: Context, selector: str, el: etree._Element, value: Any) -> bool:
    element_sel, src = split_selector(selector)
    return select_elements(ctx.after, element_sel) == [el] and reextracts(ctx, selector, src, el, value)
