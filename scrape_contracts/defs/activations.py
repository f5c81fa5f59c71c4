"""Activations on Dagster: ``activation_sensor`` reads the outbox, ``deliver_events_job`` sends what it says.

At least once: the sensor's cursor is the last outbox id it handed to a run, and each run's ``run_key`` is
the id range it covers, so a sensor evaluated twice over the same rows requests nothing twice and a daemon
restart skips nothing (the cursor only moves with a tick that succeeded). Many events go out in one run
(a range of up to ``BATCH`` rows). A delivery that is dead (a 4xx, or three failed attempts) fails the run,
visible in the UI with every attempt in its metadata; re-executing the run, or ``scrape-contracts
deliveries replay``, sends the same message ids again. A message already delivered is never sent twice.
What is still to be sent (``deliveries list --status pending``) is read from the same two places: the
sensor's cursor as the daemon stored it, and the ranges of delivery runs that have not finished.
"""


from collections.abc import Iterator

import dagster as dg
from pydantic import Field

from scrape_contracts.adapters.destinations import DestinationError, load_destinations
from scrape_contracts.adapters.outbox import Outbox, OutboxRow
from scrape_contracts.adapters.statuses import DeliveryState
from scrape_contracts.contract.loader import LoadResult, contracts_dir
from scrape_contracts.defs.resources import ProjectStoreResource
from scrape_contracts.service.activations import Sent, deliver_rows, has_routes

BATCH = 500
JOB_NAME = "deliver_events_job"
SENSOR_NAME = "activation_sensor"
RANGE_TAG = "scrape_contracts/outbox"
_UNFINISHED = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
               dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING]


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
    @dg.sensor(name=SENSOR_NAME, job_name=JOB_NAME, minimum_interval_seconds=30,
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
            tags={RANGE_TAG: f"{first}-{last}"})], cursor=str(last))

    return [activation_sensor], [deliver_events_job]


def _sensor_cursor(instance: dg.DagsterInstance) -> int:
    """The last outbox id activation_sensor handed to a run, as the daemon stored it (0: it never has; the
    lowest, should several code locations run one)."""
    states = [s for s in instance.all_instigator_state()
              if s.instigator_name == SENSOR_NAME and s.instigator_type.value == "SENSOR"]
    cursors = [getattr(s.instigator_data, "cursor", None) for s in states]
    return min((int(c) if c else 0 for c in cursors), default=0)


def _open_ranges(instance: dg.DagsterInstance) -> set[tuple[int, int]]:
    """The outbox ranges of delivery runs not finished yet, or failed and not run again successfully."""
    def ranges(statuses: list[dg.DagsterRunStatus]) -> set[tuple[int, int]]:
        runs = instance.get_runs(dg.RunsFilter(job_name=JOB_NAME, statuses=statuses))
        found = (run.tags.get(RANGE_TAG, "").partition("-") for run in runs)
        return {(int(first), int(last)) for first, _, last in found if first.isdigit() and last.isdigit()}

    def run_again(first: int, last: int) -> bool:
        return instance.get_runs_count(dg.RunsFilter(job_name=JOB_NAME, statuses=[dg.DagsterRunStatus.SUCCESS],
                                                     tags={RANGE_TAG: f"{first}-{last}"})) > 0

    return ranges(_UNFINISHED) | {r for r in ranges([dg.DagsterRunStatus.FAILURE]) if not run_again(*r)}


def awaiting_delivery(instance: dg.DagsterInstance, outbox: Outbox) -> Iterator[list[OutboxRow]]:
    """Outbox rows no delivery run has finished with, in lists of at most ``BATCH``: those of delivery runs
    queued, running, or failed, then those after activation_sensor's cursor (the daemon requests runs for
    them at its next ticks)."""
    cursor = _sensor_cursor(instance)
    handed = {r.id: r for first, last in _open_ranges(instance) if first <= cursor
              for r in outbox.between(first, min(last, cursor))}
    ids = sorted(handed)
    for start in range(0, len(ids), BATCH):
        yield [handed[i] for i in ids[start:start + BATCH]]
    while batch := outbox.after(cursor, BATCH):
        yield batch
        cursor = batch[-1].id
