"""What the healer keeps of a last good page, so it can heal when that page is gone.

At acceptance, ``remember`` turns each field into a ``FieldMemory``: the fingerprint of the element its
value came from (tag, names, label, ancestors, siblings, position), its visible twins, whether it sat in
a related section or a card, its own names, and the little the decision reads elsewhere on the old page:
names that belonged to other elements (an impostor carrying one is suspect) and the non-target elements
most like it (a candidate resembling one of those more than the field is a look-alike). Like Scrapling's
stored fingerprints, it is compact JSON (``to_json`` / ``from_json``), a few KB per field.

A heal reads the old page through a ``Recall``: ``PageRecall`` asks the page itself (exact; used when the
page is still there), ``StoredRecall`` answers from a memory (when it is not).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from lxml import etree

from scrape_contracts.engine.heal.decoys import Flag, flags_of
from scrape_contracts.engine.heal.fingerprint import (
    Fingerprint,
    fingerprint_from_json,
    fingerprint_of,
    fingerprint_to_json,
    similarity,
)
from scrape_contracts.engine.heal.locate import Located, find_aliases, locate_targets
from scrape_contracts.engine.heal.page import Page
from scrape_contracts.engine.heal.query import select_elements, split_selector
from scrape_contracts.engine.heal.rows import OldRows, old_rows
from scrape_contracts.engine.heal.spec import HealSpec
from scrape_contracts.engine.heal.vocabulary import DIGIT, TAG_FAMILY

FORMAT = 1  # stored memories of another format are ignored (healing then needs the page)
TWINS_KEPT = 6  # non-target look-alikes remembered per field...
TWINS_FINGERPRINTED = 16  # ...chosen among this many cheaply ranked ones
# the names a selector step carries: #id, .class, [attr="value"]
SELECTOR_NAMES = re.compile(r"#([\w-]+)|\.([\w-]+)|\[([\w:-]+)=\"([^\"]*)\"\]")


@dataclass(frozen=True)
class Twin:
    """A non-target element of the old page: its text and fingerprint."""

    raw: str
    fp: Fingerprint


@dataclass(frozen=True)
class FieldMemory:
    """One field of a last good page, as the heal needs it."""

    selector: str  # the selector the accepted value was extracted with
    located: Located
    targets: tuple[Fingerprint, ...]
    target_raw: str
    aliases: tuple[Fingerprint, ...] = ()
    flags: frozenset[Flag] = frozenset()
    identity: frozenset[str] = frozenset()  # names of the field's own elements
    foreign: frozenset[str] = frozenset()  # names that belonged to (at most a few) other elements
    twins: tuple[Twin, ...] = ()  # non-target elements holding short texts, most like the field first
    rows: OldRows | None = None  # a positional field's list (``rows``)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "selector": self.selector, "located": self.located.value,
            "targets": [fingerprint_to_json(fp) for fp in self.targets], "target_raw": self.target_raw,
            "aliases": [fingerprint_to_json(fp) for fp in self.aliases],
            "flags": sorted(f.value for f in self.flags), "identity": sorted(self.identity),
            "foreign": sorted(self.foreign),
            "twins": [[t.raw, fingerprint_to_json(t.fp)] for t in self.twins],
            "rows": None if self.rows is None else {"values": list(self.rows.values),
                                                    "index": self.rows.index},
        }

    @staticmethod
    def from_json(raw: Mapping[str, Any]) -> FieldMemory:
        """Raise ValueError for a memory this code cannot read (another format, a damaged row)."""
        if raw.get("format") != FORMAT:
            raise ValueError(f"fingerprint format {raw.get('format')!r}, not {FORMAT}")
        try:
            return FieldMemory(
                selector=str(raw["selector"]), located=Located(raw["located"]),
                targets=tuple(fingerprint_from_json(fp) for fp in raw["targets"]),
                target_raw=str(raw["target_raw"]),
                aliases=tuple(fingerprint_from_json(fp) for fp in raw["aliases"]),
                flags=frozenset(Flag(f) for f in raw["flags"]), identity=frozenset(raw["identity"]),
                foreign=frozenset(raw["foreign"]),
                twins=tuple(Twin(str(r), fingerprint_from_json(fp)) for r, fp in raw["twins"]),
                rows=_rows_from_json(raw.get("rows")),  # memories stored before positional fields: none
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"damaged fingerprint: {exc}") from None


def _rows_from_json(raw: Any) -> OldRows | None:
    if raw is None:
        return None
    return OldRows(tuple(str(v) for v in raw["values"]), int(raw["index"]))


class Recall(Protocol):
    """What the heal asks the old page beyond the field's own fingerprint."""

    def twins(self, raw: str, most: int) -> Sequence[Fingerprint]:
        """Fingerprints of non-target elements of the old page whose text is ``raw``."""

    def foreign(self, token: str) -> bool:
        """``token`` (an identity name) belonged to a few other elements of the old page, not the field's."""

    def picks_other(self, element_selector: str) -> bool:
        """On the old page, ``element_selector`` matches something, and nothing on the field's branch."""


class PageRecall:
    """The old page itself: exact answers."""

    def __init__(self, page: Page, targets: Sequence[etree._Element],
                 aliases: Sequence[etree._Element]) -> None:
        self.page = page
        self.targets = tuple(targets)
        self.own = (*targets, *aliases)
        self._branches: dict[str, set[etree._Element]] = {}

    def _branch(self, of: str) -> set[etree._Element]:
        """The field's elements (``of`` "own": with its aliases), their ancestors and descendants."""
        if of not in self._branches:
            self._branches[of] = _branch(self.own if of == "own" else self.targets)
        return self._branches[of]

    def twins(self, raw: str, most: int) -> list[Fingerprint]:
        branch = self._branch("own")
        return [fingerprint_of(self.page, other, "text") for other in self.page.by_text().get(raw, ())[:most]
                if other not in branch]

    def foreign(self, token: str) -> bool:
        others = self.page.identity_index().get(token)
        if not others or len(others) > self.page.policy.anchors.identity_shared:
            return False
        branch = self._branch("own")
        return not any(o in branch for o in others)

    def picks_other(self, element_selector: str) -> bool:
        old = select_elements(self.page, element_selector)
        if not old:
            return False
        branch = self._branch("targets")
        return not any(o in branch for o in old)


class StoredRecall:
    """A stored memory standing in for the old page: its remembered twins and foreign names."""

    def __init__(self, memory: FieldMemory) -> None:
        self.memory = memory

    def twins(self, raw: str, most: int) -> list[Fingerprint]:
        return [t.fp for t in self.memory.twins if t.raw == raw][:most]

    def foreign(self, token: str) -> bool:
        return token in self.memory.foreign

    def picks_other(self, element_selector: str) -> bool:
        # the names the selector relies on belonged to another element: on the old page it picked that one
        names = set()
        for ident, cls, attr, value in SELECTOR_NAMES.findall(element_selector):
            names.add(f"i:{ident}" if ident else f"c:{cls}" if cls else f"a:{attr}={value}")
        return any(n in self.memory.foreign and n not in self.memory.identity for n in names)


def memory_of(page: Page, spec: HealSpec, *, full: bool = True
              ) -> tuple[FieldMemory, list[etree._Element], list[etree._Element]]:
    """(the field's memory, its target elements, its alias elements) on ``page``, the last good page.
    ``full``: also what a ``StoredRecall`` needs (foreign names, twins); a heal with the page asks it."""
    targets, located = locate_targets(page, spec)
    target_raw = page.raw_value(*targets[0]) if targets else ""
    aliases = find_aliases(page, spec, targets, target_raw)
    target_els = [el for el, _ in targets]
    alias_els = [el for el, _ in aliases]
    target_fps = tuple(fingerprint_of(page, el, src) for el, src in targets)
    memory = FieldMemory(
        selector=spec.selector,
        located=located,
        targets=target_fps,
        target_raw=target_raw,
        aliases=tuple(fingerprint_of(page, el, src) for el, src in aliases),
        flags=frozenset().union(*(flags_of(page, el) for el in target_els)),
        identity=frozenset().union(*(page.identity(el) for el in (*target_els, *alias_els))),
        rows=old_rows(page, spec, *targets[0]) if targets else None,
    )
    if not full:
        return memory, target_els, alias_els
    own = (*target_els, *alias_els)
    full_memory = replace(memory, foreign=_foreign(page, own),
                          twins=_twins(page, spec, target_fps, own, target_raw))
    return full_memory, target_els, alias_els


def _branch(own: Sequence[etree._Element]) -> set[etree._Element]:
    """The field's own elements, their ancestors and descendants: ``on_one_branch`` as one set lookup."""
    out: set[etree._Element] = set()
    for el in own:
        out.add(el)
        out.update(el.iterancestors())
        out.update(el.iterdescendants())
    return out


def _foreign(page: Page, own: Sequence[etree._Element]) -> frozenset[str]:
    """Names of short-text elements (the only ones a candidate's slot can be) held by a few other elements,
    none of them on the field's branch."""
    branch = _branch(own)
    return frozenset(
        token for token, elements in _rare_names(page) if not any(el in branch for el in elements)
    )


def _rare_names(page: Page) -> list[tuple[str, list[etree._Element]]]:
    """(name, its elements) for the names held by at most a few elements, one of them a short text (or a
    meta): what ``_foreign`` looks at for every field, listed once per page."""
    if "rare_names" not in page.memo:
        limit = page.policy.max_string_text
        shared = page.policy.anchors.identity_shared
        page.memo["rare_names"] = [
            (token, elements)
            for token, elements in page.identity_index().items()
            if len(elements) <= shared
            and any(el.tag == "meta" or 0 < len(page.text.get(el, "")) <= limit for el in elements)
        ]
    return page.memo["rare_names"]


def _twins(page: Page, spec: HealSpec, targets: Sequence[Fingerprint], own: Sequence[etree._Element],
           target_raw: str) -> tuple[Twin, ...]:
    """The non-target elements of the old page most like the field: where a look-alike would come from.
    Only elements of the field's kind of tag or sharing one of its classes are looked at, ranked by
    (same tag) + 0.5 (same kind of tag) + (classes shared) + (same text), then by page order; the best
    ``TWINS_FINGERPRINTED`` are fingerprinted."""
    if not targets:
        return ()
    target = targets[0]
    branch = _branch(own)
    numeric_text = spec.numeric and spec.pattern is None
    longest = page.policy.max_numeric_text if numeric_text else page.policy.max_string_text

    def eligible(el: etree._Element, text: str) -> bool:
        return el not in branch and len(text) <= longest and not (spec.numeric and not DIGIT.search(text))

    def rank(el: etree._Element, text: str) -> tuple[float, int, etree._Element, str]:
        shared = len(target.classes.intersection(page.classes(el))) if target.classes else 0
        family = TAG_FAMILY.get(el.tag, el.tag) == target.family
        key = (el.tag == target.tag) + 0.5 * family + shared + (text == target_raw)
        return -key, page.index[el], el, text

    by_family, by_class = _twin_index(page)
    # the few that share a class or the text are ranked one by one...
    special: dict[etree._Element, tuple[float, int, etree._Element, str]] = {}
    most = page.policy.anchors.distractor_twins
    same_text = [(el, target_raw) for el in page.by_text().get(target_raw, ())[:most]
                 if TAG_FAMILY.get(el.tag, el.tag) == target.family]
    for el, text in (*(x for c in target.classes for x in by_class.get(c, ())), *same_text):
        if el not in special and eligible(el, text):
            special[el] = rank(el, text)
    # ...the rest of the field's kind of tag rank 1.5 (same tag) or 0.5, in page order: their first few do
    pool = list(special.values())
    for same_tag in (True, False):
        taken = 0
        for el, text in by_family.get(target.family, ()):
            if taken == TWINS_FINGERPRINTED:
                break
            if (el.tag == target.tag) == same_tag and el not in special and eligible(el, text):
                pool.append(rank(el, text))
                taken += 1
    pool.sort(key=lambda item: item[:2])
    alike = page.policy.similarity
    scored = [(similarity(fingerprint_of(page, el, "text"), target, alike), text, el)
              for _, _, el, text in pool[:TWINS_FINGERPRINTED]]
    scored.sort(key=lambda item: -item[0])
    return tuple(Twin(text, fingerprint_of(page, el, "text")) for _, text, el in scored[:TWINS_KEPT])


def _twin_index(page: Page) -> tuple[dict[str, list], dict[str, list]]:
    """(tag family -> [(element, text)] in page order, stable class -> [(element, text)]) of the page's short
    visible texts, built once per page for every field's look-alikes."""
    if "twins" not in page.memo:
        by_family: dict[str, list] = {}
        by_class: dict[str, list] = {}
        most = page.policy.anchors.distractor_twins
        for text, elements in page.by_text().items():
            for el in elements[:most]:
                by_family.setdefault(TAG_FAMILY.get(el.tag, el.tag), []).append((el, text))
                for cls in page.classes(el):
                    by_class.setdefault(cls, []).append((el, text))
        for items in by_family.values():
            items.sort(key=lambda item: page.index[item[0]])
        page.memo["twins"] = (by_family, by_class)
    return page.memo["twins"]


def remember(page: Page, fields: Mapping[str, HealSpec]) -> dict[str, FieldMemory]:
    """Each field's memory on an accepted page (fields whose old element is not found are left out)."""
    out: dict[str, FieldMemory] = {}
    for name, spec in fields.items():
        element_sel, _ = split_selector(spec.selector)
        if not element_sel:
            continue
        memory, _, _ = memory_of(page, spec)
        if memory.targets:
            out[name] = memory
    return out
