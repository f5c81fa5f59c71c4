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

# Field labels of a translated site (change kind translated_labels): German, French, Spanish
TRANSLATED_LABELS: dict[str, dict[str, str]] = {
    "price": {"de": "Preis", "fr": "Prix", "es": "Precio"},
    "rating": {"de": "Bewertung", "fr": "Note", "es": "Valoración"},
    "review_count": {"de": "Rezensionen", "fr": "Avis", "es": "Reseñas"},
    "in_stock": {"de": "Verfügbarkeit", "fr": "Disponibilité", "es": "Disponibilidad"},
    "sku": {"de": "Artikelnummer", "fr": "Référence", "es": "Referencia"},
    "bedrooms": {"de": "Schlafzimmer", "fr": "Chambres", "es": "Dormitorios"},
    "bathrooms": {"de": "Badezimmer", "fr": "Salles de bain", "es": "Baños"},
    "area_sqft": {"de": "Wohnfläche", "fr": "Surface habitable", "es": "Superficie"},
    "year_built": {"de": "Baujahr", "fr": "Année de construction", "es": "Año de construcción"},
    "reviewer": {"de": "Von", "fr": "Par", "es": "Por"},
    "review_date": {"de": "Bewertet am", "fr": "Publié le", "es": "Publicado el"},
    "helpful_count": {"de": "Hilfreich", "fr": "Utile", "es": "Útil"},
    "company": {"de": "Unternehmen", "fr": "Entreprise", "es": "Empresa"},
    "location": {"de": "Standort", "fr": "Lieu", "es": "Ubicación"},
    "salary": {"de": "Gehalt", "fr": "Salaire", "es": "Salario"},
    "employment_type": {"de": "Anstellungsart", "fr": "Type de contrat", "es": "Tipo de contrato"},
    "posted": {"de": "Veröffentlicht", "fr": "Publié", "es": "Publicado"},
    "author": {"de": "Von", "fr": "Par", "es": "Por"},
    "published": {"de": "Veröffentlicht", "fr": "Publié le", "es": "Publicado"},
    "comment_count": {"de": "Kommentare", "fr": "Commentaires", "es": "Comentarios"},
    "read_time": {"de": "Lesezeit", "fr": "Temps de lecture", "es": "Tiempo de lectura"},
    "venue": {"de": "Veranstaltungsort", "fr": "Salle", "es": "Lugar"},
    "date": {"de": "Datum", "fr": "Date", "es": "Fecha"},
    "ticket_price": {"de": "Tickets ab", "fr": "Billets dès", "es": "Entradas desde"},
    "seats_left": {"de": "Freie Plätze", "fr": "Places restantes", "es": "Plazas libres"},
}
