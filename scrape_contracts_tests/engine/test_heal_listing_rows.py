"""A listing's newest post (``item: first``) across redesigns (issue 27, the real-theme corpus): the rows'
values are printed more than once — a post's title and its "read more" both link to it, and a sidebar
lists the same posts — so the list is found among several, and a sidebar's copy is never taken for it."""

from __future__ import annotations

from scrape_contracts.engine.heal import heal
from scrape_contracts.engine.select import parse_html, select_texts

PAGE_URL = "https://blog.example/page/2/"
TITLES = {n: f"Garden shed part {n} about sheds" for n in range(1, 10)}


def _sidebar(numbers: list[int]) -> str:
    items = "".join(f'<a class="entry" href="/posts/{n}/"><span class="entry-name">{TITLES[n]}</span></a>'
                    for n in numbers)
    return (f'<aside class="side"><div class="box"><h3>Latest</h3><div class="entries">{items}</div></div>'
            "</aside>")


BEFORE = ("<html><body><main><ul class='posts'>"
          + "".join(f'<li class="post"><h3 class="post-title"><a href="/posts/{n}/">{TITLES[n]}</a></h3>'
                    f"<p>Lead of post {n}, long enough to be prose.</p></li>" for n in (3, 2, 1))
          + "</ul></main></body></html>")
FIELDS = {"latest_title": {"selector": "ul.posts li:nth-of-type(1) h3 a::text", "before": TITLES[3],
                           "item": "first"},
          "latest_link": {"selector": "ul.posts li:nth-of-type(1) h3 a::attr(href)", "type": "url",
                          "before": "https://blog.example/posts/3/", "item": "first"}}


def _cards(numbers: list[int]) -> str:
    # another design: cards whose title and "read more" both link to the post
    return "".join(
        f'<div class="card"><a class="card-link" href="/posts/{n}/">'
        f'<h2 class="card-title">{TITLES[n]}</h2></a><p>Lead of post {n}, long enough to be prose.</p>'
        f'<a class="more" href="/posts/{n}/">Read more</a></div>'
        for n in numbers)


def _after(numbers: list[int], sidebar: list[int]) -> str:
    return (f'<html><body><div class="l-main"><div class="cards">{_cards(numbers)}</div></div>'
            f"{_sidebar(sidebar)}</body></html>")


def _extracted(html: str, selector: str) -> list[str]:
    return [text for text in select_texts(parse_html(html), selector) if text]


def test_the_first_item_is_found_when_each_row_prints_its_link_twice_and_a_sidebar_lists_them_too() -> None:
    # the second page of a listing: the sidebar's first entry is the newest post of the whole site
    after = _after([3, 2, 1], sidebar=[9, 8, 7, 6, 5, 4, 3, 2, 1])
    results = heal(BEFORE, after, FIELDS, page_url=PAGE_URL)
    assert results["latest_title"].value == TITLES[3], results["latest_title"].evidence
    assert results["latest_link"].value == "https://blog.example/posts/3/", results["latest_link"].evidence
    # the selectors name the listing's first card, not the sidebar's first entry
    page_one = _after([9, 8, 7], sidebar=[9, 8, 7, 6, 5, 4, 3, 2, 1])
    assert _extracted(page_one, results["latest_title"].selector) == [TITLES[9]]
    grown = _after([4, 3, 2], sidebar=[9, 8, 7, 6, 5, 4, 3, 2, 1])
    assert _extracted(grown, results["latest_link"].selector) == ["/posts/4/"]


def test_two_lists_holding_the_same_rows_alike_are_refused() -> None:
    # both lists are in the content column and look alike: which one is the field's cannot be told
    twin = (f'<html><body><div class="l-main"><div class="cards">{_cards([3, 2, 1])}</div>'
            f'<div class="cards">{_cards([3, 2, 1])}</div></div></body></html>')
    result = heal(BEFORE, twin, FIELDS, page_url=PAGE_URL)["latest_title"]
    assert result.value is None, result.evidence


def test_a_list_whose_element_has_only_layout_classes_is_named_by_its_rows_class() -> None:
    # the cards' container and its parents carry only layout classes; every card carries "index-card"
    cards = "".join(f'<div class="row mx-auto index-card"><article class="col-12"><h2><a href="/posts/{n}/">'
                    f"{TITLES[n]}</a></h2><p>Lead of post {n}, long enough to be prose.</p></article></div>"
                    for n in (3, 2, 1))
    after = (f'<html><body><div class="container"><div class="row"><div class="col-12 col-md-10 m-auto">'
             f"{cards}</div></div></div></body></html>")
    result = heal(BEFORE, after, FIELDS, page_url=PAGE_URL)["latest_title"]
    assert result.value == TITLES[3], result.evidence
    assert "index-card" in result.selector
    new_card = (f'<div class="row mx-auto index-card"><article class="col-12"><h2><a href="/posts/4/">'
                f"{TITLES[4]}</a></h2></article></div>")
    column = '<div class="col-12 col-md-10 m-auto">'
    grown = after.replace(column, column + new_card)
    assert _extracted(grown, result.selector) == [TITLES[4]]


def test_a_row_value_shown_only_in_the_side_column_is_where_the_row_went() -> None:
    # a redesign moved the list into the side column: its values are nowhere else, so that is the list
    after = f"<html><body><main><p>Welcome to the blog.</p></main>{_sidebar([3, 2, 1])}</body></html>"
    result = heal(BEFORE, after, FIELDS, page_url=PAGE_URL)["latest_title"]
    assert result.value == TITLES[3], result.evidence
