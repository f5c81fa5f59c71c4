"""Failure classes seen when the healer met redesigns by other designers (issue 27), each as a small page
pair: a content column named with a chrome word, a link whose old selector still works, one value printed
twice, a date inside a sentence, a positional field whose list grew at the top, a malformed link."""

from __future__ import annotations

import json

import pytest

from scrape_contracts.contract.fields import FieldSpec
from scrape_contracts.engine.heal import FieldMemory, HealSpec, ItemRule, RefusalReason, heal, remember
from scrape_contracts.engine.select import parse_html, select_texts

PAGE_URL = "https://blog.example/p/1"
TITLE = "Notes on building a garden shed"
PROSE = "<p>Some text here that is long enough to be a paragraph of prose, honestly.</p>"
BEFORE = f"""<html><body><header class="site-header"><a href="/">My Blog</a></header>
<main><article class="post"><h1 class="post-title">{TITLE}</h1>
<div class="post-meta">By <span class="author">Ana Lima</span></div>
<div class="post-body">{PROSE}</div></article></main><footer><p>Copyright</p></footer></body></html>"""
FIELDS = {"title": {"selector": "h1.post-title::text", "before": TITLE},
          "author": {"selector": ".post-meta .author::text", "before": "Ana Lima"}}


def _extracted(html: str, selector: str) -> list[str]:
    """What the extractor reads with ``selector`` (a healed one) on ``html``."""
    return [text for text in select_texts(parse_html(html), selector) if text]


def test_a_content_column_named_with_a_chrome_word_is_not_page_chrome() -> None:
    # "nav" is a word of the column's class, but the column is the page's content: "...-nav-content"
    for column in ("page-nav-content", "menu-body", "breadcrumb-main"):
        after = f"""<html><body><div class="topbar"><ul><li><a href="/">Home</a></li>
        <li><a href="/a">About</a></li></ul></div>
        <div class="{column}"><div class="entry"><div class="entry-head"><h2>{TITLE}</h2></div>
        <div class="info">By <span class="writer">Ana Lima</span></div><div class="entry-text">{PROSE}</div>
        </div></div><div class="bottom"><a href="/p/2">Older: a shed</a></div></body></html>"""
        results = heal(BEFORE, after, FIELDS, page_url=PAGE_URL)
        for name in FIELDS:
            assert results[name].evidence["parts"]["chrome"] == 0.0, (column, name)
        assert results["title"].value == TITLE, (column, results["title"].evidence)
        assert results["author"].value == "Ana Lima", column


def test_a_page_hero_in_a_header_holds_content() -> None:
    # the title and byline sit in a <header> outside <main> (a hero above the text), not in site chrome
    after = f"""<html><body><header class="hero"><nav><a href="/">Home</a> <a href="/a">About</a></nav>
    <div class="header-body"><h1>{TITLE}</h1><div class="info">By <span class="writer">Ana Lima</span>
    </div></div></header><main><div class="entry-text">{PROSE}</div></main></body></html>"""
    results = heal(BEFORE, after, FIELDS, page_url=PAGE_URL)
    assert results["title"].value == TITLE, results["title"].evidence
    assert results["author"].value == "Ana Lima"
    assert results["title"].evidence["parts"]["chrome"] == 0.0


PAGER = """<html><body><nav><ul><li><a href="/">Home</a></li><li><a href="/archives/">Archives</a></li></ul>
</nav><main><article><h1>Hello world post</h1><div>{prose}</div>
<nav><ul><li><a href="/p/0" rel="prev">Older post title</a></li>
<li><a href="/p/2" rel="next">Newer post title</a></li></ul></nav></article></main></body></html>"""
LINKS = {name: {"selector": f'a[rel="{name}"]::attr(href)', "before": f"https://blog.example/p/{n}",
                "type": "url"} for name, n in (("next", 2), ("prev", 0))}


def test_a_link_whose_old_selector_still_works_keeps_a_selector() -> None:
    page = PAGER.format(prose=PROSE)
    results = heal(page, page, LINKS, page_url=PAGE_URL)
    for name, spec in LINKS.items():
        assert results[name].value == spec["before"], results[name].evidence
        assert results[name].selector == spec["selector"]


def test_a_link_named_by_its_rel_gets_a_rel_selector() -> None:
    before = PAGER.format(prose=PROSE)
    after = before.replace("<article>", '<div class="post">').replace("</article>", "</div>")
    fields = {name: {**spec, "selector": f"article nav li:nth-of-type({n}) a::attr(href)"}
              for (name, spec), n in zip(LINKS.items(), (2, 1))}
    results = heal(before, after, fields, page_url=PAGE_URL)
    for name, spec in LINKS.items():
        assert results[name].value == spec["before"], results[name].evidence
        assert _extracted(after, results[name].selector) == [spec["before"].removeprefix("https://blog.example")]


def test_one_value_printed_twice_is_one_answer() -> None:
    # the new theme shows the title in a top bar and again in a bottom bar, and nowhere else
    after = f"""<html><body><div class="top-bar"><a href="/">My Blog</a>
    <span class="bar-title">{TITLE}</span></div>
    <div class="wrap"><div class="entry"><div class="info">By <span class="writer">Ana Lima</span></div>
    <div class="entry-text">{PROSE}</div></div></div>
    <div class="bottom-bar"><span class="bar-title">{TITLE}</span><p>Copyright</p></div></body></html>"""
    result = heal(BEFORE, after, FIELDS, page_url=PAGE_URL)["title"]
    assert result.value == TITLE, result.evidence
    assert _extracted(after, result.selector) == [TITLE]


def test_a_small_number_printed_twice_stays_ambiguous() -> None:
    # "3" in two places is a coincidence, not one fact printed twice: which element is the field is a guess
    before = """<html><body><div class="facts"><span class="beds">3</span> <span class="baths">2</span></div>
    </body></html>"""
    after = """<html><body><div class="x"><span class="a1">3</span> <span class="a2">3</span></div>
    </body></html>"""
    fields = {"beds": {"selector": ".beds::text", "before": 3, "type": "integer"}}
    result = heal(before, after, fields)["beds"]
    assert result.value is None


DATE_BEFORE = f"""<html><body><main><article class="post"><h1 class="post-title">{TITLE}</h1>
<div class="post-meta">Updated: <time class="modified">5 March 2024</time></div>
<div class="post-body">{PROSE}</div></article></main></body></html>"""


def test_a_date_inside_a_sentence_is_labelled_by_the_sentence() -> None:
    after = f"""<html><body><div class="wrap"><div class="entry"><h2 class="entry-name">{TITLE}</h2>
    <div class="entry-text">{PROSE}</div><p class="entry-foot">Last updated on 5 March 2024.</p>
    </div></div></body></html>"""
    fields = {"updated": {"selector": "time.modified::text", "before": "2024-03-05", "type": "date"}}
    result = heal(DATE_BEFORE, after, fields, page_url=PAGE_URL)["updated"]
    assert result.value == "2024-03-05", result.evidence
    assert result.evidence["parts"]["label"] > 0


LIST = """<html><body><main><h1>Latest posts</h1><ul class="{cls}">{rows}</ul></main></body></html>"""
ROW = ('<li class="{cls}"><a href="/p/{n}">{title}</a> '
       '<time datetime="2024-03-{n:02d}">{n} March 2024</time></li>')
TITLES = {n: f"Post number {n} about sheds" for n in range(1, 9)}


def _listing(numbers: list[int], cls: str = "posts", row: str = "post") -> str:
    return LIST.format(cls=cls, rows="".join(ROW.format(cls=row, n=n, title=TITLES[n]) for n in numbers))


def test_a_positional_field_never_keeps_the_value_of_a_row_that_moved() -> None:
    before = _listing([5, 4, 3, 2])
    after = _listing([7, 6, 5, 4, 3, 2], cls="entries", row="entry")  # two new rows at the top, new classes
    fields = {"latest": {"selector": "ul.posts li:first-child a::text", "before": TITLES[5]}}
    result = heal(before, after, fields, page_url=PAGE_URL)["latest"]
    assert result.value is None, result.evidence
    assert result.refusal is RefusalReason.ITEM_MOVED


def test_a_malformed_link_costs_only_itself() -> None:
    before = f"""<html><body><article><h1 class="t">{TITLE}</h1><a class="next" href="/p/2">Next</a>
    <p>see https://example.org</p></article></body></html>"""
    after = f"""<html><body><main><h1 class="x">{TITLE}</h1><a class="next-link" href="/p/2">Next</a>
    <p><a href="https://[::ffff:192.168.0.1">https://[::ffff:192.168.0.1</a></p></main></body></html>"""
    fields = {"title": {"selector": "h1.t::text", "before": TITLE},
              "next": {"selector": "a.next::attr(href)", "before": "https://blog.example/p/2", "type": "url"}}
    results = heal(before, after, fields, page_url=PAGE_URL)
    assert results["title"].value == TITLE
    assert results["next"].value == "https://blog.example/p/2"
    # a malformed <base href> is no base: relative links resolve against the page's URL
    broken = '<base href="https://[::1">'
    before = before.replace("<article>", broken + "<article>")
    after = after.replace("<main>", broken + "<main>")
    results = heal(before, after, fields, page_url=PAGE_URL)
    assert results["next"].value == "https://blog.example/p/2"


def test_a_positional_field_whose_list_kept_its_order_heals_within_its_row() -> None:
    before = _listing([5, 4, 3, 2])
    after = _listing([5, 4, 3, 2], cls="entries", row="entry")
    fields = {"latest": {"selector": "ul.posts li:first-child a::text", "before": TITLES[5]}}
    result = heal(before, after, fields, page_url=PAGE_URL)["latest"]
    assert result.value == TITLES[5], result.evidence
    assert _extracted(after, result.selector) == [TITLES[5]]


def test_a_positional_field_refuses_from_stored_fingerprints_too() -> None:
    before = _listing([5, 4, 3, 2])
    after = _listing([7, 6, 5, 4, 3, 2], cls="entries", row="entry")
    fields = {"latest": {"selector": "ul.posts li:first-child a::text", "before": TITLES[5]}}
    stored = {n: FieldMemory.from_json(json.loads(json.dumps(m.to_json())))
              for n, m in remember(before, fields, page_url=PAGE_URL).items()}
    result = heal(None, after, fields, memories=stored, page_url=PAGE_URL)["latest"]
    assert result.refusal is RefusalReason.ITEM_MOVED


@pytest.mark.parametrize("pick, expected", [("first", 7), ("last", 2), ("newest", 7)])
def test_an_item_rule_heals_to_its_meaning(pick: str, expected: int) -> None:
    before = _listing([5, 4, 3, 2])
    after = _listing([7, 6, 5, 4, 3, 2], cls="entries", row="entry")
    old = {"first": "li:first-child", "last": "li:last-child", "newest": "li:first-child"}[pick]
    fields = {"title": {"selector": f"ul.posts {old} a::text", "before": TITLES[5 if pick != "last" else 2],
                        "item": pick},
              "link": {"selector": f"ul.posts {old} a::attr(href)", "type": "url", "item": pick,
                       "before": f"https://blog.example/p/{5 if pick != 'last' else 2}"}}
    results = heal(before, after, fields, page_url=PAGE_URL)
    assert results["title"].value == TITLES[expected], results["title"].evidence
    assert results["link"].value == f"https://blog.example/p/{expected}"
    # the selector keeps the meaning: after the next new post it reads that one
    grown = _listing([8, 7, 6, 5, 4, 3, 2], cls="entries", row="entry")
    want = {"first": 8, "last": 2, "newest": 8}[pick]
    assert _extracted(grown, results["title"].selector) == [TITLES[want]]


def test_newest_is_refused_when_the_rows_are_not_in_date_order() -> None:
    before = _listing([5, 4, 3, 2])
    after = _listing([3, 7, 5, 4, 2], cls="entries", row="entry")
    fields = {"title": {"selector": "ul.posts li:first-child a::text", "before": TITLES[5], "item": "newest"}}
    result = heal(before, after, fields, page_url=PAGE_URL)["title"]
    assert result.refusal is RefusalReason.ITEM_NOT_FOUND
    assert "date order" in result.evidence["detail"]


RATES = """<html><body><table class="{cls}"><tr><th>Currency</th><th>Rate</th></tr>{rows}</table>
</body></html>"""


def _rates(order: list[str], cls: str = "rates") -> str:
    values = {"USD": "1.0850", "GBP": "0.8571", "JPY": "162.31", "CHF": "0.9612"}
    rows = "".join(f"<tr><td>{c}</td><td>{values[c]}</td></tr>" for c in order)
    return RATES.format(cls=cls, rows=rows)


def test_a_key_rule_follows_its_row_and_says_so_in_the_selector() -> None:
    before = _rates(["USD", "GBP", "JPY"])
    after = _rates(["CHF", "JPY", "USD", "GBP"], cls="fx-table")
    fields = {"gbp": {"selector": "table.rates tr:nth-of-type(3) td:nth-of-type(2)::text", "before": 0.8571,
                      "type": "number", "item": {"pick": "key", "key": "GBP"}}}
    result = heal(before, after, fields)["gbp"]
    assert result.value == 0.8571, result.evidence
    assert "GBP" in result.selector
    assert _extracted(_rates(["GBP", "CHF", "USD"], cls="fx-table"), result.selector) == ["0.8571"]
    missing = heal(before, _rates(["CHF", "JPY", "USD"], cls="fx-table"), fields)["gbp"]
    assert missing.refusal is RefusalReason.ITEM_NOT_FOUND


def test_without_a_key_rule_a_labelled_row_is_followed_by_its_label() -> None:
    # each row names itself (the currency before the rate): keyed by that label, not by place
    before = _rates(["USD", "GBP", "JPY"])
    after = _rates(["CHF", "JPY", "USD", "GBP"], cls="fx-table")
    fields = {"gbp": {"selector": "table.rates tr:nth-of-type(3) td:nth-of-type(2)::text", "before": 0.8571,
                      "type": "number"}}
    result = heal(before, after, fields)["gbp"]
    assert result.value == 0.8571
    assert _extracted(_rates(["GBP", "CHF"], cls="fx-table"), result.selector) == ["0.8571"]


def test_the_contracts_item_is_what_the_healer_reads() -> None:
    field = FieldSpec(selector="ul.posts li:first-child a", item="first")
    spec = HealSpec("latest", field.selector, before=TITLES[5], item=ItemRule.from_mapping(field.item))
    after = _listing([7, 6, 5, 4, 3, 2], cls="entries", row="entry")
    assert heal(_listing([5, 4, 3, 2]), after, {"latest": spec})["latest"].value == TITLES[7]


def test_an_odd_id_or_label_reference_costs_nothing() -> None:
    # an id holding a control character (no XPath variable can), an aria-labelledby of no id at all
    after = BEFORE.replace('<span class="author">', '<span class="writer" id="w\x1f" aria-labelledby="\x1f">')
    after = after.replace("post-title", "entry-title")
    results = heal(BEFORE, after, FIELDS, page_url=PAGE_URL)
    assert results["title"].value == TITLE
    assert results["author"].value == "Ana Lima"


def test_a_label_naming_the_other_date_is_no_label_of_the_field() -> None:
    # "date" synonyms cover both dates of a post; "Updated" never labels the date it was published
    before = DATE_BEFORE.replace('Updated: <time class="modified">5 March 2024</time>',
                                 'Posted <time class="published">2 March 2024</time>')
    after = f"""<html><body><div class="entry"><h2 class="entry-name">{TITLE}</h2><div class="entry-info">
    <span class="desktop">2024-03-02 10:00 Created</span>
    <span class="desktop">2024-04-12 09:30 Updated</span>
    </div><div class="entry-text">{PROSE}</div></div></body></html>"""
    fields = {"published": {"selector": "time.published::text", "before": "2024-03-02", "type": "date"}}
    result = heal(before, after, fields, page_url=PAGE_URL)["published"]
    assert result.value == "2024-03-02", result.evidence
