"""Paginated list targets send each page's validators: an unchanged list costs one 304 per page.

A real HTTP site on 127.0.0.1 that answers ``If-None-Match`` like a web server, counting what it answered;
both run paths (one target per run, and batched) on a real instance.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from scrape_contracts.testing.reviews import listing_pages, reviews, reviews_page
from scrape_contracts_tests.conftest import Harness, failed_checks
from scrape_contracts_tests.defs.test_batch import run_batch
from scrape_contracts_tests.defs.test_lists_e2e import PATH, REVIEWS_CONTRACT, accepted_records
from scrape_contracts_tests.fixture_site import Request, Response


class ConditionalSite:
    """Pages served with an ETag of their bytes; a matching ``If-None-Match`` gets a 304. Keeps a log."""

    def __init__(self, site: Any) -> None:
        self.site = site
        self.log: list[tuple[str, int, str | None]] = []  # (path, status answered, If-None-Match sent)

    def serve(self, pages: dict[str, str | None]) -> None:
        for path, text in pages.items():
            self.site.set_handler(path, self._handler(path, text))

    def _handler(self, path: str, text: str | None) -> Any:
        body = (text or "gone").encode()
        etag = f'"{hashlib.sha256(body).hexdigest()[:12]}"'

        def answer(request: Request) -> Response:
            sent = request.headers.get("if-none-match")
            if text is None:
                response = Response(404, body)
            elif sent == etag:
                response = Response(304, b"", {"ETag": etag})
            else:
                response = Response(200, body, {"ETag": etag})
            self.log.append((path, response.status, sent))
            return response
        return answer

    def answered(self) -> list[tuple[str, int]]:
        found = [(path, status) for path, status, _ in self.log]
        self.log.clear()
        return found


def _pages(items: list[Any], count: int) -> dict[str, str | None]:
    """The listing's pages by path (``?page=N`` after the first), 20 reviews a page; the page after the last
    answers 404."""
    texts = listing_pages(items, href=PATH + "?page={page}")
    paths = [PATH] + [f"{PATH}?page={n}" for n in range(2, count + 2)]
    return {path: (texts[i] if i < len(texts) else None) for i, path in enumerate(paths)}


def _outcome(harness: Harness) -> str:
    return harness.store.latest_candidate("reviews", "aurora").outcome


def test_an_unchanged_list_is_a_304_per_page_on_both_paths_and_a_changed_page_is_read_again(
        sqlite_harness: Harness, site: Any) -> None:
    harness = sqlite_harness
    server = ConditionalSite(site)
    items = reviews(60)
    server.serve(_pages(items, 3))
    harness.write("reviews.yaml", REVIEWS_CONTRACT.format(url=site.url(PATH), tolerance=5))
    defs = harness.definitions()
    page2, page3 = f"{PATH}?page=2", f"{PATH}?page=3"

    assert harness.run("reviews", "aurora", defs).success
    assert server.log[0][2] is None  # nothing to revalidate yet
    assert server.answered() == [(PATH, 200), (page2, 200), (page3, 200)]

    result = harness.run("reviews", "aurora", defs)
    assert result.success, failed_checks(result)
    assert [sent for *_, sent in server.log] == [f'"{hashlib.sha256(t.encode()).hexdigest()[:12]}"'
                                                 for t in _pages(items, 3).values() if t]
    assert server.answered() == [(PATH, 304), (page2, 304), (page3, 304)]
    assert _outcome(harness) == "unchanged"

    assert run_batch(harness, "reviews", defs=defs).success
    assert server.answered() == [(PATH, 304), (page2, 304), (page3, 304)]
    assert _outcome(harness) == "unchanged"

    # one review edited on page 2: pages before it are asked again in full, the changed page is not
    items[25] = dataclasses.replace(items[25], text="Edited: the best flat white in town.")
    server.serve(_pages(items, 3))
    assert run_batch(harness, "reviews", defs=defs).success
    assert server.answered() == [(PATH, 304), (page2, 200), (PATH, 200), (page3, 200)]
    assert _outcome(harness) == "valid"
    assert [r["text"] for r in accepted_records(harness) if r["id"] == "r026"] == [
        "Edited: the best flat white in town."]

    result = harness.run("reviews", "aurora", defs)
    assert result.success and _outcome(harness) == "unchanged"
    assert server.answered() == [(PATH, 304), (page2, 304), (page3, 304)]


def test_a_url_template_list_asks_the_page_that_ended_it_again(sqlite_harness: Harness, site: Any) -> None:
    """The list ended on a 404: an unchanged sweep asks that page again, and a page appended behind
    unchanged pages is found."""
    harness = sqlite_harness
    server = ConditionalSite(site)
    items = reviews(80)

    def serve(count: int) -> None:  # "Page n of 9" on every page: appending one changes no other
        chunks = [items[i:i + 20] for i in range(0, 20 * count, 20)]
        texts = [reviews_page(chunk, page=n, pages=9) for n, chunk in enumerate(chunks, start=1)]
        server.serve({PATH if n == 1 else f"{PATH}?page={n}": (texts[n - 1] if n <= count else None)
                      for n in range(1, 7)})

    serve(3)
    contract = REVIEWS_CONTRACT.format(url=site.url(PATH), tolerance=5)
    harness.write("reviews.yaml", contract.replace('next: "a[rel=next]::attr(href)"',
                                                   'url_template: "{url}?page={page}"'))
    defs = harness.definitions()
    page = [PATH] + [f"{PATH}?page={n}" for n in range(2, 7)]

    assert run_batch(harness, "reviews", defs=defs).success
    assert server.answered() == [(page[0], 200), (page[1], 200), (page[2], 200), (page[3], 404)]
    assert len(accepted_records(harness)) == 60

    assert run_batch(harness, "reviews", defs=defs).success
    assert server.answered() == [(page[0], 304), (page[1], 304), (page[2], 304), (page[3], 404)]
    assert _outcome(harness) == "unchanged"

    serve(4)  # 20 older reviews on a new page 4; pages 1-3 as they were
    assert run_batch(harness, "reviews", defs=defs).success
    assert server.answered() == [(page[0], 304), (page[1], 304), (page[2], 304), (page[3], 200),
                                 (page[0], 200), (page[1], 200), (page[2], 200), (page[4], 404)]
    assert _outcome(harness) == "valid" and len(accepted_records(harness)) == 80
