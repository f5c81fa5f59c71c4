"""Links to the newer and older post across redesigns (issue 27, the real-theme corpus): designers name the
step with a rel, a class of the link or of its wrapper, or a caption, disagree on which way is "previous",
put the pager in a <nav> or in a "related" block; the same post is linked again from a sidebar list."""

from __future__ import annotations

import json

import pytest

from scrape_contracts.engine.heal import FieldMemory, heal, remember
from scrape_contracts.engine.select import parse_html, select_texts

PAGE_URL = "https://blog.example/posts/3/"
NEWER, OLDER = "https://blog.example/posts/4/", "https://blog.example/posts/2/"
PROSE = "<p>Some text here that is long enough to be a paragraph of prose, honestly.</p>"
SIDEBAR = """<div class="side"><h3>Latest</h3><ul class="latest">
<li><a href="/posts/5/">Post five title</a></li>
<li><a href="/posts/4/">Post four title</a></li><li><a href="/posts/3/">Post three title</a></li>
<li><a href="/posts/2/">Post two title</a></li></ul></div>"""
# design A: the step is said by a caption inside the link ("Newer" above the neighbour's title)
BEFORE = f"""<html><body><div class="page"><article class="post"><h1>Post three title</h1>{PROSE}
<div class="post-foot"><a class="foot-link" id="link-a" href="/posts/4/"><strong>Newer</strong>
<div>Post four title</div></a><a class="foot-link" id="link-b" href="/posts/2/"><strong>Older</strong>
<div>Post two title</div></a></div></article>{SIDEBAR}</div></body></html>"""
FIELDS = {"newer": {"selector": "#link-a::attr(href)", "before": NEWER, "type": "url"},
          "older": {"selector": "#link-b::attr(href)", "before": OLDER, "type": "url"}}
# design B names the direction the other way round (a blog listing newest first: the newer post is
# "previous"), by a rel, by a wrapper's class, or by a caption in another language
AFTERS = {
    "rel": """<a class="btn btn-ghost" rel="prev" href="/posts/4/"><span class="t">Post four title</span></a>
           <a class="btn btn-ghost" rel="next" href="/posts/2/"><span class="t">Post two title</span></a>""",
    "wrapper class": """<span class="item-prev"><a class="btn btn-ghost" href="/posts/4/">Post four title</a>
           </span><span class="item-next"><a class="btn btn-ghost" href="/posts/2/">Post two title</a>
           </span>""",
    "caption": """<a class="btn btn-ghost" href="/posts/4/"><span>Post four title</span>
           <span>Vorheriger</span></a><a class="btn btn-ghost" href="/posts/2/"><span>Post two title</span>
           <span>Nächster Beitrag</span></a>""",
    "arrows": """<a class="btn btn-ghost" href="/posts/4/"><i>«</i> Post four title</a>
           <a class="btn btn-ghost" href="/posts/2/">Post two title <i>»</i></a>""",
}


def _after(pager: str) -> str:
    # the pager sits in the entry's <footer>, deeper than it did and among other names
    return f"""<html><body><main class="content"><section class="entry"><h2>Post three title</h2>{PROSE}
    <footer class="entry-end"><ul class="entry-tags"><li><a href="/tags/sheds/">sheds</a></li></ul>
    <section class="steps"><div class="steps-row">{pager}</div></section></footer></section></main>{SIDEBAR}
    </body></html>"""


def _extracted(html: str, selector: str) -> list[str]:
    return [text for text in select_texts(parse_html(html), selector) if text]


@pytest.mark.parametrize("named_by", list(AFTERS))
def test_a_step_to_the_newer_or_older_post_follows_its_url_whatever_the_direction_is_called(
        named_by: str) -> None:
    after = _after(AFTERS[named_by])
    results = heal(BEFORE, after, FIELDS, page_url=PAGE_URL)
    for name, spec in FIELDS.items():
        result = results[name]
        assert result.value == spec["before"], (named_by, name, result.evidence)
        assert result.evidence["parts"]["sequence"] > 0
        # the pager's link, not the sidebar's copy of the same URL
        assert _extracted(after, result.selector) == [spec["before"].removeprefix("https://blog.example")]


def test_a_step_heals_from_stored_fingerprints_too() -> None:
    after = _after(AFTERS["rel"])
    stored = {n: FieldMemory.from_json(json.loads(json.dumps(m.to_json())))
              for n, m in remember(BEFORE, FIELDS, page_url=PAGE_URL).items()}
    results = heal(None, after, FIELDS, memories=stored, page_url=PAGE_URL)
    assert {n: r.value for n, r in results.items()} == {n: s["before"] for n, s in FIELDS.items()}


def test_a_pager_in_a_nav_or_a_related_block_is_neither_chrome_nor_a_recommendation() -> None:
    # the pager's links carry a class with "related" in it and sit in a <nav>; a real "related posts"
    # block links the same posts too, and stays a decoy
    pager = """<nav class="pagination-post"><a class="pagination-related" href="/posts/4/">
    <div class="info-1">Previous</div><div class="info-2">Post four title</div></a>
    <a class="pagination-related" href="/posts/2/"><div class="info-1">Next</div>
    <div class="info-2">Post two title</div></a></nav><div class="relatedPosts"><h4>Related Articles</h4>
    <a class="pagination-related" href="/posts/2/"><div class="info-2">Post two title</div></a>
    <a class="pagination-related" href="/posts/4/"><div class="info-2">Post four title</div></a></div>"""
    after = _after(pager)
    results = heal(BEFORE, after, FIELDS, page_url=PAGE_URL)
    for name, spec in FIELDS.items():
        result = results[name]
        assert result.value == spec["before"], (name, result.evidence)
        assert result.evidence["parts"]["chrome"] == 0.0
        sel = parse_html(after)
        chosen = sel.css(result.selector.split("::")[0])
        assert len(chosen) == 1 and chosen[0].xpath("ancestor::nav"), result.selector


def test_a_step_that_now_leads_elsewhere_is_refused_not_followed_to_a_sidebar_copy() -> None:
    # a post was published in between: the pager's newer link leads to it; the old newer post is linked
    # only from the sidebar list now, and the healer must not take that copy for the field
    after = _after("""<div class="bottom"><a rel="prev" href="/posts/9/">Post nine title</a>
    <a rel="next" href="/posts/2/">Post two title</a></div>""")
    result = heal(BEFORE, after, FIELDS, page_url=PAGE_URL)["newer"]
    assert result.value is None, result.evidence


def test_a_link_that_was_no_step_gets_no_step_credit() -> None:
    # the field was a sidebar entry: a pager link to the same post is not evidence that it is the field
    fields = {"fourth": {"selector": "ul.latest li:nth-of-type(2) a::attr(href)", "before": NEWER,
                         "type": "url"}}
    after = _after(AFTERS["rel"]).replace('class="latest"', 'class="newest"')
    result = heal(BEFORE, after, fields, page_url=PAGE_URL)["fourth"]
    assert result.evidence["parts"]["sequence"] == 0.0, result.evidence
