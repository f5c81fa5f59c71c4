"""A batched run as chunk steps: plan, scrape each chunk (a step an executor may place on any worker), sum up.

- ``C_scrape_batch`` (same name and config as the one-step batch op, so every launcher's run config works for
  both) resolves the targets as a one-step batch does (paused, gone, unknown ones skipped) and yields one
  dynamic output per chunk: a share of every site host's targets, so that no chunk ends alone on one host;
- ``C_scrape_chunk`` scrapes its chunk with the batch runner, under leases of its own attempt (a chunk the
  executor starts again takes them over, and the earlier attempt's commits are refused), and yields each
  target's events exactly as the one-step op does;
- ``C_batch_summary`` says the batch summary once for the run, over the chunks.

What travels between the steps (the chunks' targets, their tallies) is small and kept in the run's own event
log as the outputs' metadata (``io_managers.RunEventsIOManager``): every worker reaches the instance's storage, while a
file system IO manager would need a folder shared by every worker host.
"""

# no `from __future__ import annotations`: Dagster reads the ops' annotations (BatchConfig) as types

import uuid
from collections.abc import Iterator
from dataclasses import asdict
from typing import Any

import dagster as dg

from scrape_contracts.adapters.fetch.robots import host_key
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.defs.batch import (
    BatchConfig, BatchPlan, ChunkTally, hold_connections, plan_batch, scrape_chunk,
    summary_observation,
)
from scrape_contracts.defs.console import QUIET_CONFIG, QUIET_CONSOLE
from scrape_contracts.defs.executors import Scale, executor_for
from scrape_contracts.defs.io_managers import RUN_EVENTS_IO_MANAGER as IO_MANAGER_KEY, carried
from scrape_contracts.defs.leases import chunk_ended, chunk_holder
from scrape_contracts.defs.names import batch_job_name, scrape_pool
from scrape_contracts.defs.resources import FetchResource, PageStoreResource, ProjectStoreResource
from scrape_contracts.adapters.store import StoreGone, StoreUnavailable
from scrape_contracts.adapters.store.outages import waiting_from_the_first
from scrape_contracts.service.batch import BatchTarget


RESUMES = 3  # a chunk goes on after this many statements broken by the database going away, then fails


def deal(targets: list[BatchTarget], chunks: int) -> list[list[BatchTarget]]:
    """``chunks`` shares, each with its part of every host's targets (empty shares left out)."""
    by_host: dict[str, list[BatchTarget]] = {}
    for target in targets:
        by_host.setdefault(host_key(target.url), []).append(target)
    shares: list[list[BatchTarget]] = [[] for _ in range(chunks)]
    turn = 0
    for host_targets in by_host.values():
        for target in host_targets:
            shares[turn % chunks].append(target)
            turn += 1
    return [share for share in shares if share]


def build_chunked_batch_job(loaded: LoadedContract, scale: Scale) -> dg.JobDefinition:
    name = loaded.contract.name
    tags = {"scrape_contracts/contract": name}
    executor, execution = executor_for(scale)

    @dg.op(name=f"{name}_scrape_batch", tags=tags,
           out={"chunks": dg.DynamicOut(io_manager_key=IO_MANAGER_KEY), "plan": dg.Out(io_manager_key=IO_MANAGER_KEY)})
    def plan_chunks(context: dg.OpExecutionContext, config: BatchConfig, store: ProjectStoreResource) -> Iterator[Any]:
        """Resolve the run's targets and deal them into chunk steps."""
        plan, events = plan_batch(context, loaded, config, store.get())
        yield from events
        shares = deal(plan.targets, scale.chunks)
        context.log.info(f"scraping {len(plan.targets)} target(s) of {name} ({len(plan.skipped)} skipped) in "
                         f"{len(shares)} chunk(s)")
        for index, share in enumerate(shares):
            value = [[t.partition, t.url] for t in share]
            yield dg.DynamicOutput(value, mapping_key=f"chunk_{index}", output_name="chunks", metadata=carried(value))
        value = {"skipped": plan.skipped, "forced": plan.forced, "reextract": config.reextract}
        yield dg.Output(value, output_name="plan", metadata=carried(value))

    @dg.op(name=f"{name}_scrape_chunk", tags=tags, pool=scrape_pool(name),
           out=dg.Out(io_manager_key=IO_MANAGER_KEY))
    def scrape_one_chunk(context: dg.OpExecutionContext, chunk: list, plan: dict,
                         store: ProjectStoreResource, artifacts: PageStoreResource,
                         fetcher: FetchResource) -> Iterator[Any]:
        """Scrape one chunk of the run's targets; each target's outcome is recorded on its own partition."""
        hold_connections(context.instance)
        with waiting_from_the_first():  # a chunk may start just as the database goes away: it waits for it
            project_store = store.get()
        targets = [BatchTarget(partition, url) for partition, url in chunk]
        holder = chunk_holder(context.run.run_id, context.get_mapping_key() or "chunk", uuid.uuid4().hex[:8])
        context.log.info(f"scraping {len(targets)} target(s) of {name} as {holder}")
        for resumed in range(RESUMES + 1):
            try:
                tally = yield from scrape_chunk(
                    context, loaded, targets, BatchPlan(targets, [], bool(plan["forced"])),
                    BatchConfig(reextract=bool(plan["reextract"])), project_store,
                    artifacts, fetcher, holder=holder, ended=chunk_ended(context.instance, holder),
                    # a chunk the executor hands out again (its worker lost, an ack lost with the broker) finds
                    # the targets an earlier attempt recorded: counted, not scraped a second time
                    skip_recorded=True)
                break
            except StoreUnavailable as down:
                # a statement the database's going away broke mid-way (a wait for it that ran out is StoreGone):
                # once it answers (this read waits for it, as any connection does) the chunk goes on under the
                # same holder, its leases still its own; what it committed is left out as an earlier attempt's
                if isinstance(down, StoreGone) or resumed == RESUMES:
                    raise
                project_store.lease(name, targets[0].partition)
                hold_connections(context.instance)  # the database is back: Dagster's held connection renewed
                context.log.warning(f"{down}; the database answers again: the chunk goes on with the targets it "
                                    "has not recorded")
        yield dg.Output(asdict(tally), metadata=carried(asdict(tally)))

    @dg.op(name=f"{name}_batch_summary", tags=tags, out={})
    def batch_summary(context: dg.OpExecutionContext, tallies: list, plan: dict,
                      store: ProjectStoreResource) -> Iterator[Any]:
        """Say the batch summary once for the run, over its chunks."""
        yield summary_observation(loaded, store.get(), context.run.run_id, list(plan["skipped"]),
                                  [ChunkTally(**tally) for tally in tallies])

    @dg.job(name=batch_job_name(name), executor_def=executor, logger_defs=QUIET_CONSOLE,
            config={**QUIET_CONFIG, **execution},
            tags={**tags, "scrape_contracts/kind": "batch"},
            description=f"Scrape many targets of {name!r} in chunk steps (launchpad: list partitions, or none "
                        "for all).")
    def chunked_batch_job() -> None:
        chunks, plan = plan_chunks()
        tallies = chunks.map(lambda chunk: scrape_one_chunk(chunk, plan))
        batch_summary(tallies.collect(), plan)

    return chunked_batch_job
