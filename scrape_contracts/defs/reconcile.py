"""``reconcile_job``: a person's decision on an indeterminate provider submission, recorded as a run.

The CLI (``scrape-contracts reconcile``), the API and MCP run it, as the Launchpad does; the decision (who,
why, which job) is an observation on the target's candidate partition, and the target's paused state on its
data. The target is then scraped by an ordinary run, which polls the adopted job (or submits a new one).
"""

import dagster as dg

from scrape_contracts.adapters.store import StoreError
from scrape_contracts.contract.loader import LoadResult
from scrape_contracts.defs.assets import target_state_observation
from scrape_contracts.defs.names import RECONCILE_JOB, candidate_key
from scrape_contracts.defs.resources import ProjectStoreResource
from scrape_contracts.service.records import Stage


class ReconcileConfig(dg.Config):
    contract: str
    partition: str
    job_id: str | None = None  # the provider's job to adopt
    resubmit: bool = False  # the provider has none: the next scrape submits anew
    by: str
    reason: str = ""


def build_reconcile_job(result: LoadResult) -> dg.JobDefinition:
    contracts = result.by_name()

    @dg.op(name="reconcile_submission")
    def reconcile_submission(context: dg.OpExecutionContext, config: ReconcileConfig,
                             store: ProjectStoreResource) -> None:
        """Adopt the provider's job for an indeterminate target, or give the submission up (who and why)."""
        from scrape_contracts.service.reconcile import reconcile

        loaded = contracts.get(config.contract)
        if loaded is None:
            raise dg.Failure(description=f"no valid contract named {config.contract!r}", allow_retries=False)
        try:
            done = reconcile(store.get(), loaded, config.partition, job_id=config.job_id,
                             resubmit=config.resubmit, by=config.by, reason=config.reason)
        except StoreError as exc:
            raise dg.Failure(description=str(exc), allow_retries=False) from None
        context.log_event(dg.AssetObservation(
            asset_key=candidate_key(config.contract), partition=config.partition,
            metadata={"stage": Stage.RECONCILED.value, "action": done.action, "job_id": done.job.job_id or "",
                      "by": config.by, "reason": config.reason},
            description=f"reconciled: {done.note}"[:300]))
        state = store.get().state(config.contract, config.partition)
        context.log_event(target_state_observation(config.contract, config.partition,
                                                   state.pause_reason if state.paused else None))
        context.log.info(done.line())

    @dg.job(name=RECONCILE_JOB, tags={"scrape_contracts/kind": "reconcile"},
            description="Reconcile an indeterminate provider submission (contract, partition, job_id or "
                        "resubmit, by, reason); then scrape the target.")
    def reconcile_job() -> None:
        reconcile_submission()

    return reconcile_job
