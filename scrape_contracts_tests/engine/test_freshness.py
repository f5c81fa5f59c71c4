"""Freshness verdicts from schedules, times and pause state (pure)."""

from __future__ import annotations

import datetime as dt

import pytest

from scrape_contracts.engine.freshness import Cadence, freshness

DAILY = Cadence("scrape_shop_schedule", "0 6 * * *")
HALF_HOURLY = Cadence("canary_shop_schedule", "*/30 * * * *")
NOW = dt.datetime(2026, 12, 1, 12, 10, tzinfo=dt.timezone.utc)


def _at(day: int, hour: int, minute: int = 0) -> dt.datetime:
    return dt.datetime(2026, 12, day, hour, minute, tzinfo=dt.timezone.utc)


@pytest.mark.parametrize(("last", "fresh"), [
    (_at(1, 6, 5), True),      # today's run
    (_at(1, 5, 59), True),     # before today's tick, after yesterday's: today's run may still be going
    (None, False),
])
def test_one_tick_of_slack(last: dt.datetime | None, fresh: bool) -> None:
    assert freshness([DAILY], NOW, last, None).fresh is fresh


def test_missing_two_ticks_is_stale_and_says_why() -> None:
    verdict = freshness([DAILY], NOW, dt.datetime(2026, 11, 30, 5, 0, tzinfo=dt.timezone.utc), None)
    assert not verdict.fresh and verdict.expected_since == dt.datetime(2026, 11, 30, 6, 0, tzinfo=dt.timezone.utc)
    assert "scrape_shop_schedule (0 6 * * *) expects one since 2026-11-30 06:00 UTC" in verdict.description
    assert "31.2 h ago" in verdict.description


def test_a_paused_target_is_stale_however_recent() -> None:
    verdict = freshness([DAILY], NOW, NOW - dt.timedelta(minutes=5), "review required: price jump")
    assert not verdict.fresh and "paused (review required: price jump)" in verdict.description


def test_the_strictest_schedule_decides() -> None:
    verdict = freshness([DAILY, HALF_HOURLY], NOW, _at(1, 6, 5), None)
    assert not verdict.fresh and verdict.schedule == "canary_shop_schedule"
    assert verdict.expected_since == _at(1, 11, 30)
    assert freshness([DAILY, HALF_HOURLY], NOW, _at(1, 11, 45), None).fresh


def test_timezones_are_the_schedules() -> None:
    paris = Cadence("s", "0 6 * * *", "Europe/Paris")  # 05:00 UTC in winter
    assert freshness([paris], NOW, _at(1, 5, 1), None).fresh
    assert paris.expected_since(NOW) == dt.datetime(2026, 11, 30, 5, 0, tzinfo=dt.timezone.utc)
