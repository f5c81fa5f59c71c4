"""Blocking, partitioned asset checks on ``scrape/C/candidate``: an ERROR keeps ``scrape/C`` untouched.

The rules are evaluated once, by the engine, while the candidate is built; each check reports the
violations that belong to it, with the field, the old and new value and the rule in its metadata.
"""


import json
import logging
import warnings
from typing import Any

import dagster as dg

from scrape_contracts.adapters.store import Candidate
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.defs.names import REVIEW_HINT, candidate_key, review_command
from scrape_contracts.defs.metadata import bounded, bounded_text
from scrape_contracts.defs.partitions import partitions_for
from scrape_contracts.engine.set_checks import (
    COVERAGE_CHECK, KEYS_UNIQUE_CHECK, RECORD_COUNT_CHECK, TOLERANCE_CHECK, set_check_names,
)
from scrape_contracts.engine.validate import (
    CHANGE_CHECK, REQUIRED_CHECK, REVIEW_CHECKS, SCHEMA_CHECK, SET_CHANGE_CHECK, check_names,
)
from scrape_contracts.service.records import Stage

class _SkippedCheckNotice(logging.Filter):
    """A rejected candidate is not materialised, so its check steps are skipped and the heal op logs their
    evaluations; Dagster then notes, per blocking check, that it "emitted no result". Expected: not logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("emitted no result in step" in message and "'scrape/" in message)


logging.getLogger("dagster._core.execution.plan.active").addFilter(_SkippedCheckNotice())

_DESCRIPTIONS = {
    SCHEMA_CHECK: "The record satisfies the contract's JSON Schema.",
    REQUIRED_CHECK: "Every required field was found on the page.",
    CHANGE_CHECK: "No field changed more than its max_change_pct against the last accepted version; "
                  "a failure quarantines the candidate for review.",
    RECORD_COUNT_CHECK: "The target yields between records.min_records and records.max_records records.",
    KEYS_UNIQUE_CHECK: "No two records share a record key.",
    COVERAGE_CHECK: "Each field in records.coverage is on at least its share of the records.",
    TOLERANCE_CHECK: "At most records.tolerance_pct of the records break the schema or a rule (those are "
                     "dropped and counted; more fails the set).",
    SET_CHANGE_CHECK: "No more records added, removed or changed at once than records.max_*_pct of the last "
                      "accepted set; a failure quarantines the candidate for review.",
}


def _description(name: str) -> str:
    if name.endswith("_matches_expected"):
        return f"{name.removesuffix('_matches_expected')} equals the value the contract expects."
    if name.endswith("_within_bounds"):
        return f"{name.removesuffix('_within_bounds')} is within the contract's min/max."
    return _DESCRIPTIONS[name]


def check_metadata(check: str, violations: list[dict[str, Any]], outcome: str, candidate_id: int,
                   review: str | None = None, summary: dict[str, Any] | None = None
                   ) -> tuple[bool, dict[str, Any], str | None]:
    """(passed, metadata, description) of one check, from the violations the engine found; ``summary``:
    a list target's counts (records, dropped, added, removed, changed), shown on each of its checks."""
    # values from the page can be huge: every string is cut to the metadata limit (defs/metadata.py)
    mine = bounded([v for v in violations if v["check"] == check])
    metadata: dict[str, Any] = {"outcome": str(outcome), "candidate_id": candidate_id}
    for name in ("records", "dropped", "added", "removed", "changed", "previous_records"):
        if summary and summary.get(name) is not None:
            metadata[name] = summary[name]
    if summary and check == SET_CHANGE_CHECK:
        for name in ("added_keys", "removed_keys", "changed_keys"):
            metadata[name] = dg.MetadataValue.json(summary.get(name) or [])
    if mine:
        first = mine[0]
        metadata.update({
            "field": first["field"] or "(record)",
            "rule": first["rule"],
            "old": bounded_text(json.dumps(first["old"], default=str)),
            "new": bounded_text(json.dumps(first["new"], default=str)),
            "message": first["message"],
            "violations": dg.MetadataValue.json(mine),
        })
        if check in REVIEW_CHECKS:
            metadata["review"] = f"quarantined: {review or REVIEW_HINT}"
    return not mine, metadata, _summary(mine)


def _summary(violations: list[dict[str, Any]]) -> str | None:
    """Every violation of one check in its description (a record can break the schema in several places)."""
    if not violations:
        return None
    shown = "; ".join(v["message"] for v in violations[:5])
    return shown + (f" (and {len(violations) - 5} more)" if len(violations) > 5 else "")


def check_evaluations(contract: str, partition: str, checks: list[str], violations: list[dict[str, Any]],
                      outcome: str, candidate_id: int, summary: dict[str, Any] | None = None
                      ) -> list[dg.AssetCheckEvaluation]:
    """The evaluation of each of ``checks`` from the violations, for events logged outside a check step (a
    rejected candidate is not materialised, so its check steps do not run; batched runs)."""
    evaluations = []
    for check in checks:
        passed, metadata, description = check_metadata(check, violations, outcome, candidate_id,
                                                       review_command(contract, partition), summary)
        evaluations.append(dg.AssetCheckEvaluation(
            asset_key=candidate_key(contract), check_name=check, passed=passed, partition=partition,
            severity=dg.AssetCheckSeverity.ERROR, description=description, metadata=metadata))
    return evaluations


def aimed_at_latest(instance: dg.DagsterInstance, events: list[Any]) -> list[Any]:
    """``events`` with each check evaluation aimed at its partition's latest candidate materialisation.

    The UI shows a partition's check status only when its latest evaluation targets the partition's latest
    materialisation, and "Missing" otherwise; an evaluation logged outside a check step (a rejected candidate
    is not materialised, a batched run, a reviewer's accept) targets none unless it says so.
    """
    targets: dict[tuple[dg.AssetKey, str | None], Any] = {}
    aimed = []
    for event in events:
        if not isinstance(event, dg.AssetCheckEvaluation) or event.target_materialization_data is not None:
            aimed.append(event)
            continue
        where = (event.asset_key, event.partition)
        if where not in targets:
            records = instance.fetch_materializations(dg.AssetRecordsFilter(
                asset_key=event.asset_key, asset_partitions=[event.partition] if event.partition else None),
                limit=1).records
            targets[where] = materialization_pointer(records[0]) if records else None
        aimed.append(dg.AssetCheckEvaluation(
            asset_key=event.asset_key, check_name=event.check_name, passed=event.passed, metadata=event.metadata,
            target_materialization_data=targets[where], severity=event.severity, description=event.description,
            blocking=event.blocking, partition=event.partition))
    return aimed


def contract_check_names(loaded: LoadedContract) -> list[str]:
    contract = loaded.contract
    if contract.records is not None:
        return set_check_names(contract.records, contract.fields)
    return check_names(contract.fields, [n for n in contract.fields if contract.has_expected(n)])


def _result(check: str, candidate: Candidate) -> dg.AssetCheckResult:
    details = candidate.details or {}
    passed, metadata, description = check_metadata(check, details.get("violations", []),
                                                   candidate.outcome, candidate.id,
                                                   review_command(candidate.contract, candidate.partition),
                                                   details.get("set"))
    return dg.AssetCheckResult(passed=passed, severity=dg.AssetCheckSeverity.ERROR, metadata=metadata,
                               description=description)


def build_contract_checks(loaded: LoadedContract) -> list[dg.AssetChecksDefinition]:
    contract = loaded.contract
    partitions_def = partitions_for(contract)
    checks = []
    for check in contract_check_names(loaded):
        with warnings.catch_warnings():
            # partitioned asset checks are a preview feature in dagster 1.13; we depend on them on purpose
            warnings.filterwarnings("ignore", message=".*partitions_def on an AssetCheckSpec", category=dg.PreviewWarning)
            checks.append(dg.asset_check(
                asset=candidate_key(contract.name), name=check, description=_description(check), blocking=True,
                partitions_def=partitions_def,
            )(_check_fn(contract.name, check)))
    return checks


def _check_fn(contract: str, check: str) -> Any:
    # a factory, so each check closes over its own name (dagster reads the function's parameters)
    def evaluate(context: dg.AssetCheckExecutionContext, candidate: Candidate) -> dg.AssetCheckResult:
        result = _result(check, candidate)
        if not result.passed:
            # an observation too: the event trail reads one stream with global, resumable ids
            context.op_execution_context.log_event(dg.AssetObservation(
                asset_key=candidate_key(contract), partition=candidate.partition,
                metadata={"stage": Stage.CHECK_FAILED.value, "check": check,
                          "message": result.description or "", "outcome": str(candidate.outcome)}))
        return result

    return evaluate


def materialization_pointer(record: dg.EventLogRecord) -> Any:
    """What ``AssetCheckEvaluation.target_materialization_data`` takes, for the materialisation ``record``.

    Dagster exports the evaluation but not the pointer's class; it is built from its stored form (the
    serialisation Dagster keeps in every instance's event log, so it stays readable across releases) with the
    public ``deserialize_value``.
    """
    return dg.deserialize_value(json.dumps({
        "__class__": "AssetCheckEvaluationTargetMaterializationData", "storage_id": record.storage_id,
        "run_id": record.run_id, "timestamp": record.timestamp}))
