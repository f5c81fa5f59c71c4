"""``ProxyBook``: where a contract's proxies' health lasts between runs — the project store.

Like the provider's ``JobBook``, a book is small and picklable (the store's URL, not the store), so a batch
hands it to its fetching process, which opens the store itself. The fetcher reads it once, when its pool
is made (``load``), and writes it once, when it closes (``save``). Neither may cost a page: a store that
cannot be read or written is logged and the run goes on with a fresh pool (or without saving).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from scrape_contracts.adapters.proxies import SavedHealth

log = logging.getLogger(__name__)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


@dataclass(frozen=True)
class ProxyBook:
    db_url: str = field(repr=False)  # may hold the database's password
    contract: str
    run_id: str
    clock: Callable[[], dt.datetime] = field(default=_now, repr=False, compare=False)  # wall clock, UTC

    def _store(self):  # noqa: ANN202
        from scrape_contracts.adapters.store import ProjectStore

        return ProjectStore(self.db_url)  # one engine per URL per process: cheap after the first

    def load(self) -> list[SavedHealth]:
        try:
            rows = self._store().proxy_health(self.contract)
        except Exception as exc:  # noqa: BLE001 (the store's trouble must not cost a page)
            log.warning("proxy health of %s not read from the project store (%s): this run starts afresh",
                        self.contract, type(exc).__name__)
            return []
        now = self.clock()
        return [SavedHealth(r.proxy, r.success, r.latency_s, r.rest_s,
                            None if r.recheck_at is None else (r.recheck_at - now).total_seconds(), r.score)
                for r in rows]

    def save(self, saved: Sequence[SavedHealth], health: Sequence[dict[str, object]]) -> None:
        """``saved``: the pool's lasting health; ``health``: its rows for this run (the counts)."""
        counts = {h["proxy"]: h for h in health}
        now = self.clock()
        rows = [{
            "proxy": s.proxy, "success": s.success, "latency_s": s.latency_s, "rest_s": s.rest_s,
            "recheck_at": None if s.recheck_in_s is None else now + dt.timedelta(seconds=s.recheck_in_s),
            "score": s.score, **{k: int(counts.get(s.proxy, {}).get(k, 0) or 0)  # type: ignore[call-overload]
                                 for k in ("requests", "failures", "quarantines", "rechecks")},
        } for s in saved]
        try:
            self._store().save_proxy_health(self.contract, self.run_id, rows)
        except Exception as exc:  # noqa: BLE001
            log.warning("proxy health of %s not written to the project store (%s): the next run starts "
                        "from the last one written", self.contract, type(exc).__name__)
