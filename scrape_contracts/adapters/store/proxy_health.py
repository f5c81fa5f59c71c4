"""Proxy health across runs: each proxy of a contract as the last run that used it left it.

A run's pool keeps its proxies' health in memory (adapters/proxies.py); when its fetcher closes, what lasts
is written here, one row per (contract, proxy), and the next run's pool starts from it: a proxy quarantined
by one run stays out of the next until its rest is over, then one request re-checks it. ``scrape/_health``
shows these rows. When two runs of a contract end at once, the last to write wins, row by row: either is a
true picture of the proxy a moment ago.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import sqlalchemy as sa
import sqlalchemy.dialects.postgresql
import sqlalchemy.dialects.sqlite

from scrape_contracts.adapters.schema import proxy_health
from scrape_contracts.adapters.store.engines import Connected
from scrape_contracts.adapters.store.rows import utc_now


@dataclass(frozen=True)
class StoredProxyHealth:
    contract: str
    proxy: str
    success: float
    latency_s: float | None
    rest_s: float
    recheck_at: dt.datetime | None  # None: in rotation
    score: float
    requests: int  # the counts are those of the run that wrote the row
    failures: int
    quarantines: int
    rechecks: int
    run_id: str
    updated_at: dt.datetime

    @property
    def quarantined(self) -> bool:
        return self.recheck_at is not None


def _utc(value: dt.datetime | None) -> dt.datetime | None:
    # SQLite hands back naive datetimes; they were written in UTC
    return value.replace(tzinfo=dt.timezone.utc) if value is not None and value.tzinfo is None else value


class ProxyHealthMixin(Connected):
    def proxy_health(self, contract: str) -> list[StoredProxyHealth]:
        """Every proxy row of ``contract`` (in no particular order)."""
        with self.engine.connect() as conn:
            rows = conn.execute(sa.select(proxy_health).where(proxy_health.c.contract == contract)).all()
        return [StoredProxyHealth(**{**row._mapping, "recheck_at": _utc(row.recheck_at),
                                     "updated_at": _utc(row.updated_at)}) for row in rows]

    def save_proxy_health(self, contract: str, run_id: str, rows: Sequence[Mapping[str, object]]) -> None:
        """Write each proxy's row (keys: the columns but contract, run_id and updated_at), replacing the last."""
        if not rows:
            return
        now = utc_now()
        values = [{**row, "contract": contract, "run_id": run_id, "updated_at": now} for row in rows]
        with self._tx() as conn:
            dialect = sa.dialects.postgresql if conn.dialect.name == "postgresql" else sa.dialects.sqlite
            insert = dialect.insert(proxy_health)
            kept = ("contract", "proxy")
            conn.execute(insert.on_conflict_do_update(
                index_elements=list(kept),
                set_={c.name: insert.excluded[c.name] for c in proxy_health.columns if c.name not in kept}),
                values)
