"""When a contract is scraped on its own (``schedule:``), and its canaries (``canary:``).

A canary is a target scraped on a schedule of its own, often more often than the rest, so that a site that
broke is noticed early: after ``failing_after`` failed or rejected scrapes in a row one alert goes to
``notify``, and no second one until the target has succeeded again (then a recovery notice)::

    canary:                                  # on the contract: every target is a canary
      schedule: "0 */4 * * *"                # a cron string, or {cron: ..., timezone: Europe/Paris}
      notify: [ops_slack]                    # destination names from destinations.yaml
      failing_after: 3                       # the default

    targets:
      - url: https://shop.example.com/p/1
        canary: {schedule: "*/30 * * * *"}   # on one target: its own schedule; the rest from the contract's
      - url: https://shop.example.com/p/2
        canary: false                        # not a canary, although the contract's targets are
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from scrape_contracts.contract.base import Strict


class Schedule(Strict):
    cron: str
    timezone: str = "UTC"

    @field_validator("cron")
    @classmethod
    def _cron_is_valid(cls, value: str) -> str:
        from croniter import croniter

        if not croniter.is_valid(value):
            raise ValueError(f"invalid cron expression {value!r} (five fields: minute hour day month weekday)")
        return value

    @field_validator("timezone")
    @classmethod
    def _timezone_exists(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown timezone {value!r} (use an IANA name such as Europe/Paris)") from None
        return value


class Canary(Strict):
    """``canary:`` on a contract (every target) or on one target (what it leaves out, the contract's says)."""

    schedule: Schedule | None = Field(None, description="Cron of the canary's own schedule (a string, or "
                                                        "{cron, timezone}).")
    notify: tuple[str, ...] | None = Field(None, min_length=1,
                                           description="Destinations (destinations.yaml) of its alerts.")
    failing_after: int | None = Field(None, ge=1, le=100,
                                      description="Failed or rejected scrapes in a row before the alert (3).")

    @field_validator("schedule", mode="before")
    @classmethod
    def _cron_string(cls, value: Any) -> Any:
        return {"cron": value} if isinstance(value, str) else value

    @field_validator("notify", mode="before")
    @classmethod
    def _one_name(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    def over(self, base: Canary | None) -> Canary:
        """This canary with what it leaves out taken from ``base`` (the contract's)."""
        if base is None:
            return self
        return Canary(schedule=self.schedule or base.schedule, notify=self.notify or base.notify,
                      failing_after=self.failing_after or base.failing_after)

    def missing(self) -> list[str]:
        return [name for name in ("schedule", "notify") if getattr(self, name) is None]

    @property
    def threshold(self) -> int:
        return self.failing_after or 3
