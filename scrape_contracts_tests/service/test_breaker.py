"""The per-host circuit breaker of a batch: after failures in a row the host's targets wait for a probe;
an answer lets them go on, failed probes fail the rest at once with the reason."""

from __future__ import annotations

import asyncio

from scrape_contracts.adapters.fetch.page import FetchError
from scrape_contracts.service.breaker import HostBreaker

URL = "http://shop.test/p/1"


def _err(kind: str = "connection", status: int | None = None) -> FetchError:
    return FetchError(f"could not connect ({kind})", kind=kind, url=URL, status=status, transient=True)


class Clock:
    """A clock the breaker's sleeps move forward: the test never waits."""

    def __init__(self) -> None:
        self.now = 100.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def _breaker(clock: Clock, **kw) -> HostBreaker:
    return HostBreaker(clock=clock, sleep=clock.sleep, **kw)


def test_below_the_threshold_everyone_goes_and_target_errors_do_not_count() -> None:
    async def scenario() -> None:
        breaker = _breaker(Clock(), trip_after=2)
        breaker.record("h", _err())
        breaker.record("h", _err("http_status", 404))  # the host answered: it is up
        breaker.record("h", _err())
        breaker.record("h", _err("blocked_address"))  # says nothing about the host
        assert not breaker.is_open("h") and await breaker.admit("h", URL) == (None, False)
        breaker.record("h", _err("http_status", 503))
        assert breaker.is_open("h") and not breaker.is_open("other.test:8080")

    asyncio.run(scenario())


def test_a_short_outage_costs_a_probe_not_the_rest_of_the_batch() -> None:
    async def scenario() -> None:
        clock = Clock()
        breaker = _breaker(clock, trip_after=2, probe_every_s=5)
        breaker.record("h", _err())
        breaker.record("h", _err("timeout"))
        probe = await breaker.admit("h", URL)  # waits out the interval, then goes as the probe
        assert probe == (None, True) and clock.slept == [5]
        waiting = [asyncio.create_task(breaker.admit("h", URL)) for _ in range(3)]
        await asyncio.sleep(0)
        assert not any(t.done() for t in waiting)  # they wait for the probe's answer
        breaker.record("h", object(), probe=True)  # a page: the host is back
        assert [await t for t in waiting] == [(None, False)] * 3 and not breaker.is_open("h")

    asyncio.run(scenario())


def test_failed_probes_fail_the_rest_at_once_and_say_why() -> None:
    async def scenario() -> None:
        clock = Clock()
        breaker = _breaker(clock, trip_after=1, probe_every_s=5, probes=2)
        breaker.record("h", _err())
        for _ in range(2):
            refusal, probe = await breaker.admit("h", URL)
            assert refusal is None and probe
            breaker.record("h", _err(), probe=True)
        refusal, probe = await breaker.admit("h", URL)
        assert refusal is not None and not probe and refusal.kind == "host_down" and refusal.transient
        assert "h failed 1 fetches in a row and 2 probes 5 s apart" in str(refusal)
        assert "last accepted data stays" in str(refusal) and clock.slept == [5, 5]

    asyncio.run(scenario())


def test_a_probe_that_says_nothing_about_the_host_hands_over_to_the_next() -> None:
    async def scenario() -> None:
        clock = Clock()
        breaker = _breaker(clock, trip_after=1, probe_every_s=1)
        breaker.record("h", _err())
        assert await breaker.admit("h", URL) == (None, True)
        other = asyncio.create_task(breaker.admit("h", URL))
        await asyncio.sleep(0)
        breaker.record("h", _err("invalid_url"), probe=True)
        assert await other == (None, True)

    asyncio.run(scenario())
