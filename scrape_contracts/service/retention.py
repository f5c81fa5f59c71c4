"""Retention of raw pages: what is kept, what is pruned, and when (``retention_job``, its schedule).

Policy (``RetentionPolicy``, configured by ``SCRAPE_CONTRACTS_RETENTION_DAYS`` and
``SCRAPE_CONTRACTS_RETENTION_KEEP_LAST``, or the job's run config):

- the pages of accepted versions and of pending candidates (between a check and its accept) are kept
  ``keep_days`` days after they were fetched (default 30); a quarantined candidate's page is kept until
  its review decides, however long that takes (accepted, it is the target's newest accepted page);
- each target's newest accepted page is kept whatever its age while ``keep_last_accepted`` (default on):
  an unchanged page answered with a 304 and re-extraction after a contract edit read it. Off, it goes
  too, and healing works from the element fingerprints stored when the record was accepted;
- every other page (rejected or unchanged candidates' pages, pages no candidate refers to) is pruned;
- a page written or fetched again within ``grace_s`` (default an hour) is never pruned: a run in flight
  stores its page before its candidate.

Fingerprints go with them: those of each target's newest accepted version and of open candidates are kept
always, others ``keep_days`` days. The candidates of unchanged pages (one row per target per sweep, saying
only "nothing new") go after ``keep_days`` days too, each target's newest one excepted.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass

from scrape_contracts.adapters import retention
from scrape_contracts.adapters.pages import PageStore
from scrape_contracts.adapters.fingerprints import SqlFingerprintStore
from scrape_contracts.adapters.store import ProjectStore


@dataclass(frozen=True)
class RetentionPolicy:
    keep_days: float = 30.0
    keep_last_accepted: bool = True
    grace_s: float = 3600.0

    def __post_init__(self) -> None:
        if self.keep_days < 0 or self.grace_s < 0:
            raise ValueError("keep_days and grace_s must be 0 or more")


@dataclass(frozen=True)
class RetentionReport:
    pages_kept: int
    pages_removed: int
    fingerprints_removed: int  # candidates whose fingerprints were forgotten
    unchanged_removed: int = 0  # candidates of unchanged pages deleted

    def as_dict(self) -> dict[str, int]:
        return {"pages_kept": self.pages_kept, "pages_removed": self.pages_removed,
                "fingerprints_removed": self.fingerprints_removed, "unchanged_removed": self.unchanged_removed}


def prune(store: ProjectStore, artifacts: PageStore, policy: RetentionPolicy,
          clock: Callable[[], float] = time.time) -> RetentionReport:
    """Delete the raw pages and fingerprints ``policy`` no longer keeps."""
    now = clock()
    since = dt.datetime.fromtimestamp(now - policy.keep_days * 86400, dt.timezone.utc)
    keep = retention.pages_to_keep(store.engine, since, last_accepted=policy.keep_last_accepted)
    removed = artifacts.prune(keep, older_than=now - policy.grace_s)
    fingerprints = SqlFingerprintStore(store.engine)
    kept_ids = retention.fingerprints_to_keep(store.engine, since)
    stale = fingerprints.candidates() - kept_ids
    forgotten = len(stale)
    fingerprints.delete(stale)
    unchanged = retention.forget_unchanged(store.engine, since)
    return RetentionReport(pages_kept=artifacts.count(), pages_removed=removed,
                           fingerprints_removed=forgotten, unchanged_removed=unchanged)
