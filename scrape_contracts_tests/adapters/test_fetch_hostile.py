"""Hostile contracts, servers and name servers against both fetch paths (issue 10, the fetch items).

Every test taking ``mode`` (directly or through ``for_contract`` / ``open_fetcher``) runs with the sync
``HttpFetcher`` and with ``AsyncHttpFetcher``. Servers are real, on 127.0.0.1 (and 127.0.0.2 where a test
needs a second loopback address); other names appear only behind an injected resolver.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from scrape_contracts.adapters.fetch import FetchError
from scrape_contracts.contract.model import FetchSettings
from scrape_contracts_tests.adapters.test_fetch import (  # noqa: F401 (fixtures)
    for_contract,
    mode,
    open_fetcher,
)
from scrape_contracts_tests.conftest import Harness, failure_text

pytestmark = pytest.mark.timeout(60)


# --- item 1: fixture contracts are confined to the project -----------------------------------------


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``<project>/contracts`` beside ``<project>/site/shop.test/index.html``; nothing else allowed."""
    monkeypatch.delenv("SCRAPE_CONTRACTS_FIXTURE_ROOT", raising=False)
    root = tmp_path / "project"
    (root / "contracts").mkdir(parents=True)
    (root / "site" / "shop.test").mkdir(parents=True)
    (root / "site" / "shop.test" / "index.html").write_text("<p>shop</p>")
    (tmp_path / "outside" / "etc").mkdir(parents=True)
    (tmp_path / "outside" / "etc" / "passwd").write_text("root:x:0:0:root:/root:/bin/bash")
    return root


def _fixture_fetch(for_contract: Callable[..., Any], project: Path, fixture_dir: str, url: str) -> Any:
    with for_contract(FetchSettings(adapter="fixture", fixture_dir=fixture_dir), project / "contracts") as fetcher:
        return fetcher.fetch(url)


@pytest.mark.parametrize("fixture_dir", ["/", "../../..", "../../outside", "{outside}"])
def test_fixture_dir_outside_the_project_is_refused(
    for_contract, project: Path, fixture_dir: str
) -> None:
    fixture_dir = fixture_dir.format(outside=project.parent / "outside")
    url = "https://etc/passwd" if fixture_dir == "/" else "https://outside/etc/passwd"
    with pytest.raises(FetchError) as caught:
        _fixture_fetch(for_contract, project, fixture_dir, url)

    error = caught.value
    assert (error.kind, error.transient) == ("invalid_config", False)
    assert "fetch.fixture_dir" in str(error) and "SCRAPE_CONTRACTS_FIXTURE_ROOT" in str(error)
    assert "root:x:0:0" not in str(error)


def test_fixture_dir_symlinked_out_of_the_project_is_refused(for_contract, project: Path) -> None:
    (project / "contracts" / "pages").symlink_to("/")
    with pytest.raises(FetchError) as caught:
        _fixture_fetch(for_contract, project, "pages", "https://etc/passwd")
    assert caught.value.kind == "invalid_config" and "resolves to /," in str(caught.value)


@pytest.mark.parametrize("url", ["https://.git/config", "https://shop.test/.env", "https://shop.test/a/.ssh/id"])
def test_fixture_urls_never_name_hidden_files(for_contract, project: Path, url: str) -> None:
    (project / "site" / "shop.test" / ".env").write_text("DB_URL=postgresql://u:pw@db/x")
    with pytest.raises(FetchError) as caught:
        _fixture_fetch(for_contract, project, "../site", url)
    assert caught.value.kind == "invalid_url" and "hidden" in str(caught.value)


def test_fixture_dir_inside_the_project_and_the_operator_root_still_work(
    for_contract, project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the demo's shape: contracts/ reads ../examples/site/v1
    assert _fixture_fetch(for_contract, project, "../site", "https://shop.test/").html == "<p>shop</p>"

    snapshot = project.parent / "snapshots" / "v2"
    (snapshot / "shop.test").mkdir(parents=True)
    (snapshot / "shop.test" / "index.html").write_text("<p>v2</p>")
    with pytest.raises(FetchError):
        _fixture_fetch(for_contract, project, str(snapshot), "https://shop.test/")
    monkeypatch.setenv("SCRAPE_CONTRACTS_FIXTURE_ROOT", str(snapshot))
    assert _fixture_fetch(for_contract, project, str(snapshot), "https://shop.test/").html == "<p>v2</p>"


def test_a_fixture_dir_swapped_for_a_symlink_after_loading_fails_the_run(
    sqlite_harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SCRAPE_CONTRACTS_FIXTURE_ROOT", raising=False)
    pages = sqlite_harness.contracts_dir / "pages"
    pages.mkdir()
    sqlite_harness.write("leak.yaml", """
        name: leak
        targets: [{url: "https://etc/passwd", key: p1}]
        fetch: {adapter: fixture, fixture_dir: pages}
        fields:
          title: {selector: "//text()"}
    """)
    defs = sqlite_harness.definitions()
    pages.rmdir()
    pages.symlink_to("/")

    result = sqlite_harness.run("leak", "p1", defs)

    assert not result.success
    message = failure_text(result)
    assert "fetch.fixture_dir 'pages' resolves to /," in message and "SCRAPE_CONTRACTS_FIXTURE_ROOT" in message
    assert sqlite_harness.store.latest_candidate("leak", "p1") is None
    assert "root:x:" not in str([event for event in result.all_events])


def test_a_targets_file_swapped_for_a_symlink_after_loading_is_not_read(tmp_path: Path) -> None:
    from scrape_contracts.contract.loader import load_contracts
    from scrape_contracts.defs.targets import read_targets_file

    contracts = tmp_path / "contracts"
    contracts.mkdir()
    (contracts / "urls.txt").write_text("https://shop.example.com/p/1\n")
    (contracts / "jobs.yaml").write_text(
        "name: jobs\ntargets: {dynamic: true, file: urls.txt}\nfields: {title: {selector: h1}}\n")
    [loaded] = load_contracts(contracts).contracts
    assert read_targets_file(loaded) == ["https://shop.example.com/p/1"]

    (contracts / "urls.txt").unlink()
    (contracts / "urls.txt").symlink_to("/etc/passwd")
    with pytest.raises(ValueError, match="targets.file 'urls.txt' resolves to /etc/passwd, outside"):
        read_targets_file(loaded)


# --- item 4: DNS rebinding: the connection goes to the address that was checked --------------------


class LoopbackServer:
    """A real HTTP server on ``host`` that answers every GET with ``name`` and records the Host header."""

    def __init__(self, host: str, port: int = 0, name: str = "") -> None:
        server = self
        self.name = name or host
        self.hosts: list[str] = []

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802 (http.server naming)
                server.hosts.append(self.headers.get("Host", ""))
                body = f"<p>{server.name}</p>".encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def checked_and_fresh() -> Iterator[tuple[LoopbackServer, LoopbackServer]]:
    """One port, two servers: 127.0.0.2 (what the injected resolver answers) and 127.0.0.1 (what a fresh
    lookup of "localhost" gives)."""
    try:
        checked = LoopbackServer("127.0.0.2", name="checked")
    except OSError as exc:
        pytest.skip(f"no second loopback address here: {exc}")
    try:
        fresh = LoopbackServer("127.0.0.1", checked.port, name="fresh lookup")
    except OSError as exc:
        checked.close()
        pytest.skip(f"port {checked.port} is taken on 127.0.0.1: {exc}")
    yield checked, fresh
    for server in (checked, fresh):
        threading.Thread(target=server.close, daemon=True).start()


def test_the_connection_goes_to_the_checked_address_with_the_host_name_kept(
    open_fetcher, checked_and_fresh: tuple[LoopbackServer, LoopbackServer]
) -> None:
    checked, fresh = checked_and_fresh
    fetcher = open_fetcher(allow_private_addresses=True, resolver=lambda host: ["127.0.0.2"], retries=0)

    page = fetcher.fetch(f"http://localhost:{checked.port}/p")

    assert page.html == "<p>checked</p>"
    assert checked.hosts == [f"localhost:{checked.port}"] and fresh.hosts == []


def test_a_name_rebound_to_loopback_after_the_check_is_not_fetched(
    open_fetcher, checked_and_fresh: tuple[LoopbackServer, LoopbackServer]
) -> None:
    _, loopback = checked_and_fresh
    # 3fff::/20 is documentation-only (RFC 9637): public to the guard, routed nowhere
    answers = iter([["3fff::1"], ["127.0.0.1"]])
    fetcher = open_fetcher(resolver=lambda host: next(answers), retries=1, backoff_s=0.0, timeout_s=0.5)

    with pytest.raises(FetchError) as caught:
        fetcher.fetch(f"http://localhost:{loopback.port}/admin")

    assert loopback.hosts == []
    error = caught.value
    assert error.kind == "blocked_address" and "resolves to 127.0.0.1, a loopback address" in str(error)
    # the first attempt went to the checked public address (and found nothing there), the retry was refused
    assert len(error.attempts) == 1 and error.attempts[0]["status"] is None
