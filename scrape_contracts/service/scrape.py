"""The stages of scraping one target, Dagster-free: observe the page → extract → validate → heal → decide.

The single-target use case (service/single.py) calls them in turn; the batch path calls ``process_page``
(the pure part, in a worker process) and ``heal_and_decide`` (in the run's process, as healing writes
selector versions). Either way a target gets the same outcome from the same page.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING, Any

from scrape_contracts import settings
from scrape_contracts.adapters.pages import PageStore
from scrape_contracts.adapters.fetch.page import FetchError
from scrape_contracts.adapters.store import ProjectStore, SelectorVersion
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.engine.diff import diff_records
from scrape_contracts.engine.extract import Extraction, extract_record
from scrape_contracts.engine.lists import is_set
from scrape_contracts.engine.outcome import Outcome, decide_outcome
from scrape_contracts.engine.rendering import browser_hint
from scrape_contracts.engine.select import parse_html
from scrape_contracts.engine.validate import CHANGE_CHECK, REQUIRED_CHECK, validate_rules, validate_schema
from scrape_contracts.service import fingerprints, heal_steps, lists, lists_heal, repairs
from scrape_contracts.service.records import (
    Emit, Extracted, Fetched, HealReport, Previous, ScrapeResult, Stage, Validated,
)

if TYPE_CHECKING:
    import parsel


def target_url(loaded: LoadedContract, store: ProjectStore, partition: str) -> str:
    contract = loaded.contract
    for target in contract.static_targets:
        if target.partition_key == partition:
            return target.url
    url = store.target_url(contract.name, partition) if contract.is_dynamic else None
    if url is None:
        raise LookupError(
            f"contract {contract.name!r} has no target with partition key {partition!r}"
            + (" (add it with `scrape-contracts targets add`)" if contract.is_dynamic else "")
        )
    return url


def target_urls(loaded: LoadedContract, store: ProjectStore) -> dict[str, str]:
    """partition key → URL of every target of the contract (one read for a dynamic contract)."""
    contract = loaded.contract
    if contract.is_dynamic:
        return store.list_targets(contract.name)
    return {target.partition_key: target.url for target in contract.static_targets}


def previous_of(store: ProjectStore, contract: str, partition: str) -> Previous | None:
    return previous_all(store, contract, [partition]).get(partition)


def previous_all(store: ProjectStore, contract: str, partitions: list[str]) -> dict[str, Previous]:
    """The last accepted version of each target, with what it was extracted under (one read each)."""
    basis = store.accepted_basis(contract, partitions)
    return {v.partition: Previous(dict(v.record), v.version, v.page_sha256,
                                  *basis.get(v.partition, (None, None)), candidate_id=v.candidate_id)
            for v in store.latest_accepted_all(contract, partitions)}


def shortcut_holds(loaded: LoadedContract, fetched: Fetched, selectors: SelectorVersion) -> bool:
    """An unchanged page may reuse the last accepted record only when the contract is the same.

    After a contract edit (a new field, a fixed selector or pattern) the stored page is extracted again.
    A heal does not count: a page byte-for-byte the one accepted still has the record accepted for it,
    and re-extracting every unchanged page with selectors healed on another layout would make targets
    heal back and forth, in an order that depends on which target ran first. Records of old versions
    without a fingerprint count as extracted under the current contract.
    """
    previous = fetched.previous
    if not fetched.unchanged or previous is None:
        return False
    return previous.contract_fingerprint in (None, loaded.contract.fingerprint)


def page_html(fetched: Fetched, page_html_now: str | None, artifacts: PageStore) -> str | None:
    """The page to extract from: the one just fetched, or, after a 304, the stored last accepted page."""
    if page_html_now:
        return page_html_now
    return artifacts.get(fetched.page_sha256) if fetched.page_sha256 else None


def observe_page(loaded: LoadedContract, partition: str, url: str, page: Any, previous: Previous | None,
                 artifacts: PageStore, emit: Emit, *, force: bool = False) -> Fetched:
    """Store the fetched page and note whether it is the one last accepted (never, with ``force``)."""
    if page.not_modified and previous is None:
        # a 304 refers to a copy we no longer have: without this, extract finds no page much later
        raise FetchError(f"GET {page.url} failed: HTTP 304 Not Modified, but target {partition!r} has no "
                         "accepted version to reuse", kind="http_status", url=page.url, status=304)
    page_sha = None if page.not_modified else artifacts.put(page.html)
    unchanged = not force and previous is not None and (page.not_modified or page_sha == previous.page_sha256)
    attempts = tuple(dict(a) for a in page.attempts)
    # requests of a rendered page that the address guard refused: on their own, as batches keep no attempts
    refused = [r for attempt in attempts for r in attempt.get("requests_refused", ())]
    emit(Stage.FETCHED, {
        "url": page.url, "status": page.status, "elapsed_s": round(page.elapsed_s, 3),
        "bytes": len(page.html.encode("utf-8")) if page.html else 0, "page_sha256": page_sha,
        "encoding": page.encoding, "attempts": list(attempts), "not_modified": bool(page.not_modified),
        "unchanged_content": bool(unchanged), **({"requests_refused": refused} if refused else {}),
    })
    # validators are remembered only when this page is accepted (see ProjectStore.accept): a rejected page
    # must not turn the next run into a 304 "unchanged"
    return Fetched(
        contract=loaded.contract.name, partition=partition, url=url, final_url=page.url,
        page_sha256=page_sha or (previous.page_sha256 if previous else None), unchanged=bool(unchanged),
        attempts=attempts, etag=page.etag, last_modified=page.last_modified, previous=previous,
    )


def earlier_selectors(history: list[SelectorVersion]) -> dict[str, tuple[str, ...]]:
    """field → the selectors of earlier selector versions, newest first (the current one left out)."""
    if not history:
        return {}
    current = history[-1].selectors
    out: dict[str, tuple[str, ...]] = {}
    for version in reversed(history[:-1]):
        for name, selector in version.selectors.items():
            if selector and selector != current.get(name) and selector not in out.get(name, ()):
                out[name] = (*out.get(name, ()), selector)
    return out


def extract(loaded: LoadedContract, fetched: Fetched, selectors: SelectorVersion, html: str | None,
            emit: Emit, earlier: dict[str, tuple[str, ...]] | None = None,
            tree: parsel.Selector | None = None) -> Extracted:
    """Apply the selector version in force; an unchanged page reuses the last accepted record. ``tree``:
    ``html`` already parsed (the caller reads it again for the fingerprints)."""
    if shortcut_holds(loaded, fetched, selectors):
        emit(Stage.EXTRACTED, {"skipped": "page unchanged since the last accepted version",
                               "selector_version": selectors.version})
        return Extracted(fetched, dict(fetched.previous.record), (), selectors.version, dict(selectors.selectors),
                         reused=True)
    if html is None:
        raise RuntimeError(f"page {fetched.page_sha256} is missing from the artifact store; run again with "
                           "--force to fetch it again")
    if loaded.contract.is_list:
        return lists.extract(loaded, fetched, selectors, html, emit)
    page = tree if tree is not None else parse_html(html)  # parsed once for every selector tried
    extraction = extract_record(page, loaded.contract.fields, selectors.selectors,
                                limits=settings.engine_limits(), page_url=fetched.final_url)
    extraction, used, fallback = _earlier_layout(loaded, page, selectors, extraction, fetched.final_url,
                                                 earlier or {})
    hint = None
    if loaded.contract.fetch.adapter != "browser":
        hint = browser_hint(html, extraction.problems, list(loaded.contract.fields))
    emit(Stage.EXTRACTED, {"record": extraction.record, "selector_version": selectors.version,
                           "problems": [dataclasses.asdict(p) for p in extraction.problems],
                           **({"contract_selectors": fallback} if fallback else {}),
                           **({"hint": hint} if hint else {})})
    return Extracted(fetched, extraction.record, extraction.problems, selectors.version, used, hint=hint)


def _earlier_layout(loaded: LoadedContract, page: parsel.Selector, selectors: SelectorVersion,
                    extraction: Extraction, page_url: str, earlier: dict[str, tuple[str, ...]]
                    ) -> tuple[Extraction, dict[str, str], dict[str, str]]:
    """(extraction, selectors used, fields taken with an earlier selector).

    A site can go back to a layout it had before (a redesign rolled back, an A/B test): a healed selector
    then finds nothing where an earlier one still does. The contract's own selector, then those of earlier
    selector versions (``earlier``, newest first) are tried for each such field before anything is healed,
    so going back costs no heal and no healing budget. What they read is validated like any extraction.
    """
    own = selectors.contract_selectors
    used = dict(selectors.selectors)
    failing = {p.field for p in extraction.problems}
    tries: dict[str, list[str]] = {}
    for name in failing:
        line = [own[name]] if own.get(name) and own[name] != used.get(name) else []
        line += [sel for sel in earlier.get(name, ()) if sel not in line and sel != used.get(name)]
        if line:
            tries[name] = line
    if not tries:
        return extraction, used, {}
    fields = loaded.contract.fields
    back: dict[str, str] = {}
    record, raw = dict(extraction.record), dict(extraction.raw)
    for depth in range(max(len(line) for line in tries.values())):
        round_ = {n: line[depth] for n, line in tries.items() if n not in back and depth < len(line)}
        if not round_:
            break
        trial = extract_record(page, {n: fields[n] for n in round_}, round_,
                               limits=settings.engine_limits(), page_url=page_url)
        for name in sorted(set(round_) - trial.problem_fields()):
            back[name] = round_[name]
            record[name], raw[name] = trial.record[name], trial.raw[name]
    if not back:
        return extraction, used, {}
    problems = tuple(p for p in extraction.problems if p.field not in back)
    return Extraction(record=record, raw=raw, problems=problems), {**used, **back}, dict(sorted(back.items()))


def validate(loaded: LoadedContract, extracted: Extracted, emit: Emit) -> Validated:
    """JSON Schema and the contract's rules, against the last accepted version."""
    contract = loaded.contract
    if contract.is_list:
        return lists.validate(loaded, extracted, emit)
    previous = extracted.fetched.previous
    schema_violations = validate_schema(extracted.record, contract.record_schema(), limits=settings.engine_limits())
    violations = tuple(schema_violations + validate_rules(
        extracted.record, contract.fields, previous.record if previous else None,
        contract.expected_for(extracted.fetched.partition)))
    missing = [i for i, v in enumerate(violations) if v.check == REQUIRED_CHECK]
    if extracted.hint and missing:
        # once, with the first missing field: the check's description joins the messages of all of them
        first = violations[missing[0]]
        hinted = dataclasses.replace(first, message=f"{first.message}; {extracted.hint}")
        violations = (*violations[:missing[0]], hinted, *violations[missing[0] + 1:])
    for violation in violations:
        emit(Stage.VIOLATION_FOUND, violation.as_dict())
    return Validated(extracted, violations)


def heal_triggers(validated: Validated) -> list[str]:
    """Fields whose selector is suspect: no match, several matches, or a value breaking a non-change rule."""
    if validated.extracted.record and is_set(validated.extracted.record):
        return lists.heal_triggers(validated)
    fields = {p.field for p in validated.extracted.problems}
    fields |= {v.field for v in validated.violations if v.field and v.check != CHANGE_CHECK}
    return sorted(fields)


def needs_healing(loaded: LoadedContract, validated: Validated) -> bool:
    # a reused record (the unchanged shortcut) has no selector to heal
    return bool(heal_triggers(validated)) and loaded.contract.healing.enabled and not validated.extracted.reused


def decide(loaded: LoadedContract, validated: Validated, heal: HealReport, emit: Emit) -> ScrapeResult:
    """Diff against the last accepted record and decide the outcome."""
    if loaded.contract.is_list:
        return lists.decide(loaded, validated, heal, emit)
    previous = validated.fetched.previous
    record = validated.extracted.record
    changes = tuple(diff_records(previous.record if previous else None, record, loaded.contract.fields))
    outcome = decide_outcome(validated.violations, changes, healed=heal.healed, has_previous=previous is not None)
    if heal.repair_pending:
        outcome = Outcome.REVIEW_REQUIRED  # the provider's proposal waits for a person, never accepted here
    if changes and previous is not None:
        emit(Stage.CHANGE_DETECTED, {"changes": [c.as_dict() for c in changes]})
    return ScrapeResult(
        contract=loaded.contract.name, partition=validated.fetched.partition, url=validated.fetched.url,
        record=record, outcome=outcome, violations=validated.violations, problems=validated.extracted.problems,
        changes=changes, heal=heal, fetched=validated.fetched, selector_version=validated.extracted.selector_version,
        contract_fingerprint=loaded.contract.fingerprint,
    )


def rejudge(loaded: LoadedContract, partition: str, record: dict[str, Any], previous: Previous | None, *,
            healed: bool) -> tuple[tuple[Any, ...], tuple[Any, ...], Outcome]:
    """(violations, changes, outcome) of a record against ``previous``: the gate, without the stages' story."""
    contract = loaded.contract
    if contract.is_list:
        return lists.rejudge(loaded, record, previous, healed=healed)
    schema_violations = validate_schema(record, contract.record_schema(), limits=settings.engine_limits())
    violations = tuple(schema_violations + validate_rules(
        record, contract.fields, previous.record if previous else None, contract.expected_for(partition)))
    changes = tuple(diff_records(previous.record if previous else None, record, contract.fields))
    return violations, changes, decide_outcome(violations, changes, healed=healed, has_previous=previous is not None)


def redecide(loaded: LoadedContract, result: ScrapeResult, previous: Previous | None) -> ScrapeResult:
    """The same candidate, diffed against a newer accepted version (another run accepted one meanwhile)."""
    violations, changes, outcome = rejudge(loaded, result.partition, result.record, previous,
                                           healed=result.heal.healed)
    if result.heal.repair_pending:
        outcome = Outcome.REVIEW_REQUIRED
    summary = lists.summary_of(result.record, changes, previous) if loaded.contract.is_list else None
    return dataclasses.replace(result, violations=violations, changes=changes, outcome=outcome,
                               fetched=dataclasses.replace(result.fetched, previous=previous),
                               summary=summary)


def heal_and_decide(loaded: LoadedContract, validated: Validated, run_id: str, artifacts: PageStore,
                    store: ProjectStore, emit: Emit) -> ScrapeResult:
    """Heal broken selectors when there is something to heal (never inventing a value), then decide."""
    report = HealReport()
    if needs_healing(loaded, validated) and loaded.contract.is_list:
        validated, report = lists_heal.heal(loaded, validated, run_id, artifacts, store, emit)
    elif needs_healing(loaded, validated):
        validated, report = _heal(loaded, validated, run_id, artifacts, store, emit)
    result = decide(loaded, validated, report, emit)
    extracted = validated.extracted
    if result.outcome in fingerprints.KEPT_OUTCOMES and not extracted.reused and result.page_sha256:
        result = fingerprints.with_fingerprints(loaded, result, extracted.selectors,
                                                artifacts.get(result.page_sha256), extracted.reused)
    return result


def process_page(loaded: LoadedContract, fetched: Fetched, html: str | None, selectors: SelectorVersion,
                 emit: Emit, earlier: dict[str, tuple[str, ...]] | None = None) -> ScrapeResult | Validated:
    """The pure part of a scrape: extract, validate and, when nothing needs healing, decide.

    Returns the ``Validated`` record instead when a heal is due: healing reads and writes the store, so the
    caller does it.
    """
    tree = None
    if html is not None and not loaded.contract.is_list and not shortcut_holds(loaded, fetched, selectors):
        tree = parse_html(html)  # once: for the extraction and, when it may be accepted, its fingerprints
    validated = validate(loaded, extract(loaded, fetched, selectors, html, emit, earlier, tree), emit)
    if needs_healing(loaded, validated):
        return validated
    result = decide(loaded, validated, HealReport(), emit)
    extracted = validated.extracted
    return fingerprints.with_fingerprints(loaded, result, extracted.selectors,
                                          tree if tree is not None else html, extracted.reused)


def _heal(loaded: LoadedContract, validated: Validated, run_id: str, artifacts: PageStore,
          store: ProjectStore, emit: Emit) -> tuple[Validated, HealReport]:
    from scrape_contracts.engine.heal import heal

    contract = loaded.contract
    fetched, extracted = validated.fetched, validated.extracted
    partition, previous = fetched.partition, fetched.previous
    triggers = tuple(heal_triggers(validated))
    budget = contract.healing.budget
    state = store.state(contract.name, partition)
    if state.heal_attempts >= budget:
        reason = f"healing budget exhausted ({state.heal_attempts}/{budget} attempts used)"
        heal_steps.pause_exhausted(store, contract.name, partition, reason, emit)
        return validated, HealReport(attempted=True, fields=triggers, reason=reason)
    before_html = artifacts.get(previous.page_sha256) if previous and previous.page_sha256 else None
    # the page may have been pruned (see retention): then the fingerprints stored at acceptance stand in
    memories = fingerprints.memories_of(store, previous.candidate_id) if previous and not before_html else {}
    if previous is None or (before_html is None and not memories):
        reason = ("no last accepted page to heal from (the first scrape of a target cannot be healed)"
                  if previous is None else "the last accepted page was pruned and no fingerprints of its "
                  "fields are stored")
        emit(Stage.HEALING_REFUSED, {"fields": list(triggers), "reason": reason})
        return validated, HealReport(attempted=True, fields=triggers, reason=reason)
    # parsed once: the heal reads it, then the healed selectors re-extract from it
    after = parse_html((artifacts.get(fetched.page_sha256) if fetched.page_sha256 else None) or "")
    specs = {name: heal_steps.heal_spec(name, contract.fields[name], extracted.selectors[name],
                              previous.record.get(name))
             for name in triggers}
    started = time.perf_counter()
    results = heal(before_html, after, specs, limits=settings.engine_limits(),
                   page_url=fetched.final_url, memories=memories)
    evidence = {name: {"value": r.value, "selector": r.selector, "old_selector": extracted.selectors[name],
                       "confidence": round(r.confidence, 3), "evidence": r.evidence}
                for name, r in results.items()}
    seconds = round(time.perf_counter() - started, 3)
    emit(Stage.HEALING, {"fields": list(triggers), "results": evidence})
    if not all(results[name].healed for name in triggers):
        refused = [n for n in triggers if not results[n].healed]
        attempts = store.add_heal_attempt(contract.name, partition)
        reason = f"healer refused {', '.join(refused)} (attempt {attempts}/{budget})"
        emit(Stage.HEALING_REFUSED, {"fields": refused, "attempt": attempts, "budget": budget, "reason": reason})
        if attempts >= budget:
            heal_steps.pause_exhausted(store, contract.name, partition,
                             f"healing budget exhausted after {attempts} attempts; fields {', '.join(refused)} "
                             "could not be healed", emit)
        # the provider's own repair, when the contract asks for it: a proposal only, for a person to review
        proposal = repairs.ask(loaded, validated, refused, run_id, store, emit) if repairs.wanted(loaded) else None
        return validated, HealReport(attempted=True, fields=triggers, reason=reason, results=evidence,
                                     seconds=seconds, repair=proposal.as_dict() if proposal else None)
    version = heal_steps.save_selectors(loaded, extracted, {n: results[n] for n in triggers}, run_id, store)
    extraction = extract_record(after, contract.fields, version.selectors,
                                limits=settings.engine_limits(), page_url=fetched.final_url)
    re_extracted = dataclasses.replace(extracted, record=extraction.record, problems=extraction.problems,
                                       selector_version=version.version, selectors=dict(version.selectors))
    re_validated = validate(loaded, re_extracted, lambda *_: None)
    emit(Stage.RE_EXTRACTED, {"record": extraction.record, "selector_version": version.version,
                              "violations": [v.as_dict() for v in re_validated.violations]})
    healed = not extraction.problems and not heal_triggers(re_validated)
    return re_validated, HealReport(attempted=True, healed=healed, fields=triggers, results=evidence,
                                    selector_version=version.version, seconds=seconds)
