"""``discover:``: where a contract finds its targets (sitemaps, listing pages), read by ``scrape/C/targets``.

::

    targets: {dynamic: true}                 # (the default when discover: is given)
    discover:
      schedule: "0 5 * * *"                  # scrape/C/targets' own schedule (discover_C_schedule)
      skip_unchanged: true                   # a sitemap lastmod not newer than the last scrape: not swept
      sitemaps:
        - https://shop.example/sitemap_index.xml        # an index, sitemaps, .xml.gz: all read
        - https://shop.example/robots.txt               # its Sitemap: lines
        - {url: https://shop.example/sitemap-blog.xml, keep: "/p/\\d+"}
      listings:
        - url: https://shop.example/c/shoes
          follow: "a.product"                # links to targets (an element's href, or ::attr(...))
          keep: "/p/\\d+$"                   # a followed link is a target when it matches; else a listing
          next: "a[rel=next]"                # the next page of the listing
          depth: 1                           # listing links followed this many levels down
          max_pages: 50

Every URL a source gives, and every page discovery fetches, is checked as a target is: absolute http(s),
no user name or password, the address guard of ``fetch:``; and it must be on the host of one of the
sources (or in ``hosts:``), so that ``fetch.headers`` meant for the site never reach another one.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from scrape_contracts.contract.base import Strict, compiled
from scrape_contracts.contract.schedule import Schedule
from scrape_contracts.contract.targets import Target

DEFAULT_SCHEDULE = "0 0 * * *"  # every day at midnight (UTC): a sitemap changes daily at most, mostly


class Source(Strict):
    """What every source has: its URL, checked as a target's is, and an optional ``keep`` pattern."""

    url: str
    keep: str | None = Field(None, description="A regular expression a URL must match to become a target.")

    @field_validator("url")
    @classmethod
    def _url_is_a_target_url(cls, value: str) -> str:
        try:
            Target(url=value)  # absolute http(s), not too long, no user name or password
        except ValidationError as exc:
            message = exc.errors()[0]["msg"].removeprefix("Value error, ")
            raise ValueError(message.replace("target URL", "source URL", 1)) from None
        return value

    @field_validator("keep")
    @classmethod
    def _keep_compiles(cls, value: str | None) -> str | None:
        if value is not None:
            import regex

            try:
                regex.compile(value)
            except regex.error as exc:
                raise ValueError(f"keep {value!r} is not a valid regular expression: {exc}") from None
        return value


class SitemapSource(Source):
    """A sitemap, a sitemap index or a plain-text list of URLs (gzip or not)."""


class ListingSource(Source):
    """A listing page (a category, search results): its links lead to targets and to further listings."""

    follow: str = Field(description="Selector of the links to follow, e.g. \"a.product\" (an element's "
                                    "href) or \"a.product::attr(href)\".")
    keep: str | None = Field(
        None, description="A followed link matching this regular expression is a target; the others are "
                          "listing pages, read while depth allows. Without it every followed link is a "
                          "target.")
    next: str | None = Field(None, description="Selector of the next page's link, e.g. \"a[rel=next]\".")
    depth: int = Field(0, ge=0, le=5, description="Levels of listing links followed from this page (0: only "
                                                  "this page and its next pages).")
    max_pages: int = Field(50, ge=1, le=10_000, description="Listing pages read at most from this source.")

    @field_validator("follow", "next")
    @classmethod
    def _selector_compiles(cls, value: str | None) -> str | None:
        return None if value is None else compiled(value)


class Discover(Strict):
    """``discover:``: the sources of a dynamic contract's targets, and how often they are read."""

    sitemaps: list[SitemapSource] = Field(default_factory=list)
    listings: list[ListingSource] = Field(default_factory=list)
    schedule: Schedule = Field(default_factory=lambda: Schedule(cron=DEFAULT_SCHEDULE),
                               description="When discover_C_schedule reads the sources (a cron string, or "
                                           "{cron, timezone}); it starts stopped, as every schedule does.")
    skip_unchanged: bool = Field(
        False, description="A target whose sitemap lastmod is not after its last successful scrape is left "
                           "out of sweeps (schedules, `scrape-contracts run`) until its lastmod moves.")
    hosts: list[str] = Field(default_factory=list,
                             description="Hosts, besides the sources' own, that targets and followed links "
                                         "may be on (host or host:port).")
    max_targets: int = Field(50_000, ge=1, le=1_000_000,
                             description="Targets kept at most per discovery run.")
    max_sitemaps: int = Field(1_000, ge=1, le=100_000, description="Sitemap files read at most per run.")
    max_bytes: int = Field(50_000_000, gt=0, le=500_000_000,
                           description="Largest sitemap or listing page, after gzip (the protocol's own "
                                       "limit).")

    @field_validator("sitemaps", mode="before")
    @classmethod
    def _url_strings(cls, value: Any) -> Any:
        return [{"url": v} if isinstance(v, str) else v for v in value] if isinstance(value, list) else value

    @field_validator("schedule", mode="before")
    @classmethod
    def _cron_string(cls, value: Any) -> Any:
        return {"cron": value} if isinstance(value, str) else value

    @field_validator("hosts")
    @classmethod
    def _hosts_lower(cls, value: list[str]) -> list[str]:
        bad = [h for h in value if not h or "/" in h or "@" in h or h != h.strip()]
        if bad:
            raise ValueError(f"hosts are names such as shop.example or shop.example:8080, not {bad[0]!r}")
        return [h.lower() for h in value]

    @model_validator(mode="after")
    def _has_a_source(self) -> Discover:
        if not self.sitemaps and not self.listings:
            raise ValueError("discover: needs at least one source: sitemaps: [URL] or listings: "
                             "[{url, follow}]")
        return self

    def sources(self) -> list[str]:
        """The declared sources' URLs (a target remembers the one that found it)."""
        return [s.url for s in self.sitemaps] + [s.url for s in self.listings]
