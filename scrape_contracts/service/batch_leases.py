"""The leases of a batch's targets: taken in one transaction before anything is fetched, renewed while the
batch works, checked by the store at each chunk's commit, released once their chunk is committed.

A target another live run holds is not fetched (``busy``); one whose lease was lost before its commit is
left out of the commit and reported (``lost``); the rest of the chunk is recorded as usual.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Callable, Sequence

from scrape_contracts.adapters.store import Lease, LeaseLost, LostLease, ProjectStore, unreachable
from scrape_contracts.service import leases
from scrape_contracts.service.records import LeaseRefusal

log = logging.getLogger(__name__)

# committed targets are freed at most this late: a release a second rather than one per chunk (a release is a
# transaction of its own, about a third of a chunk's commit on PostgreSQL)
RELEASE_EVERY_S = 1.0


class BatchLeases:
    def __init__(self, store: ProjectStore, contract: str, holder: str, duration: dt.timedelta,
                 ended: leases.Ended | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.store, self.contract, self.holder, self.duration, self.ended = store, contract, holder, duration, ended
        self.keeper = leases.LeaseKeeper(store, (), duration)
        self._clock = clock
        self._done: list[Lease] = []
        self._released_at = clock()

    def take(self, partitions: Sequence[str]) -> dict[str, LeaseRefusal]:
        """Take the targets' leases; partition → why for those another run holds (busy)."""
        grant = leases.take(self.store, self.contract, partitions, holder=self.holder, duration=self.duration,
                            ended=self.ended)
        self.keeper = leases.LeaseKeeper(self.store, grant.taken, self.duration)
        return {lease.partition: LeaseRefusal.busy(lease) for lease in grant.refused}

    def fenced(self, partitions: Sequence[str]) -> ProjectStore:
        """The store, committing for these targets only while this run holds their leases."""
        mine = {lease.partition: lease for lease in self.keeper.mine}
        return self.store.fenced(mine[p] for p in partitions if p in mine)

    def record_failures(self, failures: Sequence[tuple[str, str]]) -> dict[str, LostLease]:
        """Fetch failures' streaks; those whose lease was lost are left out (partition → why)."""
        fenced = self.fenced([p for p, _ in failures])
        lost: dict[str, LostLease] = {}
        while True:
            try:
                fenced.record_failures(self.contract, [(p, why) for p, why in failures if p not in lost])
                return lost
            except LeaseLost as exc:  # the refused transaction wrote nothing: again without the lost ones
                lost.update({item.partition: item for item in exc.lost})

    def release(self, partitions: Sequence[str]) -> None:
        """Free these targets (committed, or given up): no longer renewed, released with the next release."""
        self._done += self.keeper.drop([(self.contract, p) for p in partitions])
        if self._clock() - self._released_at >= RELEASE_EVERY_S:
            self._flush()

    def _flush(self) -> None:
        done, self._done, self._released_at = self._done, [], self._clock()
        if done:
            self.store.release_leases(done)

    def __enter__(self) -> BatchLeases:
        self.keeper.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        self.keeper.__exit__(kind, *exc)
        self._done += self.keeper.drop([lease.key for lease in self.keeper.mine])  # never committed
        count = len(self._done)
        try:
            self._flush()
        except Exception as failed:
            # a release only frees the targets sooner: unreleased leases expire by themselves. When the batch
            # is already ending on an error (the database gone mid-batch, most often), that error is the one
            # to report, not a second one from here; a database gone at the very end is a warning
            if kind is None and unreachable(failed) is None:
                raise
            if kind is None:
                log.warning("could not release %d target lease(s) (they expire by themselves): %s",
                            count, unreachable(failed))
