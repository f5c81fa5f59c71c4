"""The run queue: Dagster's ``QueuedRunCoordinator`` that also tags every scrape run with its contract and target.

The queue's limits per contract and per target are run-tag limits (``dagster.yaml``). The CLI, schedules and
sensors set those tags themselves; a run launched from the asset graph (the UI's Materialize, which runs
Dagster's implicit ``__ASSET_JOB``) or by a backfill has none, and Dagster offers no run tags for the implicit
job. So the coordinator adds them from the run's asset selection and partition as the run is queued, before
the daemon applies the limits.
"""

from __future__ import annotations

import dagster as dg

from scrape_contracts.defs.jobs import CONTRACT_TAG, TARGET_TAG


def scrape_tags(run: dg.DagsterRun) -> dict[str, str]:
    """The contract (and target) tags a run of scrape assets should carry; none when it spans contracts."""
    keys = set(run.asset_selection or ()) | {c.asset_key for c in run.asset_check_selection or ()}
    # scrape/_contracts (defs/load_report.py) is no contract's: contract names start with a letter
    contracts = {k.path[1] for k in keys
                 if len(k.path) >= 2 and k.path[0] == "scrape" and k.path[1][:1].isalpha()}
    if len(contracts) != 1:
        return {}
    (contract,) = contracts
    tags = {CONTRACT_TAG: contract}
    partition = run.tags.get("dagster/partition")
    if partition:
        tags[TARGET_TAG] = f"{contract}/{partition}"
    return tags


class ScrapeRunCoordinator(dg.QueuedRunCoordinator):
    """``QueuedRunCoordinator`` that adds the missing contract/target tags to scrape runs.

    Its config is Dagster's plus ``dequeue_interval_ms``: how often the daemon reads the queue, below the
    one second that Dagster's whole-second ``dequeue_interval_seconds`` allows (``scrape-contracts run
    --wait`` waited half a second on average for it; each pass costs the daemon about 10 ms of CPU).
    """

    _dequeue_interval_ms: int | None = None

    @classmethod
    def config_type(cls) -> dict:
        return {**super().config_type(), "dequeue_interval_ms": dg.Field(
            int, is_required=False,
            description="How often the daemon reads the queue, in milliseconds (overrides dequeue_interval_seconds)")}

    @classmethod
    def from_config_value(cls, inst_data: object, config_value: dict) -> ScrapeRunCoordinator:
        config = dict(config_value)
        interval_ms = config.pop("dequeue_interval_ms", None)
        if interval_ms is not None and interval_ms < 50:
            raise dg.DagsterInvalidConfigError(
                "run_coordinator.config.dequeue_interval_ms must be at least 50", [], interval_ms)
        coordinator = super().from_config_value(inst_data, config)
        coordinator._dequeue_interval_ms = interval_ms
        return coordinator

    _prewarmed = False

    @property
    def dequeue_interval_seconds(self) -> float:  # type: ignore[override]
        # Dagster reads this once, as dagster-daemon builds its queue daemon: the one moment this code knows it
        # runs in the daemon, so the launcher's warm process starts now rather than at the first launch
        self._prewarm_launcher()
        if self._dequeue_interval_ms:
            return self._dequeue_interval_ms / 1000
        return super().dequeue_interval_seconds

    def _prewarm_launcher(self) -> None:
        if self._prewarmed or not self.has_instance:
            return
        self._prewarmed = True
        prewarm = getattr(self._instance.run_launcher, "prewarm", None)
        if prewarm is not None:
            prewarm()

    def submit_run(self, context: dg.SubmitRunContext) -> dg.DagsterRun:
        run = context.dagster_run
        missing = {k: v for k, v in scrape_tags(run).items() if k not in run.tags}
        if missing:
            self._instance.add_run_tags(run.run_id, missing)
        # the base class queues the run and returns it as stored, tags included
        return super().submit_run(context)
