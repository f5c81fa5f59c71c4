"""Batched runs: one run scrapes many targets of a contract and tells each target's story on its partition.

Dagster writes each event on its own (about 8 ms of CPU per event on the SQLite instance, 12 ms on
PostgreSQL, measured on 1.13.27), so the events are designed per batch, not per stage:

- an accepted target: one materialisation of ``scrape/C`` on its partition, carrying its stages;
- a quarantined or rejected target: a failed evaluation of each failing check on its candidate partition
  (field, old, new, rule) and one observation with its stages;
- a target whose page could not be fetched: one observation with the reason;
- an unchanged target: nothing of its own (it is listed in the batch summary);
- checks that failed on a partition's previous candidate and pass now: a passing evaluation, so the UI
  does not keep showing a failure that is over.

"""


import time
import weakref
from collections.abc import Generator, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import dagster as dg
from pydantic import Field

from scrape_contracts import settings
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.adapters.store import REVIEW_PAUSE, Candidate, ProjectStore
from scrape_contracts.adapters.store.outages import disconnects, waiting_from_the_first
from scrape_contracts.defs import provider
from scrape_contracts.defs.assets import accepted_metadata, stage_description, target_state_observation
from scrape_contracts.defs.names import (
    FORCE_TAG, accepted_key, batch_job_name, candidate_key, review_command, scrape_pool,
)
from scrape_contracts.defs.metadata import bounded
from scrape_contracts.defs.checks import aimed_at_latest, check_metadata, contract_check_names
from scrape_contracts.defs.console import QUIET_CONFIG, QUIET_CONSOLE
from scrape_contracts.defs.partitions import partitions_for
from scrape_contracts.defs.resources import PageStoreResource, FetchResource, ProjectStoreResource
from scrape_contracts.service.ahead import ahead
from scrape_contracts.service.batch import BatchRunner, BatchSettings, BatchStats, BatchTarget, TargetOutcome
from scrape_contracts.engine.outcome import Outcome
from scrape_contracts.service.batch_summary import summarise
from scrape_contracts.defs.leases import run_ended
from scrape_contracts.service.records import FetchFailure, Refusal, Stage
from scrape_contracts.service.scrape import target_urls


class BatchConfig(dg.Config):
    """Which targets this run scrapes."""

    partitions: list[str] = Field(
        default=[], description="Partition keys to scrape; empty: every target of the contract that is not paused.")
    reextract: bool = Field(
        default=False, description="Fetch nothing: extract, validate, heal and gate each target's last fetched "
                                   "page again (after a contract edit). Targets with no stored page are skipped.")
    force: bool = Field(
        default=False, description="Fetch every page again without validators (no 304) and extract it even "
                                   "when it did not change (also: run tag scrape_contracts/force=true).")


# repeated elsewhere in the same event (record, url) or only useful while debugging a fetch (attempts); the
# serialisation of every byte of metadata is paid per target on the event log's write path
_PROGRESS_EVERY_S = 1.0  # at most one progress line a second in the run's log
_STORY_DROPS = frozenset({"record", "url", "attempts", "encoding", "page_sha256"})


def _story(outcome: TargetOutcome) -> list[dict[str, Any]]:
    """The target's stages, compact: the full evidence (heal results, violations) stays."""
    return [{"stage": e.stage.value, **{k: v for k, v in e.data.items() if k not in _STORY_DROPS}}
            for e in outcome.story]


def _target_events(loaded: LoadedContract, outcome: TargetOutcome, checks: Sequence[str],
                   failed_before: dict[str, set[str]]) -> tuple[list[Any], list[Any]]:
    """(materialisations, other events) that tell one target's story."""
    name = loaded.contract.name
    key, partition = candidate_key(name), outcome.partition
    if outcome.refusal is not None:
        if outcome.refusal.kind == Refusal.BUSY:
            return [], []  # another run scrapes it and tells its story; this run's summary lists it
        return [], [dg.AssetObservation(asset_key=key, partition=partition, metadata={
            "stage": Stage.LEASE_LOST.value, "reason": outcome.refusal.message,
            "stages": dg.MetadataValue.json(bounded(_story(outcome)))},
            description=stage_description(Stage.LEASE_LOST.value, {"reason": outcome.refusal.message}))]
    if outcome.failure is not None:
        failed = [dg.AssetObservation(asset_key=key, partition=partition, metadata={
            "stage": Stage.FETCH_FAILED.value, "error": outcome.failure.message, "kind": outcome.failure.kind,
            "url": outcome.url, "stages": dg.MetadataValue.json(bounded(_story(outcome)))},
            description=stage_description(Stage.FETCH_FAILED.value, {"error": outcome.failure.message}))]
        if outcome.failure.kind == "indeterminate":  # the provider adapter paused it: said on the data too
            reason = outcome.failure.message.split(" refused: ", 1)[-1]
            failed.append(target_state_observation(name, partition, reason))
        return [], failed
    result, recorded = outcome.result, outcome.recorded
    assert result is not None and recorded is not None
    violations = [v.as_dict() for v in result.violations]
    failing = {v["check"] for v in violations}
    others: list[Any] = []
    for check in checks:
        if check in failing or check in failed_before.get(partition, set()):
            passed, metadata, description = check_metadata(check, violations, result.outcome.value,
                                                           recorded.candidate_id,
                                                           review_command(name, partition), result.summary)
            others.append(dg.AssetCheckEvaluation(
                asset_key=key, check_name=check, passed=passed, partition=partition,
                severity=dg.AssetCheckSeverity.ERROR, description=description, metadata=metadata))
    if recorded.status == "accepted":
        materialisation = dg.AssetMaterialization(
            asset_key=accepted_key(name), partition=partition,
            metadata=accepted_metadata(outcome=result.outcome.value, candidate_id=recorded.candidate_id,
                                       url=result.url, record=result.record, version=recorded.accepted_version,
                                       new_version=True, heal=result.heal.as_dict(), stages=_story(outcome),
                                       list_contract=loaded.contract.is_list))
        return [materialisation], others
    # paused by this scrape (sent to review, or its healing budget spent): said on the accepted data too
    paused = [e.data.get("reason") for e in outcome.story if e.stage == Stage.PAUSED]
    if recorded.status == "quarantined":
        paused.append(f"{REVIEW_PAUSE}: {recorded.quarantine_reason}")
    if paused:
        others.append(target_state_observation(name, partition, paused[-1]))
    if recorded.status in ("quarantined", "rejected", "superseded"):
        stage = (Stage.QUARANTINED if recorded.status == "quarantined" else Stage.REJECTED).value
        metadata: dict[str, Any] = {
            "stage": stage,
            "outcome": result.outcome.value, "candidate_id": recorded.candidate_id,
            "reasons": bounded([v.message for v in result.violations]),
            "stages": dg.MetadataValue.json(bounded(_story(outcome)))}
        if recorded.status == "quarantined":
            metadata["review"] = review_command(name, partition)
        others.append(dg.AssetObservation(asset_key=key, partition=partition, metadata=metadata,
                                          description=stage_description(stage, metadata)))
    return [], others


# Dagster's PostgreSQL storages open a new connection (a new server process) for each write: two per
# materialisation, the larger part of its cost on both sides (docs/performance.md). A batched run's process
# holds a small pool instead, through the same public instance method Dagster's webserver calls for its
# --db-pool-* options (SQLite storages ignore it). Once per instance (a second call would leave the first
# pool's connections open), and again after the project store saw its connections broken or waited for the
# database (adapters/store/outages.py): the pool's connection is then most likely dead too, its pool pings
# nothing before use, and the first event written on it after the database came back would fail the step.
# They close with the instance's process (a run worker, the CLI).
_HOLDING: weakref.WeakKeyDictionary[dg.DagsterInstance, int] = weakref.WeakKeyDictionary()


def hold_connections(instance: dg.DagsterInstance) -> None:
    seen = disconnects()
    if _HOLDING.get(instance) != seen:
        instance.optimize_for_webserver(statement_timeout=0, pool_recycle=3600, max_overflow=10)
        _HOLDING[instance] = seen


@dataclass(frozen=True)
class BatchPlan:
    """The targets a batched run scrapes, and the ones it skips with why (paused, gone, unknown)."""

    targets: list[BatchTarget]
    skipped: list[dict[str, str]]
    forced: bool


def plan_batch(context: dg.OpExecutionContext, loaded: LoadedContract, config: BatchConfig,
               project_store: ProjectStore) -> tuple[BatchPlan, list[Any]]:
    """The run's targets, and the events said before any is scraped (a contract paused for its budget)."""
    contract = loaded.contract
    name = contract.name
    partitions_def = partitions_for(contract)
    # paused, gone from their source (discover:), or unchanged since their sitemap lastmod
    forced = config.force or context.run.tags.get(FORCE_TAG) == "true"
    paused = project_store.skipped_partitions(name, unchanged=contract.skips_unchanged and not forced)
    keys = list(config.partitions) or \
        partitions_def.get_partition_keys(dynamic_partitions_store=context.instance)
    urls = target_urls(loaded, project_store)
    targets, skipped, events = [], [], []
    spent = provider.budget_pause(loaded, project_store, context.run)
    if spent:  # paused for its cost budget: nothing is submitted, each target says why it was skipped
        context.log.warning(f"{name} is paused: {spent}")
        events.append(provider.budget_observation(name, spent))
    for key in keys:
        if spent:
            skipped.append({"partition": key, "reason": f"contract paused: {spent}"})
        elif key in paused:
            skipped.append({"partition": key, "reason": paused[key]})
        elif key not in urls:
            skipped.append({"partition": key, "reason": f"{name} has no target {key!r}"})
        else:
            targets.append(BatchTarget(key, urls[key]))
    return BatchPlan(targets, skipped, forced), events


@dataclass
class ChunkTally:
    """What one chunk of a batch came to, for the batch's summary (plain values: it travels between steps)."""

    targets: int = 0
    started: float = 0.0  # wall clock, so that chunks on several hosts add up to one span
    seconds: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)
    failures: list[dict[str, str]] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)
    causes: list[dict[str, Any]] = field(default_factory=list)  # each failed target's FetchFailure, plain
    proxies: list[dict[str, Any]] = field(default_factory=list)  # each proxy's health when the chunk ended

    def fetch_failures(self) -> list[FetchFailure]:
        return [FetchFailure(**cause) for cause in self.causes]


def scrape_chunk(context: dg.OpExecutionContext, loaded: LoadedContract, targets: list[BatchTarget],
                 plan: BatchPlan, config: BatchConfig, project_store: ProjectStore, artifacts: PageStoreResource,
                 fetcher: FetchResource, *, holder: str | None = None, ended: Any = None,
                 skip_recorded: bool = False) -> Generator[Any, None, ChunkTally]:
    """The events of scraping ``targets`` (all of a batch, or one chunk of it); returns its tally.
    ``skip_recorded``: a chunk step, which the executor may hand out again; the targets its run recorded
    already are left out and counted (their events are in the run's log from the earlier attempt)."""
    contract = loaded.contract
    name = contract.name
    checks = contract_check_names(loaded)
    runner = BatchRunner(
        loaded, project_store, artifacts.get(), context.run.run_id, fetcher.settings_for(contract.fetch),
        force=plan.forced, reextract=config.reextract,
        settings=BatchSettings(max_connections=settings.max_connections(),
                               parse_workers=settings.parse_workers()),
        ended=ended or run_ended(context.instance),
        jobs=provider.job_book(loaded, project_store, context.run, {t.partition: t.url for t in targets}),
        holder=holder, skip_recorded=skip_recorded,
    )
    failed_before: dict[str, set[str]] | None = None  # read once the runner's thread is at work
    tally = ChunkTally(targets=len(targets), started=time.time())
    refused: list[str] = []
    last_progress = time.monotonic()
    progress = BatchStats()  # this thread's count: the runner's own is written by the thread that commits
    # the next chunk is committed (service/batch.py) while this one's events are written (service/ahead.py)
    for chunk in ahead(runner.run(targets), name=f"{name}-commits"):
        hold_connections(context.instance)  # renewed when the database was gone meanwhile
        materialisations: list[Any] = []
        if failed_before is None:
            failed_before = project_store.failed_checks(name, [t.partition for t in targets])
        for outcome in chunk:
            progress.add(outcome)
            mats, others = _target_events(loaded, outcome, checks, failed_before)
            materialisations += mats
            yield from aimed_at_latest(context.instance, others)
            if outcome.recorded is not None and outcome.recorded.status == "unchanged":
                tally.unchanged.append(outcome.partition)
            if outcome.failure is not None:
                tally.failures.append({"partition": outcome.partition, "reason": outcome.failure.message})
            if outcome.refusal is not None:  # busy elsewhere, or taken over: not recorded by this run
                tally.skipped.append({"partition": outcome.partition, "reason": outcome.refusal.message})
                refused.append(outcome.refusal.message)
        yield from materialisations
        # each line is an event in the run's log (10 ms or so): one a second says as much as one a chunk
        to_do = len(targets) - len(runner.earlier)  # those an earlier attempt recorded are not scraped
        if time.monotonic() - last_progress >= _PROGRESS_EVERY_S or progress.total == to_do:
            last_progress = time.monotonic()
            context.log.info(f"{progress.total}/{to_do} targets done ({progress.pages_per_second:.1f}/s): "
                             + ", ".join(f"{k} {v}" for k, v in sorted(progress.counts.items())))
    stats, summary = runner.stats, runner.summary()
    if summary.targets_failed:
        context.log.warning(summary.line())  # each cause once, however many targets it failed
    for proxy in runner.proxies:  # a quarantined proxy is worth a line: its share went to the others
        if proxy["quarantined"]:
            context.log.warning(f"proxy {proxy['proxy']} ended the run quarantined ({proxy['failures']} of "
                                f"{proxy['requests']} requests failed); its requests went through the others")
    if refused:  # one line, not one per target: each line is an event in the run's log
        context.log.warning(f"{len(refused)} target(s) not scraped by this run (see the batch summary's "
                            f"skipped), e.g. {refused[0]}")
    tally.seconds, tally.counts = stats.seconds, dict(stats.counts)
    tally.causes = [{k: v for k, v in asdict(f).items() if k != "attempts"} for f in runner.failures]
    tally.proxies = list(runner.proxies)
    if runner.earlier:
        context.log.info(f"{len(runner.earlier)} target(s) of this chunk recorded by an earlier attempt: not "
                         "scraped again")
        tally.targets -= len(runner.earlier)
        counting_earlier(tally, runner.earlier.values())
    return tally


def counting_earlier(tally: ChunkTally, earlier: Iterable[Candidate]) -> ChunkTally:
    """``tally`` with the outcomes an earlier attempt of the chunk recorded, so the batch summary counts each of
    the chunk's targets once."""
    for candidate in earlier:
        tally.targets += 1
        tally.counts[candidate.outcome.value] = tally.counts.get(candidate.outcome.value, 0) + 1
        if candidate.outcome is Outcome.UNCHANGED:
            tally.unchanged.append(candidate.partition)
        elif candidate.outcome is Outcome.FAILED:
            tally.failures.append({"partition": candidate.partition,
                                   "reason": "failed (recorded by an earlier attempt of this chunk)"})
    return tally


def proxy_health(tallies: Sequence[ChunkTally]) -> list[dict[str, Any]]:
    """Each proxy's health over the run's chunks (each chunk's fetching process kept a pool of its own): the
    counts added up; quarantined when a chunk ended with it quarantined; its worst score and latency."""
    if len(tallies) == 1:
        return tallies[0].proxies
    merged: dict[str, dict[str, Any]] = {}
    for tally in tallies:
        for proxy in tally.proxies:
            seen = merged.get(proxy["proxy"])
            if seen is None:
                merged[proxy["proxy"]] = dict(proxy)
                continue
            for key in ("requests", "failures", "quarantines", "rechecks"):
                seen[key] += proxy[key]
            seen["quarantined"] = seen["quarantined"] or proxy["quarantined"]
            seen["score"] = min(seen["score"], proxy["score"])
            for key in ("latency_ms", "recheck_in_s"):
                values = [v for v in (seen[key], proxy[key]) if v is not None]
                seen[key] = max(values) if values else None
    return list(merged.values())


def summary_observation(loaded: LoadedContract, project_store: ProjectStore, run_id: str, plan_skipped: list[dict],
                        tallies: Sequence[ChunkTally]) -> dg.AssetObservation:
    """The batch summary, once per run, over its chunks (one chunk: as it always was)."""
    targets = sum(t.targets for t in tallies)
    if len(tallies) == 1:
        seconds = tallies[0].seconds
    else:  # chunks side by side on several workers: the span from the first start to the last end
        seconds = max((t.started + t.seconds for t in tallies), default=0.0) - \
            min((t.started for t in tallies), default=0.0)
    counts: dict[str, int] = {}
    for tally in tallies:
        for kind, count in tally.counts.items():
            counts[kind] = counts.get(kind, 0) + count
    total = sum(counts.values())
    summary = summarise(total, counts, [f for t in tallies for f in t.fetch_failures()])
    proxies = proxy_health(tallies)
    return dg.AssetObservation(asset_key=candidate_key(loaded.contract.name), metadata={
        "stage": Stage.BATCH_SUMMARY.value, "targets": targets, "seconds": round(seconds, 3),
        "pages_per_second": round(total / seconds if seconds > 0 else 0.0, 1),
        "outcomes": dg.MetadataValue.json(counts),
        "unchanged": dg.MetadataValue.json([p for t in tallies for p in t.unchanged]),
        "failures": dg.MetadataValue.json([f for t in tallies for f in t.failures]),
        "failed": summary.failed, "targets_failed": summary.targets_failed,
        "failure_causes": dg.MetadataValue.json([c.as_dict() for c in summary.causes]),
        "skipped": dg.MetadataValue.json(plan_skipped + [s for t in tallies for s in t.skipped]),
        **provider.spend_metadata(loaded, project_store, run_id),
        **({"proxies": dg.MetadataValue.json(proxies)} if proxies else {}),
    })


def scrape_targets(context: dg.OpExecutionContext, loaded: LoadedContract, config: BatchConfig,
                   store: ProjectStoreResource, artifacts: PageStoreResource, fetcher: FetchResource
                   ) -> Iterator[Any]:
    """The events of one batch of ``loaded``'s targets in one step: what the batch op yields (the dead
    letters' replay too)."""
    hold_connections(context.instance)
    with waiting_from_the_first():  # a batch may start just as the database goes away: it waits for it
        project_store = store.get()
    plan, events = plan_batch(context, loaded, config, project_store)
    yield from events
    context.log.info(f"scraping {len(plan.targets)} target(s) of {loaded.contract.name} "
                     f"({len(plan.skipped)} skipped)")
    tally = yield from scrape_chunk(context, loaded, plan.targets, plan, config, project_store, artifacts, fetcher)
    yield summary_observation(loaded, project_store, context.run.run_id, plan.skipped, [tally])


def build_batch_job(loaded: LoadedContract) -> dg.JobDefinition:
    name = loaded.contract.name

    @dg.op(name=f"{name}_scrape_batch", out={}, tags={"scrape_contracts/contract": name}, pool=scrape_pool(name))
    def scrape_batch(context: dg.OpExecutionContext, config: BatchConfig, store: ProjectStoreResource,
                     artifacts: PageStoreResource, fetcher: FetchResource) -> Iterator[Any]:
        """Scrape many targets at once; each target's outcome is recorded on its own partition."""
        yield from scrape_targets(context, loaded, config, store, artifacts, fetcher)

    @dg.job(name=batch_job_name(name), executor_def=dg.in_process_executor, logger_defs=QUIET_CONSOLE,
            config=QUIET_CONFIG,
            tags={"scrape_contracts/contract": name, "scrape_contracts/kind": "batch"},
            description=f"Scrape many targets of {name!r} in one run (launchpad: list partitions, or none for all).")
    def batch_job() -> None:
        scrape_batch()

    return batch_job
