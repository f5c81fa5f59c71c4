"""Rendering a page kind's data through a style into HTML, with content changes (removed fields, decoys)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scrape_contracts.testing.mutations.case import PAGE_KINDS
from scrape_contracts.testing.mutations.fields import FieldDef, KindDef, display_text
from scrape_contracts.testing.mutations.style import (
    Style,
    css_class,
    digest,
    field_slug,
    id_attr,
    role_fields,
)
from scrape_contracts.testing.mutations.words import MONTHS, RELATED_HEADINGS, SITE_NAMES, TRANSLATED_LABELS


@dataclass(frozen=True)
class Mods:
    """Content changes on top of a style: removed fields, a decoy where a field used to be."""

    removed: frozenset[str] = frozenset()
    decoy_at_old: str | None = None  # field whose old classes now sit on a decoy; the field moves
    decoy_variant: int = 0
    old_classes: str = ""  # the class attribute the decoy inherits
    old_tag: str = "span"
    ld_keeps_removed: bool = False  # a removed field's value stays in the JSON-LD (it must not be healed to)


def _attrs(pairs: Sequence[tuple[str, str | None]]) -> str:
    return "".join(f' {k}="{v}"' if v != "" else f" {k}" for k, v in pairs if v is not None)


class Renderer:
    def __init__(self, kind: KindDef, data: dict[str, Any], style: Style, mods: Mods) -> None:
        self.kind, self.data, self.style, self.mods = kind, data, style, mods
        self.values = data["values"]

    def c(self, name: str) -> str:
        return css_class(self.style, name)

    def label(self, fd: FieldDef) -> str:
        if self.style.lang != "en" and fd.name in TRANSLATED_LABELS:
            return TRANSLATED_LABELS[fd.name][self.style.lang]
        return fd.labels[self.style.labels % len(fd.labels)]

    def value_el(self, fd: FieldDef, text: str, tag: str | None = None, moved: bool = False) -> str:
        s = self.style
        tag = tag or s.value_tag
        slug = field_slug(fd, s.vocab)
        cls = self.c(f"{slug}-now" if moved else slug)
        pairs: list[tuple[str, str | None]] = [("class", cls), ("id", id_attr(s, fd) if not moved else None)]
        if s.testids:
            testid = f"{self.kind.name.replace('_', '-')}-{field_slug(fd, s.testid_vocab)}"
            pairs.append(("data-testid", testid))
        if s.microdata == "inline" and fd.itemprop:
            pairs.append(("itemprop", fd.itemprop))
        pairs.append(("data-hc", fd.name))
        return f"<{tag}{_attrs(pairs)}>{text}</{tag}>"

    def wrap(self, html: str, depth: int) -> str:
        for i in range(depth):
            html = f'<div class="{self.c(f"wrap-{i}")}">{html}</div>'
        return html

    def display(self, fd: FieldDef, inline: bool = False) -> str:
        return display_text(fd, self.values[fd.name], self.style.fmt, inline)

    # blocks

    def title(self) -> str:
        fd = next(f for f in self.kind.fields if f.role == "title")
        if fd.name in self.mods.removed:
            return ""
        el = self.value_el(fd, self.values[fd.name], tag="h1")
        if self.style.title_wrap:
            el = f'<div class="{self.c("title-wrap")}">{el}<span class="{self.c("badge")}">New</span></div>'
        return el

    def hero(self) -> str:
        s = self.style
        pieces: list[str] = []
        for fd in role_fields(self.kind, "hero"):
            if fd.name in self.mods.removed:
                continue
            if self.mods.decoy_at_old == fd.name:
                pieces.append(self.decoy_piece(fd))
                continue
            text = self.display(fd)
            label = f'<span class="{self.c("label")}">{self.label(fd)}:</span> ' if s.hero_labels else ""
            value = self.wrap(self.value_el(fd, text), s.wrappers)
            extra = ""
            if fd.name == self.kind.decoy_field and s.old_price and fd.name in self.data["decoy"]:
                was = display_text(fd, self.data["decoy"][fd.name], s.fmt)
                extra = f' <del class="{self.c("old-" + field_slug(fd, s.vocab))}">{was}</del>'
            box = self.c(field_slug(fd, s.vocab) + "-box")
            pieces.append(f'<div class="{box}">{label}{value}{extra}</div>')
        cta = "Add to cart" if self.kind.name == "product" else "Contact"
        pieces.append(f'<button class="{self.c("cta")}">{cta}</button>')
        order = [i for i in s.hero_order if i < len(pieces)] or list(range(len(pieces)))
        ordered = [pieces[i] for i in order] + [p for i, p in enumerate(pieces) if i not in order]
        inner = "".join(ordered)
        if s.microdata == "meta":
            for fd in role_fields(self.kind, "hero"):
                if (
                    fd.itemprop
                    and fd.type in ("price", "number")
                    and fd.name not in self.mods.removed
                    and self.mods.decoy_at_old != fd.name
                ):
                    inner += f'<meta itemprop="{fd.itemprop}" content="{self.values[fd.name]}">'
        return f'<section class="{self.c("summary")}">{inner}</section>'

    def decoy_piece(self, fd: FieldDef) -> str:
        """The old element's classes now on a decoy; the real value moves to a new element nearby."""
        s = self.style
        real = self.value_el(fd, self.display(fd), moved=True)
        decoy_value = self.data["decoy"].get(fd.name)
        tag, cls = self.mods.old_tag, self.mods.old_classes
        variant = self.mods.decoy_variant % 3
        if variant == 0 and decoy_value is not None:
            decoy = f'<del class="{cls}">{display_text(fd, decoy_value, s.fmt)}</del>'
            return f'<div class="{self.c("price-block")}">{decoy} {real}</div>'
        if variant == 1 and decoy_value is not None:
            decoy = (
                f'<{tag} class="{cls}"><span class="{self.c("lbl")}">Was</span> '
                f"{display_text(fd, decoy_value, s.fmt)}</{tag}>"
            )
            return (
                f'<div class="{self.c("price-block")}"><div class="{self.c("now")}">{real}</div>{decoy}</div>'
            )
        rel = self.data["related"][0]
        heading = RELATED_HEADINGS[self.kind.name][
            (s.related_heading + 1) % len(RELATED_HEADINGS[self.kind.name])
        ]
        teaser = (
            f'<div class="{self.c("teaser")}"><h3>{heading}</h3><a href="/item/{digest(str(rel))[:6]}">'
            f"{next(iter(rel.values()))}</a> "
            f'<{tag} class="{cls}">{display_text(fd, rel[fd.name], s.fmt)}</{tag}></div>'
        )
        return f'{teaser}<div class="{self.c("headline-price")}">{real}</div>'

    def facts(self) -> str:
        s = self.style
        rows: list[tuple[str, str, FieldDef | None]] = []
        for fd in role_fields(self.kind, "fact"):
            if fd.name not in self.mods.removed:
                rows.append((self.label(fd), self.display(fd, inline=s.facts == "inline"), fd))
        for label, value in self.data["noise_facts"][: 1 + s.noise]:
            rows.append((label, value, None))
        order = [i for i in s.fact_order if i < len(rows)] + [
            i for i in range(len(rows)) if i not in s.fact_order
        ]
        rows = [rows[i] for i in order]
        if not rows:
            return ""
        out: list[str] = []
        for label, value, fd in rows:
            v = (
                self.value_el(fd, value, tag=self.fact_tag())
                if fd
                else f'<{self.fact_tag()} class="{self.c("fact-value")}">{value}</{self.fact_tag()}>'
            )
            if s.facts == "dl":
                v = (
                    self.value_el(fd, value, tag="dd")
                    if fd
                    else f'<dd class="{self.c("fact-value")}">{value}</dd>'
                )
                out.append(f'<dt class="{self.c("fact-label")}">{label}</dt>{v}')
            elif s.facts == "table":
                v = self.value_el(fd, value, tag="td") if fd else f"<td>{value}</td>"
                out.append(f'<tr><th scope="row">{label}</th>{v}</tr>')
            elif s.facts == "ul":
                label_el = f'<span class="{self.c("fact-label")}">{label}:</span>'
                out.append(f'<li class="{self.c("fact")}">{label_el} {v}</li>')
            elif s.facts == "divs":
                out.append(
                    f'<div class="{self.c("fact")}"><div class="{self.c("fact-label")}">{label}</div>'
                    f'<div class="{self.c("fact-body")}">{self.wrap(v, s.wrappers)}</div></div>'
                )
            else:
                inline_label = "" if fd and fd.unit and fd.unit in value else f"{label}: "
                out.append(f"<li>{inline_label}{v}</li>" if not fd else f"<li>{inline_label}{v}</li>")
        tag = {"dl": "dl", "table": "table", "ul": "ul", "divs": "div", "inline": "ul"}[s.facts]
        body = "".join(out)
        if tag == "table":
            body = f"<tbody>{body}</tbody>"
        title = ("Details", "Key facts", "Overview", "Specifications")[s.vocab % 4]
        heading = f'<h2 class="{self.c("section-title")}">{title}</h2>'
        facts = f'<{tag} class="{self.c("facts")}">{body}</{tag}>'
        return f'<section class="{self.c("facts-section")}">{heading}{facts}</section>'

    def fact_tag(self) -> str:
        return {"span": "span", "strong": "strong", "div": "span", "p": "b"}[self.style.value_tag]

    def byline(self) -> str:
        s = self.style
        parts: list[str] = []
        for fd in role_fields(self.kind, "byline"):
            if fd.name in self.mods.removed:
                continue
            if self.mods.decoy_at_old == fd.name:
                parts.append(self.decoy_piece(fd))
                continue
            text = self.display(fd, inline=True)
            if fd.name in ("published", "review_date"):
                el = self.value_el(fd, text, tag="time")
                el = el.replace("<time", f'<time datetime="{_iso(text)}"', 1)
            elif fd.name in ("author", "reviewer", "company"):
                el = self.value_el(fd, text, tag="a").replace(
                    "<a", f'<a href="/people/{digest(text)[:6]}"', 1
                )
            else:
                el = self.value_el(fd, text)
            lead = f"{self.label(fd)} " if s.hero_labels or fd.name in ("author", "reviewer") else ""
            if lead and not lead.strip().endswith(("By", "by", "From", "Von", "Par", "Por")):
                lead = f"{self.label(fd)}: "
            parts.append(f'<span class="{self.c("byline-item")}">{lead}{el}</span>')
        order = [i for i in s.byline_order if i < len(parts)] + [
            i for i in range(len(parts)) if i not in s.byline_order
        ]
        parts = [parts[i] for i in order]
        if not parts:
            return ""
        sep = f' <span class="{self.c("sep")}">·</span> '
        return f'<div class="{self.c("byline")}">{sep.join(parts)}</div>'

    def description(self) -> str:
        texts = self.data["texts"][: 1 + self.style.noise]
        body = "".join(f"<p>{t}</p>" for t in texts)
        title = ("Description", "About", "Details", "Summary")[self.style.noise % 4]
        return f'<section class="{self.c("description")}"><h2>{title}</h2>{body}</section>'

    def related(self) -> str:
        s = self.style
        items = self.data["related"]
        heading = ""
        if s.related_heading >= 0:
            heads = RELATED_HEADINGS[self.kind.name]
            heading = f"<h2>{heads[s.related_heading % len(heads)]}</h2>"
        cards: list[str] = []
        for i, item in enumerate(items):
            cells: list[str] = []
            for fname in self.kind.card_fields:
                fd = next(f for f in self.kind.fields if f.name == fname)
                text = display_text(fd, item[fname], s.fmt, inline=True)
                slug = field_slug(fd, s.vocab)
                cls = self.c(slug) if not s.card_vocab else self.c(f"{s.card_vocab}-{slug}")
                if fd.role == "title":
                    link_cls = self.c((s.card_vocab or "card") + "-link")
                    href = f"/item/{i}-{digest(text)[:5]}"
                    cells.append(f'<a href="{href}" class="{link_cls}"><h3 class="{cls}">{text}</h3></a>')
                else:
                    cells.append(f'<span class="{cls}">{text}</span>')
            card_cls = self.c(s.card_vocab or "card")
            content = f'<img src="/img/{i}.jpg" alt="">' + "".join(cells)
            if s.related_markup == "table":
                cards.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
            elif s.related_markup == "divs":
                cards.append(f'<div class="{card_cls}">{content}</div>')
            else:
                cards.append(f'<li class="{card_cls}">{content}</li>')
        if s.related_markup == "table":
            body = f'<table class="{self.c("related-list")}"><tbody>{"".join(cards)}</tbody></table>'
        elif s.related_markup == "divs":
            body = f'<div class="{self.c("grid")}">{"".join(cards)}</div>'
        else:
            body = f'<ul class="{self.c("grid")}">{"".join(cards)}</ul>'
        tag = "aside" if s.related_layout == "aside" else "section"
        return f'<{tag} class="{self.c("more")}">{heading}{body}</{tag}>'

    def jsonld(self) -> str:
        doc: dict[str, Any] = {
            "@context": "https://schema.org",
            "@type": self.kind.itemtype.rsplit("/", 1)[-1],
        }
        for fd in self.kind.fields:
            if not fd.ld or fd.name in self.mods.removed and not self.mods.ld_keeps_removed:
                continue
            node = doc
            for key in fd.ld[:-1]:
                node = node.setdefault(key, {})
            value = self.values[fd.name]
            node[fd.ld[-1]] = value
        return f'<script type="application/ld+json">{json.dumps(doc)}</script>'

    def page(self) -> str:
        s, kind = self.style, self.kind
        site = SITE_NAMES[PAGE_KINDS.index(kind.name) % len(SITE_NAMES)]
        title_fd = next(f for f in kind.fields if f.role == "title")
        head = [f"<title>{self.values[title_fd.name]} | {site}</title>", '<meta charset="utf-8">']
        if s.og:
            head.append(f'<meta property="og:title" content="{self.values[title_fd.name]}">')
            for fd in kind.fields:
                if fd.type == "price" and fd.name not in self.mods.removed:
                    head.append(f'<meta property="product:price:amount" content="{self.values[fd.name]}">')
        if s.jsonld:
            head.append(self.jsonld())
        head.append("<style>.x{color:red}</style>")
        nav = "".join(
            f'<li><a href="/{w.lower()}">{w}</a></li>'
            for w in ("Home", "Deals", "New", "Help", "Stores")[: 2 + s.noise]
        )
        header = (
            f'<header class="{self.c("site-header")}"><a class="{self.c("logo")}" href="/">{site}</a>'
            f'<nav class="{self.c("nav")}"><ul>{nav}</ul></nav>'
            f'<a class="{self.c("cart")}" href="/cart">'
            f"Cart (<span>{(len(site) % 4) + s.noise}</span>)</a></header>"
        )
        promo = f'<div class="{self.c("promo")}">{self.data["promo"]}</div>'
        crumbs = (
            f'<ol class="{self.c("breadcrumb")}"><li><a href="/">Home</a></li>'
            f'<li><a href="/c">{self.data["brand"]}</a></li>'
            f"<li>{self.values[title_fd.name][:24]}</li></ol>"
        )
        blocks = {
            "title": self.title(),
            "byline": self.byline(),
            "hero": self.hero(),
            "facts": self.facts(),
            "desc": self.description(),
        }
        order = {
            "classic": ("title", "byline", "hero", "facts", "desc"),
            "sidebar": ("title", "byline", "facts", "desc"),
            "top": ("hero", "title", "byline", "desc", "facts"),
        }[s.layout]
        main_inner = crumbs + "".join(blocks[k] for k in order)
        if s.microdata != "none":
            main_inner = f'<div itemscope itemtype="{kind.itemtype}">{main_inner}</div>'
        main = f'<main class="{self.c("main")}">{main_inner}</main>'
        if s.layout == "sidebar":
            main = (
                f'<div class="{self.c("layout")}">{main}<aside class="{self.c("buy-box")}">{blocks["hero"]}'
                f"</aside></div>"
            )
        related = self.related()
        footer = (
            f'<footer class="{self.c("footer")}"><p>© {2020 + s.noise} {site}. All rights reserved.</p>'
            f'<p>Call us: 1-800-{555 + s.noise}-0199</p><ul><li><a href="/about">About</a></li>'
            f'<li><a href="/careers">Careers (12 open roles)</a></li></ul></footer>'
        )
        body = header + promo + main + related + footer
        return f'<!DOCTYPE html><html lang="en"><head>{"".join(head)}</head><body>{body}</body></html>'


def _iso(text: str) -> str:
    match = re.search(r"(\w+) (\d+), (\d{4})", text)
    if not match:
        return "2024-01-01"
    month = MONTHS.index(match.group(1)) + 1 if match.group(1) in MONTHS else 1
    return f"{match.group(3)}-{month:02d}-{int(match.group(2)):02d}"
