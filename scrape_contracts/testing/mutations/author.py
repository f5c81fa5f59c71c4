"""The selector a contract author would have written for a field of the before page."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from lxml import html as lxml_html

from scrape_contracts.engine.select import parse_html, select

_MARK = re.compile(r' data-hc="[^"]*"')


def strip_marks(html: str) -> str:
    return _MARK.sub("", html)


def _author_forms(el: Any, pref: str) -> list[str]:
    tag = el.tag
    classes = (el.get("class") or "").split()
    parent = el.getparent()
    pclasses = (parent.get("class") or "").split() if parent is not None else []
    forms: list[str] = []
    if pref == "id" and el.get("id"):
        forms.append(f"#{el.get('id')}")
    elif pref == "testid" and el.get("data-testid"):
        forms.append(f'[data-testid="{el.get("data-testid")}"]')
    elif pref == "itemprop" and el.get("itemprop"):
        forms.append(f'[itemprop="{el.get("itemprop")}"]')
    elif pref == "class" and classes:
        forms += [f".{classes[0]}", f"{tag}.{classes[0]}"]
        if pclasses:
            forms.append(f".{pclasses[0]} .{classes[0]}")
    elif pref == "tagclass" and classes:
        forms.append(f"{tag}.{classes[0]}")
        if pclasses:
            forms.append(f".{pclasses[0]} {tag}.{classes[0]}")
    elif pref == "child" and parent is not None:
        own = f"{tag}.{classes[0]}" if classes else tag
        forms.append(f"{parent.tag}.{pclasses[0]} > {own}" if pclasses else f"{parent.tag} > {own}")
        grand = parent.getparent()
        if grand is not None and (grand.get("class") or "").split():
            forms.append(f".{grand.get('class').split()[0]} > {parent.tag} > {own}")
    elif pref == "path":
        own = f".{classes[0]}" if classes else tag
        anc = [a for a in el.iterancestors() if a.tag in ("main", "aside", "section", "article")]
        for a in anc:
            acls = (a.get("class") or "").split()
            forms.append(f"{a.tag}.{acls[0]} {own}" if acls else f"{a.tag} {own}")
        mid = pclasses[0] if pclasses else None
        if mid and anc:
            forms.insert(0, f"{anc[-1].tag} .{mid} {own}")
    elif pref == "label":
        prev = el.getprevious()
        text = normalise(prev.text_content()) if prev is not None else ""
        if prev is not None and text and '"' not in text:
            forms.append(f'//{prev.tag}[normalize-space(.)="{text}"]/following-sibling::{tag}[1]')
        if parent is not None and parent.tag in ("td", "dd", "div") and parent.getprevious() is not None:
            ptext = normalise(parent.getprevious().text_content())
            if ptext and '"' not in ptext:
                label_tag = parent.getprevious().tag
                forms.append(
                    f'//{label_tag}[normalize-space(.)="{ptext}"]/following-sibling::{parent.tag}[1]/{tag}'
                )
    elif pref == "positional":
        forms += _positional_paths(el)
    elif pref == "text" and classes and len(el) == 0:
        forms.append(f".{classes[0]}::text")
    return forms


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text or "").strip()


def _positional_paths(el: Any) -> list[str]:
    steps: list[str] = []
    cur = el
    out: list[str] = []
    for _ in range(6):
        parent = cur.getparent()
        if parent is None:
            break
        same = [c for c in parent if c.tag == cur.tag]
        steps.insert(0, f"{cur.tag}:nth-of-type({same.index(cur) + 1})")
        pcls = (parent.get("class") or "").split()
        if parent.get("id") or pcls:
            anchor = f"#{parent.get('id')}" if parent.get("id") else f".{pcls[0]}"
            out.append(f"{anchor} > " + " > ".join(steps))
        if parent.tag == "body":
            out.append("body > " + " > ".join(steps))
            break
        cur = parent
    return out


def author_selector(marked_html: str, name: str, prefs: Sequence[str]) -> str:
    tree = lxml_html.fromstring(marked_html)
    found = tree.xpath(f'//*[@data-hc="{name}"]')
    if len(found) != 1:
        raise ValueError(f"field {name!r} rendered {len(found)} times")
    el = found[0]
    root = parse_html(marked_html)
    for pref in (*prefs, "class", "testid", "id", "itemprop", "tagclass", "child", "label", "positional"):
        for form in _author_forms(el, pref):
            try:
                nodes = select(root, form.replace("::text", ""))
            except Exception:  # noqa: BLE001 - an author's typo is simply not chosen
                continue
            if len(nodes) == 1 and nodes[0].root.get("data-hc") == name:
                return form
    raise ValueError(f"no author selector for {name!r}")
