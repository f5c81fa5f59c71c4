"""Fetchers that read every page of a list target and hand back one ``Page`` holding them all.

The pages are joined (``engine.lists.join_pages``) so the rest of a scrape stores, compares and heals a
target's pages as one document. No validators are sent: a 304 on the first page says nothing of the others.
A later page that fails fails the target (a partial set would look like removed records); a URL template
page answering 404 or 410 is the end of the list.
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator
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


def _walk(pager: Pager, first: Page) -> Generator[str, Page | FetchError, list[Page]]:
    """The paging loop without I/O, shared by both fetchers: yields each next URL and is sent what fetching
    it gave (its page, or the ``FetchError``); returns the pages read."""
    pages = [first]
    while (next_url := pager.next_url(pages[-1].url, pages[-1].html)) is not None:
        got = yield next_url
        if isinstance(got, FetchError):
            if _is_end(got, pager):
                pager.stop_reason = f"{next_url} answered {got.status}"
                break
            raise got
        if pager.repeated(got.html):
            break
        pages.append(got)
    return pages


def _fetched(fetch: Any, url: str) -> Page | FetchError:
    try:
        return fetch(url)
    except FetchError as exc:
        return exc


class PagingFetcher(ClosesOnExit):
    def __init__(self, inner: Any, pagination: PaginationLike, item_selector: str) -> None:
        self.inner, self.pagination, self.item_selector = inner, pagination, item_selector

    def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page:
        pager = Pager(self.pagination, url, self.item_selector)
        walk = _walk(pager, self.inner.fetch(url))
        try:
            next_url = next(walk)
            while True:
                next_url = walk.send(_fetched(self.inner.fetch, next_url))
        except StopIteration as done:
            return _combined(done.value, pager)

    def close(self) -> None:
        self.inner.close()


class AsyncPagingFetcher(AsyncClosesOnExit):
    def __init__(self, inner: Any, pagination: PaginationLike, item_selector: str) -> None:
        self.inner, self.pagination, self.item_selector = inner, pagination, item_selector

    async def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page:
        pager = Pager(self.pagination, url, self.item_selector)
        walk = _walk(pager, await self.inner.fetch(url))
        try:
            next_url = next(walk)
            while True:
                try:
                    got: Page | FetchError = await self.inner.fetch(next_url)
                except FetchError as exc:
                    got = exc
                next_url = walk.send(got)
        except StopIteration as done:
            return _combined(done.value, pager)

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
