"""A page's markup style (class naming, ids, test ids, microdata, labels, wrappers, order) and names."""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from scrape_contracts.testing.mutations.fields import FieldDef, KindDef


@dataclass(frozen=True)
class Style:
    vocab: int = 0
    naming: str = "semantic"  # semantic | bem | hashed | utility
    salt: str = "s0"
    ids: str = "none"  # none | semantic | random
    id_vocab: int = 0
    testids: bool = False
    testid_vocab: int = 0
    microdata: str = "none"  # none | inline | meta
    jsonld: bool = False
    og: bool = False
    facts: str = "dl"  # dl | table | ul | divs | inline
    hero_labels: bool = False
    labels: int = 0
    wrappers: int = 0
    fact_order: tuple[int, ...] = ()
    hero_order: tuple[int, ...] = ()
    byline_order: tuple[int, ...] = ()
    value_tag: str = "span"
    layout: str = "classic"  # classic | sidebar | top
    related_heading: int = 0
    related_markup: str = "ul"  # ul | divs | table
    related_layout: str = "after"  # after | aside
    old_price: bool = False
    fmt: int = 0
    noise: int = 1
    block: str = "pdp"
    card_vocab: str = "card"  # related cards' value class prefix; "" = same classes as the main values
    title_wrap: bool = False
    lang: str = "en"  # en | de | fr | es: the language of the field labels


def random_style(rng: random.Random, kind: KindDef) -> Style:
    n_facts = len(role_fields(kind, "fact")) + 4
    n_hero = len(role_fields(kind, "hero")) + 1
    n_byline = len(role_fields(kind, "byline"))
    return Style(
        vocab=rng.randrange(4),
        naming=rng.choice(("semantic", "semantic", "bem", "hashed", "utility")),
        salt=f"s{rng.randrange(10**6)}",
        ids=rng.choice(("none", "none", "semantic", "random")),
        id_vocab=rng.randrange(4),
        testids=rng.random() < 0.3,
        testid_vocab=rng.randrange(4),
        microdata=rng.choice(("none", "none", "inline", "meta")),
        jsonld=rng.random() < 0.4,
        og=rng.random() < 0.4,
        facts=rng.choice(("dl", "table", "ul", "divs", "inline")),
        hero_labels=rng.random() < 0.5,
        labels=0,
        wrappers=rng.choice((0, 0, 1)),
        fact_order=tuple(rng.sample(range(n_facts), n_facts)),
        hero_order=tuple(rng.sample(range(n_hero), n_hero)),
        byline_order=tuple(rng.sample(range(n_byline), n_byline)),
        value_tag=rng.choice(("span", "span", "strong", "div", "p")),
        layout=rng.choice(("classic", "sidebar", "top")),
        related_heading=rng.randrange(8) if rng.random() < 0.9 else -1,
        related_markup=rng.choice(("ul", "divs", "table")),
        related_layout=rng.choice(("after", "after", "aside")),
        old_price=rng.random() < 0.4,
        fmt=rng.randrange(6),
        noise=rng.randint(1, 3),
        block=rng.choice(("pdp", "listing", "detail", "page", "item")),
        card_vocab=rng.choice(("card", "tile", "teaser")),
        title_wrap=rng.random() < 0.3,
    )


def role_fields(kind: KindDef, role: str) -> list[FieldDef]:
    return [f for f in kind.fields if f.role == role]


def digest(*parts: str) -> str:
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def _hashed(salt: str, name: str) -> str:
    d = digest(salt, name)
    family = int(digest(salt)[:2], 16) % 5
    b36 = "".join("0123456789abcdefghijklmnopqrstuvwxyz"[int(d[i : i + 2], 16) % 36] for i in range(0, 14, 2))
    if family == 0:
        return f"css-{b36[:6]}"
    if family == 1:
        letters = "".join(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[int(d[i : i + 2], 16) % 52]
            for i in range(14, 26, 2)
        )
        return f"sc-{letters[:5]} {letters[1:] + 'T'}"
    if family == 2:
        pascal = "".join(p.capitalize() for p in name.split("-"))
        return f"{pascal}_root__{b36[:5]}"
    if family == 3:
        return f"jsx-{int(d[:8], 16) % 10**7}"
    return f"e{b36[:6]}{int(d[8], 16) % 10}"


_UTILITY = tuple(
    "text-lg font-semibold|text-sm text-gray-600|mt-2 flex items-center|font-bold text-2xl|px-4 py-2|"
    "text-base leading-6|inline-flex gap-1|block mb-1|text-xs uppercase tracking-wide".split("|")
)


def css_class(style: Style, name: str) -> str:
    if style.naming == "semantic":
        return name
    if style.naming == "bem":
        return f"{style.block}__{name}"
    if style.naming == "hashed":
        return _hashed(style.salt, name)
    return _UTILITY[int(digest(style.salt, name)[:4], 16) % len(_UTILITY)]


def field_slug(fd: FieldDef, index: int) -> str:
    return fd.slugs[index % len(fd.slugs)]


def id_attr(style: Style, fd: FieldDef) -> str | None:
    if style.ids == "none":
        return None
    if style.ids == "semantic":
        return field_slug(fd, style.id_vocab)
    d = digest(style.salt, "id", fd.name)
    return "".join(
        "abcdefghijklmnopqrstuvwxyz0123456789"[int(d[i : i + 2], 16) % 36] for i in range(0, 12, 2)
    )
