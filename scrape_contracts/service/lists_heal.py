"""Healing a list target: relocate the items, then heal the fields' selectors inside them.

The same rules as a single record's heal (``service.scrape._heal``): the same budget per target, the same
never-invent healer for the fields (``engine.heal.heal``, on one item of the last good page and the item
holding the same record on the new page), the same selector versions (the item selector is ``@item`` in
them). The item selector is relocated by ``engine.heal.items`` from the last accepted records; the heal
counts only when the healed selectors read the new pages without a broken field.
"""

from __future__ import annotations

import dataclasses
import time
from types import SimpleNamespace
from typing import Any

from scrape_contracts import settings
from scrape_contracts.adapters.pages import PageStore
from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.contract.records import ITEM_SELECTOR
from scrape_contracts.engine.heal.items import item_html, relocate_items
from scrape_contracts.engine.lists import RECORD_KEY, extract_records, set_document, split_pages
from scrape_contracts.engine.select import SelectorBudget, parse_html, select
from scrape_contracts.service import heal_steps, lists
from scrape_contracts.service.records import Emit, HealReport, Stage, Validated


def heal(loaded: LoadedContract, validated: Validated, run_id: str, artifacts: PageStore,
         store: ProjectStore, emit: Emit) -> tuple[Validated, HealReport]:
    contract = loaded.contract
    records = contract.records
    assert records is not None
    fetched, extracted = validated.fetched, validated.extracted
    partition, previous = fetched.partition, fetched.previous
    triggers = tuple(lists.heal_triggers(validated))
    budget = contract.healing.budget
    state = store.state(contract.name, partition)
    if state.heal_attempts >= budget:
        reason = f"healing budget exhausted ({state.heal_attempts}/{budget} attempts used)"
        heal_steps.pause_exhausted(store, contract.name, partition, reason, emit)
        return validated, HealReport(attempted=True, fields=triggers, reason=reason)
    before_doc = artifacts.get(previous.page_sha256) if previous and previous.page_sha256 else None
    known = lists.previous_records(previous)
    if not known or before_doc is None:
        reason = "no last accepted set to heal from (the first scrape of a target cannot be healed)"
        emit(Stage.HEALING_REFUSED, {"fields": list(triggers), "reason": reason})
        return validated, HealReport(attempted=True, fields=triggers, reason=reason)
    after_doc = (artifacts.get(fetched.page_sha256) if fetched.page_sha256 else None) or ""
    started = time.perf_counter()
    healed, evidence, refused = _heal_selectors(loaded, extracted.selectors, known, before_doc, after_doc,
                                                fetched.final_url, triggers)
    seconds = round(time.perf_counter() - started, 3)
    emit(Stage.HEALING, {"fields": list(triggers), "results": evidence})
    if refused:
        attempts = store.add_heal_attempt(contract.name, partition)
        reason = f"healer refused {', '.join(refused)} (attempt {attempts}/{budget})"
        emit(Stage.HEALING_REFUSED, {"fields": refused, "attempt": attempts, "budget": budget,
                                     "reason": reason})
        if attempts >= budget:
            heal_steps.pause_exhausted(store, contract.name, partition,
                                    f"healing budget exhausted after {attempts} attempts; "
                                    f"{', '.join(refused)} could not be healed", emit)
        return validated, HealReport(attempted=True, fields=triggers, reason=reason, results=evidence,
                                     seconds=seconds)
    # what the single-record heal saves per field (a HealResult's selector, evidence and confidence)
    results = {name: SimpleNamespace(selector=r["selector"], evidence=r["evidence"],
                                     confidence=r["confidence"]) for name, r in evidence.items()}
    version = heal_steps.save_selectors(loaded, extracted, results, run_id, store)
    extraction = _extract(loaded, after_doc, version.selectors, fetched.final_url)
    re_extracted = dataclasses.replace(
        extracted, record=set_document(extraction.records, pages=extraction.pages),
        problems=extraction.problems, selector_version=version.version, selectors=dict(version.selectors),
        hint=None)
    re_validated = lists.validate(loaded, re_extracted, lambda *_: None)
    emit(Stage.RE_EXTRACTED, {"records": len(extraction.records), "selector_version": version.version,
                              "violations": [v.as_dict() for v in re_validated.violations]})
    return re_validated, HealReport(attempted=True, healed=not extraction.problems, fields=triggers,
                                    results=evidence, selector_version=version.version, seconds=seconds)


def _extract(loaded: LoadedContract, document: str, selectors: dict[str, str], page_url: str) -> Any:
    records = loaded.contract.records
    assert records is not None
    return extract_records(document, loaded.contract.fields, selectors,
                           selectors.get(ITEM_SELECTOR) or records.item, records.key,
                           limits=settings.engine_limits(), page_url=page_url)


def _heal_selectors(loaded: LoadedContract, old: dict[str, str], known: list[dict[str, Any]], before_doc: str,
                    after_doc: str, page_url: str, triggers: tuple[str, ...]
                    ) -> tuple[dict[str, str], dict[str, Any], list[str]]:
    """(healed selectors, evidence per selector, refused names): the items first, then the fields."""
    contract = loaded.contract
    limits = settings.engine_limits()
    first_after = split_pages(after_doc, page_url)[0][1]
    relocation = relocate_items(first_after, known, RECORD_KEY, limits=limits)
    evidence: dict[str, Any] = {}
    new = dict(old)
    if ITEM_SELECTOR in triggers:
        refusal = {"refusal": relocation.refusal} if relocation.refusal else {}
        evidence[ITEM_SELECTOR] = {"value": None, "selector": relocation.selector,
                                   "old_selector": old.get(ITEM_SELECTOR), "confidence": relocation.confidence,
                                   "evidence": {**relocation.evidence, **refusal}}
        if not relocation.healed:
            return {}, evidence, [ITEM_SELECTOR]
        new[ITEM_SELECTOR] = relocation.selector
    broken = sorted(p.field for p in _extract(loaded, after_doc, new, page_url).problems)
    if not broken:
        return new, evidence, []
    if ITEM_SELECTOR in broken or not relocation.healed:
        evidence.setdefault(ITEM_SELECTOR, {"selector": None, "evidence": {"refusal": relocation.refusal}})
        return {}, evidence, broken
    pair = _item_pair(loaded, old, known, before_doc, page_url, relocation.items)
    if pair is None:
        return {}, evidence, broken
    key, before_item, after_item = pair
    record = next(r for r in known if r[RECORD_KEY] == key)
    from scrape_contracts.engine.heal import heal as heal_fields
    from scrape_contracts.service.heal_steps import heal_spec

    specs = {name: heal_spec(name, contract.fields[name], old[name], record.get(name)) for name in broken}
    found = heal_fields(before_item, after_item, specs, limits=limits, page_url=page_url)
    for name, result in found.items():
        evidence[name] = {"value": result.value, "selector": result.selector, "old_selector": old[name],
                          "confidence": round(result.confidence, 3),
                          "evidence": {**result.evidence, "record": key}}
        if result.healed:
            new[name] = result.selector
    refused = [n for n, r in found.items() if not r.healed]
    if refused:
        return {}, evidence, refused
    still = sorted(p.field for p in _extract(loaded, after_doc, new, page_url).problems)
    if still:
        # healed on one item, broken on most: the selector does not describe the list's field
        for name in still:
            evidence.setdefault(name, {})["evidence"] = {
                "refusal": "healed on one item, broken on most items"}
        return {}, evidence, still
    return new, evidence, []


def _item_pair(loaded: LoadedContract, old: dict[str, str], known: list[dict[str, Any]], before_doc: str,
               page_url: str, after_items: dict[str, Any]) -> tuple[str, str, str] | None:
    """(record key, its item on the last good page, its item on the new page), for healing the fields."""
    records = loaded.contract.records
    assert records is not None
    first_before = split_pages(before_doc, page_url)[0][1]
    root = parse_html(first_before)
    limits = settings.engine_limits()
    item = old.get(ITEM_SELECTOR) or records.item
    items = select(root, item, SelectorBudget(root, limits.selector_max_cost))
    before = extract_records(first_before, loaded.contract.fields, old, item, records.key, limits=limits,
                             page_url=page_url)
    keys = {r[RECORD_KEY] for r in known}
    for item, record in zip(items, before.records):
        key = record[RECORD_KEY]
        if key in keys and key in after_items:
            return key, item.get(), item_html(after_items[key])
    return None
