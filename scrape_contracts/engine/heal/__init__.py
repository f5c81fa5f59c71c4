"""Self-healing selectors: find where a field went on a changed page, or refuse. Never invent a value.

``heal(before_html, after_html, fields)`` is pure: both pages are parsed per call (or given parsed, and
then only read) and every cache lives on a per-call ``Page``, so concurrent calls share nothing mutable.
For each field (``decision.heal_field``):

1. ``locate``: find the old element on the LAST GOOD page (what the old selector matched, holding the last
   accepted value; else the value itself, when it occurs in at most three places); ``fingerprint`` it:
   tag, stable classes/id (``names``), naming attributes, ``labels``, ancestor path, siblings, position.
2. ``candidates``: the new page's texts and value attributes (``content``/``datetime``/``value``) that
   parse as the field's type, look like one value, and pass the rules (``spec``). ``shortlist`` drops
   label elements and changed texts of another shape, and sets ``decoys`` apart (crossed-out or "was"
   prices, related sections, another item's card).
3. ``scoring``: weighted evidence — semantic anchors, label, fingerprint similarity, value proximity,
   structured data, the old selector still pointing at or next to it — minus penalties for a label naming
   something else, a name that belonged to another element on the old page, looking like a non-target of
   the old page, and page chrome. Every weight and threshold is in ``HealPolicy`` (``policy``).
4. ``decision``: accept the best only if its score clears a floor, it has evidence besides its value, and
   it beats the best competitor elsewhere by a margin; a changed text also needs a strong anchor or
   fingerprint. Otherwise refuse with a ``RefusalReason`` and the evidence.
5. ``selectors``: build a stable selector, check it matches exactly that element, and re-extract the value.

A positional field (its selector picks by place, ``li:first-child``; or its contract names an ``item``) is
judged by ``rows`` and ``positional`` first: it heals only within its own row of a list that kept its
order, or to the item the contract names, never to its last value in a row that moved.

A field that was shown text is never healed to an invisible copy of it (a meta tag): such copies only
confirm a shown value. JSON-LD is evidence only: the extractor reads element text or attributes and cannot
descend into a JSON document, so a selector into a ``<script>`` would not extract the value.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import parsel
from lxml import etree

from scrape_contracts.engine.heal.decision import heal_field
from scrape_contracts.engine.heal.memory import FieldMemory
from scrape_contracts.engine.heal.memory import remember as remember_fields
from scrape_contracts.engine.heal.names import is_unstable_token
from scrape_contracts.engine.heal.page import Deadline, Page, Texts
from scrape_contracts.engine.heal.policy import DEFAULT_POLICY, HealPolicy
from scrape_contracts.engine.heal.result import HEALED, HealResult, RefusalReason, refusal
from scrape_contracts.engine.heal.spec import HealSpec, ItemPick, ItemRule
from scrape_contracts.engine.limits import DEFAULT_LIMITS, LimitExceeded, Limits
from scrape_contracts.engine.select import SelectorError

MIN_SCORE = DEFAULT_POLICY.min_score
MIN_MARGIN = DEFAULT_POLICY.min_margin


def heal(before_html: str | parsel.Selector | None, after_html: str | parsel.Selector,
         fields: Mapping[str, HealSpec | Mapping[str, Any]], *,
         limits: Limits = DEFAULT_LIMITS, clock: Callable[[], float] = time.monotonic,
         policy: HealPolicy = DEFAULT_POLICY, page_url: str | None = None,
         memories: Mapping[str, FieldMemory] | None = None) -> dict[str, HealResult]:
    """Heal each field of ``fields`` (name -> ``HealSpec``, or a mapping ``HealSpec.from_mapping`` reads:
    ``{"selector", "before", "type", ...}``) against the new page. ``page_url`` is the target's URL: ``url``
    fields resolve relative links against it (or a page's ``<base href>``).

    ``before_html`` is the last good page; when it is gone (None), each field heals from its stored
    ``memories`` entry (``remember`` made it at acceptance), and a field with neither is refused. Either page
    may be given parsed (the ``parsel.Selector`` of ``select.parse_html``, e.g. the tree an extraction
    read): it is only read.

    A limit hit refuses, like any other refusal: a page over ``heal_max_elements`` every field, running
    past ``heal_timeout_s`` the field being healed and those after it, a slow pattern or a costly
    selector of the contract that field."""
    deadline = Deadline(clock, limits.heal_timeout_s)
    try:
        texts = Texts()  # both pages share most texts: each is parsed and read once per call
        before = Page(before_html, limits, deadline, policy, page_url, texts) if _given(before_html) else None
        after = Page(after_html, limits, deadline, policy, page_url, texts)
    except LimitExceeded as exc:
        return {name: refusal(RefusalReason.LIMIT_EXCEEDED, str(exc), 0, limit=exc.limit, setting=exc.setting)
                for name in fields}
    results: dict[str, HealResult] = {}
    for name, given in fields.items():
        spec = _spec(name, given)
        source = before if before is not None else (memories or {}).get(name)
        if source is None:
            results[name] = refusal(RefusalReason.NO_LAST_GOOD, "neither the last good page nor a stored "
                                    "fingerprint of this field is left to heal from", 0)
            continue
        try:
            results[name] = heal_field(source, after, spec, policy)
        except (SelectorError, etree.XPathError) as exc:
            results[name] = refusal(RefusalReason.INVALID_SELECTOR, str(exc), 0)
        except LimitExceeded as exc:
            results[name] = refusal(RefusalReason.LIMIT_EXCEEDED, str(exc), 0, limit=exc.limit,
                                    setting=exc.setting)
        except RecursionError:
            # every walk here is a loop; should one still recurse, the page is refused, not the run failed
            results[name] = refusal(RefusalReason.TOO_DEEP, "the page nests too deep to compare", 0)
    return results


def remember(html: str | parsel.Selector, fields: Mapping[str, HealSpec | Mapping[str, Any]], *,
             limits: Limits = DEFAULT_LIMITS, policy: HealPolicy = DEFAULT_POLICY,
             page_url: str | None = None) -> dict[str, FieldMemory]:
    """Each field's ``FieldMemory`` on an accepted page: what ``heal`` needs once the page is deleted.
    ``fields`` as for ``heal``, with the selector the value was extracted with and the accepted value.
    Fields whose element is not found, and any field when the page breaks a limit, are left out. ``html``
    may be the page already parsed for its extraction (it is only read)."""
    try:
        page = Page(html, limits, Deadline(time.monotonic, limits.heal_timeout_s), policy, page_url)
    except LimitExceeded:
        return {}
    out: dict[str, FieldMemory] = {}
    for name, given in fields.items():
        try:
            out.update(remember_fields(page, {name: _spec(name, given)}))
        except (SelectorError, etree.XPathError, LimitExceeded, RecursionError):
            continue  # that field heals from the page while it is kept, else refuses
    return out


def _given(html: str | parsel.Selector | None) -> bool:
    # a parsed page counts as given; never ask a Selector for its truth (that serialises the page)
    return isinstance(html, parsel.Selector) or bool(html)


def _spec(name: str, given: HealSpec | Mapping[str, Any]) -> HealSpec:
    if isinstance(given, HealSpec):
        return given if given.name == name else replace(given, name=name)
    return HealSpec.from_mapping(name, given)


__all__ = [
    "HEALED",
    "DEFAULT_POLICY",
    "FieldMemory",
    "HealPolicy",
    "HealResult",
    "HealSpec",
    "ItemPick",
    "ItemRule",
    "MIN_MARGIN",
    "MIN_SCORE",
    "RefusalReason",
    "heal",
    "remember",
    "is_unstable_token",
]
