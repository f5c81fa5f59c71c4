"""Raw pages in a local folder (the laptop default): ``<root>/<sha[:2]>/<sha>.html.gz``, written then renamed."""

from __future__ import annotations

import errno
import itertools
import os
import secrets
from pathlib import Path

from scrape_contracts.adapters.pages.base import PageStorageError, checked_sha, compressed, decompressed, encoded

# a new file only, never one that exists (O_EXCL), as tempfile.mkstemp opens it
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
# temporary names: this import's token (hosts sharing the folder), the process id (forked workers share the
# token) and a count (threads; next() on it is atomic under the GIL)
_TOKEN = secrets.token_hex(4)
_WRITES = itertools.count()


def _storage_error(exc: OSError, root: Path) -> PageStorageError:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return PageStorageError("no_space", f"no space left on the device holding the pages ({root}): free "
                                "space there or point SCRAPE_CONTRACTS_ARTIFACTS_DIR elsewhere", exc.errno)
    reason = exc.strerror or type(exc).__name__
    return PageStorageError("page_storage", f"could not store the page in {root}: {reason} "
                            "(check SCRAPE_CONTRACTS_ARTIFACTS_DIR and its permissions)", exc.errno)


class FolderPages:
    """Pages in a folder of this host (or a volume every worker host mounts)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.location = str(self.root)

    def _path(self, sha256: str) -> Path:
        return self.root / checked_sha(sha256)[:2] / f"{sha256}.html.gz"

    def put(self, html: str) -> str:
        """Store ``html`` and return its sha256 (of the UTF-8 text)."""
        data, sha = encoded(html)
        path = str(self._path(sha))
        try:
            # fetched again: fresh for ``prune``'s grace period, so a run storing it now never loses it
            os.utime(path)
            return sha
        except FileNotFoundError:
            pass  # new, or pruned just now: write it
        blob = compressed(data)
        # write-then-rename: a crash never leaves a truncated page under a valid name
        try:
            fd, tmp = _new_file(path)
        except OSError as exc:
            raise _storage_error(exc, self.root) from None
        try:
            try:
                view = memoryview(blob)
                while view:
                    view = view[os.write(fd, view):]
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError as exc:
            Path(tmp).unlink(missing_ok=True)
            raise _storage_error(exc, self.root) from None
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return sha

    def get(self, sha256: str) -> str | None:
        path = self._path(sha256)
        if not path.exists():
            return None
        return decompressed(path.read_bytes())

    def exists(self, sha256: str) -> bool:
        return self._path(sha256).exists()

    def prune(self, keep: set[str], older_than: float | None = None) -> int:
        """Delete every page not in ``keep`` whose file was last written (or fetched again) before
        ``older_than`` (a POSIX time; None: whatever its age). Which pages to keep is the retention
        policy's (``service/retention.py``); the age guard spares pages of runs still in flight."""
        removed = 0
        for path in self.root.glob("*/*.html.gz"):
            if path.name.removesuffix(".html.gz") in keep:
                continue
            try:
                if older_than is not None and path.stat().st_mtime >= older_than:
                    continue
                path.unlink()
            except FileNotFoundError:
                continue  # another pruner got there first
            removed += 1
        return removed

    def count(self) -> int:
        return sum(1 for _ in self.root.glob("*/*.html.gz"))


def _new_file(path: str) -> tuple[int, str]:
    """(descriptor, name) of a new temporary file beside ``path``, its folder made when missing.

    Named without tempfile's random names, and the folder made only when it is missing: with mkdir and
    mkstemp on every page, the file system calls cost a batch worker 0.15 ms per page, a fifth of storing it.
    """
    while True:
        tmp = f"{path}.{_TOKEN}-{os.getpid()}-{next(_WRITES)}.tmp"
        try:
            return os.open(tmp, _CREATE, 0o600), tmp
        except FileExistsError:
            continue  # left by a writer killed mid-write that had this name: take the next
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path), exist_ok=True)
