"""A batch's leases against the real store (SQLite and PostgreSQL): busy targets, a chunk with a lost target.

A chunk's commit under leases records every target still held and leaves out, reported, the one whose lease
was lost; the refused transaction is retried without it, so the others are recorded exactly once.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrape_contracts.adapters import store as store_module
from scrape_contracts.adapters.store import CandidateStatus, LostLease, ProjectStore
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.contract.model import Contract
from scrape_contracts.service import gate, scrape
from scrape_contracts.service.batch_leases import BatchLeases
from scrape_contracts.service.records import Extracted, Fetched, HealReport, Refusal, Recorded, ScrapeResult, no_emit

MINUTE = dt.timedelta(minutes=1)


class Clock:
    def __init__(self) -> None:
        self.now = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)

    def __call__(self) -> dt.datetime:
        return self.now


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProjectStore]:
    url = request.getfixturevalue("pg_database") if request.param == "postgres" else \
        f"sqlite:///{tmp_path / 'store.db'}"
    yield ProjectStore(url, clock=Clock())
    engine = store_module._engines.pop(url, None)
    if engine is not None:
        engine.dispose()


def loaded() -> LoadedContract:
    contract = Contract.model_validate({
        "name": "shop", "targets": [{"url": f"http://127.0.0.1/{p}", "key": p} for p in ("p1", "p2", "p3")],
        "fields": {"price": {"selector": "#price", "type": "price"}}})
    return LoadedContract(contract, Path("shop.yaml"))


def result(partition: str, price: float) -> ScrapeResult:
    contract = loaded()
    fetched = Fetched("shop", partition, f"http://127.0.0.1/{partition}", f"http://127.0.0.1/{partition}", None,
                      False, (), None, None, None)
    extracted = Extracted(fetched, {"price": price}, (), 1, {})
    return scrape.decide(contract, scrape.validate(contract, extracted, no_emit), HealReport(), no_emit)


def test_a_chunk_records_the_targets_still_held_and_reports_the_lost_one(store: ProjectStore) -> None:
    store.take_lease("shop", "p3", holder="other-run", duration=10 * MINUTE)
    seconds = [0.0]  # the batch's monotonic clock: when released leases are handed back
    leases = BatchLeases(store, "shop", "batch-run", MINUTE, clock=lambda: seconds[0])
    busy = leases.take(["p1", "p2", "p3"])
    assert list(busy) == ["p3"] and busy["p3"].kind == Refusal.BUSY
    assert busy["p3"].message.startswith("busy: target shop/p3 is being scraped by run other-run until ")
    with leases:
        # p1's lease is renewed in time, p2's is not (say its renewal failed) and another run takes p2 over
        clock = store.clock
        clock.now += dt.timedelta(seconds=50)  # type: ignore[attr-defined]
        store.renew_leases([lease for lease in leases.keeper.mine if lease.partition == "p1"], MINUTE)
        clock.now += dt.timedelta(seconds=20)  # type: ignore[attr-defined]
        store.take_lease("shop", "p2", holder="next-run", duration=MINUTE)

        pairs = gate.record_results(leases.fenced(["p1", "p2"]), [result("p1", 10.0), result("p2", 20.0)],
                                    "batch-run", loaded())
        assert [type(rec) for _, rec in pairs] == [Recorded, LostLease]
        assert pairs[0][1].status == CandidateStatus.ACCEPTED
        assert pairs[1][1].message.startswith("lease lost: run next-run took target shop/p2 over at ")
        lost = leases.record_failures([("p1", "timed out"), ("p2", "timed out")])
        assert list(lost) == ["p2"]
        leases.release(["p1", "p2"])
        assert store.lease("shop", "p1").live(store.clock())  # a release a second, not one per chunk
        seconds[0] += 1.0
        leases.release([])
        assert not store.lease("shop", "p1").live(store.clock())

    assert [v.record for v in store.accepted_history("shop", "p1")] == [{"price": 10.0}]  # once
    assert store.accepted_history("shop", "p2") == [] and store.latest_candidate("shop", "p2") is None
    assert (store.state("shop", "p1").failure_streak, store.state("shop", "p2").failure_streak) == (1, 0)
    assert store.lease("shop", "p2").holder == "next-run" and store.lease("shop", "p2").live(store.clock())


def test_the_leases_of_targets_never_committed_are_released_at_the_end(store: ProjectStore) -> None:
    leases = BatchLeases(store, "shop", "batch-run", MINUTE, clock=lambda: 0.0)
    assert leases.take(["p1", "p2"]) == {}
    with leases:
        leases.release(["p1"])  # committed: held back for the next release
        assert all(store.lease("shop", p).live(store.clock()) for p in ("p1", "p2"))
    assert not any(store.lease("shop", p).live(store.clock()) for p in ("p1", "p2"))
