"""An iterator worked ahead in a thread of its own, so that its producer and its consumer overlap.

A batched run's process does two things in turn: the runner takes results from the parse workers, heals and
commits a chunk of targets to the project store (service/batch.py), and the op writes that chunk's Dagster
events, one at a time, each a few round trips to the instance's database (defs/batch.py). Both mostly wait
on a database; in one thread each waited for the other. ``ahead(chunks)`` commits the next chunk while the
events of the one before are written.

Only ``depth`` items are ever made ahead (a committed chunk whose events are not written yet is the window a
crash leaves open, as before, one chunk wider). When the consumer stops early (the run is interrupted, or an
event write failed), the producer is stopped at its next item and closed in its own thread, so the
runner's clean-up (workers, leases) is done before ``ahead`` returns, as it was before.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")

_END = object()
_POLL_S = 0.2  # how often a producer blocked on a full queue looks whether the consumer stopped


class _Failed:
    def __init__(self, error: BaseException) -> None:
        self.error = error


def ahead(items: Iterator[T], depth: int = 1, name: str = "ahead") -> Iterator[T]:
    """``items``, each made in a thread while the consumer works on the one before; its exceptions are
    raised here, in the consumer's thread."""
    handoff: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                handoff.put(item, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(item):
                    break
            else:
                put(_END)
        except BaseException as exc:  # noqa: BLE001 (raised again in the consumer's thread)
            put(_Failed(exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()  # a generator stopped early runs its clean-up here, in the thread that ran it

    thread = threading.Thread(target=produce, name=name, daemon=True)
    thread.start()
    try:
        while True:
            item = handoff.get()
            if item is _END:
                return
            if isinstance(item, _Failed):
                raise item.error
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        thread.join()
