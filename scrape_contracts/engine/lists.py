"""Extraction of a record set: one record per item, on every page of a target, each with its key.

A target's pages are stored as one document (``join_pages``), so the artifact store, the unchanged
shortcut and the healer keep working on "the page" of a target. The set travels between stages and is
stored as one JSON object (``set_document``): its records, and the ones dropped under the tolerance.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from scrape_contracts.engine.extract import FieldLike, FieldProblem, base_of, chosen_selectors, extract_fields
from scrape_contracts.engine.limits import DEFAULT_LIMITS, LimitExceeded, Limits
from scrape_contracts.engine.select import SelectorBudget, parse_html, select

RECORD_KEY = "record_key"
RECORDS = "@records"  # keys no field can have (field names are identifiers)
DROPPED = "@dropped"
PAGES = "@pages"

_MARK = "<!--scrape-contracts:page {number} {url}-->\n"
_MARK_RE = re.compile(r"<!--scrape-contracts:page (\d+) (\S+)-->\n")


def join_pages(pages: Sequence[tuple[str, str]]) -> str:
    """One document of a target's pages ``(url, html)``; a single page stays exactly as it was fetched."""
    if len(pages) == 1:
        return pages[0][1]
    return "".join(_MARK.format(number=i, url=quote(url, safe=":/?&=%#@+,;~")) + html
                   for i, (url, html) in enumerate(pages, start=1))


def split_pages(document: str, url: str | None) -> list[tuple[str | None, str]]:
    """``join_pages`` undone: ``(url, html)`` of each page (``url`` for a document of one page)."""
    if not document.startswith("<!--scrape-contracts:page 1 "):
        return [(url, document)]
    parts = _MARK_RE.split(document)
    # ["", "1", url1, html1, "2", url2, html2, ...]
    return [(unquote(parts[i + 1]), parts[i + 2]) for i in range(1, len(parts) - 2, 3)]


@dataclass(frozen=True)
class ListExtraction:
    records: tuple[dict[str, Any], ...]  # each with its record_key first
    # set-level: the item selector found nothing, a field's selector broken on most items
    problems: tuple[FieldProblem, ...]
    pages: int
    items: int
    field_failures: dict[str, int]  # field → items where its selector failed


def record_key(record: Mapping[str, Any], key_fields: Sequence[str]) -> str:
    """The key fields' values joined by "|", or, with no key fields, a hash of every value: the same
    record gives the same key whatever the page's markup, so a healed selector keeps the keys."""
    if key_fields:
        return "|".join("" if record.get(name) is None else str(record[name]) for name in key_fields)
    canonical = json.dumps({k: v for k, v in record.items() if k != RECORD_KEY}, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def extract_records(document: str, fields: Mapping[str, FieldLike], selectors: Mapping[str, str],
                    item_selector: str, key_fields: Sequence[str], *, limits: Limits = DEFAULT_LIMITS,
                    page_url: str | None = None) -> ListExtraction:
    """Every item of every page: its fields read inside it (``selectors`` override the specs').

    The work is linear in the items: each page is measured once, an item's selectors are estimated on the
    item (``SelectorBudget.within``) and all of a page's items share its selector budget. A target with more
    than ``limits.list_max_items`` items is refused (a ``limit_exceeded`` problem on ``@item``)."""
    records: list[dict[str, Any]] = []
    failures: dict[str, int] = {name: 0 for name in fields}
    problems: list[FieldProblem] = []
    pages = split_pages(document, page_url)
    chosen = chosen_selectors(fields, selectors)
    for number, (url, html) in enumerate(pages, start=1):
        root = parse_html(html)
        budget = SelectorBudget(root, limits.selector_max_cost)
        try:
            items = [item for item in select(root, item_selector, budget)
                     if not isinstance(item.root, str)]  # a text or attribute match is not an item
            if len(records) + len(items) > limits.list_max_items:
                raise LimitExceeded("list_max_items", limits.list_max_items,
                                    f"the target has more than {limits.list_max_items:,} items "
                                    f"({len(records) + len(items):,} on its first {number} page(s))")
        except LimitExceeded as exc:
            return _refused(exc, len(pages), failures)
        base = base_of(root, url) if any(f.type == "url" for f in fields.values()) else url
        for item in items:
            extraction = extract_fields(item, fields, chosen, budget=budget.within(item), base_url=base,
                                        limits=limits)
            if budget.exhausted:
                # the check that crossed the page's budget is this item's last limit_exceeded problem
                spent = next(p for p in reversed(extraction.problems) if p.kind == "limit_exceeded")
                return _refused(spent.message, len(pages), failures)
            for problem in extraction.problems:
                failures[problem.field] += 1
            record = dict(extraction.record)
            records.append({RECORD_KEY: record_key(record, key_fields), **record})
    if not records:
        problems.append(FieldProblem(
            "@item", "no_match", f"item selector {item_selector!r} matched nothing on {len(pages)} page(s)"))
    else:
        for name, failed in failures.items():
            # a selector broken on most items is broken, not a few records lacking a value
            if failed * 2 > len(records):
                shown = selectors.get(name) or fields[name].selector
                problems.append(FieldProblem(
                    name, "no_match", f"selector {shown!r} failed on {failed} of {len(records)} items", failed))
    return ListExtraction(tuple(records), tuple(problems), len(pages), len(records), failures)


def _refused(reason: LimitExceeded | str, pages: int, failures: dict[str, int]) -> ListExtraction:
    """No set at all: a bound was hit, and a part of the list is not the list."""
    return ListExtraction((), (FieldProblem("@item", "limit_exceeded", str(reason)),), pages, 0, failures)


def set_document(records: Sequence[Mapping[str, Any]], dropped: Sequence[Mapping[str, Any]] = (),
                 pages: int = 1) -> dict[str, Any]:
    """The stored form of a set: what a candidate and an accepted version of a list target hold."""
    return {RECORDS: [dict(r) for r in records], DROPPED: [dict(d) for d in dropped], PAGES: pages}


def is_set(record: Mapping[str, Any] | None) -> bool:
    return isinstance(record, Mapping) and RECORDS in record


def set_records(record: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The records of a stored set (none for anything else)."""
    return list(record.get(RECORDS) or []) if is_set(record) else []


def set_dropped(record: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    return list(record.get(DROPPED) or []) if is_set(record) else []
