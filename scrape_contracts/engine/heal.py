"""Self-healing selectors: find where a field went on a changed page, or refuse.

``heal(before_html, after_html, fields)`` is pure: both pages are parsed per call and every cache lives in
a per-call ``_Page``, so concurrent calls share nothing mutable.

For each field:

1. Locate the old element on the LAST GOOD page (what the old selector matched, holding the last accepted
   value; else the value itself, when it occurs in at most three places) and fingerprint it: tag, stable
   classes/id, naming attributes, label text, ancestor path, siblings, position, context flags.
2. Candidates are the new page's texts and value attributes (``content``/``datetime``/``value``) that parse
   as the field's type, look like one value (a number standing alone, not "Desk X681" or a date), and pass
   the rules (min/max/expected, max_change_pct or a default 50% guard). Dropped outright: candidates whose
   context the old element did not share (crossed out / "was" price, related or recommended section,
   another item's card in a repeated linked list), label elements, and changed texts of another shape.
3. Score = weighted evidence: semantic anchors (the old element's itemprop/data-testid/id, or naming
   attributes that name the field), label (the old label, or the field name; synonyms and stems count),
   fingerprint similarity, value proximity (discounted for values that match by coincidence, like "3"),
   structured data (JSON-LD or a meta copy that agrees), and the old selector still pointing at or next to
   it; minus penalties for a label naming something else, a name that belonged to another element on the
   old page, looking like a known non-target of the old page, and page chrome (nav, breadcrumbs, footer).
4. Accept the best only if its score clears a floor, it has evidence besides its value, and it beats the
   best competitor elsewhere on the page by a margin; a changed text also needs a strong anchor or
   fingerprint. Otherwise refuse, with the reason in the evidence.
5. Build a stable selector (stable id, naming attribute, meaningful class, anchored descendant, label XPath,
   adjacent sibling, and only then at most two nth-of-type steps under a stable ancestor), check it matches
   exactly that element, prefer one that does not describe another element of the old page, and re-extract
   the value with it.

A field that was shown text is never healed to an invisible copy of it (a meta tag): such copies only
confirm a shown value. JSON-LD is evidence only: the extractor reads element text or attributes and cannot
descend into a JSON document, so a selector into a ``<script>`` would not extract the value.
"""

from __future__ import annotations

import json
import math
import re
import time
from itertools import islice
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from lxml import etree

from scrape_contracts.engine.extract import ValueParseError, parse_value
from scrape_contracts.engine.limits import DEFAULT_LIMITS, LimitExceeded, Limits
from scrape_contracts.engine.select import (
    SelectorBudget,
    SelectorError,
    is_xpath,
    node_text,
    normalise_space,
    parse_html,
    select,
)

# -- thresholds -------------------------------------------------------------------------------------------

# Scores are sums of weighted evidence (weights below), roughly 0..1.2; thresholds are on that scale.
MIN_SCORE = 0.42  # below this the best candidate is not trusted
MIN_MARGIN = 0.10  # best vs a competitor with a different value
MIN_MARGIN_SAME_VALUE = 0.04  # best vs a competitor elsewhere with the same value (selector would be wrong)
LONE_RUNNER_UP = 0.1  # a runner-up below this is no competitor...
LONE_DISCOUNT = 0.08  # ...and the floor drops by this much
NO_FINGERPRINT_PENALTY = 0.1  # the floor rises by this much when the old element was not found
MIN_SUPPORT = 0.1  # evidence other than the value itself (structure + anchors + label) a heal needs
UNIQUE_VALUE_BONUS = 0.1  # the last accepted (specific) value found in exactly one place
STILL_THERE_SIMILARITY = 0.75  # the old selector's match is the old element itself, not a look-alike
ALIAS_DISCOUNT = 0.8  # similarity to a same-value twin counts, but less than to the old element itself
DEFAULT_CHANGE_PCT = 50.0  # numeric guard when the contract sets no max_change_pct
MAX_FINGERPRINTED = 200  # huge pages: only the most plausible candidates get a full fingerprint...
MAX_SHORTLIST = 30  # ...and only the best of those get the costly context checks
MAX_NUMERIC_TEXT = 48
MAX_STRING_TEXT = 160

_W_STRUCT, _W_ANCHOR, _W_LABEL, _W_VALUE, _W_JSONLD, _W_OLDSEL = 0.28, 0.22, 0.22, 0.28, 0.08, 0.08
_P_DISTRACTOR, _P_CHROME, _P_CARD, _P_IDENTITY, _P_LABEL = 0.45, 0.3, 0.2, 0.35, 0.12

_NUMERIC = frozenset({"number", "integer", "price"})
_UNPARSEABLE = object()
_NON_CONTENT = frozenset({"script", "style", "noscript", "template"})
_NOT_CANDIDATE = frozenset(
    "html head body script style noscript template svg path br hr img input button select option "
    "textarea iframe link form nav footer header main table tbody thead tr ul ol dl picture "
    "source video audio".split()
)
_VALUE_ATTRS = ("content", "datetime", "value")
_HEADINGS = frozenset({"h2", "h3", "h4", "h5", "h6"})
_LABEL_TAGS = frozenset({"dt", "th", "label", "legend"})
# controls and media say what you can do, not what a neighbouring value is; an h1 titles the whole page
_NOT_LABEL = frozenset(
    "button a input select textarea img svg br hr script style noscript template iframe video "
    "audio picture h1".split()
)
_SEMANTIC_TAGS = frozenset(
    "h1 h2 time address title data output meter caption figcaption blockquote cite del ins s "
    "strike mark".split()
)
_TAG_FAMILY = {
    **dict.fromkeys(
        "span strong b em i small mark data output ins bdi label a time abbr cite sup sub u".split(), "inline"
    ),
    **dict.fromkeys("div p section article aside figure figcaption address blockquote".split(), "block"),
    **dict.fromkeys("h1 h2 h3 h4 h5 h6".split(), "heading"),
    **dict.fromkeys("td th dd dt li".split(), "cell"),
    "meta": "meta",
}

# Attributes that name what an element is (as opposed to how it looks).
_SEMANTIC_ATTRS = frozenset(
    "itemprop data-testid data-test data-qa data-cy data-field data-name data-role data-type data-key "
    "data-label data-element data-component name property aria-label role for headers".split()
)
_STRONG_ANCHOR_ATTRS = frozenset(
    "itemprop data-testid data-test data-qa data-cy data-field data-name data-key data-element "
    "name property id".split()
)

_STOP = frozenset(
    "value val text txt item items field label info detail details data main content wrapper wrap "
    "container box block inner outer row col column section group list el elem element component "
    "root primary secondary big small large lg sm md xs xl bold strong the a an of per and or to "
    "in at on for is it this js ui c l m card meta line span div display fmt formatted x is has "
    "num no page module widget cell key summary overview v k attr prop entry product listing pdp "
    "og".split()
)

# Field vocabulary: a label or attribute saying "Beds" is evidence for a field named "bedrooms".
_SYNONYM_GROUPS: tuple[frozenset[str], ...] = tuple(
    frozenset(g.split())
    for g in (
        "price cost amount pricing offer now current sale our",
        "bedroom bed br bd sleep",
        "bathroom bath ba",
        "area size sqft sq ft square feet footage surface living m2 sqm floorspace",
        "year built constructed construction yearbuilt",
        "title name headline heading",
        "author by byline writer reporter creator written",
        "date published posted datetime updated dated datepublished dateposted when",
        "rating star score rated ratingvalue grade",
        "review reviewcount ratingcount vote",
        "company employer organization organisation hiringorganization org firm hiring",
        "location address city where place joblocation venue locality street",
        "salary pay compensation wage basesalary remuneration",
        "stock availability available instock inventory",
        "sku mpn model part ref reference code productid",
        "comment reply discussion response",
        "capacity seat remaining left spot",
        "employment type contract schedule job",
        "read minute min duration length readtime",
        "helpful useful",
        "reviewer customer user buyer",
    )
)
_SYNONYM_OF: dict[str, frozenset[str]] = {}
for _group in _SYNONYM_GROUPS:
    for _word in _group:
        _SYNONYM_OF[_word] = _SYNONYM_OF.get(_word, frozenset()) | _group
del _group, _word

_STRIKE_TAGS = frozenset({"del", "s", "strike"})
# class/id words of crossed-out and "was" prices; generic words ("list", "regular") would flag whole lists
_STRIKE_TOKENS = frozenset(
    "old was strike strikethrough crossed crossout compare original msrp rrp previous former "
    "retail srp saving save savings".split()
)
_STRIKE_LABEL = re.compile(
    r"\b(was|rrp|msrp|previously|original|regular price|compare at|"
    r"old price|before|save|you save|retail|srp|uvp|instead of)\b",
    re.I,
)
_RELATED_TOKENS = frozenset(
    "related recommended recommendation recommend similar also carousel upsell crosssell cross "
    "sponsored suggested suggestion recent recently viewed nearby trending popular promoted "
    "advert ad ads advertisement more others reco recs picks together alternative alternatives "
    "compare comparison teaser teasers outbrain taboola".split()
)
_RELATED_HEADING = re.compile(
    r"\b(related|similar|recommend\w*|sponsored|you (?:may|might|could) (?:also )?(?:like|enjoy|want|be)|"
    r"also (?:like|bought|viewed|liked|consider|read)|(?:customers|people|others|shoppers) (?:who|also)|"
    r"more (?:from|like|homes|jobs|events|stories|articles|listings|products|to|in|by|reviews)|"
    r"other (?:\w+ )?(?:products|items|homes|jobs|events|listings|stories|articles|reviews|properties)|"
    r"recently viewed|trending|most (?:read|popular|viewed)|read next|up next|popular|nearby|"
    r"frequently bought|bought together|compare (?:with|to|similar)|picks|don.t miss|also on|"
    r"latest (?:news|stories|articles|jobs|listings)|top stories|suggested|alternatives?)\b",
    re.I,
)
_GENERIC_HEADS = frozenset(
    "count number total amount value qty quantity text name left remaining type id code time date "
    "at flag status".split()
)
_FRAMEWORK_WORDS = frozenset(
    "root module styles style styled css sc jsx emotion svelte comp cmp base default".split()
)
_CHROME_TOKENS = frozenset(
    "nav navbar navigation menu footer breadcrumb breadcrumbs topbar cookie cookies masthead "
    "sitemap megamenu minicart sidebar-nav site-header site-footer announcement".split()
)

_HASH_PREFIX = re.compile(
    r"^(css|sc|jsx|emotion|svelte|styled|tw|jss|ember|ng-tns|ng-star|_ng|astro|"
    r"chakra|mui-[a-z0-9]{4,}|x-[a-z0-9]{5,})[-_]",
    re.I,
)
# a number not glued to a preceding letter; thousands may be grouped with , . ' or (narrow) spaces
_NUMBER_TOKEN = re.compile(r"(?<![\w.])[-+]?\d+(?:[.,'\u202f\u00a0]\d+|\s\d{3}(?!\d))*")
_GLUED_NUMBER = re.compile(r"[A-Za-z]\d")
_RATING_SCALE = re.compile(r"\d\s*(?:/|out of|of)\s*\d", re.I)
_LETTER_WORD = re.compile(r"[A-Za-z]{2,}")
_CURRENCY = re.compile(r"[$€£¥₹₩₽]|\b(?:USD|EUR|GBP|CHF|JPY|CAD|AUD|SEK|NOK|DKK|PLN|INR)\b")
_ALNUM = re.compile(r"[^\W_]")
_DIGIT = re.compile(r"\d")
_LONG_TEXT = 4000
_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_UTILITY_CLASS = re.compile(
    r"^(?:[a-z]+:|-?(?:m|p)[trblxyse]?-|"
    r"(?:text|font|bg|flex|grid|w|h|min|max|gap|items|justify|rounded|border|"
    r"shadow|leading|tracking|col|row|d|align|order|z|top|left|right|bottom|inset|space|divide|ring|opacity|"
    r"overflow|whitespace|truncate|uppercase|lowercase|hidden|block|inline|absolute|relative|fixed|sticky|"
    r"mt|mb|ml|mr|mx|my|pt|pb|pl|pr|px|py|fs|fw|lh|is|has|js|u|l|o)(?:-|$))"
)


# -- public API -------------------------------------------------------------------------------------------


class _Deadline:
    """The time one heal call may take; checked where the work grows with the page (each text parsed, each
    selector tried), so a page that would take minutes is refused after ``seconds``."""

    def __init__(self, clock: Callable[[], float], seconds: float) -> None:
        self.clock = clock
        self.seconds = seconds
        self.at = clock() + seconds

    def check(self) -> None:
        if self.clock() > self.at:
            raise LimitExceeded("heal_timeout_s", self.seconds, "the heal took too long")


@dataclass(frozen=True)
class HealResult:
    value: Any | None  # None = refused
    selector: str | None
    confidence: float
    evidence: dict = field(default_factory=dict)

    @property
    def healed(self) -> bool:
        return self.value is not None


def heal(before_html: str, after_html: str, fields: Mapping[str, Mapping[str, Any]], *,
         limits: Limits = DEFAULT_LIMITS, clock: Callable[[], float] = time.monotonic) -> dict[str, HealResult]:
    """Heal each field of ``fields`` ({name: {"selector", "before", ...}}) against the new page.

    A limit hit refuses, like any other refusal: a page over ``heal_max_elements`` every field, running
    past ``heal_timeout_s`` the field being healed and those after it, a slow pattern or a costly
    selector of the contract that field."""
    deadline = _Deadline(clock, limits.heal_timeout_s)
    try:
        before = _Page(before_html, limits, deadline)
        after = _Page(after_html, limits, deadline)
    except LimitExceeded as exc:
        return {name: _refuse("limit_exceeded", str(exc), 0, limit=exc.limit, setting=exc.setting)
                for name in fields}
    results: dict[str, HealResult] = {}
    for name, raw_spec in fields.items():
        spec = _FieldSpec.from_mapping(name, raw_spec, limits)
        try:
            results[name] = _heal_field(before, after, spec)
        except (SelectorError, etree.XPathError) as exc:
            results[name] = _refuse("invalid_selector", str(exc), 0)
        except LimitExceeded as exc:
            results[name] = _refuse("limit_exceeded", str(exc), 0, limit=exc.limit, setting=exc.setting)
        except RecursionError:
            # every walk here is a loop; should one still recurse, the page is refused, not the run failed
            results[name] = _refuse("too_deep", "the page nests too deep to compare", 0)
    return results


# -- field spec and values --------------------------------------------------------------------------------


@dataclass(frozen=True)
class _FieldSpec:
    name: str
    selector: str
    type: str
    pattern: str | None
    normalise: tuple[str, ...]
    before: Any
    minimum: float | None
    maximum: float | None
    change_pct: float
    change_pct_given: bool
    expected: Any
    limits: Limits = DEFAULT_LIMITS

    @staticmethod
    def from_mapping(name: str, raw: Mapping[str, Any], limits: Limits = DEFAULT_LIMITS) -> _FieldSpec:
        rules = raw.get("rules") or {}
        ftype = str(raw.get("type") or "string")
        pattern = raw.get("pattern")
        normalise = tuple(raw.get("normalise") or ())

        def pick(key: str) -> Any:
            return raw[key] if raw.get(key) is not None else rules.get(key)

        pct = pick("max_change_pct")
        return _FieldSpec(
            name=name,
            selector=str(raw.get("selector") or ""),
            type=ftype,
            pattern=pattern,
            normalise=normalise,
            before=_coerce(raw.get("before"), ftype, normalise),
            minimum=pick("min"),
            maximum=pick("max"),
            change_pct=float(pct) if pct is not None else DEFAULT_CHANGE_PCT,
            change_pct_given=pct is not None,
            expected=_coerce(pick("expected"), ftype, normalise),
            limits=limits,
        )

    @property
    def bare(self) -> _FieldSpec:
        """The same type without pattern/normalisation: how a lone number token reads."""
        return replace(self, pattern=None, normalise=())

    @property
    def numeric(self) -> bool:
        return self.type in _NUMERIC

    def parse(self, text: str) -> Any:
        """Typed value exactly as the extractor would produce it, or raise ValueParseError."""
        return parse_value(text, self.type, self.pattern, self.normalise, limits=self.limits)

    def violation(self, value: Any) -> str | None:
        """Why ``value`` breaks the field's rules (or the healer's own change guard), or None."""
        if self.expected is not None and not _same_value(value, self.expected):
            return "differs from expected"
        if self.numeric and isinstance(value, (int, float)):
            if self.minimum is not None and value < self.minimum:
                return "below min"
            if self.maximum is not None and value > self.maximum:
                return "above max"
            if isinstance(self.before, (int, float)) and not isinstance(self.before, bool):
                change = _relative_change(value, self.before)
                if change * 100.0 > self.change_pct + 1e-9:
                    return "change beyond limit"
        return None


def _coerce(value: Any, ftype: str, normalise: tuple[str, ...]) -> Any:
    if value is None:
        return None
    if ftype in _NUMERIC:
        if isinstance(value, bool):
            return None
        if isinstance(value, (int, float)):
            if ftype == "integer":
                return int(value) if float(value).is_integer() else value
            return float(value)
        try:
            return parse_value(str(value), ftype)
        except ValueParseError:
            return None
    if ftype == "boolean":
        if isinstance(value, bool):
            return value
        try:
            return parse_value(str(value), "boolean")
        except ValueParseError:
            return None
    return str(value)


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or a == b and type(a) is type(b)
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=1e-9)
    return a == b


def _relative_change(value: float, before: float) -> float:
    if before == 0:
        return 0.0 if value == 0 else math.inf
    return abs(float(value) - float(before)) / abs(float(before))


# -- tokens and stability ---------------------------------------------------------------------------------


def _words(text: str) -> list[str]:
    """Lower-case word tokens; camelCase and kebab/snake parts split; crude plural folding."""
    out: list[str] = []
    for raw in _WORD.findall(text or ""):
        word = raw.lower()
        if word.isdigit():
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        out.append(word)
    return out


def _content_words(text: str) -> frozenset[str]:
    return frozenset(w for w in _words(text) if w not in _STOP)


def _expand(tokens: Iterable[str]) -> frozenset[str]:
    out: set[str] = set()
    for token in tokens:
        out.add(token)
        out |= _SYNONYM_OF.get(token, frozenset())
    return frozenset(out)


def _random_segment(segment: str) -> bool:
    if not segment:
        return False
    if segment.isdigit():
        return len(segment) >= 3  # instance ids (product-48213) differ between pages of one contract
    has_digit = any(c.isdigit() for c in segment)
    has_alpha = any(c.isalpha() for c in segment)
    if has_digit and has_alpha:
        # short layout counters (h2, col12, step3) are authored, hashes interleave digits
        return re.fullmatch(r"[A-Za-z]{1,12}\d{1,2}", segment) is None
    if has_alpha and len(segment) >= 5 and not re.search(r"[aeiouy]", segment, re.I):
        return True
    if has_alpha and any(c.isupper() for c in segment[1:]) and not segment.isupper():
        words = re.findall(r"[A-Z][a-z]*|[a-z]+", segment)
        if any(len(w) <= 2 for w in words[1:]):
            return True
    return False


def is_unstable_token(token: str) -> bool:
    """True for generated names (css-1x2y3z, sc-AxjAm, jsx-123, Button_root__3kX9a, a8f3k2, uuid-like)."""
    if not token or len(token) > 60:
        return True
    if _HASH_PREFIX.match(token):
        return True
    if re.fullmatch(r"[0-9a-f]{8,}(?:-[0-9a-f]{4,})*", token, re.I) and re.search(r"\d", token):
        return True
    return any(_random_segment(seg) for seg in re.split(r"[-_:.]+", token))


def _class_words(class_attr: str) -> frozenset[str]:
    """Meaningful words of all class names, generated ones included: CSS modules keep the author's name
    next to the hash ("Bathrooms_root__95ori" -> bathroom)."""
    words: set[str] = set()
    for cls in class_attr.split():
        if _HASH_PREFIX.match(cls) or _UTILITY_CLASS.match(cls):
            continue
        for segment in re.split(r"[-_]+", cls):
            if segment and not _random_segment(segment):
                words.update(w for w in _words(segment) if w not in _STOP and w not in _FRAMEWORK_WORDS)
    return frozenset(words)


def _stable_classes(el: etree._Element) -> tuple[str, ...]:
    return tuple(c for c in (el.get("class") or "").split() if not is_unstable_token(c))


def _stable_id(el: etree._Element) -> str | None:
    value = (el.get("id") or "").strip()
    if not value or is_unstable_token(value) or not re.fullmatch(r"[A-Za-z][\w-]*", value):
        return None
    return value


def _stable_attr_value(value: str) -> bool:
    value = re.sub(r"^https?://", "", value.strip())  # itemtype="https://schema.org/Product"
    if not value or len(value) > 60 or re.search(r"\d{2,}", value):
        return False
    return not any(is_unstable_token(part) for part in re.split(r"[\s/#?&=]+", value) if part)


def _sem_attrs(el: etree._Element) -> frozenset[tuple[str, str]]:
    out = set()
    for attr, value in el.attrib.items():
        if attr in _SEMANTIC_ATTRS or (attr.startswith("data-") and attr not in ("data-reactid",)):
            value = normalise_space(value)
            if attr.startswith("data-") and attr not in _SEMANTIC_ATTRS and not re.search(r"[A-Za-z]", value):
                continue  # data-price="19.99": a value, not a name
            if _stable_attr_value(value):
                out.add((attr, value))
    return frozenset(out)


# -- page model -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Fp:
    """Fingerprint of one element as a value source."""

    tag: str
    family: str
    src: str
    id: str | None
    classes: frozenset[str]
    class_tokens: frozenset[str]
    sem: frozenset[tuple[str, str]]
    name_tokens: frozenset[str]  # words of id, classes and semantic attribute values
    label: str
    anc: Mapping[str, float]
    sib: frozenset[str]
    pos: float
    tag_rare: bool = False  # an h1/time/address that occurs once or twice: matching it means a lot


class _Page:
    """One parsed page plus lazily computed, per-call caches (never shared between calls)."""

    def __init__(self, html: str, limits: Limits = DEFAULT_LIMITS, deadline: _Deadline | None = None) -> None:
        self.sel = parse_html(html)
        self.limits = limits
        self.deadline = deadline or _Deadline(time.monotonic, limits.heal_timeout_s)
        self.budget = SelectorBudget(self.sel, limits.selector_max_cost)
        root = self.sel.root
        elements = int(root.xpath("count(//*)"))
        if elements > limits.heal_max_elements:
            # every cache below is per element: refuse before building them (219 s at 200,000 elements)
            raise LimitExceeded("heal_max_elements", limits.heal_max_elements,
                                f"the page has {elements:,} elements, too many to heal")
        self.elements: list[etree._Element] = [e for e in root.iter() if isinstance(e.tag, str)]
        self.index = {el: i for i, el in enumerate(self.elements)}
        self.text = self._texts()
        self.hidden = self._hidden()
        self._fp: dict[tuple[etree._Element, str], _Fp] = {}
        self._labels: dict[etree._Element, str] = {}
        self._card: dict[etree._Element, bool] = {}
        self._lookalikes: dict[etree._Element, dict[tuple[str, frozenset[str]], int]] = {}
        self._bare_links: dict[etree._Element, int] = {}
        self.scan_cache: dict[tuple, list[tuple[etree._Element, str, str, Any]]] = {}
        self._sites: list[tuple[etree._Element, str, str]] | None = None
        self.shape_cache: dict[tuple, bool] = {}
        self._classes: dict[etree._Element, tuple[str, ...]] = {}
        self._unstable: dict[str, bool] = {}
        self._node_tokens: dict[etree._Element, tuple[str, ...]] = {}
        self._context_words: dict[etree._Element, frozenset[str]] = {}
        self._flags: dict[etree._Element, frozenset[str]] = {}
        self._parsed: dict[tuple, Any] = {}
        self._tag_counts: dict[str, int] | None = None
        self._identity_index: dict[str, list[etree._Element]] | None = None
        self._by_text: dict[str, list[etree._Element]] | None = None
        self._jsonld: list[tuple[frozenset[str], Any, bool]] | None = None

    def _texts(self) -> dict[etree._Element, str]:
        # same rule as select.node_text, bottom-up so each element is visited once
        out: dict[etree._Element, str] = {}
        for el in reversed(self.elements):
            if el.tag in _NON_CONTENT:
                out[el] = ""
                continue
            parts = [el.text or ""]
            for child in el:
                if isinstance(child.tag, str):
                    parts.append(out.get(child, ""))
                parts.append(child.tail or "")
            joined = " ".join(parts)
            # page-sized texts are never values or labels: skip re-normalising them at every ancestor
            out[el] = normalise_space(joined) if len(joined) <= _LONG_TEXT else joined
        return out

    def _hidden(self) -> set[etree._Element]:
        hidden: set[etree._Element] = set()
        for el in self.elements:
            parent = el.getparent()
            if parent is not None and parent in hidden or el.tag in _NON_CONTENT:
                hidden.add(el)
        return hidden

    def classes(self, el: etree._Element) -> tuple[str, ...]:
        """Stable class names of ``el`` (generated ones dropped)."""
        cached = self._classes.get(el)
        if cached is None:
            out = []
            for cls in (el.get("class") or "").split():
                unstable = self._unstable.get(cls)
                if unstable is None:
                    unstable = self._unstable[cls] = is_unstable_token(cls)
                if not unstable:
                    out.append(cls)
            cached = self._classes[el] = tuple(out)
        return cached

    def node_tokens(self, el: etree._Element) -> tuple[str, ...]:
        """What an ancestor contributes to a descendant's context: tag, stable classes/id, semantics."""
        cached = self._node_tokens.get(el)
        if cached is None:
            classes = self.classes(el)
            tokens = [
                f"t:{el.tag}",
                *(f"c:{c}" for c in classes),
                *(f"w:{w}" for c in classes for w in _words(c) if w not in _STOP),
            ]
            node_id = _stable_id(el)
            if node_id:
                tokens += [f"i:{node_id}", *(f"w:{w}" for w in _words(node_id) if w not in _STOP)]
            tokens += [f"a:{a}={v}" for a, v in _sem_attrs(el) if a != "aria-label"]
            if el.get("itemscope") is not None:
                tokens.append(f"s:{(el.get('itemtype') or '').rsplit('/', 1)[-1]}")
            cached = self._node_tokens[el] = tuple(tokens)
        return cached

    def context_words(self, el: etree._Element) -> frozenset[str]:
        """Words of the naming attributes of one element, for decoy/section keywords."""
        cached = self._context_words.get(el)
        if cached is None:
            text = " ".join(
                [el.get("class") or "", el.get("id") or ""]
                + [v for a, v in el.attrib.items() if a.startswith("data-") or a in ("aria-label", "role")]
            )
            cached = self._context_words[el] = frozenset(_words(text)) if text.strip() else frozenset()
        return cached

    def tag_count(self, tag: str) -> int:
        if self._tag_counts is None:
            counts: dict[str, int] = {}
            for el in self.elements:
                counts[el.tag] = counts.get(el.tag, 0) + 1
            self._tag_counts = counts
        return self._tag_counts.get(tag, 0)

    def identity(self, el: etree._Element) -> frozenset[str]:
        """Names that say which element this is within one snapshot: id, classes, naming attributes.
        Generated names count here (they are stable between two fetches of one build); utility classes
        (text-lg, mt-2) do not, they are shared by unrelated elements."""
        tokens = {f"c:{c}" for c in (el.get("class") or "").split() if not _UTILITY_CLASS.match(c)}
        if el.get("id"):
            tokens.add(f"i:{el.get('id').strip()}")
        tokens |= {f"a:{a}={v}" for a, v in _sem_attrs(el) if a in _STRONG_ANCHOR_ATTRS}
        return frozenset(tokens)

    def identity_index(self) -> dict[str, list[etree._Element]]:
        if self._identity_index is None:
            index: dict[str, list[etree._Element]] = {}
            for el in self.elements:
                if el not in self.hidden or el.tag == "meta":
                    for token in self.identity(el):
                        index.setdefault(token, []).append(el)
            self._identity_index = index
        return self._identity_index

    def pos(self, el: etree._Element) -> float:
        return self.index.get(el, 0) / max(1, len(self.elements))

    def by_text(self) -> dict[str, list[etree._Element]]:
        if self._by_text is None:
            index: dict[str, list[etree._Element]] = {}
            for el in self.elements:
                text = self.text[el]
                if text and len(text) <= MAX_STRING_TEXT and el not in self.hidden:
                    index.setdefault(text, []).append(el)
            self._by_text = index
        return self._by_text

    def parse(self, spec: _FieldSpec, raw: str) -> Any:
        """``spec.parse(raw)`` memoised per page (price parsing dominates on big pages), or _UNPARSEABLE."""
        self.deadline.check()
        if spec.numeric and spec.pattern is None and not spec.normalise:
            # number and price parse identically, integer adds a whole-number check: parse each text once
            number = self._parse_key(raw, "number", None, ())
            if spec.type != "integer" or number is _UNPARSEABLE:
                return number
            return int(number) if float(number).is_integer() else _UNPARSEABLE
        return self._parse_key(raw, spec.type, spec.pattern, spec.normalise)

    def _parse_key(self, raw: str, ftype: str, pattern: str | None, normalise: tuple[str, ...]) -> Any:
        key = (raw, ftype, pattern, normalise)
        if key not in self._parsed:
            try:
                self._parsed[key] = parse_value(raw, ftype, pattern, normalise, limits=self.limits)
            except ValueParseError:
                self._parsed[key] = _UNPARSEABLE
        return self._parsed[key]

    def sites(self) -> list[tuple[etree._Element, str, str]]:
        """(element, source, raw text) of every visible text and value attribute that could hold a value."""
        if self._sites is None:
            out: list[tuple[etree._Element, str, str]] = []
            limit = 2000  # longer texts are prose, not field values
            for el in self.elements:
                if el in self.hidden and el.tag != "meta":
                    continue
                if el.tag not in _NOT_CANDIDATE and el.tag != "meta":
                    text = self.text.get(el, "")
                    if text and len(text) <= limit:
                        out.append((el, "text", text))
                for attr in _VALUE_ATTRS:
                    value = el.get(attr)
                    if value and (attr != "content" or el.tag == "meta" or el.get("itemprop")):
                        out.append((el, f"attr:{attr}", normalise_space(value)))
            self._sites = out
        return self._sites

    def raw_value(self, el: etree._Element, src: str) -> str:
        if src == "text":
            return self.text.get(el, "")
        return normalise_space(el.get(src[5:], ""))

    # -- context ------------------------------------------------------------------------------------------

    def label(self, el: etree._Element) -> str:
        if el not in self._labels:
            self._labels[el] = _clean_label(self._find_label(el))
        return self._labels[el]

    def _find_label(self, el: etree._Element) -> str:
        for attr in ("aria-label", "title"):
            value = el.get(attr)
            if value and re.search(r"[A-Za-z]", value):
                return value
        ref = el.get("aria-labelledby")
        if ref:
            found = self.sel.root.xpath("//*[@id=$i]", i=ref.split()[0])
            if found:
                return self.text.get(found[0], "")
        if el.get("id"):
            found = self.sel.root.xpath("//label[@for=$i]", i=el.get("id"))
            if found:
                return self.text.get(found[0], "")
        cur = el
        for _ in range(3):
            found = self._adjacent_label(cur, cur is el)
            if found:
                return found
            parent = cur.getparent()
            if parent is None or parent.tag in ("body", "html"):
                break
            if self.text.get(parent) != self.text.get(cur):
                break  # the container holds other things: its neighbours label those, not this value
            cur = parent
        if el.tag == "td" or cur.tag == "td":
            return self.column_header(cur if cur.tag == "td" else el)
        return ""

    def _adjacent_label(self, el: etree._Element, own: bool) -> str:
        """Text right before ``el`` (a text node or short element), or a unit right after the value itself."""
        parent = el.getparent()
        if parent is None:
            return ""
        prev = el.getprevious()
        while prev is not None and not isinstance(prev.tag, str):
            prev = prev.getprevious()
        lead = (prev.tail if prev is not None else parent.text) or ""
        if _label_like(lead):
            return lead
        if prev is not None and prev.tag not in _NOT_LABEL:
            text = self.text.get(prev, "")
            if _label_like(text):
                return text
        if not own:
            return ""
        # "3 <span>beds</span>" / "3 beds": a short unit after the value (never another value, "Was $25")
        tail = el.tail or ""
        if _label_like(tail) and len(tail.split()) <= 2:
            return tail
        nxt = el.getnext()
        if nxt is not None and isinstance(nxt.tag, str) and prev is None and nxt.tag not in _NOT_LABEL:
            text = self.text.get(nxt, "")
            if _label_like(text) and len(text.split()) <= 2:
                return text
        return ""

    def column_header(self, td: etree._Element) -> str:
        row = td.getparent()
        if row is None:
            return ""
        col = [c for c in row if isinstance(c.tag, str)].index(td)
        table = row.getparent()
        while table is not None and table.tag != "table":
            table = table.getparent()
        if table is None:
            return ""
        for header_row in table.iter("tr"):
            cells = [c for c in header_row if isinstance(c.tag, str)]
            if cells and all(c.tag == "th" for c in cells) and header_row is not row:
                return self.text.get(cells[col], "") if col < len(cells) else ""
            break
        return ""

    def heading(self, el: etree._Element) -> str:
        """Text of the nearest section heading (h2-h6) above ``el``, or its section's aria-label."""
        cur = el
        for _ in range(12):
            parent = cur.getparent()
            if parent is None:
                return ""
            label = parent.get("aria-label")
            if label and parent.tag in ("section", "aside", "div", "ul", "ol", "nav", "article"):
                return label
            sib = cur.getprevious()
            for _ in range(6):
                if sib is None:
                    break
                if isinstance(sib.tag, str):
                    if sib.tag in _HEADINGS or sib.get("role") == "heading":
                        return self.text.get(sib, "")
                    # a wrapper holding nothing but a heading (<div class="head"><h2>..</h2></div>)
                    inner = next((h for h in sib.iter(*_HEADINGS)), None)
                    if inner is not None and self.text.get(inner) == self.text.get(sib):
                        return self.text.get(inner, "")
                sib = sib.getprevious()
            cur = parent
        return ""

    def is_card(self, el: etree._Element) -> bool:
        """Inside one of several look-alike siblings that link elsewhere (product/listing/article cards)."""
        cur = el
        for _ in range(6):
            parent = cur.getparent()
            if parent is None or parent.tag in ("body", "html"):
                return False
            if parent not in self._card:
                self._card[parent] = self._repeats_links(parent)
            if self._card[parent] and self._linked_lookalikes(parent).get(self._signature(cur), 0) >= 3:
                return True
            cur = parent
        return False

    def _signature(self, el: etree._Element) -> tuple[str, frozenset[str]]:
        return el.tag, frozenset(self.classes(el))

    def _linked_lookalikes(self, parent: etree._Element) -> dict[tuple[str, frozenset[str]], int]:
        """Per child signature, how many children of ``parent`` share it (when any of them holds a link)."""
        cached = self._lookalikes.get(parent)
        if cached is None:
            counts: dict[tuple[str, frozenset[str]], int] = {}
            linked: set[tuple[str, frozenset[str]]] = set()
            for child in parent:
                if isinstance(child.tag, str):
                    sig = self._signature(child)
                    counts[sig] = counts.get(sig, 0) + 1
                    if child.tag == "a" or child.find(".//a") is not None:
                        linked.add(sig)
            cached = self._lookalikes[parent] = {sig: n for sig, n in counts.items() if sig in linked}
        return cached

    @staticmethod
    def _repeats_links(parent: etree._Element) -> bool:
        children = [c for c in parent if isinstance(c.tag, str)]
        return (
            len(children) >= 3 and sum(1 for c in children if c.tag == "a" or c.find(".//a") is not None) >= 3
        )

    def flags(self, el: etree._Element) -> frozenset[str]:
        """Context of ``el``: strike (crossed out / was), related (recommendations), chrome, card."""
        cached = self._flags.get(el)
        if cached is None:
            cached = self._flags[el] = self._compute_flags(el)
        return cached

    def _compute_flags(self, el: etree._Element) -> frozenset[str]:
        flags: set[str] = set()
        for depth, node in enumerate([el, *el.iterancestors()]):
            tag = node.tag if isinstance(node.tag, str) else ""
            tokens = self.context_words(node)
            if depth <= 3 and (
                tag in _STRIKE_TAGS
                or tokens & _STRIKE_TOKENS
                or "line-through" in node.get("style", "").replace(" ", "")
            ):
                flags.add("strike")
            if tokens & _RELATED_TOKENS:
                flags.add("related")
            if (
                tag in ("nav", "footer")
                or node.get("role") in ("navigation", "contentinfo", "banner")
                or tokens & _CHROME_TOKENS
            ):
                flags.add("chrome")
            if tag == "header" and not any(a.tag in ("main", "article") for a in node.iterancestors()):
                flags.add("chrome")
        label = self.label(el)
        own = self.text.get(el, "")
        if (
            label
            and _STRIKE_LABEL.search(label)
            or len(own) <= 40
            and _STRIKE_LABEL.search(_clean_label(own))
        ):
            flags.add("strike")
        heading = self.heading(el)
        if heading and _RELATED_HEADING.search(heading):
            flags.add("related")
        if self.is_card(el):
            flags.add("card")
        if self.in_link_list(el):
            flags.add("chrome")
        return frozenset(flags)

    def in_link_list(self, el: etree._Element) -> bool:
        """Inside a list whose items are bare links: breadcrumbs, menus, tag lists."""
        item = next((n for n in (el, *islice(el.iterancestors(), 3)) if n.tag == "li"), None)
        if item is None or len(self.text.get(item, "")) > 60:
            return False
        parent = item.getparent()
        if parent is None:
            return False
        if parent not in self._bare_links:
            self._bare_links[parent] = sum(1 for li in parent if li.tag == "li" and self._bare_link(li))
        own = self._bare_link(item)
        links = self._bare_links[parent] - own
        # the current page's own crumb is often plain text after the links
        return links >= 2 or (links >= 1 and own)

    def _bare_link(self, item: etree._Element) -> bool:
        text = self.text.get(item, "")
        return bool(text) and any(self.text.get(a) == text for a in item.iter("a"))

    def fingerprint(self, el: etree._Element, src: str) -> _Fp:
        key = (el, src)
        if key not in self._fp:
            self._fp[key] = self._fingerprint(el, src)
        return self._fp[key]

    def _fingerprint(self, el: etree._Element, src: str) -> _Fp:
        classes = frozenset(self.classes(el))
        stable_id = _stable_id(el)
        sem = _sem_attrs(el)
        names = " ".join(
            [*classes, stable_id or "", *(v for a, v in sem if a != "aria-label" or len(v) < 30)]
        )
        anc: dict[str, float] = {}
        for depth, node in enumerate(el.iterancestors()):
            if depth >= 7 or node.tag == "html":
                break
            weight = 1.0 / (1.0 + 0.35 * depth)
            for token in self.node_tokens(node):
                if anc.get(token, 0.0) < weight:
                    anc[token] = weight
        sib: set[str] = set()
        for other in (el.getprevious(), el.getnext()):
            if other is not None and isinstance(other.tag, str):
                sib.add(f"t:{other.tag}")
                sib.update(f"c:{c}" for c in self.classes(other))
                text = self.text.get(other, "")
                if len(text) <= 30:
                    sib.update(f"w:{w}" for w in _content_words(text))
        label = self.label(el) if src == "text" else ""
        return _Fp(
            tag=el.tag,
            family=_TAG_FAMILY.get(el.tag, el.tag),
            src=src,
            id=stable_id,
            classes=classes,
            class_tokens=_class_words(el.get("class") or ""),
            sem=sem,
            name_tokens=_content_words(names),
            label=label,
            anc=anc,
            sib=frozenset(sib),
            pos=self.pos(el),
            tag_rare=el.tag in _SEMANTIC_TAGS and self.tag_count(el.tag) <= 2,
        )

    def jsonld(self) -> list[tuple[frozenset[str], Any, bool]]:
        """(key words, scalar, inside a related/list branch) for every JSON-LD scalar on the page."""
        if self._jsonld is None:
            out: list[tuple[frozenset[str], Any, bool]] = []
            for script in self.sel.root.xpath('//script[contains(@type, "ld+json")]'):
                raw = (script.text or "").strip()
                raw = re.sub(r"^\s*(<!--|//<!\[CDATA\[)|(-->|//\]\]>)\s*$", "", raw)
                try:
                    doc = json.loads(raw)
                except (ValueError, RecursionError):  # deeper than json will nest: no evidence
                    continue
                _walk_jsonld(doc, (), False, out)
            self._jsonld = out
        return self._jsonld


_RELATED_JSONLD_KEYS = frozenset(
    "isRelatedTo isSimilarTo relatedLink itemListElement isAccessoryOrSparePartFor recommendations hasPart".split()
)


def _walk_jsonld(node: Any, path: tuple[str, ...], related: bool, out: list) -> None:
    """Leaves of a JSON-LD document in order, with the last keys above them (a loop: JSON nests deep)."""
    stack: list[tuple[Any, tuple[str, ...], bool]] = [(node, path, related)]
    while stack:
        node, path, related = stack.pop()
        if isinstance(node, dict):
            stack.extend((value, (*path[-2:], key), related or key in _RELATED_JSONLD_KEYS)
                         for key, value in reversed(list(node.items())))
        elif isinstance(node, list):
            stack.extend((item, path, related) for item in reversed(node))
        elif node is not None:
            if path and path[-1].startswith("@") and path[-1] != "@value":
                continue
            out.append((frozenset(w for k in path for w in _words(k)), node, related))


def _label_like(text: str) -> bool:
    # a neighbour carrying digits is another value ("Parking: 3 spaces"), not a label
    text = text.strip()
    return (
        0 < len(text) <= 40
        and re.search(r"[A-Za-z]{2,}", text) is not None
        and not any(c.isdigit() for c in text)
        and len(text.split()) <= 5
    )


def _clean_label(text: str) -> str:
    text = re.sub(r"[\d$€£¥₹%]+", " ", text or "")
    text = re.sub(r"[^\w\s]+", " ", text)
    return normalise_space(text).lower()[:60]


def _trigrams(text: str) -> frozenset[str]:
    padded = f"  {text} "
    return frozenset(padded[i : i + 3] for i in range(len(padded) - 2))


def _jaccard(a: frozenset | set, b: frozenset | set) -> float:
    if not a and not b:
        return 0.0
    return len(a & b) / len(a | b)


def _weighted_jaccard(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    keys = a.keys() | b.keys()
    if not keys:
        return 0.0
    top = sum(min(a.get(k, 0.0), b.get(k, 0.0)) for k in keys)
    bottom = sum(max(a.get(k, 0.0), b.get(k, 0.0)) for k in keys)
    return top / bottom if bottom else 0.0


def _word_match(x: str, y: str) -> bool:
    """Same word, a synonym, or the same stem ("serves"/"servings", "bed"/"bedroom")."""
    if x == y or y in _SYNONYM_OF.get(x, ()):
        return True
    short, long_ = (x, y) if len(x) <= len(y) else (y, x)
    if len(short) < 3:
        return False
    common = 0
    for cx, cy in zip(short, long_):
        if cx != cy:
            break
        common += 1
    return common == len(short) or (common >= 4 and common >= 0.6 * len(short))


def _matched(words: Iterable[str], others: Iterable[str]) -> set[str]:
    others = tuple(others)
    return {w for w in words if any(_word_match(w, o) for o in others)}


def _label_similarity(a: str, b: str) -> float:
    if not a or not b:
        return 0.0
    if a == b:
        return 1.0
    wa, wb = _content_words(a), _content_words(b)
    words = 0.0
    if wa and wb:
        words = (len(_matched(wa, wb)) + len(_matched(wb, wa))) / (len(wa) + len(wb))
    # characters only vouch for near-identical spellings ("Sq.ft" / "Sq ft"): "bathrooms" and "bedrooms"
    # share most trigrams and name different things
    chars = _jaccard(_trigrams(a), _trigrams(b))
    return max(words, chars if chars >= 0.6 else 0.0)


def _similarity(a: _Fp, b: _Fp) -> float:
    """Fingerprint similarity in [0, 1]; components absent on both sides do not count."""
    num = den = 0.0

    def add(weight: float, value: float) -> None:
        nonlocal num, den
        num += weight * value
        den += weight

    add(1.0, 1.0 if a.tag == b.tag else 0.6 if a.family == b.family else 0.0)
    if a.tag_rare or b.tag_rare:
        add(1.5, 1.0 if a.tag == b.tag else 0.0)
    # names count only when both sides have one: a hashed or missing name is unknown, not different
    if (a.classes or a.class_tokens) and (b.classes or b.class_tokens):
        add(1.5, 0.5 * _jaccard(a.classes, b.classes) + 0.5 * _jaccard(a.class_tokens, b.class_tokens))
    if a.id and b.id:
        add(1.0, 1.0 if a.id == b.id else _jaccard(frozenset(_words(a.id)), frozenset(_words(b.id))))
    if a.sem and b.sem:
        add(2.0, _jaccard(a.sem, b.sem))
    if a.label or b.label:
        add(2.0, _label_similarity(a.label, b.label))
    add(1.5, _weighted_jaccard(a.anc, b.anc))
    if a.sib or b.sib:
        add(1.0, _jaccard(a.sib, b.sib))
    add(0.5, max(0.0, 1.0 - 2.0 * abs(a.pos - b.pos)))
    add(0.5, 1.0 if a.src == b.src else 0.0)
    return num / den if den else 0.0


# -- locating the old element -----------------------------------------------------------------------------

_CSS_SOURCE = re.compile(r"::(text|attr\(\s*([^)\s]+)\s*\))\s*$")
_XPATH_SOURCE = re.compile(r"/(text\(\)|@([\w:.-]+))\s*$")


def _split_selector(selector: str) -> tuple[str, str]:
    """(element selector, value source): source is "text" or "attr:<name>"."""
    selector = selector.strip()
    if is_xpath(selector):
        match = _XPATH_SOURCE.search(selector)
    else:
        match = _CSS_SOURCE.search(selector)
    if not match:
        return selector, "text"
    element = selector[: match.start()].rstrip() or "*"
    return element, f"attr:{match.group(2)}" if match.group(2) else "text"


def _select_elements(page: _Page, selector: str, *, own: bool = False) -> list[etree._Element]:
    """Elements ``selector`` matches; a selector over the cost limit raises for the contract's ``own``
    selector (the field is refused, naming the limit) and matches nothing for one the healer made up."""
    try:
        nodes = select(page.sel, selector, page.budget)
    except (SelectorError, ValueError, etree.XPathError):
        return []
    except LimitExceeded:
        if own:
            raise
        return []
    return [n.root for n in nodes if isinstance(getattr(n.root, "tag", None), str)]


def _locate_targets(page: _Page, spec: _FieldSpec) -> tuple[list[tuple[etree._Element, str]], str]:
    """The element(s) the old selector read the last accepted value from on the last good page."""
    element_sel, src = _split_selector(spec.selector)
    matched = _select_elements(page, element_sel, own=True)
    if spec.before is None:
        return [(el, src) for el in matched[:3]], "old_selector" if matched else "none"
    good = [
        (el, src) for el in matched if _same_value(page.parse(spec, page.raw_value(el, src)), spec.before)
    ]
    if good:
        return good[:3], "old_selector"
    # the old selector no longer describes the last good page: find the value itself
    found = _innermost(
        [(el, csrc) for el, csrc, _, _ in _value_sources(page, spec, lambda v: _same_value(v, spec.before))]
    )
    if 0 < len(found) <= 3:
        return found, "value_search"
    return [], "ambiguous" if found else "none"


def _aliases(
    page: _Page, spec: _FieldSpec, targets: list[tuple[etree._Element, str]], old_raw: str
) -> list[tuple[etree._Element, str]]:
    """Other places of the last good page showing the same specific value (the visible twin of a meta tag)."""
    if spec.before is None or not targets:
        return []
    found = _innermost(
        [
            (el, src)
            for el, src, raw, _ in _value_sources(page, spec, lambda v: _same_value(v, spec.before), old_raw)
            if _specificity(spec, raw) >= 0.85
        ]
    )
    out = [
        (el, src)
        for el, src in found
        if not any(_related(el, t) for t, _ in targets)
        and not page.flags(el) & {"strike", "related", "card", "chrome"}
    ]
    return out[:2] if len(out) <= 2 else []


def _innermost(items: list[tuple[etree._Element, str]]) -> list[tuple[etree._Element, str]]:
    elements = {el for el, _ in items}
    return [
        (el, src)
        for el, src in items
        if src != "text" or not any(d in elements for d in el.iterdescendants())
    ]


# -- candidates -------------------------------------------------------------------------------------------


def _value_sources(
    page: _Page, spec: _FieldSpec, accept, old_raw: str = ""
) -> Iterator[tuple[etree._Element, str, str, Any]]:
    """(element, source, raw text, typed value) for every place on the page that holds a valid value."""
    _, old_src = _split_selector(spec.selector)
    key = (
        spec.type,
        spec.pattern,
        spec.normalise,
        old_src,
        len(_NUMBER_TOKEN.findall(old_raw)),
        len(_LETTER_WORD.findall(old_raw)),
        bool(_CURRENCY.search(old_raw)),
        old_raw.strip().isdigit(),
        len(str(spec.before or "")),
    )
    if key not in page.scan_cache:
        page.scan_cache[key] = list(_scan_values(page, spec, old_src, old_raw))
    return ((el, src, raw, value) for el, src, raw, value in page.scan_cache[key] if accept(value))


def _scan_values(
    page: _Page, spec: _FieldSpec, old_src: str, old_raw: str
) -> Iterator[tuple[etree._Element, str, str, Any]]:
    old_attr = old_src[5:] if old_src.startswith("attr:") else None
    allowed_numbers = max(1, len(_NUMBER_TOKEN.findall(old_raw)))
    allowed_words = max(4, len(_LETTER_WORD.findall(old_raw)) + 2)
    old_has_currency = bool(_CURRENCY.search(old_raw))
    bare = spec.bare
    max_string = max(MAX_STRING_TEXT, 2 * len(str(spec.before or "")))
    sites = page.sites()
    if old_attr and old_attr not in _VALUE_ATTRS:
        sites = sites + [
            (el, old_src, normalise_space(el.get(old_attr) or ""))
            for el in page.elements
            if el.get(old_attr) and (el not in page.hidden or el.tag == "meta")
        ]
    for el, src, raw in sites:
        if spec.numeric:
            if len(raw) > (MAX_NUMERIC_TEXT if spec.pattern is None else max_string) or not _DIGIT.search(
                raw
            ):
                continue
            if spec.pattern is None:
                key = (raw, spec.type, allowed_numbers, allowed_words)
                ok = page.shape_cache.get(key)
                if ok is None:
                    ok = page.shape_cache[key] = _number_like(
                        page, spec, raw, allowed_numbers, allowed_words, bare
                    )
                if not ok:
                    continue
            if spec.type != "price" and not old_has_currency and _CURRENCY.search(raw):
                continue  # a count never reads "£103.00"
            if spec.type == "price" and old_has_currency and not _currency_near(page, el, raw):
                continue  # a price that lost its currency is more likely a count ("Tickets left: 142")
        elif spec.type == "boolean":
            if len(raw) > 30 or raw.isdigit() and not old_raw.strip().isdigit():
                continue  # "1" is a count far more often than a yes
        elif len(raw) > max_string or not _ALNUM.search(raw):
            continue  # "·" separators and icons are not values
        value = page.parse(spec, raw)
        if value is not _UNPARSEABLE:
            yield el, src, raw, value


def _currency_near(page: _Page, el: etree._Element, raw: str) -> bool:
    """A currency in the text itself or right beside it (<span>$</span><span>19.99</span>)."""
    if _CURRENCY.search(raw):
        return True
    parent = el.getparent()
    if parent is None:
        return False
    rest = page.text.get(parent, "").replace(raw, "", 1).strip()
    return len(rest) <= 4 and bool(_CURRENCY.search(rest))


def _number_like(
    page: _Page,
    spec: _FieldSpec,
    raw: str,
    allowed_numbers: int,
    allowed_words: int,
    bare: _FieldSpec | None = None,
) -> bool:
    """Text that states one number (plus a label or unit), as opposed to text that merely contains digits.

    price-parser is lenient by design ("Desk X681" -> 681, "January 4, 2023" -> 4.2023), so a candidate is
    only a number when its number stands alone, is the one the parser read, and the text around it is short.
    """
    if _GLUED_NUMBER.search(raw):
        return False  # model numbers and codes: "X681", "H2O"
    tokens = _NUMBER_TOKEN.findall(raw)
    if not tokens:
        return False
    if len(tokens) > allowed_numbers and not (len(tokens) == 2 and _RATING_SCALE.search(raw)):
        return False  # "3 beds · 2 baths": which number is meant would be a guess
    if len(_LETTER_WORD.findall(raw)) > allowed_words:
        return False
    whole = page.parse(spec, raw)
    if whole is _UNPARSEABLE:
        return False
    alone = whole if tokens[0] == raw else page.parse(bare or spec.bare, tokens[0])
    return alone is not _UNPARSEABLE and whole is not _UNPARSEABLE and _same_value(abs(alone), abs(whole))


@dataclass
class _Candidate:
    el: etree._Element
    src: str
    raw: str
    value: Any
    fp: _Fp | None = None
    slot: etree._Element | None = None
    parts: dict[str, float] = field(default_factory=dict)
    score: float = 0.0
    decoy: str | None = None


def _slot_of(page: _Page, el: etree._Element, src: str) -> etree._Element:
    """Outermost ancestor carrying the same text: wrappers around one value are one place, not rivals."""
    if src != "text":
        return el
    text = page.text[el]
    cur = el
    parent = cur.getparent()
    while parent is not None and parent.tag not in ("body", "html") and page.text.get(parent) == text:
        cur = parent
        parent = cur.getparent()
    return cur


def _related(a: etree._Element, b: etree._Element) -> bool:
    if a is b:
        return True
    return any(x is b for x in a.iterancestors()) or any(x is a for x in b.iterancestors())


# -- scoring ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Context:
    spec: _FieldSpec
    targets: tuple[_Fp, ...]
    target_elements: tuple[etree._Element, ...]
    target_raw: str
    field_words: frozenset[str]  # field name words, synonym-expanded
    field_head: frozenset[str]  # the word that says what the field is ("price" in ticket_price), expanded
    anchor_words: frozenset[str]  # field words plus the old element's own naming
    old_matches: frozenset[etree._Element]
    target_flags: frozenset[str]
    before: _Page
    after: _Page
    aliases: tuple[_Fp, ...] = ()  # same value elsewhere on the last good page: weaker targets
    alias_elements: tuple[etree._Element, ...] = ()
    target_identity: frozenset[str] = frozenset()


def _value_score(spec: _FieldSpec, value: Any, raw: str) -> float:
    """Proximity to the last accepted value, discounted for values that match by coincidence."""
    before = spec.before
    if before is None:
        return 0.0
    if spec.type == "boolean":
        return 0.5 if _same_value(value, before) else 0.15
    if spec.numeric:
        if not isinstance(before, (int, float)):
            return 0.0
        if _same_value(value, before):
            return _specificity(spec, raw)
        change = _relative_change(value, before) * 100.0
        return max(0.0, 0.7 * (1.0 - change / max(spec.change_pct, 1e-9))) * _specificity(spec, raw)
    if value == before:
        return _specificity(spec, raw)
    if isinstance(value, str) and value.lower() == str(before).lower():
        return 0.85 * _specificity(spec, raw)
    sim = _jaccard(_trigrams(str(value).lower()), _trigrams(str(before).lower()))
    return 0.6 * sim if sim >= 0.5 else 0.0


def _specificity(spec: _FieldSpec, raw: str) -> float:
    """How little a match says by coincidence: "3" is on every page, "1,299.00" or a long title is not."""
    if spec.numeric:
        token = _NUMBER_TOKEN.search(raw)
        digits = sum(c.isdigit() for c in re.sub(r"[.,]0+$", "", token.group(0) if token else raw))
        return (0.5, 0.5, 0.7, 0.85)[digits] if digits < 4 else 1.0
    length = len(raw)
    if length >= 5 and any(c.isdigit() for c in raw) and any(c.isalpha() for c in raw):
        return 1.0  # codes such as "LMP-204" are as specific as long text
    return 0.5 if length < 4 else 0.75 if length < 8 else 1.0


def _anchor_score(ctx: _Context, fp: _Fp) -> float:
    for target in ctx.targets:
        shared = {a for a, _ in fp.sem & target.sem} & _STRONG_ANCHOR_ATTRS
        if shared:
            return 1.0
        if fp.id and fp.id == target.id:
            return 1.0
    best = 0.0
    for attr, value in fp.sem:
        if attr in ("role", "headers", "for"):
            continue
        words = _content_words(value)
        hits = _matched(words, ctx.anchor_words)
        if hits:
            best = max(best, (0.85 if attr != "aria-label" else 0.6) * (0.6 + 0.4 * len(hits) / len(words)))
    words = fp.class_tokens | _content_words(fp.id or "")
    hits = _matched(words, ctx.anchor_words)
    if hits:
        best = max(best, 0.6 * (0.5 + 0.5 * len(hits) / len(words)))
    return best


def _full_label(fp: _Fp, raw: str, numeric: bool) -> str:
    """Context label plus the words inside a numeric text ("3 beds", "Parking: 1"). A text that starts with
    its own label ("Parking 1 space") is labelled by that, not by whatever precedes it."""
    if not numeric:
        return fp.label
    inline = _clean_label(raw)
    if not inline or len(inline) > 30:
        return fp.label
    token = _NUMBER_TOKEN.search(raw)
    if token and _LETTER_WORD.search(raw[: token.start()]):
        return inline
    return f"{fp.label} {inline}".strip()


def _label_score(ctx: _Context, fp: _Fp, raw: str) -> float:
    label = _full_label(fp, raw, ctx.spec.numeric)
    if not label:
        return 0.0
    best = 0.0
    for target in ctx.targets:
        target_label = _full_label(target, ctx.target_raw, ctx.spec.numeric)
        if target_label:
            best = max(best, _label_similarity(label, target_label))
    words = _content_words(label)
    if words:
        hits = _matched(words, ctx.field_head)
        if hits:
            best = max(best, 0.5 + 0.5 * len(hits) / len(words))
        elif _matched(words, ctx.field_words):
            best = max(best, 0.3)  # only a modifier matches: "Tickets left" for ticket_price
    return best


def _head_words(name: str) -> tuple[str, ...]:
    """The noun a field name is about: its last word, skipping generic ones (review_count -> review)."""
    words = [w for w in _words(name.replace("_", " ")) if w not in _STOP]
    while len(words) > 1 and words[-1] in _GENERIC_HEADS:
        words.pop()
    return tuple(words[-1:])


def _label_conflict(ctx: _Context, fp: _Fp, raw: str) -> float:
    """1.0 when the candidate is labelled, the old element was labelled, and the labels name different
    things ("Living area" where "Year built" was): a name that differs is evidence against."""
    words = _content_words(_full_label(fp, raw, ctx.spec.numeric))
    if not words or _matched(words, ctx.field_words):
        return 0.0
    labels = [_full_label(t, ctx.target_raw, ctx.spec.numeric) for t in ctx.targets]
    labels = [label for label in labels if _content_words(label)]
    if not labels:
        return 0.0
    label = " ".join(sorted(words))
    return 1.0 if all(_label_similarity(label, other) < 0.15 for other in labels) else 0.0


def _jsonld_score(ctx: _Context, value: Any) -> float:
    score = 0.0
    mismatch = False
    for words, scalar, related in ctx.after.jsonld():
        if related:
            continue
        keyed = bool(_expand(words) & ctx.field_words)
        try:
            typed = ctx.spec.parse(str(scalar)) if not isinstance(scalar, bool) else scalar
        except ValueParseError:
            continue
        if _same_value(typed, value):
            score = max(score, 1.0 if keyed else 0.3)
        elif keyed:
            mismatch = True
    if score == 0.0 and mismatch:
        return -0.5
    return score


def _score_cheap(ctx: _Context, cand: _Candidate) -> None:
    """Evidence that needs only the candidate's own fingerprint: structure, anchors, label, value."""
    fp = cand.fp
    struct = max((_similarity(fp, t) for t in ctx.targets), default=0.0)
    struct = max([struct, *(ALIAS_DISCOUNT * _similarity(fp, a) for a in ctx.aliases)])
    cand.parts = {
        "fingerprint": round(_W_STRUCT * struct, 4),
        "anchor": round(_W_ANCHOR * _anchor_score(ctx, fp), 4),
        "label": round(_W_LABEL * _label_score(ctx, fp, cand.raw), 4),
        "label_conflict": round(-_P_LABEL * _label_conflict(ctx, fp, cand.raw), 4),
        "value": round(_W_VALUE * _value_score(ctx.spec, cand.value, cand.raw), 4),
    }
    cand.score = sum(cand.parts.values())


def _score_context(ctx: _Context, cand: _Candidate) -> None:
    """Costlier evidence, for the shortlist: JSON-LD, old-selector locality, look-alikes, page context."""
    flags = ctx.after.flags(cand.el)
    oldsel = 1.0 if cand.el in ctx.old_matches else 0.5 * _locality(cand.el, ctx.old_matches)
    struct = cand.parts["fingerprint"] / _W_STRUCT
    cand.parts.update(
        {
            "jsonld": round(_W_JSONLD * _jsonld_score(ctx, cand.value), 4),
            "old_selector": round(_W_OLDSEL * oldsel, 4),
            "distractor": round(-_P_DISTRACTOR * _distractor(ctx, cand, struct), 4),
            "identity": round(-_P_IDENTITY * _identity_conflict(ctx, cand), 4),
            "chrome": -_P_CHROME if "chrome" in flags and "chrome" not in ctx.target_flags else 0.0,
            "card": -_P_CARD if "card" in flags and "card" not in ctx.target_flags else 0.0,
        }
    )
    cand.score = sum(cand.parts.values())


def _prefilter_key(ctx: _Context, cand: _Candidate) -> float:
    """Cheap ordering used only to cap how many candidates get a full fingerprint on huge pages."""
    before = ctx.spec.before
    if ctx.spec.numeric or ctx.spec.type == "boolean" or before is None:
        key = _value_score(ctx.spec, cand.value, cand.raw)
    elif cand.value == before:
        key = 1.0
    else:
        ratio = len(str(cand.value)) / max(1, len(str(before)))
        key = _value_score(ctx.spec, cand.value, cand.raw) if 0.6 <= ratio <= 1.7 else 0.0
    el = cand.el
    for target in ctx.targets:
        key += 0.5 if el.tag == target.tag else 0.25 if _TAG_FAMILY.get(el.tag) == target.family else 0.0
        if target.classes and target.classes & set(ctx.after.classes(el)):
            key += 0.5
        break
    names = " ".join(
        [
            el.get("class") or "",
            el.get("id") or "",
            *(v for a, v in el.attrib.items() if a in _SEMANTIC_ATTRS or a.startswith("data-")),
        ]
    )
    if names.strip() and _matched(_content_words(names), ctx.anchor_words):
        key += 0.5
    return key


def _locality(el: etree._Element, anchors: frozenset[etree._Element]) -> float:
    """Closeness in the tree to where the old selector still points (values move next door, not far)."""
    if not anchors or len(anchors) > 6:
        return 0.0
    chain = [el, *el.iterancestors()]
    position = {node: i for i, node in enumerate(chain)}
    best = 0.0
    for anchor in anchors:
        up = 0
        node = anchor
        while node is not None and node not in position:
            node = node.getparent()
            up += 1
        if node is None:
            continue
        distance = up + position[node]
        best = max(best, 1.0 - distance / 8.0)
    return max(0.0, best)


def _distractor(ctx: _Context, cand: _Candidate, struct: float) -> float:
    """How much better the candidate matches a NON-target element of the old page with the same text."""
    if cand.src != "text" or not ctx.targets:
        return 0.0
    worst = 0.0
    for other in ctx.before.by_text().get(cand.raw, ())[:8]:
        if any(_related(other, t) for t in (*ctx.target_elements, *ctx.alias_elements)):
            continue
        sim = _similarity(cand.fp, ctx.before.fingerprint(other, "text"))
        worst = max(worst, sim - struct)
    return max(0.0, worst - 0.05)


def _identity_conflict(ctx: _Context, cand: _Candidate) -> float:
    """1.0 when the candidate carries a strong name (id, data-testid, itemprop) that on the last good page
    belonged to another element than the field's; 0.5 for a class name; 0 otherwise. Wrappers holding the
    same text count as the candidate (a data-testid on the inner div names the outer one's value too)."""
    known = ctx.target_identity
    index = ctx.before.identity_index()
    own = (*ctx.target_elements, *ctx.alias_elements)
    names: set[str] = set()
    for node in _slot_chain(ctx.after, cand):
        names |= ctx.after.identity(node)
    worst = 0.0
    for token in names - known:
        others = index.get(token)
        # a name on many elements (a shared "stars" class) says what kind of thing, not which one
        if not others or len(others) > 3 or any(_related(o, t) for o in others for t in own):
            continue
        worst = max(worst, 0.5 if token.startswith("c:") else 1.0)
    return worst


def _slot_chain(page: _Page, cand: _Candidate) -> list[etree._Element]:
    """The slot's elements holding exactly the candidate's text, outermost wrapper down to the innermost."""
    if cand.src != "text" or cand.slot is None:
        return [cand.el]
    text = page.text.get(cand.el)
    chain = [cand.slot]
    cur = cand.slot
    while True:
        inner = [c for c in cur if isinstance(c.tag, str) and page.text.get(c) == text]
        if len(inner) != 1:
            return chain
        cur = inner[0]
        chain.append(cur)


def _holder(page: _Page, el: etree._Element, raw: str, numeric: bool) -> etree._Element:
    """The innermost descendant that actually carries the value ("Price: <del>$25</del>" -> the del)."""
    token = _NUMBER_TOKEN.search(raw) if numeric else None
    needle = token.group(0) if token else raw
    cur = el
    while True:
        inner = [c for c in cur if isinstance(c.tag, str) and needle in page.text.get(c, "")]
        if len(inner) != 1:
            return cur
        cur = inner[0]


def _decoy_reason(ctx: _Context, el: etree._Element, raw: str = "") -> str | None:
    flags = ctx.after.flags(el)
    if raw and len(el):
        flags = flags | ctx.after.flags(_holder(ctx.after, el, raw, ctx.spec.numeric))
    if "strike" in flags and "strike" not in ctx.target_flags:
        return "crossed-out or previous value"
    if "related" in flags and "related" not in ctx.target_flags:
        return "related/recommended item"
    if "card" in flags and "card" not in ctx.target_flags:
        return "another item's card in a repeated list"
    return None


# -- selector building ------------------------------------------------------------------------------------


def _css_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _xpath_string(value: str) -> str | None:
    if '"' not in value:
        return f'"{value}"'
    if "'" not in value:
        return f"'{value}'"
    return None


def _meaningful(cls: str) -> bool:
    return not _UTILITY_CLASS.match(cls) and bool(_content_words(cls) or len(cls) >= 4)


def _simple_forms(el: etree._Element, value_text: str) -> list[str]:
    """Single-step CSS for one element, most stable first."""
    forms: list[str] = []
    tag = el.tag
    stable_id = _stable_id(el)
    if stable_id:
        forms.append(f"#{stable_id}")
    digits = set(re.findall(r"\d+", value_text))
    for attr, value in sorted(_sem_attrs(el), key=lambda av: _attr_rank(av[0])):
        if attr in ("for", "headers") or (digits and set(re.findall(r"\d+", value)) & digits):
            continue
        if attr == "aria-label" and len(value) > 40:
            continue
        forms.append(f"{tag}[{attr}={_css_string(value)}]")
        forms.append(f"[{attr}={_css_string(value)}]")
    classes = [c for c in _stable_classes(el) if re.fullmatch(r"-?[A-Za-z_][\w-]*", c)]
    good = [c for c in classes if _meaningful(c)]
    for cls in good:
        forms.append(f"{tag}.{cls}")
        forms.append(f".{cls}")
    if len(good) >= 2:
        forms.append(f"{tag}." + ".".join(good[:2]))
    if tag in ("h1", "time", "address", "title", "main", "article"):
        forms.append(tag)
    for cls in classes:
        if cls not in good:
            forms.append(f"{tag}.{cls}")
    return list(dict.fromkeys(forms))


def _attr_rank(attr: str) -> int:
    order = ("itemprop", "data-testid", "data-test", "data-qa", "data-cy", "data-field", "property", "name")
    return order.index(attr) if attr in order else len(order) + (attr == "aria-label") + (attr == "role") * 2


def _anchor_forms(el: etree._Element) -> list[str]:
    forms: list[str] = []
    stable_id = _stable_id(el)
    if stable_id:
        forms.append(f"#{stable_id}")
    for attr, value in sorted(_sem_attrs(el), key=lambda av: _attr_rank(av[0])):
        if attr in ("for", "headers") or attr == "aria-label" and len(value) > 40:
            continue
        forms.append(f"[{attr}={_css_string(value)}]")
    if el.get("itemscope") is not None and el.get("itemtype") and _stable_attr_value(el.get("itemtype")):
        forms.append(f"[itemtype={_css_string(el.get('itemtype'))}]")
    forms += [
        f"{el.tag}.{c}"
        for c in _stable_classes(el)
        if _meaningful(c) and re.fullmatch(r"-?[A-Za-z_][\w-]*", c)
    ]
    if el.tag in ("main", "article", "aside", "header", "footer", "nav"):
        forms.append(el.tag)
    return forms


def _selector_candidates(page: _Page, el: etree._Element, src: str, raw: str) -> Iterator[tuple[str, str]]:
    """(selector, kind) in order of preference; the caller verifies each."""
    suffix = f"::attr({src[5:]})" if src.startswith("attr:") else ""
    own = _simple_forms(el, raw)
    for form in own:
        yield form + suffix, "attribute" if "[" in form or "#" in form else "class"
    ancestors = [a for a in el.iterancestors() if a.tag not in ("html",)][:8]
    for anc in ancestors:
        for anchor in _anchor_forms(anc):
            for form in own or [el.tag]:
                yield f"{anchor} {form}{suffix}", "anchored"
            if not own:
                continue
            yield f"{anchor} {el.tag}{suffix}", "anchored"
    if src == "text":
        yield from ((s, "label") for s in _label_xpaths(page, el))
    prev = el.getprevious()
    while prev is not None and not isinstance(prev.tag, str):
        prev = prev.getprevious()
    if prev is not None:
        for anchor in _anchor_forms(prev) + (
            [prev.tag] if prev.tag in ("h1", "h2", "h3", "label", "dt", "th") else []
        ):
            yield f"{anchor} + {el.tag}{suffix}", "sibling"
    for anc in ancestors:
        for anchor in _anchor_forms(anc):
            yield f"{anchor} {el.tag}{suffix}", "anchored"
    yield from ((s + suffix, "positional") for s in _positional(el, ancestors))


def _label_xpaths(page: _Page, el: etree._Element) -> Iterator[str]:
    """Selectors anchored on the text that labels ``el``: the element or text node before it, or the
    column header of its table cell."""
    if el.tag == "td":
        header = page.column_header(el)
        literal = _xpath_string(header) if _label_like(header) else None
        if literal:
            th = f"th[normalize-space(.)={literal}]"
            yield (
                f"//table[.//{th}]//td[count(preceding-sibling::*) = "
                f"count(ancestor::table[1]//{th}/preceding-sibling::*)]"
            )
    cur = el
    for _ in range(3):
        prev = cur.getprevious()
        while prev is not None and not isinstance(prev.tag, str):
            prev = prev.getprevious()
        if prev is not None:
            text = page.text.get(prev, "")
            literal = _xpath_string(text)
            if literal and _label_like(text):
                tail = f"/following-sibling::{cur.tag}[1]"
                down = "" if cur is el else _descend(cur, el)
                if down is not None:
                    yield f"//{prev.tag}[normalize-space(.)={literal}]{tail}{down}"
        parent = cur.getparent()
        lead = (prev.tail if prev is not None else parent.text if parent is not None else "") or ""
        lead = normalise_space(lead)
        literal = _xpath_string(lead)
        if parent is not None and literal and _label_like(lead):
            down = "" if cur is el else _descend(cur, el)
            if down is not None:
                yield (f"//{parent.tag}[text()[normalize-space(.)={literal}]]/{cur.tag}{down}")
        if parent is None or page.text.get(parent) != page.text.get(cur):
            break
        cur = parent


def _descend(top: etree._Element, el: etree._Element) -> str | None:
    steps: list[str] = []
    cur = el
    while cur is not top:
        parent = cur.getparent()
        if parent is None:
            return None
        same = [c for c in parent if c.tag == cur.tag]
        if len(same) != 1:
            return None
        steps.append(cur.tag)
        cur = parent
    return "".join(f"/{s}" for s in reversed(steps))


def _positional(el: etree._Element, ancestors: list[etree._Element]) -> Iterator[str]:
    """Last resort: a stable ancestor plus at most two nth-of-type steps."""
    for depth, anc in enumerate(ancestors[:3]):
        anchors = _anchor_forms(anc)
        if not anchors:
            continue
        chain: list[etree._Element] = [el]
        cur = el
        for _ in range(depth):
            cur = cur.getparent()
            chain.append(cur)
        steps: list[str] = []
        positional = 0
        for node in reversed(chain):
            parent = node.getparent()
            same = [c for c in parent if c.tag == node.tag]
            if len(same) == 1:
                steps.append(node.tag)
            else:
                positional += 1
                steps.append(f"{node.tag}:nth-of-type({same.index(node) + 1})")
        if positional <= 2:
            yield f"{anchors[0]} > " + " > ".join(steps)


def _build_selector(ctx: _Context, cand: _Candidate, limit: int = 160) -> tuple[str, str] | None:
    """The first stable selector that matches exactly the candidate and re-extracts its value."""
    tried = 0
    fallback: tuple[str, str] | None = None
    for selector, kind in _selector_candidates(ctx.after, cand.el, cand.src, cand.raw):
        ctx.after.deadline.check()
        tried += 1
        if tried > limit:
            break
        element_sel, _ = _split_selector(selector)
        matched = _select_elements(ctx.after, element_sel)
        if len(matched) != 1 or matched[0] is not cand.el:
            continue
        # a selector that on the old page picks some other element describes that element, not ours
        old = _select_elements(ctx.before, element_sel)
        if old and not any(any(_related(o, t) for t in ctx.target_elements) for o in old):
            if fallback is None and _reextracts(ctx, selector, cand.value):
                fallback = (selector, kind)
            continue
        if _reextracts(ctx, selector, cand.value):
            return selector, kind
    return fallback


def _reextracts(ctx: _Context, selector: str, value: Any) -> bool:
    try:
        nodes = select(ctx.after.sel, selector, ctx.after.budget)
    except (SelectorError, ValueError, etree.XPathError, LimitExceeded):
        return False
    texts = [node_text(n) for n in nodes if node_text(n)]
    if len(texts) != 1:
        return False
    try:
        return _same_value(ctx.spec.parse(texts[0]), value) and ctx.spec.violation(value) is None
    except ValueParseError:
        return False


# -- the healer -------------------------------------------------------------------------------------------


def _refuse(reason: str, detail: str, n: int, **extra: Any) -> HealResult:
    evidence = {
        "strategy": None,
        "reason": reason,
        "detail": detail,
        "runner_up": None,
        "score": None,
        "candidates": n,
        **extra,
    }
    return HealResult(None, None, 0.0, evidence)


def _heal_field(before: _Page, after: _Page, spec: _FieldSpec) -> HealResult:
    if not spec.selector:
        return _refuse("invalid_selector", "field has no selector", 0)
    targets, located = _locate_targets(before, spec)
    target_raw = before.raw_value(*targets[0]) if targets else ""
    field_words = _expand(_content_words(spec.name.replace("_", " ")))
    field_head = _expand(_head_words(spec.name))
    anchor_words = set(field_words)
    target_fps = tuple(before.fingerprint(el, src) for el, src in targets)
    aliases = _aliases(before, spec, targets, target_raw)
    for fp in target_fps:
        anchor_words |= _expand(fp.name_tokens | fp.class_tokens)
    old_element_sel, _ = _split_selector(spec.selector)
    ctx = _Context(
        spec=spec,
        targets=target_fps,
        target_elements=tuple(el for el, _ in targets),
        target_raw=target_raw,
        field_words=field_words,
        field_head=field_head,
        anchor_words=frozenset(anchor_words),
        old_matches=frozenset(_select_elements(after, old_element_sel, own=True)),
        target_flags=frozenset().union(*(before.flags(el) for el, _ in targets)),
        before=before,
        after=after,
        aliases=tuple(before.fingerprint(el, src) for el, src in aliases),
        alias_elements=tuple(el for el, _ in aliases),
        target_identity=frozenset().union(*(before.identity(el) for el, _ in (*targets, *aliases))),
    )
    still_there = _still_there(ctx)
    if still_there is not None:
        return _refuse("value_out_of_rules", still_there, 1, located=located, trigger=_trigger(ctx))

    pool: list[_Candidate] = []
    rejected = 0
    for el, src, raw, value in _value_sources(after, spec, lambda v: True, target_raw):
        if spec.violation(value) is not None:
            rejected += 1
            continue
        if (
            spec.type == "string"
            and spec.before is not None
            and value != spec.before
            and not _string_shape_ok(str(spec.before), value)
        ):
            continue
        if el.tag in _LABEL_TAGS and not any(t.tag == el.tag for t in target_fps):
            continue  # a <dt>/<th>/<label> names a value; it is one only if the old element was one too
        pool.append(_Candidate(el, src, raw, value))
    if len(pool) > MAX_FINGERPRINTED:
        pool.sort(key=lambda c: -_prefilter_key(ctx, c))
        pool = pool[:MAX_FINGERPRINTED]
    for cand in pool:
        cand.fp = after.fingerprint(cand.el, cand.src)
        cand.slot = _slot_of(after, cand.el, cand.src)
        _score_cheap(ctx, cand)
    pool.sort(key=lambda c: (-c.score, after.index[c.el]))

    candidates: list[_Candidate] = []
    decoys: list[_Candidate] = []
    for cand in pool:
        if len(candidates) >= MAX_SHORTLIST:
            break
        cand.decoy = _decoy_reason(ctx, cand.el, cand.raw)
        if cand.decoy:
            decoys.append(cand)
            continue
        _score_context(ctx, cand)
        candidates.append(cand)
    copies: list[_Candidate] = []
    if targets and all(src == "text" for _, src in targets):
        # the field was shown text: machine-readable copies (meta content) confirm a shown value, they do not
        # replace it (a page that no longer shows the value has lost the field)
        copies = [c for c in candidates if c.src != "text"]
        candidates = [c for c in candidates if c.src == "text"]
        _credit_copies(candidates, copies)
    extra = {
        "located": located,
        "trigger": _trigger(ctx),
        "rejected_by_rules": rejected,
        "decoys": len(decoys),
        "change_limit_pct": spec.change_pct,
        "change_limit_from": "contract" if spec.change_pct_given else "healer default",
    }
    if not candidates:
        if copies:
            return _refuse(
                "hidden_copy_only",
                "the page no longer shows the value; only a machine-readable "
                f"copy remains ({copies[0].el.tag} {copies[0].src[5:]}={copies[0].raw!r})",
                len(copies),
                **extra,
            )
        if decoys:
            top = decoys[0]
            return _refuse(
                "only_decoys", f"only decoy values remain ({top.decoy}: {top.raw!r})", len(decoys), **extra
            )
        return _refuse("field_gone", "no element on the new page holds a valid value", 0, **extra)

    _reward_unique_value(spec, candidates)
    candidates.sort(key=lambda c: (-c.score, after.index[c.el]))
    best = _pick_in_slot(candidates)
    runner = _runner_up(candidates, best)
    runner_info = (
        {"selector": None, "value": runner.value, "raw": runner.raw, "score": round(runner.score, 4)}
        if runner
        else None
    )
    margin = best.score - runner.score if runner else best.score
    strategy = _STRATEGY_NAMES[max(_STRATEGY_NAMES, key=lambda k: best.parts.get(k, 0.0))]
    info = {
        **extra,
        "runner_up": runner_info,
        "score": round(best.score, 4),
        "candidates": len(candidates),
        "parts": best.parts,
        "strategy": strategy,
        "margin": round(margin, 4),
        "value_raw": best.raw,
    }
    if not targets:
        info["note"] = "old element not found on the last good page; no fingerprint"
    floor = MIN_SCORE if targets else MIN_SCORE + NO_FINGERPRINT_PENALTY
    if runner is None or runner.score < LONE_RUNNER_UP:
        floor -= LONE_DISCOUNT  # nothing else on the page could be this field
    needed = 0.0
    if runner is not None:
        needed = MIN_MARGIN if not _same_value(runner.value, best.value) else MIN_MARGIN_SAME_VALUE
    confidence = _confidence(best.score, floor, margin, needed)
    if best.score < floor:
        detail = f"best score {best.score:.2f} below {floor:.2f}"
        return _refused(_with_review(ctx, info, best, runner), "low_confidence", detail, confidence)
    support = best.parts["fingerprint"] + best.parts["anchor"] + best.parts["label"]
    if spec.expected is not None:
        support += MIN_SUPPORT  # the contract pins the value: matching it is not a coincidence
    if support < MIN_SUPPORT:
        return _refused(
            _with_review(ctx, info, best, runner),
            "value_only",
            f"only the value matches (structure/anchor/label {support:.2f})",
            min(confidence, 0.4),
        )
    if (
        spec.type == "string"
        and spec.before is not None
        and best.value != spec.before
        and not (best.parts["anchor"] >= 0.8 * _W_ANCHOR or best.parts["fingerprint"] >= 0.7 * _W_STRUCT)
    ):
        return _refused(
            _with_review(ctx, info, best, runner),
            "changed_value_weak",
            "a different text needs a strong anchor or fingerprint",
            min(confidence, 0.4),
        )
    if runner is not None:
        if margin < needed:
            return _refused(
                _with_review(ctx, info, best, runner),
                "ambiguous",
                f"runner-up {runner.raw!r} within {margin:.2f} of best {best.raw!r}",
                confidence,
            )
    built = _build_selector(ctx, best)
    if built is None:
        # a wrapper of the same value, or the page's machine-readable copy of it (<meta itemprop="price">),
        # may be selectable where the element itself is not
        for alt in [*candidates[1:], *copies]:
            same_place = alt.slot is best.slot
            copy = alt.src != "text" and alt.el.get("itemprop") is not None or alt.el.tag == "meta"
            if (same_place or copy) and _same_value(alt.value, best.value):
                built = _build_selector(ctx, alt)
                if built:
                    info["selected_copy"] = not same_place
                    break
    if built is None:
        return _refused(
            info, "no_stable_selector", "no stable selector matches exactly this element", confidence
        )
    selector, kind = built
    if runner is not None and runner_info is not None:
        found = _build_selector(ctx, runner, limit=24)
        runner_info["selector"] = found[0] if found else None
    info.update({"reason": "healed", "selector_kind": kind})
    return HealResult(best.value, selector, round(confidence, 4), info)


def _still_there(ctx: _Context) -> str | None:
    """The old selector still finds the very same element, but its value broke the rules or is gone
    ("Sold out" where a price was). That is a data change for review, not a layout change to heal: any
    other element chosen now would be an impostor."""
    if not ctx.targets or len(ctx.old_matches) != 1:
        return None
    el = next(iter(ctx.old_matches))
    _, src = _split_selector(ctx.spec.selector)
    raw = ctx.after.raw_value(el, src)
    if max(_similarity(ctx.after.fingerprint(el, src), t) for t in ctx.targets) < STILL_THERE_SIMILARITY:
        return None
    value = ctx.after.parse(ctx.spec, raw)
    if value is not _UNPARSEABLE:
        problem = ctx.spec.violation(value)
        return f"the old element is still there but its value {raw!r} is {problem}" if problem else None
    if ctx.spec.numeric and not _DIGIT.search(raw):
        return f"the old element is still there but shows no number ({raw!r})"
    return None


_STRATEGY_NAMES = {
    "anchor": "semantic_anchor",
    "label": "label",
    "fingerprint": "fingerprint",
    "value": "value_proximity",
    "jsonld": "jsonld",
    "old_selector": "old_selector",
}


def _trigger(ctx: _Context) -> str:
    """What the old selector does on the new page (why the pipeline asked for a heal)."""
    _, src = _split_selector(ctx.spec.selector)
    matched = [el for el in ctx.old_matches if ctx.after.raw_value(el, src)]
    if not matched:
        return "no_match"
    values = {ctx.after.raw_value(el, src) for el in matched}
    if len(values) > 1:
        return "multiple_matches"
    value = ctx.after.parse(ctx.spec, values.pop())
    if value is _UNPARSEABLE:
        return "unparseable"
    if ctx.spec.violation(value) is not None:
        return "rule_violation"
    return "none"


def _pick_in_slot(candidates: list[_Candidate]) -> _Candidate:
    """Within the winning place, the element that names the field, else the one holding the text itself."""
    top = candidates[0]
    group = [
        c
        for c in candidates
        if c.slot is top.slot
        and c.src == top.src
        and c.score >= top.score - 0.08
        and _same_value(c.value, top.value)
    ]
    return max(group, key=lambda c: (round(c.parts.get("anchor", 0.0), 3), _depth(c.el), c.score))


def _depth(el: etree._Element) -> int:
    return sum(1 for _ in el.iterancestors())


def _string_shape_ok(before: str, value: str) -> bool:
    """A changed text may be an edit of the old one, not a different kind of text (a label, a date)."""
    if bool(re.search(r"\d", before)) != bool(re.search(r"\d", value)):
        return False
    ratio = len(value) / max(1, len(before))
    return 0.5 <= ratio <= 2.0


def _credit_copies(candidates: list[_Candidate], copies: list[_Candidate]) -> None:
    """A machine-readable copy naming the field (itemprop="price") that agrees is structured-data evidence."""
    agreeing = [c.value for c in copies if c.parts.get("anchor", 0.0) >= 0.5 * _W_ANCHOR]
    for cand in candidates:
        if any(_same_value(cand.value, v) for v in agreeing) and cand.parts.get("jsonld", 0.0) < _W_JSONLD:
            cand.score += _W_JSONLD - cand.parts.get("jsonld", 0.0)
            cand.parts["jsonld"] = _W_JSONLD


def _reward_unique_value(spec: _FieldSpec, candidates: list[_Candidate]) -> None:
    """A specific last accepted value found in exactly one place is strong evidence that it is the field."""
    if spec.before is None:
        return
    exact = [c for c in candidates if _same_value(c.value, spec.before) and _specificity(spec, c.raw) >= 0.85]
    slots: list[etree._Element] = []
    for cand in exact:
        if not any(_related(cand.slot, s) for s in slots):
            slots.append(cand.slot)
    if len(slots) == 1:
        for cand in exact:
            cand.parts["unique_value"] = UNIQUE_VALUE_BONUS
            cand.score += UNIQUE_VALUE_BONUS


def _refused(info: dict, reason: str, detail: str, confidence: float) -> HealResult:
    return HealResult(None, None, round(confidence, 4), {**info, "reason": reason, "detail": detail})


def _with_review(ctx: _Context, info: dict, best: _Candidate, runner: _Candidate | None) -> dict:
    """Where the rejected best and runner-up are, with selectors, so a reviewer can pick one by hand."""
    found = _build_selector(ctx, best, limit=24)
    info = {
        **info,
        "best": {
            "selector": found[0] if found else None,
            "value": best.value,
            "raw": best.raw,
            "score": round(best.score, 4),
        },
    }
    if runner is not None and info.get("runner_up"):
        found = _build_selector(ctx, runner, limit=24)
        info["runner_up"] = {**info["runner_up"], "selector": found[0] if found else None}
    return info


def _runner_up(candidates: list[_Candidate], best: _Candidate) -> _Candidate | None:
    """Best candidate that is another place on the page (not a wrapper of, or inside, the best)."""
    for cand in candidates[1:]:
        nested = cand.slot is best.slot or _related(cand.slot, best.slot) or _related(cand.el, best.el)
        if nested and _same_value(cand.value, best.value):
            continue  # a wrapper of the same value is the same answer; a wrapper adding text is another
        if cand.src != "text" and best.src != "text" and _same_value(cand.value, best.value):
            continue  # duplicate machine-readable copies (og: and itemprop metas) agree by design
        if cand.el.tag == "meta" or best.el.tag == "meta":
            if _same_value(cand.value, best.value):
                continue
        return cand
    return None


def _confidence(score: float, floor: float, margin: float, needed: float) -> float:
    """Above 0.5 exactly when both the score clears its floor and the margin clears its threshold."""

    def sigmoid(x: float) -> float:
        return 1.0 / (1.0 + math.exp(-x))

    return min(sigmoid(10.0 * (score - floor)), sigmoid(15.0 * (margin - needed)))


__all__ = ["HealResult", "heal", "is_unstable_token", "MIN_SCORE", "MIN_MARGIN"]
