"""Raw pages in an S3-compatible object store (``s3://bucket/prefix``; also ``gs://`` and ``az://``), through
obstore: every worker host reaches the same pages with no shared folder and no load on the project store.

The endpoint and credentials come from the standard variables of the store's SDKs, which obstore reads
(``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``, ``AWS_REGION``, ``AWS_ALLOW_HTTP``
for a plain-HTTP endpoint such as a local MinIO): the credentials never pass through this project's
settings, events or errors. Objects are ``<prefix>/<sha[:2]>/<sha>.html.gz``, gzip as in a folder.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from typing import Any

from scrape_contracts.adapters.pages.base import PageStorageError, checked_sha, compressed, decompressed, encoded

# a page stored again within this long is not written again: fresher than any retention grace period needs
# (an hour by default), and the same page fetched by a whole sweep costs one HEAD each, not one PUT
REFRESH_S = 600.0
_DELETE_AT_ONCE = 1000  # S3's DeleteObjects limit


def _obstore() -> Any:
    try:
        import obstore
    except ImportError:
        raise PageStorageError("page_storage", "an object store for pages needs obstore: "
                               "pip install 'scrape_contracts[s3]'") from None
    return obstore


class ObjectPages:
    """Pages in the object store at ``url``."""

    def __init__(self, url: str, clock: Callable[[], float] = time.time) -> None:
        obstore = _obstore()
        from obstore.store import from_url

        self.location = url
        self.clock = clock
        self._ob = obstore
        try:
            # bounded: a store that does not answer fails the page (a transient fetch failure), never the
            # run; the client's own timeouts (5 s to connect, 30 s a request) are kept, as client options
            # given here would replace those read from the environment (AWS_ALLOW_HTTP among them)
            self.store = from_url(url, retry_config={"max_retries": 3,
                                                     "retry_timeout": dt.timedelta(seconds=30)})
        except Exception as exc:  # noqa: BLE001 (obstore's errors for a malformed URL or missing bucket name)
            raise PageStorageError("page_storage", f"cannot open the page storage {url!r}: {_first_line(exc)} "
                                   "(expected s3://bucket/prefix; see docs/scale.md)") from None

    def __repr__(self) -> str:
        return f"ObjectPages({self.location})"

    @staticmethod
    def _key(sha256: str) -> str:
        return f"{checked_sha(sha256)[:2]}/{sha256}.html.gz"

    def put(self, html: str) -> str:
        """Store ``html`` and return its sha256; a page stored within ``REFRESH_S`` is not written again."""
        data, sha = encoded(html)
        key = self._key(sha)
        try:
            meta = self._head(key)
            if meta is not None and meta["last_modified"].timestamp() >= self.clock() - REFRESH_S:
                return sha
            # written again when older: fresh for ``prune``'s grace period, as a folder's file is touched
            self._ob.put(self.store, key, compressed(data))
        except PageStorageError:
            raise
        except Exception as exc:  # noqa: BLE001 (obstore raises builtin OSError subclasses and its own)
            raise PageStorageError("page_storage", f"could not store the page in {self.location}: "
                                   f"{_first_line(exc)} (check the bucket, AWS_ENDPOINT_URL and the "
                                   "credentials)") from None
        return sha

    def get(self, sha256: str) -> str | None:
        try:
            blob = self._ob.get(self.store, self._key(sha256)).bytes()
        except FileNotFoundError:
            return None
        return decompressed(bytes(blob))

    def exists(self, sha256: str) -> bool:
        return self._head(self._key(sha256)) is not None

    def prune(self, keep: set[str], older_than: float | None = None) -> int:
        """Delete every page not in ``keep`` last stored before ``older_than`` (None: whatever its age)."""
        stale = [meta["path"] for batch in self._ob.list(self.store) for meta in batch
                 if _sha_of(meta["path"]) not in keep
                 and (older_than is None or meta["last_modified"].timestamp() < older_than)]
        for start in range(0, len(stale), _DELETE_AT_ONCE):
            self._ob.delete(self.store, stale[start:start + _DELETE_AT_ONCE])
        return len(stale)

    def count(self) -> int:
        return sum(1 for batch in self._ob.list(self.store) for meta in batch if meta["path"].endswith(".html.gz"))

    def _head(self, key: str) -> dict[str, Any] | None:
        try:
            return self._ob.head(self.store, key)
        except FileNotFoundError:
            return None


def _sha_of(path: str) -> str:
    return path.rsplit("/", 1)[-1].removesuffix(".html.gz")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__
