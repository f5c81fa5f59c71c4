"""The healer's vocabulary: which tags, attributes and words mean what, and how words are compared.

Everything here is data about HTML and about how sites name things; nothing weighs evidence (that is
``policy.py``). Keyword lists are English, with the field words of German, French and Spanish labels
(accents folded: "Verfügbarkeit" is read as "verfugbarkeit").
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping
from functools import lru_cache

NUMERIC = frozenset({"number", "integer", "price"})
DATED = frozenset({"date", "datetime"})  # read out of a longer text, like a number
# the two dates of a post or a listing, which the "date" synonyms do not tell apart
CREATED_WORDS = frozenset("published posted created written datepublished datecreated veroffentlicht publie "
                          "publicado erstellt".split())
CHANGED_WORDS = frozenset("updated modified edited revised changed datemodified aktualisiert modifie "
                          "actualizado".split())
NON_CONTENT = frozenset({"script", "style", "noscript", "template"})
NOT_CANDIDATE = frozenset(
    "html head body script style noscript template svg path br hr img input button select option "
    "textarea iframe link form nav footer header main table tbody thead tr ul ol dl picture "
    "source video audio".split()
)
VALUE_ATTRS = ("content", "datetime", "value")
HEADINGS = frozenset({"h2", "h3", "h4", "h5", "h6"})
LABEL_TAGS = frozenset({"dt", "th", "label", "legend"})
# controls and media say what you can do, not what a neighbouring value is; an h1 titles the whole page
NOT_LABEL = frozenset(
    "button a input select textarea img svg br hr script style noscript template iframe video "
    "audio picture h1".split()
)
SEMANTIC_TAGS = frozenset(
    "h1 h2 time address title data output meter caption figcaption blockquote cite del ins s "
    "strike mark".split()
)
TAG_FAMILY = {
    **dict.fromkeys(
        "span strong b em i small mark data output ins bdi label a time abbr cite sup sub u".split(), "inline"
    ),
    **dict.fromkeys("div p section article aside figure figcaption address blockquote".split(), "block"),
    **dict.fromkeys("h1 h2 h3 h4 h5 h6".split(), "heading"),
    **dict.fromkeys("td th dd dt li".split(), "cell"),
    "meta": "meta",
}

# Attributes that name what an element is (as opposed to how it looks).
SEMANTIC_ATTRS = frozenset(
    "itemprop data-testid data-test data-qa data-cy data-field data-name data-role data-type data-key "
    "data-label data-element data-component name property aria-label role for headers rel".split()
)
# link types that say how to follow a link, not what it leads to: rel="next" names the next page, a
# rel="noopener" names nothing
REL_HOW = frozenset("noopener noreferrer nofollow external ugc sponsored opener".split())
STRONG_ANCHOR_ATTRS = frozenset(
    "itemprop data-testid data-test data-qa data-cy data-field data-name data-key data-element "
    "name property id".split()
)

STOP = frozenset(
    "value val text txt item items field label info detail details data main content wrapper wrap "
    "container box block inner outer row col column section group list el elem element component "
    "root primary secondary big small large lg sm md xs xl bold strong the a an of per and or to "
    "in at on for is it this js ui c l m card meta line span div display fmt formatted x is has "
    "num no page module widget cell key summary overview v k attr prop entry product listing pdp "
    "og de le la el del des du am ab".split()
)

# Field vocabulary: a label or attribute saying "Beds" is evidence for a field named "bedrooms".
SYNONYM_GROUPS: tuple[frozenset[str], ...] = tuple(
    frozenset(g.split())
    for g in (
        # English first, then German, French and Spanish label words (folded, singular)
        "price cost amount pricing offer now current sale our preis prix precio kosten tarif",
        "bedroom bed br bd sleep schlafzimmer chambre dormitorio habitacion",
        "bathroom bath ba badezimmer bain bano",
        "area size sqft sq ft square feet footage surface living m2 sqm floorspace wohnflache flache "
        "superficie habitable",
        "year built constructed construction yearbuilt baujahr annee ano construccion",
        "title name headline heading titel titre titulo",
        "author by byline writer reporter creator written von par por autor auteur",
        "date published posted created datetime updated dated datepublished dateposted when datum fecha "
        "veroffentlicht publie publicado bewertet",
        "rating star score rated ratingvalue grade bewertung valoracion calificacion puntuacion",
        "review reviewcount ratingcount vote rezension rezensionen avi resena",
        "company employer organization organisation hiringorganization org firm hiring unternehmen "
        "entreprise empresa firma",
        "location address city where place joblocation venue locality street standort lieu ubicacion "
        "adresse direccion veranstaltungsort salle lugar",
        "salary pay compensation wage basesalary remuneration gehalt salaire salario",
        "stock availability available instock inventory verfugbarkeit lager disponibilite disponibilidad",
        "sku mpn model part ref reference code productid artikelnummer referencia",
        "comment reply discussion response kommentar kommentare comentario",
        "capacity seat remaining left spot platz platze restante plaza libre freie",
        "employment type contract schedule job anstellungsart contrat contrato",
        "read minute min duration length readtime lesezeit lecture lectura",
        "helpful useful hilfreich utile util",
        "reviewer customer user buyer von par por",
        "ticket billet entrada eintritt",
    )
)
SYNONYM_OF: dict[str, frozenset[str]] = {}
for _group in SYNONYM_GROUPS:
    for _word in _group:
        SYNONYM_OF[_word] = SYNONYM_OF.get(_word, frozenset()) | _group
del _group, _word


STRIKE_TAGS = frozenset({"del", "s", "strike"})
# class/id words of crossed-out and "was" prices; generic words ("list", "regular") would flag whole lists
STRIKE_TOKENS = frozenset(
    "old was strike strikethrough crossed crossout compare original msrp rrp previous former "
    "retail srp saving save savings".split()
)
STRIKE_LABEL = re.compile(
    r"\b(was|rrp|msrp|previously|original|regular price|compare at|"
    r"old price|before|save|you save|retail|srp|uvp|instead of)\b",
    re.I,
)
RELATED_TOKENS = frozenset(
    "related recommended recommendation recommend similar also carousel upsell crosssell cross "
    "sponsored suggested suggestion recent recently viewed nearby trending popular promoted "
    "advert ad ads advertisement more others reco recs picks together alternative alternatives "
    "compare comparison teaser teasers outbrain taboola".split()
)
RELATED_HEADING = re.compile(
    r"\b(related|similar|recommend\w*|sponsored|you (?:may|might|could) (?:also )?(?:like|enjoy|want|be)|"
    r"also (?:like|bought|viewed|liked|consider|read)|(?:customers|people|others|shoppers) (?:who|also)|"
    r"more (?:from|like|homes|jobs|events|stories|articles|listings|products|to|in|by|reviews)|"
    r"other (?:\w+ )?(?:products|items|homes|jobs|events|listings|stories|articles|reviews|properties)|"
    r"recently viewed|trending|most (?:read|popular|viewed)|read next|up next|popular|nearby|"
    r"frequently bought|bought together|compare (?:with|to|similar)|picks|don.t miss|also on|"
    r"latest (?:news|stories|articles|jobs|listings)|top stories|suggested|alternatives?)\b",
    re.I,
)
SIDE_TOKENS = frozenset({"sidebar", "aside"})  # names of a page's side column
GENERIC_HEADS = frozenset(
    "count number total amount value qty quantity text name left remaining type id code time date "
    "at flag status".split()
)
FRAMEWORK_WORDS = frozenset(
    "root module styles style styled css sc jsx emotion svelte comp cmp base default".split()
)
CHROME_TOKENS = frozenset(
    "nav navbar navigation menu footer breadcrumb breadcrumbs topbar cookie cookies masthead "
    "sitemap megamenu minicart announcement".split()
)
# a chrome word followed by one of these names a part of the content: "page-nav-content", "menu-body"
CONTENT_HEADS = frozenset("content main body article post entry story text prose column".split())

HASH_PREFIX = re.compile(
    r"^(css|sc|jsx|emotion|svelte|styled|tw|jss|ember|ng-tns|ng-star|_ng|astro|"
    r"chakra|mui-[a-z0-9]{4,}|x-[a-z0-9]{5,})[-_]",
    re.I,
)
# a number not glued to a preceding letter; thousands may be grouped with , . ' or (narrow) spaces
NUMBER_TOKEN = re.compile(r"(?<![\w.])[-+]?\d+(?:[.,'\u202f\u00a0]\d+|\s\d{3}(?!\d))*")
GLUED_NUMBER = re.compile(r"[A-Za-z]\d")
RATING_SCALE = re.compile(r"\d\s*(?:/|out of|of)\s*\d", re.I)
LETTER_WORD = re.compile(r"[A-Za-z]{2,}")
CURRENCY = re.compile(r"[$€£¥₹₩₽]|\b(?:USD|EUR|GBP|CHF|JPY|CAD|AUD|SEK|NOK|DKK|PLN|INR)\b")
ALNUM = re.compile(r"[^\W_]")
DIGIT = re.compile(r"\d")
WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
UTILITY_CLASS = re.compile(
    r"^(?:[a-z]+:|-?(?:m|p)[trblxyse]?-|"
    r"(?:text|font|bg|flex|grid|w|h|min|max|gap|items|justify|rounded|border|"
    r"shadow|leading|tracking|col|row|d|align|order|z|top|left|right|bottom|inset|space|divide|ring|opacity|"
    r"overflow|whitespace|truncate|uppercase|lowercase|hidden|block|inline|absolute|relative|fixed|sticky|"
    r"mt|mb|ml|mr|mx|my|pt|pb|pl|pr|px|py|fs|fw|lh|is|has|js|u|l|o)(?:-|$))"
)


# two words share a stem when one is a prefix of the other, or they share this many leading letters and
# this share of the shorter word
STEM_MIN = 4
STEM_SHARE = 0.6


def fold(text: str) -> str:
    """Accents folded to ASCII letters ("Verfügbarkeit" -> "Verfugbarkeit", "ß" -> "ss")."""
    if text.isascii():
        return text
    text = unicodedata.normalize("NFKD", text.replace("ß", "ss"))
    return "".join(c for c in text if not unicodedata.combining(c))


def words_of(text: str) -> list[str]:
    """Lower-case word tokens; camelCase and kebab/snake parts split; accents folded; crude plural folding."""
    out: list[str] = []
    for raw in WORD.findall(fold(text or "")):
        word = raw.lower()
        if word.isdigit():
            continue
        if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
            word = word[:-1]
        out.append(word)
    return out


@lru_cache(maxsize=1 << 16)  # pure, and the answer is immutable
def content_words(text: str) -> frozenset[str]:
    return frozenset(w for w in words_of(text) if w not in STOP)


def expand_synonyms(tokens: Iterable[str]) -> frozenset[str]:
    out: set[str] = set()
    for token in tokens:
        out.add(token)
        out |= SYNONYM_OF.get(token, frozenset())
    return frozenset(out)

@lru_cache(maxsize=1 << 14)  # pure; labels and values are compared with every candidate's
def trigrams(text: str) -> frozenset[str]:
    padded = f"  {text} "
    return frozenset(padded[i : i + 3] for i in range(len(padded) - 2))


def jaccard(a: frozenset | set, b: frozenset | set) -> float:
    if not a and not b:
        return 0.0
    shared = len(a & b)
    return shared / (len(a) + len(b) - shared)  # the union's size, without building the union


def weighted_jaccard(a: Mapping[str, float], b: Mapping[str, float]) -> float:
    # one pass over each side (the hottest comparison of a heal: every candidate against every target)
    top = bottom = 0.0
    for key, x in a.items():
        y = b.get(key)
        if y is None:
            bottom += x
        elif x < y:
            top += x
            bottom += y
        else:
            top += y
            bottom += x
    for key, y in b.items():
        if key not in a:
            bottom += y
    return top / bottom if bottom else 0.0


@lru_cache(maxsize=1 << 16)  # pure; the same word pairs recur for every candidate
def word_match(x: str, y: str) -> bool:
    """Same word, a synonym, or the same stem ("serves"/"servings", "bed"/"bedroom")."""
    if x == y or y in SYNONYM_OF.get(x, ()):
        return True
    short, long_ = (x, y) if len(x) <= len(y) else (y, x)
    if len(short) < 3:
        return False
    common = 0
    for cx, cy in zip(short, long_):
        if cx != cy:
            break
        common += 1
    return common == len(short) or (common >= STEM_MIN and common >= STEM_SHARE * len(short))


def matching_words(words: Iterable[str], others: Iterable[str]) -> frozenset[str]:
    """The words of ``words`` that match one of ``others`` (``word_match``)."""
    return _matching_words(frozenset(words), frozenset(others))


@lru_cache(maxsize=1 << 14)  # pure; a field's words are matched against the same names again and again
def _matching_words(words: frozenset[str], others: frozenset[str]) -> frozenset[str]:
    return frozenset(w for w in words if any(word_match(w, o) for o in others))


def head_words(name: str) -> tuple[str, ...]:
    """The noun a field name is about: its last word, skipping generic ones (review_count -> review)."""
    words = [w for w in words_of(name.replace("_", " ")) if w not in STOP]
    while len(words) > 1 and words[-1] in GENERIC_HEADS:
        words.pop()
    return tuple(words[-1:])


# words that say a link steps through a sequence (the previous or next post, page or item), in English,
# German, French, Spanish, Italian and Portuguese; sites disagree on which way is "previous" (a blog that
# lists newest first calls the newer post the previous one), so these say only that a link is such a step
SEQUENCE_WORDS = frozenset(words_of(
    "prev previous next older newer earlier vorherige vorheriger nachste nachster neuer neuere altere "
    "alterer zuruck weiter precedent precedente suivant suivante anterior siguiente proximo proxima "
    "successivo successiva"
))
SEQUENCE_RELS = frozenset({"prev", "previous", "next"})
SEQUENCE_ARROWS = frozenset("←→«»‹›⟵⟶⇐⇒⇠⇢<>")
