"""The words of every HTTP fetch failure: what went wrong and what to change in the contract.

Each function returns the part after ``GET <url> ``; ``policy`` adds the URL, scrubs secrets and picks the
error kind.
"""

from __future__ import annotations


def status_advice(status: int) -> str:
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


def attempts(n: int) -> str:
    return f"{n} attempt" + ("" if n == 1 else "s")


def seconds(value: float) -> str:
    # a timeout cut short by the deadline is 0.4999…s; nobody needs more than centiseconds
    return f"{round(value, 2):g}s"


def no_response(timeout_s: float) -> str:
    return f"no response within {seconds(timeout_s)}"


def status_line(status: int, reason: str) -> str:
    return f"HTTP {status} {reason}".rstrip()


def invalid_url(problem: str) -> str:
    return (
        f"refused: {problem} (fix the URL in the contract; only absolute http:// and https:// URLs can be "
        "fetched)"
    )


def malformed_url(error: Exception) -> str:
    return f"refused: the URL is malformed ({error}; fix it in the contract)"


def failed_status(status: int, reason: str) -> str:
    return f"failed: {status_line(status, reason)} ({status_advice(status)})"


def unconditional_not_modified() -> str:
    return (
        "failed: HTTP 304 Not Modified to a request that sent no validators (If-None-Match / "
        "If-Modified-Since), so there is no earlier copy to reuse (the site is misbehaving; check the URL, "
        "or whether a cache in front of the site answers 304 to everyone)"
    )


def bad_redirect(status: int, what: str) -> str:
    # what: "without a Location header" | "to a malformed Location"
    return (
        f"failed: HTTP {status} redirect {what} (the site is misbehaving; point the contract at the page's "
        "final URL)"
    )


def too_many_redirects(max_redirects: int, next_hop: str) -> str:
    return (
        f"refused: more than max_redirects={max_redirects} redirects (next hop {next_hop}; point the "
        "contract at the final URL, or raise fetch.max_redirects if the chain is legitimate)"
    )


def blocked(reason: str, hint: str, redirected_to: str | None) -> str:
    where = f"refused: it redirected to {redirected_to}, and" if redirected_to else "refused:"
    return f"{where} {reason} ({hint})"


def too_large(max_bytes: int, evidence: str) -> str:
    return (
        f"refused: response is larger than max_bytes={max_bytes} ({evidence}; raise fetch.max_bytes in the "
        "contract if the page is legitimately this big)"
    )


def bad_encoding(content_encoding: str, why: str) -> str:
    return (
        f"refused: Content-Encoding {content_encoding!r}: {why} (only gzip and deflate, at most two layers, "
        "can be inflated within max_bytes; if fetch.headers sets Accept-Encoding, remove it)"
    )


def timed_out(timeout_s: float, tries: int) -> str:
    return (
        f"timed out: {no_response(timeout_s)} ({attempts(tries)}; the site is slow or unreachable "
        "— raise fetch.timeout_s in the contract if it is just slow)"
    )


def connection_failed(error: str, tries: int) -> str:
    return f"{error} ({attempts(tries)}; check the host name and that the site is up — usually temporary)"


def untrusted_certificate(reason: str) -> str:
    return (f"refused: the site's certificate is not trusted ({reason}); if the site's certificate is signed by "
            "your own CA, point fetch.ca_file at that CA's PEM file (certificates are always checked)")


def status_after_retries(status: int, reason: str, tries: int) -> str:
    return f"failed: {status_line(status, reason)} after {attempts(tries)} ({status_advice(status)})"


def retry_after_past_deadline(status: int, wait: float, deadline_s: float, tries: int) -> str:
    return (
        f"gave up: HTTP {status} with Retry-After of {wait:.0f}s, which would pass the fetch deadline of "
        f"{deadline_s:g}s ({attempts(tries)} so far; the site is asking us to back off — run again later)"
    )


def retry_past_deadline(status: int, deadline_s: float) -> str:
    return (
        f"gave up: HTTP {status} and the next retry would pass the fetch deadline of {deadline_s:g}s "
        f"({status_advice(status)})"
    )


def deadline_passed(deadline_s: float, tries: int) -> str:
    return (
        f"timed out: the fetch deadline of {deadline_s:g}s passed after {attempts(tries)} (the site is slow "
        "or unreachable; run again later)"
    )


def robots(detail: str, redirected_to: str | None) -> str:
    hop = f" (redirected to {redirected_to})" if redirected_to else ""
    return f"not fetched{hop}: {detail}"
