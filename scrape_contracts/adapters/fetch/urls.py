"""URL checks shared by the adapters; ``redact_url`` keeps credentials in a URL out of everything we emit."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit


def redact_url(url: str) -> str:
    """``https://user:pw@host/p`` -> ``https://***@host/p``; other URLs unchanged."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rsplit("@", 1)[1]))


def url_problem(url: str) -> str | None:
    """Why ``url`` cannot be fetched at all, or None."""
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


def origin(url: str) -> tuple[str, str, int | None]:
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return ("", url, None)  # malformed: never equal to a real origin; the guard reports it
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), port or (443 if scheme == "https" else 80)
