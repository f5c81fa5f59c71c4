"""Element fingerprints: what an element is as a value source (tag, names, label, ancestors, siblings,
position), and how alike two fingerprints are."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from lxml import etree

from scrape_contracts.engine.heal.labels import label_of, label_similarity
from scrape_contracts.engine.heal.names import class_words, is_unstable_token, semantic_of, stable_id
from scrape_contracts.engine.heal.policy import SimilarityWeights
from scrape_contracts.engine.heal.vocabulary import (
    SEMANTIC_TAGS,
    TAG_FAMILY,
    content_words,
    jaccard,
    weighted_jaccard,
    words_of,
)

if TYPE_CHECKING:
    from scrape_contracts.engine.heal.page import Page

ARIA_NAME_CHARS = 30  # a longer aria-label is a sentence, not a name
RARE_TAG_COUNT = 2  # an h1/time/address occurring at most this often identifies its element


@dataclass(frozen=True)
class Fingerprint:
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


def fingerprint_to_json(fp: Fingerprint) -> dict[str, Any]:
    """A compact, JSON-serialisable form (short keys; sets sorted so equal fingerprints store equal)."""
    return {
        "t": fp.tag, "f": fp.family, "s": fp.src, "i": fp.id, "c": sorted(fp.classes),
        "ct": sorted(fp.class_tokens), "a": sorted([a, v] for a, v in fp.sem), "n": sorted(fp.name_tokens),
        "l": fp.label, "p": {k: round(v, 3) for k, v in sorted(fp.anc.items())}, "b": sorted(fp.sib),
        "o": round(fp.pos, 4), "r": fp.tag_rare,
    }


def fingerprint_from_json(raw: Mapping[str, Any]) -> Fingerprint:
    return Fingerprint(
        tag=str(raw["t"]), family=str(raw["f"]), src=str(raw["s"]), id=raw.get("i"),
        classes=frozenset(raw["c"]), class_tokens=frozenset(raw["ct"]),
        sem=frozenset((str(a), str(v)) for a, v in raw["a"]), name_tokens=frozenset(raw["n"]),
        label=str(raw["l"]), anc={str(k): float(v) for k, v in raw["p"].items()}, sib=frozenset(raw["b"]),
        pos=float(raw["o"]), tag_rare=bool(raw["r"]),
    )


def fingerprint_of(page: Page, el: etree._Element, src: str) -> Fingerprint:
    """The fingerprint of ``el`` read as ``src`` ("text" or "attr:<name>"), cached on the page."""
    key = (el, src)
    if key not in page.fingerprints:
        page.fingerprints[key] = _fingerprint(page, el, src)
    return page.fingerprints[key]


def _fingerprint(page: Page, el: etree._Element, src: str) -> Fingerprint:
    classes, own_id, sem, class_tokens, name_tokens = _names(tuple(el.attrib.items()))
    anc = _ancestry(page, el.getparent())
    sib = _as_sibling(page, el.getprevious()) | _as_sibling(page, el.getnext())
    label = label_of(page, el) if src == "text" else ""
    return Fingerprint(
        tag=el.tag,
        family=TAG_FAMILY.get(el.tag, el.tag),
        src=src,
        id=own_id,
        classes=classes,
        class_tokens=class_tokens,
        sem=sem,
        name_tokens=name_tokens,
        label=label,
        anc=anc,
        sib=sib,
        pos=page.pos(el),
        tag_rare=el.tag in SEMANTIC_TAGS and page.tag_count(el.tag) <= RARE_TAG_COUNT,
    )


@lru_cache(maxsize=1 << 14)  # pure; elements with the same attributes abound (and recur page after page)
def _names(attributes: tuple[tuple[str, str], ...]
           ) -> tuple[frozenset[str], str | None, frozenset[tuple[str, str]], frozenset[str], frozenset[str]]:
    """(stable classes, stable id, naming attributes, class words, name words) of an element with these
    attributes: the part of its fingerprint that its attributes alone decide."""
    named = dict(attributes)
    class_attr = named.get("class") or ""
    classes = frozenset(c for c in class_attr.split() if not is_unstable_token(c))
    own_id = stable_id(named.get("id"))
    sem = semantic_of(attributes)
    names = " ".join(
        [*classes, own_id or "", *(v for a, v in sem if a != "aria-label" or len(v) < ARIA_NAME_CHARS)]
    )
    return classes, own_id, sem, class_words(class_attr), content_words(names)


def _as_sibling(page: Page, other: etree._Element | None) -> frozenset[str]:
    """What ``other`` tells about the elements beside it: its tag, classes, and words of a short text."""
    if other is None or not isinstance(other.tag, str):
        return frozenset()
    cached = page.as_sibling.get(other)
    if cached is None:
        tokens = {f"t:{other.tag}", *(f"c:{c}" for c in page.classes(other))}
        text = page.text.get(other, "")
        if len(text) <= page.policy.similarity.sibling_text:
            tokens.update(f"w:{w}" for w in content_words(text))
        cached = page.as_sibling[other] = frozenset(tokens)
    return cached


def _ancestry(page: Page, parent: etree._Element | None) -> dict[str, float]:
    """Tokens of the ancestors from ``parent`` up, each at the weight of its nearest occurrence: the same
    for every child of ``parent`` (computed once per parent; never mutated)."""
    cached = page.ancestries.get(parent)
    if cached is None:
        weights = page.policy.similarity
        cached = {}
        node = parent
        depth = 0
        while node is not None and depth < weights.ancestor_depth and node.tag != "html":
            weight = 1.0 / (1.0 + weights.ancestor_decay * depth)
            for token in page.node_tokens(node):
                if cached.get(token, 0.0) < weight:
                    cached[token] = weight
            node = node.getparent()
            depth += 1
        page.ancestries[parent] = cached
    return cached


def similarity(a: Fingerprint, b: Fingerprint, w: SimilarityWeights) -> float:
    """Fingerprint similarity in [0, 1]; components absent on both sides do not count."""
    # one running sum, no helper calls: this runs for every candidate against every target and twin
    num = w.tag * (1.0 if a.tag == b.tag else w.same_family if a.family == b.family else 0.0)
    den = w.tag
    if a.tag_rare or b.tag_rare:
        num += w.rare_tag * (1.0 if a.tag == b.tag else 0.0)
        den += w.rare_tag
    # names count only when both sides have one: a hashed or missing name is unknown, not different;
    # exact class names and class words weigh half each
    if (a.classes or a.class_tokens) and (b.classes or b.class_tokens):
        num += w.names * (0.5 * jaccard(a.classes, b.classes) + 0.5 * jaccard(a.class_tokens, b.class_tokens))
        den += w.names
    if a.id and b.id:
        num += w.id * (1.0 if a.id == b.id else jaccard(frozenset(words_of(a.id)), frozenset(words_of(b.id))))
        den += w.id
    if a.sem and b.sem:
        num += w.semantic_attrs * jaccard(a.sem, b.sem)
        den += w.semantic_attrs
    if a.label or b.label:
        num += w.label * label_similarity(a.label, b.label, w.label_trigrams)
        den += w.label
    num += w.ancestors * weighted_jaccard(a.anc, b.anc)
    den += w.ancestors
    if a.sib or b.sib:
        num += w.siblings * jaccard(a.sib, b.sib)
        den += w.siblings
    num += w.position * max(0.0, 1.0 - w.position_slope * abs(a.pos - b.pos))
    den += w.position
    num += w.source * (1.0 if a.src == b.src else 0.0)
    den += w.source
    return num / den if den else 0.0
