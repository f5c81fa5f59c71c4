"""Partition state (pauses, heal attempts, validators, failure streaks) and the dynamic targets of a contract."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa
import sqlalchemy.dialects.postgresql
import sqlalchemy.dialects.sqlite
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from scrape_contracts.adapters import outbox as _outbox
from scrape_contracts.adapters.schema import (
    candidates, outbox as outbox_table, partition_state, selector_versions, targets,
)
from scrape_contracts.adapters.statuses import CandidateStatus, OutboxKind
from scrape_contracts.adapters.store.engines import Connected
from scrape_contracts.adapters.store.leases import check_fence
from scrape_contracts.adapters.store.rows import PartitionState, utc_now, state_of

# the pause reason of a target waiting for review starts with this
REVIEW_PAUSE = "review required"


class PartitionStateMixin(Connected):
    """Per target: paused or not and why, heal attempts, the page validators, the failure streak."""

    def state(self, contract: str, partition: str) -> PartitionState:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(partition_state).where(
                partition_state.c.contract == contract, partition_state.c.partition == partition)).first()
        if row is None:
            return PartitionState(contract, partition)
        return state_of(row)

    def states(self, contract: str, partitions: Sequence[str] | None = None) -> dict[str, PartitionState]:
        """Every partition state of a contract in one read, or only those of ``partitions`` (a batched run reads
        its own: a contract of 20,000 targets in runs of 2,000 read 20,000 states per run otherwise)."""
        query = sa.select(partition_state).where(partition_state.c.contract == contract)
        if partitions is not None:
            query = query.where(partition_state.c.partition.in_(list(partitions)))
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return {r.partition: state_of(r) for r in rows}

    def paused_partitions(self, contract: str) -> dict[str, str]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(partition_state.c.partition, partition_state.c.pause_reason).where(
                partition_state.c.contract == contract, partition_state.c.paused.is_(True))).all()
        return {r.partition: r.pause_reason or "paused" for r in rows}

    def update_state(self, contract: str, partition: str, **values: Any) -> PartitionState:
        with self._tx() as conn:
            check_fence(conn, self, [(contract, partition)])
            _ensure_state(conn, contract, partition)
            write_state(conn, contract, partition, **values)
        return self.state(contract, partition)

    def add_heal_attempt(self, contract: str, partition: str) -> int:
        with self._tx() as conn:
            check_fence(conn, self, [(contract, partition)])
            lock_partition(conn, contract, partition)
            conn.execute(partition_state.update().where(
                partition_state.c.contract == contract, partition_state.c.partition == partition
            ).values(heal_attempts=partition_state.c.heal_attempts + 1, updated_at=utc_now()))
            return conn.execute(sa.select(partition_state.c.heal_attempts).where(
                partition_state.c.contract == contract, partition_state.c.partition == partition)).scalar_one()

    def pause(self, contract: str, partition: str, reason: str, *, cause: str = "person") -> PartitionState:
        """Pause a target (its schedule and batches skip it) and tell the outbox, in one transaction.

        ``cause``: "person" (scrape-contracts pause, the UI's job) or "budget_exhausted" (the healer)."""
        with self._tx() as conn:
            check_fence(conn, self, [(contract, partition)])
            lock_partition(conn, contract, partition)
            write_state(conn, contract, partition, paused=True, pause_reason=reason)
            number = _outbox.next_pause_number(conn, contract, partition)
            _outbox.write(conn, OutboxKind.PAUSED, [(contract, partition, number, {"reason": reason,
                                                                                  "cause": cause})])
        return self.state(contract, partition)

    def record_failures(self, contract: str, failures: Sequence[tuple[str, str]]) -> None:
        """Scrapes that failed before a candidate existed (the fetch): each lengthens its target's streak."""
        if not failures:
            return
        with self._tx() as conn:
            check_fence(conn, self, {(contract, p) for p, _ in failures})
            lock_partitions(conn, {(contract, p) for p, _ in failures})
            count_streaks(conn, failed=[(contract, p, reason) for p, reason in failures], succeeded=[])

    def last_failures(self, contract: str, partitions: Sequence[str]) -> dict[str, tuple[str, Any]]:
        """partition → (reason, when) of each target's latest failed scrape, from its ``failed`` events."""
        if not partitions:
            return {}
        newest = (sa.select(sa.func.max(outbox_table.c.id)).where(
            outbox_table.c.kind == OutboxKind.FAILED, outbox_table.c.contract == contract,
            outbox_table.c.partition.in_(list(partitions))
        ).group_by(outbox_table.c.partition).scalar_subquery())
        row = outbox_table.c
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(row.partition, row.data, row.created_at)
                                .where(row.id.in_(newest))).all()
        return {r.partition: (str((r.data or {}).get("reason") or "failed"), r.created_at) for r in rows}

    def outbox(self) -> _outbox.Outbox:
        return _outbox.Outbox(self.engine)

    def resume(self, contract: str, partition: str) -> PartitionState:
        return self.update_state(contract, partition, paused=False, pause_reason=None, heal_attempts=0)


class TargetsMixin(Connected):
    """Targets added at runtime to dynamic contracts: partition key → URL."""

    def add_targets(self, contract: str, urls_by_key: dict[str, str]) -> list[str]:
        """Record key → URL for dynamic targets; returns the keys that were new."""
        added = []
        with self._tx() as conn:
            existing = set(conn.execute(sa.select(targets.c.partition).where(targets.c.contract == contract))
                           .scalars())
            for key, url in urls_by_key.items():
                if key not in existing:
                    conn.execute(targets.insert().values(contract=contract, partition=key, url=url,
                                                         created_at=utc_now()))
                    added.append(key)
        return added

    def target_url(self, contract: str, partition: str) -> str | None:
        with self.engine.connect() as conn:
            return conn.execute(sa.select(targets.c.url).where(
                targets.c.contract == contract, targets.c.partition == partition)).scalar()

    def contracts(self) -> list[str]:
        """Names of the contracts this store has seen (scraped, or with targets added)."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.union(sa.select(candidates.c.contract), sa.select(targets.c.contract),
                                         sa.select(selector_versions.c.contract))).all()
        return sorted({r[0] for r in rows})

    def list_targets(self, contract: str) -> dict[str, str]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(targets.c.partition, targets.c.url)
                                .where(targets.c.contract == contract).order_by(targets.c.partition)).all()
        return {r.partition: r.url for r in rows}


def lock_partition(conn: Connection, contract: str, partition: str) -> None:
    """Row lock on the partition's state: concurrent accept/quarantine/review of one partition queue."""
    _ensure_state(conn, contract, partition)
    if conn.dialect.name == "postgresql":
        conn.execute(
            sa.select(partition_state.c.contract)
            .where(partition_state.c.contract == contract, partition_state.c.partition == partition)
            .with_for_update()
        )


def lock_partitions(conn: Connection, keys: set[tuple[str, str]]) -> None:
    """Partition states exist for every key and, on PostgreSQL, are row-locked (in one order, no deadlock).

    Missing states are inserted first, all in one order, then every state is locked, in the same order: a
    new row is held by the transaction that inserted it, so the others wait for it in their inserts, before
    they lock anything. (Locking the existing rows first and inserting the rest after deadlocks: a row
    another transaction adds in between is missing for one and locked, as existing, by the other.) On
    PostgreSQL the states that exist are looked up first (no lock) and only the missing ones inserted: after
    a target's first scrape all of them exist, and inserting a chunk's hundred rows only to find them there
    cost 6 ms of a chunk's commit against 1.5 ms for the look-up (an unchanged sweep, measured).
    """
    if conn.dialect.name != "postgresql":
        # SQLite: the transaction's BEGIN IMMEDIATE holds the whole store
        conn.execute(sa.dialects.sqlite.insert(partition_state).on_conflict_do_nothing(), _new_states(keys))
        return
    missing = keys - _existing(conn, keys)
    if missing:
        # a key another transaction has just inserted looks missing here too: this insert waits for it
        conn.execute(sa.dialects.postgresql.insert(partition_state).on_conflict_do_nothing(), _new_states(missing))
    _existing(conn, keys, lock=True)


def _existing(conn: Connection, keys: set[tuple[str, str]], *, lock: bool = False) -> set[tuple[str, str]]:
    """The keys whose partition states exist (committed); ``lock``: row-lock them, in one order."""
    found = set()
    for contract in sorted({c for c, _ in keys}):
        query = sa.select(partition_state.c.partition).where(
            partition_state.c.contract == contract,
            partition_state.c.partition.in_(sorted(p for c, p in keys if c == contract)))
        if lock:
            query = query.order_by(partition_state.c.partition).with_for_update()
        found.update((contract, p) for p in conn.execute(query).scalars())
    return found


def _new_states(keys: set[tuple[str, str]]) -> list[dict[str, Any]]:
    return [{"contract": c, "partition": p, "paused": False, "heal_attempts": 0, "updated_at": utc_now()}
            for c, p in sorted(keys)]


def _ensure_state(conn: Connection, contract: str, partition: str) -> None:
    exists = conn.execute(sa.select(partition_state.c.contract).where(
        partition_state.c.contract == contract, partition_state.c.partition == partition)).first()
    if exists is None:
        try:
            with conn.begin_nested():
                conn.execute(partition_state.insert().values(
                    contract=contract, partition=partition, paused=False, heal_attempts=0, updated_at=utc_now()))
        except IntegrityError:
            pass  # another transaction created it first


def set_status(conn: Connection, candidate_id: int, status: CandidateStatus) -> None:
    conn.execute(candidates.update().where(candidates.c.id == candidate_id).values(status=status))


def release_review_pause(conn: Connection, contract: str, partition: str) -> None:
    """Resume a target paused for review once no candidate of it waits for review (other pauses stay)."""
    waiting = conn.execute(sa.select(sa.func.count()).select_from(candidates).where(
        candidates.c.contract == contract, candidates.c.partition == partition,
        candidates.c.status == CandidateStatus.QUARANTINED)).scalar()
    if not waiting:
        conn.execute(partition_state.update().where(
            partition_state.c.contract == contract, partition_state.c.partition == partition,
            partition_state.c.paused.is_(True), partition_state.c.pause_reason.like(f"{REVIEW_PAUSE}%"),
        ).values(paused=False, pause_reason=None, updated_at=utc_now()))


def write_states(conn: Connection, columns: Sequence[str], rows: Sequence[dict[str, Any]]) -> None:
    """Set ``columns`` (and ``updated_at``) of many partition states: ``rows`` give c, p and the values.

    PostgreSQL gets one UPDATE joined to the values as arrays (``unnest``): a statement of one shape,
    compiled once; a chunk's hundred rows took 3 ms where a hundred UPDATEs in one round trip (psycopg2's
    execute_batch) took 11 ms (measured on a 2-core machine), and an unchanged sweep sends two per chunk.
    SQLite runs the rows one by one, in process (cheap). When a key repeats, the last row wins, as one by one.
    """
    if not rows:
        return
    names = ("c", "p", *columns, "updated_at")
    if conn.dialect.name != "postgresql":
        conn.execute(partition_state.update().where(
            partition_state.c.contract == sa.bindparam("c"), partition_state.c.partition == sa.bindparam("p"),
        ).values({name: sa.bindparam(name) for name in names[2:]}), rows)
        return
    last = list({(row["c"], row["p"]): row for row in rows}.values())
    conn.execute(_unnest_update(tuple(columns)), {name: [row[name] for row in last] for name in names})


@functools.cache
def _unnest_update(columns: tuple[str, ...]) -> Any:
    names = ("c", "p", *columns, "updated_at")
    types = [partition_state.c.contract.type, partition_state.c.partition.type,
             *(partition_state.c[name].type for name in names[2:])]
    values = sa.func.unnest(*(sa.bindparam(name, type_=sa.dialects.postgresql.ARRAY(type_))
                              for name, type_ in zip(names, types, strict=True))
                            ).table_valued(*names).render_derived(name="v")
    return partition_state.update().where(
        partition_state.c.contract == values.c.c, partition_state.c.partition == values.c.p,
    ).values({name: values.c[name] for name in names[2:]})


def write_state(conn: Connection, contract: str, partition: str, **values: Any) -> None:
    _ensure_state(conn, contract, partition)
    conn.execute(partition_state.update().where(
        partition_state.c.contract == contract, partition_state.c.partition == partition
    ).values(updated_at=utc_now(), **values))


def count_streaks(conn: Connection, *, failed: Sequence[tuple[str, str, str]],
                   succeeded: Sequence[tuple[str, str]], ended: Sequence[tuple[str, str]] = ()) -> None:
    """Failure streaks and their outbox events, in the caller's transaction (partition states exist).

    A failure lengthens its target's streak (event ``failed``, numbered by the target's failures ever); a
    success after failures ends it (event ``recovered``), and so does a quarantine (``ended``: the page was
    read, but nothing was accepted, so the last success stays). ``on: failing`` alerts when a streak reaches
    its rule's ``failing_after``, once, and ``recovered`` follows only such a streak (service/activations.py).
    """
    keys = {(c, p) for c, p, _ in failed} | set(succeeded) | set(ended)
    if not keys:
        return
    current: dict[tuple[str, str], tuple[int, int]] = {}
    for contract in {c for c, _ in keys}:
        rows = conn.execute(sa.select(partition_state.c.partition, partition_state.c.failure_streak,
                                      partition_state.c.failure_count).where(
            partition_state.c.contract == contract,
            partition_state.c.partition.in_(sorted(p for c, p in keys if c == contract)))).all()
        current.update({(contract, r.partition): (r.failure_streak or 0, r.failure_count or 0) for r in rows})
    events: dict[OutboxKind, list[tuple[str, str, int, dict[str, Any]]]] = {OutboxKind.FAILED: [],
                                                                          OutboxKind.RECOVERED: []}
    changed: dict[tuple[str, str], tuple[int, int]] = {}
    for contract, partition in [*succeeded, *ended]:
        streak, count = changed.get((contract, partition), current.get((contract, partition), (0, 0)))
        if streak:
            data = {"ended_streak": streak, **({"by": "quarantined"} if (contract, partition) in ended else {})}
            events[OutboxKind.RECOVERED].append((contract, partition, count, data))
            changed[(contract, partition)] = (0, count)
    for contract, partition, reason in failed:
        streak, count = changed.get((contract, partition), current.get((contract, partition), (0, 0)))
        changed[(contract, partition)] = (streak + 1, count + 1)
        events[OutboxKind.FAILED].append((contract, partition, count + 1, {"streak": streak + 1,
                                                                           "reason": reason[:500]}))
    if succeeded:
        now = utc_now()
        write_states(conn, ("last_success_at",), [
            {"c": c, "p": p, "last_success_at": now, "updated_at": now} for c, p in sorted(set(succeeded))])
    if changed:
        write_states(conn, ("failure_streak", "failure_count"), [
            {"c": c, "p": p, "failure_streak": streak, "failure_count": count, "updated_at": utc_now()}
            for (c, p), (streak, count) in changed.items()])
    for kind, items in events.items():
        _outbox.write(conn, kind, items)
