from __future__ import annotations

import gzip
import hashlib
import os
import stat
import threading
from pathlib import Path

from scrape_contracts.adapters import artifacts as artifacts_module
from scrape_contracts.adapters.artifacts import ArtifactStore

PAGE = "<html><body><h1>Caf\u00e9 cr\u00e8me</h1><p>\u20ac 3,50</p></body></html>"


def _file(root: Path, sha: str) -> Path:
    return root / sha[:2] / f"{sha}.html.gz"


def test_a_page_is_stored_under_its_sha256_and_reads_back(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    sha = store.put(PAGE)
    assert sha == hashlib.sha256(PAGE.encode("utf-8")).hexdigest()
    assert gzip.decompress(_file(tmp_path, sha).read_bytes()) == PAGE.encode("utf-8")
    assert store.get(sha) == PAGE and store.exists(sha)
    # only the owner reads it, as tempfile.mkstemp made it; no temporary file is left behind
    assert stat.S_IMODE(_file(tmp_path, sha).stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == [f"{sha}.html.gz"]


def test_the_same_page_again_is_one_file_made_fresh(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    sha = store.put(PAGE)
    path = _file(tmp_path, sha)
    os.utime(path, (1_000_000, 1_000_000))
    assert store.put(PAGE) == sha
    assert path.stat().st_mtime > 1_000_000  # fresh for prune's grace period
    assert store.count() == 1


def test_folders_are_made_again_when_they_are_gone(tmp_path: Path) -> None:
    root = tmp_path / "artifacts"
    store = ArtifactStore(root)
    sha = store.put(PAGE)
    _file(root, sha).unlink()
    _file(root, sha).parent.rmdir()
    assert store.put(PAGE) == sha and store.get(sha) == PAGE
    for path in root.rglob("*.gz"):
        path.unlink()
    for folder in root.iterdir():
        folder.rmdir()
    root.rmdir()
    assert store.put(PAGE) == sha and store.get(sha) == PAGE


def test_a_temporary_file_left_by_a_killed_writer_is_not_reused(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    sha = hashlib.sha256(PAGE.encode("utf-8")).hexdigest()
    path = _file(tmp_path, sha)
    path.parent.mkdir(parents=True)
    # the names the next writes of this process would take, already there (a writer killed mid-write)
    upcoming = next(artifacts_module._WRITES) + 1
    leftovers = [Path(f"{path}.{artifacts_module._TOKEN}-{os.getpid()}-{upcoming + i}.tmp") for i in range(3)]
    for leftover in leftovers:
        leftover.write_bytes(b"truncated")
    assert store.put(PAGE) == sha and store.get(sha) == PAGE
    assert all(leftover.read_bytes() == b"truncated" for leftover in leftovers)


def test_threads_storing_pages_at_once_each_store_theirs(tmp_path: Path) -> None:
    store = ArtifactStore(tmp_path)
    pages = [f"<html><body>page {i % 40}</body></html>" for i in range(400)]  # each page stored 10 times
    shas: list[str] = []
    errors: list[BaseException] = []

    def work(part: list[str]) -> None:
        try:
            shas.extend(store.put(page) for page in part)
        except BaseException as exc:  # noqa: BLE001 (reported by the assertion below)
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(pages[i::8],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert store.count() == 40 and len(set(shas)) == 40
    assert all(store.get(hashlib.sha256(p.encode()).hexdigest()) == p for p in pages[:40])
    assert not list(tmp_path.rglob("*.tmp"))
