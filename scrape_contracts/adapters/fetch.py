"""Fetch one page, over HTTP or from local fixture files, into a ``Page`` value.

Every failure is a ``FetchError`` whose message names the URL (credentials redacted), what went wrong and
what to change in the contract; ``kind`` and ``transient`` let callers decide between "retry later" and
"fix the contract".
"""

from __future__ import annotations

import codecs
import email.utils
import functools
import hashlib
import os
import re
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import unquote, urljoin, urlsplit, urlunsplit

import charset_normalizer
import httpx

from scrape_contracts.adapters.netguard import (
    OPT_IN_HINT,
    AddressBlocked,
    AddressGuard,
    ResolutionFailed,
    Resolver,
)

if TYPE_CHECKING:
    from scrape_contracts.contract.model import FetchSettings

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MAX_BACKOFF_S = 30.0

_CHUNK = 64 * 1024
# Session cookies a site hands out are credentials too; nothing downstream needs them.
_DROPPED_RESPONSE_HEADERS = frozenset({"set-cookie", "set-cookie2"})
# brotli/zstd are left out so every body we accept can be inflated with a bounded output size.
_ACCEPT_ENCODING = "gzip, deflate"
_META_SCAN_BYTES = 2048
_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
_HEADER_CHARSET = re.compile(r"""charset\s*=\s*["']?([^"';\s]+)""", re.IGNORECASE)
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))


@dataclass(frozen=True)
class Page:
    url: str
    requested_url: str
    status: int
    html: str = field(repr=False)
    sha256: str
    headers: dict[str, str]
    elapsed_s: float
    encoding: str | None
    not_modified: bool = False
    etag: str | None = None
    last_modified: str | None = None
    attempts: tuple[dict[str, Any], ...] = ()


class FetchError(Exception):
    """kind: timeout | too_large | http_status | blocked_address | too_many_redirects | connection |
    fixture_missing | invalid_url | invalid_config. ``transient`` is True when running again later may
    succeed."""

    def __init__(
        self,
        message: str,
        *,
        kind: str,
        url: str,
        status: int | None = None,
        transient: bool = False,
        attempts: tuple[dict[str, Any], ...] = (),
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.url = url
        self.status = status
        self.transient = transient
        self.attempts = attempts

    def __repr__(self) -> str:
        return (
            f"FetchError(kind={self.kind!r}, url={self.url!r}, status={self.status!r}, "
            f"transient={self.transient!r}, message={str(self)!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        # keyword-only fields would be lost by the default Exception pickling (Dagster pickles errors)
        return (
            functools.partial(
                FetchError,
                str(self),
                kind=self.kind,
                url=self.url,
                status=self.status,
                transient=self.transient,
                attempts=self.attempts,
            ),
            (),
        )


class Fetcher(Protocol):
    def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page: ...

    def close(self) -> None: ...


def redact_url(url: str) -> str:
    """``https://user:pw@host/p`` -> ``https://***@host/p``; other URLs unchanged."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


class _Scrubber:
    """Replaces caller-supplied header values (and their long tokens) with ``***`` in text we emit."""

    def __init__(self, values: Iterable[str]) -> None:
        pieces: set[str] = set()
        for value in values:
            value = value.strip()
            # shorter values ("1", "en") are not secrets, and replacing them would mangle messages
            if len(value) >= 4:
                pieces.add(value)
            # servers often echo only the token part of "Bearer <token>" or one cookie of several
            pieces.update(token for token in re.split(r"[\s;,=]+", value) if len(token) >= 8)
        self._pieces = sorted(pieces, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for piece in self._pieces:
            text = text.replace(piece, "***")
        return text


def retry_after_seconds(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait according to a ``Retry-After`` header (delta-seconds or HTTP-date), or None."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if seconds == seconds else None  # NaN guard
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def _codec_name(label: str) -> str | None:
    try:
        name = codecs.lookup(label.strip().strip("\"'")).name
    except LookupError:
        return None
    # Browsers treat latin-1 and ascii labels as windows-1252, and so do real pages that use € or “”.
    return "cp1252" if name in ("iso8859-1", "ascii") else name


def _detect_encoding(body: bytes) -> str | None:
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
    return body.decode(encoding, errors="replace"), encoding


def _origin(url: str) -> tuple[str, str, int | None]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return ("", url, None)  # malformed: never equal to a real origin; the guard reports it
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), port or (443 if scheme == "https" else 80)


def _attempts(n: int) -> str:
    return f"{n} attempt" + ("" if n == 1 else "s")


def _url_problem(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a malformed port)
    except ValueError as exc:
        return f"the URL is malformed ({exc})"
    if parts.scheme.lower() not in ("http", "https"):
        return f"scheme {parts.scheme or '(none)'!r} is not supported"
    if not parts.hostname:
        return "the URL has no host"
    return None


def _inflate(chunks: Iterable[bytes], coding: str) -> Iterator[bytes]:
    """Decompress gzip/deflate without letting one small compressed chunk expand into a huge buffer."""
    decompressor: Any = None
    for chunk in chunks:
        if decompressor is None:
            if not chunk:
                continue
            # HTTP "deflate" is meant to be zlib-wrapped but some servers send raw deflate
            zlib_wrapped = (
                len(chunk) >= 2 and chunk[0] & 0x0F == 8 and int.from_bytes(chunk[:2], "big") % 31 == 0
            )
            raw_deflate = coding == "deflate" and not zlib_wrapped
            decompressor = zlib.decompressobj(-zlib.MAX_WBITS if raw_deflate else zlib.MAX_WBITS | 32)
        data = chunk
        while data:
            out = decompressor.decompress(data, _CHUNK)
            if out:
                yield out
            data = decompressor.unconsumed_tail
    if decompressor is not None:
        tail = decompressor.flush()
        if tail:
            yield tail


def _body_chunks(response: httpx.Response) -> Iterator[bytes]:
    coding = response.headers.get("content-encoding", "").strip().lower()
    if coding in ("", "identity"):
        return response.iter_raw(_CHUNK)
    if coding in ("gzip", "x-gzip", "deflate"):
        return _inflate(response.iter_raw(_CHUNK), coding)
    # an encoding we did not ask for (caller overrode Accept-Encoding): let httpx decode it
    return response.iter_bytes(_CHUNK)


def read_limited(chunks: Iterable[bytes], max_bytes: int) -> bytes:
    """Join ``chunks``; raise ``_TooLarge`` as soon as more than ``max_bytes`` arrived."""
    buffer = bytearray()
    for chunk in chunks:
        buffer += chunk
        if len(buffer) > max_bytes:
            raise _TooLarge(len(buffer))
    return bytes(buffer)


class _TooLarge(Exception):
    def __init__(self, seen: int) -> None:
        super().__init__(seen)
        self.seen = seen


class _DeadlinePassed(Exception):
    pass


@dataclass
class _Answer:
    status: int
    reason: str
    headers: httpx.Headers
    body: bytes | None


@dataclass
class _Fetch:
    """State of one ``HttpFetcher.fetch`` call; never shared, which keeps the fetcher thread-safe."""

    requested_url: str
    started: float
    attempts: list[dict[str, Any]] = field(default_factory=list)

    def elapsed(self) -> float:
        return time.monotonic() - self.started


class HttpFetcher:
    """Fetches pages over HTTP(S); safe to share between threads (one pooled httpx.Client)."""

    def __init__(
        self,
        *,
        timeout_s: float = 10.0,
        headers: Mapping[str, str] | None = None,
        max_bytes: int = 5_000_000,
        max_redirects: int = 5,
        retries: int = 2,
        allow_private_addresses: bool = False,
        deadline_s: float = 60.0,
        backoff_s: float = 0.5,
        user_agent: str = "scrape-contracts/0.1",
        allowed_hosts: Iterable[str] = (),
        resolver: Resolver | None = None,
        secrets: Iterable[str] = (),
    ) -> None:
        if min(timeout_s, deadline_s, max_bytes) <= 0 or min(max_redirects, retries, backoff_s) < 0:
            raise ValueError(
                "HttpFetcher needs timeout_s, deadline_s, max_bytes > 0 and max_redirects, retries, "
                "backoff_s >= 0"
            )
        self.timeout_s = timeout_s
        self.max_bytes = max_bytes
        self.max_redirects = max_redirects
        self.retries = retries
        self.deadline_s = deadline_s
        self.backoff_s = backoff_s
        self.allow_private_addresses = allow_private_addresses
        self._headers = dict(headers or {})
        # ``secrets``: values substituted into the headers (see fetcher_for); listed on their own so a
        # short token inside "Bearer <token>" is scrubbed even when a server echoes only the token
        self._scrub = _Scrubber([*self._headers.values(), *secrets])
        self._guard = AddressGuard(
            allow_private=allow_private_addresses, allowed_hosts=allowed_hosts, resolver=resolver
        )
        # trust_env=False: proxy variables and ~/.netrc must not silently change where requests go
        # (the address guard checks the target, not a proxy) or add credentials.
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout_s),
            follow_redirects=False,
            trust_env=False,
            headers={
                "User-Agent": user_agent,
                "Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
                "Accept-Encoding": _ACCEPT_ENCODING,
            },
        )

    def __repr__(self) -> str:
        # header names only: values are credentials as often as not
        return (
            f"HttpFetcher(timeout_s={self.timeout_s}, max_bytes={self.max_bytes}, "
            f"max_redirects={self.max_redirects}, retries={self.retries}, deadline_s={self.deadline_s}, "
            f"allow_private_addresses={self.allow_private_addresses}, header_names={sorted(self._headers)})"
        )

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> HttpFetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page:
        state = _Fetch(requested_url=url, started=time.monotonic())
        problem = _url_problem(url)
        if problem:
            raise self._error(
                state, "invalid_url", url, f"refused: {problem} (fix the URL in the contract; only absolute "
                "http:// and https:// URLs can be fetched)"
            )
        conditional: dict[str, str] = {}
        if etag:
            conditional["If-None-Match"] = etag
        if last_modified:
            conditional["If-Modified-Since"] = last_modified
        first_origin = _origin(url)
        current, previous, hops = url, None, 0
        while True:
            # caller headers carry credentials meant for the contract's site, not for wherever it redirects
            caller_headers = self._headers if _origin(current) == first_origin else {}
            answer = self._send(state, current, previous, {**caller_headers, **conditional})
            if answer.status not in REDIRECT_STATUSES:
                return self._page(state, current, answer, etag, last_modified)
            location = answer.headers.get("location")
            if not location:
                raise self._error(
                    state, "http_status", current,
                    f"failed: HTTP {answer.status} redirect without a Location header (the site is "
                    "misbehaving; point the contract at the page's final URL)",
                    status=answer.status,
                )
            if hops >= self.max_redirects:
                raise self._error(
                    state, "too_many_redirects", current,
                    f"refused: more than max_redirects={self.max_redirects} redirects (next hop "
                    f"{redact_url(location)}; point the contract at the final URL, "
                    "or raise fetch.max_redirects if the chain is legitimate)",
                    status=answer.status,
                )
            hops += 1
            try:
                previous, current = current, urljoin(current, location)
            except ValueError:
                raise self._error(
                    state, "http_status", current,
                    f"failed: HTTP {answer.status} redirect to a malformed Location (the site is "
                    "misbehaving; point the contract at the page's final URL)",
                    status=answer.status,
                ) from None

    def _send(self, state: _Fetch, url: str, via: str | None, headers: dict[str, str]) -> _Answer:
        """One hop with retries; returns any answer that is not retryable or raises FetchError."""
        retries_done = 0
        wait = 0.0
        while True:
            if wait:
                time.sleep(wait)
            remaining = self.deadline_s - state.elapsed()
            if remaining <= 0:
                raise self._deadline_error(state, url, None)
            # Checked before every attempt, not once per hop, so a DNS answer that changes between
            # retries is checked again. A refused address is not an HTTP attempt and is not recorded.
            unresolved = self._check_address(state, url, via)
            record: dict[str, Any] = {
                "attempt": len(state.attempts) + 1, "status": None, "error": None, "waited_s": round(wait, 3)
            }
            state.attempts.append(record)
            answer: _Answer | None = None
            timeout = min(self.timeout_s, remaining)
            try:
                if unresolved:
                    raise unresolved
                answer = self._attempt(state, url, headers, timeout, record)
            except httpx.TimeoutException:
                kind, record["error"] = "timeout", f"no response within {timeout:g}s"
            except (httpx.DecodingError, zlib.error) as exc:
                # usually a body cut off in transit, so treated like a broken connection
                kind, record["error"] = "connection", self._scrub(f"failed: body could not be decompressed: {exc}")
            except (httpx.TransportError, ResolutionFailed) as exc:
                reason = f"connection failed: {type(exc).__name__}: {exc}"
                kind, record["error"] = "connection", self._scrub(reason)
            except httpx.InvalidURL as exc:
                detail = f"refused: the URL is malformed ({exc}; fix it in the contract)"
                raise self._error(state, "invalid_url", url, detail) from None
            else:
                if answer.status not in RETRY_STATUSES:
                    return answer
                kind, record["error"] = "http_status", f"HTTP {answer.status}"
            if retries_done >= self.retries:
                raise self._exhausted_error(state, url, kind, answer, timeout)
            retry_after = retry_after_seconds(answer.headers.get("retry-after")) if answer else None
            if retry_after is not None:
                wait = retry_after
            else:
                wait = min(self.backoff_s * 2**retries_done, MAX_BACKOFF_S)
            if state.elapsed() + wait > self.deadline_s:
                raise self._deadline_error(
                    state, url, answer, wait=wait, from_retry_after=retry_after is not None
                )
            retries_done += 1

    def _check_address(self, state: _Fetch, url: str, via: str | None) -> ResolutionFailed | None:
        """Raises FetchError if the address is refused; returns a DNS failure for the retry loop to handle."""
        try:
            self._guard.check(url)
        except ResolutionFailed as exc:
            return exc
        except AddressBlocked as exc:
            hint = OPT_IN_HINT if exc.opt_in_helps else "this address is never fetched"
            where = f"refused: it redirected to {redact_url(url)}, and" if via else "refused:"
            raise self._error(
                state, "blocked_address", state.requested_url, f"{where} {exc} ({hint})"
            ) from None
        return None

    def _attempt(
        self, state: _Fetch, url: str, headers: dict[str, str], timeout: float, record: dict[str, Any]
    ) -> _Answer:
        with self._client.stream("GET", url, headers=headers, timeout=timeout) as response:
            record["status"] = response.status_code
            answer = _Answer(response.status_code, response.reason_phrase, response.headers, None)
            if not 200 <= response.status_code < 300:
                # error and redirect bodies are never used; closing unread drops the connection cheaply
                return answer
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > self.max_bytes:
                raise self._too_large(state, url, f"Content-Length is {int(declared)} bytes")
            try:
                chunks = self._watch_deadline(state, _body_chunks(response))
                answer.body = read_limited(chunks, self.max_bytes)
            except _TooLarge as exc:
                raise self._too_large(state, url, f"stopped reading after {exc.seen} bytes") from None
            except _DeadlinePassed:
                raise self._deadline_error(state, url, None) from None
            return answer

    def _watch_deadline(self, state: _Fetch, chunks: Iterator[bytes]) -> Iterator[bytes]:
        # the read timeout restarts with every chunk, so a slowly dripping body needs its own limit
        for chunk in chunks:
            if state.elapsed() > self.deadline_s:
                raise _DeadlinePassed
            yield chunk

    def _page(
        self, state: _Fetch, url: str, answer: _Answer, etag: str | None, last_modified: str | None
    ) -> Page:
        headers = self._public_headers(answer.headers)
        common = dict(
            url=redact_url(url),
            requested_url=redact_url(state.requested_url),
            headers=headers,
            attempts=tuple(state.attempts),
        )
        if answer.status == 304:
            return Page(
                status=304, html="", sha256="", elapsed_s=state.elapsed(), encoding=None, not_modified=True,
                etag=headers.get("etag", etag), last_modified=headers.get("last-modified", last_modified),
                **common,
            )
        if answer.body is None:
            raise self._error(
                state, "http_status", url, f"failed: HTTP {answer.status} {answer.reason}".rstrip()
                + f" ({_status_advice(answer.status)})",
                status=answer.status,
            )
        html, encoding = decode_html(answer.body, answer.headers.get("content-type"))
        return Page(
            status=answer.status, html=html, sha256=hashlib.sha256(answer.body).hexdigest(),
            elapsed_s=state.elapsed(), encoding=encoding, etag=headers.get("etag"),
            last_modified=headers.get("last-modified"), **common,
        )

    def _public_headers(self, headers: httpx.Headers) -> dict[str, str]:
        return {
            name.lower(): self._scrub(value)
            for name, value in headers.items()
            if name.lower() not in _DROPPED_RESPONSE_HEADERS
        }

    def _error(
        self,
        state: _Fetch,
        kind: str,
        url: str,
        detail: str,
        *,
        status: int | None = None,
        transient: bool = False,
    ) -> FetchError:
        where = redact_url(url)
        if url != state.requested_url and kind != "blocked_address":
            where += f" (redirected from {redact_url(state.requested_url)})"
        return FetchError(
            self._scrub(f"GET {where} {detail}"),
            kind=kind,
            url=self._scrub(redact_url(state.requested_url)),
            status=status,
            transient=transient,
            attempts=tuple(state.attempts),
        )

    def _too_large(self, state: _Fetch, url: str, evidence: str) -> FetchError:
        return self._error(
            state, "too_large", url,
            f"refused: response is larger than max_bytes={self.max_bytes} ({evidence}; raise "
            "fetch.max_bytes in the contract if the page is legitimately this big)",
            status=state.attempts[-1]["status"] if state.attempts else None,
        )

    def _exhausted_error(
        self, state: _Fetch, url: str, kind: str, answer: _Answer | None, timeout: float
    ) -> FetchError:
        tries = _attempts(len(state.attempts))
        if kind == "timeout":
            detail = (
                f"timed out: no response within {timeout:g}s ({tries}; the site is slow or unreachable "
                "— raise fetch.timeout_s in the contract if it is just slow)"
            )
        elif kind == "connection":
            detail = (
                f"{state.attempts[-1]['error']} ({tries}; check the host name and that the site is up "
                "— usually temporary)"
            )
        else:
            assert answer is not None
            status_line = f"HTTP {answer.status} {answer.reason}".rstrip()
            detail = f"failed: {status_line} after {tries} ({_status_advice(answer.status)})"
        status = answer.status if answer else None
        return self._error(state, kind, url, detail, status=status, transient=True)

    def _deadline_error(
        self,
        state: _Fetch,
        url: str,
        answer: _Answer | None,
        *,
        wait: float = 0.0,
        from_retry_after: bool = False,
    ) -> FetchError:
        if answer is not None and from_retry_after:
            detail = (
                f"gave up: HTTP {answer.status} with Retry-After of {wait:.0f}s, which would pass the "
                f"fetch deadline of {self.deadline_s:g}s ({_attempts(len(state.attempts))} so far; the site "
                "is asking us to back off — run again later)"
            )
        elif answer is not None:
            detail = (
                f"gave up: HTTP {answer.status} and the next retry would pass the fetch deadline of "
                f"{self.deadline_s:g}s ({_status_advice(answer.status)})"
            )
        else:
            detail = (
                f"timed out: the fetch deadline of {self.deadline_s:g}s passed after "
                f"{_attempts(len(state.attempts))} (the site is slow or unreachable; run again later)"
            )
        kind = "http_status" if answer is not None else "timeout"
        return self._error(state, kind, url, detail, status=answer.status if answer else None, transient=True)


def _status_advice(status: int) -> str:
    if status == 429:
        return "the site is rate-limiting us; run less often or again later"
    if status >= 500:
        return "the site is failing or overloaded; usually temporary — run again later or raise fetch.retries"
    if status in (401, 403):
        return "the site refused access; check the credentials in fetch.headers or whether it blocks bots"
    if status in (404, 410):
        return "the page does not exist; check the URL in the contract"
    if 400 <= status < 500:
        return "the site rejected the request; it is not retried — check the URL and fetch.headers"
    return "an unexpected status for a page fetch; check the URL in the contract"


class FixtureFetcher:
    """Serves ``<root>/<host>/<path>`` for ``http(s)://<host>/<path>``; for demos and offline tests."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"FixtureFetcher(root={str(self.root)!r})"

    def close(self) -> None:
        pass

    def __enter__(self) -> FixtureFetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def path_for(self, url: str) -> Path:
        """The fixture file for ``url``; FetchError 'invalid_url' or 'fixture_missing' otherwise."""
        safe_url = redact_url(url)
        problem = _url_problem(url)
        if problem:
            raise FetchError(
                f"GET {safe_url} refused: {problem} (fixture URLs look like https://<host>/<path>)",
                kind="invalid_url", url=safe_url,
            )
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        path = unquote(parts.path)
        segments = path.split("/")
        if host in (".", "..") or "\\" in path or "\x00" in path or ".." in segments:
            raise FetchError(
                f"GET {safe_url} refused: the path leaves the fixture directory ('..' or a backslash); "
                "fixture URLs must name a file under fixture_dir",
                kind="invalid_url", url=safe_url,
            )
        base = self.root / host
        relative = path.lstrip("/")
        if not relative or path.endswith("/"):
            candidates = [base / relative / "index.html"]
        else:
            target = base / relative
            candidates = [target]
            if not Path(relative).suffix:
                candidates.append(target.with_name(target.name + ".html"))
            candidates.append(target / "index.html")
        root = self.root.resolve()
        for candidate in candidates:
            if candidate.is_file():
                # a symlink inside the fixtures must not expose files outside them
                if not candidate.resolve().is_relative_to(root):
                    raise FetchError(
                        f"GET {safe_url} refused: {candidate} points outside the fixture directory "
                        f"{self.root}",
                        kind="invalid_url", url=safe_url,
                    )
                return candidate
        if not self.root.is_dir():
            advice = f"fixture directory {self.root} does not exist; check fetch.fixture_dir in the contract"
        else:
            tried = ", ".join(str(c) for c in candidates)
            advice = f"looked for {tried}; add the page there or fix the URL"
        raise FetchError(
            f"GET {safe_url} failed: no fixture file ({advice})", kind="fixture_missing", url=safe_url
        )

    def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page:
        started = time.monotonic()
        body = self.path_for(url).read_bytes()
        digest = hashlib.sha256(body).hexdigest()
        common = dict(url=redact_url(url), requested_url=redact_url(url), headers={}, etag=digest)
        if etag is not None and etag.strip('"') == digest:
            return Page(
                status=304, html="", sha256="", elapsed_s=time.monotonic() - started, encoding=None,
                not_modified=True, **common,
            )
        html, encoding = decode_html(body)
        return Page(
            status=200,
            html=html,
            sha256=digest,
            elapsed_s=time.monotonic() - started,
            encoding=encoding,
            **common,
        )


_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


@dataclass(frozen=True)
class ExpandedHeaders:
    # both hold secrets once expanded, so neither is in the repr
    headers: dict[str, str] = field(repr=False)
    secrets: tuple[str, ...] = field(repr=False)
    # (header name, variable name) of every reference that could not be expanded
    missing: tuple[tuple[str, str], ...] = ()
    empty: tuple[tuple[str, str], ...] = ()


def expand_header_values(headers: Mapping[str, str], environ: Mapping[str, str] | None = None) -> ExpandedHeaders:
    """Replace ``${NAME}`` in header values with environment variables; other ``$`` stay as written.

    Unset and empty variables are reported rather than expanded to "": a CI system hands an undefined
    secret over as an empty string, and "Bearer " would be sent as if it were a credential.
    """
    env = os.environ if environ is None else environ
    expanded: dict[str, str] = {}
    secrets: list[str] = []
    missing: list[tuple[str, str]] = []
    empty: list[tuple[str, str]] = []

    def substitute(header: str) -> Callable[[re.Match[str]], str]:
        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            value = env.get(name)
            if value is None:
                missing.append((header, name))
                return ""
            if not value:
                empty.append((header, name))
                return ""
            secrets.append(value)
            return value

        return replace

    for header, template in headers.items():
        expanded[header] = _ENV_REFERENCE.sub(substitute(header), template)
    return ExpandedHeaders(expanded, tuple(secrets), tuple(missing), tuple(empty))


def _header_config_problem(expanded: ExpandedHeaders) -> str | None:
    def listing(pairs: tuple[tuple[str, str], ...]) -> str:
        return ", ".join(f"${{{variable}}} in header {header!r}" for header, variable in pairs)

    problems = []
    if expanded.missing:
        problems.append(f"environment variable not set: {listing(expanded.missing)}")
    if expanded.empty:
        problems.append(f"environment variable empty: {listing(expanded.empty)}")
    if not problems:
        return None
    return (
        "; ".join(problems)
        + " (set the variable where the code location and its runs execute, or remove the reference "
        "from fetch.headers in the contract)"
    )


class MisconfiguredFetcher:
    """Stands in for a fetcher whose contract cannot be fetched as configured.

    The error is raised by ``fetch`` rather than by ``fetcher_for`` so that it reaches callers through
    the same ``except FetchError`` as every other fetch failure, naming the URL and non-transient (a
    retry cannot set an environment variable).
    """

    def __init__(self, problem: str) -> None:
        self._problem = problem

    def __repr__(self) -> str:
        return f"MisconfiguredFetcher({self._problem!r})"

    def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page:
        safe_url = redact_url(url)
        raise FetchError(
            f"GET {safe_url} refused: {self._problem}", kind="invalid_config", url=safe_url, transient=False
        )

    def close(self) -> None:
        pass

    def __enter__(self) -> MisconfiguredFetcher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def fetcher_for(
    settings: FetchSettings, base_dir: Path, *, environ: Mapping[str, str] | None = None
) -> HttpFetcher | FixtureFetcher | MisconfiguredFetcher:
    """The fetcher a contract asks for; ``fixture_dir`` is relative to ``base_dir``, the contract's folder.

    ``${NAME}`` in ``fetch.headers`` values is expanded here, per fetch, from ``environ`` (default
    ``os.environ``), so secrets stay out of the loaded contract and a rotated secret is picked up by the
    next run. An unset or empty variable gives a fetcher whose ``fetch`` raises FetchError
    'invalid_config' naming the header and the variable.
    """
    if settings.adapter == "fixture":
        assert settings.fixture_dir, "FetchSettings validation guarantees fixture_dir for the fixture adapter"
        return FixtureFetcher(Path(base_dir) / settings.fixture_dir)
    expanded = expand_header_values(settings.headers, environ)
    problem = _header_config_problem(expanded)
    if problem:
        return MisconfiguredFetcher(problem)
    return HttpFetcher(
        timeout_s=settings.timeout_s,
        headers=expanded.headers,
        max_bytes=settings.max_bytes,
        max_redirects=settings.max_redirects,
        retries=settings.retries,
        allow_private_addresses=settings.allow_private_addresses,
        secrets=expanded.secrets,
    )
