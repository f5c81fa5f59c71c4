"""Sitemaps (sitemaps.org 0.9) read from bytes: an index of sitemaps, a set of URLs, or a plain list of URLs.

Pure, and hardened for bytes from anywhere on the web. Our own parser rather than ultimate-sitemap-parser:
that one fetches with its own HTTP client unless given a web client, inflates gzip without a size limit (a
1 MB bomb becomes gigabytes) and reads everything as UTF-8; here the bytes come from the project's fetcher
(address guard, credentials, limits), gzip is inflated in bounded steps, and lxml parses with no network,
no DTD and no entity expansion (a document that declares a DOCTYPE is refused outright: a sitemap has no
use for one, and entity tricks, XXE and "billion laughs", all start there).
"""

from __future__ import annotations

import datetime as dt
import enum
import re
import zlib
from dataclasses import dataclass

from lxml import etree

GZIP_MAGIC = b"\x1f\x8b"
_STEP = 1 << 20  # inflated at most this much per call: memory stays bounded whatever the ratio
_DOCTYPE = re.compile(rb"<!\s*(DOCTYPE|ENTITY)", re.IGNORECASE)
# "2026" or "2026-05": a lastmod at year or month precision
_W3C_PARTIAL = re.compile(r"^(\d{4})(?:-(\d{2}))?$")


class SitemapError(ValueError):
    """The bytes are no sitemap we read, or one over a limit; the message says which."""


class SitemapKind(enum.StrEnum):
    INDEX = "sitemapindex"  # lists further sitemaps
    URLSET = "urlset"  # lists pages
    TEXT = "text"  # a plain list of URLs, one per line (allowed by the protocol)


@dataclass(frozen=True)
class SitemapEntry:
    loc: str
    lastmod: dt.datetime | None = None


@dataclass(frozen=True)
class Sitemap:
    kind: SitemapKind
    entries: tuple[SitemapEntry, ...]


def inflate(data: bytes, max_bytes: int) -> bytes:
    """Gunzip ``data`` (every member), refusing to produce more than ``max_bytes``."""
    out = bytearray()
    while data:
        decompressor = zlib.decompressobj(16 + zlib.MAX_WBITS)
        chunk = data
        while chunk:
            out += decompressor.decompress(chunk, _STEP)
            if len(out) > max_bytes:
                raise _too_large(max_bytes)
            chunk = decompressor.unconsumed_tail
        out += decompressor.flush()
        if len(out) > max_bytes:
            raise _too_large(max_bytes)
        if not decompressor.eof:
            raise SitemapError("the gzip sitemap is cut off (its last member is incomplete)")
        data = decompressor.unused_data.lstrip(b"\x00")  # members may follow; padding may too
    return bytes(out)


def _too_large(max_bytes: int) -> SitemapError:
    return SitemapError(f"the gzip sitemap inflates to more than {max_bytes} bytes (discover.max_bytes)")


def read_sitemap(data: bytes, *, max_bytes: int = 50_000_000) -> Sitemap:
    """The sitemap in ``data`` (gzip or not); ``SitemapError`` naming what is wrong."""
    if data.startswith(GZIP_MAGIC):
        try:
            data = inflate(data, max_bytes)
        except zlib.error as exc:
            raise SitemapError(f"the gzip sitemap cannot be inflated: {exc}") from None
    if len(data) > max_bytes:
        raise SitemapError(f"the sitemap is larger than {max_bytes} bytes (discover.max_bytes)")
    head = data.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not head.startswith(b"<"):
        return _text_sitemap(head)
    if _DOCTYPE.search(data):
        raise SitemapError("the sitemap declares a DOCTYPE or entities, which a sitemap never needs; refused")
    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False, dtd_validation=False,
                             huge_tree=False, remove_comments=True, remove_pis=True, recover=False)
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        raise SitemapError(f"the sitemap is not well-formed XML: {exc}") from None
    kind = etree.QName(root).localname
    if kind not in (SitemapKind.INDEX, SitemapKind.URLSET):
        raise SitemapError(f"the document is <{kind}>, not a sitemap (<urlset> or <sitemapindex>)")
    item = "sitemap" if kind == SitemapKind.INDEX else "url"
    entries = []
    for element in root:
        if not isinstance(element.tag, str) or etree.QName(element).localname != item:
            continue
        values = {etree.QName(child).localname: (child.text or "").strip()
                  for child in element if isinstance(child.tag, str)}
        if values.get("loc"):
            entries.append(SitemapEntry(values["loc"], parse_lastmod(values.get("lastmod"))))
    return Sitemap(SitemapKind(kind), tuple(entries))


def _text_sitemap(data: bytes) -> Sitemap:
    text = data.decode("utf-8", errors="replace")
    lines = (line.strip() for line in text.splitlines())
    return Sitemap(SitemapKind.TEXT, tuple(SitemapEntry(line) for line in lines
                                           if line.startswith(("http://", "https://"))))


def parse_lastmod(value: str | None) -> dt.datetime | None:
    """A W3C datetime (``2026-05-01``, ``2026-05-01T10:00:00+02:00``, ``2026-05``) as an aware UTC datetime;
    None when absent or unreadable (an unreadable lastmod only means the target is always scraped)."""
    if not value:
        return None
    partial = _W3C_PARTIAL.match(value)
    try:
        if partial:
            when = dt.datetime(int(partial.group(1)), int(partial.group(2) or 1), 1)
        else:
            when = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return when.astimezone(dt.timezone.utc)
