"""The outbox: one row per state change worth telling, written in the same transaction as the change.

The store calls ``write`` inside its own transactions (accept, quarantine, review, pause, heal), so a crash
can never record a change without its event or an event without its change. Event ids are deterministic
(uuid5 of contract, target, version and kind): the same change has the same id whoever reads it, however
often. What is sent for a row, to whom, is decided when it is delivered (``service/activations.py``); each
message's fate is a row in ``sc_deliveries`` (pending → delivered | dead, every attempt kept).
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine

from scrape_contracts.adapters.schema import deliveries, outbox
from scrape_contracts.adapters.statuses import DeliveryState, OutboxKind

_NAMESPACE = uuid.UUID("6f1d3c64-5b0e-4a57-9a43-8d2f0c1e7b21")


def event_id(contract: str, target: str, version: int | str | None, kind: str) -> str:
    """The same change always has the same id (retries, replays, a second sensor tick)."""
    return str(uuid.uuid5(_NAMESPACE, f"{contract}\x1f{target}\x1f{version}\x1f{kind}"))


@dataclass(frozen=True)
class OutboxRow:
    id: int
    event_id: str
    kind: OutboxKind
    contract: str
    partition: str
    version: int | None
    data: dict[str, Any]
    created_at: dt.datetime


@dataclass(frozen=True)
class Delivery:
    outbox_id: int
    message_id: str
    destination: str
    rule: str
    status: DeliveryState
    attempts: int
    history: list[dict[str, Any]]


def _delivery(row: Any) -> Delivery:
    return Delivery(row.outbox_id, row.message_id, row.destination, row.rule, row.status, row.attempts,
                    list(row.history))


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def write(conn: Connection, kind: OutboxKind, items: Sequence[tuple[str, str, int | None, dict[str, Any]]]) -> None:
    """Outbox rows for ``(contract, partition, version, data)`` items, in the caller's transaction."""
    if not items:
        return
    rows = [{"event_id": event_id(c, p, v, kind.value), "kind": kind, "contract": c, "partition": p,
             "version": v, "data": data, "created_at": _now()} for c, p, v, data in items]
    insert = (sa.dialects.postgresql.insert if conn.dialect.name == "postgresql" else sa.dialects.sqlite.insert)
    # the same change written twice (a retried transaction) is one event
    conn.execute(insert(outbox).on_conflict_do_nothing(index_elements=["event_id"]), rows)


def next_pause_number(conn: Connection, contract: str, partition: str) -> int:
    """Pauses have no version: the n-th pause of a target is its n-th paused event."""
    count = conn.execute(sa.select(sa.func.count()).select_from(outbox).where(
        outbox.c.kind == OutboxKind.PAUSED, outbox.c.contract == contract, outbox.c.partition == partition)).scalar()
    return int(count or 0) + 1


class Outbox:
    """Reading the outbox and recording deliveries (the store's engine; no Dagster)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def after(self, after_id: int, limit: int = 500, *, kinds: Sequence[OutboxKind] | None = None
              ) -> list[OutboxRow]:
        """Rows after ``after_id``, oldest first (of ``kinds`` only, when given): a reader's cursor."""
        query = sa.select(outbox).where(outbox.c.id > after_id)
        if kinds is not None:
            query = query.where(outbox.c.kind.in_(list(kinds)))
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(outbox.c.id).limit(limit)).all()
        return [OutboxRow(**r._mapping) for r in rows]

    def between(self, first_id: int, last_id: int) -> list[OutboxRow]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(outbox).where(outbox.c.id >= first_id, outbox.c.id <= last_id)
                                .order_by(outbox.c.id)).all()
        return [OutboxRow(**r._mapping) for r in rows]

    def by_ids(self, ids: Sequence[int]) -> list[OutboxRow]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(outbox).where(outbox.c.id.in_(list(ids))).order_by(outbox.c.id)).all()
        return [OutboxRow(**r._mapping) for r in rows]

    def last_id(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.max(outbox.c.id))).scalar() or 0)

    def deliveries(self, *, status: DeliveryState | None = None, outbox_ids: Sequence[int] | None = None
                   ) -> list[Delivery]:
        query = sa.select(deliveries).order_by(deliveries.c.id)
        if status is not None:
            query = query.where(deliveries.c.status == status)
        if outbox_ids is not None:
            query = query.where(deliveries.c.outbox_id.in_(list(outbox_ids)))
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return [_delivery(r) for r in rows]

    def delivery(self, message_id: str, destination: str) -> Delivery | None:
        with self.engine.connect() as conn:
            r = conn.execute(sa.select(deliveries).where(deliveries.c.message_id == message_id,
                                                         deliveries.c.destination == destination)).first()
        return None if r is None else _delivery(r)

    def save_delivery(self, outbox_id: int, message_id: str, destination: str, rule: str, status: DeliveryState,
                      attempts: list[dict[str, Any]]) -> Delivery:
        """Add this run's attempts to the message's history and set its status."""
        with self.engine.begin() as conn:
            row = conn.execute(sa.select(deliveries).where(deliveries.c.message_id == message_id,
                                                           deliveries.c.destination == destination)).first()
            history = (list(row.history) if row is not None else []) + attempts
            values = {"status": status, "attempts": len(history), "history": history, "updated_at": _now()}
            if row is None:
                conn.execute(deliveries.insert().values(outbox_id=outbox_id, message_id=message_id,
                                                        destination=destination, rule=rule, **values))
            else:
                conn.execute(deliveries.update().where(deliveries.c.id == row.id).values(**values))
        return Delivery(outbox_id, message_id, destination, rule, status, len(history), history)
