"""``FixtureFetcher``: local HTML files standing in for a site, for demos and offline tests."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

from scrape_contracts.adapters.fetch.body import decode_html
from scrape_contracts.adapters.fetch.page import ClosesOnExit, FetchError, Page
from scrape_contracts.adapters.fetch.urls import redact_url, url_problem


class FixtureFetcher(ClosesOnExit):
    """Serves ``<root>/<host>/<path>`` for ``http(s)://<host>/<path>``; for demos and offline tests."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    def __repr__(self) -> str:
        return f"FixtureFetcher(root={str(self.root)!r})"

    def path_for(self, url: str) -> Path:
        """The fixture file for ``url``; FetchError 'invalid_url' or 'fixture_missing' otherwise."""
        safe_url = redact_url(url)
        problem = url_problem(url)
        if problem:
            raise FetchError(
                f"GET {safe_url} refused: {problem} (fixture URLs look like https://<host>/<path>)",
                kind="invalid_url", url=safe_url,
            )
        parts = urlsplit(url)
        host = (parts.hostname or "").lower()
        path = unquote(parts.path)
        segments = path.split("/")
        # a leading dot covers '..' and hidden files (.env, .git) alike
        if "\\" in path or "\x00" in path or any(part.startswith(".") for part in [host, *segments]):
            raise FetchError(
                f"GET {safe_url} refused: the path leaves the fixture directory ('..' or a backslash) or "
                "names a hidden file; fixture URLs must name a file under fixture_dir",
                kind="invalid_url", url=safe_url,
            )
        base = self.root / host
        relative = path.lstrip("/")
        if not relative or path.endswith("/"):
            candidates = [base / relative / "index.html"]
        else:
            target = base / relative
            candidates = [target]
            if not Path(relative).suffix:
                candidates.append(target.with_name(target.name + ".html"))
            candidates.append(target / "index.html")
        root = self.root.resolve()
        for candidate in candidates:
            if candidate.is_file():
                # a symlink inside the fixtures must not expose files outside them, nor hidden ones
                resolved = candidate.resolve()
                if not resolved.is_relative_to(root) or any(
                    part.startswith(".") for part in resolved.relative_to(root).parts
                ):
                    raise FetchError(
                        f"GET {safe_url} refused: {candidate} points outside the fixture directory "
                        f"{self.root} or at a hidden file",
                        kind="invalid_url", url=safe_url,
                    )
                return candidate
        if not self.root.is_dir():
            advice = f"fixture directory {self.root} does not exist; check fetch.fixture_dir in the contract"
        else:
            tried = ", ".join(str(c) for c in candidates)
            advice = f"looked for {tried}; add the page there or fix the URL"
        raise FetchError(
            f"GET {safe_url} failed: no fixture file ({advice})", kind="fixture_missing", url=safe_url
        )

    def fetch(self, url: str, *, etag: str | None = None, last_modified: str | None = None) -> Page:
        started = time.monotonic()
        body = self.path_for(url).read_bytes()
        digest = hashlib.sha256(body).hexdigest()
        common = dict(url=redact_url(url), requested_url=redact_url(url), headers={}, etag=digest)
        if etag is not None and etag.strip('"') == digest:
            return Page(
                status=304, html="", sha256="", elapsed_s=time.monotonic() - started, encoding=None,
                not_modified=True, **common,
            )
        html, encoding = decode_html(body)
        return Page(
            status=200,
            html=html,
            sha256=digest,
            elapsed_s=time.monotonic() - started,
            encoding=encoding,
            body=body,  # local files: holding the bytes costs nothing that matters
            **common,
        )
