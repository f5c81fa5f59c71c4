"""The stages of one materialisation, as plain functions the ops call.

Each stage takes and returns plain, picklable dicts (they travel between ops through the IO manager) and
reports through ``emit``, so the same code runs inside a Dagster op and can be exercised directly.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from scrape_contracts.adapters.artifacts import ArtifactStore
from scrape_contracts.adapters.store import ProjectStore, SelectorConflict
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.engine.diff import diff_records
from scrape_contracts.engine.extract import extract_record
from scrape_contracts.engine.outcome import decide_outcome
from scrape_contracts.engine.validate import CHANGE_CHECK, Violation, validate_rules, validate_schema

Emit = Callable[[str, dict[str, Any]], None]


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


def fetched_stage(loaded: LoadedContract, partition: str, url: str, page: Any, artifacts: ArtifactStore,
                  store: ProjectStore, emit: Emit) -> dict[str, Any]:
    """Store the page and remember its validators; the result is what the extract stage needs."""
    contract = loaded.contract.name
    last_accepted = store.latest_accepted(contract, partition)
    page_sha = None if page.not_modified else artifacts.put(page.html)
    unchanged = last_accepted is not None and (
        page.not_modified or (page_sha is not None and page_sha == last_accepted.page_sha256))
    attempts = [dict(a) for a in page.attempts]
    emit("fetched", {
        "url": page.url, "status": page.status, "elapsed_s": round(page.elapsed_s, 3),
        "bytes": len(page.html.encode("utf-8")) if page.html else 0, "page_sha256": page_sha,
        "encoding": page.encoding, "attempts": attempts, "not_modified": bool(page.not_modified),
        "unchanged_content": bool(unchanged),
    })
    # validators are remembered only when this page is accepted (see ProjectStore.accept): a rejected
    # page must not turn the next run into a 304 "unchanged"
    # the last accepted version is read once, here: every later stage compares against the same snapshot
    return {"contract": contract, "partition": partition, "url": url, "final_url": page.url,
            "page_sha256": page_sha or (last_accepted.page_sha256 if last_accepted else None),
            "unchanged": bool(unchanged), "attempts": attempts,
            "validators": {"etag": page.etag, "last_modified": page.last_modified},
            "previous": dict(last_accepted.record) if last_accepted else None,
            "previous_version": last_accepted.version if last_accepted else None,
            "previous_page_sha256": last_accepted.page_sha256 if last_accepted else None}


def extract_stage(loaded: LoadedContract, fetched: dict[str, Any], artifacts: ArtifactStore,
                  store: ProjectStore, emit: Emit) -> dict[str, Any]:
    contract = loaded.contract
    selectors = store.current_selectors(contract.name, contract.selectors())
    if fetched["unchanged"] and fetched["previous"] is not None:
        # 304 / same bytes as the last accepted page: nothing to re-extract
        emit("extracted", {"skipped": "page unchanged since the last accepted version",
                           "selector_version": selectors.version})
        return {**fetched, "record": dict(fetched["previous"]), "problems": [],
                "selector_version": selectors.version,
                "selectors": selectors.selectors}
    html = artifacts.get(fetched["page_sha256"]) if fetched["page_sha256"] else None
    if html is None:
        raise RuntimeError(f"page {fetched['page_sha256']} is missing from the artifact store "
                           f"({artifacts.root}); re-run to fetch it again")
    extraction = extract_record(html, contract.fields, selectors.selectors)
    problems = [{"field": p.field, "kind": p.kind, "message": p.message} for p in extraction.problems]
    emit("extracted", {"record": extraction.record, "problems": problems, "selector_version": selectors.version})
    return {**fetched, "record": extraction.record, "problems": problems, "selector_version": selectors.version,
            "selectors": selectors.selectors}


def validate_stage(loaded: LoadedContract, extracted: dict[str, Any], emit: Emit) -> dict[str, Any]:
    violations = validate(loaded, extracted["partition"], extracted["record"], extracted["previous"])
    for violation in violations:
        emit("violation_found", violation)
    return {**extracted, "violations": violations}


def validate(loaded: LoadedContract, partition: str, record: dict[str, Any],
             previous: dict[str, Any] | None) -> list[dict]:
    contract = loaded.contract
    found = validate_schema(record, contract.record_schema()) + validate_rules(
        record, contract.fields, previous, contract.expected_for(partition))
    return [v.as_dict() for v in found]


def heal_triggers(validated: dict[str, Any]) -> list[str]:
    """Fields whose selector is suspect: no match, several matches, or a value breaking a non-change rule."""
    fields = {p["field"] for p in validated["problems"]}
    fields |= {v["field"] for v in validated["violations"] if v["field"] and v["check"] != CHANGE_CHECK}
    return sorted(fields)


def heal_stage(loaded: LoadedContract, validated: dict[str, Any], run_id: str, artifacts: ArtifactStore,
               store: ProjectStore, emit: Emit) -> dict[str, Any]:
    """Heal broken selectors when there is something to heal, then decide the outcome."""
    contract = loaded.contract
    partition = validated["partition"]
    triggers = heal_triggers(validated)
    heal_info: dict[str, Any] = {"attempted": False}
    if triggers and contract.healing.enabled and not validated["unchanged"]:
        validated, heal_info = _try_heal(loaded, validated, triggers, run_id, artifacts, store, emit)
    changes = diff_records(validated["previous"], validated["record"], contract.fields)
    outcome = decide_outcome([Violation(**v) for v in validated["violations"]], changes,
                             healed=bool(heal_info.get("healed")), has_previous=validated["previous"] is not None)
    if changes and validated["previous"] is not None:
        emit("change_detected", {"changes": [c.as_dict() for c in changes]})
    details = {
        "violations": validated["violations"], "problems": validated["problems"],
        "changes": [c.as_dict() for c in changes], "previous": validated["previous"],
        "previous_version": validated["previous_version"], "heal": heal_info, "attempts": validated["attempts"],
        "validators": validated["validators"],
    }
    return {"contract": contract.name, "partition": partition, "url": validated["url"],
            "record": validated["record"], "outcome": outcome.value, "details": details,
            "page_sha256": validated["page_sha256"], "selector_version": validated["selector_version"]}


def _try_heal(loaded: LoadedContract, validated: dict[str, Any], triggers: list[str], run_id: str,
              artifacts: ArtifactStore, store: ProjectStore, emit: Emit) -> tuple[dict[str, Any], dict[str, Any]]:
    from scrape_contracts.engine.heal import heal

    contract = loaded.contract
    partition = validated["partition"]
    budget = contract.healing.budget
    state = store.state(contract.name, partition)
    info: dict[str, Any] = {"attempted": True, "fields": triggers, "healed": False}
    if state.heal_attempts >= budget:
        info["reason"] = f"healing budget exhausted ({state.heal_attempts}/{budget} attempts used)"
        _pause_exhausted(store, contract.name, partition, info["reason"], emit)
        return validated, info
    last_good_page = validated["previous_page_sha256"]
    before_html = artifacts.get(last_good_page) if last_good_page else None
    if validated["previous"] is None or before_html is None:
        info["reason"] = "no last accepted page to heal from (the first scrape of a target cannot be healed)"
        emit("healing_refused", info)
        return validated, info
    after_html = artifacts.get(validated["page_sha256"]) or ""
    specs = {
        name: {"selector": validated["selectors"][name], "before": validated["previous"].get(name),
               "type": contract.fields[name].type, "pattern": contract.fields[name].pattern,
               "normalise": list(contract.fields[name].normalise),
               **contract.fields[name].rules.model_dump(exclude_none=True)}
        for name in triggers
    }
    started = time.perf_counter()
    results = heal(before_html, after_html, specs)
    evidence = {name: {"value": r.value, "selector": r.selector, "confidence": round(r.confidence, 3),
                       "evidence": r.evidence} for name, r in results.items()}
    info["results"] = evidence
    info["seconds"] = round(time.perf_counter() - started, 3)
    emit("healing", {"fields": triggers, "results": evidence})
    if not all(results[name].healed for name in triggers):
        refused = [n for n in triggers if not results[n].healed]
        attempts = store.add_heal_attempt(contract.name, partition)
        info["reason"] = f"healer refused {', '.join(refused)} (attempt {attempts}/{budget})"
        emit("healing_refused", {"fields": refused, "attempt": attempts, "budget": budget})
        if attempts >= budget:
            _pause_exhausted(store, contract.name, partition,
                             f"healing budget exhausted after {attempts} attempts; fields {', '.join(refused)} "
                             "could not be healed", emit)
        return validated, info
    new_selectors = {**validated["selectors"], **{n: results[n].selector for n in triggers}}
    version = _save_selectors(loaded, validated, new_selectors, results, triggers, run_id, store)
    extraction = extract_record(after_html, contract.fields, version.selectors)
    re_validated = {**validated, "record": extraction.record, "selector_version": version.version,
                    "selectors": version.selectors,
                    "problems": [{"field": p.field, "kind": p.kind, "message": p.message}
                                 for p in extraction.problems]}
    re_validated["violations"] = validate(loaded, partition, extraction.record, validated["previous"])
    emit("re_extracted", {"record": extraction.record, "selector_version": version.version,
                          "violations": re_validated["violations"]})
    info.update(healed=not re_validated["problems"] and not heal_triggers(re_validated),
                selector_version=version.version)
    return re_validated, info


def _save_selectors(loaded: LoadedContract, validated: dict[str, Any], new_selectors: dict[str, str],
                    results: dict[str, Any], triggers: list[str], run_id: str, store: ProjectStore) -> Any:
    contract = loaded.contract
    parent = validated["selector_version"]
    changes = {n: {"old": validated["selectors"][n], "new": results[n].selector,
                   "evidence": results[n].evidence, "confidence": results[n].confidence} for n in triggers}
    # every conflict means another run's save committed, so this always progresses; the deadline only
    # bounds pathological contention
    deadline = time.monotonic() + 60
    while True:
        try:
            return store.add_selector_version(
                contract.name, parent_version=parent, selectors=new_selectors,
                contract_selectors=contract.selectors(), source="heal", changes=changes, run_id=run_id,
                partition=validated["partition"],
            )
        except SelectorConflict:
            if time.monotonic() > deadline:
                raise SelectorConflict(
                    f"could not save healed selectors of {contract.name!r}: too much contention") from None
            # another run healed first: keep its selectors and layer ours on top, never drop either
            latest = store.current_selectors(contract.name, contract.selectors())
            parent = latest.version
            new_selectors = {**latest.selectors, **{n: results[n].selector for n in triggers}}


def _pause_exhausted(store: ProjectStore, contract: str, partition: str, reason: str, emit: Emit) -> None:
    store.update_state(contract, partition, paused=True, pause_reason=reason)
    emit("paused", {"reason": reason})
