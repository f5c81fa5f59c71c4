"""The reviews of a business, as pages of a listing: what list contracts are tested and demonstrated on.

``reviews(60)`` gives deterministic reviews; ``reviews_page`` renders one page of them in one of two
layouts: ``v1`` (``article.review`` items with classed fields) and ``redesign`` (hashed classes, no
``article``: the item selector and the field classes of v1 match nothing; microdata anchors remain). The
example site's pages (examples/site/*/reviews.example.com) are written with it by ``write_example_site``.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from pathlib import Path

_AUTHORS = ["Ana", "Bram", "Chloé", "Dev", "Emeka", "Fatima", "Goran", "Hana", "Ines", "Jonas", "Kenji",
            "Lea"]
_OPENINGS = ["Lovely coffee", "Slow service", "Best croissant in town", "Too loud", "Friendly staff",
             "Good value", "Cold soup", "Great terrace", "Would come back", "Tiny portions"]


@dataclass(frozen=True)
class Review:
    id: str
    author: str
    rating: int
    date: str  # ISO date
    text: str


def reviews(count: int = 60) -> list[Review]:
    """``count`` reviews, newest first; the same every time."""
    found = []
    for i in range(count):
        day = 28 - (i % 28)
        month = 12 - (i // 28) % 12
        found.append(Review(id=f"r{i + 1:03d}", author=_AUTHORS[i % len(_AUTHORS)], rating=1 + (i * 7) % 5,
                            date=f"2026-{month:02d}-{day:02d}",
                            text=f"{_OPENINGS[i % len(_OPENINGS)]}, visit {i + 1}."))
    return found


def _item_v1(review: Review) -> str:
    return (f'<article class="review" data-review-id="{review.id}">'
            f'<span class="author">{html.escape(review.author)}</span>'
            f'<span class="rating">{review.rating}/5</span>'
            f'<time class="date" datetime="{review.date}">{review.date}</time>'
            f'<p class="text">{html.escape(review.text)}</p></article>')


def _item_redesign(review: Review) -> str:
    return (f'<div class="css-r8x1q" data-review-id="{review.id}" itemprop="review" itemscope>'
            f'<div class="css-h2k"><b class="css-a9" itemprop="author">{html.escape(review.author)}</b>'
            f'<i class="css-s4" itemprop="reviewRating">{review.rating}/5</i></div>'
            f'<time class="css-d7" itemprop="datePublished" datetime="{review.date}">{review.date}</time>'
            f'<div class="css-t3" itemprop="reviewBody">{html.escape(review.text)}</div></div>')


def reviews_page(items: list[Review], *, page: int = 1, pages: int = 1, next_href: str | None = None,
                 layout: str = "v1", business: str = "Café Aurora") -> str:
    """One page of the listing; ``next_href``: the next page's link (none on the last page)."""
    if layout == "v1":
        body = "".join(_item_v1(r) for r in items)
        listing = f'<section id="reviews"><h2>Reviews</h2>{body}</section>'
    elif layout == "redesign":
        body = "".join(_item_redesign(r) for r in items)
        listing = (f'<div class="css-w0w"><h2 class="css-h">What guests say</h2>'
                   f'<div class="css-l1st">{body}</div></div>')
    else:
        raise ValueError(layout)
    pager = f'<nav class="pager"><span>Page {page} of {pages}</span>'
    if next_href:
        pager += f' <a rel="next" href="{html.escape(next_href)}">Next</a>'
    pager += "</nav>"
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(business)}: reviews"
            f"</title></head><body><header><h1>{html.escape(business)}</h1><p class='summary'>"
            f"Rated 4.1 by 60 guests</p></header><main>{listing}{pager}</main>"
            f"<footer>(c) 2026</footer></body></html>")


def listing_pages(items: list[Review], per_page: int = 20, *, layout: str = "v1",
                  href: str = "?page={page}") -> list[str]:
    """The pages of ``items``, ``per_page`` a page, each linking to the next with ``href``."""
    chunks = [items[i:i + per_page] for i in range(0, len(items), per_page)] or [[]]
    return [reviews_page(chunk, page=n, pages=len(chunks), layout=layout,
                         next_href=href.format(page=n + 1) if n < len(chunks) else None)
            for n, chunk in enumerate(chunks, start=1)]


def write_example_site(site_root: Path) -> None:
    """The demo's pages: v1 has 60 reviews over 3 pages; v2 is a redesign (the list heals) with one more
    review and one edited (a diff by key)."""
    base = reviews(60)
    v2 = [Review("r061", "Mira", 5, "2026-12-30", "New owner, same great coffee."), *base]
    v2[5] = Review(v2[5].id, v2[5].author, v2[5].rating, v2[5].date, v2[5].text + " (edited)")
    for version, items in (("v1", base), ("v2", v2)):
        folder = site_root / version / "reviews.example.com" / "cafe-aurora"
        folder.mkdir(parents=True, exist_ok=True)
        layout = "v1" if version == "v1" else "redesign"
        for number, text in enumerate(listing_pages(items, layout=layout, href="{page}.html"), start=1):
            (folder / f"{number}.html").write_text(text, encoding="utf-8")
