"""Fetchers that read every page of a list target and hand back one ``Page`` holding them all.

The pages are joined (``engine.lists.join_pages``) so the rest of a scrape stores, compares and heals a
target's pages as one document. A later page that fails fails the target (a partial set would look like
removed records); a URL template page answering 404 or 410 is the end of the list.

Conditional requests: the joined page's ``etag`` is a token of the walk (``_Walked``: each page's URL, its
own validators and a digest of its bytes, and the URL that ended the walk when it was not kept). Given back
as ``etag`` on the next sweep, each page is asked again with its own validators, in the order last read; a
page answering 304 (or the same bytes) has the same next link, so the walk goes on without its body. When
every page is unchanged (and the URL that ended the list still ends it), the fetch is a 304
(``not_modified``): the target is unchanged for one cheap request per page. At the first page that changed,
the list is read again from its first page as without validators, reusing the changed page just fetched.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from scrape_contracts.adapters.fetch.page import AsyncClosesOnExit, ClosesOnExit, FetchError, Page
from scrape_contracts.engine.lists import join_pages
from scrape_contracts.engine.paging import Pager, PaginationLike

_END_OF_LIST = (404, 410)
_TOKEN = "scrape-contracts-pages:"
MAX_RECORDED_PAGES = 50  # longer lists are read without validators: the token is stored with every candidate


def _digest(html: str) -> str:
    return hashlib.sha256(html.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class _Get:
    """A request the paging loop wants made (with a page's own validators when it has some)."""

    url: str
    etag: str | None = None
    last_modified: str | None = None


@dataclass(frozen=True)
class _Walked:
    """How a target's pages were read: per page (url, etag, last_modified, digest), the URL that ended the
    walk without being kept (a 404/410 or a repeated page), and the settings it was read under."""

    settings: str
    pages: tuple[tuple[str, str | None, str | None, str], ...]
    end: str | None = None

    def token(self) -> str | None:
        if len(self.pages) > MAX_RECORDED_PAGES or not any(e or m for _, e, m, _ in self.pages):
            return None  # nothing to ask conditionally: the joined page's bytes still tell "unchanged"
        data = json.dumps({"s": self.settings, "p": self.pages, "e": self.end}, separators=(",", ":"))
        return _TOKEN + base64.urlsafe_b64encode(data.encode()).decode()

    @classmethod
    def parse(cls, token: str | None, settings: str) -> _Walked | None:
        """The walk a token describes, when it was read under these settings (else: read afresh)."""
        if not token or not token.startswith(_TOKEN):
            return None
        try:
            data = json.loads(base64.urlsafe_b64decode(token[len(_TOKEN):]))
            walked = cls(data["s"], tuple((u, e, m, d) for u, e, m, d in data["p"]), data["e"])
        except (ValueError, KeyError, TypeError):
            return None
        return walked if walked.settings == settings and walked.pages else None


def _settings(pagination: PaginationLike, item_selector: str) -> str:
    """What decides where a walk goes and stops: a walk recorded under other settings is not replayed."""
    spec = [pagination.next, pagination.url_template, pagination.first_page, pagination.max_pages, item_selector]
    return hashlib.sha256(json.dumps(spec).encode()).hexdigest()[:12]


def _combined(pages: list[Page], urls: list[str], pager: Pager, settings: str, end: str | None) -> Page:
    """The pages read as one (``urls``: what was asked for each, the walk's token records them)."""
    first = pages[0]
    html = join_pages([(p.url, p.html) for p in pages])
    attempts = tuple(a for p in pages for a in p.attempts) + (
        {"pages": len(pages), "stopped": pager.stop_reason or "no further page"},)
    walked = _Walked(settings, tuple((url, p.etag, p.last_modified, _digest(p.html))
                                     for url, p in zip(urls, pages, strict=True)), end)
    return Page(url=first.url, requested_url=first.requested_url, status=first.status, html=html,
                sha256=hashlib.sha256(html.encode("utf-8")).hexdigest(), headers=dict(first.headers),
                elapsed_s=sum(p.elapsed_s for p in pages), encoding=first.encoding, attempts=attempts,
                etag=walked.token())


def _not_modified(answers: list[Page], walked: _Walked) -> Page:
    """Every page as last read: a 304 of the whole target, under the validators the pages answered with."""
    pages = tuple((url, a.etag or etag, a.last_modified or modified, digest)
                  for (url, etag, modified, digest), a in zip(walked.pages, answers, strict=True))
    attempts = tuple(a for p in answers for a in p.attempts) + (
        {"pages": len(walked.pages), "stopped": "every page not modified"},)
    return dataclasses.replace(answers[0], status=304, html="", sha256="", not_modified=True, headers={},
                               elapsed_s=sum(p.elapsed_s for p in answers), attempts=attempts,
                               etag=_Walked(walked.settings, pages, walked.end).token(), last_modified=None)


def _is_end(exc: FetchError, pager: Pager) -> bool:
    return pager.pagination.url_template is not None and exc.status in _END_OF_LIST


def _revalidate(walked: _Walked, pager: Pager, fetched: dict[str, Page]
                ) -> Generator[_Get, Page | FetchError, list[Page] | None]:
    """Ask each page as last read, with its validators: their answers when none changed, else None (a
    changed page's answer is left in ``fetched`` for the walk that reads the list again)."""
    answers: list[Page] = []
    for url, etag, modified, digest in walked.pages:
        got = yield _Get(url, etag, modified)
        if isinstance(got, FetchError):
            return None  # read again as without validators, which fails or ends the list as it should
        if not (got.not_modified or _digest(got.html) == digest):
            fetched[url] = got
            return None
        answers.append(got)
    if walked.end is not None:
        # the list ended on a page it did not keep: it must end there still
        got = yield _Get(walked.end)
        if isinstance(got, FetchError):
            return answers if _is_end(got, pager) else None
        if _digest(got.html) not in {digest for *_, digest in walked.pages}:
            fetched[walked.end] = got
            return None
    return answers


def _walk(pager: Pager, url: str, walked: _Walked | None, settings: str
          ) -> Generator[_Get, Page | FetchError, Page]:
    """The paging loop without I/O, shared by both fetchers: yields each request and is sent what it gave
    (its page, or the ``FetchError``); returns the target's page (joined, or a 304 when nothing changed)."""
    fetched: dict[str, Page] = {}
    if walked is not None:
        answers = yield from _revalidate(walked, pager, fetched)
        if answers is not None:
            return _not_modified(answers, walked)
    first = fetched.pop(url, None) or (yield _Get(url))
    if isinstance(first, FetchError):
        raise first
    pages, urls, end = [first], [url], None
    while (next_url := pager.next_url(pages[-1].url, pages[-1].html)) is not None:
        got = fetched.pop(next_url, None) or (yield _Get(next_url))
        if isinstance(got, FetchError):
            if _is_end(got, pager):
                pager.stop_reason, end = f"{next_url} answered {got.status}", next_url
                break
            raise got
        if pager.repeated(got.html):
            end = next_url
            break
        pages.append(got)
        urls.append(next_url)
    return _combined(pages, urls, pager, settings, end)


class _Paging:
    """What both fetchers share: the settings, and the I/O-free walk of one target's pages (``_walk``)."""

    def __init__(self, inner: Any, pagination: PaginationLike, item_selector: str) -> None:
        self.inner, self.pagination, self.item_selector = inner, pagination, item_selector
        self.settings = _settings(pagination, item_selector)

    def _walk(self, url: str, etag: str | None) -> Generator[Any, Any, Page]:
        return _walk(Pager(self.pagination, url, self.item_selector), url, _Walked.parse(etag, self.settings),
                     self.settings)


class PagingFetcher(_Paging, ClosesOnExit):
    def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page:
        walk = self._walk(url, etag)
        try:
            get = next(walk)
            while True:
                try:
                    got: Page | FetchError = self.inner.fetch(get.url, etag=get.etag,
                                                              last_modified=get.last_modified)
                except FetchError as exc:
                    got = exc
                get = walk.send(got)
        except StopIteration as done:
            return done.value

    def close(self) -> None:
        self.inner.close()


class AsyncPagingFetcher(_Paging, AsyncClosesOnExit):
    async def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page:
        walk = self._walk(url, etag)
        try:
            get = next(walk)
            while True:
                try:
                    got: Page | FetchError = await self.inner.fetch(get.url, etag=get.etag,
                                                                    last_modified=get.last_modified)
                except FetchError as exc:
                    got = exc
                get = walk.send(got)
        except StopIteration as done:
            return done.value

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
