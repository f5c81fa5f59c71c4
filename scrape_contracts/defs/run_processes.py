"""A command's batched runs, several at a time, each in a process of its own.

A batched run's own process is its critical path on a first sweep: it writes one Dagster event per accepted
target, one at a time, and waits for the database on each (docs/performance.md, "Where the time goes"). Two
runs in two processes overlap one's waits with the other's work. They are ordinary runs of the instance, as
``launching.execute`` runs them; only the process differs.

Not threads: Dagster captures a run's output by redirecting the process's file descriptors 1 and 2
(the compute log manager), so two runs in one process would swap each other's output. The run processes start
from the batch workers' forkserver (``service/forkserver.py``), a single-threaded process, and each loads the
definitions once for its share of the runs; the command reports each run as it ends.
"""

from __future__ import annotations

import contextlib
import gc
import os
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import Connection, wait
from typing import Any

import dagster as dg

from scrape_contracts.defs.launching import RunSpec, check_run, execute, runs_by_id


class RunProcessError(Exception):
    """A run process could not run its share (the definitions did not load, it was killed, ...)."""


def execute_in_processes(defs: dg.Definitions, instance: dg.DagsterInstance, specs: Sequence[RunSpec],
                         processes: int, report: Callable[[RunSpec, dg.DagsterRun, bool], None]
                         ) -> list[dg.DagsterRun]:
    """Run every spec whose run id is new, ``processes`` at a time; as ``execute`` otherwise.

    Specs are dealt in turn (share k holds specs k, k + n, ...), so the runs progress roughly in their order.
    This process runs the first share itself, with the definitions it has loaded, and reports the other
    processes' runs between its own and as they end. A process that fails before or between its runs is said
    in a ``RunProcessError`` once the others ended; the runs that ended stay reported and in the instance.
    """
    from scrape_contracts.service.forkserver import worker_context

    found = runs_by_id(instance, [spec.run_id for spec in specs])
    for spec in specs:
        if spec.run_id in found:
            report(spec, found[spec.run_id], False)
    new = [spec for spec in specs if spec.run_id not in found]
    shares = [new[k::processes] for k in range(min(processes, len(new)))]
    context = worker_context()
    others: dict[Connection, Any] = {}
    for share in shares[1:]:
        reader, writer = context.Pipe(duplex=False)
        process = context.Process(target=_run_share, args=(dict(os.environ), share, writer),
                                  name="scrape-contracts run")
        process.start()
        writer.close()
        others[reader] = process
    by_id = {spec.run_id: spec for spec in new}
    ended: set[str] = set()
    problems: list[str] = []

    def hear(timeout: float | None) -> None:
        for reader in wait(list(others), timeout):
            try:
                kind, value = reader.recv()
            except EOFError:  # the process is gone (it ended, or was killed before it said why)
                process = others.pop(reader)
                process.join()
                if process.exitcode and not problems:
                    problems.append(f"a run process ended with exit status {process.exitcode}")
                continue
            if kind == "ended":
                ended.add(value)
                report(by_id[value], check_run(instance, value), True)
            else:
                problems.append(value)

    def report_own(spec: RunSpec, run: dg.DagsterRun, started_now: bool) -> None:
        report(spec, run, started_now)
        hear(0)  # and the other processes' runs that ended meanwhile

    try:
        if shares:
            execute(defs, instance, shares[0], report_own)
        while others:
            hear(None)
    except BaseException:
        # Ctrl-C, or this process's own run broke: the other processes end the run they are in (Ctrl-C reached
        # them too) and start no other, as their next word to this process finds the pipe closed
        for reader in others:
            reader.close()
        raise
    if problems:
        missing = [spec.label for share in shares[1:] for spec in share if spec.run_id not in ended]
        raise RunProcessError(problems[0] + (f"; not finished: {', '.join(missing)}" if missing else ""))
    runs = runs_by_id(instance, [spec.run_id for spec in specs])
    return [runs[spec.run_id] for spec in specs]


def _run_share(environ: dict[str, str], share: list[RunSpec], writer: Connection) -> None:
    """In a run process: load the definitions and the instance once, run the share one run after another."""
    from scrape_contracts.service.batch_worker import adopt_environment

    adopt_environment(environ)
    try:
        from scrape_contracts.defs import build_definitions

        defs = build_definitions(os.environ.get("SCRAPE_CONTRACTS_DIR"))
        instance = dg.DagsterInstance.get()
        gc.freeze()  # what is loaded lives as long as the process (cli/runs.py says why)
        execute(defs, instance, share, lambda spec, _run, _new: writer.send(("ended", spec.run_id)))
    except (BrokenPipeError, EOFError):  # the command is gone or stopped listening: no other run starts
        raise SystemExit(1) from None
    except BaseException as exc:  # said to the command, which says it to the user in one line
        last = traceback.format_exception_only(type(exc), exc)[-1].strip()
        with contextlib.suppress(OSError):
            writer.send(("error", f"a run process failed: {last}"))
        raise SystemExit(1) from None
    finally:
        writer.close()
