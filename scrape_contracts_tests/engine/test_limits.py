"""Bounded work: slow regexes, costly selectors, deep pages and big heals end in a named limit, not a hang."""

from __future__ import annotations

import pytest

from scrape_contracts import settings
from scrape_contracts.contract.fields import FieldSpec
from scrape_contracts.engine.extract import extract_record
from scrape_contracts.engine.heal import heal
from scrape_contracts.engine.limits import Limits
from scrape_contracts.engine.select import SelectorError, compile_selector
from scrape_contracts.engine.validate import validate_schema

FAST = Limits(regex_timeout_s=0.05)


def _page(body: str) -> str:
    return f"<html><head><title>t</title></head><body>{body}</body></html>"


# -- regular expressions ----------------------------------------------------------------------------------

@pytest.mark.timeout(30)
def test_nested_quantifier_pattern_on_a_long_text_answers_at_once() -> None:
    # Python's re backtracks 2**n ways here (more than 117 s held the extract op); regex does not
    page = _page(f"<p id='v'>{'a' * 5000}!</p>")
    result = extract_record(page, {"v": FieldSpec(selector="#v", pattern="^(a+)+$")})
    [problem] = result.problems
    assert problem.kind == "pattern_no_match"


@pytest.mark.timeout(30)
def test_pattern_over_the_time_limit_is_a_field_problem_naming_the_limit() -> None:
    page = _page(f"<p id='v'>{'a' * 200}!</p><h1>ok</h1>")
    result = extract_record(page, {"v": FieldSpec(selector="#v", pattern="^(a|a)+$"),
                                   "title": FieldSpec(selector="h1")}, limits=FAST)
    assert result.record == {"v": None, "title": "ok"}
    [problem] = result.problems
    assert problem.field == "v" and problem.kind == "limit_exceeded"
    assert "regex_timeout_s=0.05" in problem.message and "SCRAPE_CONTRACTS_REGEX_TIMEOUT_S" in problem.message


@pytest.mark.timeout(30)
def test_json_schema_pattern_is_bounded_too() -> None:
    schema = {"type": "object", "properties": {"v": {"type": "string", "pattern": "^(a|a)+$"}}}
    [violation] = validate_schema({"v": "a" * 200 + "!"}, schema, limits=FAST)
    assert violation.field == "v" and "regex_timeout_s=0.05" in violation.message


def test_exslt_regex_in_xpath_is_refused_at_load_time() -> None:
    with pytest.raises(SelectorError, match="EXSLT regular expression"):
        compile_selector('//p[re:test(., "^(a|a)+$")]')


def test_regex_limit_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCRAPE_CONTRACTS_REGEX_TIMEOUT_S", "0.25")
    monkeypatch.setenv("SCRAPE_CONTRACTS_SELECTOR_MAX_COST", "1000")
    limits = settings.engine_limits()
    assert limits.regex_timeout_s == 0.25 and limits.selector_max_cost == 1000
    monkeypatch.setenv("SCRAPE_CONTRACTS_REGEX_TIMEOUT_S", "soon")
    with pytest.raises(ValueError, match="SCRAPE_CONTRACTS_REGEX_TIMEOUT_S"):
        settings.engine_limits()


# -- selectors --------------------------------------------------------------------------------------------

@pytest.mark.timeout(30)
def test_cubic_xpath_is_refused_before_it_runs() -> None:
    # 6.5 s at 800 elements when run; refused from its estimate instead
    page = _page("".join(f"<div><span>{i}</span></div>" for i in range(400)) + "<h1>ok</h1>")
    result = extract_record(page, {"v": FieldSpec(selector="//*[count(//*[count(//*) > 0]) > 0]"),
                                   "title": FieldSpec(selector="h1")})
    assert result.record["title"] == "ok"
    [problem] = result.problems
    assert problem.kind == "limit_exceeded" and "selector_max_cost" in problem.message
    assert "SCRAPE_CONTRACTS_SELECTOR_MAX_COST" in problem.message


def test_ordinary_selectors_on_a_big_page_are_not_refused() -> None:
    items = "".join(f"<li class='item'><div class='card'><span class='price'>{i}.50</span>"
                    f"<a href='/p/{i}'>p{i}</a></div></li>" for i in range(15000))
    page = _page(f"<main class='listing'><ul>{items}</ul></main><p id='total'>15000 items</p>"
                 "<dl><dt>Price</dt><dd>9</dd></dl>")
    result = extract_record(page, {
        "total": FieldSpec(selector="#total", type="integer", pattern=r"(\d+) items"),
        "first": FieldSpec(selector=".listing .item .card .price", type="price"),
        "last": FieldSpec(selector="//ul/li[last()]//a/@href"),
        "label": FieldSpec(selector="//dt[normalize-space()='Price']/following-sibling::dd[1]", type="integer"),
    })
    # every selector ran: "first" matched all 15,000 prices (a multiple-match problem, not a limit)
    assert [(p.field, p.kind) for p in result.problems] == [("first", "multiple_matches")]
    assert result.record == {"total": 15000, "first": None, "last": "/p/14999", "label": 9}


def test_selector_limit_refuses_a_heal_as_a_refusal() -> None:
    before = _page("<p id='price'>$10.00</p>")
    after = _page("<p class='cost'>$10.00</p>")
    slow = "//*[count(//*[count(//*) > 0]) > 0]"
    [result] = heal(before, after, {"price": {"selector": slow, "before": 10.0, "type": "price"}},
                    limits=Limits(selector_max_cost=100)).values()
    assert not result.healed
    assert result.evidence["reason"] == "limit_exceeded" and result.evidence["limit"] == "selector_max_cost"


@pytest.mark.timeout(60)
def test_slow_pattern_during_a_heal_is_a_refusal() -> None:
    before = _page("<p id='v'>aaaa</p>")
    after = _page("".join(f"<p class='c{i}'>{'a' * 60}!</p>" for i in range(5)))
    [result] = heal(before, after, {"v": {"selector": "#v", "before": "aaaa", "pattern": "^((a|a)+)$"}},
                    limits=FAST).values()
    assert not result.healed and result.evidence["limit"] == "regex_timeout_s"


# -- deep nesting -----------------------------------------------------------------------------------------

def _nested(depth: int, inner: str, tag: str = "span") -> str:
    return f"<{tag}>" * depth + inner + f"</{tag}>" * depth


def test_a_field_nesting_thousands_of_elements_deep_is_read() -> None:
    # 1,900 levels: inside the parser's own depth limit, far past Python's recursion limit
    page = _page(f"<div id='v'>{_nested(1900, 'deep value')}</div><h1>ok</h1>")
    result = extract_record(page, {"v": FieldSpec(selector="#v"), "title": FieldSpec(selector="h1")})
    assert result.problems == () and result.record == {"v": "deep value", "title": "ok"}


def test_twenty_thousand_levels_end_in_a_field_problem_not_a_crash() -> None:
    # the parser keeps the first 2,048 levels (libxml2's limit) and drops the rest of the page
    page = _page(f"<div id='v'>{_nested(20000, 'deep value')}</div><h1>ok</h1>")
    result = extract_record(page, {"v": FieldSpec(selector="#v"), "title": FieldSpec(selector="h1")})
    assert {p.field: p.kind for p in result.problems} == {"v": "no_match", "title": "no_match"}


def test_heal_on_a_deeply_nested_page_completes() -> None:
    before = _page("<p id='price' itemprop='price'>$10.00</p>")
    deep_jsonld = '<script type="application/ld+json">' + '{"a":' * 3000 + "1" + "}" * 3000 + "</script>"
    after = _page(f"{deep_jsonld}<div class='wrap'>{_nested(1500, '<b itemprop=price>$10.00</b>', 'div')}</div>")
    [result] = heal(before, after, {"price": {"selector": "#price", "before": 10.0, "type": "price"}}).values()
    assert result.healed and result.selector == 'b[itemprop="price"]'


# -- heal size and time -----------------------------------------------------------------------------------

def _shop(price_attrs: str, rows: int = 0) -> str:
    filler = "".join(f"<li>row {i}</li>" for i in range(rows))
    return _page(f"<ul>{filler}</ul><span {price_attrs}>$10.00</span>")


def test_heal_refuses_a_page_over_the_element_limit_up_front() -> None:
    results = heal(_shop("id='price'"), _shop("class='cost'", rows=100),
                   {"price": {"selector": "#price", "before": 10.0, "type": "price"},
                    "title": {"selector": "h1", "before": "Dune"}}, limits=Limits(heal_max_elements=50))
    assert {n: r.evidence["limit"] for n, r in results.items()} == {"price": "heal_max_elements",
                                                                    "title": "heal_max_elements"}
    assert "SCRAPE_CONTRACTS_HEAL_MAX_ELEMENTS" in results["price"].evidence["detail"]
    # the same heal within the limit succeeds
    [ok] = heal(_shop("id='price'"), _shop("class='cost'", rows=100),
                {"price": {"selector": "#price", "before": 10.0, "type": "price"}}).values()
    assert ok.healed


def test_heal_past_its_time_limit_is_a_refusal() -> None:
    ticks = iter(range(10**6))

    def clock() -> float:  # one second per look at the clock
        return float(next(ticks))

    [result] = heal(_shop("id='price'"), _shop("class='cost'", rows=200),
                    {"price": {"selector": "#price", "before": 10.0, "type": "price"}},
                    limits=Limits(heal_timeout_s=20), clock=clock).values()
    assert not result.healed and result.evidence["limit"] == "heal_timeout_s"
    assert "SCRAPE_CONTRACTS_HEAL_TIMEOUT_S" in result.evidence["detail"]
