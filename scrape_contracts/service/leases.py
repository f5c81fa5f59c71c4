"""Target leases in the use cases: taken before a target is fetched, renewed while it is worked on, released
at the end. The store keeps them and fences every commit (``adapters/store/leases.py``; docs/leases.md).

A holder is a Dagster run id. A live lease of a run that has ended (failed, canceled, or finished without
releasing it) may be taken over at once when the caller says how to tell (``Ended``): the fencing token
keeps that safe even if the run's process is in fact still alive.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable, Iterable, Sequence

from scrape_contracts import settings
from scrape_contracts.adapters.store import (
    Lease, LeaseGrant, LeaseLost, LostLease, ProjectStore, TargetBusy, unreachable,
)
from scrape_contracts.contract.fetch import FetchSettings

log = logging.getLogger(__name__)

MIN_LEASE_S = 120.0  # covers the gaps between a single-target run's steps (a process each) on a busy host
DEADLINES_PER_LEASE = 3  # a fetch may use its whole deadline and one renewal may come late

# whether a holder (a run id) has ended, so that its lease can be taken over before it expires
Ended = Callable[[str], bool]


def duration_for(fetch: FetchSettings) -> dt.timedelta:
    """``SCRAPE_CONTRACTS_LEASE_SECONDS``, else three fetch deadlines and at least two minutes."""
    seconds = settings.lease_seconds()
    if seconds is None:
        seconds = max(MIN_LEASE_S, DEADLINES_PER_LEASE * fetch.deadline_s)
    return dt.timedelta(seconds=seconds)


def take(store: ProjectStore, contract: str, partitions: Iterable[str], *, holder: str,
         duration: dt.timedelta, ended: Ended | None = None) -> LeaseGrant:
    """The leases of ``partitions`` for ``holder``; a refused one is taken over when its holder has ended."""
    grant = store.take_leases(contract, partitions, holder=holder, duration=duration)
    gone = {lease.partition: lease.token for lease in grant.refused if ended is not None and ended(lease.holder)}
    if not gone:
        return grant
    again = store.take_leases(contract, gone, holder=holder, duration=duration, replace=gone)
    still = tuple(lease for lease in grant.refused if lease.partition not in gone)
    return LeaseGrant(grant.taken + again.taken, still + again.refused)


def take_one(store: ProjectStore, contract: str, partition: str, *, holder: str, duration: dt.timedelta,
             ended: Ended | None = None) -> Lease:
    """One target's lease; ``TargetBusy`` (who holds it, until when) when another live run holds it."""
    grant = take(store, contract, [partition], holder=holder, duration=duration, ended=ended)
    if grant.refused:
        raise TargetBusy(grant.refused[0])
    return grant.taken[0]


def resume(store: ProjectStore, contract: str, partition: str, *, holder: str, duration: dt.timedelta,
           lease: Lease | None = None) -> Lease:
    """The lease ``holder`` took in an earlier step of its run (``lease``, when that step handed it on),
    renewed; ``LeaseLost`` when it expired or was taken over meanwhile. Never taken again: what the earlier
    step found may be stale by now."""
    if lease is not None:
        return store.renew_lease(lease, duration)
    current = store.lease(contract, partition)
    if current is None or current.holder != holder or not current.live(store.clock()):
        raise LeaseLost([LostLease(contract, partition, holder, None, current)])
    return store.renew_lease(current, duration)


class LeaseKeeper:
    """Renews leases in a daemon thread, every third of their duration, while their targets are worked on.

    A lease found lost is no longer renewed (``lost``) but stays in ``mine``: the commit that follows is
    refused by the store's fence, which is what decides, and says why. ``renew`` is one round, for the
    thread and for tests.
    """

    def __init__(self, store: ProjectStore, held: Iterable[Lease], duration: dt.timedelta,
                 every_s: float | None = None) -> None:
        self.store = store
        self.duration = duration
        self.every_s = every_s if every_s is not None else duration.total_seconds() / 3
        self.lost: dict[tuple[str, str], LostLease] = {}
        self._mine = {lease.key: lease for lease in held}
        self._renewing = set(self._mine)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def mine(self) -> list[Lease]:
        """Every lease given and not yet released or dropped, the lost ones too."""
        with self._lock:
            return list(self._mine.values())

    @property
    def held(self) -> list[Lease]:
        """The leases still renewed."""
        with self._lock:
            return [self._mine[key] for key in self._renewing]

    def renew(self) -> None:
        current = self.held
        if not current:
            return
        renewed, lost = self.store.renew_leases(current, self.duration)
        with self._lock:
            for lease in renewed:
                if lease.key in self._renewing:
                    self._mine[lease.key] = lease
            for item in lost:
                self._renewing.discard(item.key)
                self.lost[item.key] = item

    def drop(self, keys: Iterable[tuple[str, str]]) -> list[Lease]:
        """Forget these leases (no more renewals); the ones still renewed until now."""
        with self._lock:
            gone = [self._mine.pop(key) for key in keys if key in self._mine]
            held = [lease for lease in gone if lease.key in self._renewing]
            self._renewing.difference_update(lease.key for lease in gone)
        return held

    def release(self, keys: Iterable[tuple[str, str]]) -> None:
        """Release these leases now (the lost ones are another holder's), and forget them."""
        held = self.drop(keys)
        if held:
            self.store.release_leases(held)

    def _loop(self) -> None:
        while not self._stop.wait(self.every_s):
            try:
                self.renew()
            except Exception as exc:  # noqa: BLE001 (a store hiccup: the next round tries again)
                # a store that cannot be reached fails the work's next commit, which says so in one line;
                # said here too, every round, it only buried that line (psycopg2's reasons span lines)
                level = logging.INFO if unreachable(exc) else logging.WARNING
                log.log(level, "could not renew %d target lease(s): %s", len(self.held),
                        str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)

    def __enter__(self) -> LeaseKeeper:
        self._thread = threading.Thread(target=self._loop, name="lease-keeper", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)


def release(store: ProjectStore, held: Sequence[Lease]) -> None:
    if held:
        store.release_leases(held)
