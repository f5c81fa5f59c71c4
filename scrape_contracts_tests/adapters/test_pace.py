"""A site host's budget, on an injected clock: concurrency, rate, Crawl-delay and back-off (HostPace); and the
share of it every process takes on the PostgreSQL store (a real database)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from scrape_contracts.adapters.fetch.shared_slots import LINGER_S
from scrape_contracts.adapters.fetch.pace import (
    MAX_FAILING_HOLD_S, MAX_HOLD_S, AsyncPacer, HostLimits, HostPace, SyncPacer, Ticket, limits_for,
)
from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.adapters.store.host_budgets import HostBudgets
from scrape_contracts.contract.fetch import FetchSettings
from scrape_contracts_tests.defs.test_celery_chunks import wait_for


def test_the_concurrency_is_a_number_of_slots_and_the_rate_spaces_the_starts() -> None:
    pace = HostPace(HostLimits(concurrency=3, interval_s=0.5))
    assert pace.delay(0.0) == 0
    pace.start(0.0)
    assert pace.delay(0.0) == 0.5 and pace.delay(0.2) == pytest.approx(0.3)
    pace.start(0.5)
    pace.start(1.0)
    assert pace.delay(2.0) is None  # three in flight: wait for one back, however long ago the last started
    pace.finish(2.0, 0.0, 200)
    assert pace.delay(2.0) == 0 and pace.peak == 3


def test_steady_answers_never_hold_a_host_back() -> None:
    pace = HostPace(HostLimits(concurrency=4))
    now = 0.0
    for _ in range(200):
        for _ in range(4):
            pace.start(now)
        now += 0.8
        for _ in range(4):
            pace.finish(now, now - 0.8, 200)
    assert pace.slots == 4 and pace.delay(now) == 0


def test_a_429_with_retry_after_holds_the_whole_host_and_halves_its_window() -> None:
    pace = HostPace(HostLimits(concurrency=4))
    for _ in range(4):
        pace.start(0.0)
    pace.finish(0.1, 0.0, 429, retry_after_s=2.0)
    assert pace.slots == 2 and pace.delay(0.1) is None  # three still in flight, two slots now
    pace.finish(0.2, 0.0, 200)
    pace.finish(0.2, 0.0, 200)
    assert pace.delay(0.2) == pytest.approx(1.9)  # a slot is free, but the host asked for two seconds
    assert pace.delay(2.1) == 0


def test_a_503_costs_a_slot_repeated_ones_halve_the_window_once_per_round_trip_and_answers_grow_it_back() -> None:
    pace = HostPace(HostLimits(concurrency=4))
    pace.start(0.0)
    pace.finish(0.5, 0.0, 200)  # the host's round trip: 0.5 s
    pace.start(0.5)
    pace.finish(1.0, 0.5, 503)  # one 503 now and then: one slot less
    assert pace.slots == 3
    pace.start(2.0)
    pace.finish(2.5, 2.0, 200)
    assert pace.slots == 3
    pace = HostPace(HostLimits(concurrency=4))
    pace.start(0.0)
    pace.finish(0.5, 0.0, 200)
    for _ in range(4):
        pace.start(1.0)
    for _ in range(4):  # four 503s of the same round: one cut, not four
        pace.finish(1.5, 1.0, 503)
    assert pace.slots == 3
    for _ in range(3):  # the next round fails too: the host is failing, the window halves
        pace.start(2.0)
    for _ in range(3):
        pace.finish(2.5, 2.0, 503)
    assert pace.slots == 1
    pace = HostPace(HostLimits(concurrency=4))
    pace.start(0.0)
    pace.finish(0.5, 0.0, 200)
    pace.start(1.0)
    pace.finish(1.5, 1.0, 429)  # a 429 halves at once
    assert pace.slots == 2
    pace.start(2.0)
    pace.finish(2.5, 2.0, 200)
    pace.start(2.5)
    pace.finish(3.0, 2.5, 200)  # 2 + 1/2 + 1/2.5
    assert pace.slots == 2 + 0 and pace.window == pytest.approx(2.9)
    for step in range(10):
        pace.start(3.0 + step)
        pace.finish(3.5 + step, 3.0 + step, 200)
    assert pace.slots == 4 and pace.window == 4.0


def test_a_lone_503_with_retry_after_costs_no_slot_but_a_host_answering_them_in_a_row_is_backed_off() -> None:
    pace = HostPace(HostLimits(concurrency=4))
    pace.start(0.0)
    pace.finish(0.5, 0.0, 200)
    for _ in range(4):
        pace.start(1.0)
    pace.finish(1.5, 1.0, 503, retry_after_s=1.0)  # that page waits its second out, holding no slot
    assert pace.slots == 4 and pace.delay(1.5) == 0  # the freed slot goes to the host's next page at once
    pace.finish(1.5, 1.0, 200)
    assert pace.failing == 0 and pace.slots == 4
    pace.finish(2.5, 1.0, 503, retry_after_s=1.0)
    pace.finish(2.6, 1.0, 503, retry_after_s=1.0)  # the second in a row: the host is in trouble
    assert pace.slots == 2 and pace.delay(2.6) == pytest.approx(0.25)


def test_a_host_failing_again_and_again_is_held_longer_each_time_up_to_a_bound() -> None:
    pace = HostPace(HostLimits(concurrency=2))
    holds = []
    now = 0.0
    for _ in range(8):
        pace.start(now)
        pace.finish(now + 0.01, now, None)  # no answer
        holds.append(round(pace.delay(now + 0.01) or 0.0, 3))
        now += 10
    assert holds[0] == 0 and holds[1] == 0.25 and holds[2] == 0.5 and max(holds) == MAX_FAILING_HOLD_S
    pace.start(now)
    pace.finish(now + 0.01, now, 200)
    assert pace.failing == 0


def test_answers_far_slower_than_the_host_s_fastest_cost_a_slot() -> None:
    pace = HostPace(HostLimits(concurrency=4))
    pace.start(0.0)
    pace.finish(0.1, 0.0, 200)  # fastest 0.1 s
    for i in range(6):  # then 2 s each: the server is struggling
        pace.start(10.0 * i)
        pace.finish(10.0 * i + 2.0, 10.0 * i, 200)
    assert pace.slots < 4


def test_crawl_delay_slows_a_host_but_never_beyond_the_bound() -> None:
    pace = HostPace(HostLimits(concurrency=4, interval_s=0.1))
    pace.at_least(2.0)
    pace.at_least(0.5)  # the slower one wins
    assert pace.interval_s == 2.0
    pace.at_least(10_000)
    assert pace.interval_s == MAX_HOLD_S


def test_throttle_off_keeps_the_window_whatever_the_answers() -> None:
    pace = HostPace(HostLimits(concurrency=4, throttle=False))
    for _ in range(4):
        pace.start(0.0)
        pace.finish(0.1, 0.0, 503)
    assert pace.slots == 4 and pace.delay(0.1) == 0
    # but the host is known to be failing: its fetches waiting out a retry keep their room (Crawl starts no
    # more of its targets, so the breaker sees them fail before all of them are under way)
    assert pace.failing == 4
    pace.start(0.2)
    pace.finish(0.3, 0.2, 200)
    assert pace.failing == 0


def test_the_contract_s_fetch_settings_become_host_limits() -> None:
    assert limits_for(FetchSettings()) == HostLimits(concurrency=4, interval_s=0.0, throttle=True)
    assert limits_for(FetchSettings(concurrency=3, rate=2, throttle=False)) == HostLimits(3, 0.5, False)


def test_waiting_turns_go_first_come_first_served_on_the_injected_clock() -> None:
    now = [0.0]
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    async def main() -> list[tuple[str, float]]:
        pacer = AsyncPacer(HostLimits(concurrency=2, interval_s=1.0), clock=lambda: now[0], sleep=sleep)
        order: list[tuple[str, float]] = []

        async def one(name: str) -> None:
            ticket = await pacer.take("http://a")
            order.append((name, now[0]))
            pacer.give_back(ticket, 200)

        await asyncio.gather(*(one(f"r{i}") for i in range(4)))
        return order

    order = asyncio.run(main())
    assert [name for name, _ in order] == ["r0", "r1", "r2", "r3"]
    assert [at for _, at in order] == [0.0, 1.0, 2.0, 3.0] and slept == [1.0, 1.0, 1.0]


class _Counted(HostBudgets):
    """The real shared budget, counting the takes it refused (every slot held elsewhere)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.refused = 0

    def take(self, host: str, slots: int, hold_s: float) -> int | None:
        slot = super().take(host, slots, hold_s)
        self.refused += slot is None
        return slot


def test_sync_pacers_of_two_processes_share_a_host_s_slots_on_the_postgres_store(pg_database: str) -> None:
    ProjectStore(pg_database)  # its tables
    one, two = _Counted(pg_database), _Counted(pg_database)  # one each, as two runs' processes have
    first = SyncPacer(HostLimits(concurrency=1), shared=one)
    second = SyncPacer(HostLimits(concurrency=1), shared=two)
    held = first.take("shop.test")
    assert held.slot == 0
    taken: list[Ticket] = []
    waiting = threading.Thread(target=lambda: taken.append(second.take("shop.test")))
    waiting.start()
    try:
        wait_for("the second pacer refused the held slot twice", lambda: two.refused >= 2)
        assert taken == []  # its own window has room: the shared slot is what it waits for
        assert second.take("other.test").slot == 0  # another host's budget is its own
    finally:
        first.give_back(held, 200)
        waiting.join(timeout=30)
    assert [t.slot for t in taken] == [0]
    second.give_back(taken[0], 200)
    first.close()
    second.close()


class StoreCalls(HostBudgets):
    """The real shared budget, counting the store calls its pacer made."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.takes = self.give_backs = 0

    def take(self, host: str, slots: int, hold_s: float) -> int | None:
        self.takes += 1
        return super().take(host, slots, hold_s)

    def give_back(self, host: str, slot: int) -> None:
        self.give_backs += 1
        super().give_back(host, slot)

    def held(self) -> int:
        """Slots of any host held in the store now."""
        import sqlalchemy as sa

        engine = sa.create_engine(self.engine.url)  # its own: the pacer's thread may be using the budget's
        try:
            with engine.connect() as conn:
                return int(conn.execute(sa.text("select count(*) from sc_host_slots where expires_at > now()"))
                           .scalar())
        finally:
            engine.dispose()


def test_a_shared_slot_goes_on_to_the_host_s_next_waiting_request_without_a_store_call(pg_database: str) -> None:
    ProjectStore(pg_database)
    budget = StoreCalls(pg_database)
    in_flight, peak = [0], [0]

    async def main() -> AsyncPacer:
        pacer = AsyncPacer(HostLimits(concurrency=2), shared=budget, hold_s=30.0)

        async def one() -> None:
            ticket = await pacer.take("shop.test")
            in_flight[0] += 1
            peak[0] = max(peak[0], in_flight[0])
            await asyncio.sleep(0.01)
            in_flight[0] -= 1
            pacer.give_back(ticket, 200)

        await asyncio.gather(*(one() for _ in range(12)))
        pacer.close()
        return pacer

    asyncio.run(main())
    assert peak[0] == 2
    assert budget.takes == 2  # one per slot: every later request got a slot handed on (else 12 takes)
    assert budget.give_backs == 2 and budget.held() == 0  # closed: back in the store
    budget.close()


def test_a_slot_is_handed_on_only_while_its_hold_outlasts_a_request_then_it_goes_back(pg_database: str) -> None:
    ProjectStore(pg_database)
    budget = StoreCalls(pg_database)
    now = [0.0]

    async def main() -> list[int | None]:
        # a take holds the slot for hold_s + hand_on_s = 4 s: requests starting at 0, 1 and 2 s may use it
        # (3 s or more left), the one at 3.5 s may not (0.5 s left, and a request may last 1 s)
        pacer = AsyncPacer(HostLimits(concurrency=1), shared=budget, hold_s=1.0, hand_on_s=3.0, clock=lambda: now[0])
        slots = []

        async def one(starts_at: float) -> None:
            ticket = await pacer.take("shop.test")
            slots.append(ticket.slot)
            now[0] = starts_at + 0.5
            pacer.give_back(ticket, 200)
            await asyncio.sleep(0)

        pacer.demand.append(lambda host: True)  # more of the host's requests always about to ask
        for starts_at in (0.0, 1.0, 2.0, 3.5):
            now[0] = starts_at
            await one(starts_at)
        pacer.demand.clear()
        pacer.close()
        return slots

    assert asyncio.run(main()) == [0, 0, 0, 0]
    assert budget.takes == 2  # at 0 s and at 3.5 s, when the first hold had too little left
    assert budget.give_backs == 2 and budget.held() == 0
    budget.close()


def test_a_handed_on_slot_nobody_takes_goes_back_to_the_store(pg_database: str) -> None:
    ProjectStore(pg_database)
    budget = StoreCalls(pg_database)

    async def main() -> None:
        pacer = AsyncPacer(HostLimits(concurrency=1), shared=budget, hold_s=30.0)
        pacer.demand.append(lambda host: True)  # the dispatcher says more is coming, then nothing comes
        pacer.give_back(await pacer.take("shop.test"), 200)
        assert budget.give_backs == 0
        loop = asyncio.get_running_loop()
        bound = loop.time() + LINGER_S + 60  # a bound against a hang
        while budget.give_backs == 0 and loop.time() < bound:
            await asyncio.sleep(0.05)
        assert budget.give_backs == 1  # back without the pacer being closed
        pacer.close()

    asyncio.run(main())
    assert budget.held() == 0
    budget.close()


def test_a_request_waiting_for_a_slot_held_elsewhere_takes_one_of_its_own_handed_on_meanwhile(
        pg_database: str) -> None:
    ProjectStore(pg_database)
    other, budget = HostBudgets(pg_database), StoreCalls(pg_database)  # another process holds one of the 2 slots
    elsewhere = other.take("shop.test", 2, 60.0)
    assert elsewhere is not None

    async def main() -> tuple[int | None, int | None, int]:
        pacer = AsyncPacer(HostLimits(concurrency=2), shared=budget, hold_s=30.0)
        first = await pacer.take("shop.test")
        second = asyncio.ensure_future(pacer.take("shop.test"))  # its window has room: it asks the store
        loop = asyncio.get_running_loop()
        bound = loop.time() + 60  # a bound against a hang
        while budget.takes < 3 and loop.time() < bound:  # refused twice: every slot is held
            await asyncio.sleep(0.01)
        pacer.give_back(first, 200)  # handed on: the waiting request takes it at its next try
        got = await asyncio.wait_for(second, 60)
        handed_back = budget.give_backs  # 0: it did not wait for the slot to go back to the store
        pacer.give_back(got, 200)
        pacer.close()
        return first.slot, got.slot, handed_back

    first_slot, second_slot, handed_back = asyncio.run(main())
    assert second_slot == first_slot and handed_back == 0
    other.give_back("shop.test", elsewhere)
    assert budget.held() == 0
    other.close()
    budget.close()
