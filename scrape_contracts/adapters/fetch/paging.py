"""Fetchers that read every page of a list target and hand back one ``Page`` holding them all.

The pages are joined (``engine.lists.join_pages``) so the rest of a scrape stores, compares and heals a
target's pages as one document. No validators are sent: a 304 on the first page says nothing of the others.
A later page that fails fails the target (a partial set would look like removed records); a URL template
page answering 404 or 410 is the end of the list.
"""

from __future__ import annotations

import hashlib
from typing import Any

from scrape_contracts.adapters.fetch.page import AsyncClosesOnExit, ClosesOnExit, FetchError, Page
from scrape_contracts.engine.lists import join_pages
from scrape_contracts.engine.paging import Pager, PaginationLike

_END_OF_LIST = (404, 410)


def _combined(pages: list[Page], pager: Pager) -> Page:
    first = pages[0]
    html = join_pages([(p.url, p.html) for p in pages])
    attempts = tuple(a for p in pages for a in p.attempts) + (
        {"pages": len(pages), "stopped": pager.stop_reason or "no further page"},)
    return Page(url=first.url, requested_url=first.requested_url, status=first.status, html=html,
                sha256=hashlib.sha256(html.encode("utf-8")).hexdigest(), headers=dict(first.headers),
                elapsed_s=sum(p.elapsed_s for p in pages), encoding=first.encoding, attempts=attempts)


def _is_end(exc: FetchError, pager: Pager) -> bool:
    return pager.pagination.url_template is not None and exc.status in _END_OF_LIST


class PagingFetcher(ClosesOnExit):
    def __init__(self, inner: Any, pagination: PaginationLike, item_selector: str) -> None:
        self.inner, self.pagination, self.item_selector = inner, pagination, item_selector

    def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page:
        pager = Pager(self.pagination, url, self.item_selector)
        pages = [self.inner.fetch(url)]
        while (next_url := pager.next_url(pages[-1].url, pages[-1].html)) is not None:
            try:
                page = self.inner.fetch(next_url)
            except FetchError as exc:
                if _is_end(exc, pager):
                    pager.stop_reason = f"{next_url} answered {exc.status}"
                    break
                raise
            if pager.repeated(page.html):
                break
            pages.append(page)
        return _combined(pages, pager)

    def close(self) -> None:
        self.inner.close()


class AsyncPagingFetcher(AsyncClosesOnExit):
    def __init__(self, inner: Any, pagination: PaginationLike, item_selector: str) -> None:
        self.inner, self.pagination, self.item_selector = inner, pagination, item_selector

    async def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page:
        pager = Pager(self.pagination, url, self.item_selector)
        pages = [await self.inner.fetch(url)]
        while (next_url := pager.next_url(pages[-1].url, pages[-1].html)) is not None:
            try:
                page = await self.inner.fetch(next_url)
            except FetchError as exc:
                if _is_end(exc, pager):
                    pager.stop_reason = f"{next_url} answered {exc.status}"
                    break
                raise
            if pager.repeated(page.html):
                break
            pages.append(page)
        return _combined(pages, pager)

    async def aclose(self) -> None:
        await self.inner.aclose()


def paged(fetcher: Any, contract: Any, item_selector: str | None = None) -> Any:
    """``fetcher`` reading every page of a target when ``contract`` paginates, else ``fetcher`` itself;
    ``item_selector``: the one in force (a healed one), default the contract's."""
    records = getattr(contract, "records", None)
    if records is None or records.pagination is None:
        return fetcher
    item = item_selector or records.item
    if hasattr(fetcher, "aclose"):
        return AsyncPagingFetcher(fetcher, records.pagination, item)
    return PagingFetcher(fetcher, records.pagination, item)
