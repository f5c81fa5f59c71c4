"""Start the runs a command or an API request asks for, idempotently, and wait for them.

Two ways, both through Dagster's public interfaces: ``execute`` runs them in this process (what ``dg launch``
does; the runs are ordinary runs of the instance), ``queue`` hands them to the instance's run queue with
``dagster job launch``, so the deployment's coordinator and launcher place them. A run's id is derived from
the idempotency key, so asking for the same thing again finds the run that exists instead of adding one.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
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
    from scrape_contracts.defs.names import BATCH_TAG, batch_job_name
    from scrape_contracts.defs.names import TARGET_TAG, scrape_job_name

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


def run_in_process(job: dg.JobDefinition, **kwargs: Any) -> dg.ExecuteInProcessResult:
    """``job.execute_in_process(**kwargs)``, leaving this process's SIGTERM as it was.

    When a run in the main thread ends, Dagster gives SIGTERM the disposition SIGINT has (it maps SIGTERM to
    SIGINT for Kubernetes). A command or server started with SIGINT ignored (a background job of a
    non-interactive shell, a service manager's default) would then ignore SIGTERM, survive ``kill`` and
    ``systemctl stop``, and pass that on to every process it starts. Every run this project executes in
    process goes through here.
    """
    if threading.current_thread() is not threading.main_thread():
        return job.execute_in_process(**kwargs)  # signals are the main thread's; Dagster leaves them alone
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        return job.execute_in_process(**kwargs)
    finally:
        signal.signal(signal.SIGTERM, sigterm)


class LaunchError(Exception):
    """``dagster job launch`` refused a run (the code location did not load, the job is unknown, ...)."""


def execute(defs: dg.Definitions, instance: dg.DagsterInstance, specs: Sequence[RunSpec],
            report: Callable[[RunSpec, dg.DagsterRun, bool], None]) -> list[dg.DagsterRun]:
    """Run every spec whose run id is new in this process, one after the other (as ``dg launch`` does).

    The runs are ordinary runs of the instance (run history, the UI, sensors see them); a run that exists
    already (same idempotency key) is reported and not run again.
    """
    runs = []
    found = runs_by_id(instance, [spec.run_id for spec in specs])
    for index, spec in enumerate(specs):
        existing = found.get(spec.run_id)
        if existing is not None:
            report(spec, existing, False)
            runs.append(existing)
            continue
        tags = dict(spec.tags)
        partition = tags.pop("dagster/partition", None)
        result = run_in_process(
            defs.resolve_job_def(spec.job_name), run_config={**QUIET, **spec.run_config}, instance=instance, partition_key=partition,
            run_id=spec.run_id, tags=tags, raise_on_error=False)
        run = check_run(instance, result.run_id)
        report(spec, run, True)
        runs.append(run)
        if interrupted(result):
            # Dagster ends a run that Ctrl-C (or SIGTERM) interrupted as failed, and returns: the runs after it
            # are not started, as the user asked
            raise Interrupted(spec.label, [later.label for later in specs[index + 1:]])
    return runs


class Interrupted(Exception):
    """A run executed here was interrupted (Ctrl-C, SIGTERM); the runs after it were not started."""

    def __init__(self, label: str, not_started: list[str]) -> None:
        super().__init__(f"{label} was interrupted" + (
            f"; not started: {', '.join(not_started)}" if not_started else ""))


def interrupted(result: dg.ExecuteInProcessResult) -> bool:
    """Whether a step of the run was stopped by an interrupt (Dagster says so as the step's error class)."""
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data.error is not None \
                and event.step_failure_data.error.cls_name in ("DagsterExecutionInterruptedError",
                                                               "KeyboardInterrupt"):
            return True
    return False


def check_run(instance: dg.DagsterInstance, run_id: str) -> dg.DagsterRun:
    run = instance.get_run_by_id(run_id)
    if run is None:  # pragma: no cover - the instance just wrote it
        raise LaunchError(f"run {run_id} is not in the instance")
    return run


def queue(instance: dg.DagsterInstance, workspace_file: str, specs: Sequence[RunSpec],
          report: Callable[[RunSpec, dg.DagsterRun, bool], None], *, parallel: int = 4) -> list[dg.DagsterRun]:
    """Submit every spec whose run id is new to the instance's run queue, with ``dagster job launch``.

    That is Dagster's public way to queue a run from outside the webserver: the instance's run coordinator
    admits it and its run launcher (the default one, Docker, Kubernetes, ...) places it. Each launch loads
    the code location once, so a few are started at a time.
    """
    found = runs_by_id(instance, [spec.run_id for spec in specs])
    new = [spec for spec in specs if spec.run_id not in found]
    if new:
        with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(new)))) as pool:
            errors = [e for e in pool.map(lambda spec: _dagster_job_launch(workspace_file, spec), new) if e]
        found.update(runs_by_id(instance, [spec.run_id for spec in new]))
        missing = [spec for spec in new if spec.run_id not in found]
        if missing:
            raise LaunchError(errors[0] if errors else f"{len(missing)} run(s) were not created")
    runs = []
    for spec in specs:
        report(spec, found[spec.run_id], spec in new)
        runs.append(found[spec.run_id])
    return runs


def _dagster_job_launch(workspace_file: str, spec: RunSpec) -> str | None:
    """Launch one run; the reason in one line when Dagster refused it, else None."""
    command = [str(Path(sys.executable).with_name("dagster")), "job", "launch", "-w", workspace_file,
               "-j", spec.job_name, "--run-id", spec.run_id, "--tags", json.dumps(spec.tags),
               "--config-json", json.dumps(spec.run_config or {})]
    done = subprocess.run(command, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    if done.returncode == 0:
        return None
    lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
    errors = [line for line in lines if "Error" in line or "error" in line]
    return (errors or lines or [f"dagster job launch exited {done.returncode}"])[-1][:300]


def runs_by_id(instance: dg.DagsterInstance, run_ids: Sequence[str]) -> dict[str, dg.DagsterRun]:
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
        found = runs_by_id(instance, run_ids)
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
