"""Field definitions per page kind, how values are shown, and the random data of each page kind."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from scrape_contracts.testing.mutations.words import (
    ACTS,
    BRANDS,
    CITIES,
    COMPANIES,
    FIRST,
    JOB_TITLES,
    LAST,
    MODEL_WORDS,
    MONTHS,
    OBJECTS,
    PRODUCTS,
    STREET_KINDS,
    STREETS,
    TOPICS,
    VENUES,
    VERBS,
)


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


def display_text(fd: FieldDef, value: Any, fmt: int, inline: bool = False) -> str:
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


def make_product(rng: random.Random) -> dict[str, Any]:
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


def make_real_estate(rng: random.Random) -> dict[str, Any]:
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


def make_review(rng: random.Random) -> dict[str, Any]:
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


def make_job(rng: random.Random) -> dict[str, Any]:
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


def make_news(rng: random.Random) -> dict[str, Any]:
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


def make_event(rng: random.Random) -> dict[str, Any]:
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
