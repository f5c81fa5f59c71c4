"""Per contract ``C``: ``scrape/C/candidate`` (one step calling service/single.py) and ``scrape/C``."""


import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import dagster as dg

from scrape_contracts.adapters.store import Candidate, LeaseLost, StoreError
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.contract.model import Contract
from scrape_contracts.defs import provider
from scrape_contracts.defs.leases import lease_failures, run_ended, target_lease
from scrape_contracts.defs.metadata import bounded
from scrape_contracts.defs.names import accepted_key, candidate_key, review_command, scrape_pool, targets_key
from scrape_contracts.defs.partitions import partitions_for
from scrape_contracts.defs.resources import PageStoreResource, FetchResource, ProjectStoreResource
from scrape_contracts.engine.lists import RECORD_KEY, set_records
from scrape_contracts.service import gate, scrape, single
from scrape_contracts.service.records import (
    Emit, Recorded, ScrapeResult, Stage,
)








def emitter(context: dg.OpExecutionContext, contract: str) -> Emit:
    """Each stage is an AssetObservation on the candidate, so run history is the event log."""
    key = candidate_key(contract)
    partition = context.partition_key

    def emit(stage: Stage, data: dict[str, Any]) -> None:
        metadata = {"stage": stage.value, **{k: bounded(v) for k, v in data.items()}}
        if stage == Stage.HEALING:
            metadata.update(selector_change_metadata({"healed": True, "results": data.get("results") or {}}))
        context.log_event(dg.AssetObservation(asset_key=key, partition=partition, metadata=metadata,
                                              description=stage_description(stage.value, data)))
        context.log.info(f"{stage.value}: {json.dumps(bounded(data))[:500]}")

    return emit


def stage_description(stage: str, data: dict[str, Any]) -> str:
    """One line naming the stage first: the asset's Events list shows an observation by its description."""
    for key in ("reason", "message", "error", "reasons", "fields"):
        value = data.get(key)
        if value:
            text = ", ".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)
            return f"{stage}: {text}"[:300]
    return stage


def target_state_observation(contract: str, partition: str, pause_reason: str | None) -> dg.AssetObservation:
    """On the accepted data's partition: whether the target is paused and why (``no`` once it is resumed).

    The partition's page shows the observations made after its latest materialisation next to it, so the
    data being served and the reason it is not being refreshed are read together.
    """
    return dg.AssetObservation(
        asset_key=accepted_key(contract), partition=partition,
        metadata={"paused": pause_reason or "no"},
        description=f"paused: {pause_reason}" if pause_reason else "resumed: scraped again by schedules and batches")


@dataclass(frozen=True)
class ContractAssets:
    candidate: dg.AssetsDefinition
    accepted: dg.AssetsDefinition


def build_contract_assets(loaded: LoadedContract, *, group_name: str | None = None) -> ContractAssets:
    from scrape_contracts.defs.freshness import freshness_policy as contract_freshness_policy

    contract = loaded.contract
    name = contract.name
    partitions_def = partitions_for(contract)
    op_tags = {"scrape_contracts/contract": name}

    # no RetryPolicy: the fetcher retries within the contract's fetch.retries and one fetch.deadline_s, and a
    # Dagster retry on top would multiply both (a slow page took three deadlines).
    # not required: a rejected candidate is not materialised (its failed checks say why), so the UI never
    # shows it as a green "Materialized" and scrape/C is skipped rather than failed
    @dg.asset(
        key=candidate_key(name), partitions_def=partitions_def, group_name=group_name or name,
        description=f"Candidate record of contract {name!r}: fetched, extracted, validated, healed.",
        # the UI marks partitions whose data came from an older version of the contract
        code_version=contract.fingerprint,
        owners=_owners(contract.owners), kinds={"html"}, op_tags=op_tags,
        tags={"scrape_contracts/contract": name},
        io_manager_key="candidate_io_manager", output_required=False, pool=scrape_pool(name),
        # scrape/C/targets (discover:) is upstream: the asset graph shows where the targets come from
        deps=[targets_key(name)] if contract.discover is not None else None,
    )
    def candidate(context: dg.AssetExecutionContext, store: ProjectStoreResource,
                  artifacts: PageStoreResource, fetcher: FetchResource) -> Iterator[dg.Output]:
        """Fetch the page, extract, validate, heal broken selectors (never inventing a value), diff, decide."""
        from scrape_contracts.adapters.fetch import fetcher_for
        from scrape_contracts.adapters.store.host_budgets import budgets_for
        from scrape_contracts.defs.checks import aimed_at_latest, check_evaluations, contract_check_names

        emit = emitter(context.op_execution_context, name)
        partition = context.partition_key
        # a forced run (run tag scrape_contracts/force=true, `scrape-contracts run --force`): no validators
        force = context.run.tags.get("scrape_contracts/force") == "true"
        project_store = store.get()
        # a provider contract's jobs are kept in the project store (adapters/fetch/provider)
        jobs = provider.job_book(loaded, project_store, context.run,
                                 {partition: scrape.target_url(loaded, project_store, partition)})
        with lease_failures(emit):
            try:
                scraped = single.scrape_target(
                    loaded, partition, store=project_store, artifacts=artifacts.get(),
                    # each site host's limits held together with every other run's (PostgreSQL store)
                    fetcher=lambda: fetcher_for(fetcher.settings_for(contract.fetch), loaded.base_dir,
                                                jobs=jobs, budgets=budgets_for(project_store.engine)),
                    run_id=context.run.run_id, emit=emit, force=force, ended=run_ended(context.instance))
            except single.FetchFailed as failed:
                exc = failed.error
                if exc.kind == "budget_spent":  # the contract's budget, not the target, stopped it
                    context.log_event(provider.budget_observation(name, str(exc).split(" refused: ", 1)[-1]))
                if failed.pause_reason is not None:  # an indeterminate submission paused it
                    context.log_event(target_state_observation(name, partition, failed.pause_reason))
                raise dg.Failure(description=str(exc), allow_retries=False, metadata={
                    "url": failed.url, "kind": exc.kind, "transient": exc.transient}) from None
        result, recorded = scraped.result, scraped.recorded
        if recorded.status == "quarantined":
            emit(Stage.QUARANTINED, {"candidate_id": recorded.candidate_id,
                                     "reasons": gate.quarantine_reasons(result),
                                     "review": review_command(name, result.partition)})
        if scraped.pause_reason is not None:
            context.log_event(target_state_observation(name, result.partition, scraped.pause_reason))
        if recorded.status == "rejected":
            # every check of the run, passed or failed: the check steps are skipped without a candidate
            violations = [v.as_dict() for v in result.violations]
            evaluations = check_evaluations(name, result.partition, contract_check_names(loaded), violations,
                                            result.outcome.value, recorded.candidate_id, result.summary)
            emit(Stage.REJECTED, {"candidate_id": recorded.candidate_id,
                                  "reasons": [v["message"] for v in violations]})
            # yielded, not logged: events logged with log_event reach the event log at the op's next yield,
            # and the failure below ends the op
            yield from aimed_at_latest(context.instance, evaluations)
            # a rejected candidate fails its run as a quarantined one does (run-failure alerts fire for both);
            # the last accepted version stays
            raise dg.Failure(description=f"rejected {name}/{result.partition}: "
                                         + "; ".join(v["message"] for v in violations)[:500],
                             allow_retries=False, metadata={"candidate_id": recorded.candidate_id})
        yield dg.Output(recorded, metadata=candidate_metadata(result, recorded))

    @dg.asset(
        key=accepted_key(name), partitions_def=partitions_def, group_name=group_name or name,
        ins={"candidate": dg.AssetIn(candidate_key(name))}, io_manager_key="accepted_io_manager",
        description=f"Accepted records of contract {name!r}: what downstream pipelines read.",
        owners=_owners(contract.owners), kinds={"table"}, tags={"scrape_contracts/contract": name},
        # the UI's Columns panel: one column per field, with its type, selector and rules
        metadata={"dagster/column_schema": column_schema(contract)},
        # asset-level, from schedule:; each target's freshness is the check refreshed_on_schedule
        freshness_policy=contract_freshness_policy(contract),
    )
    def accepted(context: dg.AssetExecutionContext, candidate: Candidate,
                 store: ProjectStoreResource) -> dg.MaterializeResult:
        """The candidate that passed every blocking check becomes the accepted version."""
        emit = emitter(context, name)
        # the run that stored the candidate carries on with its lease; a run that only accepts takes one
        own = candidate.run_id == context.run.run_id
        with target_lease(context, store.get(), name, candidate.partition, contract.fetch, emit,
                          take=not own) as held:
            try:
                recorded = gate.accept(held.store, candidate, context.run.run_id, loaded)
            except LeaseLost:
                raise
            except StoreError as exc:
                raise dg.Failure(description=f"cannot accept candidate {candidate.id}: {exc}",
                                 allow_retries=False) from None
            finally:
                held.release()
        if recorded.status in ("quarantined", "rejected", "superseded"):
            # another run accepted a newer version while this one ran; against it, this candidate fails
            raise dg.Failure(description=(
                f"not accepted: another run accepted a newer version of {name}/{candidate.partition} meanwhile, "
                f"and against it this candidate is {recorded.status}: {recorded.quarantine_reason}"
                + (f" ({review_command(name, candidate.partition)})"
                   if recorded.status == "quarantined" else "")),
                allow_retries=False)
        context.log.info(f"candidate {candidate.id} ({candidate.outcome}): {recorded.status}")
        # still paused (a review pending): said on the materialisation, which the partition page shows first
        state = store.get().state(name, candidate.partition)
        return dg.MaterializeResult(metadata=accepted_metadata(
            outcome=candidate.outcome, candidate_id=candidate.id, url=candidate.url, record=candidate.record,
            version=recorded.accepted_version, new_version=recorded.status == "accepted",
            heal=(candidate.details or {}).get("heal") or {}, list_contract=contract.is_list,
            paused=state.pause_reason if state.paused else None))

    return ContractAssets(candidate, accepted)






def candidate_metadata(result: ScrapeResult, recorded: Recorded) -> dict[str, Any]:
    return {
        "outcome": result.outcome.value,
        "status": str(recorded.status),
        "candidate_id": recorded.candidate_id,
        "url": result.url,
        # a list target's set can be long: its first records here, every one in the project store
        "record" if result.summary is None else "records": dg.MetadataValue.json(bounded(
            result.record if result.summary is None else set_records(result.record)[:20])),
        "violations": dg.MetadataValue.json(bounded([v.as_dict() for v in result.violations])),
        "changes": dg.MetadataValue.json(bounded([c.as_dict() for c in result.stored_changes()[:50]])),
        "selector_version": result.selector_version or 0,
        "page_sha256": result.page_sha256 or "",
        "healed": result.heal.healed,
        **provider.job_metadata(result.fetched.attempts),
        **proxy_metadata(result.fetched.attempts),
        **selector_change_metadata(result.heal.as_dict()),
        **set_metadata(result.summary),
    }


def proxy_metadata(attempts: Any) -> dict[str, Any]:
    """The proxy (its shown name) that carried the page, when the contract has proxies."""
    proxy = attempts[-1].get("proxy") if attempts else None
    return {"proxy": proxy} if proxy else {}


def set_metadata(summary: dict[str, Any] | None) -> dict[str, Any]:
    """A list target's counts, and the keys of the records added, removed and changed (by record key)."""
    if summary is None:
        return {}
    counts = {k: summary[k] for k in ("records", "dropped", "pages", "added", "removed", "changed")}
    return {**counts, "record_changes": dg.MetadataValue.json(
        {k: summary.get(k) or [] for k in ("added_keys", "removed_keys", "changed_keys")})}


def selector_change_metadata(heal: dict[str, Any]) -> dict[str, Any]:
    """A healed selector, readable without opening JSON: ``price: #price → [data-field=price]``."""
    if not heal.get("healed"):
        return {}
    lines = [f"- **{field}**: `{r.get('old_selector')}` → `{r['selector']}` (confidence {r.get('confidence')})"
             for field, r in (heal.get("results") or {}).items() if r.get("selector")]
    return {"healed_selectors": dg.MetadataValue.md("\n".join(lines))} if lines else {}


def column_schema(contract: Contract) -> dg.TableSchema:
    """The record's columns as the contract declares them (a heal changes selectors, never columns)."""
    columns = []
    if contract.is_list:
        key = ", ".join(contract.records.key) if contract.records.key else "a hash of the record's values"
        columns.append(dg.TableColumn(name=RECORD_KEY, type="string", description=f"record key: {key}",
                                      constraints=dg.TableColumnConstraints(nullable=False)))
    for name, spec in contract.fields.items():
        rules = spec.rules
        given = (("min", rules.min), ("max", rules.max), ("expected", rules.expected),
                 ("max_change_pct", rules.max_change_pct), ("pattern", spec.pattern),
                 ("normalise", ", ".join(spec.normalise) or None))
        other = [f"{label} {value:g}" if isinstance(value, float) else f"{label} {value}"
                 for label, value in given if value is not None]
        columns.append(dg.TableColumn(
            name=name, type=spec.type, description=f"selector in the contract: {spec.selector}",
            constraints=dg.TableColumnConstraints(nullable=not spec.required, other=other)))
    return dg.TableSchema(columns=columns)


def accepted_metadata(*, outcome: str, candidate_id: int, url: str, record: dict[str, Any],
                      version: int | None, new_version: bool, heal: dict[str, Any],
                      stages: list[dict[str, Any]] | None = None,
                      paused: str | None = None, list_contract: bool = False) -> dict[str, Any]:
    # a partition's accepted data is one record (the target page's), or a list target's set of records
    rows = len(set_records(record)) if list_contract else 1
    metadata: dict[str, Any] = {
        "outcome": str(outcome), "candidate_id": candidate_id, "url": dg.MetadataValue.url(url),
        "version": version or 0, "new_version": new_version,
        "dagster/row_count": rows,
        "record" if not list_contract else "records":
            dg.MetadataValue.json(bounded(set_records(record)[:20] if list_contract else record)),
        **selector_change_metadata(heal),
    }
    if stages is not None:
        metadata["stages"] = dg.MetadataValue.json(bounded(stages))
    if paused:
        metadata["paused"] = paused
    return metadata


def _owners(owners: list[str]) -> list[str] | None:
    # Dagster accepts emails and team:<name>; anything else would fail the code location
    valid = [o if "@" in o or o.startswith("team:") else f"team:{o}" for o in owners]
    return valid or None
