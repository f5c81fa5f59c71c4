"""Which page of a target comes next: a next link on the page, or a URL template with the page number.

Pure: the fetchers (adapters/fetch/paging.py) ask ``Pager.next_url`` after each page and stop on ``None``.
It stops at ``max_pages``, on a page seen before (same URL or the same bytes: a site that answers every
page number with its last page), and, with a URL template, on a page without items.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urljoin, urlsplit

from scrape_contracts.engine.limits import DEFAULT_LIMITS, LimitExceeded, Limits
from scrape_contracts.engine.select import SelectorBudget, parse_html, select, select_texts


class PaginationLike(Protocol):
    next: str | None
    url_template: str | None
    first_page: int
    max_pages: int


@dataclass
class Pager:
    pagination: PaginationLike
    target_url: str
    item_selector: str
    limits: Limits = DEFAULT_LIMITS
    seen_urls: set[str] = field(default_factory=set)
    seen_bodies: set[str] = field(default_factory=set)
    pages: int = 0
    stop_reason: str | None = None

    def next_url(self, page_url: str, html: str) -> str | None:
        """After reading ``html`` (fetched from ``page_url``): the URL of the next page, or None to stop."""
        self.pages += 1
        self.seen_urls.add(page_url)
        body = hashlib.sha256(html.encode("utf-8")).hexdigest()
        if self.pages >= self.pagination.max_pages:
            return self._stop(f"max_pages {self.pagination.max_pages} reached")
        self.seen_bodies.add(body)
        if self.pagination.url_template is not None:
            if not self._has_items(html):
                return self._stop(f"page {self.pages} has no items")
            number = self.pagination.first_page + self.pages
            url = self.pagination.url_template.format(url=self.target_url, page=number)
        else:
            root = parse_html(html)
            try:
                budget = SelectorBudget(root, self.limits.selector_max_cost)
                links = select_texts(root, self.pagination.next or "", budget)
            except LimitExceeded as exc:
                return self._stop(str(exc))
            if not links:
                return self._stop(f"no next link on page {self.pages}")
            url = urljoin(page_url, links[0].strip())
        if urlsplit(url).scheme not in ("http", "https"):
            return self._stop(f"next page {url!r} is not an http(s) URL")
        if url in self.seen_urls:
            return self._stop(f"next page {url} was read already")
        return url

    def repeated(self, html: str) -> bool:
        """A page with the same bytes as one read before: the site ran out of pages (not kept)."""
        if hashlib.sha256(html.encode("utf-8")).hexdigest() in self.seen_bodies:
            self._stop(f"page {self.pages + 1} repeats an earlier page")
            return True
        return False

    def _has_items(self, html: str) -> bool:
        root = parse_html(html)
        try:
            return bool(select(root, self.item_selector, SelectorBudget(root, self.limits.selector_max_cost)))
        except LimitExceeded:
            return False

    def _stop(self, reason: str) -> None:
        self.stop_reason = reason
        return None
