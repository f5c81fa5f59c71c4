"""Change kinds: how the after page's style and data derive from the before page's."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from scrape_contracts.testing.mutations.fields import KindDef
from scrape_contracts.testing.mutations.render import Mods
from scrape_contracts.testing.mutations.style import Style, css_class, field_slug


@dataclass(frozen=True)
class Change:
    after_style: Style
    after_data: dict[str, Any]
    prefs: tuple[str, ...]
    mods: Mods = Mods()
    targeted: tuple[str, ...] = ()
    refuse: tuple[str, ...] = ()  # still on the page, but no heal may return it (its value broke the rules)
    earlier: bool = False  # the after page is an earlier layout: its selectors are known (a heal's history)
    typed: bool = False  # date fields typed as dates, links of bylines as url fields


class NotApplicable(Exception):
    """This change kind needs something this page kind lacks (a contract change limit, a decoy value)."""


def _shuffled(rng: random.Random, order: tuple[int, ...]) -> tuple[int, ...]:
    if len(order) < 2:
        return order
    new = list(order)
    while tuple(new) == order:
        rng.shuffle(new)
    return tuple(new)


def _change_values(
    rng: random.Random, kind: KindDef, data: dict[str, Any], names: Sequence[str]
) -> dict[str, Any]:
    values = dict(data["values"])
    for fd in kind.fields:
        if fd.name not in names:
            continue
        v = values[fd.name]
        limit = fd.rules.get("max_change_pct", 50) / 100.0
        if fd.type == "price":
            factor = 1 + rng.choice((-1, 1)) * rng.uniform(0.03, 0.8 * limit)
            values[fd.name] = (
                round(v * factor, 2)
                if not float(v).is_integer()
                else float(round(v * factor, -2 if v > 10_000 else 0))
            )
        elif fd.type == "number":
            values[fd.name] = round(min(5.0, max(1.0, v + rng.choice((-0.3, -0.2, -0.1, 0.1, 0.2)))), 1)
        elif fd.type == "integer":
            if fd.name in ("year_built",):
                continue
            delta = max(1, int(v * rng.uniform(0.05, 0.3)))
            values[fd.name] = v + delta if fd.name != "seats_left" else max(1, v - delta)
        elif fd.type == "boolean":
            values[fd.name] = not v if rng.random() < 0.3 else v
        elif fd.role == "title" and rng.random() < 0.3:
            values[fd.name] = f"{v} ({rng.choice(('Updated', '2025 Edition', 'Reduced', 'Remote OK'))})"
    return {**data, "values": values}


def _restyle(rng: random.Random, style: Style) -> Style:
    """A full redesign: new vocabulary, naming, ids, markup, order and layout; the data stays."""
    return replace(
        style,
        vocab=(style.vocab + rng.randint(1, 3)) % 4,
        naming=rng.choice(("semantic", "bem", "hashed", "utility")),
        salt=style.salt + "r",
        ids=rng.choice(("none", "semantic", "random")),
        id_vocab=(style.id_vocab + 1) % 4,
        testids=style.testids if rng.random() < 0.6 else not style.testids,
        testid_vocab=style.testid_vocab,
        microdata=rng.choice(("none", "inline", "meta")),
        jsonld=rng.random() < 0.5,
        og=rng.random() < 0.5,
        facts=rng.choice([f for f in ("dl", "table", "ul", "divs", "inline") if f != style.facts]),
        hero_labels=not style.hero_labels,
        labels=rng.choice((0, 1, 2)),
        wrappers=rng.choice((0, 1, 2)),
        fact_order=_shuffled(rng, style.fact_order),
        hero_order=_shuffled(rng, style.hero_order),
        byline_order=_shuffled(rng, style.byline_order),
        value_tag=rng.choice([t for t in ("span", "strong", "div", "p") if t != style.value_tag]),
        layout=rng.choice([x for x in ("classic", "sidebar", "top") if x != style.layout]),
        related_markup=rng.choice(("ul", "divs", "table")),
        block=rng.choice(("pdp", "listing", "detail", "page")),
        card_vocab=rng.choice(("card", "tile", "teaser")),
        title_wrap=not style.title_wrap,
    )


def make_change(
    change: str, rng: random.Random, kind: KindDef, data: dict[str, Any], before: Style
) -> tuple[Style, Change]:
    """(before style adjusted so the author's selector depends on what changes, the change)."""
    structural = ("renamed_ids", "hashed_classes", "changed_tags", "moved_section")
    if change == "renamed_ids":
        before = replace(before, ids="semantic")
        after = replace(
            before, ids=rng.choice(("random", "semantic")), id_vocab=before.id_vocab + rng.randint(1, 3)
        )
        return before, Change(after, data, ("id",))
    if change == "hashed_classes":
        before = replace(before, naming=rng.choice(("semantic", "bem")))
        return before, Change(
            replace(before, naming="hashed", salt=before.salt + "h"), data, ("class", "tagclass")
        )
    if change == "inserted_wrappers":
        before = replace(before, wrappers=0, naming=rng.choice(("semantic", "bem")))
        return before, Change(replace(before, wrappers=rng.choice((1, 2))), data, ("child",))
    if change == "reordered_siblings":
        before = replace(before, naming=rng.choice(("semantic", "bem", "hashed")))
        after = replace(
            before,
            fact_order=_shuffled(rng, before.fact_order),
            hero_order=_shuffled(rng, before.hero_order),
            byline_order=_shuffled(rng, before.byline_order),
        )
        return before, Change(after, data, ("positional",))
    if change == "changed_tags":
        before = replace(before, naming=rng.choice(("semantic", "bem")))
        after = replace(
            before,
            value_tag=rng.choice([t for t in ("span", "strong", "div", "p") if t != before.value_tag]),
            facts=rng.choice([f for f in ("dl", "table", "ul", "divs") if f != before.facts]),
        )
        return before, Change(after, data, ("tagclass", "child"))
    if change == "moved_section":
        before = replace(before, naming=rng.choice(("semantic", "bem")))
        layouts = [x for x in ("classic", "sidebar", "top") if x != before.layout]
        after = replace(
            before,
            layout=rng.choice(layouts),
            wrappers=before.wrappers + rng.choice((0, 1)),
            related_layout="aside" if before.related_layout == "after" else "after",
        )
        return before, Change(after, data, ("path", "child"))
    if change == "reworded_labels":
        before = replace(before, labels=0, hero_labels=True, facts=rng.choice(("dl", "table", "ul", "divs")))
        after = replace(before, labels=rng.randint(1, 3))
        if rng.random() < 0.5:
            after = replace(after, naming="hashed", salt=before.salt + "w")
        return before, Change(after, data, ("label", "positional"))
    if change == "value_changed":
        sub = rng.choice(structural)
        before, inner = make_change(sub, rng, kind, data, before)
        names = [f.name for f in kind.fields]
        return before, replace(inner, after_data=_change_values(rng, kind, data, names))
    if change == "decoy_at_old":
        name = kind.decoy_field or "comment_count"
        before = replace(before, naming=rng.choice(("semantic", "bem")), old_price=False, wrappers=0)
        after_data = _change_values(rng, kind, data, [name]) if rng.random() < 0.5 else data
        fd = next(f for f in kind.fields if f.name == name)
        tag = before.value_tag if fd.role == "hero" else "span"
        mods = Mods(
            decoy_at_old=name,
            decoy_variant=rng.randrange(3),
            old_classes=css_class(before, field_slug(fd, before.vocab)),
            old_tag=tag,
        )
        if not data["decoy"].get(name):
            mods = replace(mods, decoy_variant=2)
        return before, Change(before, after_data, ("class",), mods, (name,))
    if change == "removed_field":
        candidates = [f.name for f in kind.fields if f.role != "title"]
        name = rng.choice(candidates)
        after, prefs = before, ("class", "id", "testid", "label")
        if rng.random() < 0.5:
            before, inner = make_change(rng.choice(structural), rng, kind, data, before)
            after, prefs = inner.after_style, inner.prefs
        return before, Change(after, data, prefs, Mods(removed=frozenset({name})), (name,))
    if change == "redesign":
        return before, Change(
            _restyle(rng, before), data, (rng.choice(("class", "id", "path", "positional", "label")),)
        )
    if change == "decoy_only":
        name = kind.decoy_field or rng.choice([f.name for f in kind.fields if f.role == "byline"])
        before = replace(before, related_heading=before.related_heading if before.related_heading >= 0 else 0)
        after = replace(before, old_price=before.old_price or rng.random() < 0.5)
        return before, Change(after, data, ("class", "id", "path"), Mods(removed=frozenset({name})), (name,))
    if change == "value_beyond_limit":
        # the value moved past max_change_pct: a data change for review, never something to heal around
        candidates = [f for f in kind.fields if "max_change_pct" in f.rules]
        if not candidates:
            raise NotApplicable(change)
        fd = rng.choice(candidates)
        values = dict(data["values"])
        limit = fd.rules["max_change_pct"] / 100.0
        factor = rng.choice((1 - min(0.9, limit + rng.uniform(0.1, 0.3)), 1 + limit + rng.uniform(0.1, 0.6)))
        values[fd.name] = round(values[fd.name] * factor, 2)
        after, prefs = before, ("class", "id", "testid")
        if rng.random() < 0.5:
            before, inner = make_change(rng.choice(structural), rng, kind, data, before)
            after, prefs = inner.after_style, inner.prefs
        after_data = {**data, "values": values}
        return before, Change(after, after_data, prefs, targeted=(fd.name,), refuse=(fd.name,))
    if change == "duplicate_matches":
        before = replace(
            before, naming=rng.choice(("semantic", "bem")), card_vocab=rng.choice(("card", "tile"))
        )
        return before, Change(replace(before, card_vocab=""), data, ("class",))
    if change == "jsonld_redesign":
        # everything that names a value is redesigned away; only the JSON-LD document stays
        before = replace(before, jsonld=True)
        after = replace(_restyle(rng, before), jsonld=True, microdata="none", testids=False, og=False,
                        ids=rng.choice(("none", "random")), naming=rng.choice(("hashed", "utility")))
        prefs = (rng.choice(("class", "id", "path", "positional")),)
        if rng.random() < 0.35:
            # one field is gone from the page, its value still in the JSON-LD: nothing shows it any more
            name = rng.choice([f.name for f in kind.fields if f.role != "title"])
            mods = Mods(removed=frozenset({name}), ld_keeps_removed=True)
            return before, Change(after, data, prefs, mods, (name,))
        return before, Change(after, data, prefs)
    if change == "moved_value_changed":
        before, inner = make_change("moved_section", rng, kind, data, before)
        names = [f.name for f in kind.fields]
        return before, replace(inner, after_data=_change_values(rng, kind, data, names))
    if change == "translated_labels":
        before = replace(before, labels=0, hero_labels=True, facts=rng.choice(("dl", "table", "ul", "divs")))
        after = replace(before, lang=rng.choice(("de", "fr", "es")))
        if rng.random() < 0.5:
            after = replace(after, naming="hashed", salt=before.salt + "t")
        if rng.random() < 0.25:
            name = rng.choice([f.name for f in kind.fields if f.role != "title"])
            removed = Mods(removed=frozenset({name}))
            return before, Change(after, data, ("label", "positional", "class"), removed, (name,))
        return before, Change(after, data, ("label", "positional", "class"))
    if change == "layout_reverted":
        # the site went A -> B (the selectors were healed on B) -> A again: B is the last good page, A's
        # selectors are in the selector history
        sub = rng.choice((*structural, "redesign"))
        original, inner = make_change(sub, rng, kind, data, before)
        return inner.after_style, Change(original, data, inner.prefs, earlier=True)
    if change == "dates_and_links":
        if not any(f.name in DATE_FIELDS for f in kind.fields):
            raise NotApplicable(change)
        before, inner = make_change(rng.choice((*structural, "redesign")), rng, kind, data, before)
        return before, replace(inner, typed=True)
    raise ValueError(f"unknown change kind {change!r}")


# string fields holding a date, typed "date" by the dates_and_links change; bylines linking a profile
DATE_FIELDS = frozenset({"review_date", "posted", "published"})
LINK_FIELDS = frozenset({"reviewer", "author", "company"})
