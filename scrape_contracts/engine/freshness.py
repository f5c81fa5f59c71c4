"""Is a target's data as fresh as its schedules promise? (pure: schedules, times and state in; a verdict out)

A target is expected to have succeeded since the tick *before* the latest tick of the strictest schedule
that scrapes it: the run of the latest tick may still be going, so one tick of slack, never two. A paused
target is stale whatever its age: no schedule scrapes it until someone resumes it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from zoneinfo import ZoneInfo


@dataclass(frozen=True)
class Cadence:
    """A schedule that scrapes the target: its Dagster name, cron and timezone."""

    schedule: str
    cron: str
    timezone: str = "UTC"

    def expected_since(self, now: dt.datetime) -> dt.datetime:
        from croniter import croniter

        ticks = croniter(self.cron, now.astimezone(ZoneInfo(self.timezone)))
        ticks.get_prev(dt.datetime)
        return ticks.get_prev(dt.datetime).astimezone(dt.timezone.utc)


@dataclass(frozen=True)
class Freshness:
    fresh: bool
    description: str
    expected_since: dt.datetime
    last_success: dt.datetime | None
    schedule: str  # the schedule whose promise decides

    def metadata(self) -> dict[str, str | None]:
        return {"last_success": self.last_success.isoformat() if self.last_success else None,
                "expected_since": self.expected_since.isoformat(), "schedule": self.schedule}


def freshness(cadences: Sequence[Cadence], now: dt.datetime, last_success: dt.datetime | None,
              paused: str | None) -> Freshness:
    if not cadences:
        raise ValueError("a target without a schedule promises no freshness")
    strictest = max(cadences, key=lambda c: c.expected_since(now))
    since = strictest.expected_since(now)
    when = _ago(last_success, now)
    if paused:
        return Freshness(False, f"stale: paused ({paused}); schedules skip it until it is resumed; last "
                                f"success {when}", since, last_success, strictest.schedule)
    if last_success is None or last_success < since:
        return Freshness(False, f"stale: last success {when}; {strictest.schedule} ({strictest.cron}) expects one "
                                f"since {since:%Y-%m-%d %H:%M} UTC (is the schedule running? does the target "
                                "fail? see its failure streak on scrape/_health)", since, last_success,
                         strictest.schedule)
    return Freshness(True, f"fresh: last success {when}", since, last_success, strictest.schedule)


def _ago(when: dt.datetime | None, now: dt.datetime) -> str:
    if when is None:
        return "never"
    seconds = max(0.0, (now - when).total_seconds())
    amount = f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.0f} min"
    return f"{when:%Y-%m-%d %H:%M} UTC ({amount} ago)"
