"""Re-extraction's pages: each target's last fetched page, read back from the artifact store instead of
fetched, behind the async fetcher's interface the batch workers use."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scrape_contracts.adapters.pages import PageStore


@dataclass(frozen=True)
class StoredPage:
    """A page read back from the artifact store instead of fetched: what re-extraction works on."""

    url: str
    html: str
    sha256: str
    status: int = 200
    requested_url: str = ""
    headers: dict[str, str] = field(default_factory=dict)
    elapsed_s: float = 0.0
    encoding: str | None = "utf-8"
    not_modified: bool = False
    etag: str | None = None
    last_modified: str | None = None
    attempts: tuple[dict[str, Any], ...] = ()


class ArtifactFetcher:
    """The fetcher of a re-extraction: the target's last fetched page, from the artifact store."""

    def __init__(self, artifacts: PageStore, pages: dict[str, str], urls: dict[str, str]) -> None:
        self.artifacts, self.pages, self.partitions = artifacts, pages, {u: p for p, u in urls.items()}

    async def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> StoredPage:
        partition = self.partitions[url]
        sha = self.pages.get(partition)
        html = self.artifacts.get(sha) if sha else None
        if html is None:
            raise LookupError(f"no stored page for {partition!r} (never fetched, or pruned): re-extraction "
                              "skips it; scrape it with `scrape-contracts run` instead")
        return StoredPage(url=url, html=html, sha256=sha, requested_url=url)

    async def aclose(self) -> None:
        return None
