"""Batch workers forked ahead of a run, for a run worker fresh from the warm process (see
``scrape_contracts/warm_worker.py``): ``prefork_workers`` forks them while the process has one thread, and
``service.batch.BatchRunner`` takes them instead of spawning its own."""

from __future__ import annotations

import gc
import multiprocessing
from dataclasses import dataclass
from typing import Any


@dataclass
class _Preforked:
    results: Any
    controls: list[Any]
    shares: list[Any]  # one pipe each: the worker's share, or None to let it go
    processes: list[Any]

    def release(self, start: int = 0) -> None:
        for pipe in self.shares[start:]:
            try:
                pipe.send(None)
            except OSError:
                pass


_preforked: _Preforked | None = None


def prefork_workers(count: int) -> None:
    """Fork ``count`` batch workers now, for the next ``BatchRunner.run`` of this process.

    Only for a process that has a single thread (a run worker fresh from the warm process, see
    ``scrape_contracts/warm_worker.py``): a forked worker starts in milliseconds where a spawned one imports
    this package again (about 0.6 s, then the run waits for it). Workers nobody uses exit with the run.
    """
    global _preforked
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    controls = [ctx.Queue() for _ in range(count)]
    pipes = [ctx.Pipe(duplex=False) for _ in range(count)]
    writers = [sender for _, sender in pipes]
    processes = []
    for index in range(count):
        process = ctx.Process(target=_preforked_main, args=(pipes[index][0], writers, results, controls[index]),
                              daemon=True)
        process.start()
        processes.append(process)
    for receiver, _ in pipes:
        receiver.close()
    _preforked = _Preforked(results, controls, writers, processes)


def _preforked_main(receive: Any, writers: list[Any], results: Any, control: Any) -> None:
    for sender in writers:  # else this worker would keep its own pipe open and never see the run end
        sender.close()
    # the run's process had imported Dagster and all: keep those objects out of this worker's collections
    # (a full collection walking them on every few thousand allocations halved a first sweep's rate)
    gc.freeze()
    try:
        share = receive.recv()
    except EOFError:  # the run's process ended without a batch
        return
    if share is not None:
        from scrape_contracts.service.batch import _worker_main

        _worker_main(share, results, control)


def take_preforked(count: int) -> _Preforked | None:
    global _preforked
    taken, _preforked = _preforked, None
    if taken is None:
        return None
    if len(taken.processes) < count or not all(p.is_alive() for p in taken.processes[:count]):
        taken.release()
        return None
    taken.release(count)
    return taken
