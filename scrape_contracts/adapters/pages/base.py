"""What every page storage shares: the address of a page (the sha256 of its UTF-8 text), its compression,
and the one error a storage raises when a page cannot be stored."""

from __future__ import annotations

import gzip
import hashlib


class PageStorageError(OSError):
    """A page could not be stored; one line that names the storage and what to do.

    ``kind``: ``no_space`` (the device is full, or a quota is reached) or ``page_storage`` (anything else the
    storage refused). Transient: the same page can be stored once the cause is fixed."""

    transient = True

    def __init__(self, kind: str, message: str, code: int | None = None) -> None:
        super().__init__(code, message)
        self.kind = kind
        self.message = message

    def __str__(self) -> str:
        return self.message


def checked_sha(sha256: str) -> str:
    """``sha256`` when it is a hex digest: it becomes part of a file name or an object key."""
    if len(sha256) != 64 or any(c not in "0123456789abcdef" for c in sha256):
        raise ValueError(f"not a sha256 hex digest: {sha256!r}")
    return sha256


def encoded(html: str) -> tuple[bytes, str]:
    """The page's UTF-8 bytes and their sha256, its address in every storage."""
    data = html.encode("utf-8")
    return data, hashlib.sha256(data).hexdigest()


def compressed(data: bytes) -> bytes:
    # level 1: 0.7 ms for a 45 KB page where 6 took 1.5 ms (a sixth of a batch worker's time per page), for
    # files 13% larger (27% of the page instead of 24%); measured on the benchmark's pages
    return gzip.compress(data, compresslevel=1)


def decompressed(blob: bytes) -> str:
    return gzip.decompress(blob).decode("utf-8")
