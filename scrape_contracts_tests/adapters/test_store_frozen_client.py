"""A client of the project store frozen inside a transaction (a stopped process, a paused VM) on PostgreSQL: the
server ends its transaction after ``IDLE_IN_TRANSACTION_S``, so its row locks go and another worker takes its
expired leases over, instead of waiting on the frozen one for as long as it sleeps. The 20,000-target sweep
with a frozen worker host stalled on exactly this (benchmarks/multihost.py --faults, docs/multihost.md).
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from scrape_contracts.adapters import store as store_module
from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.adapters.store.engines import IDLE_IN_TRANSACTION_S
from scrape_contracts.testing import faults

REPO = Path(__file__).resolve().parents[2]
MINUTE = dt.timedelta(minutes=1)

# a worker of the same store in a process of its own, stopped by the test once it holds the lease's row lock
# inside a transaction, as a commit does when it checks its fencing token
FROZEN = """
import sys
import sqlalchemy as sa
from scrape_contracts.adapters.store import ProjectStore
store = ProjectStore(sys.argv[1])
with store.engine.begin() as conn:
    conn.execute(sa.text("select token from sc_leases where contract = 'shop' and partition = 'p1' for update")).all()
    print("locked", flush=True)
    sys.stdin.readline()
"""


def test_a_client_frozen_in_a_transaction_keeps_its_locks_no_longer_than_the_idle_bound(pg_database: str) -> None:
    now = [dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)]
    store = ProjectStore(pg_database, clock=lambda: now[0])
    before = store.take_lease("shop", "p1", holder="frozen", duration=MINUTE)
    frozen = subprocess.Popen([sys.executable, "-c", FROZEN, pg_database], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=REPO,
                              env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        assert frozen.stdout is not None and frozen.stdout.readline().strip() == "locked"
        frozen.send_signal(signal.SIGSTOP)
        now[0] += 2 * MINUTE  # its lease has run out: the next worker may take the target over
        got: dict[str, Any] = {}
        taking = threading.Thread(target=lambda: got.update(grant=store.take_leases(
            "shop", ["p1"], holder="next", duration=MINUTE)), daemon=True)
        taking.start()
        taking.join(IDLE_IN_TRANSACTION_S * 4)  # a bound for broken code: the server ends it after 30 s
        assert not taking.is_alive(), "the takeover still waits on the frozen client's row lock"
        [lease] = got["grant"].taken
        assert lease.holder == "next" and lease.token > before.token
    finally:
        frozen.send_signal(signal.SIGCONT)
        frozen.kill()
        frozen.wait(30)
        engine = store_module.open_engines.pop(pg_database, None)
        if engine is not None:
            engine.dispose()


# a client almost always inside a short transaction, with brief gaps between them (a chunk committing target
# after target): a freeze that looks only before it signals lands inside a transaction most of the time
BUSY = """
import sys, time
import sqlalchemy as sa
engine = sa.create_engine(sys.argv[1])
print("busy", flush=True)
while True:
    with engine.begin() as conn:
        conn.execute(sa.text("select 1")).all()
        time.sleep(0.049)
    time.sleep(0.001)
"""


# a freeze that looks only before it signals lands inside a transaction about half the time: one of several
# in a row then does, nearly always
FREEZES = 6


class _OneProcess:
    """The part of ``netns.Cluster`` that ``faults.freeze`` uses, for one process of this machine."""

    def __init__(self, process: subprocess.Popen) -> None:
        self.process = process

    def signal(self, host: str, sig: int) -> list[int]:
        self.process.send_signal(sig)
        return [self.process.pid]


def test_a_host_is_frozen_between_its_transactions_not_inside_one(pg_database: str) -> None:
    busy = subprocess.Popen([sys.executable, "-c", BUSY, pg_database], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PGAPPNAME": "host-t"})
    store = sa.create_engine(pg_database)
    try:
        assert busy.stdout is not None and busy.stdout.readline().strip() == "busy"
        faults.wait_until_sessions(store, "t")
        host = _OneProcess(busy)
        for _ in range(FREEZES):
            assert faults.freeze_between_transactions(host, store, "t", timeout=120)
            # frozen, it can open nothing more: what pg_stat_activity says now holds until it is revived
            assert not faults.in_transaction(store, "t")
            faults.thaw(host, "t")
    finally:
        busy.send_signal(signal.SIGCONT)
        busy.kill()
        busy.wait(30)
        store.dispose()
