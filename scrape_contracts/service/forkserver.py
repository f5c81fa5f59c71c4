"""Where a batch's parse workers and fetching process start from: the standard library's forkserver, with
the modules they run preloaded (service/batch_worker.py, service/batch_fetch.py).

A module of its own, importing nothing of the package: the command starts the forkserver before its own
heavy imports, so that the two overlap.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

_PRELOAD = ["scrape_contracts.service.batch_worker", "scrape_contracts.service.batch_fetch",
            "scrape_contracts.service.fetch_ready"]


def worker_context() -> Any:
    """Parse workers start from the standard library's forkserver, which has imported their modules once.

    Not fork: the run's process has threads (Dagster's), and a forked child would inherit their locks
    mid-flight. Not spawn: each worker would import this package again (about 0.6 s before its first page).
    The forkserver is a single-threaded process that imported them already, so a worker is one fork of it.
    """
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def start_forkserver() -> None:
    """Start the forkserver now, for a process that is about to run batches in itself.

    Its imports (the preload, most of a second) then overlap the caller's own start (Dagster's import, the
    instance, the definitions, the run's launch) instead of holding up the batch's first worker. The
    forkserver keeps the environment it started with; each batch hands its workers the run's environment
    as it is then (batch_worker.adopt_environment).
    """
    from multiprocessing import forkserver

    worker_context()
    forkserver.ensure_running()  # spawns it and returns; the first worker's start waits for its preload
