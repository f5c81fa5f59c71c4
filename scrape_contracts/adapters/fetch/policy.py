"""The decisions of one HTTP fetch, written once for the sync and the async client (sans-IO).

``FetchPolicy.plan(url)`` walks a fetch step by step: it yields the I/O it needs (``CheckRobots``, ``Turn``,
``CheckAddress``, ``Sleep``, ``Exchange``), the client performs each and hands back the result or the
exception, and at the end the plan holds the ``Page`` or raises ``FetchError``. Retries, Retry-After,
redirects, the deadline, the size limit and the wording of every failure live here, so the two clients
cannot drift apart.

Politeness is the client's (adapters/fetch/pace.py, adapters/fetch/robots.py): before each hop the plan asks
whether robots.txt allows it (``CheckRobots``), and before each attempt it waits for its turn at the host
(``Turn``: a slot within the host's concurrency, the request rate). The slot is held until that attempt's
``Exchange`` ends, never through a ``Sleep``: a page waiting out a Retry-After leaves its slot to others.
The wait for a turn is the crawl's queueing, not the page's: it does not count against the deadline.
"""

from __future__ import annotations

import email.utils
import hashlib
import time
import zlib
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from datetime import timezone
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

import httpx

from scrape_contracts.adapters.fetch import messages
from scrape_contracts.adapters.fetch.body import TooLarge, UnsupportedEncoding, decode_html
from scrape_contracts.adapters.fetch.deadline import untrusted_certificate
from scrape_contracts.adapters.fetch.exchange import DeadlinePassed, DeclaredTooLarge, Exchange, FetchState
from scrape_contracts.adapters.fetch.page import FetchError, Page
from scrape_contracts.adapters.fetch.secrets import Scrubber
from scrape_contracts.adapters.fetch.urls import origin, redact_url, url_problem
from scrape_contracts.adapters.netguard import OPT_IN_HINT, AddressBlocked, ResolutionFailed
from scrape_contracts.adapters.fetch.steps import Answer, CheckAddress, CheckRobots, Plan, Sleep, Turn

if TYPE_CHECKING:
    from scrape_contracts.adapters.fetch.steps import Step

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
MAX_BACKOFF_S = 30.0
# Session cookies a site hands out are credentials too; nothing downstream needs them.
_DROPPED_RESPONSE_HEADERS = frozenset({"set-cookie", "set-cookie2"})


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


@dataclass(frozen=True)
class FetchPolicy:
    timeout_s: float = 10.0
    max_bytes: int = 5_000_000
    max_redirects: int = 5
    retries: int = 2
    deadline_s: float = 60.0
    backoff_s: float = 0.5
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    scrub: Scrubber = field(default_factory=lambda: Scrubber(()), repr=False)
    clock: Callable[[], float] = time.monotonic
    # Retry-After HTTP-dates are wall-clock times
    wall_clock: Callable[[], float] = time.time
    # the Page carries the body's bytes too (discovery reads gzip sitemaps); off: pages are held once
    keep_body: bool = False

    def __post_init__(self) -> None:
        if min(self.timeout_s, self.deadline_s, self.max_bytes) <= 0 or min(
            self.max_redirects, self.retries, self.backoff_s
        ) < 0:
            raise ValueError(
                "HttpFetcher needs timeout_s, deadline_s, max_bytes > 0 and max_redirects, retries, "
                "backoff_s >= 0"
            )

    def plan(self, url: str, etag: str | None = None, last_modified: str | None = None, *,
             robots: bool = True) -> Plan:
        """``robots``: ask ``CheckRobots`` before each hop (not for robots.txt itself)."""
        state = FetchState(url, self.clock, self.deadline_s, robots)
        return Plan(self._fetch(state, url, etag, last_modified))

    def _fetch(
        self, state: FetchState, url: str, etag: str | None, last_modified: str | None
    ) -> Generator[Step, Any, Page]:
        problem = url_problem(url)
        if problem:
            raise self._error(state, "invalid_url", url, messages.invalid_url(problem))
        conditional: dict[str, str] = {}
        if etag:
            conditional["If-None-Match"] = etag
        if last_modified:
            conditional["If-Modified-Since"] = last_modified
        first_origin = origin(url)
        current, previous, hops = url, None, 0
        while True:
            # caller headers carry credentials meant for the contract's site, not for wherever it redirects
            caller_headers = self.headers if origin(current) == first_origin else {}
            if state.robots:
                asked = state.clock()
                refusal = yield CheckRobots(current)
                # reading the host's robots.txt (once a run, waiting its turns at the host like any request)
                # is the crawl's time, not the page's: it does not count against the page's deadline
                state.started += state.clock() - asked
                if refusal is not None:
                    # a page whose own address the guard refuses says so, with the opt-in that may help:
                    # robots.txt on its host was refused for that very reason
                    yield from self._check_address(state, current, previous)
                    where = redact_url(current) if current != url else None
                    raise self._error(state, refusal.kind, url, messages.robots(refusal.detail, where),
                                      transient=refusal.transient)
            answer = yield from self._hop(state, current, previous, {**caller_headers, **conditional})
            if answer.status not in REDIRECT_STATUSES:
                return self._page(state, current, answer, etag, last_modified)
            location = answer.headers.get("location")
            if not location:
                detail = messages.bad_redirect(answer.status, "without a Location header")
                raise self._error(state, "http_status", current, detail, status=answer.status)
            if hops >= self.max_redirects:
                detail = messages.too_many_redirects(self.max_redirects, redact_url(location))
                raise self._error(state, "too_many_redirects", current, detail, status=answer.status)
            hops += 1
            try:
                previous, current = current, urljoin(current, location)
            except ValueError:
                detail = messages.bad_redirect(answer.status, "to a malformed Location")
                raise self._error(state, "http_status", current, detail, status=answer.status) from None

    def _hop(
        self, state: FetchState, url: str, via: str | None, headers: dict[str, str]
    ) -> Generator[Step, Any, Answer]:
        """One hop with retries; returns any answer that is not retryable or raises FetchError."""
        retries_done = 0
        wait = 0.0
        while True:
            at_proxy = False
            if wait:
                yield Sleep(wait)
            waited = yield Turn(url)
            state.started += waited or 0.0  # the host's queue is the crawl's time, not the page's
            remaining = state.remaining()
            if remaining <= 0:
                raise self._deadline_error(state, url, None)
            # Checked before every attempt, not once per hop, so a DNS answer that changes between
            # retries is checked again. A refused address is not an HTTP attempt and is not recorded.
            unresolved, addresses = yield from self._check_address(state, url, via)
            record: dict[str, Any] = {
                "attempt": len(state.attempts) + 1, "status": None, "error": None, "waited_s": round(wait, 3)
            }
            state.attempts.append(record)
            answer: Answer | None = None
            timeout = min(self.timeout_s, remaining)
            try:
                if unresolved:
                    raise unresolved
                answer = yield Exchange(url, headers, timeout, state, self.max_bytes, record, addresses)
            except httpx.TimeoutException:
                kind, record["error"] = "timeout", messages.no_response(timeout)
            except zlib.error as exc:
                # usually a body cut off in transit, so treated like a broken connection
                kind = "connection"
                record["error"] = self.scrub(f"failed: body could not be decompressed: {exc}")
            except httpx.ProxyError as exc:
                # the proxy failed, not the site: the next attempt goes through another one, at once
                kind, at_proxy = "connection", True
                record["error"] = self.scrub(f"connection failed: {exc}")
            except (httpx.TransportError, ResolutionFailed) as exc:
                untrusted = untrusted_certificate(exc)
                if untrusted is not None:  # another try would be shown the same certificate
                    record["error"] = self.scrub(f"certificate not trusted: {untrusted}")
                    raise self._error(state, "untrusted_certificate", url,
                                      messages.untrusted_certificate(untrusted)) from None
                kind = "connection"
                record["error"] = self.scrub(f"connection failed: {type(exc).__name__}: {exc}")
            except httpx.InvalidURL as exc:
                raise self._error(state, "invalid_url", url, messages.malformed_url(exc)) from None
            except DeclaredTooLarge as exc:
                raise self._too_large(state, url, f"Content-Length is {exc.declared} bytes") from None
            except TooLarge as exc:
                raise self._too_large(state, url, f"stopped reading after {exc.seen} bytes") from None
            except DeadlinePassed:
                raise self._deadline_error(state, url, None) from None
            except UnsupportedEncoding as exc:
                detail = messages.bad_encoding(exc.content_encoding, str(exc))
                raise self._error(state, "bad_encoding", url, detail, status=record["status"]) from None
            else:
                if answer.status not in RETRY_STATUSES:
                    return answer
                kind, record["error"] = "http_status", f"HTTP {answer.status}"
            if retries_done >= self.retries:
                raise self._exhausted_error(state, url, kind, answer, timeout)
            retry_after = None
            if answer is not None:
                retry_after = retry_after_seconds(answer.headers.get("retry-after"), now=self.wall_clock())
            if retry_after is not None:
                wait = retry_after
            elif at_proxy:
                wait = 0.0
            else:
                wait = min(self.backoff_s * 2**retries_done, MAX_BACKOFF_S)
            if state.elapsed() + wait > self.deadline_s:
                from_retry_after = retry_after is not None
                raise self._deadline_error(state, url, answer, wait=wait, from_retry_after=from_retry_after)
            retries_done += 1

    def _check_address(
        self, state: FetchState, url: str, via: str | None
    ) -> Generator[Step, Any, tuple[ResolutionFailed | None, tuple[str, ...] | None]]:
        """Raises FetchError if the address is refused; returns a DNS failure for the retry loop to handle,
        or the addresses checked, which the exchange connects to."""
        try:
            addresses = yield CheckAddress(url)
        except ResolutionFailed as exc:
            return exc, None
        except AddressBlocked as exc:
            hint = OPT_IN_HINT if exc.opt_in_helps else "this address is never fetched"
            detail = messages.blocked(str(exc), hint, redact_url(url) if via else None)
            raise self._error(state, "blocked_address", state.requested_url, detail) from None
        return None, addresses

    def _page(
        self, state: FetchState, url: str, answer: Answer, etag: str | None, last_modified: str | None
    ) -> Page:
        headers = self._public_headers(answer.headers)
        common = dict(
            url=redact_url(url),
            requested_url=redact_url(state.requested_url),
            headers=headers,
            attempts=tuple(state.attempts),
        )
        if answer.status == 304:
            if not (etag or last_modified):
                # nothing was asked to be compared, so there is no earlier copy this could refer to
                detail = messages.unconditional_not_modified()
                raise self._error(state, "http_status", url, detail, status=304)
            return Page(
                status=304, html="", sha256="", elapsed_s=state.elapsed(), encoding=None, not_modified=True,
                etag=headers.get("etag", etag), last_modified=headers.get("last-modified", last_modified),
                **common,
            )
        if answer.body is None:
            detail = messages.failed_status(answer.status, answer.reason)
            raise self._error(state, "http_status", url, detail, status=answer.status)
        html, encoding = decode_html(answer.body, answer.headers.get("content-type"))
        return Page(
            status=answer.status, html=html, sha256=hashlib.sha256(answer.body).hexdigest(),
            elapsed_s=state.elapsed(), encoding=encoding, etag=headers.get("etag"),
            last_modified=headers.get("last-modified"), body=answer.body if self.keep_body else None,
            **common,
        )

    def _public_headers(self, headers: httpx.Headers) -> dict[str, str]:
        return {
            name.lower(): self.scrub(value)
            for name, value in headers.items()
            if name.lower() not in _DROPPED_RESPONSE_HEADERS
        }

    def _error(
        self, state: FetchState, kind: str, url: str, detail: str, *, status: int | None = None,
        transient: bool = False,
    ) -> FetchError:
        where = redact_url(url)
        if url != state.requested_url and kind != "blocked_address":
            where += f" (redirected from {redact_url(state.requested_url)})"
        return FetchError(
            self.scrub(f"GET {where} {detail}"),
            kind=kind,
            url=self.scrub(redact_url(state.requested_url)),
            status=status,
            transient=transient,
            attempts=tuple(state.attempts),
        )

    def _too_large(self, state: FetchState, url: str, evidence: str) -> FetchError:
        status = state.attempts[-1]["status"] if state.attempts else None
        detail = messages.too_large(self.max_bytes, evidence)
        return self._error(state, "too_large", url, detail, status=status)

    def _exhausted_error(
        self, state: FetchState, url: str, kind: str, answer: Answer | None, timeout: float
    ) -> FetchError:
        tries = len(state.attempts)
        if kind == "timeout":
            detail = messages.timed_out(timeout, tries)
        elif kind == "connection":
            detail = messages.connection_failed(state.attempts[-1]["error"], tries)
        else:
            assert answer is not None
            detail = messages.status_after_retries(answer.status, answer.reason, tries)
        status = answer.status if answer else None
        return self._error(state, kind, url, detail, status=status, transient=True)

    def _deadline_error(
        self, state: FetchState, url: str, answer: Answer | None, *, wait: float = 0.0,
        from_retry_after: bool = False,
    ) -> FetchError:
        tries = len(state.attempts)
        if answer is None:
            detail = messages.deadline_passed(self.deadline_s, tries)
            return self._error(state, "timeout", url, detail, transient=True)
        if from_retry_after:
            detail = messages.retry_after_past_deadline(answer.status, wait, self.deadline_s, tries)
        else:
            detail = messages.retry_past_deadline(answer.status, self.deadline_s)
        return self._error(state, "http_status", url, detail, status=answer.status, transient=True)
