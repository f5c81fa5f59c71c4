"""What a fetch returns (``Page``), how it fails (``FetchError``) and the two shapes of a fetcher."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Protocol


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
    # the bytes as received (after Content-Encoding), only when the fetcher was asked to keep them
    # (``keep_body``): a gzip sitemap is binary, which ``html`` cannot hold
    body: bytes | None = field(default=None, repr=False, compare=False)

    @property
    def proxy(self) -> str | None:
        """The proxy (its shown name, never a credential) that carried the answer, if any."""
        return self.attempts[-1].get("proxy") if self.attempts else None


class FetchError(Exception):
    """kind: timeout | too_large | http_status | blocked_address | too_many_redirects | connection |
    untrusted_certificate (the site's certificate failed the check: see ``fetch.ca_file``) |
    bad_encoding | fixture_missing | invalid_url | invalid_config | browser_missing | browser_step |
    browser_wait (a rendered page's ``wait_for`` matched nothing, or its network never went quiet: the page's
    business, not a sign that the host is down) | browser_crashed (the renderer or the browser died while
    rendering, e.g. a script ate memory; transient) | the provider adapter's: indeterminate (a submission may
    have made a job that was never recorded: the target is paused for reconciliation) | budget_spent |
    provider_unreachable | provider_timeout (a job still running at the deadline: the next run polls it) |
    provider_job_failed | provider_job_unknown | provider (the provider refused, or answered off protocol).
    ``transient`` is True when running
    again later may succeed."""

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


class AsyncFetcher(Protocol):
    """What ``async_fetcher_for`` returns; safe to call ``fetch`` from many tasks of one event loop."""

    async def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page: ...

    async def aclose(self) -> None: ...


class ClosesOnExit:
    """``with fetcher:`` closes it."""

    def close(self) -> None:
        pass

    def __enter__(self: Any) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncClosesOnExit:
    """``async with fetcher:`` closes it."""

    async def aclose(self) -> None:
        pass

    async def __aenter__(self: Any) -> Any:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
