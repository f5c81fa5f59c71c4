"""Random page content: brands, streets, people, companies, topics, related-section headings."""

from __future__ import annotations

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
