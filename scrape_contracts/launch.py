"""Launch runs through the instance's run coordinator, idempotently, and wait for them.

One workspace load for all the runs of a command (``dagster job launch`` loads it once per run, which is
seconds each). A run's id is derived from the idempotency key, so launching the same thing again finds
the run that exists instead of adding one.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import dagster as dg

TERMINAL = {dg.DagsterRunStatus.SUCCESS, dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.CANCELED}
# runs executed in this process (the CLI's, the API's, the demo's) print nothing of their own; the full log is in
# the instance (and the UI)
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


@dataclass(frozen=True)
class RunSpec:
    job_name: str
    run_id: str
    tags: dict[str, str]
    run_config: dict[str, Any] = field(default_factory=dict)
    label: str = ""


def idempotent_run_id(*parts: str) -> str:
    """The same parts always give the same run id: Dagster refuses a second run with it."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "scrape-contracts:" + ":".join(parts)))


def chunks(keys: Sequence[str], size: int) -> list[list[str]]:
    ordered = sorted(keys)
    return [ordered[i:i + size] for i in range(0, len(ordered), size)]


def batch_run_id(contract: str, index: int, count: int, key: str) -> str:
    return idempotent_run_id(contract, f"batch-{index}-of-{count}", key)


def run_specs(loaded: Any, keys: list[str], *, idempotency_key: str, partition: str | None = None,
              force: bool = False, reextract: bool = False, all_targets: bool = False) -> list[RunSpec]:
    """The runs that scrape ``keys`` of a contract (a ``LoadedContract``): one run for one ``partition``, else
    batched runs of the contract's ``batch_size``; ``reextract``: batches that extract the stored pages again.
    ``all_targets``: ``keys`` are every target not paused; when they fit in one batch its config lists none,
    which the batch op reads as exactly that (a list of 2,000 keys cost the command and the run about 0.1 s
    of config handling, and filled the run's config in the UI).

    The CLI and the API cut targets into runs this one way, so one key launches the same runs from either door.
    """
    from scrape_contracts.defs.batch import BATCH_TAG, batch_job_name
    from scrape_contracts.defs.jobs import TARGET_TAG, scrape_job_name

    name = loaded.contract.name
    tags = {"scrape_contracts/idempotency_key": idempotency_key, "scrape_contracts/trigger": "cli",
            "scrape_contracts/contract": name}
    if force:
        tags["scrape_contracts/force"] = "true"
    if reextract:
        tags["scrape_contracts/trigger"] = "cli-reextract"
    if partition and not reextract:
        return [RunSpec(scrape_job_name(name), idempotent_run_id(name, partition, idempotency_key),
                        {**tags, "dagster/partition": partition, TARGET_TAG: f"{name}/{partition}"},
                        label=f"{name}/{partition}")]
    groups = chunks([partition] if partition else keys, loaded.contract.batch_size)
    kind = "reextract" if reextract else "batch"
    return [RunSpec(batch_job_name(name), batch_run_id(name, i, len(groups), f"{kind}:{idempotency_key}"
                                                      if reextract else idempotency_key),
                    {**tags, BATCH_TAG: f"{name}/{i}-of-{len(groups)}"},
                    {"ops": {f"{name}_scrape_batch": {"config": {
                        "partitions": [] if all_targets and len(groups) == 1 and not reextract else group,
                        "reextract": reextract}}}},
                    label=f"{name} batch {i}/{len(groups)} ({len(group)} targets)")
            for i, group in enumerate(groups, start=1)]


def failure_reason(result: dg.ExecuteInProcessResult) -> str:
    """The reason a run failed, in the user's words: a ``dg.Failure``'s description, else the error's last line."""
    for event in result.all_events:
        if not event.is_step_failure:
            continue
        data = event.step_failure_data
        if data.user_failure_data is not None and data.user_failure_data.description:
            return data.user_failure_data.description.strip()
        error = data.error
        while error is not None and error.cause is not None:
            error = error.cause
        if error is not None:
            return error.message.strip().splitlines()[-1]
    return "the run failed: see it in the Dagster UI (Runs)"


# set in a command's child of the warm process (warm_worker._prepare_command): whether the code location module
# it has imported still matches the contracts folder, so the command may use it instead of loading it again
preloaded_current: Callable[[str], bool] | None = None


def _in_process_target(workspace_file: str) -> Any | None:
    """The workspace as an in-process load target when it is one ``python_module`` (ours is), else None.

    Loading it through a code server costs a process start and a second load of every contract (about 4 s
    for a 2,000-target contract); the runs created either way name the same module and location, so the
    daemon and the UI see no difference.
    """
    import os
    import sys

    import yaml
    from dagster._core.remote_origin import InProcessCodeLocationOrigin
    from dagster._core.types.loadable_target_origin import LoadableTargetOrigin
    from dagster._core.workspace.load_target import InProcessWorkspaceLoadTarget

    try:
        with open(workspace_file, encoding="utf-8") as handle:
            entries = (yaml.safe_load(handle) or {}).get("load_from") or []
    except (OSError, yaml.YAMLError, AttributeError):
        return None
    if len(entries) != 1 or not isinstance(entries[0], dict) or set(entries[0]) != {"python_module"}:
        return None
    entry = entries[0]["python_module"]
    module, location = (entry, entry) if isinstance(entry, str) else (entry.get("module_name"),
                                                                      entry.get("location_name"))
    if not module or (isinstance(entry, dict) and set(entry) - {"module_name", "location_name"}):
        return None
    if module in sys.modules:
        if preloaded_current is None:
            # already imported in this process (a test, an embedding program): its definitions may come from
            # another contracts folder; a code server loads them fresh
            return None
        if not preloaded_current(module):
            # a command served by the warm process (a child of its own, thrown away after): the contracts
            # changed since it loaded them, so load them again here
            from scrape_contracts.contract import loader

            sys.modules.pop(module, None)
            loader.forget_parsed()
    base = os.path.dirname(os.path.abspath(workspace_file))
    origin = LoadableTargetOrigin(executable_path=sys.executable, module_name=module, working_directory=base)
    return InProcessWorkspaceLoadTarget([InProcessCodeLocationOrigin(origin, location_name=location or module)])


@contextmanager
def _workspace(instance: dg.DagsterInstance, workspace_file: str) -> Iterator[Any]:
    # private in 1.13 (pinned): what `dagster job launch` does, once for every run we submit
    from dagster import __version__
    from dagster._cli.workspace.cli_target import WorkspaceOpts, get_workspace_from_cli_opts
    from dagster._core.workspace.context import WorkspaceProcessContext

    target = _in_process_target(workspace_file)
    if target is not None:
        with WorkspaceProcessContext(instance, target, version=__version__) as process_context:
            yield process_context.create_request_context()
        return
    with get_workspace_from_cli_opts(instance, version=__version__,
                                     workspace_opts=WorkspaceOpts(workspace=(workspace_file,))) as workspace:
        yield workspace


def launch(instance: dg.DagsterInstance, workspace_file: str, specs: Sequence[RunSpec],
           report: Callable[[RunSpec, dg.DagsterRun, bool], None]) -> list[dg.DagsterRun]:
    """Submit every spec whose run id is new; ``report(spec, run, launched_now)`` for each."""
    from dagster._cli.job import _create_run
    from dagster._cli.workspace.cli_target import (
        get_code_location_from_workspace, get_remote_job_from_remote_repo, get_remote_repository_from_code_location,
    )

    runs = []
    new = []
    found = _runs_by_id(instance, [spec.run_id for spec in specs])
    for spec in specs:
        existing = found.get(spec.run_id)
        if existing is not None:
            report(spec, existing, False)
            runs.append(existing)
        else:
            new.append(spec)
    if not new:
        return runs
    with _workspace(instance, workspace_file) as workspace:
        location = get_code_location_from_workspace(workspace, None)
        repo = get_remote_repository_from_code_location(location, None)
        for spec in new:
            remote_job = get_remote_job_from_remote_repo(repo, spec.job_name)
            run = _create_run(instance=instance, code_location=location, remote_repo=repo, remote_job=remote_job,
                              run_config=spec.run_config, tags=spec.tags, op_selection=None, run_id=spec.run_id)
            submitted = instance.submit_run(run.run_id, workspace)
            report(spec, submitted, True)
            runs.append(submitted)
    return runs


def _runs_by_id(instance: dg.DagsterInstance, run_ids: Sequence[str]) -> dict[str, dg.DagsterRun]:
    """The runs with these ids, in one query. ``get_run_by_id`` reads a run *record*, and Dagster's run storage
    inspects the runs table's columns before each such read: on PostgreSQL a new connection and a catalogue
    query per run per poll, which took a core's tenth from the run being waited for (py-spy)."""
    found: dict[str, dg.DagsterRun] = {}
    for start in range(0, len(run_ids), 500):
        for run in instance.get_runs(dg.RunsFilter(run_ids=list(run_ids[start:start + 500]))):
            found[run.run_id] = run
    return found


def daemon_running(instance: dg.DagsterInstance, within_seconds: float = 120) -> bool:
    """Whether a dagster-daemon has sent a heartbeat recently (queued runs need one to start)."""
    heartbeats = instance.get_daemon_heartbeats()
    now = time.time()
    return any(now - hb.timestamp < within_seconds for hb in heartbeats.values())


class NoDaemon(Exception):
    """The runs stayed queued for the whole bound and no dagster-daemon is there to start them."""

    def __init__(self, waited: float, queued: int) -> None:
        super().__init__(f"{queued} run(s) still queued after {waited:.0f}s and no dagster-daemon is running")
        self.waited = waited
        self.queued = queued


def wait(instance: dg.DagsterInstance, run_ids: Sequence[str], *, poll_seconds: float = 0.1,
         give_up_after: float | None = 60.0, sleep: Callable[[float], None] = time.sleep,
         clock: Callable[[], float] = time.monotonic) -> list[dg.DagsterRun]:
    """Block until every run is finished.

    Raises ``NoDaemon`` when the unfinished runs have all been queued for ``give_up_after`` seconds and no
    daemon has sent a heartbeat: nothing would ever start them (``None``: wait anyway). A daemon that is
    alive but busy (the queue is full) is waited for without a bound. A poll is one query of the runs table
    (2.5 ms of CPU on SQLite here): every 0.1 s, the command notices a finished run 75 ms sooner on average
    than at 0.25 s, for 2.5% of a core while it waits.
    """
    stuck_since: float | None = None
    while True:
        found = _runs_by_id(instance, run_ids)
        runs = [found.get(run_id) for run_id in run_ids]
        pending = [r for r in runs if r is None or r.status not in TERMINAL]
        if not pending:
            return [r for r in runs if r is not None]
        if all(r is not None and r.status == dg.DagsterRunStatus.QUEUED for r in pending):
            now = clock()
            stuck_since = now if stuck_since is None else stuck_since
            if give_up_after is not None and now - stuck_since >= give_up_after \
                    and not daemon_running(instance):
                raise NoDaemon(now - stuck_since, len(pending))
        else:
            stuck_since = None
        sleep(poll_seconds)
