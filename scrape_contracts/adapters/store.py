"""The project store: accepted versions, candidates, selector versions, reviews, partition state.

One SQLAlchemy URL (SQLite by default, PostgreSQL in production). Every write that must not be half-done
is one transaction; races are settled by unique constraints (one accepted version per candidate, one
selector version number per contract) rather than by hoping two runs never meet. The tables and their
status enums are in ``schema.py``; ``migrations`` creates and upgrades them the first time a process opens
the store.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
import sqlalchemy.dialects.postgresql
import sqlalchemy.dialects.sqlite
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError

from scrape_contracts.adapters import migrations
from scrape_contracts.adapters import outbox as _outbox
from scrape_contracts.adapters.schema import (
    AcceptSource, CandidateStatus, Decision, OutboxKind, SelectorSource, TextEnum, accepted, candidates, metadata,
    partition_state, reviews, selector_versions, targets,
)
from scrape_contracts.engine.outcome import Outcome


# the pause reason of a target waiting for review starts with this
REVIEW_PAUSE = "review required"


class StoreError(Exception):
    """A request the store refuses; the message says why and what to do."""


class StoreTooNew(StoreError):
    """The store's schema was upgraded by a newer release of scrape_contracts than this one."""


class StoreNotFound(StoreError):
    """No project store at the URL: nothing was scraped with it (opening it would create an empty one)."""


class NothingToReview(StoreError):
    pass


class Superseded(StoreError):
    pass


class AlreadyAccepted(StoreError):
    pass


class StaleCandidate(StoreError):
    """The candidate was compared with an accepted version that is no longer the newest: decide again."""

    def __init__(self, message: str, newest: int) -> None:
        super().__init__(message)
        self.newest = newest


class SelectorConflict(StoreError):
    """Another run added a selector version first: reload and retry."""


class CandidateAction(TextEnum):
    """What ``record_candidates`` does with a new candidate (the status it gets)."""

    ACCEPT = "accept"  # accepted as the next version (compare-and-swap on ``compared_with``)
    QUARANTINE = "quarantine"  # held for review, the target paused
    REJECT = "reject"
    UNCHANGED = "unchanged"
    PENDING = "pending"  # stored; accepted later, once Dagster's blocking checks passed


_STATUS_OF = {CandidateAction.ACCEPT: CandidateStatus.ACCEPTED,
              CandidateAction.REJECT: CandidateStatus.REJECTED,
              CandidateAction.UNCHANGED: CandidateStatus.UNCHANGED}


@dataclass(frozen=True)
class NewCandidate:
    """A candidate to store, and what to do with it."""

    contract: str
    partition: str
    run_id: str
    url: str
    record: dict[str, Any]
    outcome: Outcome
    details: dict[str, Any]
    page_sha256: str | None
    selector_version: int | None
    action: CandidateAction
    reason: str | None = None  # why it is quarantined
    validators: dict[str, str] | None = None  # etag/last_modified to remember for an unchanged page
    compared_with: int | None = None  # the accepted version it was diffed against (accept: compare-and-swap)


@dataclass(frozen=True)
class RecordedCandidate:
    """What became of a new candidate; ``stale``: not recorded, its accept was diffed against an old version
    (``accepted_version`` is then the newest one, to diff against and decide again)."""

    candidate_id: int
    status: CandidateStatus | None
    accepted_version: int | None = None
    stale: bool = False


@dataclass(frozen=True)
class Candidate:
    id: int
    contract: str
    partition: str
    run_id: str
    url: str
    record: dict[str, Any]
    outcome: Outcome
    status: CandidateStatus
    details: dict[str, Any]
    page_sha256: str | None
    selector_version: int | None
    created_at: dt.datetime


@dataclass(frozen=True)
class AcceptedVersion:
    contract: str
    partition: str
    version: int
    record: dict[str, Any]
    url: str
    candidate_id: int | None
    run_id: str
    page_sha256: str | None
    source: AcceptSource
    reviewer: str | None
    reason: str | None
    created_at: dt.datetime


@dataclass(frozen=True)
class SelectorVersion:
    contract: str
    version: int
    parent_version: int | None
    selectors: dict[str, str]
    contract_selectors: dict[str, str]
    source: SelectorSource
    run_id: str | None
    partition: str | None
    changes: dict[str, Any]
    created_at: dt.datetime


@dataclass(frozen=True)
class PartitionState:
    contract: str
    partition: str
    paused: bool = False
    pause_reason: str | None = None
    heal_attempts: int = 0
    etag: str | None = None
    last_modified: str | None = None
    last_page_sha256: str | None = None
    failure_streak: int = 0  # consecutive failed or rejected scrapes
    last_success_at: dt.datetime | None = None  # last accepted or unchanged scrape (UTC)


@dataclass(frozen=True)
class Review:
    contract: str
    partition: str
    candidate_id: int
    decision: Decision
    reviewer: str
    reason: str
    run_id: str | None
    accepted_version: int | None


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()


def _engine_for(url: str) -> Engine:
    # one pool per URL per process: runs, sensors and the CLI share it
    with _engines_lock:
        engine = _engines.get(url)
        if engine is None:
            engine = new_engine(url)
            try:
                migrations.ensure_current(engine, _shown(url))
            except migrations.NewerSchema as exc:
                engine.dispose()
                raise StoreTooNew(str(exc)) from None
            _engines[url] = engine
        return engine


def new_engine(url: str) -> Engine:
    """An engine with the store's connection settings, the schema left alone (``_engine_for`` checks it)."""
    if not url.startswith("sqlite"):
        return sa.create_engine(url, pool_pre_ping=True)
    engine = sa.create_engine(url, connect_args={"timeout": 60, "check_same_thread": False})

    @sa.event.listens_for(engine, "connect")
    def _sqlite_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # let BEGIN below take effect
        dbapi_conn.execute("PRAGMA busy_timeout=60000")
        _enable_wal(dbapi_conn)
        # in WAL mode NORMAL syncs at checkpoints, not at every commit: a killed process still loses nothing
        # committed (the crash tests SIGKILL writers); only a power cut can drop the last commits. An fsync
        # per commit was a tenth of a batched run's own time on a busy disk (py-spy). PostgreSQL is unchanged.
        dbapi_conn.execute("PRAGMA synchronous=NORMAL")

    @sa.event.listens_for(engine, "begin")
    def _sqlite_begin(conn: Connection) -> None:
        if conn.get_execution_options().get(migrations.READ_ONLY):
            conn.exec_driver_sql("BEGIN")  # the revision check at open: a read must not queue behind writers
            return
        # IMMEDIATE: take the write lock up front, so two writers queue instead of deadlocking (and the
        # migrations of processes opening one store take turns)
        conn.exec_driver_sql("BEGIN IMMEDIATE")

    return engine


def upgrade_schema(url: str) -> tuple[str | None, str]:
    """Bring the store's schema to the newest revision now: (revision before, after); see ``migrations``."""
    engine = new_engine(url)
    try:
        return migrations.upgrade(engine, _shown(url))
    except migrations.NewerSchema as exc:
        raise StoreTooNew(str(exc)) from None
    finally:
        engine.dispose()


def schema_state(url: str) -> migrations.SchemaState:
    """Where the store's schema stands, changing nothing."""
    engine = new_engine(url)
    try:
        return migrations.state(engine)
    finally:
        engine.dispose()


def _shown(url: str) -> str:
    return sa.engine.make_url(url).render_as_string(hide_password=True)


def existing_store(url: str) -> ProjectStore:
    """The store at ``url`` if one is there; ``StoreNotFound`` rather than creating an empty one (readers)."""
    if url not in _engines:
        parsed = sa.engine.make_url(url)
        shown = parsed.render_as_string(hide_password=True)
        if parsed.get_backend_name() == "sqlite":
            if parsed.database not in (None, "", ":memory:") and not Path(parsed.database).is_file():
                raise StoreNotFound(f"no project store at {parsed.database} (the file does not exist)")
        else:
            engine = sa.create_engine(url, connect_args={"connect_timeout": 10}
                                      if parsed.get_backend_name() == "postgresql" else {})
            try:
                with engine.connect() as conn:
                    found = sa.inspect(conn).has_table(candidates.name)
            except (OperationalError, sa.exc.InterfaceError) as exc:
                first = str(exc.orig if getattr(exc, "orig", None) else exc).strip().splitlines()[0]
                raise StoreNotFound(f"cannot connect to the project store at {shown}: {first}") from None
            finally:
                engine.dispose()
            if not found:
                raise StoreNotFound(f"no project store in {shown} (the database has no scrape_contracts tables)")
    return ProjectStore(url)


def _enable_wal(dbapi_conn: Any) -> None:
    # Switching a new file to WAL needs an exclusive lock, and when that would deadlock with another
    # connection (say one creating the tables) SQLite answers "database is locked" at once, without the busy
    # timeout: processes opening a fresh store together failed now and then. Retrying takes turns; the mode
    # is stored in the file, so once one connection has switched this is a plain read for the others.
    deadline = time.monotonic() + 60
    while True:
        try:
            dbapi_conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class ProjectStore:
    def __init__(self, url: str) -> None:
        self.url = url
        self.engine = _engine_for(url)

    @contextmanager
    def _tx(self) -> Iterator[Connection]:
        with self.engine.begin() as conn:
            yield conn

    @staticmethod
    def _lock_partition(conn: Connection, contract: str, partition: str) -> None:
        """Row lock on the partition's state: concurrent accept/quarantine/review of one partition queue."""
        _ensure_state(conn, contract, partition)
        if conn.dialect.name == "postgresql":
            conn.execute(
                sa.select(partition_state.c.contract)
                .where(partition_state.c.contract == contract, partition_state.c.partition == partition)
                .with_for_update()
            )

    # ---- candidates -------------------------------------------------------------------------------
    def add_candidate(self, *, contract: str, partition: str, run_id: str, url: str, record: dict[str, Any],
                      outcome: Outcome, details: dict[str, Any], page_sha256: str | None,
                      selector_version: int | None) -> Candidate:
        with self._tx() as conn:
            row = conn.execute(
                candidates.insert().values(
                    contract=contract, partition=partition, run_id=run_id, url=url, record=record,
                    outcome=outcome, status=CandidateStatus.PENDING, details=details, page_sha256=page_sha256,
                    selector_version=selector_version, created_at=_now(),
                ).returning(*candidates.c)
            ).one()
        return _candidate(row)

    def candidate(self, candidate_id: int) -> Candidate | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(candidates).where(candidates.c.id == candidate_id)).first()
        return _candidate(row) if row else None

    def latest_candidate(self, contract: str, partition: str, run_id: str | None = None) -> Candidate | None:
        query = sa.select(candidates).where(candidates.c.contract == contract, candidates.c.partition == partition)
        if run_id is not None:
            query = query.where(candidates.c.run_id == run_id)
        with self.engine.connect() as conn:
            row = conn.execute(query.order_by(candidates.c.id.desc()).limit(1)).first()
        return _candidate(row) if row else None

    def candidates_of_run(self, run_id: str) -> list[Candidate]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(candidates).where(candidates.c.run_id == run_id)
                                .order_by(candidates.c.id)).all()
        return [_candidate(r) for r in rows]

    def set_candidate_status(self, candidate_id: int, status: CandidateStatus) -> None:
        with self._tx() as conn:
            conn.execute(candidates.update().where(candidates.c.id == candidate_id).values(status=status))

    def quarantine(self, candidate_id: int, reason: str) -> Candidate:
        """Hold a candidate for review and pause its partition; older pending reviews are superseded.

        When two runs of a partition overlap, this one's quarantine can land after a newer candidate was
        accepted or quarantined: then this candidate is superseded on arrival and nothing is paused for it.
        """
        with self._tx() as conn:
            self._quarantine(conn, candidate_id, reason)
        return self.candidate(candidate_id)  # type: ignore[return-value]

    def _quarantine(self, conn: Connection, candidate_id: int, reason: str) -> CandidateStatus:
        cand = _candidate(conn.execute(sa.select(candidates).where(candidates.c.id == candidate_id)).one())
        self._lock_partition(conn, cand.contract, cand.partition)
        newer = conn.execute(
            sa.select(sa.func.count()).select_from(candidates)
            .where(candidates.c.contract == cand.contract, candidates.c.partition == cand.partition,
                   candidates.c.id > candidate_id,
                   candidates.c.status.in_((CandidateStatus.ACCEPTED, CandidateStatus.QUARANTINED)))
        ).scalar()
        if newer:
            # reviewing it could only make older data the newest accepted version (decide refuses that)
            _set_status(conn, candidate_id, CandidateStatus.SUPERSEDED)
            return CandidateStatus.SUPERSEDED
        conn.execute(
            candidates.update()
            .where(candidates.c.contract == cand.contract, candidates.c.partition == cand.partition,
                   candidates.c.status == CandidateStatus.QUARANTINED, candidates.c.id < candidate_id)
            .values(status=CandidateStatus.SUPERSEDED)
        )
        _set_status(conn, candidate_id, CandidateStatus.QUARANTINED)
        _update_state(conn, cand.contract, cand.partition, paused=True, pause_reason=f"{REVIEW_PAUSE}: {reason}")
        _outbox.write(conn, OutboxKind.QUARANTINED, [(cand.contract, cand.partition, candidate_id, {
            "candidate_id": candidate_id, "reason": reason, "run_id": cand.run_id})])
        return CandidateStatus.QUARANTINED

    def record_candidates(self, items: Sequence[NewCandidate]) -> list[RecordedCandidate]:
        """Store candidates and apply each one's action, all in one transaction.

        The batch path records a chunk of targets at once: a crash leaves either all of them or none, and a
        re-run finds the accepted ones unchanged, so nothing is accepted twice. Statements are per chunk,
        not per target (a per-target accept is ten statements; at thousands of targets that was most of a
        batch's time on SQLite and a round trip each on PostgreSQL).
        """
        if not items:
            return []
        now = _now()
        with self._tx() as conn:
            self._lock_partitions(conn, {(i.contract, i.partition) for i in items})
            next_version = self._next_versions(conn, [i for i in items if i.action == CandidateAction.ACCEPT])
            # compare-and-swap: an accept diffed against a version that is no longer the newest is not
            # recorded here; the caller decides again against the newest (see accept)
            newest = {key: version - 1 for key, version in next_version.items()}
            stale, accepting = set(), set()
            for n, item in enumerate(items):
                if item.action != CandidateAction.ACCEPT:
                    continue
                key = (item.contract, item.partition)
                # a second accept of one partition in a chunk was compared with the same old version too
                if key in accepting or newest[key] != (item.compared_with or 0):
                    stale.add(n)
                accepting.add(key)
            fresh = [i for n, i in enumerate(items) if n not in stale]
            recorded = self._record_fresh(conn, fresh, next_version, now) if fresh else []
        done = iter(recorded)
        return [RecordedCandidate(0, None, newest[(i.contract, i.partition)], stale=True) if n in stale
                else next(done)
                for n, i in enumerate(items)]

    def _record_fresh(self, conn: Connection, items: Sequence[NewCandidate],
                      next_version: dict[tuple[str, str], int], now: dt.datetime) -> list[RecordedCandidate]:
        rows = conn.execute(candidates.insert().returning(candidates.c.id, sort_by_parameter_order=True), [{
            "contract": i.contract, "partition": i.partition, "run_id": i.run_id, "url": i.url,
            "record": i.record, "outcome": i.outcome,
            "status": _STATUS_OF.get(i.action, CandidateStatus.PENDING),
            "details": i.details, "page_sha256": i.page_sha256, "selector_version": i.selector_version,
            "created_at": now} for i in items]).all()
        ids = [row.id for row in rows]
        accepted_now = [(cid, i) for cid, i in zip(ids, items, strict=True)
                        if i.action == CandidateAction.ACCEPT]
        versions: dict[int, int] = {}
        for cid, item in accepted_now:
            versions[cid] = next_version[(item.contract, item.partition)]
            next_version[(item.contract, item.partition)] += 1
        if accepted_now:
            conn.execute(accepted.insert(), [{
                "contract": i.contract, "partition": i.partition, "version": versions[cid], "record": i.record,
                "url": i.url, "candidate_id": cid, "run_id": i.run_id, "page_sha256": i.page_sha256,
                "source": AcceptSource.SCRAPE, "reviewer": None, "reason": None, "created_at": now}
                for cid, i in accepted_now])
            _outbox.write(conn, OutboxKind.ACCEPTED, [
                (i.contract, i.partition, versions[cid], {"candidate_id": cid, "previous_version": versions[cid] - 1
                                                          or None, "source": AcceptSource.SCRAPE.value,
                                                          "run_id": i.run_id})
                for cid, i in accepted_now])
            self._supersede_reviews(conn, [i for _, i in accepted_now])
            conn.execute(_state_update(("heal_attempts", "last_page_sha256", "etag", "last_modified")), [{
                "c": i.contract, "p": i.partition, "heal_attempts": 0, "last_page_sha256": i.page_sha256,
                "etag": (i.validators or {}).get("etag"), "last_modified": (i.validators or {}).get("last_modified"),
                "updated_at": now} for _, i in accepted_now])
        retagged = [i for i in items if i.action == CandidateAction.UNCHANGED and i.validators]
        if retagged:
            # same data under new validators (a re-tagged page): remember them, so the next run gets a 304
            conn.execute(_state_update(("etag", "last_modified")), [{
                "c": i.contract, "p": i.partition, "etag": i.validators.get("etag"),
                "last_modified": i.validators.get("last_modified"), "updated_at": now} for i in retagged])
        _count_streaks(conn, failed=[(i.contract, i.partition, i.reason or "rejected") for i in items
                                     if i.action == CandidateAction.REJECT],
                       succeeded=[(i.contract, i.partition) for i in items
                                  if i.action in (CandidateAction.ACCEPT, CandidateAction.UNCHANGED)])
        recorded = []
        for cid, item in zip(ids, items, strict=True):
            if item.action == CandidateAction.QUARANTINE:
                recorded.append(RecordedCandidate(cid, self._quarantine(conn, cid, item.reason or "review")))
            else:
                recorded.append(RecordedCandidate(cid, _STATUS_OF.get(item.action, CandidateStatus.PENDING),
                                                  versions.get(cid)))
        return recorded

    def _lock_partitions(self, conn: Connection, keys: set[tuple[str, str]]) -> None:
        """Partition states exist for every key and, on PostgreSQL, are row-locked (in one order, no deadlock)."""
        insert = (sa.dialects.postgresql.insert if conn.dialect.name == "postgresql" else sa.dialects.sqlite.insert)
        conn.execute(insert(partition_state).on_conflict_do_nothing(), [
            {"contract": c, "partition": p, "paused": False, "heal_attempts": 0, "updated_at": _now()}
            for c, p in sorted(keys)])
        if conn.dialect.name == "postgresql":
            for contract in sorted({c for c, _ in keys}):
                conn.execute(sa.select(partition_state.c.partition).where(
                    partition_state.c.contract == contract,
                    partition_state.c.partition.in_(sorted(p for c, p in keys if c == contract)),
                ).order_by(partition_state.c.partition).with_for_update())

    @staticmethod
    def _next_versions(conn: Connection, items: Sequence[NewCandidate]) -> dict[tuple[str, str], int]:
        """(contract, partition) → the version its next accepted record gets (read under the partition locks)."""
        found: dict[tuple[str, str], int] = {}
        for contract in {i.contract for i in items}:
            parts = sorted({i.partition for i in items if i.contract == contract})
            rows = conn.execute(sa.select(accepted.c.partition, sa.func.max(accepted.c.version)).where(
                accepted.c.contract == contract, accepted.c.partition.in_(parts)).group_by(accepted.c.partition))
            newest = dict(rows.all())
            found.update({(contract, p): (newest.get(p) or 0) + 1 for p in parts})
        return found

    def _supersede_reviews(self, conn: Connection, items: Sequence[NewCandidate]) -> None:
        """Reviews still waiting on a partition whose new data was just accepted are moot (see ``_accept``)."""
        for contract in {i.contract for i in items}:
            parts = sorted({i.partition for i in items if i.contract == contract})
            waiting = set(conn.execute(sa.select(candidates.c.partition).distinct().where(
                candidates.c.contract == contract, candidates.c.partition.in_(parts),
                candidates.c.status == CandidateStatus.QUARANTINED)).scalars())
            if not waiting:
                continue
            conn.execute(candidates.update().where(
                candidates.c.contract == contract, candidates.c.partition.in_(sorted(waiting)),
                candidates.c.status == CandidateStatus.QUARANTINED).values(status=CandidateStatus.SUPERSEDED))
            for partition in sorted(waiting):
                _release_review_pause(conn, contract, partition)

    def failed_checks(self, contract: str, partitions: Sequence[str]) -> dict[str, set[str]]:
        """partition → the checks its latest candidate failed (so a batch can record that they pass now)."""
        newest = (sa.select(sa.func.max(candidates.c.id).label("id"))
                  .where(candidates.c.contract == contract, candidates.c.partition.in_(list(partitions)))
                  .group_by(candidates.c.partition).subquery())
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(candidates.c.partition, candidates.c.details)
                                .join(newest, candidates.c.id == newest.c.id)).all()
        failed = {}
        for row in rows:
            checks = {v["check"] for v in (row.details or {}).get("violations", [])}
            if checks:
                failed[row.partition] = checks
        return failed

    def quarantined(self, after_id: int = 0, limit: int = 100) -> list[Candidate]:
        """Candidates quarantined (and still waiting) with id > after_id, oldest first: the review cursor."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(candidates)
                .where(candidates.c.status == CandidateStatus.QUARANTINED, candidates.c.id > after_id)
                .order_by(candidates.c.id).limit(limit)
            ).all()
        return [_candidate(r) for r in rows]

    def pending_review(self, contract: str, partition: str) -> Candidate | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(candidates)
                .where(candidates.c.contract == contract, candidates.c.partition == partition,
                       candidates.c.status == CandidateStatus.QUARANTINED)
                .order_by(candidates.c.id.desc()).limit(1)
            ).first()
        return _candidate(row) if row else None

    # ---- accepted versions ------------------------------------------------------------------------
    def accept(self, candidate_id: int, *, run_id: str, source: AcceptSource = AcceptSource.SCRAPE,
               reviewer: str | None = None, reason: str | None = None,
               allowed_status: Sequence[CandidateStatus] = (CandidateStatus.PENDING,),
               compared_with: int | None | type(...) = ...) -> AcceptedVersion:
        """Make a candidate the newest accepted version of its partition, exactly once.

        ``compared_with``: the accepted version the candidate was diffed against (None: there was none).
        When another version was accepted since, StaleCandidate is raised and nothing changes: the caller
        diffs against the newest and decides again (two overlapping runs never both pass the change limit
        against the same old version).
        """
        with self._tx() as conn:
            return self._accept(conn, candidate_id, run_id=run_id, source=source, reviewer=reviewer,
                                reason=reason, allowed_status=allowed_status, compared_with=compared_with)

    def _accept(self, conn: Connection, candidate_id: int, *, run_id: str, source: AcceptSource,
                reviewer: str | None, reason: str | None, allowed_status: Sequence[CandidateStatus],
                compared_with: int | None | type(...) = ...) -> AcceptedVersion:
        row = conn.execute(sa.select(candidates).where(candidates.c.id == candidate_id)).first()
        if row is None:
            raise StoreError(f"candidate {candidate_id} does not exist")
        cand = _candidate(row)
        self._lock_partition(conn, cand.contract, cand.partition)
        # re-read under the lock: a racing run may have accepted it meanwhile
        status = conn.execute(sa.select(candidates.c.status).where(candidates.c.id == candidate_id)).scalar_one()
        if status == CandidateStatus.ACCEPTED:
            raise AlreadyAccepted(f"candidate {candidate_id} of {cand.contract}/{cand.partition} is already accepted")
        if status not in allowed_status:
            raise StoreError(f"candidate {candidate_id} of {cand.contract}/{cand.partition} is {status}, "
                             f"not {' or '.join(allowed_status)}")
        newest = conn.execute(
            sa.select(sa.func.max(accepted.c.version))
            .where(accepted.c.contract == cand.contract, accepted.c.partition == cand.partition)
        ).scalar() or 0
        if compared_with is not ... and newest != (compared_with or 0):
            raise StaleCandidate(f"candidate {candidate_id} of {cand.contract}/{cand.partition} was compared with "
                                 f"version {compared_with or 0}, but version {newest} is the newest now", newest)
        version = newest + 1
        try:
            conn.execute(accepted.insert().values(
                contract=cand.contract, partition=cand.partition, version=version, record=cand.record,
                url=cand.url, candidate_id=cand.id, run_id=run_id, page_sha256=cand.page_sha256,
                source=source, reviewer=reviewer, reason=reason, created_at=_now(),
            ))
        except IntegrityError as exc:
            raise AlreadyAccepted(f"candidate {candidate_id} raced with another accept: {exc.orig}") from None
        _set_status(conn, candidate_id, CandidateStatus.ACCEPTED)
        _count_streaks(conn, failed=[], succeeded=[(cand.contract, cand.partition)])
        _outbox.write(conn, OutboxKind.ACCEPTED, [(cand.contract, cand.partition, version, {
            "candidate_id": cand.id, "previous_version": newest or None, "source": AcceptSource(source).value,
            "reviewer": reviewer, "reason": reason, "run_id": run_id})])
        # anything still waiting for review on this partition is now older than the accepted data
        superseded = conn.execute(
            candidates.update()
            .where(candidates.c.contract == cand.contract, candidates.c.partition == cand.partition,
                   candidates.c.status == CandidateStatus.QUARANTINED, candidates.c.id < candidate_id)
            .values(status=CandidateStatus.SUPERSEDED)
        ).rowcount
        if superseded:
            # a run that overlapped a quarantine (or was launched by hand) made the review moot; a target
            # left paused with nothing to review would be skipped by its schedule until someone noticed
            _release_review_pause(conn, cand.contract, cand.partition)
        validators = (cand.details or {}).get("validators") or {}
        _update_state(conn, cand.contract, cand.partition, heal_attempts=0, last_page_sha256=cand.page_sha256,
                      etag=validators.get("etag"), last_modified=validators.get("last_modified"))
        return AcceptedVersion(cand.contract, cand.partition, version, cand.record, cand.url, cand.id, run_id,
                               cand.page_sha256, source, reviewer, reason, _now())

    def last_pages(self, contract: str, partitions: Sequence[str]) -> dict[str, str]:
        """partition → sha256 of the page its newest candidate was extracted from (what re-extraction reads)."""
        newest = (sa.select(sa.func.max(candidates.c.id).label("id"))
                  .where(candidates.c.contract == contract, candidates.c.partition.in_(list(partitions)),
                         candidates.c.page_sha256.is_not(None))
                  .group_by(candidates.c.partition).subquery())
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(candidates.c.partition, candidates.c.page_sha256)
                                .join(newest, candidates.c.id == newest.c.id)).all()
        return {r.partition: r.page_sha256 for r in rows}

    def accepted_basis(self, contract: str, partitions: Sequence[str]) -> dict[str, tuple[int | None, str | None]]:
        """partition → (selector version, contract fingerprint) its newest accepted record was extracted under."""
        newest = (sa.select(accepted.c.partition, sa.func.max(accepted.c.version).label("version"))
                  .where(accepted.c.contract == contract, accepted.c.partition.in_(list(partitions)))
                  .group_by(accepted.c.partition).subquery())
        query = (sa.select(accepted.c.partition, candidates.c.selector_version, candidates.c.details)
                 .join(newest, sa.and_(accepted.c.partition == newest.c.partition,
                                       accepted.c.version == newest.c.version))
                 .join(candidates, candidates.c.id == accepted.c.candidate_id)
                 .where(accepted.c.contract == contract))
        with self.engine.connect() as conn:
            rows = conn.execute(query).all()
        return {r.partition: (r.selector_version, (r.details or {}).get("contract_fingerprint")) for r in rows}

    def latest_accepted(self, contract: str, partition: str) -> AcceptedVersion | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(accepted)
                .where(accepted.c.contract == contract, accepted.c.partition == partition)
                .order_by(accepted.c.version.desc()).limit(1)
            ).first()
        return _accepted(row) if row else None

    def accepted_history(self, contract: str, partition: str) -> list[AcceptedVersion]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                sa.select(accepted)
                .where(accepted.c.contract == contract, accepted.c.partition == partition)
                .order_by(accepted.c.version)
            ).all()
        return [_accepted(r) for r in rows]

    def accepted_versions(self, contract: str, partition: str, versions: Sequence[int]) -> dict[int, AcceptedVersion]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(accepted).where(
                accepted.c.contract == contract, accepted.c.partition == partition,
                accepted.c.version.in_(list(versions)))).all()
        return {r.version: _accepted(r) for r in rows}

    def latest_accepted_all(self, contract: str, partitions: Sequence[str] | None = None) -> list[AcceptedVersion]:
        newest = (
            sa.select(accepted.c.partition, sa.func.max(accepted.c.version).label("version"))
            .where(accepted.c.contract == contract)
            .group_by(accepted.c.partition)
            .subquery()
        )
        query = sa.select(accepted).join(
            newest, sa.and_(accepted.c.partition == newest.c.partition, accepted.c.version == newest.c.version)
        ).where(accepted.c.contract == contract)
        if partitions is not None:
            query = query.where(accepted.c.partition.in_(list(partitions)))
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(accepted.c.partition)).all()
        return [_accepted(r) for r in rows]

    # ---- reviews ----------------------------------------------------------------------------------
    def decide(self, contract: str, partition: str, decision: Decision | str, *, reviewer: str, reason: str,
               run_id: str | None = None, candidate_id: int | None = None) -> Review:
        """Accept or reject the quarantined candidate of a partition, recording who and why."""
        if decision not in tuple(Decision):
            raise StoreError(f"decision must be 'accept' or 'reject', not {decision!r}")
        decision = Decision(decision)
        if not reviewer.strip() or not reason.strip():
            raise StoreError("a review needs a reviewer and a reason")
        with self._tx() as conn:
            self._lock_partition(conn, contract, partition)
            query = sa.select(candidates).where(candidates.c.contract == contract,
                                                candidates.c.partition == partition)
            if candidate_id is not None:
                row = conn.execute(query.where(candidates.c.id == candidate_id)).first()
                if row is None:
                    raise NothingToReview(f"{contract}/{partition} has no candidate {candidate_id}")
                cand = _candidate(row)
                if cand.status in (CandidateStatus.SUPERSEDED, CandidateStatus.ACCEPTED,
                                   CandidateStatus.REJECTED):
                    raise Superseded(
                        f"candidate {candidate_id} of {contract}/{partition} is {cand.status}: "
                        "a newer candidate or decision replaced it; review the current one instead"
                    )
            else:
                row = conn.execute(query.where(candidates.c.status == CandidateStatus.QUARANTINED)
                                   .order_by(candidates.c.id.desc()).limit(1)).first()
                if row is None:
                    raise NothingToReview(f"{contract}/{partition} has nothing quarantined to review")
                cand = _candidate(row)
            if cand.status != CandidateStatus.QUARANTINED:
                raise NothingToReview(f"candidate {cand.id} of {contract}/{partition} is {cand.status}, "
                                      "not quarantined")
            newer = conn.execute(
                sa.select(sa.func.count()).select_from(accepted)
                .join(candidates, accepted.c.candidate_id == candidates.c.id)
                .where(accepted.c.contract == contract, accepted.c.partition == partition,
                       candidates.c.id > cand.id)
            ).scalar()
            version: int | None = None
            stale: Superseded | None = None
            if newer:
                # recorded before refusing (raising in here would roll it back, leaving the candidate waiting
                # and the target paused for a review nobody can make)
                _set_status(conn, cand.id, CandidateStatus.SUPERSEDED)
                _release_review_pause(conn, contract, partition)
                stale = Superseded(f"candidate {cand.id} of {contract}/{partition} was superseded by newer "
                                   "accepted data; nothing to decide")
            else:
                version = self._decide(conn, cand, decision, reviewer=reviewer, reason=reason, run_id=run_id)
        if stale is not None:
            raise stale
        return Review(contract, partition, cand.id, decision, reviewer, reason, run_id, version)

    def _decide(self, conn: Connection, cand: Candidate, decision: Decision, *, reviewer: str, reason: str,
                run_id: str | None) -> int | None:
        """Record the decision on a quarantined candidate; the accepted version when it was accepted."""
        contract, partition = cand.contract, cand.partition
        version = None
        if decision == Decision.ACCEPT:
            version = self._accept(conn, cand.id, run_id=run_id or "", source=AcceptSource.REVIEW,
                                   reviewer=reviewer, reason=reason,
                                   allowed_status=(CandidateStatus.QUARANTINED,)).version
        else:
            _set_status(conn, cand.id, CandidateStatus.REJECTED)
            _outbox.write(conn, OutboxKind.REJECTED_BY_REVIEW, [(contract, partition, cand.id, {
                "candidate_id": cand.id, "reviewer": reviewer, "reason": reason, "run_id": run_id})])
        conn.execute(reviews.insert().values(
            contract=contract, partition=partition, candidate_id=cand.id, decision=decision,
            reviewer=reviewer, reason=reason, run_id=run_id, created_at=_now(),
        ))
        _update_state(conn, contract, partition, paused=False, pause_reason=None, heal_attempts=0)
        return version

    # ---- selector versions ------------------------------------------------------------------------
    def current_selectors(self, contract: str, contract_selectors: dict[str, str]) -> SelectorVersion:
        """The selector set in force; version 1 is the YAML. An edited YAML starts a new line of versions.

        A healed selector outlives a contract edit only when the contract's selector of its field did not
        change: the user who rewrites a selector means that one, the fields they left alone keep their heal.
        """
        for _ in range(5):
            latest = self._latest_selectors(contract)
            if latest is not None and latest.contract_selectors == contract_selectors:
                return latest
            selectors, changes = carried_over(latest, contract_selectors)
            try:
                return self.add_selector_version(
                    contract, parent_version=latest.version if latest else None,
                    selectors=selectors, contract_selectors=dict(contract_selectors),
                    source=SelectorSource.CONTRACT, changes=changes,
                )
            except SelectorConflict:
                continue
        raise SelectorConflict(f"could not register the selectors of contract {contract!r}: too much contention")

    def _latest_selectors(self, contract: str) -> SelectorVersion | None:
        with self.engine.connect() as conn:
            row = conn.execute(
                sa.select(selector_versions).where(selector_versions.c.contract == contract)
                .order_by(selector_versions.c.version.desc()).limit(1)
            ).first()
        return _selector_version(row) if row else None

    def add_selector_version(self, contract: str, *, parent_version: int | None, selectors: dict[str, str],
                             contract_selectors: dict[str, str], source: SelectorSource,
                             changes: dict[str, Any],
                             run_id: str | None = None, partition: str | None = None) -> SelectorVersion:
        """Compare-and-swap: succeeds only if ``parent_version`` is still the newest version."""
        version = (parent_version or 0) + 1
        try:
            with self._tx() as conn:
                newest = conn.execute(
                    sa.select(sa.func.max(selector_versions.c.version))
                    .where(selector_versions.c.contract == contract)
                ).scalar()
                if newest != parent_version:
                    raise SelectorConflict(
                        f"selectors of {contract!r} moved from version {parent_version} to {newest} meanwhile"
                    )
                conn.execute(selector_versions.insert().values(
                    contract=contract, version=version, parent_version=parent_version, selectors=selectors,
                    contract_selectors=contract_selectors, source=source, run_id=run_id, partition=partition,
                    changes=changes, created_at=_now(),
                ))
                if source == SelectorSource.HEAL:
                    _outbox.write(conn, OutboxKind.HEALED, [(contract, partition or "", version, {
                        "changes": changes, "run_id": run_id})])
        except IntegrityError:
            raise SelectorConflict(f"selector version {version} of {contract!r} was written by another run") from None
        return self.selector_version(contract, version)  # type: ignore[return-value]

    def selector_version(self, contract: str, version: int) -> SelectorVersion | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(selector_versions).where(
                selector_versions.c.contract == contract, selector_versions.c.version == version)).first()
        return _selector_version(row) if row else None

    def selector_history(self, contract: str) -> list[SelectorVersion]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(selector_versions).where(selector_versions.c.contract == contract)
                                .order_by(selector_versions.c.version)).all()
        return [_selector_version(r) for r in rows]

    # ---- partition state --------------------------------------------------------------------------
    def state(self, contract: str, partition: str) -> PartitionState:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(partition_state).where(
                partition_state.c.contract == contract, partition_state.c.partition == partition)).first()
        if row is None:
            return PartitionState(contract, partition)
        return _state(row)

    def states(self, contract: str) -> dict[str, PartitionState]:
        """Every partition state of a contract in one read (the batch path reads them once per run)."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(partition_state).where(partition_state.c.contract == contract)).all()
        return {r.partition: _state(r) for r in rows}

    def paused_partitions(self, contract: str) -> dict[str, str]:
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(partition_state.c.partition, partition_state.c.pause_reason).where(
                partition_state.c.contract == contract, partition_state.c.paused.is_(True))).all()
        return {r.partition: r.pause_reason or "paused" for r in rows}

    def update_state(self, contract: str, partition: str, **values: Any) -> PartitionState:
        with self._tx() as conn:
            _ensure_state(conn, contract, partition)
            _update_state(conn, contract, partition, **values)
        return self.state(contract, partition)

    def add_heal_attempt(self, contract: str, partition: str) -> int:
        with self._tx() as conn:
            self._lock_partition(conn, contract, partition)
            conn.execute(partition_state.update().where(
                partition_state.c.contract == contract, partition_state.c.partition == partition
            ).values(heal_attempts=partition_state.c.heal_attempts + 1, updated_at=_now()))
            return conn.execute(sa.select(partition_state.c.heal_attempts).where(
                partition_state.c.contract == contract, partition_state.c.partition == partition)).scalar_one()

    def pause(self, contract: str, partition: str, reason: str, *, cause: str = "person") -> PartitionState:
        """Pause a target (its schedule and batches skip it) and tell the outbox, in one transaction.

        ``cause``: "person" (scrape-contracts pause, the UI's job) or "budget_exhausted" (the healer)."""
        with self._tx() as conn:
            self._lock_partition(conn, contract, partition)
            _update_state(conn, contract, partition, paused=True, pause_reason=reason)
            number = _outbox.next_pause_number(conn, contract, partition)
            _outbox.write(conn, OutboxKind.PAUSED, [(contract, partition, number, {"reason": reason,
                                                                                  "cause": cause})])
        return self.state(contract, partition)

    def record_failures(self, contract: str, failures: Sequence[tuple[str, str]]) -> None:
        """Scrapes that failed before a candidate existed (the fetch): each lengthens its target's streak."""
        if not failures:
            return
        with self._tx() as conn:
            self._lock_partitions(conn, {(contract, p) for p, _ in failures})
            _count_streaks(conn, failed=[(contract, p, reason) for p, reason in failures], succeeded=[])

    def outbox(self) -> _outbox.Outbox:
        return _outbox.Outbox(self.engine)

    def resume(self, contract: str, partition: str) -> PartitionState:
        return self.update_state(contract, partition, paused=False, pause_reason=None, heal_attempts=0)

    # ---- dynamic targets --------------------------------------------------------------------------
    def add_targets(self, contract: str, urls_by_key: dict[str, str]) -> list[str]:
        """Record key → URL for dynamic targets; returns the keys that were new."""
        added = []
        with self._tx() as conn:
            existing = set(conn.execute(sa.select(targets.c.partition).where(targets.c.contract == contract))
                           .scalars())
            for key, url in urls_by_key.items():
                if key not in existing:
                    conn.execute(targets.insert().values(contract=contract, partition=key, url=url,
                                                         created_at=_now()))
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


def _ensure_state(conn: Connection, contract: str, partition: str) -> None:
    exists = conn.execute(sa.select(partition_state.c.contract).where(
        partition_state.c.contract == contract, partition_state.c.partition == partition)).first()
    if exists is None:
        try:
            with conn.begin_nested():
                conn.execute(partition_state.insert().values(
                    contract=contract, partition=partition, paused=False, heal_attempts=0, updated_at=_now()))
        except IntegrityError:
            pass  # another transaction created it first


def _set_status(conn: Connection, candidate_id: int, status: CandidateStatus) -> None:
    conn.execute(candidates.update().where(candidates.c.id == candidate_id).values(status=status))


def _release_review_pause(conn: Connection, contract: str, partition: str) -> None:
    """Resume a target paused for review once no candidate of it waits for review (other pauses stay)."""
    waiting = conn.execute(sa.select(sa.func.count()).select_from(candidates).where(
        candidates.c.contract == contract, candidates.c.partition == partition,
        candidates.c.status == CandidateStatus.QUARANTINED)).scalar()
    if not waiting:
        conn.execute(partition_state.update().where(
            partition_state.c.contract == contract, partition_state.c.partition == partition,
            partition_state.c.paused.is_(True), partition_state.c.pause_reason.like(f"{REVIEW_PAUSE}%"),
        ).values(paused=False, pause_reason=None, updated_at=_now()))


def _state_update(columns: Sequence[str]) -> Any:
    """UPDATE of some columns of one partition state, for executemany with c, p and the columns as params."""
    return partition_state.update().where(
        partition_state.c.contract == sa.bindparam("c"), partition_state.c.partition == sa.bindparam("p"),
    ).values({name: sa.bindparam(name) for name in (*columns, "updated_at")})


def _update_state(conn: Connection, contract: str, partition: str, **values: Any) -> None:
    _ensure_state(conn, contract, partition)
    conn.execute(partition_state.update().where(
        partition_state.c.contract == contract, partition_state.c.partition == partition
    ).values(updated_at=_now(), **values))


def _count_streaks(conn: Connection, *, failed: Sequence[tuple[str, str, str]],
                   succeeded: Sequence[tuple[str, str]]) -> None:
    """Failure streaks and their outbox events, in the caller's transaction (partition states exist).

    A failure lengthens its target's streak (event ``failed``, numbered by the target's failures ever); a
    success after failures ends it (event ``recovered``). ``on: failing`` alerts when a streak reaches its
    rule's ``failing_after``, once, and ``recovered`` follows only such a streak (service/activations.py).
    """
    keys = {(c, p) for c, p, _ in failed} | set(succeeded)
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
    for contract, partition in succeeded:
        streak, count = changed.get((contract, partition), current.get((contract, partition), (0, 0)))
        if streak:
            events[OutboxKind.RECOVERED].append((contract, partition, count, {"ended_streak": streak}))
            changed[(contract, partition)] = (0, count)
    for contract, partition, reason in failed:
        streak, count = changed.get((contract, partition), current.get((contract, partition), (0, 0)))
        changed[(contract, partition)] = (streak + 1, count + 1)
        events[OutboxKind.FAILED].append((contract, partition, count + 1, {"streak": streak + 1,
                                                                           "reason": reason[:500]}))
    if succeeded:
        now = _now()
        conn.execute(_state_update(("last_success_at",)), [
            {"c": c, "p": p, "last_success_at": now, "updated_at": now} for c, p in set(succeeded)])
    if changed:
        conn.execute(_state_update(("failure_streak", "failure_count")), [
            {"c": c, "p": p, "failure_streak": streak, "failure_count": count, "updated_at": _now()}
            for (c, p), (streak, count) in changed.items()])
    for kind, items in events.items():
        _outbox.write(conn, kind, items)


def _state(row: Any) -> PartitionState:
    return PartitionState(row.contract, row.partition, bool(row.paused), row.pause_reason, row.heal_attempts,
                          row.etag, row.last_modified, row.last_page_sha256, row.failure_streak,
                          _utc(row.last_success_at))


def _utc(value: dt.datetime | None) -> dt.datetime | None:
    # SQLite gives timestamps back without their zone; they were written in UTC
    return value.replace(tzinfo=dt.timezone.utc) if value is not None and value.tzinfo is None else value


def _candidate(row: Any) -> Candidate:
    return Candidate(row.id, row.contract, row.partition, row.run_id, row.url, row.record, row.outcome,
                     row.status, row.details, row.page_sha256, row.selector_version, row.created_at)


def _accepted(row: Any) -> AcceptedVersion:
    return AcceptedVersion(row.contract, row.partition, row.version, row.record, row.url, row.candidate_id,
                           row.run_id, row.page_sha256, row.source, row.reviewer, row.reason, row.created_at)


def carried_over(latest: SelectorVersion | None, contract_selectors: dict[str, str]
                 ) -> tuple[dict[str, str], dict[str, Any]]:
    """(selectors, changes) of the version an edited contract starts from ``latest``.

    Each field keeps its healed selector when the contract's selector it was healed from is the one in the
    edited YAML, and takes the YAML's otherwise; ``changes`` says which heals were kept and which dropped.
    """
    selectors = dict(contract_selectors)
    changes: dict[str, Any] = {}
    if latest is None:
        return selectors, changes
    for name, own in contract_selectors.items():
        healed = latest.selectors.get(name)
        if healed is None or healed == latest.contract_selectors.get(name):
            continue  # not healed: nothing to keep or drop
        if latest.contract_selectors.get(name) == own:
            selectors[name] = healed
            changes[name] = {"kept": healed, "contract_selector": own}
        else:
            changes[name] = {"dropped": healed, "old_contract_selector": latest.contract_selectors.get(name),
                             "contract_selector": own}
    return selectors, changes


def _selector_version(row: Any) -> SelectorVersion:
    return SelectorVersion(row.contract, row.version, row.parent_version, row.selectors, row.contract_selectors,
                           row.source, row.run_id, row.partition, row.changes, row.created_at)


__all__ = [
    "AcceptSource", "AcceptedVersion", "AlreadyAccepted", "Candidate", "CandidateAction", "CandidateStatus",
    "Decision", "NewCandidate", "NothingToReview", "OperationalError", "PartitionState", "ProjectStore",
    "RecordedCandidate", "Review", "SelectorConflict", "SelectorSource", "SelectorVersion", "StaleCandidate",
    "StoreError", "StoreNotFound", "StoreTooNew", "Superseded", "existing_store", "metadata", "new_engine",
    "schema_state", "upgrade_schema",
]
