"""The fixture adapter (local files standing in for a site) on both paths: ``fetcher_for`` and
``async_fetcher_for`` with ``adapter: fixture``."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from scrape_contracts.adapters.fetch import FetchError, FixtureFetcher, InlineAsyncFetcher
from scrape_contracts.contract.fetch import FetchSettings
from scrape_contracts_tests.adapters.test_fetch import for_contract, mode, unwrap  # noqa: F401 (fixtures)


@pytest.fixture
def open_fixtures(tmp_path: Path, for_contract: Callable[..., Any]) -> Iterator[Callable[[Path], Any]]:
    """The fetcher a contract with ``adapter: fixture`` gets for ``root``, on the path under test."""
    created: list[Any] = []

    def open_(root: Path) -> Any:
        created.append(for_contract(FetchSettings(adapter="fixture", fixture_dir=str(root)), tmp_path))
        return created[-1]

    yield open_
    for fetcher in created:
        fetcher.close()


@pytest.fixture
def fixture_root(tmp_path: Path) -> Path:
    root = tmp_path / "fixtures"
    files = {
        "example.test/index.html": "<p>home</p>",
        "example.test/a/b.html": "<p>b</p>",
        "example.test/a/raw": "<p>raw</p>",
        "example.test/dir/index.html": "<p>dir</p>",
        "example.test/menu.html": "<meta charset='windows-1252'><p>Café €</p>",
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(text.encode("cp1252"))
    (tmp_path / "secret.html").write_text("<p>outside</p>")
    return root


@pytest.mark.parametrize(
    ("url", "html"),
    [
        ("https://example.test/", "<p>home</p>"),
        ("https://example.test", "<p>home</p>"),
        ("https://EXAMPLE.test/a/b", "<p>b</p>"),
        ("http://example.test/a/b.html?page=2#top", "<p>b</p>"),
        ("https://example.test/a/raw", "<p>raw</p>"),
        ("https://example.test/dir/", "<p>dir</p>"),
        ("https://example.test/dir", "<p>dir</p>"),
    ],
)
def test_fixture_fetcher_maps_urls_to_files(open_fixtures, fixture_root: Path, url: str, html: str) -> None:
    page = open_fixtures(fixture_root).fetch(url)
    assert (page.status, page.html, page.url) == (200, html, url)
    assert page.sha256 == page.etag == hashlib.sha256(html.encode()).hexdigest()


def test_fixture_fetcher_decodes_declared_charset(open_fixtures, fixture_root: Path) -> None:
    page = open_fixtures(fixture_root).fetch("https://example.test/menu")
    assert "Café €" in page.html and page.encoding == "cp1252"


def test_fixture_fetcher_not_modified_when_etag_matches(open_fixtures, fixture_root: Path) -> None:
    fetcher = open_fixtures(fixture_root)
    first = fetcher.fetch("https://example.test/a/b")
    again = fetcher.fetch("https://example.test/a/b", etag=first.etag)
    assert (again.status, again.not_modified, again.html, again.etag) == (304, True, "", first.sha256)
    assert not fetcher.fetch("https://example.test/a/b", etag="stale").not_modified


@pytest.mark.parametrize(
    "url",
    [
        "https://example.test/../secret.html",
        "https://example.test/a/%2e%2e/%2e%2e/secret.html",
        "https://example.test/a/..%2f..%2fsecret.html",
        "https://example.test/a\\..\\..\\secret.html",
        "ftp://example.test/a/b",
    ],
)
def test_fixture_fetcher_refuses_paths_outside_root(open_fixtures, fixture_root: Path, url: str) -> None:
    with pytest.raises(FetchError) as caught:
        open_fixtures(fixture_root).fetch(url)
    assert caught.value.kind == "invalid_url"


def test_fixture_fetcher_refuses_symlink_out_of_root(open_fixtures, fixture_root: Path) -> None:
    (fixture_root / "example.test" / "link.html").symlink_to(fixture_root.parent / "secret.html")
    with pytest.raises(FetchError) as caught:
        open_fixtures(fixture_root).fetch("https://example.test/link.html")
    assert caught.value.kind == "invalid_url"


def test_fixture_fetcher_missing_page_names_the_files_tried(open_fixtures, fixture_root: Path) -> None:
    with pytest.raises(FetchError) as caught:
        open_fixtures(fixture_root).fetch("https://example.test/nope")
    error = caught.value
    assert (error.kind, error.transient) == ("fixture_missing", False)
    assert str(fixture_root / "example.test" / "nope.html") in str(error)

    with pytest.raises(FetchError, match="does not exist; check fetch.fixture_dir"):
        open_fixtures(fixture_root / "absent").fetch("https://example.test/")




def test_fixture_adapter_is_built_from_the_contract_folder(tmp_path: Path, for_contract, mode: str) -> None:
    with for_contract(FetchSettings(adapter="fixture", fixture_dir="pages"), tmp_path) as fetcher:
        fixture = unwrap(fetcher)
    if mode == "async":
        assert isinstance(fixture, InlineAsyncFetcher)
        fixture = fixture.fetcher
    assert isinstance(fixture, FixtureFetcher) and fixture.root == tmp_path / "pages"
