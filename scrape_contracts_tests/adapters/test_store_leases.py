"""Target leases and fenced commits in the project store, on a real SQLite file and a real PostgreSQL database.

The clock is the store's own (injected), so leases expire when a test moves it, never by sleeping. A holder
whose lease expired, or was taken over, gets ``LeaseLost`` from every commit for the target, and the refused
transaction leaves nothing behind: no candidate, no accepted version, no selector version, no outbox event,
no change to the target's state.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from scrape_contracts.adapters import store as store_module
from scrape_contracts.adapters.schema import outbox, selector_versions
from scrape_contracts.adapters.store import (
    CandidateAction, CandidateStatus, LeaseLost, NewCandidate, ProjectStore, StaleCandidate, TargetBusy,
    accepted, candidates,
)
from scrape_contracts.adapters.store.leases import check_fence
from scrape_contracts.engine.outcome import Outcome
from scrape_contracts.service.leases import LeaseKeeper, resume, take

CONTRACT = "shop"
MINUTE = dt.timedelta(minutes=1)


class Clock:
    """The stores' now: moved by the test."""

    def __init__(self) -> None:
        self.now = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)

    def __call__(self) -> dt.datetime:
        return self.now

    def advance(self, delta: dt.timedelta) -> None:
        self.now += delta


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    url = request.getfixturevalue("pg_database") if request.param == "postgres" else \
        f"sqlite:///{tmp_path / 'store.db'}"
    yield url
    engine = store_module._engines.pop(url, None)
    if engine is not None:
        engine.dispose()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(url: str, clock: Clock) -> ProjectStore:
    return ProjectStore(url, clock=clock)


def new(partition: str, action: CandidateAction, *, run_id: str, compared_with: int | None = None,
        price: float = 10.0) -> NewCandidate:
    outcome = {CandidateAction.ACCEPT: Outcome.VALID, CandidateAction.PENDING: Outcome.VALID,
               CandidateAction.QUARANTINE: Outcome.REVIEW_REQUIRED, CandidateAction.REJECT: Outcome.REJECTED}[action]
    return NewCandidate(contract=CONTRACT, partition=partition, run_id=run_id, url=f"http://127.0.0.1/{partition}",
                        record={"price": price}, outcome=outcome, details={}, page_sha256=None, selector_version=1,
                        action=action, reason="price jumped" if action == CandidateAction.QUARANTINE else None,
                        compared_with=compared_with)


def snapshot(store: ProjectStore) -> dict[str, Any]:
    """Everything a commit for a target could have written."""
    with store.engine.connect() as conn:
        rows = {
            "candidates": conn.execute(sa.select(candidates.c.id, candidates.c.status).order_by(candidates.c.id)).all(),
            "accepted": conn.execute(sa.select(accepted.c.partition, accepted.c.version, accepted.c.run_id)
                                     .order_by(accepted.c.id)).all(),
            "outbox": conn.execute(sa.select(outbox.c.kind, outbox.c.partition).order_by(outbox.c.id)).all(),
            "selectors": conn.execute(sa.select(selector_versions.c.version)).all(),
        }
    return {**rows, "state": store.state(CONTRACT, "p1")}


def test_a_lease_is_refused_while_live_and_taken_over_once_expired(store: ProjectStore, clock: Clock) -> None:
    a = store.take_lease(CONTRACT, "p1", holder="run-a", duration=MINUTE)
    assert (a.holder, a.token, a.expires_at) == ("run-a", 1, clock.now + MINUTE)

    with pytest.raises(TargetBusy) as busy:
        store.take_lease(CONTRACT, "p1", holder="run-b", duration=MINUTE)
    assert busy.value.held == a  # who holds it, until when
    assert str(busy.value) == ("busy: target shop/p1 is being scraped by run run-a until 2026-03-01 12:01:00 UTC; "
                               "nothing was scraped for it here. It is free again as soon as that run ends, or when "
                               "its lease expires")

    # the holder taking it again (a retried step) keeps its token and gets a later expiry
    clock.advance(dt.timedelta(seconds=30))
    again = store.take_lease(CONTRACT, "p1", holder="run-a", duration=MINUTE)
    assert (again.token, again.expires_at) == (1, clock.now + MINUTE)

    clock.advance(MINUTE)  # expired: anyone takes it, with the next token
    b = store.take_lease(CONTRACT, "p1", holder="run-b", duration=MINUTE)
    assert (b.holder, b.token, b.taken_at) == ("run-b", 2, clock.now)
    assert store.lease(CONTRACT, "p1") == b

    with pytest.raises(LeaseLost) as lost:
        store.renew_lease(a, MINUTE)
    assert str(lost.value) == ("lease lost: run run-b took target shop/p1 over at 2026-03-01 12:01:30 UTC, after "
                               "this run's lease expired; nothing this run found for it was recorded")
    store.release_leases([a])  # a lost lease is another holder's now: releasing it changes nothing
    assert store.lease(CONTRACT, "p1") == b

    renewed = store.renew_lease(b, 2 * MINUTE)
    assert (renewed.token, renewed.expires_at) == (2, clock.now + 2 * MINUTE)
    store.release_leases([renewed])
    released = store.lease(CONTRACT, "p1")
    assert (released.holder, released.token, released.expires_at) == ("run-b", 2, clock.now)
    assert store.take_lease(CONTRACT, "p1", holder="run-c", duration=MINUTE).token == 3  # free at once
    assert store.lease(CONTRACT, "never") is None


def test_a_batch_of_leases_is_taken_in_one_go(store: ProjectStore, clock: Clock) -> None:
    store.take_leases(CONTRACT, ["p2", "p4"], holder="run-a", duration=MINUTE)
    grant = store.take_leases(CONTRACT, [f"p{k}" for k in range(1, 6)], holder="run-b", duration=MINUTE)
    assert sorted((lease.partition, lease.token) for lease in grant.taken) == [("p1", 1), ("p3", 1), ("p5", 1)]
    assert sorted((lease.partition, lease.holder) for lease in grant.refused) == [("p2", "run-a"), ("p4", "run-a")]

    # a live lease is taken over only by naming its token (its holder is known to have ended) ...
    replaced = store.take_leases(CONTRACT, ["p2", "p4"], holder="run-b", duration=MINUTE, replace={"p2": 1, "p4": 7})
    assert [(lease.partition, lease.token) for lease in replaced.taken] == [("p2", 2)]
    assert [lease.partition for lease in replaced.refused] == ["p4"]  # ... and a token that moved on is not it

    # the service's take does that for holders that ended
    got = take(store, CONTRACT, ["p4", "p6"], holder="run-c", duration=MINUTE, ended=lambda holder: holder == "run-a")
    assert sorted((lease.partition, lease.token) for lease in got.taken) == [("p4", 2), ("p6", 1)]
    assert got.refused == ()
    assert take(store, CONTRACT, ["p1"], holder="run-c", duration=MINUTE, ended=lambda _: False).refused[0].holder \
        == "run-b"


def test_many_takers_of_one_target_at_once_one_wins(store: ProjectStore, url: str, clock: Clock) -> None:
    takers = 6
    barrier = threading.Barrier(takers)
    results: list[Any] = [None] * takers

    def taker(n: int) -> None:
        mine = ProjectStore(url, clock=clock)
        barrier.wait(30)
        try:
            results[n] = mine.take_leases(CONTRACT, ["new-1", "new-2"], holder=f"run-{n}", duration=MINUTE)
        except Exception as exc:  # noqa: BLE001 (reported below)
            results[n] = exc

    threads = [threading.Thread(target=taker, args=(n,)) for n in range(takers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not [r for r in results if isinstance(r, Exception)], results
    for partition in ("new-1", "new-2"):
        winners = [r for r in results if any(lease.partition == partition for lease in r.taken)]
        assert len(winners) == 1, partition
        assert store.lease(CONTRACT, partition).token == 1


def test_a_stale_holders_commits_are_refused_and_write_nothing(store: ProjectStore, clock: Clock) -> None:
    a = store.take_lease(CONTRACT, "p1", holder="run-a", duration=MINUTE)
    stale = store.fenced([a])
    # run A stored a candidate while it held the lease, then stalled past it; run B took the target over
    (pending,) = stale.record_candidates([new("p1", CandidateAction.PENDING, run_id="run-a")])
    clock.advance(2 * MINUTE)
    b = store.take_lease(CONTRACT, "p1", holder="run-b", duration=MINUTE)
    fresh = store.fenced([b])
    before = snapshot(store)

    refused = [
        lambda: stale.record_candidates([new("p1", CandidateAction.ACCEPT, run_id="run-a")]),
        lambda: stale.record_candidates([new("p1", CandidateAction.QUARANTINE, run_id="run-a")]),
        lambda: stale.record_candidates([new("p1", CandidateAction.REJECT, run_id="run-a")]),
        lambda: stale.accept(pending.candidate_id, run_id="run-a"),
        lambda: stale.quarantine(pending.candidate_id, "price jumped"),
        lambda: stale.set_candidate_status(pending.candidate_id, CandidateStatus.UNCHANGED),
        lambda: stale.add_selector_version(CONTRACT, parent_version=None, selectors={"price": "#new"},
                                           contract_selectors={"price": "#price"}, source="heal",
                                           changes={"price": {"new": "#new"}}, run_id="run-a", partition="p1"),
        lambda: stale.add_heal_attempt(CONTRACT, "p1"),
        lambda: stale.pause(CONTRACT, "p1", "healing budget exhausted", cause="budget_exhausted"),
        lambda: stale.record_failures(CONTRACT, [("p1", "timed out")]),
        lambda: stale.update_state(CONTRACT, "p1", etag='"stale"'),
    ]
    for n, commit in enumerate(refused):
        with pytest.raises(LeaseLost) as lost:
            commit()
        assert lost.value.keys == {(CONTRACT, "p1")}, n
        assert "lease lost: run run-b took target shop/p1 over" in str(lost.value), n
        assert snapshot(store) == before, n  # the refused transaction wrote nothing

    # the new holder commits; the stale candidate is never accepted, nothing is accepted twice
    (row,) = fresh.record_candidates([new("p1", CandidateAction.ACCEPT, run_id="run-b", price=12.0)])
    assert row.status == CandidateStatus.ACCEPTED
    with pytest.raises(LeaseLost):
        stale.accept(pending.candidate_id, run_id="run-a")
    history = store.accepted_history(CONTRACT, "p1")
    assert [(v.version, v.run_id, v.record) for v in history] == [(1, "run-b", {"price": 12.0})]
    assert store.candidate(pending.candidate_id).status == CandidateStatus.PENDING


def test_an_expired_lease_nobody_took_still_refuses_its_commit(store: ProjectStore, clock: Clock) -> None:
    a = store.take_lease(CONTRACT, "p1", holder="run-a", duration=MINUTE)
    clock.advance(MINUTE)  # exactly at the expiry: no longer live
    before = snapshot(store)
    with pytest.raises(LeaseLost) as lost:
        store.fenced([a]).record_candidates([new("p1", CandidateAction.ACCEPT, run_id="run-a")])
    assert str(lost.value).startswith("lease lost: this run's lease on target shop/p1 expired at 2026-03-01 "
                                      "12:01:00 UTC")
    assert snapshot(store) == before
    with pytest.raises(LeaseLost):
        resume(store, CONTRACT, "p1", holder="run-a", duration=MINUTE)


def test_a_fenced_store_commits_only_for_its_own_targets(store: ProjectStore) -> None:
    p1 = store.take_lease(CONTRACT, "p1", holder="run-a", duration=MINUTE)
    store.take_lease(CONTRACT, "p2", holder="run-a", duration=MINUTE)
    fenced = store.fenced([p1])
    with pytest.raises(LeaseLost) as lost:  # p2's lease is this run's too, but not in the fence
        fenced.record_candidates([new("p1", CandidateAction.ACCEPT, run_id="run-a"),
                                  new("p2", CandidateAction.ACCEPT, run_id="run-a")])
    assert lost.value.keys == {(CONTRACT, "p2")}
    assert "this run holds no lease on target shop/p2" in str(lost.value)
    assert store.latest_accepted_all(CONTRACT) == []
    # an unfenced store (the CLI, reviews) is not held back by leases
    store.record_failures(CONTRACT, [("p2", "down")])
    assert store.state(CONTRACT, "p2").failure_streak == 1


def test_a_review_during_a_scrape_settles_by_the_partition_lock(store: ProjectStore) -> None:
    """A reviewer needs no lease: accepting the quarantined candidate while a run holds the target makes
    that run's candidate (diffed against the version before) stale, never a second accept of one version."""
    (first,) = store.record_candidates([new("p1", CandidateAction.ACCEPT, run_id="run-0")])
    (held,) = store.record_candidates([new("p1", CandidateAction.QUARANTINE, run_id="run-1", compared_with=1,
                                           price=30.0)])
    scrape = store.take_lease(CONTRACT, "p1", holder="run-2", duration=MINUTE)
    fenced = store.fenced([scrape])
    (pending,) = fenced.record_candidates([new("p1", CandidateAction.PENDING, run_id="run-2", compared_with=1,
                                               price=11.0)])
    review = store.decide(CONTRACT, "p1", "accept", reviewer="alice", reason="checked", candidate_id=held.candidate_id)
    assert review.accepted_version == 2
    with pytest.raises(StaleCandidate) as stale:
        fenced.accept(pending.candidate_id, run_id="run-2", compared_with=1)
    assert stale.value.newest == 2
    assert [(v.version, v.candidate_id) for v in store.accepted_history(CONTRACT, "p1")] == [
        (1, first.candidate_id), (2, held.candidate_id)]
    # diffed again against version 2, the run accepts it as version 3: once
    assert fenced.accept(pending.candidate_id, run_id="run-2", compared_with=2).version == 3


def test_no_take_over_slips_between_the_fence_and_the_commit(store: ProjectStore, url: str, clock: Clock) -> None:
    """PostgreSQL: the fence share-locks the lease row until the commit, so a take-over waits for it (on
    SQLite the commit holds the whole store)."""
    if not url.startswith("postgresql"):
        pytest.skip("SQLite serialises every write transaction: nothing can slip in")
    a = store.take_lease(CONTRACT, "p1", holder="run-a", duration=MINUTE)
    fenced = store.fenced([a])
    monitor = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    taken: list[Any] = []
    try:
        with store.engine.begin() as conn:
            check_fence(conn, fenced, [(CONTRACT, "p1")])  # passes: A still holds it
            clock.advance(2 * MINUTE)  # from here on anyone may take it over ...
            thief = threading.Thread(target=lambda: taken.append(
                ProjectStore(url, clock=clock).take_lease(CONTRACT, "p1", holder="run-b", duration=MINUTE)))
            thief.start()
            deadline = dt.datetime.now() + dt.timedelta(seconds=30)
            while True:  # ... and the take-over waits for A's transaction
                with monitor.connect() as watch:
                    waiting = watch.execute(sa.text(
                        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                        "AND wait_event_type = 'Lock' AND query ILIKE 'SELECT%sc_leases%FOR UPDATE%'")).scalar()
                if waiting:
                    break
                assert dt.datetime.now() < deadline, "the take-over never waited for the fenced transaction"
                assert thief.is_alive() and not taken, "the take-over went through while A's commit was open"
                thief.join(0.02)
            conn.execute(candidates.insert().values(
                contract=CONTRACT, partition="p1", run_id="run-a", url="u", record={}, outcome=Outcome.VALID,
                status=CandidateStatus.PENDING, details={}, created_at=clock.now))
        thief.join(30)
    finally:
        monitor.dispose()
    assert [lease.token for lease in taken] == [2]
    assert [c.run_id for c in store.candidates_of_run("run-a")] == ["run-a"]  # committed before the take-over


def test_the_keeper_renews_what_is_held_and_lets_go_of_what_was_lost(store: ProjectStore, clock: Clock) -> None:
    grant = store.take_leases(CONTRACT, ["p1", "p2", "p3"], holder="run-a", duration=MINUTE)
    keeper = LeaseKeeper(store, grant.taken, MINUTE)
    clock.advance(dt.timedelta(seconds=40))
    keeper.renew()
    assert {lease.expires_at for lease in keeper.held} == {clock.now + MINUTE}
    assert store.lease(CONTRACT, "p1").expires_at == clock.now + MINUTE

    # p2 is taken over after its lease ran out (this run did not renew it: paused)
    clock.advance(2 * MINUTE)
    store.take_lease(CONTRACT, "p2", holder="run-b", duration=10 * MINUTE)
    keeper.renew()
    assert set(keeper.lost) == {(CONTRACT, "p1"), (CONTRACT, "p2"), (CONTRACT, "p3")}  # all ran out
    assert keeper.held == []
    assert len(keeper.mine) == 3  # kept, so that the fence can say why a commit is refused

    fresh = store.take_leases(CONTRACT, ["p1", "p3"], holder="run-a", duration=MINUTE)
    keeper = LeaseKeeper(store, fresh.taken, MINUTE)
    keeper.release([(CONTRACT, "p1")])
    assert store.lease(CONTRACT, "p1").expires_at == clock.now
    assert [lease.partition for lease in keeper.held] == ["p3"]
    with keeper:  # the thread starts and stops without a round (a third of a minute is far off)
        pass
    assert store.lease(CONTRACT, "p3").live(clock.now)
