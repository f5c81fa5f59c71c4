"""Sitemaps from hostile bytes: gzip bombs, entity tricks and external entities are refused, in bounded
memory; real sitemaps (namespaced or not, gzip, several gzip members, plain text) are read with their
lastmod."""

from __future__ import annotations

import datetime as dt
import gzip
import tracemalloc

import pytest

from scrape_contracts.engine.crawl import canonical, page_links
from scrape_contracts.engine.sitemaps import SitemapError, SitemapKind, inflate, parse_lastmod, read_sitemap

UTC = dt.timezone.utc
URLSET = (b'<?xml version="1.0" encoding="UTF-8"?>\n'
          b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
          b'<url><loc> https://shop.example/p/1 </loc><lastmod>2026-05-01</lastmod></url>'
          b'<url><loc>https://shop.example/p/2</loc><lastmod>2026-05-01T10:30:00+02:00</lastmod></url>'
          b'<url><loc>https://shop.example/p/3</loc><lastmod>not a date</lastmod></url>'
          b'<url><changefreq>daily</changefreq></url></urlset>')


def test_a_urlset_gives_its_locations_and_lastmods_in_utc() -> None:
    sitemap = read_sitemap(URLSET)
    assert sitemap.kind is SitemapKind.URLSET
    assert [(e.loc, e.lastmod) for e in sitemap.entries] == [
        ("https://shop.example/p/1", dt.datetime(2026, 5, 1, tzinfo=UTC)),
        ("https://shop.example/p/2", dt.datetime(2026, 5, 1, 8, 30, tzinfo=UTC)),
        ("https://shop.example/p/3", None)]  # an unreadable lastmod: the target is always scraped


def test_an_index_without_namespace_gzip_in_several_members_and_a_text_sitemap() -> None:
    index = b"<sitemapindex><sitemap><loc>https://s.example/a.xml.gz</loc></sitemap></sitemapindex>"
    assert read_sitemap(index).kind is SitemapKind.INDEX
    assert [e.loc for e in read_sitemap(index).entries] == ["https://s.example/a.xml.gz"]
    half = len(URLSET) // 2
    members = gzip.compress(URLSET[:half]) + gzip.compress(URLSET[half:])
    assert len(read_sitemap(members).entries) == 3
    text = read_sitemap(b"\xef\xbb\xbfhttps://s.example/1\n# not a URL\nhttps://s.example/2\r\n")
    assert text.kind is SitemapKind.TEXT
    assert [e.loc for e in text.entries] == ["https://s.example/1", "https://s.example/2"]
    assert parse_lastmod("2026-05") == dt.datetime(2026, 5, 1, tzinfo=UTC)
    assert parse_lastmod("2026-05-01T10:00Z") == dt.datetime(2026, 5, 1, 10, tzinfo=UTC)


def test_a_gzip_bomb_is_refused_without_inflating_it() -> None:
    bomb = gzip.compress(b"<urlset>" + b" " * 200_000_000 + b"</urlset>", compresslevel=9)
    assert len(bomb) < 300_000
    tracemalloc.start()
    with pytest.raises(SitemapError, match="inflates to more than 10000000 bytes"):
        read_sitemap(bomb, max_bytes=10_000_000)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 40_000_000  # about the limit, not the 200 MB the bomb holds
    with pytest.raises(SitemapError, match="cut off"):
        inflate(gzip.compress(URLSET)[:-12], 1_000_000)
    with pytest.raises(SitemapError, match="larger than 100 bytes"):
        read_sitemap(URLSET, max_bytes=100)


@pytest.mark.parametrize("document", [
    # external entity (XXE): would read a local file
    b'<?xml version="1.0"?><!DOCTYPE u [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
    b'<urlset><url><loc>&x;</loc></url></urlset>',
    # "billion laughs": entities nested ten deep
    b'<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY a "lol"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
    b'<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">]><urlset><url><loc>&c;</loc></url></urlset>',
    # an external DTD (fetched over the network by a careless parser)
    b'<!doctype urlset SYSTEM "http://169.254.169.254/latest/dtd"><urlset/>',
])
def test_a_doctype_or_entity_is_refused(document: bytes) -> None:
    with pytest.raises(SitemapError, match="DOCTYPE or entities"):
        read_sitemap(document)
    with pytest.raises(SitemapError, match="DOCTYPE or entities"):
        read_sitemap(gzip.compress(document))


def test_other_documents_are_named_not_read() -> None:
    with pytest.raises(SitemapError, match="not well-formed"):
        read_sitemap(b"<urlset><url><loc>https://a.example/</loc></url>")
    with pytest.raises(SitemapError, match=r"<html>, not a sitemap"):
        read_sitemap(b"<html><body>Not found</body></html>")


def test_listing_links_are_resolved_canonical_and_kept_once() -> None:
    html = ('<html><head><base href="https://Shop.Example:443/c/"></head><body>'
            '<a class="p" href="p/1">1</a><a class="p" href="/p/1#top">again</a>'
            '<a class="p" href="mailto:x@y.example">mail</a><a class="p">no href</a>'
            '<span class="p" data-href="x">not a link</span></body></html>')
    assert page_links(html, "https://shop.example/c/list", "a.p") == [
        "https://shop.example/c/p/1", "https://shop.example/p/1"]
    attributes = page_links(html, "https://shop.example/c/list", "a.p::attr(href)")
    assert attributes[:1] == ["https://shop.example/c/p/1"]
    assert canonical("HTTP://Shop.Example:80/p/1?x=1#frag") == "http://shop.example/p/1?x=1"
