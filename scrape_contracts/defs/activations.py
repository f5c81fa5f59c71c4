"""Activations on Dagster: ``activation_sensor`` reads the outbox, ``deliver_events_job`` sends what it says.

At least once: the sensor's cursor is the last outbox id it handed to a run, and each run's ``run_key`` is
the id range it covers, so a sensor evaluated twice over the same rows requests nothing twice and a daemon
restart skips nothing (the cursor only moves with a tick that succeeded). Many events go out in one run
(a range of up to ``BATCH`` rows). A delivery that is dead (a 4xx, or three failed attempts) fails the run,
visible in the UI with every attempt in its metadata; re-executing the run, or ``scrape-contracts
deliveries replay``, sends the same message ids again. A message already delivered is never sent twice.
"""


import dagster as dg
from pydantic import Field

from scrape_contracts.adapters.destinations import DestinationError, load_destinations
from scrape_contracts.adapters.schema import DeliveryState
from scrape_contracts.contract.loader import LoadResult, contracts_dir
from scrape_contracts.defs.resources import ProjectStoreResource
from scrape_contracts.service.activations import Sent, deliver_rows, has_routes

BATCH = 500
JOB_NAME = "deliver_events_job"


class DeliveryConfig(dg.Config):
    first_id: int = Field(description="First outbox id of this delivery run (inclusive).")
    last_id: int = Field(description="Last outbox id of this delivery run (inclusive).")
    replay: bool = Field(default=False, description="Send dead deliveries of these rows again.")


def _table(sent: list[Sent]) -> str:
    lines = ["| message | rule | destination | status | attempts | reason |", "|---|---|---|---|---|---|"]
    for s in sent[:200]:
        lines.append(f"| `{s.message.event.id[:8]}` {s.message.event.contract}/{s.message.event.target} "
                     f"| {s.message.rule} | {s.message.destination} | {s.status.value}"
                     f"{' (before)' if s.skipped else ''} | {len(s.attempts)} | {s.reason.replace('|', '/')} |")
    return "\n".join(lines)


def build_activation_defs(result: LoadResult) -> tuple[list[dg.SensorDefinition], list[dg.JobDefinition]]:
    contracts = result.by_name()
    with_rules = {name for name, item in contracts.items() if has_routes(item.contract)}
    # destinations.yaml lives beside the contracts these definitions were built from
    folder = next((item.path.parent for item in result.contracts), None)

    @dg.op(name="deliver_events")
    def deliver_events(context: dg.OpExecutionContext, config: DeliveryConfig, store: ProjectStoreResource) -> None:
        """Send the messages of a range of outbox rows; fail when any delivery is dead."""
        project_store = store.get()
        try:
            destinations = load_destinations(folder or contracts_dir())
        except DestinationError as exc:
            raise dg.Failure(description=str(exc)) from None
        rows = project_store.outbox().between(config.first_id, config.last_id)
        sent = deliver_rows(project_store, rows, contracts, destinations, run_id=context.run_id,
                            replay=config.replay or context.run.parent_run_id is not None)
        dead = [s for s in sent if s.status == DeliveryState.DEAD]
        metadata = {"outbox_rows": len(rows), "messages": len(sent),
                    "delivered": sum(s.status == DeliveryState.DELIVERED and not s.skipped for s in sent),
                    "dead": len(dead), "deliveries": dg.MetadataValue.md(_table(sent)),
                    "attempts": dg.MetadataValue.json([{"message_id": s.message.event.id,
                                                        "destination": s.message.destination,
                                                        "status": s.status.value, "attempts": list(s.attempts)}
                                                       for s in sent[:200]])}
        context.log.info(f"{len(rows)} outbox row(s): {metadata['delivered']} delivered, {len(dead)} dead")
        if dead:
            raise dg.Failure(
                description=f"{len(dead)} delivery(ies) dead: " + "; ".join(
                    f"{s.message.destination} ({s.message.rule}): {s.reason}" for s in dead[:5])
                + " — fix the receiver, then re-execute this run or `scrape-contracts deliveries replay`",
                metadata=metadata)
        context.log_event(dg.AssetObservation(asset_key=dg.AssetKey(["scrape", "_deliveries"]), metadata=metadata))

    @dg.job(name=JOB_NAME, executor_def=dg.in_process_executor,
            description="Deliver outbox events to their destinations (requested by activation_sensor).")
    def deliver_events_job() -> None:
        deliver_events()

    # by name: a job object here makes Dagster warn (BetaWarning, owners) whenever resources are attached
    @dg.sensor(name="activation_sensor", job_name=JOB_NAME, minimum_interval_seconds=30,
               default_status=dg.DefaultSensorStatus.RUNNING,
               description="Reads the outbox after its cursor and requests a delivery run per range of rows.")
    def activation_sensor(context: dg.SensorEvaluationContext, store: ProjectStoreResource) -> dg.SensorResult:
        outbox = store.get().outbox()
        cursor = int(context.cursor or 0)
        rows = outbox.after(cursor, BATCH)
        if not rows:
            return dg.SensorResult(skip_reason=dg.SkipReason(f"no outbox rows after {cursor}"))
        last = rows[-1].id
        relevant = [r for r in rows if r.contract in with_rules]
        if not relevant:
            return dg.SensorResult(skip_reason=dg.SkipReason(
                f"{len(rows)} outbox row(s) up to {last}: no contract of theirs has activations or canaries"),
                cursor=str(last))
        first = relevant[0].id
        return dg.SensorResult(run_requests=[dg.RunRequest(
            run_key=f"deliver:{first}-{last}",
            run_config={"ops": {"deliver_events": {"config": {"first_id": first, "last_id": last}}}},
            tags={"scrape_contracts/outbox": f"{first}-{last}"})], cursor=str(last))

    return [activation_sensor], [deliver_events_job]
