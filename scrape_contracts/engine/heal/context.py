"""What the healer knows about one field before it looks at candidates: the old element's fingerprint(s),
the words that name the field, and where the old selector still points on the new page."""

from __future__ import annotations

from dataclasses import dataclass

from lxml import etree

from scrape_contracts.engine.heal.decoys import Flag
from scrape_contracts.engine.heal.fingerprint import Fingerprint
from scrape_contracts.engine.heal.locate import Located
from scrape_contracts.engine.heal.memory import FieldMemory, PageRecall, Recall, StoredRecall, memory_of
from scrape_contracts.engine.heal.page import Page
from scrape_contracts.engine.heal.query import select_elements, split_selector
from scrape_contracts.engine.heal.policy import HealPolicy
from scrape_contracts.engine.heal.rows import OldRows
from scrape_contracts.engine.heal.scoring import full_label
from scrape_contracts.engine.heal.spec import HealSpec
from scrape_contracts.engine.heal.vocabulary import content_words, expand_synonyms, head_words


@dataclass(frozen=True)
class Context:
    """Everything the scoring of one field's candidates needs, built once per field."""

    spec: HealSpec
    policy: HealPolicy
    located: Located
    targets: tuple[Fingerprint, ...]
    target_raw: str
    field_words: frozenset[str]  # field name words, synonym-expanded
    field_head: frozenset[str]  # the word that says what the field is ("price" in ticket_price), expanded
    anchor_words: frozenset[str]  # field words plus the old element's own naming
    old_matches: frozenset[etree._Element]
    target_flags: frozenset[Flag]
    recall: Recall  # the old page, or what a stored memory kept of it
    after: Page
    aliases: tuple[Fingerprint, ...] = ()  # same value elsewhere on the last good page: weaker targets
    target_identity: frozenset[str] = frozenset()
    target_labels: tuple[str, ...] = ()  # scoring.full_label of each target
    rows: OldRows | None = None  # a positional field's list on the last good page


def build_context(before: Page | FieldMemory, after: Page, spec: HealSpec, policy: HealPolicy) -> Context:
    """Locate and fingerprint the old element on the last good page (or take its stored memory); find the
    old selector's matches on the new one."""
    if isinstance(before, Page):
        memory, targets, aliases = memory_of(before, spec, full=False)
        recall: Recall = PageRecall(before, targets, aliases)
    else:
        memory, recall = before, StoredRecall(before)
    field_words = expand_synonyms(content_words(spec.name.replace("_", " ")))
    field_head = expand_synonyms(head_words(spec.name))
    anchor_words = set(field_words)
    for fp in memory.targets:
        anchor_words |= expand_synonyms(fp.name_tokens | fp.class_tokens)
    old_element_sel, _ = split_selector(spec.selector)
    return Context(
        spec=spec,
        policy=policy,
        located=memory.located,
        targets=memory.targets,
        target_raw=memory.target_raw,
        field_words=field_words,
        field_head=field_head,
        anchor_words=frozenset(anchor_words),
        old_matches=frozenset(select_elements(after, old_element_sel, own=True)),
        target_flags=memory.flags,
        recall=recall,
        after=after,
        aliases=memory.aliases,
        target_identity=memory.identity,
        target_labels=tuple(full_label(t, memory.target_raw, spec.type) for t in memory.targets),
        rows=memory.rows,
    )
