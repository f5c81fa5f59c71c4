"""``targets:``: the pages of a contract (each one a Dagster partition), listed or added at runtime."""

from __future__ import annotations

import hashlib
import re
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

from pydantic import Field, ValidationInfo, field_validator

from scrape_contracts.contract.base import Strict, confined
from scrape_contracts.contract.schedule import Canary

PARTITION_KEY_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# longer URLs are refused: a URL is stored, keyed and shown in run history (browsers' practical limit is near)
URL_MAX_LENGTH = 2048


class Target(Strict):
    """One page of a contract; it is one Dagster partition."""

    url: str
    key: str | None = Field(None, description="Partition key; derived from the URL when absent.")
    expected: dict[str, Any] = Field(
        default_factory=dict, description="Values this page must have (e.g. its SKU): field → value."
    )
    canary: Canary | bool | None = Field(
        None, description="A canary with its own schedule ({schedule, notify, failing_after}; what it leaves "
                          "out comes from the contract's canary:), true, or false to leave it out.")

    @field_validator("url")
    @classmethod
    def _url_is_absolute(cls, value: str) -> str:
        if len(value) > URL_MAX_LENGTH:
            raise ValueError(f"target URL is {len(value)} characters long, more than {URL_MAX_LENGTH}: "
                             f"{without_userinfo(value[:80])!r}...")
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"target URL must be absolute http(s), got {without_userinfo(value)!r}")
        if "@" in parts.netloc:
            # a URL is a name: it ends up in partition keys, run history, the store and every log line
            raise ValueError(
                f"target URL {without_userinfo(value)!r} carries a user name or password; URLs are not "
                "secret (they become partition keys and appear in run history), so remove them and send "
                "the credentials as a header read from the environment, e.g. fetch: headers: "
                "{Authorization: 'Basic ${SITE_BASIC_AUTH}'}"
            )
        return value

    @field_validator("key")
    @classmethod
    def _key_is_valid(cls, value: str | None) -> str | None:
        if value is not None and not PARTITION_KEY_RE.match(value):
            raise ValueError(
                f"partition key {value!r} must match {PARTITION_KEY_RE.pattern} (letters, digits, . _ -)"
            )
        return value

    @property
    def partition_key(self) -> str:
        return self.key or partition_key_for_url(self.url)


class DynamicTargets(Strict):
    """Targets added at runtime (CLI ``targets add`` or the targets-file sensor)."""

    dynamic: Literal[True]
    file: str | None = Field(
        None, description="A text file of URLs (one per line), relative to the contract; a sensor syncs it."
    )

    @field_validator("file")
    @classmethod
    def _file_is_confined(cls, value: str | None, info: ValidationInfo) -> str | None:
        return confined("targets.file", value, info)



def target_problems(data: dict[str, Any]) -> list[tuple[tuple[str | int, ...], str]]:
    """(location, message) of every target that names an unknown field or repeats a partition key; tolerant
    of targets and fields that are themselves invalid (those have their own errors)."""
    targets, fields = data.get("targets"), data.get("fields")
    if not isinstance(targets, list):
        return []
    if not targets:
        return [(("targets",), "targets is empty: list at least one URL, or use {dynamic: true}")]
    names = set(fields) if isinstance(fields, dict) else None
    problems: list[tuple[tuple[str | int, ...], str]] = []
    seen: dict[str, str] = {}
    fetch = data.get("fetch")
    # a provider's jobs are told apart by the URL they fetch (adapters/fetch/provider): one target per URL
    provider = isinstance(fetch, dict) and fetch.get("adapter") == "provider"
    by_url: dict[str, str] | None = {} if provider else None
    for i, raw in enumerate(targets):
        target = {"url": raw} if isinstance(raw, str) else raw
        if not isinstance(target, dict) or not isinstance(target.get("url"), str):
            continue
        url, expected = target["url"], target.get("expected")
        if names is not None and isinstance(expected, dict):
            unknown = sorted(str(k) for k in set(expected) - names)
            if unknown:
                problems.append((("targets", i, "expected"),
                                 f"target {url!r} expects unknown field(s) {', '.join(unknown)}"))
        key = target.get("key") if isinstance(target.get("key"), str) else partition_key_for_url(url)
        if key in seen:
            problems.append((("targets", i), f"targets {seen[key]!r} and {url!r} share partition key {key!r}"))
        seen.setdefault(key, url)
        if by_url is not None and url in by_url and by_url[url] != key:
            problems.append((("targets", i), f"targets {by_url[url]!r} and {key!r} share the URL {url!r}: "
                                             "with the provider adapter each target needs a URL of its own"))
        if by_url is not None:
            by_url.setdefault(url, key)
    return problems


def partition_key_for_url(url: str) -> str:
    """A valid, stable Dagster partition key for any URL.

    ``<readable slug of host+path+query, at most 60 chars>-<first 10 hex of sha256(url)>``. The slug keeps
    keys recognisable in the UI; the hash keeps them unique and stable whatever characters the URL holds
    (Dagster reserves ``,``, ``...``, ``[`` and control characters in keys, and URLs can be longer than a key
    should be). The same URL always maps to the same key.
    """
    url = without_userinfo(url)  # never part of a key, not even hashed: a short password is guessable
    parts = urlsplit(url)
    readable = parts.netloc + parts.path + (("?" + parts.query) if parts.query else "")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", readable).strip("._-")[:60].rstrip("._-") or "page"
    digest = hashlib.sha256(url.encode("utf-8")).hexdigest()[:10]
    return f"{slug}-{digest}"


def without_userinfo(url: str) -> str:
    """``url`` without ``user:password@``; any other URL unchanged."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return re.sub(r"//[^/?#]*@", "//", url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
