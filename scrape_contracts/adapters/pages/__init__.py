"""Where raw fetched pages live, behind one interface (``PageStore``), content-addressed by the sha256 of
their UTF-8 text and stored once whoever fetched them.

Backends, chosen by the page storage's location (``SCRAPE_CONTRACTS_PAGES``, or the component's ``pages``):

- a folder path (or ``file://``): ``folder.FolderPages``, the laptop default;
- a database URL, which ``store`` in the settings stands for (the project store's own): ``database.DatabasePages``;
- ``s3://bucket/prefix`` (also ``gs://``, ``az://``): ``objects.ObjectPages``.

Healing, re-extraction and retention work the same from each: a page host A stored is read on host B.
"""

from __future__ import annotations

from typing import Protocol
from urllib.parse import unquote, urlsplit

from scrape_contracts.adapters.pages.base import PageStorageError

DATABASE_SCHEMES = ("postgresql", "sqlite")
OBJECT_SCHEMES = ("s3", "s3a", "gs", "az", "abfs", "memory")


class PageStore(Protocol):
    """The raw pages, by sha256."""

    location: str  # what ``open_pages`` opens again, in another process or on another host

    def put(self, html: str) -> str:
        """Store ``html``; its sha256. Storing a page again makes it fresh for ``prune``'s grace period."""

    def get(self, sha256: str) -> str | None: ...

    def exists(self, sha256: str) -> bool: ...

    def prune(self, keep: set[str], older_than: float | None = None) -> int:
        """Delete every page not in ``keep`` last stored before ``older_than`` (a POSIX time); how many."""

    def count(self) -> int: ...


def open_pages(location: str) -> PageStore:
    """The page storage at ``location`` (a folder, a database URL or an object store URL)."""
    scheme = urlsplit(location).scheme.split("+", 1)[0].lower() if "://" in location else ""
    if scheme in DATABASE_SCHEMES:
        from scrape_contracts.adapters.pages.database import DatabasePages

        return DatabasePages(location)
    if scheme in OBJECT_SCHEMES:
        from scrape_contracts.adapters.pages.objects import ObjectPages

        return ObjectPages(location)
    from scrape_contracts.adapters.pages.folder import FolderPages

    if scheme == "file":
        return FolderPages(unquote(urlsplit(location).path))
    if scheme:
        raise PageStorageError("page_storage", f"unknown page storage {location!r}: use a folder, 'store' (the "
                               "project store's database) or s3://bucket/prefix (docs/scale.md)")
    return FolderPages(location)


__all__ = ["PageStorageError", "PageStore", "open_pages"]
