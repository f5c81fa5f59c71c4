"""Building cases: before/after pages, the author's selectors, the fields the pipeline would heal, and
the expected outcome per field."""

from __future__ import annotations

import random
from dataclasses import replace
from collections.abc import Sequence
from typing import Any

from scrape_contracts.engine.extract import ValueParseError, parse_value
from scrape_contracts.engine.select import node_text, parse_html, select
from scrape_contracts.testing.mutations.author import author_selector, strip_marks
from scrape_contracts.testing.mutations.case import CHANGE_KINDS, PAGE_KINDS, PAGE_URL, REFUSE, HealCase
from scrape_contracts.testing.mutations.changes import DATE_FIELDS, LINK_FIELDS, NotApplicable, make_change
from scrape_contracts.testing.mutations.fields import FieldDef
from scrape_contracts.testing.mutations.kinds import KINDS
from scrape_contracts.testing.mutations.render import Mods, Renderer
from scrape_contracts.testing.mutations.style import random_style


def _field_spec(fd: FieldDef, selector: str, before_value: Any, data: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": selector, "before": before_value, "type": fd.type}
    for key in ("min", "max", "max_change_pct"):
        if key in fd.rules:
            spec[key] = fd.rules[key]
    if fd.name == "sku":
        spec["expected"] = data["values"]["sku"]
    return spec


def _read(html: str, name: str, fd: FieldDef) -> Any:
    nodes = select(parse_html(html), f'[data-hc="{name}"]')
    if len(nodes) != 1:
        return REFUSE
    return parse_value(node_text(nodes[0]), fd.type, base_url=PAGE_URL)


def _read_link(html: str, name: str) -> Any:
    nodes = select(parse_html(html), f'[data-hc="{name}"]::attr(href)')
    if len(nodes) != 1:
        return REFUSE
    return parse_value(node_text(nodes[0]), "url", base_url=PAGE_URL)


def _href(selector: str) -> str:
    return selector + ("/@href" if selector.startswith("/") else "::attr(href)")


def _triggered(after_html: str, spec: dict[str, Any]) -> bool:
    """Would the pipeline call the healer: no match, several values, unparseable, or a rule violation."""
    try:
        texts = [node_text(n) for n in select(parse_html(after_html), spec["selector"])]
    except Exception:  # noqa: BLE001
        return True
    texts = [t for t in texts if t]
    if not texts or len(set(texts)) > 1:
        return True
    try:
        value = parse_value(texts[0], spec["type"], base_url=PAGE_URL)
    except ValueParseError:
        return True
    if "expected" in spec and value != spec["expected"]:
        return True
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "min" in spec and value < spec["min"] or "max" in spec and value > spec["max"]:
            return True
        before = spec["before"]
        if "max_change_pct" in spec and before:
            if abs(value - before) / abs(before) * 100 > spec["max_change_pct"]:
                return True
    return False


def build_case(kind_name: str, change: str, seed: int) -> HealCase | None:
    rng = random.Random(f"{kind_name}/{change}/{seed}")
    kind = KINDS[kind_name]
    data = kind.make(rng)
    try:
        before_style, ch = make_change(change, rng, kind, data, random_style(rng, kind))
    except NotApplicable:
        return None
    before_marked = Renderer(kind, data, before_style, Mods()).page()
    after_marked = Renderer(kind, ch.after_data, ch.after_style, ch.mods).page()
    before_html, after_html = strip_marks(before_marked), strip_marks(after_marked)
    fields: dict[str, dict[str, Any]] = {}
    expected: dict[str, Any] = {}
    for fd in kind.fields:
        if ch.typed and fd.name in DATE_FIELDS:
            fd = replace(fd, type="date")
        prefs = ch.prefs
        if rng.random() < 0.15:
            prefs = ("text", *prefs)
        selector = author_selector(before_marked, fd.name, prefs)
        before_value = _read(before_marked, fd.name, fd)
        spec = _field_spec(fd, selector, before_value, data)
        if ch.earlier:
            # the after page's layout is an earlier one: its selector is in the contract's selector history
            spec["earlier"] = [author_selector(after_marked, fd.name, prefs)]
        if fd.name not in ch.targeted and not _triggered(after_html, spec):
            continue
        fields[fd.name] = spec
        expected[fd.name] = REFUSE if fd.name in ch.refuse else _read(after_marked, fd.name, fd)
    for fd in kind.fields:
        if not ch.typed or fd.name not in LINK_FIELDS:
            continue
        name = f"{fd.name}_url"
        selector = _href(author_selector(before_marked, fd.name, ch.prefs))
        spec = {"selector": selector, "before": _read_link(before_marked, fd.name), "type": "url"}
        if _triggered(after_html, spec):
            fields[name] = spec
            expected[name] = _read_link(after_marked, fd.name)
    if not fields:
        return None
    return HealCase(
        f"{kind_name}-{change}-{seed}",
        kind_name,
        change,
        before_html,
        after_html,
        fields,
        expected,
        ch.targeted,
    )


def build_cases(
    seeds: Sequence[int] = range(4), kinds: Sequence[str] = PAGE_KINDS, changes: Sequence[str] = CHANGE_KINDS
) -> list[HealCase]:
    """The suite: every page kind x change kind x seed that yields at least one field to heal."""
    cases = []
    for kind in kinds:
        for change in changes:
            for seed in seeds:
                case = build_case(kind, change, seed)
                if case is not None:
                    cases.append(case)
    return cases
