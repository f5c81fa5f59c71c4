"""The warm process run workers fork from (see ``scrape_contracts/warm_launcher.py``).

Started by the launcher as ``python -m scrape_contracts.warm_worker``, it imports Dagster, the libraries and
this package once, then reads one request per line on stdin (a run id and the instance to run it on),
forks, and answers with the child's pid on stdout. The child executes the run exactly as
``dagster api execute_run`` would; only the Python start and the imports are skipped (about 2 s of a run's
start on this machine). The contracts are not preloaded: every run loads them from disk, so an edited
contract is what the run scrapes. It stays single-threaded, so forking it is safe; when its stdin closes
(the launcher's process ended) it exits, and runs in flight keep running.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import signal
import sys
import traceback

# what every run worker imports anyway; scrape_contracts.definitions (which reads the contracts) is not here
PRELOAD = (
    "dagster",
    "dagster._cli.api",
    "dagster._core.execution.api",
    "scrape_contracts.defs",
    "scrape_contracts.defs.batch",
    "scrape_contracts.service.batch",
    "scrape_contracts.adapters.fetch",
    "lxml.html",
    "jsonschema",
)


def _run(request: dict[str, str]) -> int:
    """In the forked child: execute one run (what ``dagster api execute_run`` does after its imports)."""
    from dagster._cli.api import _execute_run_command_body  # private in 1.13 (pinned)
    from dagster._core.instance import DagsterInstance, InstanceRef
    from dagster._serdes import deserialize_value
    from dagster._utils.interrupts import capture_interrupts

    with capture_interrupts():
        ref = deserialize_value(request["instance_ref"], InstanceRef)
        with DagsterInstance.from_ref(ref) as instance:
            return _execute_run_command_body(request["run_id"], instance, lambda _event: None,
                                             set_exit_code_on_failure=False)


def _child(request: dict[str, str]) -> None:
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the run's own subprocesses must be waitable
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # stdout is the launcher's answer pipe: the run prints to stderr like a spawned worker
    code = 1
    try:
        if request.get("cwd"):
            os.chdir(request["cwd"])
        if request.get("batch"):
            # a batched run: fork its workers now, while this process still has one thread
            from scrape_contracts import settings
            from scrape_contracts.service.prefork import prefork_workers

            if settings.parse_workers() > 0:
                prefork_workers(settings.parse_workers())
        code = _run(request)
    except BaseException:  # noqa: BLE001 (the run's failure is in its event log; this is for the daemon's log)
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main() -> int:
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional part is missing: the run imports what it needs itself
            pass
    # what is loaded now lives as long as the process: out of the collector's sight (gc.freeze, meant for
    # pre-fork servers), else every full collection in every run worker walks Dagster's whole import graph,
    # and writing the collector's marks would copy the shared pages into each fork
    gc.collect()
    gc.freeze()
    # children are reaped by the kernel: this process never waits for them
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    out = sys.stdout
    out.write("ready\n")
    out.flush()
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        out.write(f"{pid}\n")
        out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
