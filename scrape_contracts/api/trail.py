"""Event-trail cursors for the API's pages and its Server-Sent Events stream.

An event's id is ``<storage id>-<line>``: the storage id of the record in Dagster's event log (the same
number `scrape-contracts events` prints as its cursor) and the line's place among the trail lines that one
record expands to (a batched run records a target's stages in one event). Both come from the instance, not
from the API process, so any API process resumes any other's stream at the same place.

No gaps, no repeats while runs commit concurrently: a reader must never move its cursor past an id that a
transaction still holds uncommitted, or that event would appear later *behind* the cursor and be skipped.
- SQLite (the laptop instance): one writer at a time, and an event's id is assigned inside the write
  transaction that commits it, so ids become visible in id order; every visible id is safe.
- PostgreSQL: ids come from a sequence when the INSERT runs and become visible when it commits, so id 10
  can be visible before id 9. Reads stop at a high-water mark: the sequence's last value L, taken together
  with a transaction snapshot S, is safe once every transaction that was running at S has ended (the
  cluster's oldest running transaction is past S's xmax); by then each id <= L is committed or rolled back
  for good. ``HighWater`` keeps such observations and promotes them as transactions end, so a long
  transaction elsewhere only delays events, it never loses one (a process that has just started shows
  events once the transactions running at its first look have ended). (Dagster writes an event with one INSERT in
  autocommit; the id is drawn and the transaction id assigned within that one statement.)
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import dagster as dg
import sqlalchemy as sa

from scrape_contracts.defs.history import TrailEvent as TrailLine, read_trail
from scrape_contracts.api.models import TrailEvent

CURSOR_PATTERN = r"^\d{1,18}(-\d{1,6})?$"
_LAST_LINE = 1_000_000  # a cursor of a storage id alone: after every line of that record


@dataclass(frozen=True, order=True)
class Cursor:
    storage_id: int
    line: int = _LAST_LINE

    @classmethod
    def parse(cls, text: str | None) -> Cursor:
        """``"1234-2"`` (after line 2 of record 1234), ``"1234"`` (after all of it); raises ValueError."""
        if text is None or text == "":
            return cls(0)
        if not re.match(CURSOR_PATTERN, text.strip()):
            raise ValueError(f"not an event cursor: {text[:40]!r} (expected e.g. 1234-0, as given in event ids)")
        storage_id, _, line = text.strip().partition("-")
        return cls(int(storage_id), int(line) if line else _LAST_LINE)

    def __str__(self) -> str:
        return str(self.storage_id) if self.line == _LAST_LINE else f"{self.storage_id}-{self.line}"


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def read_events(instance: dg.DagsterInstance, contracts: Sequence[str], after: Cursor, limit: int,
                high_water: int | None) -> tuple[list[TrailEvent], Cursor]:
    """Trail lines of ``contracts`` after ``after``, oldest first, at most ``limit``, none past ``high_water``."""
    # a cursor inside a record re-reads that record and drops the lines already given
    start = after.storage_id - 1 if after.line != _LAST_LINE else after.storage_id
    bound = high_water if high_water is not None else None
    lines: list[tuple[Cursor, str, TrailLine]] = []
    for contract in contracts:
        events, last = read_trail(instance, contract, after=max(start, 0), limit=limit)
        if len({e.storage_id for e in events}) >= limit:
            # this contract has more after ``last``: another contract's later ids must wait for them
            bound = last if bound is None else min(bound, last)
        index: dict[int, int] = {}
        for event in events:
            line = index.get(event.storage_id, 0)
            index[event.storage_id] = line + 1
            lines.append((Cursor(event.storage_id, line), contract, event))
    shown = sorted((e for e in lines if e[0] > after and (bound is None or e[0].storage_id <= bound)),
                   key=lambda e: e[0])[:limit]
    events = [TrailEvent(id=str(cursor), contract=contract, timestamp=e.timestamp, run_id=e.run_id,
                         partition=e.partition, stage=e.stage, summary=e.summary, metadata=_jsonable(e.metadata))
              for cursor, contract, e in shown]
    return events, (shown[-1][0] if shown else after)


class HighWater:
    """The highest event-log id below which no transaction can still add an event (None: no limit needed)."""

    def __init__(self, instance: dg.DagsterInstance, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.instance = instance
        self.clock, self.sleep = clock, sleep
        self._lock = threading.Lock()
        self._pending: list[tuple[int, int]] = []  # (sequence value, snapshot xmax), oldest first
        self._safe = 0
        self._postgres = type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"

    def mark(self, wait_s: float = 1.0) -> int | None:
        if not self._postgres:
            return None
        deadline = self.clock() + wait_s
        with self._lock:
            with self.instance.event_log_storage.index_connection() as conn:
                self._observe(conn)
                while True:
                    self._promote(conn)
                    if not self._pending or self.clock() >= deadline:
                        return self._safe
                    self.sleep(0.02)

    def _observe(self, conn: Any) -> None:
        row = conn.execute(sa.text(
            "SELECT pg_snapshot_xmax(pg_current_snapshot())::text, "
            "(SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM event_logs_id_seq)")).first()
        self._pending.append((int(row[1]), int(row[0])))

    def _promote(self, conn: Any) -> None:
        oldest_running = int(conn.execute(sa.text("SELECT pg_snapshot_xmin(pg_current_snapshot())::text"))
                             .scalar())
        while self._pending and self._pending[0][1] <= oldest_running:
            self._safe = max(self._safe, self._pending.pop(0)[0])
