"""Discover a contract's targets: read its sitemaps and listing pages, record what was found, new and gone.

Everything is fetched through the project's fetcher (``fetch:``'s timeouts, retries, headers, size limit
and address guard, on every hop), one request at a time: discovery reads a few files and pages, and it
is the scrapes after it that need the per-host budget. Before any URL is fetched or kept it passes the
checks of a target (``target_urls``) and must be on the host of a declared source or in
``discover.hosts``: a sitemap on one shop cannot send the contract's credentials, or its scrapes, to
another site.

A source read only in part (a fetch failed, a limit was reached) still adds what it gave, but marks none
of its targets gone (``adapters/store/discovered.py``). Sitemaps are asked for conditionally: each answer
with an ETag or Last-Modified is kept in the store (``adapters/store/discovery_pages.py``), and a 304 next
time reads the kept copy, so an unchanged sitemap costs no download and still lists its targets. Dagster-free: ``scrape/C/targets`` calls
``discover`` and turns the record into events and partitions.
"""

from __future__ import annotations

import datetime as dt
from collections import deque
from dataclasses import dataclass, field

from scrape_contracts import settings
from scrape_contracts.adapters.fetch import Fetcher, FetchError, Page, fetcher_for
from scrape_contracts.adapters.fetch.proxy_book import ProxyBook
from scrape_contracts.adapters.fetch.robots import is_robots_url, sitemaps_in
from scrape_contracts.adapters.store import DiscoveryChanges, FoundTarget, ProjectStore
from scrape_contracts.adapters.store.discovery_pages import KeptPage
from scrape_contracts.contract.discover import Discover, ListingSource, SitemapSource
from scrape_contracts.contract.fetch import FetchSettings
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.contract.targets import Target
from scrape_contracts.engine.crawl import canonical, host_of, keeps, page_links
from scrape_contracts.engine.limits import LimitExceeded, Limits
from scrape_contracts.engine.sitemaps import SitemapError, SitemapKind, read_sitemap
from scrape_contracts.engine.urls import UrlParseError
from scrape_contracts.service.target_urls import checked_target, shown

SHOWN = 20  # refused URLs named in the record (the rest counted)
_INDEX_DEPTH = 3  # an index of indexes of sitemaps at most: real sites nest one level, loops nest for ever


@dataclass
class SourceReport:
    """What one declared source gave: pages fetched, targets found, and why it was not read in full."""

    url: str
    kind: str  # sitemap | listing
    fetched: list[str] = field(default_factory=list)
    found: int = 0
    problems: list[str] = field(default_factory=list)
    not_modified: int = 0  # sitemaps answered 304 and read from the kept copy

    @property
    def complete(self) -> bool:
        return not self.problems

    def as_dict(self) -> dict[str, object]:
        return {"url": self.url, "kind": self.kind, "fetched": len(self.fetched), "found": self.found,
                "not_modified": self.not_modified, "complete": self.complete, "problems": self.problems[:10]}


@dataclass
class Discovery:
    """A discovery run: the targets found (partition key → target), per source, what was left out."""

    found: dict[str, FoundTarget] = field(default_factory=dict)
    sources: list[SourceReport] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # "URL: why", the first SHOWN
    refused_count: int = 0
    ignored: int = 0  # found, but not matching the source's keep pattern
    changes: DiscoveryChanges | None = None

    @property
    def complete(self) -> list[str]:
        return [s.url for s in self.sources if s.complete]

    def fetched(self) -> list[str]:
        return [url for s in self.sources for url in s.fetched]


def discovery_fetch_settings(fetch: FetchSettings, discover: Discover) -> FetchSettings:
    """The contract's fetch settings for sitemaps and listings: over HTTP (a sitemap is not rendered) unless
    the contract reads fixture files, with discover.max_bytes as the size limit."""
    adapter = "fixture" if fetch.adapter == "fixture" else "http"
    return fetch.model_copy(update={"adapter": adapter, "browser": None, "max_bytes": discover.max_bytes})


def discover(loaded: LoadedContract, store: ProjectStore, fetch: FetchSettings | None = None, *,
             fetcher: Fetcher | None = None, limits: Limits | None = None,
             now: dt.datetime | None = None, run_id: str = "discovery") -> Discovery:
    """Read every source of ``loaded``'s ``discover:``, record the result in ``store``; the record says what
    was found, fetched, refused, and which targets are new, back or gone (``Discovery.changes``). The
    proxies' health lasts in ``store`` as a scrape's does (``run_id`` names the run that left it): a proxy the
    discovery quarantined rests out its quarantine in the next run, and the other way round."""
    contract = loaded.contract
    if contract.discover is None:
        raise ValueError(f"contract {contract.name!r} has no discover: block")
    settings_used = discovery_fetch_settings(fetch or contract.fetch, contract.discover)
    own = fetcher is None
    book = ProxyBook(store.url, contract.name, run_id) if settings_used.proxies else None
    fetcher = fetcher or fetcher_for(settings_used, loaded.base_dir, keep_body=True, proxy_book=book)
    try:
        crawl = _Crawl(contract.discover, fetcher, settings_used.allow_private_addresses,
                       limits or settings.engine_limits(), store, contract.name)
        found = crawl.run()
    finally:
        if own:
            fetcher.close()
    store.keep_only_discovery_pages(contract.name, crawl.sitemaps)
    found.changes = store.record_discovery(
        contract.name, found.found, complete=found.complete, declared=contract.discover.sources(),
        keep_lastmod=contract.discover.skip_unchanged, now=now)
    return found


class _Crawl:
    def __init__(self, discover: Discover, fetcher: Fetcher, allow_private: bool, limits: Limits,
                 store: ProjectStore, contract: str) -> None:
        self.discover = discover
        self.store, self.contract = store, contract
        self.sitemaps: set[str] = set()  # the sitemaps answered this time: their kept copies stay
        self.fetcher = fetcher
        self.allow_private = allow_private
        self.limits = limits
        self.hosts = {host_of(url) for url in discover.sources()} | set(discover.hosts)
        self.result = Discovery()
        self.sitemaps_read = 0

    def run(self) -> Discovery:
        for sitemap in self.discover.sitemaps:
            self._sitemap(sitemap, self._report(sitemap.url, "sitemap"))
        for listing in self.discover.listings:
            self._listing(listing, self._report(listing.url, "listing"))
        return self.result

    def _report(self, url: str, kind: str) -> SourceReport:
        report = SourceReport(url, kind)
        self.result.sources.append(report)
        return report

    def _refuse(self, url: str, why: str) -> None:
        self.result.refused_count += 1
        if len(self.result.refused) < SHOWN:
            self.result.refused.append(f"{shown(url)}: {why}")

    def _checked(self, url: str) -> Target | str:
        """The target ``url`` would be, or why it may be neither fetched nor kept."""
        checked = checked_target(url, allow_private=self.allow_private)
        if not isinstance(checked, str) and host_of(url) not in self.hosts:
            return (f"host {host_of(url)} is not the host of a source; add it to discover.hosts if its pages "
                    "belong to this contract")
        return checked

    def _fetch(self, url: str, report: SourceReport, kept: KeptPage | None = None) -> Page | None:
        problem = self._checked(url)
        if isinstance(problem, str):
            self._refuse(url, problem)
            report.problems.append(f"{shown(url)} not fetched: {problem}")
            return None
        report.fetched.append(url)
        try:
            if kept is not None:
                return self.fetcher.fetch(url, etag=kept.etag, last_modified=kept.last_modified)
            return self.fetcher.fetch(url)
        except FetchError as exc:
            report.problems.append(str(exc))
            return None

    def _fetch_sitemap(self, url: str, report: SourceReport) -> tuple[Page, bytes] | None:
        """A sitemap (or robots.txt source) and its body: asked for with the kept copy's validators, and on
        a 304 the kept body; an answer with validators is kept for next time."""
        kept = self.store.kept_discovery_page(self.contract, url)
        page = self._fetch(url, report, kept)
        if page is None:
            return None
        self.sitemaps.add(url)
        if page.not_modified and kept is not None:
            report.not_modified += 1
            return page, kept.body
        body = page.body if page.body is not None else page.html.encode("utf-8")
        self.store.keep_discovery_page(self.contract, url, body, etag=page.etag, last_modified=page.last_modified)
        return page, body

    def _offer(self, url: str, source: str, report: SourceReport, keep: str | None,
               lastmod: dt.datetime | None = None) -> None:
        """A URL a source gave: kept as a target when it passes the checks and the pattern."""
        try:
            url = canonical(url)
        except UrlParseError as exc:
            self._refuse(url, str(exc))
            return
        target = self._checked(url)
        if isinstance(target, str):
            self._refuse(url, target)
            return
        if keep is not None and not self._kept(keep, url, report):
            self.result.ignored += 1
            return
        if target.partition_key in self.result.found:
            return
        if len(self.result.found) >= self.discover.max_targets:
            report.problems.append(f"max_targets {self.discover.max_targets} reached: the rest is left out")
            return
        self.result.found[target.partition_key] = FoundTarget(target.url, source, lastmod)
        report.found += 1

    def _sitemap(self, source: SitemapSource, report: SourceReport) -> None:
        queue: deque[tuple[str, int]] = deque([(source.url, 0)])
        seen = {source.url}
        while queue:
            url, level = queue.popleft()
            if self.sitemaps_read >= self.discover.max_sitemaps:
                limit = self.discover.max_sitemaps
                report.problems.append(f"max_sitemaps {limit} reached before {shown(url)}")
                return
            self.sitemaps_read += 1
            answered = self._fetch_sitemap(url, report)
            if answered is None:
                continue
            page, body = answered
            if level == 0 and is_robots_url(url):  # its Sitemap: lines, read as an index's entries
                children = sitemaps_in(body.decode("utf-8", "replace"))
                if not children:
                    report.problems.append(f"{shown(url)} lists no Sitemap: line; name the sitemap itself")
            else:
                try:
                    sitemap = read_sitemap(body, max_bytes=self.discover.max_bytes)
                except SitemapError as exc:
                    report.problems.append(f"{shown(url)}: {exc}")
                    continue
                if sitemap.kind is not SitemapKind.INDEX:
                    for entry in sitemap.entries:
                        self._offer(entry.loc, source.url, report, source.keep, entry.lastmod)
                    continue
                children = [entry.loc for entry in sitemap.entries]
            for loc in children:
                try:
                    child = canonical(loc, page.url)
                except UrlParseError as exc:
                    report.problems.append(f"{shown(url)} lists a sitemap that is no web address: {exc}")
                    continue
                if level + 1 >= _INDEX_DEPTH:
                    report.problems.append(f"{shown(child)}: sitemap indexes nested more than "
                                           f"{_INDEX_DEPTH} deep")
                elif child not in seen:
                    seen.add(child)
                    queue.append((child, level + 1))

    def _listing(self, source: ListingSource, report: SourceReport) -> None:
        queue: deque[tuple[str, int]] = deque([(source.url, 0)])
        seen = {source.url}
        pages = 0
        while queue:
            url, depth = queue.popleft()
            if pages >= source.max_pages:
                report.problems.append(f"max_pages {source.max_pages} reached before {shown(url)}")
                return
            pages += 1
            page = self._fetch(url, report)
            if page is None:
                continue
            try:
                followed = page_links(page.html, page.url, source.follow, self.limits)
                more = page_links(page.html, page.url, source.next, self.limits)[:1] if source.next else []
            except (LimitExceeded, ValueError) as exc:
                report.problems.append(f"{shown(url)}: {exc}")
                continue
            for link in followed:
                if source.keep is None or self._kept(source.keep, link, report):
                    self._offer(link, source.url, report, None)
                elif depth < source.depth and link not in seen and not isinstance(self._checked(link), str):
                    seen.add(link)
                    queue.append((link, depth + 1))
                else:
                    self.result.ignored += 1
            for link in more:  # the next page of this listing: the same depth
                if link not in seen:
                    seen.add(link)
                    queue.append((link, depth))

    def _kept(self, pattern: str, url: str, report: SourceReport) -> bool:
        try:
            return keeps(pattern, url, self.limits)
        except LimitExceeded as exc:
            report.problems.append(str(exc))
            return False
