"""Hostile contracts, servers and name servers against both fetch paths (issue 10, the fetch items).

Every test taking ``mode`` (directly or through ``for_contract`` / ``open_fetcher``) runs with the sync
``HttpFetcher`` and with ``AsyncHttpFetcher``. Servers are real, on 127.0.0.1 (and 127.0.0.2 where a test
needs a second loopback address); other names appear only behind an injected resolver.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from scrape_contracts.adapters.fetch import FetchError
from scrape_contracts.contract.fetch import FetchSettings
from scrape_contracts_tests.adapters.test_fetch import (  # noqa: F401 (fixtures)
    for_contract,
    make_fetcher,
    mode,
    open_fetcher,
    site,
    trickling,
)
from scrape_contracts_tests.conftest import Harness, failure_text
from scrape_contracts_tests.fixture_site import FixtureSite, Request, Response

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
    settings = FetchSettings(adapter="fixture", fixture_dir=fixture_dir)
    with for_contract(settings, project / "contracts") as fetcher:
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


@pytest.mark.parametrize(
    "url", ["https://.git/config", "https://shop.test/.env", "https://shop.test/a/.ssh/id"]
)
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
    assert "fetch.fixture_dir 'pages' resolves to /," in message
    assert "SCRAPE_CONTRACTS_FIXTURE_ROOT" in message
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
        poll = {"poll_interval": 0.05}
        threading.Thread(target=self._server.serve_forever, kwargs=poll, daemon=True).start()

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


# --- item 11: server-chosen charsets, metadata addresses, undeclared cp1252, unconditional 304 --------

WESTERN = "<html><body><p>Café – 12,50 €</p><p>“Crème brûlée” — 7,00 €</p></body></html>"


@pytest.mark.parametrize("charset", [
    "zlib", "base64", "rot13", "uu", "hex", "bz2", "quopri", "idna", "punycode", "unicode_escape",
    "raw_unicode_escape", "undefined", "utf-7",
])
@pytest.mark.parametrize("where", ["header", "meta"])
def test_a_charset_naming_no_text_encoding_is_detected_instead(
    site: FixtureSite, make_fetcher, charset: str, where: str
) -> None:
    if where == "header":
        body, content_type = WESTERN.encode("cp1252"), f"text/html; charset={charset}"
    else:
        body, content_type = f'<meta charset="{charset}">{WESTERN}'.encode("cp1252"), "text/html"
    site.set_page("/menu", body, headers={"Content-Type": content_type})

    page = make_fetcher().fetch(site.url("/menu"))

    assert WESTERN in page.html and page.encoding == "cp1252"


@pytest.mark.parametrize("address", ["169.254.169.254", "169.254.170.2", "169.254.170.23", "fd00:ec2::23",
                                     "fd00:ec2::254", "fd20:ce::254", "100.100.100.200", "168.63.129.16",
                                     "64:ff9b::a9fe:a9fe", "::ffff:169.254.170.2"])
def test_metadata_addresses_stay_refused_with_private_addresses_allowed(open_fetcher, address: str) -> None:
    fetcher = open_fetcher(allow_private_addresses=True, resolver=lambda host: [address], retries=0,
                           timeout_s=0.5)
    host = f"[{address}]" if ":" in address else address
    for url in ("http://credentials.test/v2/credentials", f"http://{host}/latest/meta-data/"):
        with pytest.raises(FetchError) as caught:
            fetcher.fetch(url)
        error = caught.value
        assert error.kind == "blocked_address" and error.attempts == ()
        assert "a cloud metadata address" in str(error) and "this address is never fetched" in str(error)


@pytest.mark.parametrize("text", [
    "<html><head><title>Shop</title></head><body><h1>The Book™</h1><p>Price: £12.99 – “Best seller” — "
    "don’t miss it…</p><footer>© 2024 Example Books</footer></body></html>",
    "<html><body><h1>Menù</h1><p>Perché è così? Più città – caffè 1,20 €</p></body></html>",
    "<html><body><h1>Bücher</h1><p>Größe: 12 × 18 cm – Preis: 19,99 €</p><p>„Schöne Grüße“ aus München</p>"
    "</body></html>",
])
def test_an_undeclared_windows_1252_page_is_read_as_windows_1252(
    site: FixtureSite, make_fetcher, text: str
) -> None:
    site.set_page("/page", text.encode("cp1252"), headers={"Content-Type": "text/html"})

    page = make_fetcher().fetch(site.url("/page"))

    assert (page.html, page.encoding) == (text, "cp1252")


@pytest.mark.parametrize(("text", "encoding"), [
    ("<html><body><p>Цена: 120 руб. – Съешь же ещё этих мягких французских булок</p></body></html>",
     "cp1251"),
    ("<html><body><p>Τιμή: 12,50 € – Καλημέρα κόσμε, ξεσκεπάζω την ψυχοφθόρα βδελυγμία</p></body></html>",
     "cp1253"),
    ("<html><body><p>Cena: 12,50 zł – Zażółć gęślą jaźń, źródło świętości</p></body></html>", "cp1250"),
])
def test_undeclared_non_western_pages_are_not_taken_for_windows_1252(
    site: FixtureSite, make_fetcher, text: str, encoding: str
) -> None:
    site.set_page("/page", text.encode(encoding), headers={"Content-Type": "text/html"})
    assert make_fetcher().fetch(site.url("/page")).html == text


def _always_304(request: Request) -> Response:
    return Response(304, b"", {"ETag": '"v1"'})


def test_an_unconditional_304_is_a_fetch_error(site: FixtureSite, make_fetcher) -> None:
    site.set_handler("/p", _always_304)
    fetcher = make_fetcher()

    with pytest.raises(FetchError) as caught:
        fetcher.fetch(site.url("/p"))

    error = caught.value
    assert (error.kind, error.status, error.transient) == ("http_status", 304, False)
    assert "304 Not Modified to a request that sent no validators" in str(error)
    assert fetcher.fetch(site.url("/p"), etag='"v1"').not_modified  # asked for it: a 304 is an answer


def test_a_304_with_no_accepted_version_to_reuse_is_a_fetch_error(
    site: FixtureSite, make_fetcher, tmp_path: Path
) -> None:
    from scrape_contracts.adapters.pages.folder import FolderPages
    from scrape_contracts.contract.loader import LoadedContract
    from scrape_contracts.contract.model import Contract
    from scrape_contracts.service import scrape

    site.set_handler("/p", _always_304)
    page = make_fetcher().fetch(site.url("/p"), etag='"v1"')  # validators from state, no accepted data
    loaded = LoadedContract(Contract(name="shop", targets=[site.url("/p")], fields={"t": {"selector": "h1"}}),
                            tmp_path / "shop.yaml")

    with pytest.raises(FetchError, match="304 Not Modified, but target 'p1' has no accepted version"):
        scrape.observe_page(loaded, "p1", site.url("/p"), page, None, FolderPages(tmp_path),
                            lambda *_: None)


def test_an_unconditional_304_fails_the_first_scrape_clearly_on_both_paths(
    sqlite_harness: Harness, site: FixtureSite, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scrape_contracts.defs.history import read_trail
    from scrape_contracts_tests.defs.test_batch import run_batch

    monkeypatch.setenv("SCRAPE_CONTRACTS_PARSE_WORKERS", "0")
    site.set_handler("/p", _always_304)
    sqlite_harness.write_product_contract("shop", {"p1": site.url("/p")})

    single = sqlite_harness.run("shop", "p1")
    batch = run_batch(sqlite_harness, "shop", partitions=["p1"])

    assert not single.success
    message = failure_text(single)
    assert "304 Not Modified to a request that sent no validators" in message
    assert "RuntimeError" not in message and "artifact store" not in message
    trail = read_trail(sqlite_harness.instance, "shop", partition="p1", limit=100)[0]
    failed = [e for e in trail if e.stage == "fetch_failed" and e.run_id == batch.run_id]
    assert failed and "304 Not Modified to a request that sent no validators" in failed[0].summary
    assert sqlite_harness.store.latest_candidate("shop", "p1") is None


# --- the fetch deadline is a contract setting ---------------------------------------------------------


def test_the_contract_sets_the_fetch_deadline(trickling, for_contract, tmp_path: Path) -> None:
    head = b"HTTP/1.1 200 OK\r\n" + b"X-Padding: " + b"a" * 2000 + b"\r\n\r\n"
    server = trickling(head, interval=0.05)
    # the server trickles every path, robots.txt too (which would keep the page from being asked at all)
    settings = FetchSettings(timeout_s=5, deadline_s=1, retries=3, allow_private_addresses=True, robots="ignore")

    started = time.monotonic()
    with pytest.raises(FetchError) as caught, for_contract(settings, tmp_path) as fetcher:
        fetcher.fetch(server.url)

    assert time.monotonic() - started < 2.5
    assert caught.value.kind == "timeout" and "fetch deadline of 1s passed" in str(caught.value)
    assert FetchSettings().deadline_s == 60
