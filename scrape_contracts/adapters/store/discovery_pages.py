"""The sitemaps a contract's discovery read, kept with their validators for the next discovery's conditional
requests (``service/discovery.py``): one row per (contract, sitemap URL), its body gzip-compressed."""

from __future__ import annotations

import gzip
from collections.abc import Collection
from dataclasses import dataclass

import sqlalchemy as sa

from scrape_contracts.adapters.schema import discovery_pages
from scrape_contracts.adapters.store.engines import Connected
from scrape_contracts.adapters.store.rows import utc_now


@dataclass(frozen=True)
class KeptPage:
    body: bytes
    etag: str | None
    last_modified: str | None


class DiscoveryPagesMixin(Connected):
    def kept_discovery_page(self, contract: str, url: str) -> KeptPage | None:
        with self.engine.connect() as conn:
            row = conn.execute(sa.select(discovery_pages).where(
                discovery_pages.c.contract == contract, discovery_pages.c.url == url)).first()
        return KeptPage(gzip.decompress(row.body), row.etag, row.last_modified) if row is not None else None

    def keep_discovery_page(self, contract: str, url: str, body: bytes, *, etag: str | None,
                            last_modified: str | None) -> None:
        """Keep ``url``'s answer; one without a validator is not kept (the next discovery asks in full)."""
        where = sa.and_(discovery_pages.c.contract == contract, discovery_pages.c.url == url)
        with self._tx() as conn:
            conn.execute(discovery_pages.delete().where(where))
            if etag or last_modified:
                conn.execute(discovery_pages.insert().values(
                    contract=contract, url=url, etag=etag, last_modified=last_modified,
                    body=gzip.compress(body, mtime=0), fetched_at=utc_now()))

    def keep_only_discovery_pages(self, contract: str, urls: Collection[str]) -> None:
        """Forget the kept sitemaps of ``contract`` other than ``urls`` (no longer listed or declared)."""
        with self._tx() as conn:
            kept = conn.execute(sa.select(discovery_pages.c.url).where(
                discovery_pages.c.contract == contract)).scalars().all()
            gone = [url for url in kept if url not in urls]
            for start in range(0, len(gone), 500):
                conn.execute(discovery_pages.delete().where(
                    discovery_pages.c.contract == contract, discovery_pages.c.url.in_(gone[start:start + 500])))
