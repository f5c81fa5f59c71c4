"""Per contract ``C``: ``scrape/C/candidate`` (ops fetch → extract → validate → heal) and ``scrape/C``."""


import json
from dataclasses import dataclass
from typing import Any

import dagster as dg

from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.defs.partitions import partitions_for
from scrape_contracts.defs.pipeline import (
    extract_stage, fetched_stage, heal_stage, target_url, validate_stage,
)
from scrape_contracts.defs.resources import ArtifactStoreResource, FetchResource, ProjectStoreResource


def candidate_key(contract: str) -> dg.AssetKey:
    return dg.AssetKey(["scrape", contract, "candidate"])


def accepted_key(contract: str) -> dg.AssetKey:
    return dg.AssetKey(["scrape", contract])


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def emitter(context: dg.OpExecutionContext, contract: str) -> Any:
    """Each stage is an AssetObservation on the candidate, so run history is the event log."""
    key = candidate_key(contract)
    partition = context.partition_key

    def emit(stage: str, data: dict[str, Any]) -> None:
        metadata = {"stage": stage, **{k: _jsonable(v) for k, v in data.items()}}
        context.log_event(dg.AssetObservation(asset_key=key, partition=partition, metadata=metadata))
        context.log.info(f"{stage}: {json.dumps(_jsonable(data))[:500]}")

    return emit


class TransientFetchError(Exception):
    pass


# the fetcher already retries 429/5xx within a request; this covers a flaky network or worker
FETCH_RETRY_POLICY = dg.RetryPolicy(max_retries=2, delay=2, backoff=dg.Backoff.EXPONENTIAL)


@dataclass(frozen=True)
class ContractAssets:
    candidate: dg.AssetsDefinition
    accepted: dg.AssetsDefinition


def build_contract_assets(loaded: LoadedContract) -> ContractAssets:
    contract = loaded.contract
    name = contract.name
    partitions_def = partitions_for(contract)
    op_tags = {"scrape_contracts/contract": name}

    @dg.op(name=f"{name}_fetch", tags=op_tags, retry_policy=FETCH_RETRY_POLICY)
    def fetch(context: dg.OpExecutionContext, store: ProjectStoreResource, artifacts: ArtifactStoreResource,
              fetcher: FetchResource) -> dict:
        """Fetch the target page (conditional request when validators are known)."""
        from scrape_contracts.adapters.fetch import FetchError, fetcher_for, redact_url

        project_store, artifact_store = store.get(), artifacts.get()
        partition = context.partition_key
        url = target_url(loaded, project_store, partition)
        state = project_store.state(name, partition)
        client = fetcher_for(fetcher.settings_for(contract.fetch), loaded.base_dir)
        try:
            page = client.fetch(url, etag=state.etag, last_modified=state.last_modified)
        except FetchError as exc:
            emitter(context, name)("fetch_failed", {"url": redact_url(url), "error": str(exc), "kind": exc.kind,
                                                    "attempts": [dict(a) for a in exc.attempts]})
            if exc.transient and context.retry_number < FETCH_RETRY_POLICY.max_retries:
                raise TransientFetchError(str(exc)) from None
            # last attempt (or not worth retrying): fail with the real reason, not "exceeded max_retries"
            raise dg.Failure(description=str(exc), allow_retries=False, metadata={
                "url": redact_url(url), "kind": exc.kind, "transient": exc.transient}) from None
        finally:
            client.close()
        return fetched_stage(loaded, partition, url, page, artifact_store, project_store, emitter(context, name))

    @dg.op(name=f"{name}_extract", tags=op_tags)
    def extract(context: dg.OpExecutionContext, fetched: dict, store: ProjectStoreResource,
                artifacts: ArtifactStoreResource) -> dict:
        """Apply the current selector version to the page."""
        return extract_stage(loaded, fetched, artifacts.get(), store.get(), emitter(context, name))

    @dg.op(name=f"{name}_validate", tags=op_tags)
    def validate(context: dg.OpExecutionContext, extracted: dict) -> dict:
        """JSON Schema and semantic rules, against the last accepted version."""
        return validate_stage(loaded, extracted, emitter(context, name))

    @dg.op(name=f"{name}_heal", tags=op_tags, out=dg.Out(io_manager_key="candidate_io_manager"))
    def heal(context: dg.OpExecutionContext, validated: dict, store: ProjectStoreResource,
             artifacts: ArtifactStoreResource) -> dg.Output:
        """Heal broken selectors (never inventing a value), diff, and decide the outcome."""
        candidate = heal_stage(loaded, validated, context.run_id, artifacts.get(), store.get(),
                               emitter(context, name))
        return dg.Output(candidate, metadata=candidate_metadata(candidate))

    @dg.graph_asset(
        key=candidate_key(name), partitions_def=partitions_def, group_name=name,
        description=f"Candidate record of contract {name!r}: fetched, extracted, validated, healed.",
        owners=_owners(contract.owners), kinds={"html"},
        tags={"scrape_contracts/contract": name},
    )
    def candidate() -> Any:
        return heal(validate(extract(fetch())))

    @dg.asset(
        key=accepted_key(name), partitions_def=partitions_def, group_name=name,
        ins={"candidate": dg.AssetIn(candidate_key(name))}, io_manager_key="accepted_io_manager",
        description=f"Accepted records of contract {name!r}: what downstream pipelines read.",
        owners=_owners(contract.owners), kinds={"table"}, tags={"scrape_contracts/contract": name},
    )
    def accepted(context: dg.AssetExecutionContext, candidate: dict) -> dg.Output:
        """The candidate that passed every blocking check becomes the accepted version."""
        context.log.info(f"accepting candidate {candidate['candidate_id']} ({candidate['outcome']})")
        return dg.Output(candidate, metadata={
            "outcome": candidate["outcome"], "candidate_id": candidate["candidate_id"],
            "record": dg.MetadataValue.json(_jsonable(candidate["record"])), "url": candidate["url"],
        })

    return ContractAssets(candidate, accepted)


def candidate_metadata(candidate: dict[str, Any]) -> dict[str, Any]:
    details = candidate["details"]
    return {
        "outcome": candidate["outcome"],
        "url": candidate["url"],
        "record": dg.MetadataValue.json(_jsonable(candidate["record"])),
        "violations": dg.MetadataValue.json(_jsonable(details["violations"])),
        "changes": dg.MetadataValue.json(_jsonable(details["changes"])),
        "selector_version": candidate["selector_version"] or 0,
        "page_sha256": candidate["page_sha256"] or "",
        "healed": bool(details["heal"].get("healed")),
    }


def _owners(owners: list[str]) -> list[str] | None:
    # Dagster accepts emails and team:<name>; anything else would fail the code location
    valid = [o if "@" in o or o.startswith("team:") else f"team:{o}" for o in owners]
    return valid or None
