"""IO managers: candidates and accepted records live in the project store, not in pickles.

``scrape/<name>`` loads as one record (a dict) for a single partition, or as a pandas DataFrame of the
latest accepted record of every requested partition (a non-partitioned downstream asset gets all of them).
"""

from __future__ import annotations

from typing import Any

import dagster as dg
import pandas as pd

from scrape_contracts.adapters.store import StoreError
from scrape_contracts.defs.resources import ProjectStoreResource
from scrape_contracts.engine.outcome import Outcome
from scrape_contracts.reader import accepted_frame


def contract_of(key: dg.AssetKey) -> str:
    # keys are scrape/<contract> and scrape/<contract>/candidate
    return key.path[1]


def _status_for(outcome: str) -> str:
    return {Outcome.REJECTED.value: "rejected", Outcome.UNCHANGED.value: "unchanged"}.get(outcome, "pending")


class CandidateIOManager(dg.ConfigurableIOManager):
    """Stores each candidate with its evidence; a review_required candidate is quarantined on write."""

    store: ProjectStoreResource

    def handle_output(self, context: dg.OutputContext, obj: dict[str, Any]) -> None:
        store = self.store.get()
        candidate = store.add_candidate(
            contract=obj["contract"], partition=obj["partition"], run_id=context.run_id, url=obj["url"],
            record=obj["record"], outcome=obj["outcome"], details=obj["details"],
            page_sha256=obj.get("page_sha256"), selector_version=obj.get("selector_version"),
        )
        if obj["outcome"] == Outcome.REVIEW_REQUIRED.value:
            reasons = [v["message"] for v in obj["details"].get("violations", [])]
            store.quarantine(candidate.id, "; ".join(reasons))
            # recorded in this run, so the trail reads violation → quarantined under one run id
            context.log_event(dg.AssetObservation(
                asset_key=context.asset_key, partition=obj["partition"],
                metadata={"stage": "quarantined", "candidate_id": candidate.id, "reasons": reasons,
                          "review": "accept or reject with review_job or `scrape-contracts review`"}))
        else:
            store.set_candidate_status(candidate.id, _status_for(obj["outcome"]))
        context.add_output_metadata({"candidate_id": candidate.id})

    def load_input(self, context: dg.InputContext) -> dict[str, Any]:
        contract = contract_of(context.asset_key)
        partition = context.asset_partition_key
        store = self.store.get()
        # prefer this run's candidate: another run may have written a newer one meanwhile
        candidate = store.latest_candidate(contract, partition, run_id=context.step_context.run_id) or \
            store.latest_candidate(contract, partition)
        if candidate is None:
            raise dg.Failure(f"no candidate for {contract}/{partition}: materialise scrape/{contract}/candidate first")
        return {"candidate_id": candidate.id, "contract": contract, "partition": partition, "url": candidate.url,
                "record": candidate.record, "outcome": candidate.outcome, "status": candidate.status,
                "details": candidate.details, "page_sha256": candidate.page_sha256,
                "selector_version": candidate.selector_version}


class AcceptedIOManager(dg.ConfigurableIOManager):
    """Writes the accepted version (exactly once per candidate); reads the latest accepted data."""

    store: ProjectStoreResource

    def handle_output(self, context: dg.OutputContext, obj: dict[str, Any]) -> None:
        store = self.store.get()
        if obj["outcome"] == Outcome.UNCHANGED.value:
            latest = store.latest_accepted(obj["contract"], obj["partition"])
            # same data under new validators (re-tagged page): remember them, so the next run can get a 304
            validators = (obj.get("details") or {}).get("validators") or {}
            if validators.get("etag") or validators.get("last_modified"):
                store.update_state(obj["contract"], obj["partition"], etag=validators.get("etag"),
                                   last_modified=validators.get("last_modified"))
            context.add_output_metadata({"version": latest.version if latest else 0, "new_version": False})
            return
        if obj["outcome"] not in (Outcome.VALID.value, Outcome.HEALED.value):
            # defence in depth: only a candidate that passed its checks may become accepted data, even
            # when a run materialises scrape/C alone and the candidate came from an interrupted run
            raise dg.Failure(f"candidate {obj['candidate_id']} of {obj['contract']}/{obj['partition']} has "
                             f"outcome {obj['outcome']!r}; only valid or healed candidates are accepted")
        try:
            version = store.accept(obj["candidate_id"], run_id=context.run_id)
        except StoreError as exc:
            raise dg.Failure(f"cannot accept candidate {obj['candidate_id']}: {exc}") from exc
        context.add_output_metadata({"version": version.version, "new_version": True})

    def load_input(self, context: dg.InputContext) -> dict[str, Any] | pd.DataFrame | None:
        contract = contract_of(context.asset_key)
        store = self.store.get()
        downstream_partitioned = context.has_partition_key
        if context.has_asset_partitions and downstream_partitioned and len(context.asset_partition_keys) == 1:
            latest = store.latest_accepted(contract, context.asset_partition_key)
            return dict(latest.record) if latest else None
        keys = list(context.asset_partition_keys) if context.has_asset_partitions else None
        return accepted_frame(store.latest_accepted_all(contract, keys))
