"""What the healer knows about one field before it looks at candidates: the old element's fingerprint(s),
the words that name the field, and where the old selector still points on the new page."""

from __future__ import annotations

from dataclasses import dataclass

from lxml import etree

from scrape_contracts.engine.heal.decoys import Flag, flags_of
from scrape_contracts.engine.heal.fingerprint import Fingerprint, fingerprint_of
from scrape_contracts.engine.heal.locate import Located, find_aliases, locate_targets
from scrape_contracts.engine.heal.page import Page, select_elements, split_selector
from scrape_contracts.engine.heal.policy import HealPolicy
from scrape_contracts.engine.heal.spec import HealSpec
from scrape_contracts.engine.heal.vocabulary import content_words, expand_synonyms, head_words


@dataclass(frozen=True)
class Context:
    """Everything the scoring of one field's candidates needs, built once per field."""

    spec: HealSpec
    policy: HealPolicy
    located: Located
    targets: tuple[Fingerprint, ...]
    target_elements: tuple[etree._Element, ...]
    target_raw: str
    field_words: frozenset[str]  # field name words, synonym-expanded
    field_head: frozenset[str]  # the word that says what the field is ("price" in ticket_price), expanded
    anchor_words: frozenset[str]  # field words plus the old element's own naming
    old_matches: frozenset[etree._Element]
    target_flags: frozenset[Flag]
    before: Page
    after: Page
    aliases: tuple[Fingerprint, ...] = ()  # same value elsewhere on the last good page: weaker targets
    alias_elements: tuple[etree._Element, ...] = ()
    target_identity: frozenset[str] = frozenset()


def build_context(before: Page, after: Page, spec: HealSpec, policy: HealPolicy) -> Context:
    """Locate and fingerprint the old element on the last good page; find the old selector's matches on
    the new one."""
    targets, located = locate_targets(before, spec)
    target_raw = before.raw_value(*targets[0]) if targets else ""
    field_words = expand_synonyms(content_words(spec.name.replace("_", " ")))
    field_head = expand_synonyms(head_words(spec.name))
    anchor_words = set(field_words)
    target_fps = tuple(fingerprint_of(before, el, src) for el, src in targets)
    aliases = find_aliases(before, spec, targets, target_raw)
    for fp in target_fps:
        anchor_words |= expand_synonyms(fp.name_tokens | fp.class_tokens)
    old_element_sel, _ = split_selector(spec.selector)
    return Context(
        spec=spec,
        policy=policy,
        located=located,
        targets=target_fps,
        target_elements=tuple(el for el, _ in targets),
        target_raw=target_raw,
        field_words=field_words,
        field_head=field_head,
        anchor_words=frozenset(anchor_words),
        old_matches=frozenset(select_elements(after, old_element_sel, own=True)),
        target_flags=frozenset().union(*(flags_of(before, el) for el, _ in targets)),
        before=before,
        after=after,
        aliases=tuple(fingerprint_of(before, el, src) for el, src in aliases),
        alias_elements=tuple(el for el, _ in aliases),
        target_identity=frozenset().union(*(before.identity(el) for el, _ in (*targets, *aliases))),
    )
