"""The stages of a list target (``records:``), Dagster-free: extract the set → judge it → diff it by key.

``service.scrape`` hands a list contract's stages to these; everything around them (fetching every page,
storing the pages, the unchanged shortcut, healing budgets, the gate, review) is the single-record path's.
The candidate's record is the set document (``engine.lists.set_document``): its records and the ones
dropped under the tolerance, stored whole in the candidate and, once accepted, in the accepted version.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from scrape_contracts import settings
from scrape_contracts.adapters.store import SelectorVersion
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.contract.records import ITEM_SELECTOR
from scrape_contracts.engine.diff import FieldChange
from scrape_contracts.engine.lists import (
    PAGES, extract_records, is_set, set_document, set_dropped, set_records,
)
from scrape_contracts.engine.outcome import Outcome, decide_outcome
from scrape_contracts.engine.rendering import browser_hint
from scrape_contracts.engine.set_checks import (
    RECORD_COUNT_CHECK, TOLERANCE_CHECK, JudgedSet, diff_sets, judge_set,
)
from scrape_contracts.engine.validate import Violation
from scrape_contracts.service.records import (
    Emit, Extracted, Fetched, HealReport, Previous, ScrapeResult, Stage, Validated,
)

_SHOWN_KEYS = 50  # record keys listed per kind of change in an event; the counts are always whole


def previous_records(previous: Previous | None) -> list[dict[str, Any]] | None:
    """The last accepted set's records; None when there is none (or it predates the contract's records:)."""
    return set_records(previous.record) if previous is not None and is_set(previous.record) else None


def item_selector(loaded: LoadedContract, selectors: dict[str, str]) -> str:
    records = loaded.contract.records
    assert records is not None
    return selectors.get(ITEM_SELECTOR) or records.item


def extract(loaded: LoadedContract, fetched: Fetched, selectors: SelectorVersion, html: str,
            emit: Emit) -> Extracted:
    """Every item on every page of the target, with the selector version in force."""
    contract = loaded.contract
    records = contract.records
    assert records is not None
    extraction = extract_records(html, contract.fields, selectors.selectors,
                                 item_selector(loaded, selectors.selectors), records.key,
                                 limits=settings.engine_limits(), page_url=fetched.final_url)
    hint = None
    if contract.fetch.adapter != "browser":
        hint = browser_hint(html, extraction.problems, [ITEM_SELECTOR])
    emit(Stage.EXTRACTED, {"records": len(extraction.records), "pages": extraction.pages,
                           "selector_version": selectors.version,
                           "problems": [dataclasses.asdict(p) for p in extraction.problems],
                           "field_failures": {k: v for k, v in extraction.field_failures.items() if v},
                           **({"hint": hint} if hint else {})})
    return Extracted(fetched, set_document(extraction.records, pages=extraction.pages), extraction.problems,
                     selectors.version, dict(selectors.selectors), hint=hint)


def judge(loaded: LoadedContract, document: dict[str, Any], previous: Previous | None) -> JudgedSet:
    contract = loaded.contract
    assert contract.records is not None
    return judge_set(set_records(document), contract.fields, contract.record_schema(), contract.records,
                     previous_records(previous), already_dropped=len(set_dropped(document)),
                     engine_limits=settings.engine_limits())


def _judged_document(document: dict[str, Any], judged: JudgedSet) -> dict[str, Any]:
    return set_document(judged.records, [*set_dropped(document), *judged.dropped], document.get(PAGES, 1))


def validate(loaded: LoadedContract, extracted: Extracted, emit: Emit) -> Validated:
    """The per-record rules (dropping bad records within the tolerance) and the set's checks."""
    judged = judge(loaded, extracted.record, extracted.fetched.previous)
    violations = list(judged.violations)
    if extracted.hint:
        # said where a reader looks first: why the set is empty
        violations = [dataclasses.replace(v, message=f"{v.message}; {extracted.hint}")
                      if v.check == RECORD_COUNT_CHECK else v for v in violations]
    for violation in violations:
        emit(Stage.VIOLATION_FOUND, violation.as_dict())
    if judged.dropped and len(judged.records) < len(set_records(extracted.record)):
        dropped = len(judged.dropped)
        emit(Stage.VIOLATION_FOUND, {"check": TOLERANCE_CHECK, "dropped": dropped,
                                     "message": f"{dropped} record(s) dropped within the tolerance",
                                     "records": list(judged.dropped[:20])})
    document = _judged_document(extracted.record, judged)
    return Validated(dataclasses.replace(extracted, record=document), tuple(violations))


def heal_triggers(validated: Validated) -> list[str]:
    """The item selector or fields broken on most items: missing values on a few records are data. A set
    refused for a bound (``limit_exceeded``: too many items, too costly) is not a broken selector."""
    return sorted({p.field for p in validated.extracted.problems if p.kind != "limit_exceeded"})


def changes_of(loaded: LoadedContract, document: dict[str, Any], previous: Previous | None
               ) -> tuple[FieldChange, ...]:
    return diff_sets(previous_records(previous), set_records(document), loaded.contract.fields).changes


def summary_of(document: dict[str, Any], changes: tuple[FieldChange, ...], previous: Previous | None
               ) -> dict[str, Any]:
    """Counts of the set and of its diff: the candidate's metadata, every check's and the event trail's."""
    added = [c.field for c in changes if c.old is None]
    removed = [c.field for c in changes if c.new is None]
    changed = [c.field for c in changes if c.old is not None and c.new is not None]
    before = previous_records(previous)
    return {"records": len(set_records(document)), "dropped": len(set_dropped(document)),
            "pages": document.get(PAGES, 1), "added": len(added), "removed": len(removed),
            "changed": len(changed), "previous_records": len(before) if before is not None else None,
            "added_keys": added[:_SHOWN_KEYS], "removed_keys": removed[:_SHOWN_KEYS],
            "changed_keys": changed[:_SHOWN_KEYS]}


def decide(loaded: LoadedContract, validated: Validated, heal: HealReport, emit: Emit) -> ScrapeResult:
    """Diff the set by record key against the last accepted set and decide the outcome."""
    previous = validated.fetched.previous
    document = validated.extracted.record
    changes = changes_of(loaded, document, previous)
    outcome = decide_outcome(validated.violations, changes, healed=heal.healed,
                             has_previous=previous is not None)
    summary = summary_of(document, changes, previous)
    if changes and previous is not None:
        emit(Stage.CHANGE_DETECTED, {k: v for k, v in summary.items() if k != "previous_records"})
    return ScrapeResult(
        contract=loaded.contract.name, partition=validated.fetched.partition, url=validated.fetched.url,
        record=document, outcome=outcome, violations=validated.violations,
        problems=validated.extracted.problems, changes=changes, heal=heal, fetched=validated.fetched,
        selector_version=validated.extracted.selector_version,
        contract_fingerprint=loaded.contract.fingerprint, summary=summary,
    )


def rejudge(loaded: LoadedContract, document: dict[str, Any], previous: Previous | None, *, healed: bool
            ) -> tuple[tuple[Violation, ...], tuple[FieldChange, ...], Outcome]:
    """(violations, changes, outcome) of a stored set against ``previous`` (a newer accepted set)."""
    judged = judge(loaded, document, previous)
    changes = changes_of(loaded, document, previous)
    outcome = decide_outcome(judged.violations, changes, healed=healed, has_previous=previous is not None)
    return judged.violations, changes, outcome
