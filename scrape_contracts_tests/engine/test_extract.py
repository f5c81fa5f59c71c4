from __future__ import annotations

import pytest

from scrape_contracts.contract.fields import FieldSpec
from scrape_contracts.engine.extract import ValueParseError, extract_record, parse_value

PAGE = """<!doctype html><html><head>
<meta property="og:price:amount" content="1299.00"><script>var price = "$1.00";</script></head>
<body><header>Cart: $0.00</header>
<div class="product"><h1 class="title">  The   Great
  Gatsby </h1>
<span class="price">$1,299.00</span><del class="price old">$1,499.00</del>
<p class="stock">In stock</p><p class="rating">Rated <b>4</b> of 5</p>
<ul><li class="tag">novel</li><li class="tag">classic</li></ul>
<p class="sku">SKU: GG-1925</p>
</div><style>.price{color:red}</style></body></html>"""


def fields(**specs: dict) -> dict[str, FieldSpec]:
    return {name: FieldSpec(**spec) for name, spec in specs.items()}


def test_extracts_text_attribute_xpath_and_types() -> None:
    result = extract_record(PAGE, fields(
        title={"selector": "h1.title"},
        price={"selector": "span.price", "type": "price"},
        meta_price={"selector": 'meta[property="og:price:amount"]::attr(content)', "type": "number"},
        in_stock={"selector": "p.stock", "type": "boolean"},
        rating={"selector": "//p[@class='rating']/b", "type": "integer"},
        sku={"selector": "p.sku", "pattern": r"SKU:\s*(\S+)", "normalise": ["lower"]},
    ))
    assert result.problems == ()
    assert result.record == {"title": "The Great Gatsby", "price": 1299.0, "meta_price": 1299.0, "in_stock": True,
                             "rating": 4, "sku": "gg-1925"}
    assert result.raw["price"] == "$1,299.00"


def test_problems_never_guess_a_value() -> None:
    result = extract_record(PAGE, fields(
        missing={"selector": "#nope"},
        several={"selector": "li.tag"},
        both_prices={"selector": ".price", "type": "price"},
        not_a_number={"selector": "h1", "type": "number"},
    ))
    kinds = {p.field: p.kind for p in result.problems}
    assert kinds == {"missing": "no_match", "several": "multiple_matches", "both_prices": "multiple_matches",
                     "not_a_number": "unparseable"}
    assert all(result.record[name] is None for name in kinds)


def test_script_and_style_text_is_not_content() -> None:
    result = extract_record(PAGE, fields(body={"selector": "div.product"}))
    assert "var price" not in result.record["body"] and "color:red" not in result.record["body"]


def test_broken_html_still_extracts() -> None:
    broken = "<html><body><div id=a><p>unclosed <b>bold<span id=v>42</div></p></body>"
    assert extract_record(broken, fields(v={"selector": "#v", "type": "integer"})).record == {"v": 42}


@pytest.mark.parametrize("text, kind, expected", [
    ("$1,299.00", "price", 1299.0), ("1.299,00 €", "price", 1299.0), ("EUR 12,50", "price", 12.5),
    ("-5 USD", "price", -5.0), ("12", "integer", 12), ("No", "boolean", False), ("3.5 stars", "number", 3.5),
    ("Free", "price", 0.0),
])
def test_parse_value(text: str, kind: str, expected: object) -> None:
    assert parse_value(text, kind) == expected


@pytest.mark.parametrize("text, kind", [("call us", "price"), ("free", "number"), ("12.5", "integer"), ("maybe", "boolean")])
def test_parse_value_refuses(text: str, kind: str) -> None:
    with pytest.raises(ValueParseError):
        parse_value(text, kind)


def test_select_texts_reads_nodes_as_parsel_did_and_names_the_selector_of_a_failing_xpath() -> None:
    """``select_texts`` evaluates the cached compiled XPath (not parsel's per-call compile): the same texts for
    elements, text and attribute nodes, numbers and comments, and parsel's ValueError for an evaluation error."""
    import pytest

    from scrape_contracts.engine.select import node_text, parse_html, select_texts

    html = ('<div class="p"><h1> Dune <b>II</b> </h1><!-- note --><a href="/x">link</a>'
            '<script>var x = 1;</script><p>one</p><p>two</p></div>')
    root = parse_html(html)
    for selector in ("//h1/text()", "//a/@href", "(count(//p))", "//comment()", "//div", "//p"):
        assert select_texts(root, selector) == [node_text(n) for n in root.xpath(selector)], selector
    for selector in (".p h1", ".p", "p"):
        assert select_texts(root, selector) == [node_text(n) for n in root.css(selector)], selector
    assert select_texts(root, "//h1") == ["Dune II"] and select_texts(root, "(count(//p))") == ["2.0"]
    with pytest.raises(ValueError, match=r"XPath error: .* in \(//p\[foo\(\)\]\)"):
        select_texts(root, "(//p[foo()])")


# selectors beginning with the same step, answered from the one element that step finds (SharedSteps)
SCOPED = """<html><body><p class="sku">SKU-OUTSIDE</p>
<div class="main" id="m"><h1 class="t">Title</h1><p class="sku">SKU-1</p><p class="sku">SKU-1</p>
<a href="/x" class="link">x</a><ul><li>a</li><li>b</li><li>c</li></ul><span class="price">$5</span></div>
<div class="side"><span class="price">$9</span></div><div class="side"><span class="price">$8</span></div>
</body></html>"""
SCOPED_SELECTORS = [
    ".main h1.t", ".main .sku", ".main a::attr(href)", ".main a::text", ".main li:nth-child(2)", ".main li",
    ".main > ul > li + li", ".main .nothing", ".side .price", ".side span", "#m .price", "#m h1",
    "//div[@id='m']//li[last()]", "//div[@id='m']/ul/li/ancestor::div", "//div[@id='m']//li[2]/preceding-sibling::li",
    "//div[@class='side']/span", "//div[@id='m']//li | //h1", "(//div[@id='m']//li)[1]", "//nowhere/p",
    "//div[@id='m']/count(li)",
]


def test_shared_first_steps_select_what_the_whole_path_selects() -> None:
    from scrape_contracts.engine.select import SharedSteps, parse_html, select_texts

    root = parse_html(SCOPED)
    shared = SharedSteps(root, SCOPED_SELECTORS)
    for selector in SCOPED_SELECTORS:
        try:
            alone = select_texts(root, selector)
        except Exception as exc:  # noqa: BLE001 (the same failure either way)
            with pytest.raises(type(exc)):
                select_texts(root, selector, shared=shared)
            continue
        assert select_texts(root, selector, shared=shared) == alone, selector


def test_a_shared_step_is_used_only_when_it_finds_one_element() -> None:
    from scrape_contracts.engine.select import SharedSteps, compile_selector, parse_html

    root = parse_html(SCOPED)
    shared = SharedSteps(root, [".main h1.t", ".main .sku", ".side .price", ".side span", "#m h1"])
    # one .main: answered from it; two .side: the whole path runs; #m's step begins no other selector
    assert shared.evaluate(compile_selector(".main .sku")) is not None
    assert shared.evaluate(compile_selector(".side .price")) is None
    assert shared.evaluate(compile_selector("#m h1")) is None


def test_extract_record_is_the_same_with_shared_steps() -> None:
    specs = fields(title={"selector": ".main h1.t"}, sku={"selector": ".main .sku"},
                   price={"selector": ".main .price", "type": "price"}, side={"selector": ".side .price"},
                   link={"selector": ".main a::attr(href)", "type": "url"}, missing={"selector": ".main .nothing"})
    together = extract_record(SCOPED, specs, page_url="https://shop.example/p/1")
    # one field at a time: no selector shares a first step with another
    alone = [extract_record(SCOPED, {n: s}, page_url="https://shop.example/p/1") for n, s in specs.items()]
    assert together.record == {n: e.record[n] for e, n in zip(alone, specs)}
    assert together.problems == tuple(p for e in alone for p in e.problems)
    assert together.record["sku"] == "SKU-1" and together.record["link"] == "https://shop.example/x"
