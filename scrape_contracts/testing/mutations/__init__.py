"""Mutation suite for the healer: realistic pages, before/after layout changes, expected outcome per field.

A public helper: the project's tests and ``benchmarks/healing.py`` use it, and so can your own healing
tests (``from scrape_contracts.testing.mutations import build_cases``).

Pages are generated, not hand-written: six page kinds (product, real-estate listing, review, job post, news
article, event), each rendered from random data through a ``Style`` (class naming scheme, ids, test ids,
microdata, JSON-LD, fact markup, labels, wrappers, order, tags, layout, noise). A change kind derives the
"after" style (and data) from the "before" one. The old selector is what a contract author would have
written for the before page, biased towards the part of the markup the change breaks (ids for renamed
ids, classes for hashed classes, positions for reordering, ...).

A case lists only the fields the pipeline would heal: those whose old selector fails on the new page (no
match, several different matches, unparseable, rule violation), plus the fields a change targets on
purpose (a decoy put where the old element was, a removed field, a value moved past its change limit). The
expected value is read from the new page (the element that carries the field), or ``REFUSE`` when the field
is not on the new page or its new value breaks the contract's change limit (a data change for review).

Second generation (``NEW_CHANGE_KINDS``, issue 15): a redesign keeping only JSON-LD, a moved section plus
changed values, labels translated to German/French/Spanish, an earlier layout coming back (its selectors
in ``spec["earlier"]``), and date and link fields (dates typed ``date``, bylines' profile links ``url``
fields, resolved against ``HealCase.page_url``). ``build_cases(changes=ALL_CHANGE_KINDS)`` gives both.

``build_cases(seeds)`` is deterministic: the same seeds give the same pages, specs and expectations.
"""

from scrape_contracts.testing.mutations.build import build_case, build_cases
from scrape_contracts.testing.mutations.case import (
    ALL_CHANGE_KINDS,
    CHANGE_KINDS,
    NEW_CHANGE_KINDS,
    PAGE_KINDS,
    REFUSE,
    REMOVAL_KINDS,
    HealCase,
)

__all__ = ["ALL_CHANGE_KINDS", "CHANGE_KINDS", "NEW_CHANGE_KINDS", "PAGE_KINDS", "REFUSE", "REMOVAL_KINDS",
           "HealCase", "build_case", "build_cases"]
