"""Whether a page looks like a shell its scripts fill in: then the fields are missing because nothing ran
the scripts, not because the selectors are wrong, and the contract should say ``fetch.adapter: browser``."""

from __future__ import annotations

from collections.abc import Collection, Iterable

import parsel

from scrape_contracts.engine.extract import FieldProblem

BROWSER_HINT = ("the page has scripts and none of the fields is in its HTML: its content may be inserted by "
                "JavaScript, so the page may need `fetch.adapter: browser` in the contract (rendered in "
                "Chromium; see docs/contracts.md#javascript-pages-the-browser-adapter)")
# script types a browser runs (JSON-LD, templates and JSON data blocks are not code)
_EXECUTABLE = frozenset({"", "text/javascript", "application/javascript", "module", "text/ecmascript",
                         "application/ecmascript"})


def has_scripts(html: str) -> bool:
    """Whether ``html`` has a script a browser would run (inline or ``src``)."""
    for script in parsel.Selector(text=html).xpath("//script"):
        kind = (script.attrib.get("type") or "").split(";")[0].strip().lower()
        code = "".join(script.xpath("text()").getall()).strip()
        if kind in _EXECUTABLE and (script.attrib.get("src") or code):
            return True
    return False


def browser_hint(html: str, problems: Iterable[FieldProblem], fields: Collection[str]) -> str | None:
    """``BROWSER_HINT`` when no field matched anything on a page that has scripts; None otherwise."""
    unmatched = {p.field for p in problems if p.kind == "no_match"}
    if not fields or not set(fields) <= unmatched:
        return None
    return BROWSER_HINT if has_scripts(html) else None
