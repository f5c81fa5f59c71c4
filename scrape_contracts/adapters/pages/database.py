"""Raw pages in the project store's database (table ``sc_pages``): every worker host that reaches the store
reaches its pages, with no shared folder. For PostgreSQL, the production store; SQLite works the same."""

from __future__ import annotations

import time
from collections.abc import Callable

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from scrape_contracts.adapters.pages.base import PageStorageError, checked_sha, compressed, decompressed, encoded
from scrape_contracts.adapters.schema import pages as pages_table
from scrape_contracts.adapters.store import ProjectStore, shown_url, unavailable
from scrape_contracts.adapters.store.outages import again_if_broken

_DELETE_AT_ONCE = 500  # pages per DELETE: well under SQLite's limit on bound parameters
_DISK_FULL = "53100"  # PostgreSQL's SQLSTATE disk_full


class DatabasePages:
    """Pages in ``sc_pages`` of the project store at ``url`` (migrated as the store is)."""

    def __init__(self, url: str, clock: Callable[[], float] = time.time) -> None:
        self.location = url
        self.engine = ProjectStore(url).engine
        self.clock = clock

    def __repr__(self) -> str:
        return f"DatabasePages({shown_url(self.location)})"

    def put(self, html: str) -> str:
        """Store ``html`` and return its sha256; a page stored before is only made fresh again."""
        data, sha = encoded(html)
        now = self.clock()
        table = pages_table

        def store() -> None:
            with self.engine.begin() as conn:
                # fetched again: fresh for ``prune``'s grace period, so a run storing it now never loses it
                if conn.execute(sa.update(table).where(table.c.sha256 == sha).values(stored_at=now)).rowcount:
                    return
                conn.execute(_insert_or_touch(self.engine).values(sha256=sha, body=compressed(data),
                                                                   stored_at=now)
                             .on_conflict_do_update(index_elements=[table.c.sha256], set_={"stored_at": now}))

        try:
            again_if_broken(store)  # stored twice is stored once: the database gone mid-way is waited for
        except DBAPIError as exc:
            raise self._error(exc) from None
        return sha

    def get(self, sha256: str) -> str | None:
        def read() -> object:
            with self.engine.connect() as conn:
                return conn.execute(sa.select(pages_table.c.body)
                                    .where(pages_table.c.sha256 == checked_sha(sha256))).scalar()

        blob = again_if_broken(read)
        return None if blob is None else decompressed(bytes(blob))

    def exists(self, sha256: str) -> bool:
        with self.engine.connect() as conn:
            return conn.execute(sa.select(sa.literal(1))
                                .where(pages_table.c.sha256 == checked_sha(sha256))).first() is not None

    def prune(self, keep: set[str], older_than: float | None = None) -> int:
        """Delete every page not in ``keep`` last stored before ``older_than`` (None: whatever its age)."""
        query = sa.select(pages_table.c.sha256)
        if older_than is not None:
            query = query.where(pages_table.c.stored_at < older_than)
        with self.engine.connect() as conn:
            stale = [sha for sha in conn.execute(query).scalars() if sha not in keep]
        removed = 0
        for start in range(0, len(stale), _DELETE_AT_ONCE):
            chunk = stale[start:start + _DELETE_AT_ONCE]
            delete = sa.delete(pages_table).where(pages_table.c.sha256.in_(chunk))
            if older_than is not None:  # stored again since it was listed: kept
                delete = delete.where(pages_table.c.stored_at < older_than)
            with self.engine.begin() as conn:
                removed += conn.execute(delete).rowcount
        return removed

    def count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(sa.select(sa.func.count()).select_from(pages_table)).scalar() or 0)

    def _error(self, exc: DBAPIError) -> PageStorageError:
        where = shown_url(self.location)
        down = unavailable(exc, where)
        if down is not None:
            return PageStorageError("page_storage", f"could not store the page: {down}")
        if getattr(exc.orig, "pgcode", None) == _DISK_FULL:
            return PageStorageError("no_space", f"no space left for the pages in the database at {where}: free "
                                    "space on its server or choose another page storage (SCRAPE_CONTRACTS_PAGES)")
        first = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else type(exc.orig).__name__
        return PageStorageError("page_storage", f"could not store the page in the database at {where}: {first}")


def _insert_or_touch(engine: sa.Engine):  # noqa: ANN202 (the dialect's Insert, which has on_conflict_do_update)
    if engine.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert
    else:
        from sqlalchemy.dialects.sqlite import insert
    return insert(pages_table)
