from __future__ import annotations

import gzip
import hashlib
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from scrape_contracts.adapters.pages import folder as artifacts_module
from scrape_contracts.adapters.pages import PageStorageError, PageStore, open_pages
from scrape_contracts.adapters.pages.folder import FolderPages

PAGE = "<html><body><h1>Caf\u00e9 cr\u00e8me</h1><p>\u20ac 3,50</p></body></html>"


def _file(root: Path, sha: str) -> Path:
    return root / sha[:2] / f"{sha}.html.gz"


def test_a_page_is_stored_under_its_sha256_and_reads_back(tmp_path: Path) -> None:
    store = FolderPages(tmp_path)
    sha = store.put(PAGE)
    assert sha == hashlib.sha256(PAGE.encode("utf-8")).hexdigest()
    assert gzip.decompress(_file(tmp_path, sha).read_bytes()) == PAGE.encode("utf-8")
    assert store.get(sha) == PAGE and store.exists(sha)
    # only the owner reads it, as tempfile.mkstemp made it; no temporary file is left behind
    assert stat.S_IMODE(_file(tmp_path, sha).stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.rglob("*") if p.is_file()] == [f"{sha}.html.gz"]


def test_the_same_page_again_is_one_file_made_fresh(tmp_path: Path) -> None:
    store = FolderPages(tmp_path)
    sha = store.put(PAGE)
    path = _file(tmp_path, sha)
    os.utime(path, (1_000_000, 1_000_000))
    assert store.put(PAGE) == sha
    assert path.stat().st_mtime > 1_000_000  # fresh for prune's grace period
    assert store.count() == 1


def test_folders_are_made_again_when_they_are_gone(tmp_path: Path) -> None:
    root = tmp_path / "artifacts"
    store = FolderPages(root)
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
    store = FolderPages(tmp_path)
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
    store = FolderPages(tmp_path)
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


# ---- every backend behind one interface -------------------------------------------------------------------

class S3Server:
    """moto's S3 server on a loopback port: a stand-in for a hosted S3-compatible store, which cannot run
    here (moto implements S3's HTTP API; obstore talks to it as to AWS). Started and stopped by its PID."""

    def __init__(self, tmp: Path) -> None:
        self.log_path = tmp / "moto.log"
        self.log = self.log_path.open("w")
        # a free port is probed, then given to moto, which binds it seconds later (its imports): another
        # process may take it in between, and answer in moto's place. So the server must answer as S3 does;
        # a moto that could not bind has exited, and is started again on another port.
        for _ in range(5):
            if self._started():
                return
        raise RuntimeError(f"moto server did not start: {self.log_path.read_text()[-2000:]}")

    def _started(self) -> bool:
        import socket
        import subprocess
        import sys

        import httpx

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p",
                                         str(self.port)], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while self.process.poll() is None:  # until it answers as S3 (its start is a few seconds of imports)
            try:
                if "ListAllMyBucketsResult" in httpx.get(self.endpoint, timeout=2).text:
                    return True
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.process.kill()
                self.process.wait(timeout=30)
                raise RuntimeError(f"moto server did not start: {self.log_path.read_text()[-2000:]}")
            time.sleep(0.1)
        return False

    def environ(self) -> dict[str, str]:
        return {"AWS_ENDPOINT_URL": self.endpoint, "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": "test",
                "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1"}

    def make_bucket(self, name: str) -> None:
        import httpx

        httpx.put(f"{self.endpoint}/{name}", timeout=10).raise_for_status()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


@pytest.fixture
def s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[S3Server]:
    server = S3Server(tmp_path)
    try:
        for name, value in server.environ().items():
            monkeypatch.setenv(name, value)
        server.make_bucket("pages")
        yield server
    finally:
        server.stop()


@pytest.fixture(params=["folder", "sqlite", "postgres", "s3"])
def pages(request: pytest.FixtureRequest, tmp_path: Path) -> PageStore:
    """One page storage of each kind, opened from its location as a worker opens it."""
    location = {"folder": lambda: str(tmp_path / "pages"),
                "sqlite": lambda: f"sqlite:///{tmp_path / 'store.db'}",
                "postgres": lambda: request.getfixturevalue("pg_database"),
                "s3": lambda: (request.getfixturevalue("s3"), "s3://pages/team-a")[1]}[request.param]()
    return open_pages(location)


def test_every_backend_stores_a_page_once_under_its_sha256(pages: PageStore) -> None:
    sha = pages.put(PAGE)
    assert sha == hashlib.sha256(PAGE.encode("utf-8")).hexdigest()
    assert pages.put(PAGE) == sha and pages.count() == 1  # the same page again: stored once
    assert pages.get(sha) == PAGE and pages.exists(sha)
    # opened again from its location (another process, another host): the same page
    again = open_pages(pages.location)
    assert again.get(sha) == PAGE
    missing = hashlib.sha256(b"never stored").hexdigest()
    assert pages.get(missing) is None and not pages.exists(missing)
    with pytest.raises(ValueError, match="not a sha256"):
        pages.get("../../etc/passwd")


def test_every_backend_prunes_what_is_not_kept_and_spares_fresh_pages(pages: PageStore) -> None:
    kept, old = pages.put("<p>kept</p>"), pages.put("<p>old</p>")
    # everything was stored just now: a grace period of an hour spares it all
    assert pages.prune(keep={kept}, older_than=time.time() - 3600) == 0 and pages.count() == 2
    assert pages.prune(keep={kept}, older_than=time.time() + 5) == 1
    assert pages.get(kept) == "<p>kept</p>" and pages.get(old) is None and pages.count() == 1
    assert pages.prune(keep=set()) == 1 and pages.count() == 0


def test_a_database_page_stored_again_is_made_fresh(tmp_path: Path) -> None:
    from scrape_contracts.adapters.pages.database import DatabasePages

    now = [1_000_000.0]
    pages = DatabasePages(f"sqlite:///{tmp_path / 'store.db'}", clock=lambda: now[0])
    sha = pages.put(PAGE)
    now[0] += 7200
    assert pages.put(PAGE) == sha
    assert pages.prune(keep=set(), older_than=now[0] - 3600) == 0  # fetched again: inside the grace period
    assert pages.get(sha) == PAGE


def test_an_object_store_page_is_written_again_only_when_old(s3: S3Server) -> None:
    from scrape_contracts.adapters.pages import objects

    now = [time.time()]
    pages = objects.ObjectPages("s3://pages/p", clock=lambda: now[0])
    sha = pages.put(PAGE)
    first = pages._head(pages._key(sha))["last_modified"]  # noqa: SLF001 (the object's own timestamp)
    assert pages.put(PAGE) == sha and pages._head(pages._key(sha))["last_modified"] == first  # noqa: SLF001
    now[0] += objects.REFRESH_S + 3600  # long after: written again, so that retention's grace spares it
    deadline = time.monotonic() + 30
    while pages._head(pages._key(sha))["last_modified"] == first:  # noqa: SLF001 (S3 keeps whole seconds)
        assert time.monotonic() < deadline
        pages.put(PAGE)
        time.sleep(0.2)


def test_unusable_page_storages_fail_with_one_line_that_says_what_to_do(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(PageStorageError, match="unknown page storage 'ftp://pages': use a folder, 'store'"):
        open_pages("ftp://pages")
    # an object store that does not answer: the page fails with the location, not obstore's traceback
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ALLOW_HTTP", "true")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    with pytest.raises(PageStorageError) as caught:
        open_pages("s3://pages/p").put(PAGE)
    assert str(caught.value).startswith("could not store the page in s3://pages/p: ")
    assert "\n" not in str(caught.value) and "AWS_ENDPOINT_URL" in str(caught.value)
