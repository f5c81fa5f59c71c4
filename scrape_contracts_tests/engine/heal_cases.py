"""Mutation suite for the healer: realistic pages, before/after layout changes, expected outcome per field.

Pages are generated, not hand-written: six page kinds (product, real-estate listing, review, job post, news
article, event), each rendered from random data through a ``Style`` (class naming scheme, ids, test ids,
microdata, JSON-LD, fact markup, labels, wrappers, order, tags, layout, noise). A change kind derives the
"after" style (and data) from the "before" one. The old selector is what a contract author would have
written for the before page, biased towards the part of the markup the change breaks (ids for renamed
ids, classes for hashed classes, positions for reordering, ...).

A case lists only the fields the pipeline would heal: those whose old selector fails on the new page (no
match, several different matches, unparseable, rule violation), plus the fields a change targets on
purpose (a decoy put where the old element was, a removed field, a value moved past its change limit). The
expected value is read from the new page (the element that carries the field), or ``REFUSE`` when the field
is not on the new page or its new value breaks the contract's change limit (a data change for review).

``build_cases(seeds)`` is deterministic: the same seeds give the same pages, specs and expectations.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from lxml import html as lxml_html

from scrape_contracts.engine.extract import ValueParseError, parse_value
from scrape_contracts.engine.select import node_text, parse_html, select

REFUSE = "REFUSE"

PAGE_KINDS = ("product", "real_estate", "review", "job", "news", "event")
CHANGE_KINDS = tuple(
    "renamed_ids hashed_classes inserted_wrappers reordered_siblings changed_tags moved_section "
    "reworded_labels value_changed decoy_at_old removed_field redesign decoy_only duplicate_matches "
    "value_beyond_limit".split()
)
# change kinds whose targeted field is absent from the new page: every one of them must be refused
REMOVAL_KINDS = ("removed_field", "decoy_only")


@dataclass(frozen=True)
class HealCase:
    case_id: str
    kind: str
    change: str
    before_html: str
    after_html: str
    fields: dict[str, dict[str, Any]]
    expected: dict[str, Any]  # field -> typed value, or REFUSE
    targeted: tuple[str, ...] = ()

    def field_cases(self) -> Iterator[tuple[str, dict[str, Any], Any]]:
        for name, spec in self.fields.items():
            yield name, spec, self.expected[name]


# -- vocabulary -------------------------------------------------------------------------------------------

BRANDS = tuple("Acme Nordvik Halcyon Brightline Kestrel Orion Vela Tamber Quill Lumen Fjord Corvid".split())
PRODUCTS = tuple(
    "Blender|Desk Lamp|Backpack|Espresso Machine|Headphones|Running Shoe|Air Purifier|Cordless Drill|"
    "Kettle|Monitor Stand|Rain Jacket|Standing Desk".split("|")
)
MODEL_WORDS = ("Pro", "Max", "Lite", "Classic", "Ultra", "Compact", "Plus", "Air", "Studio", "Trail")
STREETS = tuple("Maple Oak Cedar Harbor Hillcrest Willow Lakeview Sunset Park Elm Juniper Birch".split())
STREET_KINDS = ("Street", "Avenue", "Lane", "Road", "Court", "Drive")
CITIES = tuple(
    "Springfield Riverton Lakewood Fairview Georgetown Ashford Milton Brookside Kingsport Maplewood".split()
)
FIRST = ("Jane", "Omar", "Priya", "Lukas", "Mei", "Carlos", "Aisha", "Tom", "Sofia", "Noah", "Hana", "Ivan")
LAST = tuple("Doe Haddad Raman Becker Chen Ortega Bello Walsh Rossi Kim Sato Petrov".split())
COMPANIES = tuple(
    "Globex|Initech|Umbrella Labs|Hooli|Vandelay Industries|Stark Logistics|Wayne Analytics|"
    "Soylent Foods|Cyberdyne|Tyrell Systems".split("|")
)
JOB_TITLES = tuple(
    "Senior Data Engineer|Product Designer|Backend Developer|Marketing Manager|"
    "Site Reliability Engineer|Account Executive|Data Analyst|QA Engineer|Frontend Engineer|"
    "Operations Lead".split("|")
)
TOPICS = tuple(
    "City council|Local bakery|River cleanup|School board|Transit authority|Tech startup|Museum|"
    "Farmers market|Hospital|Library".split("|")
)
VERBS = ("approves", "unveils", "delays", "expands", "celebrates", "rethinks", "launches", "debates")
OBJECTS = tuple(
    "new budget|summer program|downtown plan|late-night service|renovation|recycling pilot|"
    "community garden|housing proposal".split("|")
)
VENUES = tuple(
    "The Blue Room|Riverside Arena|Union Hall|The Fillmore|Grand Theatre|Harbor Pavilion|"
    "Lantern Club|Civic Auditorium".split("|")
)
ACTS = tuple(
    "The Midnight Owls|Sara Vance Quartet|Electric Tide|Paper Lanterns|Northern Choir|DJ Solstice|"
    "The Brass Collective|Hollow Pines".split("|")
)
MONTHS = tuple(
    "January February March April May June July August September October November December".split()
)
SITE_NAMES = ("ShopCo", "Homely", "ReviewHub", "JobBoard", "Daily Ledger", "TicketNest", "Marketly")

RELATED_HEADINGS = {
    "product": (
        "You may also like",
        "Customers also viewed",
        "Related products",
        "Frequently bought together",
        "Similar items",
        "Shop the look",
        "Compare with similar items",
        "Recommended for you",
    ),
    "real_estate": (
        "Similar homes nearby",
        "More homes in this area",
        "Recently sold nearby",
        "You might also like",
        "Other listings from this agent",
    ),
    "review": (
        "Other reviews",
        "More reviews of this product",
        "Top reviews",
        "Reviews from other customers",
        "Related reviews",
    ),
    "job": (
        "Similar jobs",
        "More jobs at this company",
        "Jobs you might be interested in",
        "People also viewed",
        "Recommended jobs",
    ),
    "news": ("Most read", "More stories", "Related coverage", "Read next", "Editor's picks", "Don't miss"),
    "event": (
        "More events at this venue",
        "Similar events",
        "You may also like",
        "Trending events",
        "Other events this week",
    ),
}


# -- fields -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldDef:
    name: str
    type: str
    role: str  # title | hero | fact | byline
    slugs: tuple[str, ...]  # class/id vocabularies; a redesign switches vocabulary
    labels: tuple[str, ...]  # [0] the usual label, the rest are rewordings
    itemprop: str | None = None
    rules: dict[str, Any] = field(default_factory=dict)
    unit: str = ""  # shown after numbers in some formats ("sqft", "reviews")
    ld: tuple[str, ...] = ()  # JSON-LD path


def _price_text(value: float, variant: int) -> str:
    variant %= 5
    whole = float(value).is_integer()
    if variant == 0:
        return f"${value:,.2f}"
    if variant == 1:
        return f"${value:,.0f}" if whole else f"${value:,.2f}"
    if variant == 2:
        return f"USD {value:,.2f}"
    if variant == 3:
        return f"{value:,.2f}".replace(",", "X").replace(".", ",").replace("X", ".") + " €"
    return f"£{value:,.2f}"


def _display(fd: FieldDef, value: Any, fmt: int, inline: bool = False) -> str:
    if fd.type == "price":
        text = _price_text(value, fmt)
        if fd.unit and fmt % 2:
            text = f"{text}{fd.unit}"
        return text
    if fd.type == "boolean":
        return (
            ("In stock", "Available", "Yes")[fmt % 3]
            if value
            else ("Out of stock", "Sold out", "No")[fmt % 3]
        )
    if fd.type == "number":
        text = f"{value:.1f}"
        return f"{text} out of 5" if fmt % 3 == 1 else f"{text}/5" if fmt % 3 == 2 else text
    if fd.type == "integer":
        text = f"{value:,}" if value >= 1000 and fmt % 2 == 0 and fd.name != "year_built" else str(value)
        if fd.unit and (inline or fmt % 3 == 0):
            text = f"{text} {fd.unit}"
        return text
    return str(value)


@dataclass(frozen=True)
class KindDef:
    name: str
    itemtype: str
    fields: tuple[FieldDef, ...]
    make: Callable[[random.Random], dict[str, Any]]  # values, related items, noise
    card_fields: tuple[str, ...]  # fields a related card repeats (its own values)
    decoy_field: str | None  # hero value a crossed-out/was decoy can imitate


def _money(rng: random.Random, low: float, high: float, cents: bool = True) -> float:
    value = rng.uniform(low, high)
    if cents:
        return round(int(value) + rng.choice((0.99, 0.49, 0.0, 0.95)), 2)
    step = 1000 if high > 50_000 else 100 if high > 5000 else 1
    return float(int(value / step) * step)


def _person(rng: random.Random) -> str:
    return f"{rng.choice(FIRST)} {rng.choice(LAST)}"


def _date(rng: random.Random) -> str:
    return f"{rng.choice(MONTHS)} {rng.randint(1, 28)}, {rng.choice((2023, 2024, 2025))}"


def _make_product(rng: random.Random) -> dict[str, Any]:
    brand = rng.choice(BRANDS)
    noun = rng.choice(PRODUCTS)
    price = _money(rng, 12, 1800)
    title = f"{brand} {rng.choice(MODEL_WORDS)} {noun} {rng.choice('XSMK')}{rng.randint(10, 990)}"
    values = {
        "title": title,
        "price": price,
        "rating": round(rng.uniform(2.5, 4.9), 1),
        "review_count": rng.randint(8, 4000),
        "in_stock": rng.random() < 0.8,
        "sku": f"{brand[:2].upper()}-{rng.randint(1000, 99999)}",
    }
    related = [
        {
            "title": f"{rng.choice(BRANDS)} {rng.choice(MODEL_WORDS)} {rng.choice(PRODUCTS)}",
            "price": round(price * rng.uniform(0.7, 1.35), 2),
            "rating": round(rng.uniform(2.5, 5.0), 1),
            "review_count": rng.randint(3, 3000),
        }
        for _ in range(rng.randint(3, 6))
    ]
    noise_facts = [
        ("Weight", f"{rng.uniform(0.3, 9):.1f} kg"),
        ("Warranty", f"{rng.randint(1, 5)} years"),
        ("Power", f"{rng.choice((600, 900, 1200, 1500))} W"),
        ("Color", rng.choice(("Black", "Sage", "Red"))),
    ]
    texts = [
        f"Ships in {rng.randint(1, 5)} business days. Free returns within {rng.choice((14, 30, 60))} days.",
        f"The {noun.lower()} comes with {rng.randint(2, 6)} accessories and a "
        f"{rng.randint(1, 3)}-year guarantee.",
        f"Over {rng.randint(2, 40)},000 sold since {rng.randint(2015, 2022)}.",
    ]
    promo = f"Free shipping on orders over ${rng.choice((25, 35, 50, 75))}"
    return {
        "values": values,
        "related": related,
        "noise_facts": noise_facts,
        "texts": texts,
        "promo": promo,
        "decoy": {"price": round(price * rng.uniform(1.1, 1.6), 2)},
        "brand": brand,
    }


def _make_real_estate(rng: random.Random) -> dict[str, Any]:
    city = rng.choice(CITIES)
    price = _money(rng, 180_000, 1_400_000, cents=False)
    values = {
        "address": f"{rng.randint(2, 9800)} {rng.choice(STREETS)} {rng.choice(STREET_KINDS)}, {city}",
        "price": price,
        "bedrooms": rng.randint(1, 6),
        "bathrooms": rng.randint(1, 4),
        "area_sqft": rng.randint(6, 48) * 100 + rng.choice((0, 25, 50, 75)),
        "year_built": rng.randint(1905, 2022),
    }
    related = [
        {
            "address": f"{rng.randint(2, 9800)} {rng.choice(STREETS)} {rng.choice(STREET_KINDS)}, {city}",
            "price": float(int(price * rng.uniform(0.75, 1.3) / 1000) * 1000),
            "bedrooms": rng.randint(1, 6),
            "bathrooms": rng.randint(1, 4),
            "area_sqft": rng.randint(6, 48) * 100,
        }
        for _ in range(rng.randint(3, 5))
    ]
    noise_facts = [
        ("Lot size", f"{rng.uniform(0.1, 1.5):.2f} acres"),
        ("Parking", f"{rng.randint(1, 3)} spaces"),
        ("HOA", f"${rng.randint(50, 600)}/mo"),
        ("Days on market", str(rng.randint(2, 120))),
    ]
    texts = [
        f"Est. payment ${int(price / 190):,}/mo with {rng.randint(5, 20)}% down.",
        f"Price per sqft ${int(price / max(1, values['area_sqft'])):,}.",
        f"Listed {rng.randint(2, 40)} days ago. {rng.randint(12, 600)} people viewed this home.",
    ]
    return {
        "values": values,
        "related": related,
        "noise_facts": noise_facts,
        "texts": texts,
        "promo": f"Mortgage rates from {rng.uniform(5, 7):.2f}%",
        "decoy": {"price": float(int(price * rng.uniform(1.05, 1.3) / 1000) * 1000)},
        "brand": city,
    }


def _make_review(rng: random.Random) -> dict[str, Any]:
    product = f"{rng.choice(BRANDS)} {rng.choice(PRODUCTS)}"
    values = {
        "title": f"Review: {product} after {rng.randint(2, 11)} months",
        "rating": round(rng.uniform(1.5, 5.0), 1),
        "reviewer": _person(rng),
        "review_date": _date(rng),
        "helpful_count": rng.randint(3, 900),
    }
    related = [
        {
            "title": f"{rng.choice(('Great', 'Solid', 'Disappointing', 'Worth it'))} – "
            f"{rng.choice(PRODUCTS)}",
            "rating": round(rng.uniform(1.0, 5.0), 1),
            "reviewer": _person(rng),
            "review_date": _date(rng),
            "helpful_count": rng.randint(0, 400),
        }
        for _ in range(rng.randint(3, 5))
    ]
    noise_facts = [
        ("Verified purchase", "Yes"),
        ("Used for", f"{rng.randint(1, 24)} months"),
        ("Size bought", rng.choice(("M", "L", "42", "10"))),
    ]
    texts = [
        f"Average rating {rng.uniform(3, 4.8):.1f} based on {rng.randint(40, 3000)} reviews.",
        f"I used it {rng.randint(2, 7)} times a week for {rng.randint(2, 11)} months.",
        f"{rng.randint(60, 98)}% of reviewers recommend this product.",
    ]
    return {
        "values": values,
        "related": related,
        "noise_facts": noise_facts,
        "texts": texts,
        "promo": "Write a review and get 10% off",
        "decoy": {},
        "brand": product,
    }


def _make_job(rng: random.Random) -> dict[str, Any]:
    company = rng.choice(COMPANIES)
    salary = float(rng.randint(45, 220) * 1000)
    values = {
        "title": rng.choice(JOB_TITLES),
        "company": company,
        "location": f"{rng.choice(CITIES)}, {rng.choice(('CA', 'NY', 'TX', 'WA', 'OR'))}",
        "salary": salary,
        "employment_type": rng.choice(("Full-time", "Part-time", "Contract", "Internship")),
        "posted": _date(rng),
    }
    related = [
        {
            "title": rng.choice(JOB_TITLES),
            "company": rng.choice(COMPANIES),
            "salary": float(int(salary * rng.uniform(0.75, 1.3) / 1000) * 1000),
            "location": f"{rng.choice(CITIES)}, {rng.choice(('CA', 'NY', 'TX'))}",
        }
        for _ in range(rng.randint(3, 5))
    ]
    noise_facts = [
        ("Experience", f"{rng.randint(1, 8)}+ years"),
        ("Team size", str(rng.randint(4, 40))),
        ("Applicants", str(rng.randint(10, 400))),
        ("Vacation", f"{rng.randint(20, 30)} days"),
    ]
    texts = [
        f"{company} has {rng.randint(50, 9000)} employees across {rng.randint(2, 30)} offices.",
        f"401(k) with {rng.randint(3, 6)}% match and ${rng.randint(1, 5)},000 learning budget.",
        f"Interview process: {rng.randint(2, 5)} rounds over {rng.randint(1, 4)} weeks.",
    ]
    return {
        "values": values,
        "related": related,
        "noise_facts": noise_facts,
        "texts": texts,
        "promo": f"{rng.randint(100, 999)} new jobs this week",
        "decoy": {},
        "brand": company,
    }


def _make_news(rng: random.Random) -> dict[str, Any]:
    values = {
        "headline": f"{rng.choice(TOPICS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}",
        "author": _person(rng),
        "published": _date(rng),
        "comment_count": rng.randint(2, 900),
        "read_time": rng.randint(2, 14),
    }
    related = [
        {
            "headline": f"{rng.choice(TOPICS)} {rng.choice(VERBS)} {rng.choice(OBJECTS)}",
            "author": _person(rng),
            "published": _date(rng),
            "comment_count": rng.randint(0, 500),
            "read_time": rng.randint(2, 14),
        }
        for _ in range(rng.randint(3, 6))
    ]
    texts = [
        f"The plan would cost ${rng.randint(2, 90)} million over {rng.randint(2, 10)} years.",
        f"About {rng.randint(100, 5000)} residents attended the {rng.randint(2, 4)}-hour meeting.",
        f"A vote is expected on {rng.choice(MONTHS)} {rng.randint(1, 28)}.",
    ]
    return {
        "values": values,
        "related": related,
        "noise_facts": [],
        "texts": texts,
        "promo": f"Subscribe for ${rng.choice((1, 2, 4))} a week",
        "decoy": {},
        "brand": "Ledger",
    }


def _make_event(rng: random.Random) -> dict[str, Any]:
    venue = rng.choice(VENUES)
    price = _money(rng, 15, 180)
    values = {
        "name": f"{rng.choice(ACTS)} – {rng.choice(('Live', 'Spring Tour', 'Album Release', 'Late Show'))}",
        "venue": venue,
        "date": f"{_date(rng)} · {rng.randint(6, 10)}:{rng.choice(('00', '30'))} PM",
        "ticket_price": price,
        "seats_left": rng.randint(20, 900),
    }
    related = [
        {
            "name": f"{rng.choice(ACTS)} – Live",
            "venue": rng.choice(VENUES),
            "date": f"{_date(rng)} · 8:00 PM",
            "ticket_price": round(price * rng.uniform(0.7, 1.4), 2),
            "seats_left": rng.randint(5, 900),
        }
        for _ in range(rng.randint(3, 5))
    ]
    noise_facts = [
        ("Doors open", f"{rng.randint(5, 7)}:30 PM"),
        ("Age limit", f"{rng.choice((16, 18, 21))}+"),
        ("Duration", f"{rng.randint(2, 4)} hours"),
    ]
    texts = [
        f"{rng.randint(1, 9)}.{rng.randint(1, 9)}k people are interested.",
        f"Service fee of ${rng.randint(2, 12)}.50 per ticket applies.",
        f"Limit {rng.randint(4, 8)} tickets per customer.",
    ]
    return {
        "values": values,
        "related": related,
        "noise_facts": noise_facts,
        "texts": texts,
        "promo": f"Use code SPRING for {rng.randint(5, 25)}% off",
        "decoy": {"ticket_price": round(price * rng.uniform(1.15, 1.6), 2)},
        "brand": venue,
    }


KINDS: dict[str, KindDef] = {
    "product": KindDef(
        "product",
        "https://schema.org/Product",
        (
            FieldDef(
                "title",
                "string",
                "title",
                ("title", "product-title", "product-name", "name"),
                ("",),
                "name",
                ld=("name",),
            ),
            FieldDef(
                "price",
                "price",
                "hero",
                ("price", "product-price", "amount", "price-current", "cost"),
                ("Price", "Our price", "Now", "Your price"),
                "price",
                {"max_change_pct": 30, "min": 0},
                ld=("offers", "price"),
            ),
            FieldDef(
                "rating",
                "number",
                "hero",
                ("rating", "rating-value", "stars", "score"),
                ("Rating", "Average rating", "Rated", "Customer rating"),
                "ratingValue",
                {"min": 0, "max": 5},
                ld=("aggregateRating", "ratingValue"),
            ),
            FieldDef(
                "review_count",
                "integer",
                "hero",
                ("review-count", "reviews", "rating-count", "num-reviews"),
                ("Reviews", "Ratings", "Customer reviews"),
                "reviewCount",
                {"min": 0},
                unit="reviews",
                ld=("aggregateRating", "reviewCount"),
            ),
            FieldDef(
                "in_stock",
                "boolean",
                "hero",
                ("availability", "stock", "in-stock", "stock-status"),
                ("Availability", "Stock", "Status"),
                "availability",
            ),
            FieldDef(
                "sku",
                "string",
                "fact",
                ("sku", "product-sku", "item-code", "model-number"),
                ("SKU", "Item number", "Model no.", "Product code"),
                "sku",
                ld=("sku",),
            ),
        ),
        _make_product,
        ("title", "price", "rating"),
        "price",
    ),
    "real_estate": KindDef(
        "real_estate",
        "https://schema.org/SingleFamilyResidence",
        (
            FieldDef(
                "address",
                "string",
                "title",
                ("address", "listing-address", "street-address", "location"),
                ("",),
                "address",
                ld=("address",),
            ),
            FieldDef(
                "price",
                "price",
                "hero",
                ("price", "listing-price", "asking-price", "amount"),
                ("Price", "Asking price", "List price", "Offers over"),
                "price",
                {"max_change_pct": 20, "min": 10_000},
                ld=("offers", "price"),
            ),
            FieldDef(
                "bedrooms",
                "integer",
                "fact",
                ("beds", "bedrooms", "bed-count", "rooms-bed"),
                ("Bedrooms", "Beds", "Bedroom count", "BR"),
                "numberOfBedrooms",
                {"min": 0, "max": 20},
                unit="beds",
                ld=("numberOfBedrooms",),
            ),
            FieldDef(
                "bathrooms",
                "integer",
                "fact",
                ("baths", "bathrooms", "bath-count", "rooms-bath"),
                ("Bathrooms", "Baths", "Bathroom count", "BA"),
                "numberOfBathroomsTotal",
                {"min": 0, "max": 20},
                unit="baths",
                ld=("numberOfBathroomsTotal",),
            ),
            FieldDef(
                "area_sqft",
                "integer",
                "fact",
                ("area", "sqft", "floor-area", "living-area"),
                ("Living area", "Area", "Square feet", "Size"),
                "floorSize",
                {"min": 100},
                unit="sqft",
                ld=("floorSize", "value"),
            ),
            FieldDef(
                "year_built",
                "integer",
                "fact",
                ("year-built", "built", "construction-year", "year"),
                ("Year built", "Built in", "Construction year", "Built"),
                "yearBuilt",
                {"min": 1800, "max": 2030},
                ld=("yearBuilt",),
            ),
        ),
        _make_real_estate,
        ("address", "price", "bedrooms", "bathrooms"),
        "price",
    ),
    "review": KindDef(
        "review",
        "https://schema.org/Review",
        (
            FieldDef(
                "title",
                "string",
                "title",
                ("title", "review-title", "headline", "name"),
                ("",),
                "name",
                ld=("name",),
            ),
            FieldDef(
                "rating",
                "number",
                "hero",
                ("rating", "review-rating", "stars", "score"),
                ("Rating", "Score", "Rated", "Stars"),
                "ratingValue",
                {"min": 0, "max": 5},
                ld=("reviewRating", "ratingValue"),
            ),
            FieldDef(
                "reviewer",
                "string",
                "byline",
                ("reviewer", "author", "review-author", "user-name"),
                ("By", "Reviewed by", "Written by", "From"),
                "author",
                ld=("author", "name"),
            ),
            FieldDef(
                "review_date",
                "string",
                "byline",
                ("date", "review-date", "posted-on", "published"),
                ("Reviewed on", "Posted", "Date", "Published"),
                "datePublished",
                ld=("datePublished",),
            ),
            FieldDef(
                "helpful_count",
                "integer",
                "hero",
                ("helpful", "helpful-count", "votes", "upvotes"),
                ("Helpful", "Found helpful", "Helpful votes", "Useful"),
                None,
                {"min": 0},
                unit="people found this helpful",
            ),
        ),
        _make_review,
        ("title", "rating", "reviewer", "review_date", "helpful_count"),
        "rating",
    ),
    "job": KindDef(
        "job",
        "https://schema.org/JobPosting",
        (
            FieldDef(
                "title",
                "string",
                "title",
                ("title", "job-title", "position", "role-name"),
                ("",),
                "title",
                ld=("title",),
            ),
            FieldDef(
                "company",
                "string",
                "byline",
                ("company", "employer", "company-name", "org"),
                ("Company", "Employer", "Hiring", "Organisation"),
                "hiringOrganization",
                ld=("hiringOrganization", "name"),
            ),
            FieldDef(
                "location",
                "string",
                "byline",
                ("location", "job-location", "place", "city"),
                ("Location", "Where", "Based in", "Office"),
                "jobLocation",
                ld=("jobLocation", "address"),
            ),
            FieldDef(
                "salary",
                "price",
                "hero",
                ("salary", "pay", "compensation", "base-salary"),
                ("Salary", "Pay", "Compensation", "Base pay"),
                "baseSalary",
                {"max_change_pct": 25, "min": 1000},
                unit="/yr",
                ld=("baseSalary", "value"),
            ),
            FieldDef(
                "employment_type",
                "string",
                "fact",
                ("employment-type", "job-type", "contract", "schedule"),
                ("Employment type", "Job type", "Contract", "Schedule"),
                "employmentType",
                ld=("employmentType",),
            ),
            FieldDef(
                "posted",
                "string",
                "fact",
                ("posted", "date-posted", "published", "listed"),
                ("Posted", "Date posted", "Listed on", "Published"),
                "datePosted",
                ld=("datePosted",),
            ),
        ),
        _make_job,
        ("title", "company", "salary", "location"),
        "salary",
    ),
    "news": KindDef(
        "news",
        "https://schema.org/NewsArticle",
        (
            FieldDef(
                "headline",
                "string",
                "title",
                ("headline", "article-title", "title", "story-title"),
                ("",),
                "headline",
                ld=("headline",),
            ),
            FieldDef(
                "author",
                "string",
                "byline",
                ("author", "byline-name", "writer", "reporter"),
                ("By", "Written by", "Reporter", "Author"),
                "author",
                ld=("author", "name"),
            ),
            FieldDef(
                "published",
                "string",
                "byline",
                ("published", "date", "pub-date", "timestamp"),
                ("Published", "Posted", "Updated", "On"),
                "datePublished",
                ld=("datePublished",),
            ),
            FieldDef(
                "comment_count",
                "integer",
                "byline",
                ("comment-count", "comments", "replies", "discussion"),
                ("Comments", "Replies", "Join the discussion", "Responses"),
                "commentCount",
                {"min": 0},
                unit="comments",
                ld=("commentCount",),
            ),
            FieldDef(
                "read_time",
                "integer",
                "byline",
                ("read-time", "reading-time", "duration", "minutes"),
                ("Read time", "Reading time", "Length", "Minutes"),
                "timeRequired",
                {"min": 1, "max": 120},
                unit="min read",
            ),
        ),
        _make_news,
        ("headline", "author", "published", "comment_count"),
        None,
    ),
    "event": KindDef(
        "event",
        "https://schema.org/Event",
        (
            FieldDef(
                "name",
                "string",
                "title",
                ("event-name", "title", "name", "event-title"),
                ("",),
                "name",
                ld=("name",),
            ),
            FieldDef(
                "venue",
                "string",
                "fact",
                ("venue", "location", "place", "venue-name"),
                ("Venue", "Where", "Location", "Place"),
                "location",
                ld=("location", "name"),
            ),
            FieldDef(
                "date",
                "string",
                "fact",
                ("date", "event-date", "when", "starts"),
                ("Date", "When", "Starts", "Date and time"),
                "startDate",
            ),
            FieldDef(
                "ticket_price",
                "price",
                "hero",
                ("ticket-price", "price", "from-price", "cost"),
                ("Tickets from", "Price", "From", "Admission"),
                "price",
                {"max_change_pct": 40, "min": 0},
                ld=("offers", "price"),
            ),
            FieldDef(
                "seats_left",
                "integer",
                "hero",
                ("seats-left", "availability", "remaining", "capacity-left"),
                ("Seats left", "Remaining", "Tickets left", "Available"),
                None,
                {"min": 0},
                unit="seats left",
            ),
        ),
        _make_event,
        ("name", "venue", "date", "ticket_price"),
        "ticket_price",
    ),
}


# -- style ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Style:
    vocab: int = 0
    naming: str = "semantic"  # semantic | bem | hashed | utility
    salt: str = "s0"
    ids: str = "none"  # none | semantic | random
    id_vocab: int = 0
    testids: bool = False
    testid_vocab: int = 0
    microdata: str = "none"  # none | inline | meta
    jsonld: bool = False
    og: bool = False
    facts: str = "dl"  # dl | table | ul | divs | inline
    hero_labels: bool = False
    labels: int = 0
    wrappers: int = 0
    fact_order: tuple[int, ...] = ()
    hero_order: tuple[int, ...] = ()
    byline_order: tuple[int, ...] = ()
    value_tag: str = "span"
    layout: str = "classic"  # classic | sidebar | top
    related_heading: int = 0
    related_markup: str = "ul"  # ul | divs | table
    related_layout: str = "after"  # after | aside
    old_price: bool = False
    fmt: int = 0
    noise: int = 1
    block: str = "pdp"
    card_vocab: str = "card"  # related cards' value class prefix; "" = same classes as the main values
    title_wrap: bool = False


def _random_style(rng: random.Random, kind: KindDef) -> Style:
    n_facts = len(_role_fields(kind, "fact")) + 4
    n_hero = len(_role_fields(kind, "hero")) + 1
    n_byline = len(_role_fields(kind, "byline"))
    return Style(
        vocab=rng.randrange(4),
        naming=rng.choice(("semantic", "semantic", "bem", "hashed", "utility")),
        salt=f"s{rng.randrange(10**6)}",
        ids=rng.choice(("none", "none", "semantic", "random")),
        id_vocab=rng.randrange(4),
        testids=rng.random() < 0.3,
        testid_vocab=rng.randrange(4),
        microdata=rng.choice(("none", "none", "inline", "meta")),
        jsonld=rng.random() < 0.4,
        og=rng.random() < 0.4,
        facts=rng.choice(("dl", "table", "ul", "divs", "inline")),
        hero_labels=rng.random() < 0.5,
        labels=0,
        wrappers=rng.choice((0, 0, 1)),
        fact_order=tuple(rng.sample(range(n_facts), n_facts)),
        hero_order=tuple(rng.sample(range(n_hero), n_hero)),
        byline_order=tuple(rng.sample(range(n_byline), n_byline)),
        value_tag=rng.choice(("span", "span", "strong", "div", "p")),
        layout=rng.choice(("classic", "sidebar", "top")),
        related_heading=rng.randrange(8) if rng.random() < 0.9 else -1,
        related_markup=rng.choice(("ul", "divs", "table")),
        related_layout=rng.choice(("after", "after", "aside")),
        old_price=rng.random() < 0.4,
        fmt=rng.randrange(6),
        noise=rng.randint(1, 3),
        block=rng.choice(("pdp", "listing", "detail", "page", "item")),
        card_vocab=rng.choice(("card", "tile", "teaser")),
        title_wrap=rng.random() < 0.3,
    )


def _role_fields(kind: KindDef, role: str) -> list[FieldDef]:
    return [f for f in kind.fields if f.role == role]


def _digest(*parts: str) -> str:
    return hashlib.sha256("|".join(parts).encode()).hexdigest()


def _hashed(salt: str, name: str) -> str:
    d = _digest(salt, name)
    family = int(_digest(salt)[:2], 16) % 5
    b36 = "".join("0123456789abcdefghijklmnopqrstuvwxyz"[int(d[i : i + 2], 16) % 36] for i in range(0, 14, 2))
    if family == 0:
        return f"css-{b36[:6]}"
    if family == 1:
        letters = "".join(
            "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"[int(d[i : i + 2], 16) % 52]
            for i in range(14, 26, 2)
        )
        return f"sc-{letters[:5]} {letters[1:] + 'T'}"
    if family == 2:
        pascal = "".join(p.capitalize() for p in name.split("-"))
        return f"{pascal}_root__{b36[:5]}"
    if family == 3:
        return f"jsx-{int(d[:8], 16) % 10**7}"
    return f"e{b36[:6]}{int(d[8], 16) % 10}"


_UTILITY = tuple(
    "text-lg font-semibold|text-sm text-gray-600|mt-2 flex items-center|font-bold text-2xl|px-4 py-2|"
    "text-base leading-6|inline-flex gap-1|block mb-1|text-xs uppercase tracking-wide".split("|")
)


def _cls(style: Style, name: str) -> str:
    if style.naming == "semantic":
        return name
    if style.naming == "bem":
        return f"{style.block}__{name}"
    if style.naming == "hashed":
        return _hashed(style.salt, name)
    return _UTILITY[int(_digest(style.salt, name)[:4], 16) % len(_UTILITY)]


def _slug(fd: FieldDef, index: int) -> str:
    return fd.slugs[index % len(fd.slugs)]


def _id(style: Style, fd: FieldDef) -> str | None:
    if style.ids == "none":
        return None
    if style.ids == "semantic":
        return _slug(fd, style.id_vocab)
    d = _digest(style.salt, "id", fd.name)
    return "".join(
        "abcdefghijklmnopqrstuvwxyz0123456789"[int(d[i : i + 2], 16) % 36] for i in range(0, 12, 2)
    )


# -- rendering --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mods:
    """Content changes on top of a style: removed fields, a decoy where a field used to be."""

    removed: frozenset[str] = frozenset()
    decoy_at_old: str | None = None  # field whose old classes now sit on a decoy; the field moves
    decoy_variant: int = 0
    old_classes: str = ""  # the class attribute the decoy inherits
    old_tag: str = "span"


def _attrs(pairs: Sequence[tuple[str, str | None]]) -> str:
    return "".join(f' {k}="{v}"' if v != "" else f" {k}" for k, v in pairs if v is not None)


class _Renderer:
    def __init__(self, kind: KindDef, data: dict[str, Any], style: Style, mods: Mods) -> None:
        self.kind, self.data, self.style, self.mods = kind, data, style, mods
        self.values = data["values"]

    def c(self, name: str) -> str:
        return _cls(self.style, name)

    def label(self, fd: FieldDef) -> str:
        return fd.labels[self.style.labels % len(fd.labels)]

    def value_el(self, fd: FieldDef, text: str, tag: str | None = None, moved: bool = False) -> str:
        s = self.style
        tag = tag or s.value_tag
        slug = _slug(fd, s.vocab)
        cls = self.c(f"{slug}-now" if moved else slug)
        pairs: list[tuple[str, str | None]] = [("class", cls), ("id", _id(s, fd) if not moved else None)]
        if s.testids:
            pairs.append(("data-testid", f"{self.kind.name.replace('_', '-')}-{_slug(fd, s.testid_vocab)}"))
        if s.microdata == "inline" and fd.itemprop:
            pairs.append(("itemprop", fd.itemprop))
        pairs.append(("data-hc", fd.name))
        return f"<{tag}{_attrs(pairs)}>{text}</{tag}>"

    def wrap(self, html: str, depth: int) -> str:
        for i in range(depth):
            html = f'<div class="{self.c(f"wrap-{i}")}">{html}</div>'
        return html

    def display(self, fd: FieldDef, inline: bool = False) -> str:
        return _display(fd, self.values[fd.name], self.style.fmt, inline)

    # blocks

    def title(self) -> str:
        fd = next(f for f in self.kind.fields if f.role == "title")
        if fd.name in self.mods.removed:
            return ""
        el = self.value_el(fd, self.values[fd.name], tag="h1")
        if self.style.title_wrap:
            el = f'<div class="{self.c("title-wrap")}">{el}<span class="{self.c("badge")}">New</span></div>'
        return el

    def hero(self) -> str:
        s = self.style
        pieces: list[str] = []
        for fd in _role_fields(self.kind, "hero"):
            if fd.name in self.mods.removed:
                continue
            if self.mods.decoy_at_old == fd.name:
                pieces.append(self.decoy_piece(fd))
                continue
            text = self.display(fd)
            label = f'<span class="{self.c("label")}">{self.label(fd)}:</span> ' if s.hero_labels else ""
            value = self.wrap(self.value_el(fd, text), s.wrappers)
            extra = ""
            if fd.name == self.kind.decoy_field and s.old_price and fd.name in self.data["decoy"]:
                was = _display(fd, self.data["decoy"][fd.name], s.fmt)
                extra = f' <del class="{self.c("old-" + _slug(fd, s.vocab))}">{was}</del>'
            pieces.append(f'<div class="{self.c(_slug(fd, s.vocab) + "-box")}">{label}{value}{extra}</div>')
        cta = "Add to cart" if self.kind.name == "product" else "Contact"
        pieces.append(f'<button class="{self.c("cta")}">{cta}</button>')
        order = [i for i in s.hero_order if i < len(pieces)] or list(range(len(pieces)))
        ordered = [pieces[i] for i in order] + [p for i, p in enumerate(pieces) if i not in order]
        inner = "".join(ordered)
        if s.microdata == "meta":
            for fd in _role_fields(self.kind, "hero"):
                if (
                    fd.itemprop
                    and fd.type in ("price", "number")
                    and fd.name not in self.mods.removed
                    and self.mods.decoy_at_old != fd.name
                ):
                    inner += f'<meta itemprop="{fd.itemprop}" content="{self.values[fd.name]}">'
        return f'<section class="{self.c("summary")}">{inner}</section>'

    def decoy_piece(self, fd: FieldDef) -> str:
        """The old element's classes now on a decoy; the real value moves to a new element nearby."""
        s = self.style
        real = self.value_el(fd, self.display(fd), moved=True)
        decoy_value = self.data["decoy"].get(fd.name)
        tag, cls = self.mods.old_tag, self.mods.old_classes
        variant = self.mods.decoy_variant % 3
        if variant == 0 and decoy_value is not None:
            decoy = f'<del class="{cls}">{_display(fd, decoy_value, s.fmt)}</del>'
            return f'<div class="{self.c("price-block")}">{decoy} {real}</div>'
        if variant == 1 and decoy_value is not None:
            decoy = (
                f'<{tag} class="{cls}"><span class="{self.c("lbl")}">Was</span> '
                f"{_display(fd, decoy_value, s.fmt)}</{tag}>"
            )
            return (
                f'<div class="{self.c("price-block")}"><div class="{self.c("now")}">{real}</div>{decoy}</div>'
            )
        rel = self.data["related"][0]
        heading = RELATED_HEADINGS[self.kind.name][
            (s.related_heading + 1) % len(RELATED_HEADINGS[self.kind.name])
        ]
        teaser = (
            f'<div class="{self.c("teaser")}"><h3>{heading}</h3><a href="/item/{_digest(str(rel))[:6]}">'
            f"{next(iter(rel.values()))}</a> "
            f'<{tag} class="{cls}">{_display(fd, rel[fd.name], s.fmt)}</{tag}></div>'
        )
        return f'{teaser}<div class="{self.c("headline-price")}">{real}</div>'

    def facts(self) -> str:
        s = self.style
        rows: list[tuple[str, str, FieldDef | None]] = []
        for fd in _role_fields(self.kind, "fact"):
            if fd.name not in self.mods.removed:
                rows.append((self.label(fd), self.display(fd, inline=s.facts == "inline"), fd))
        for label, value in self.data["noise_facts"][: 1 + s.noise]:
            rows.append((label, value, None))
        order = [i for i in s.fact_order if i < len(rows)] + [
            i for i in range(len(rows)) if i not in s.fact_order
        ]
        rows = [rows[i] for i in order]
        if not rows:
            return ""
        out: list[str] = []
        for label, value, fd in rows:
            v = (
                self.value_el(fd, value, tag=self.fact_tag())
                if fd
                else f'<{self.fact_tag()} class="{self.c("fact-value")}">{value}</{self.fact_tag()}>'
            )
            if s.facts == "dl":
                v = (
                    self.value_el(fd, value, tag="dd")
                    if fd
                    else f'<dd class="{self.c("fact-value")}">{value}</dd>'
                )
                out.append(f'<dt class="{self.c("fact-label")}">{label}</dt>{v}')
            elif s.facts == "table":
                v = self.value_el(fd, value, tag="td") if fd else f"<td>{value}</td>"
                out.append(f'<tr><th scope="row">{label}</th>{v}</tr>')
            elif s.facts == "ul":
                label_el = f'<span class="{self.c("fact-label")}">{label}:</span>'
                out.append(f'<li class="{self.c("fact")}">{label_el} {v}</li>')
            elif s.facts == "divs":
                out.append(
                    f'<div class="{self.c("fact")}"><div class="{self.c("fact-label")}">{label}</div>'
                    f'<div class="{self.c("fact-body")}">{self.wrap(v, s.wrappers)}</div></div>'
                )
            else:
                inline_label = "" if fd and fd.unit and fd.unit in value else f"{label}: "
                out.append(f"<li>{inline_label}{v}</li>" if not fd else f"<li>{inline_label}{v}</li>")
        tag = {"dl": "dl", "table": "table", "ul": "ul", "divs": "div", "inline": "ul"}[s.facts]
        body = "".join(out)
        if tag == "table":
            body = f"<tbody>{body}</tbody>"
        title = ("Details", "Key facts", "Overview", "Specifications")[s.vocab % 4]
        heading = f'<h2 class="{self.c("section-title")}">{title}</h2>'
        facts = f'<{tag} class="{self.c("facts")}">{body}</{tag}>'
        return f'<section class="{self.c("facts-section")}">{heading}{facts}</section>'

    def fact_tag(self) -> str:
        return {"span": "span", "strong": "strong", "div": "span", "p": "b"}[self.style.value_tag]

    def byline(self) -> str:
        s = self.style
        parts: list[str] = []
        for fd in _role_fields(self.kind, "byline"):
            if fd.name in self.mods.removed:
                continue
            if self.mods.decoy_at_old == fd.name:
                parts.append(self.decoy_piece(fd))
                continue
            text = self.display(fd, inline=True)
            if fd.name in ("published", "review_date"):
                el = self.value_el(fd, text, tag="time")
                el = el.replace("<time", f'<time datetime="{_iso(text)}"', 1)
            elif fd.name in ("author", "reviewer", "company"):
                el = self.value_el(fd, text, tag="a").replace(
                    "<a", f'<a href="/people/{_digest(text)[:6]}"', 1
                )
            else:
                el = self.value_el(fd, text)
            lead = f"{self.label(fd)} " if s.hero_labels or fd.name in ("author", "reviewer") else ""
            if lead and not lead.strip().endswith(("By", "by", "From")):
                lead = f"{self.label(fd)}: "
            parts.append(f'<span class="{self.c("byline-item")}">{lead}{el}</span>')
        order = [i for i in s.byline_order if i < len(parts)] + [
            i for i in range(len(parts)) if i not in s.byline_order
        ]
        parts = [parts[i] for i in order]
        if not parts:
            return ""
        sep = f' <span class="{self.c("sep")}">·</span> '
        return f'<div class="{self.c("byline")}">{sep.join(parts)}</div>'

    def description(self) -> str:
        texts = self.data["texts"][: 1 + self.style.noise]
        body = "".join(f"<p>{t}</p>" for t in texts)
        title = ("Description", "About", "Details", "Summary")[self.style.noise % 4]
        return f'<section class="{self.c("description")}"><h2>{title}</h2>{body}</section>'

    def related(self) -> str:
        s = self.style
        items = self.data["related"]
        heading = ""
        if s.related_heading >= 0:
            heads = RELATED_HEADINGS[self.kind.name]
            heading = f"<h2>{heads[s.related_heading % len(heads)]}</h2>"
        cards: list[str] = []
        for i, item in enumerate(items):
            cells: list[str] = []
            for fname in self.kind.card_fields:
                fd = next(f for f in self.kind.fields if f.name == fname)
                text = _display(fd, item[fname], s.fmt, inline=True)
                slug = _slug(fd, s.vocab)
                cls = self.c(slug) if not s.card_vocab else self.c(f"{s.card_vocab}-{slug}")
                if fd.role == "title":
                    link_cls = self.c((s.card_vocab or "card") + "-link")
                    href = f"/item/{i}-{_digest(text)[:5]}"
                    cells.append(f'<a href="{href}" class="{link_cls}"><h3 class="{cls}">{text}</h3></a>')
                else:
                    cells.append(f'<span class="{cls}">{text}</span>')
            card_cls = self.c(s.card_vocab or "card")
            content = f'<img src="/img/{i}.jpg" alt="">' + "".join(cells)
            if s.related_markup == "table":
                cards.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
            elif s.related_markup == "divs":
                cards.append(f'<div class="{card_cls}">{content}</div>')
            else:
                cards.append(f'<li class="{card_cls}">{content}</li>')
        if s.related_markup == "table":
            body = f'<table class="{self.c("related-list")}"><tbody>{"".join(cards)}</tbody></table>'
        elif s.related_markup == "divs":
            body = f'<div class="{self.c("grid")}">{"".join(cards)}</div>'
        else:
            body = f'<ul class="{self.c("grid")}">{"".join(cards)}</ul>'
        tag = "aside" if s.related_layout == "aside" else "section"
        return f'<{tag} class="{self.c("more")}">{heading}{body}</{tag}>'

    def jsonld(self) -> str:
        doc: dict[str, Any] = {
            "@context": "https://schema.org",
            "@type": self.kind.itemtype.rsplit("/", 1)[-1],
        }
        for fd in self.kind.fields:
            if not fd.ld or fd.name in self.mods.removed:
                continue
            node = doc
            for key in fd.ld[:-1]:
                node = node.setdefault(key, {})
            value = self.values[fd.name]
            node[fd.ld[-1]] = value
        return f'<script type="application/ld+json">{json.dumps(doc)}</script>'

    def page(self) -> str:
        s, kind = self.style, self.kind
        site = SITE_NAMES[PAGE_KINDS.index(kind.name) % len(SITE_NAMES)]
        title_fd = next(f for f in kind.fields if f.role == "title")
        head = [f"<title>{self.values[title_fd.name]} | {site}</title>", '<meta charset="utf-8">']
        if s.og:
            head.append(f'<meta property="og:title" content="{self.values[title_fd.name]}">')
            for fd in kind.fields:
                if fd.type == "price" and fd.name not in self.mods.removed:
                    head.append(f'<meta property="product:price:amount" content="{self.values[fd.name]}">')
        if s.jsonld:
            head.append(self.jsonld())
        head.append("<style>.x{color:red}</style>")
        nav = "".join(
            f'<li><a href="/{w.lower()}">{w}</a></li>'
            for w in ("Home", "Deals", "New", "Help", "Stores")[: 2 + s.noise]
        )
        header = (
            f'<header class="{self.c("site-header")}"><a class="{self.c("logo")}" href="/">{site}</a>'
            f'<nav class="{self.c("nav")}"><ul>{nav}</ul></nav>'
            f'<a class="{self.c("cart")}" href="/cart">'
            f"Cart (<span>{(len(site) % 4) + s.noise}</span>)</a></header>"
        )
        promo = f'<div class="{self.c("promo")}">{self.data["promo"]}</div>'
        crumbs = (
            f'<ol class="{self.c("breadcrumb")}"><li><a href="/">Home</a></li>'
            f'<li><a href="/c">{self.data["brand"]}</a></li>'
            f"<li>{self.values[title_fd.name][:24]}</li></ol>"
        )
        blocks = {
            "title": self.title(),
            "byline": self.byline(),
            "hero": self.hero(),
            "facts": self.facts(),
            "desc": self.description(),
        }
        order = {
            "classic": ("title", "byline", "hero", "facts", "desc"),
            "sidebar": ("title", "byline", "facts", "desc"),
            "top": ("hero", "title", "byline", "desc", "facts"),
        }[s.layout]
        main_inner = crumbs + "".join(blocks[k] for k in order)
        if s.microdata != "none":
            main_inner = f'<div itemscope itemtype="{kind.itemtype}">{main_inner}</div>'
        main = f'<main class="{self.c("main")}">{main_inner}</main>'
        if s.layout == "sidebar":
            main = (
                f'<div class="{self.c("layout")}">{main}<aside class="{self.c("buy-box")}">{blocks["hero"]}'
                f"</aside></div>"
            )
        related = self.related()
        footer = (
            f'<footer class="{self.c("footer")}"><p>© {2020 + s.noise} {site}. All rights reserved.</p>'
            f'<p>Call us: 1-800-{555 + s.noise}-0199</p><ul><li><a href="/about">About</a></li>'
            f'<li><a href="/careers">Careers (12 open roles)</a></li></ul></footer>'
        )
        body = header + promo + main + related + footer
        return f'<!DOCTYPE html><html lang="en"><head>{"".join(head)}</head><body>{body}</body></html>'


def _iso(text: str) -> str:
    match = re.search(r"(\w+) (\d+), (\d{4})", text)
    if not match:
        return "2024-01-01"
    month = MONTHS.index(match.group(1)) + 1 if match.group(1) in MONTHS else 1
    return f"{match.group(3)}-{month:02d}-{int(match.group(2)):02d}"


# -- the contract author's selector -----------------------------------------------------------------------

_MARK = re.compile(r' data-hc="[^"]*"')


def _strip_marks(html: str) -> str:
    return _MARK.sub("", html)


def _author_forms(el: Any, pref: str) -> list[str]:
    tag = el.tag
    classes = (el.get("class") or "").split()
    parent = el.getparent()
    pclasses = (parent.get("class") or "").split() if parent is not None else []
    forms: list[str] = []
    if pref == "id" and el.get("id"):
        forms.append(f"#{el.get('id')}")
    elif pref == "testid" and el.get("data-testid"):
        forms.append(f'[data-testid="{el.get("data-testid")}"]')
    elif pref == "itemprop" and el.get("itemprop"):
        forms.append(f'[itemprop="{el.get("itemprop")}"]')
    elif pref == "class" and classes:
        forms += [f".{classes[0]}", f"{tag}.{classes[0]}"]
        if pclasses:
            forms.append(f".{pclasses[0]} .{classes[0]}")
    elif pref == "tagclass" and classes:
        forms.append(f"{tag}.{classes[0]}")
        if pclasses:
            forms.append(f".{pclasses[0]} {tag}.{classes[0]}")
    elif pref == "child" and parent is not None:
        own = f"{tag}.{classes[0]}" if classes else tag
        forms.append(f"{parent.tag}.{pclasses[0]} > {own}" if pclasses else f"{parent.tag} > {own}")
        grand = parent.getparent()
        if grand is not None and (grand.get("class") or "").split():
            forms.append(f".{grand.get('class').split()[0]} > {parent.tag} > {own}")
    elif pref == "path":
        own = f".{classes[0]}" if classes else tag
        anc = [a for a in el.iterancestors() if a.tag in ("main", "aside", "section", "article")]
        for a in anc:
            acls = (a.get("class") or "").split()
            forms.append(f"{a.tag}.{acls[0]} {own}" if acls else f"{a.tag} {own}")
        mid = pclasses[0] if pclasses else None
        if mid and anc:
            forms.insert(0, f"{anc[-1].tag} .{mid} {own}")
    elif pref == "label":
        prev = el.getprevious()
        text = normalise(prev.text_content()) if prev is not None else ""
        if prev is not None and text and '"' not in text:
            forms.append(f'//{prev.tag}[normalize-space(.)="{text}"]/following-sibling::{tag}[1]')
        if parent is not None and parent.tag in ("td", "dd", "div") and parent.getprevious() is not None:
            ptext = normalise(parent.getprevious().text_content())
            if ptext and '"' not in ptext:
                label_tag = parent.getprevious().tag
                forms.append(
                    f'//{label_tag}[normalize-space(.)="{ptext}"]/following-sibling::{parent.tag}[1]/{tag}'
                )
    elif pref == "positional":
        forms += _positional_paths(el)
    elif pref == "text" and classes and len(el) == 0:
        forms.append(f".{classes[0]}::text")
    return forms


def normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text or "").strip()


def _positional_paths(el: Any) -> list[str]:
    steps: list[str] = []
    cur = el
    out: list[str] = []
    for _ in range(6):
        parent = cur.getparent()
        if parent is None:
            break
        same = [c for c in parent if c.tag == cur.tag]
        steps.insert(0, f"{cur.tag}:nth-of-type({same.index(cur) + 1})")
        pcls = (parent.get("class") or "").split()
        if parent.get("id") or pcls:
            anchor = f"#{parent.get('id')}" if parent.get("id") else f".{pcls[0]}"
            out.append(f"{anchor} > " + " > ".join(steps))
        if parent.tag == "body":
            out.append("body > " + " > ".join(steps))
            break
        cur = parent
    return out


def _author_selector(marked_html: str, name: str, prefs: Sequence[str]) -> str:
    tree = lxml_html.fromstring(marked_html)
    found = tree.xpath(f'//*[@data-hc="{name}"]')
    if len(found) != 1:
        raise ValueError(f"field {name!r} rendered {len(found)} times")
    el = found[0]
    root = parse_html(marked_html)
    for pref in (*prefs, "class", "testid", "id", "itemprop", "tagclass", "child", "label", "positional"):
        for form in _author_forms(el, pref):
            try:
                nodes = select(root, form.replace("::text", ""))
            except Exception:  # noqa: BLE001 - an author's typo is simply not chosen
                continue
            if len(nodes) == 1 and nodes[0].root.get("data-hc") == name:
                return form
    raise ValueError(f"no author selector for {name!r}")


# -- change kinds -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Change:
    after_style: Style
    after_data: dict[str, Any]
    prefs: tuple[str, ...]
    mods: Mods = Mods()
    targeted: tuple[str, ...] = ()
    refuse: tuple[str, ...] = ()  # still on the page, but no heal may return it (its value broke the rules)


class _NotApplicable(Exception):
    """This change kind needs something this page kind lacks (a contract change limit, a decoy value)."""


def _shuffled(rng: random.Random, order: tuple[int, ...]) -> tuple[int, ...]:
    if len(order) < 2:
        return order
    new = list(order)
    while tuple(new) == order:
        rng.shuffle(new)
    return tuple(new)


def _change_values(
    rng: random.Random, kind: KindDef, data: dict[str, Any], names: Sequence[str]
) -> dict[str, Any]:
    values = dict(data["values"])
    for fd in kind.fields:
        if fd.name not in names:
            continue
        v = values[fd.name]
        limit = fd.rules.get("max_change_pct", 50) / 100.0
        if fd.type == "price":
            factor = 1 + rng.choice((-1, 1)) * rng.uniform(0.03, 0.8 * limit)
            values[fd.name] = (
                round(v * factor, 2)
                if not float(v).is_integer()
                else float(round(v * factor, -2 if v > 10_000 else 0))
            )
        elif fd.type == "number":
            values[fd.name] = round(min(5.0, max(1.0, v + rng.choice((-0.3, -0.2, -0.1, 0.1, 0.2)))), 1)
        elif fd.type == "integer":
            if fd.name in ("year_built",):
                continue
            delta = max(1, int(v * rng.uniform(0.05, 0.3)))
            values[fd.name] = v + delta if fd.name != "seats_left" else max(1, v - delta)
        elif fd.type == "boolean":
            values[fd.name] = not v if rng.random() < 0.3 else v
        elif fd.role == "title" and rng.random() < 0.3:
            values[fd.name] = f"{v} ({rng.choice(('Updated', '2025 Edition', 'Reduced', 'Remote OK'))})"
    return {**data, "values": values}


def _restyle(rng: random.Random, style: Style) -> Style:
    """A full redesign: new vocabulary, naming, ids, markup, order and layout; the data stays."""
    return replace(
        style,
        vocab=(style.vocab + rng.randint(1, 3)) % 4,
        naming=rng.choice(("semantic", "bem", "hashed", "utility")),
        salt=style.salt + "r",
        ids=rng.choice(("none", "semantic", "random")),
        id_vocab=(style.id_vocab + 1) % 4,
        testids=style.testids if rng.random() < 0.6 else not style.testids,
        testid_vocab=style.testid_vocab,
        microdata=rng.choice(("none", "inline", "meta")),
        jsonld=rng.random() < 0.5,
        og=rng.random() < 0.5,
        facts=rng.choice([f for f in ("dl", "table", "ul", "divs", "inline") if f != style.facts]),
        hero_labels=not style.hero_labels,
        labels=rng.choice((0, 1, 2)),
        wrappers=rng.choice((0, 1, 2)),
        fact_order=_shuffled(rng, style.fact_order),
        hero_order=_shuffled(rng, style.hero_order),
        byline_order=_shuffled(rng, style.byline_order),
        value_tag=rng.choice([t for t in ("span", "strong", "div", "p") if t != style.value_tag]),
        layout=rng.choice([x for x in ("classic", "sidebar", "top") if x != style.layout]),
        related_markup=rng.choice(("ul", "divs", "table")),
        block=rng.choice(("pdp", "listing", "detail", "page")),
        card_vocab=rng.choice(("card", "tile", "teaser")),
        title_wrap=not style.title_wrap,
    )


def _make_change(
    change: str, rng: random.Random, kind: KindDef, data: dict[str, Any], before: Style
) -> tuple[Style, Change]:
    """(before style adjusted so the author's selector depends on what changes, the change)."""
    structural = ("renamed_ids", "hashed_classes", "changed_tags", "moved_section")
    if change == "renamed_ids":
        before = replace(before, ids="semantic")
        after = replace(
            before, ids=rng.choice(("random", "semantic")), id_vocab=before.id_vocab + rng.randint(1, 3)
        )
        return before, Change(after, data, ("id",))
    if change == "hashed_classes":
        before = replace(before, naming=rng.choice(("semantic", "bem")))
        return before, Change(
            replace(before, naming="hashed", salt=before.salt + "h"), data, ("class", "tagclass")
        )
    if change == "inserted_wrappers":
        before = replace(before, wrappers=0, naming=rng.choice(("semantic", "bem")))
        return before, Change(replace(before, wrappers=rng.choice((1, 2))), data, ("child",))
    if change == "reordered_siblings":
        before = replace(before, naming=rng.choice(("semantic", "bem", "hashed")))
        after = replace(
            before,
            fact_order=_shuffled(rng, before.fact_order),
            hero_order=_shuffled(rng, before.hero_order),
            byline_order=_shuffled(rng, before.byline_order),
        )
        return before, Change(after, data, ("positional",))
    if change == "changed_tags":
        before = replace(before, naming=rng.choice(("semantic", "bem")))
        after = replace(
            before,
            value_tag=rng.choice([t for t in ("span", "strong", "div", "p") if t != before.value_tag]),
            facts=rng.choice([f for f in ("dl", "table", "ul", "divs") if f != before.facts]),
        )
        return before, Change(after, data, ("tagclass", "child"))
    if change == "moved_section":
        before = replace(before, naming=rng.choice(("semantic", "bem")))
        layouts = [x for x in ("classic", "sidebar", "top") if x != before.layout]
        after = replace(
            before,
            layout=rng.choice(layouts),
            wrappers=before.wrappers + rng.choice((0, 1)),
            related_layout="aside" if before.related_layout == "after" else "after",
        )
        return before, Change(after, data, ("path", "child"))
    if change == "reworded_labels":
        before = replace(before, labels=0, hero_labels=True, facts=rng.choice(("dl", "table", "ul", "divs")))
        after = replace(before, labels=rng.randint(1, 3))
        if rng.random() < 0.5:
            after = replace(after, naming="hashed", salt=before.salt + "w")
        return before, Change(after, data, ("label", "positional"))
    if change == "value_changed":
        sub = rng.choice(structural)
        before, inner = _make_change(sub, rng, kind, data, before)
        names = [f.name for f in kind.fields]
        return before, replace(inner, after_data=_change_values(rng, kind, data, names))
    if change == "decoy_at_old":
        name = kind.decoy_field or "comment_count"
        before = replace(before, naming=rng.choice(("semantic", "bem")), old_price=False, wrappers=0)
        after_data = _change_values(rng, kind, data, [name]) if rng.random() < 0.5 else data
        fd = next(f for f in kind.fields if f.name == name)
        tag = before.value_tag if fd.role == "hero" else "span"
        mods = Mods(
            decoy_at_old=name,
            decoy_variant=rng.randrange(3),
            old_classes=_cls(before, _slug(fd, before.vocab)),
            old_tag=tag,
        )
        if not data["decoy"].get(name):
            mods = replace(mods, decoy_variant=2)
        return before, Change(before, after_data, ("class",), mods, (name,))
    if change == "removed_field":
        candidates = [f.name for f in kind.fields if f.role != "title"]
        name = rng.choice(candidates)
        after, prefs = before, ("class", "id", "testid", "label")
        if rng.random() < 0.5:
            before, inner = _make_change(rng.choice(structural), rng, kind, data, before)
            after, prefs = inner.after_style, inner.prefs
        return before, Change(after, data, prefs, Mods(removed=frozenset({name})), (name,))
    if change == "redesign":
        return before, Change(
            _restyle(rng, before), data, (rng.choice(("class", "id", "path", "positional", "label")),)
        )
    if change == "decoy_only":
        name = kind.decoy_field or rng.choice([f.name for f in kind.fields if f.role == "byline"])
        before = replace(before, related_heading=before.related_heading if before.related_heading >= 0 else 0)
        after = replace(before, old_price=before.old_price or rng.random() < 0.5)
        return before, Change(after, data, ("class", "id", "path"), Mods(removed=frozenset({name})), (name,))
    if change == "value_beyond_limit":
        # the value moved past max_change_pct: a data change for review, never something to heal around
        candidates = [f for f in kind.fields if "max_change_pct" in f.rules]
        if not candidates:
            raise _NotApplicable(change)
        fd = rng.choice(candidates)
        values = dict(data["values"])
        limit = fd.rules["max_change_pct"] / 100.0
        factor = rng.choice((1 - min(0.9, limit + rng.uniform(0.1, 0.3)), 1 + limit + rng.uniform(0.1, 0.6)))
        values[fd.name] = round(values[fd.name] * factor, 2)
        after, prefs = before, ("class", "id", "testid")
        if rng.random() < 0.5:
            before, inner = _make_change(rng.choice(structural), rng, kind, data, before)
            after, prefs = inner.after_style, inner.prefs
        after_data = {**data, "values": values}
        return before, Change(after, after_data, prefs, targeted=(fd.name,), refuse=(fd.name,))
    if change == "duplicate_matches":
        before = replace(
            before, naming=rng.choice(("semantic", "bem")), card_vocab=rng.choice(("card", "tile"))
        )
        return before, Change(replace(before, card_vocab=""), data, ("class",))
    raise ValueError(f"unknown change kind {change!r}")


# -- building cases ---------------------------------------------------------------------------------------


def _field_spec(fd: FieldDef, selector: str, before_value: Any, data: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"selector": selector, "before": before_value, "type": fd.type}
    for key in ("min", "max", "max_change_pct"):
        if key in fd.rules:
            spec[key] = fd.rules[key]
    if fd.name == "sku":
        spec["expected"] = data["values"]["sku"]
    return spec


def _read(html: str, name: str, fd: FieldDef) -> Any:
    nodes = select(parse_html(html), f'[data-hc="{name}"]')
    if len(nodes) != 1:
        return REFUSE
    return parse_value(node_text(nodes[0]), fd.type)


def _triggered(after_html: str, spec: dict[str, Any]) -> bool:
    """Would the pipeline call the healer: no match, several values, unparseable, or a rule violation."""
    try:
        texts = [node_text(n) for n in select(parse_html(after_html), spec["selector"])]
    except Exception:  # noqa: BLE001
        return True
    texts = [t for t in texts if t]
    if not texts or len(set(texts)) > 1:
        return True
    try:
        value = parse_value(texts[0], spec["type"])
    except ValueParseError:
        return True
    if "expected" in spec and value != spec["expected"]:
        return True
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "min" in spec and value < spec["min"] or "max" in spec and value > spec["max"]:
            return True
        before = spec["before"]
        if "max_change_pct" in spec and before:
            if abs(value - before) / abs(before) * 100 > spec["max_change_pct"]:
                return True
    return False


def build_case(kind_name: str, change: str, seed: int) -> HealCase | None:
    rng = random.Random(f"{kind_name}/{change}/{seed}")
    kind = KINDS[kind_name]
    data = kind.make(rng)
    try:
        before_style, ch = _make_change(change, rng, kind, data, _random_style(rng, kind))
    except _NotApplicable:
        return None
    before_marked = _Renderer(kind, data, before_style, Mods()).page()
    after_marked = _Renderer(kind, ch.after_data, ch.after_style, ch.mods).page()
    before_html, after_html = _strip_marks(before_marked), _strip_marks(after_marked)
    fields: dict[str, dict[str, Any]] = {}
    expected: dict[str, Any] = {}
    for fd in kind.fields:
        prefs = ch.prefs
        if rng.random() < 0.15:
            prefs = ("text", *prefs)
        selector = _author_selector(before_marked, fd.name, prefs)
        before_value = _read(before_marked, fd.name, fd)
        spec = _field_spec(fd, selector, before_value, data)
        if fd.name not in ch.targeted and not _triggered(after_html, spec):
            continue
        fields[fd.name] = spec
        expected[fd.name] = REFUSE if fd.name in ch.refuse else _read(after_marked, fd.name, fd)
    if not fields:
        return None
    return HealCase(
        f"{kind_name}-{change}-{seed}",
        kind_name,
        change,
        before_html,
        after_html,
        fields,
        expected,
        ch.targeted,
    )


def build_cases(
    seeds: Sequence[int] = range(4), kinds: Sequence[str] = PAGE_KINDS, changes: Sequence[str] = CHANGE_KINDS
) -> list[HealCase]:
    """The suite: every page kind x change kind x seed that yields at least one field to heal."""
    cases = []
    for kind in kinds:
        for change in changes:
            for seed in seeds:
                case = build_case(kind, change, seed)
                if case is not None:
                    cases.append(case)
    return cases
