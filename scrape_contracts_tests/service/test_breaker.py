"""The per-host circuit breaker of a batch: a host that keeps failing is not asked again, one probe at a
time, and any answer closes it."""

from __future__ import annotations

from scrape_contracts.adapters.fetch.page import FetchError
from scrape_contracts.service.breaker import HostBreaker

URL = "http://shop.test/p/1"


def _down(kind: str = "connection", status: int | None = None) -> FetchError:
    return FetchError(f"could not connect ({kind})", kind=kind, url=URL, status=status, transient=True)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_trips_after_consecutive_host_failures_and_says_why() -> None:
    breaker = HostBreaker(trip_after=3, clock=Clock())
    for _ in range(2):
        assert breaker.refuse("shop.test", URL) is None
        breaker.record("shop.test", _down())
    assert breaker.refuse("shop.test", URL) is None  # two in a row: still asked
    breaker.record("shop.test", _down("timeout"))
    refused = breaker.refuse("shop.test", URL)
    assert refused is not None and refused.kind == "host_down" and refused.transient
    assert "shop.test failed 3 fetches in a row" in str(refused) and "(timeout)" in str(refused)
    assert "last accepted data stays" in str(refused)
    assert breaker.refuse("other.test:8080", URL) is None  # other hosts are their own


def test_answers_reset_the_count_and_target_errors_do_not_count() -> None:
    breaker = HostBreaker(trip_after=2, clock=Clock())
    breaker.record("h", _down())
    breaker.record("h", _down("http_status", 404))  # the host answered: it is up
    breaker.record("h", _down())
    assert breaker.refuse("h", URL) is None
    breaker.record("h", _down("blocked_address"))  # says nothing about the host
    breaker.record("h", _down("http_status", 503))
    assert breaker.refuse("h", URL) is not None


def test_one_probe_per_interval_and_an_answer_closes_it() -> None:
    clock = Clock()
    breaker = HostBreaker(trip_after=1, probe_every_s=30, clock=clock)
    breaker.record("h", _down())
    assert breaker.refuse("h", URL) is not None
    clock.now += 30
    assert breaker.refuse("h", URL) is None  # the probe goes
    assert breaker.refuse("h", URL) is not None  # the others wait for it
    breaker.record("h", object())  # a page
    assert breaker.refuse("h", URL) is None
