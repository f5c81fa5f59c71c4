"""A response body from bytes on the wire to text: bounded inflation, a size limit, charset detection.

Sans-IO: ``BodyReader`` is fed the chunks as they arrive, by the sync and the async client alike.
"""

from __future__ import annotations

import codecs
import re
import zlib
from collections.abc import Callable, Iterable
from typing import Any

import charset_normalizer
from charset_normalizer.md import mess_ratio

CHUNK = 64 * 1024
# brotli/zstd are left out so every body we accept can be inflated with a bounded output size.
ACCEPT_ENCODING = "gzip, deflate"
_INFLATABLE = frozenset({"gzip", "x-gzip", "deflate"})
# "gzip, deflate" is legitimate if rare; three layers of compression only ever serve to inflate a bomb
MAX_CODINGS = 2
_META_SCAN_BYTES = 2048
_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
_HEADER_CHARSET = re.compile(r"""charset\s*=\s*["']?([^"';\s]+)""", re.IGNORECASE)
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


class TooLarge(Exception):
    def __init__(self, seen: int) -> None:
        super().__init__(seen)
        self.seen = seen


class BoundedBuffer:
    """Collects bytes; raises ``TooLarge`` as soon as more than ``max_bytes`` arrived."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._buffer = bytearray()

    def add(self, data: bytes) -> None:
        self._buffer += data
        if len(self._buffer) > self.max_bytes:
            raise TooLarge(len(self._buffer))

    def value(self) -> bytes:
        return bytes(self._buffer)


def read_limited(chunks: Iterable[bytes], max_bytes: int) -> bytes:
    """Join ``chunks``; raise ``TooLarge`` as soon as more than ``max_bytes`` arrived."""
    buffer = BoundedBuffer(max_bytes)
    for chunk in chunks:
        buffer.add(chunk)
    return buffer.value()


class _Inflater:
    """One gzip/deflate layer that never turns one small input chunk into a large output buffer."""

    def __init__(self, coding: str, sink: Callable[[bytes], None]) -> None:
        self._coding = coding
        self._sink = sink
        self._decompressor: Any = None
        self._head = b""

    def _start(self, head: bytes) -> None:
        # HTTP "deflate" is meant to be zlib-wrapped but some servers send raw deflate
        zlib_wrapped = len(head) >= 2 and head[0] & 0x0F == 8 and int.from_bytes(head[:2], "big") % 31 == 0
        raw_deflate = self._coding == "deflate" and not zlib_wrapped
        self._decompressor = zlib.decompressobj(-zlib.MAX_WBITS if raw_deflate else zlib.MAX_WBITS | 32)

    def feed(self, data: bytes) -> None:
        if self._decompressor is None:
            # the zlib-or-raw sniff needs two bytes, and a trickling server may send them one at a time
            self._head += data
            if len(self._head) < 2:
                return
            data, self._head = self._head, b""
            self._start(data)
        self._drain(data)

    def _drain(self, data: bytes) -> None:
        while data:
            out = self._decompressor.decompress(data, CHUNK)
            if out:
                self._sink(out)
            data = self._decompressor.unconsumed_tail

    def flush(self) -> None:
        if self._decompressor is None:
            if not self._head:
                return
            self._start(self._head)
            self._drain(self._head)
        tail = self._decompressor.flush()
        if tail:
            self._sink(tail)


class UnsupportedEncoding(Exception):
    """A Content-Encoding we cannot undo within the size limit; the message says why."""

    def __init__(self, content_encoding: str, why: str) -> None:
        super().__init__(why)
        self.content_encoding = content_encoding


class BodyReader:
    """Reads one body, as sent on the wire, with at most ``max_bytes`` held after inflation.

    Every coding is undone by its own bounded inflater, so stacking them ("gzip, gzip") cannot turn a
    few hundred bytes into gigabytes in one step; more than ``MAX_CODINGS`` layers, or a coding we did
    not ask for, is refused before any byte is read.
    """

    def __init__(self, content_encoding: str, max_bytes: int) -> None:
        self._buffer = BoundedBuffer(max_bytes)
        layers = (part.strip().lower() for part in content_encoding.split(","))
        codings = [coding for coding in layers if coding not in ("", "identity")]
        unknown = [c for c in codings if c not in _INFLATABLE]
        if unknown:
            raise UnsupportedEncoding(content_encoding, f"{unknown[0]!r} is not one we asked for")
        if len(codings) > MAX_CODINGS:
            why = f"it stacks {len(codings)} codings, more than the {MAX_CODINGS} we undo"
            raise UnsupportedEncoding(content_encoding, why)
        self.feed: Callable[[bytes], None] = self._buffer.add
        # the coding listed first was applied first, so it is undone last; flushed from the wire inwards
        self._inflaters: list[_Inflater] = []
        for coding in codings:
            self._inflaters.insert(0, _Inflater(coding, self.feed))
            self.feed = self._inflaters[0].feed

    def finish(self) -> bytes:
        for inflater in self._inflaters:
            inflater.flush()
        return self._buffer.value()


def _codec_name(label: str) -> str | None:
    """The codec for a charset label a page or server declares; None when it names no text encoding a
    page can be in (then the charset is detected, as browsers do with labels they do not know)."""
    try:
        info = codecs.lookup(label.strip().strip("\"'"))
    except (LookupError, ValueError, TypeError):
        return None
    # base64, zlib, rot13, hex...: Python codecs, but transforms, not text encodings (bytes.decode refuses)
    if not getattr(info, "_is_text_encoding", True) or info.name in _NOT_PAGE_ENCODINGS:
        return None
    # Browsers treat latin-1 and ascii labels as windows-1252, and so do real pages that use € or “”.
    return "cp1252" if info.name in ("iso8859-1", "ascii") else info.name


# Python text codecs no web page is served in: they raise on arbitrary bytes or read markup as escapes
_NOT_PAGE_ENCODINGS = frozenset(
    {"idna", "punycode", "undefined", "unicode-escape", "raw-unicode-escape", "utf-7", "mbcs", "oem"}
)
# what windows-1252 text looks like decoded: charset-normalizer's mess ratio and the share of non-ASCII
# letters; measured on French, German, Italian, Spanish, English pages (mess <= 0.12, accented <= 0.15)
# against cp1250/1251/1253/1255/1256 pages read as cp1252 (mess >= 0.49, or accented >= 0.45)
_WESTERN_MAX_MESS = 0.2
_WESTERN_MAX_ACCENTED = 0.3
_WESTERN_SAMPLE_CHARS = 200_000


def _reads_as_western(body: bytes) -> bool:
    """Whether ``body`` is plausibly windows-1252 text (the likeliest undeclared charset on the web)."""
    try:
        text = body.decode("cp1252")  # strict: five bytes are undefined in windows-1252
    except UnicodeDecodeError:
        return False
    sample = text[:_WESTERN_SAMPLE_CHARS]
    letters = [c for c in sample if c.isalpha()]
    accented = sum(1 for c in letters if ord(c) > 127)
    if letters and accented / len(letters) > _WESTERN_MAX_ACCENTED:
        return False
    return mess_ratio(sample, _WESTERN_MAX_MESS) <= _WESTERN_MAX_MESS


def _detect_encoding(body: bytes) -> str | None:
    # charset-normalizer alone reads short Western pages as cp1257, mac-iceland or mac-latin2 about as
    # often as cp1252: when windows-1252 reads cleanly, it wins
    if _reads_as_western(body):
        return "cp1252"
    results = charset_normalizer.from_bytes(body)
    best = results.best()
    if best is None:
        return None
    # Short Western text fits cp1250/cp1252/cp1257 equally well; cp1252 is by far the likeliest on the web.
    tied = [r for r in results if (r.chaos, r.coherence) == (best.chaos, best.coherence)]
    if any("cp1252" in r.could_be_from_charset for r in tied):
        return "cp1252"
    return _codec_name(best.encoding)


def decode_html(body: bytes, content_type: str | None = None) -> tuple[str, str]:
    """Decode a page body; returns (text, codec name used).

    Order: byte-order mark, Content-Type charset, ``<meta charset>`` in the first 2 KB, strict UTF-8,
    charset-normalizer detection, and finally UTF-8 with replacement characters.
    """
    for bom, name in _BOMS:
        if body.startswith(bom):
            return body[len(bom) :].decode(name, errors="replace"), name
    encoding = None
    if content_type:
        match = _HEADER_CHARSET.search(content_type)
        encoding = _codec_name(match.group(1)) if match else None
    if encoding is None:
        match = _META_CHARSET.search(body[:_META_SCAN_BYTES])
        if match:
            encoding = _codec_name(match.group(1).decode("ascii"))
            # a <meta> readable as ASCII cannot truthfully declare UTF-16 (HTML spec rule)
            if encoding and encoding.startswith("utf-16"):
                encoding = "utf-8"
    if encoding is None:
        try:
            return body.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            encoding = _detect_encoding(body) or "utf-8"
    try:
        return body.decode(encoding, errors="replace"), encoding
    except (LookupError, UnicodeError, ValueError, TypeError):
        # a codec that cannot decode arbitrary bytes after all: the declaration is no use, detect instead
        fallback = _detect_encoding(body) or "utf-8"
        return body.decode(fallback, errors="replace"), fallback
