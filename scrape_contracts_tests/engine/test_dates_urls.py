"""Field types date, datetime and url: extraction, validation, diffing and healing."""

from __future__ import annotations

import pytest

from scrape_contracts.contract.fields import FieldSpec
from scrape_contracts.contract.model import Contract
from scrape_contracts.engine.diff import diff_records
from scrape_contracts.engine.extract import ValueParseError, extract_record, parse_value
from scrape_contracts.engine.heal import HealSpec, heal
from scrape_contracts.engine.select import parse_html, select
from scrape_contracts.engine.validate import validate_rules, validate_schema

PAGE_URL = "https://Shop.example:443/news/today"

ARTICLE = """<html><head><meta property="article:published_time" content="2024-03-05T14:30:00+01:00">
</head><body><main><article>
<h1 class="headline">Harbor council approves ferry</h1>
<p class="byline">By Jane Doe · <time class="date"
datetime="2024-03-05T14:30:00+01:00">5 March 2024</time></p>
<a class="source" href="/reports/ferry-2024.pdf">Full report</a>
</article></main>
<aside class="related"><h2>Related stories</h2><ul>
<li class="card"><a href="/news/1">Ferry fares</a><time datetime="2024-02-01">1 Feb 2024</time></li>
<li class="card"><a href="/news/2">New pier</a><time datetime="2024-01-15">15 Jan 2024</time></li>
<li class="card"><a href="/news/3">Harbor budget</a><time datetime="2023-12-02">2 Dec 2023</time></li>
</ul></aside></body></html>"""


@pytest.mark.parametrize("text, kind, expected", [
    ("2024-03-05", "date", "2024-03-05"),
    ("2024-03-05T14:30:00+01:00", "date", "2024-03-05"),
    ("Posted March 5, 2024", "date", "2024-03-05"),
    ("Sept. 12, 2023", "date", "2023-09-12"),
    ("5 Mar 2024", "date", "2024-03-05"),
    ("5. März 2024", "date", "2024-03-05"),
    ("1er janvier 2024", "date", "2024-01-01"),
    ("5 de marzo de 2024", "date", "2024-03-05"),
    ("05.03.2024", "date", "2024-03-05"),
    ("2024/3/5", "date", "2024-03-05"),
    ("25/03/2024", "date", "2024-03-25"),
    ("03/25/2024", "date", "2024-03-25"),
    ("2024-03-05T14:30:00Z", "datetime", "2024-03-05T14:30:00+00:00"),
    ("2024-03-05T14:30:00.250+01:00", "datetime", "2024-03-05T14:30:00+01:00"),
    ("March 5, 2024 at 2:30 pm", "datetime", "2024-03-05T14:30:00"),
    ("5 March 2024, 14:30 UTC", "datetime", "2024-03-05T14:30:00+00:00"),
    ("/p/42?ref=a", "url", "https://shop.example/p/42?ref=a"),
    ("page2.html", "url", "https://shop.example/news/page2.html"),
    ("../archive/", "url", "https://shop.example/archive/"),
    ("//cdn.example/a.png", "url", "https://cdn.example/a.png"),
    ("HTTP://Other.example:8080/x", "url", "http://other.example:8080/x"),
])
def test_parse_value_normalises_dates_and_links(text: str, kind: str, expected: str) -> None:
    assert parse_value(text, kind, base_url=PAGE_URL) == expected


@pytest.mark.parametrize("text, kind, why", [
    ("05/03/2024", "date", "day/month or month/day"),  # March 5th or May 3rd: never guessed
    ("Updated 2024-03-05, published 2023-01-01", "date", "more than one date"),
    ("2024-02-30", "date", "not a calendar date"),
    ("price 12.50", "date", "no date"),
    ("2024-03-05", "datetime", "no time of day"),  # midnight would be invented
    ("Read more", "url", "not a link"),
    ("4/5", "url", "not a link"),
    ("javascript:void(0)", "url", "not a web address"),
    ("mailto:desk@shop.example", "url", "not a web address"),
])
def test_parse_value_refuses_what_it_would_have_to_guess(text: str, kind: str, why: str) -> None:
    with pytest.raises(ValueParseError, match=why):
        parse_value(text, kind, base_url=PAGE_URL)


def test_relative_link_without_a_page_url_is_refused() -> None:
    with pytest.raises(ValueParseError, match="no page URL"):
        parse_value("/p/42", "url")
    assert parse_value("https://shop.example/p/42", "url") == "https://shop.example/p/42"


def test_extracts_dates_from_text_and_attributes_and_links_against_the_page_url() -> None:
    fields = {
        "published": FieldSpec(selector="time.date", type="date"),
        "published_at": FieldSpec(selector="time.date::attr(datetime)", type="datetime"),
        "meta_time": FieldSpec(selector='meta[property="article:published_time"]::attr(content)',
                               type="datetime"),
        "report": FieldSpec(selector="a.source::attr(href)", type="url"),
    }
    result = extract_record(ARTICLE, fields, page_url=PAGE_URL)
    assert result.problems == ()
    assert result.record == {"published": "2024-03-05", "published_at": "2024-03-05T14:30:00+01:00",
                             "meta_time": "2024-03-05T14:30:00+01:00",
                             "report": "https://shop.example/reports/ferry-2024.pdf"}
    with_base = ARTICLE.replace("<head>", '<head><base href="https://files.example/v2/">')
    assert extract_record(with_base, fields, page_url=PAGE_URL).record["report"] == (
        "https://files.example/reports/ferry-2024.pdf")
    unparseable = extract_record(ARTICLE, {"byline": FieldSpec(selector="p.byline a", type="url"),
                                           "when": FieldSpec(selector="h1", type="date")}, page_url=PAGE_URL)
    assert {p.field: p.kind for p in unparseable.problems} == {"byline": "no_match", "when": "unparseable"}


def test_contract_types_validate_and_diff() -> None:
    contract = Contract.model_validate({
        "name": "news", "targets": [{"url": PAGE_URL, "key": "today"}],
        "fields": {"published_at": {"selector": "time::attr(datetime)", "type": "datetime"},
                   "published": {"selector": "time", "type": "date", "rules": {"expected": "2024-03-05"}},
                   "report": {"selector": "a::attr(href)", "type": "url"}},
    })
    schema = contract.record_schema()
    assert schema["properties"]["published_at"] == {"type": "string", "format": "date-time"}
    assert schema["properties"]["report"] == {"type": "string", "format": "uri"}
    record = {"published_at": "2024-03-05T14:30:00+01:00", "published": "2024-03-05",
              "report": "https://shop.example/r.pdf"}
    assert validate_schema(record, schema) == []
    assert validate_rules(record, contract.fields, None, contract.expected_for("today")) == []
    moved = dict(record, published="2024-03-06")
    violations = validate_rules(moved, contract.fields, None, contract.expected_for("today"))
    assert [v.field for v in violations] == ["published"]
    # the same instant in another UTC offset is formatting, not a change; another minute is a change
    same = dict(record, published_at="2024-03-05T13:30:00+00:00")
    assert diff_records(record, same, contract.fields) == []
    later = dict(record, published_at="2024-03-05T13:31:00+00:00")
    assert [c.field for c in diff_records(record, later, contract.fields)] == ["published_at"]
    with pytest.raises(ValueError, match="numeric type"):
        Contract.model_validate({"name": "bad", "targets": [{"url": PAGE_URL}],
                                 "fields": {"d": {"selector": "time", "type": "date", "rules": {"min": 1}}}})


def test_heals_date_and_link_fields_to_what_they_are() -> None:
    after = (ARTICLE.replace('class="date"', 'class="css-8f2k1x"')
             .replace('class="source"', 'class="sc-Bq9x"')
             .replace('<p class="byline">', '<div class="meta-line">')
             .replace("</time></p>", "</time></div>"))
    specs = {
        "published": HealSpec("published", "p.byline time.date::attr(datetime)", type="datetime",
                              before="2024-03-05T14:30:00+01:00"),
        "report": HealSpec("report", "a.source::attr(href)", type="url",
                           before="https://shop.example/reports/ferry-2024.pdf"),
    }
    results = heal(ARTICLE, after, specs, page_url=PAGE_URL)
    assert results["published"].value == "2024-03-05T14:30:00+01:00"
    assert results["report"].value == "https://shop.example/reports/ferry-2024.pdf"
    root = parse_html(after)
    for name, result in results.items():
        assert len(select(root, result.selector)) == 1, result.selector
        record = extract_record(after, {name: FieldSpec(selector=result.selector, type=specs[name].type)},
                                page_url=PAGE_URL).record
        assert record[name] == result.value


def test_a_gone_date_or_link_is_refused_not_taken_from_related_items() -> None:
    shown_date = '<time class="date"\ndatetime="2024-03-05T14:30:00+01:00">5 March 2024</time>'
    after = ARTICLE.replace(shown_date, "")
    assert "5 March 2024" not in after
    after = after.replace('<a class="source" href="/reports/ferry-2024.pdf">Full report</a>', "")
    after = after.replace('<meta property="article:published_time" content="2024-03-05T14:30:00+01:00">', "")
    assert "ferry-2024" not in after and "14:30" not in after
    specs = {
        "published": HealSpec("published", "time.date", type="date", before="2024-03-05"),
        "report": HealSpec("report", "a.source::attr(href)", type="url",
                           before="https://shop.example/reports/ferry-2024.pdf"),
    }
    results = heal(ARTICLE, after, specs, page_url=PAGE_URL)
    for result in results.values():
        assert not result.healed and result.refusal is not None, result.evidence
