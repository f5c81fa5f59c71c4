"""Properties of ``heal()`` on hostile input (hypothesis): it never raises, whatever the pages and the page
URL hold, and a value that fails to parse (a malformed link, an impossible date) costs only itself: the
heal comes out exactly as if the value were plainly not one."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scrape_contracts.engine.extract import ValueParseError, parse_value
from scrape_contracts.engine.heal import HealResult, heal

PAGE_URL = "https://blog.example/p/1"
# bounded: a few seconds in all, the same examples on every run
BOUNDED = settings(max_examples=15, deadline=None, derandomize=True, database=None,
                   suppress_health_check=[HealthCheck.too_slow])

TITLE = "Notes on building a garden shed"
BEFORE = f"""<html><head><script type="application/ld+json">{{"headline": "{TITLE}"}}</script>
</head><body><main><article class="post"><h1 class="post-title">{TITLE}</h1>
<div class="post-meta">By <span class="author">Ana Lima</span> ·
<time datetime="2024-03-05">5 March 2024</time>
· <span class="reads">1,204 reads</span> · <span class="price">$12.50</span> ·
<span class="open">Yes</span></div>
<div class="post-body"><p>Some text here that is long enough to be a paragraph of prose, honestly.</p></div>
<nav class="pager"><a rel="prev" href="/p/0">Older</a> <a rel="next" href="/p/2">Newer</a></nav>
<ul class="recent"><li><a href="/p/9">Recent one about sheds</a></li>
<li><a href="/p/8">Recent two about sheds</a></li></ul></article></main></body></html>"""
FIELDS = {
    "title": {"selector": "h1.post-title::text", "before": TITLE},
    "author": {"selector": ".post-meta .author::text", "before": "Ana Lima"},
    "published": {"selector": "time::attr(datetime)", "before": "2024-03-05", "type": "date"},
    "stamp": {"selector": "time::attr(datetime)", "before": "2024-03-05T10:00:00", "type": "datetime"},
    "reads": {"selector": ".reads::text", "before": 1204, "type": "integer"},
    "price": {"selector": ".price::text", "before": 12.5, "type": "price"},
    "ratio": {"selector": ".price::text", "before": 12.5, "type": "number", "pattern": r"(\d+)"},
    "open": {"selector": ".open::text", "before": True, "type": "boolean"},
    "next": {"selector": 'a[rel="next"]::attr(href)', "before": "https://blog.example/p/2", "type": "url"},
    "recent": {"selector": "ul.recent li:first-child a::text", "before": "Recent one about sheds",
               "item": "first"},
    "recent_link": {"selector": "ul.recent li:nth-of-type(1) a::attr(href)", "type": "url",
                    "before": "https://blog.example/p/9"},
}
# the new theme: every class renamed, the same content
AFTER = (BEFORE.replace("post-title", "entry-heading").replace('"author"', '"writer"')
         .replace("reads", "views").replace('"price"', '"cost"').replace('"open"', '"status"')
         .replace("pager", "prevnext")
         .replace("recent", "latest").replace("post-meta", "entry-info"))

HOSTILE_BITS = [
    "https://[::ffff:192.168.0.1", "http://[", "//[v1.x", "https://exa mple.com/", "https://h:99999/",
    "https://h:port/", "javascript:alert(1)", "mailto:a@b", "data:,x", "\x00", "\ufeff", "\u202e", "%ZZ",
    "../" * 30, "?" * 5, "#", "2024-13-45", "31/31/2024", "1e999", "NaN", "-0", "٣٤", "Ⅻ", "∞", "$", "€-",
    "99999999999999999999999999999", "<", "]]>", "&#0;", "&#xD800;", "\\", "'\"", "0x1F", "12:99", "+25:00",
]
hostile_text = st.lists(st.one_of(st.sampled_from(HOSTILE_BITS), st.text(max_size=12)),
                        max_size=4).map("".join)
TAGS = ["div", "span", "a", "p", "li", "td", "time", "meta", "b", "h1", "h2", "header", "nav", "footer",
        "table", "tr", "template", "script", "style", "svg", "base", "select", "option", "del"]
ATTRS = ["href", "datetime", "content", "value", "class", "id", "itemprop", "rel", "aria-label",
         "data-testid", "style", "title", "src"]


def _attr(name: str, value: str) -> str:
    return f'{name}="{value.replace("&", "&amp;").replace(chr(34), "&quot;")}"'


@st.composite
def fragments(draw, depth: int = 2) -> str:
    """Random, possibly malformed, markup of hostile values."""
    parts = []
    for _ in range(draw(st.integers(0, 4))):
        tag = draw(st.sampled_from(TAGS))
        attrs = " ".join(_attr(draw(st.sampled_from(ATTRS)), draw(hostile_text))
                         for _ in range(draw(st.integers(0, 3))))
        inner = draw(fragments(depth - 1)) if depth > 0 else ""
        text = draw(hostile_text).replace("<", "&lt;")
        closed = draw(st.booleans())
        parts.append(f"<{tag} {attrs}>{text}{inner}" + (f"</{tag}>" if closed else ""))
    return "".join(parts)


def _check(results: dict[str, HealResult]) -> None:
    assert set(results) == set(FIELDS)
    for result in results.values():
        json.dumps(result.evidence)  # the evidence goes into the event log as JSON
        assert result.value is None or result.selector


@BOUNDED
@given(before=fragments(), after=fragments(), url=st.one_of(st.sampled_from(HOSTILE_BITS), hostile_text))
def test_heal_never_raises_on_hostile_pages_and_urls(before: str, after: str, url: str) -> None:
    _check(heal(BEFORE.replace("<main>", f"<main>{before}"), AFTER.replace("</main>", f"{after}</main>"),
                FIELDS, page_url=url))
    _check(heal(f"<html><body>{before}</body></html>", after, FIELDS, page_url=PAGE_URL))


def _unparseable(value: str) -> bool:
    for ftype in ("url", "date", "datetime", "number"):
        try:
            parse_value(value, ftype, base_url=PAGE_URL)
            return False
        except ValueParseError:
            continue
    return True


VALUE_ATTRS = ("href", "datetime", "value")
bad_values = st.lists(st.one_of(st.sampled_from(HOSTILE_BITS), hostile_text).filter(_unparseable),
                      min_size=len(VALUE_ATTRS), max_size=len(VALUE_ATTRS))


@BOUNDED
@given(bad=st.lists(bad_values, min_size=1, max_size=4),
       where=st.sampled_from(["<main>", "</article>", "<body>"]))
def test_a_value_that_fails_to_parse_costs_only_itself(bad: list[list[str]], where: str) -> None:
    def page(values: list[list[str]]) -> str:
        extra = "".join("<div>" + "".join(f"<a {_attr(attr, v)}>x</a>" for attr, v in zip(VALUE_ATTRS, row))
                        + "</div>" for row in values)
        return AFTER.replace(where, where + extra if not where.startswith("</") else extra + where, 1)

    plain = [["not a value"] * len(VALUE_ATTRS) for _ in bad]
    expected = heal(BEFORE, page(plain), FIELDS, page_url=PAGE_URL)
    got = heal(BEFORE, page(bad), FIELDS, page_url=PAGE_URL)
    assert {n: (r.value, r.selector) for n, r in got.items()} == {
        n: (r.value, r.selector) for n, r in expected.items()}
    assert expected["title"].value == TITLE and expected["next"].value == FIELDS["next"]["before"]
