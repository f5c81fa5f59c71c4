"""Scoring: each candidate's evidence, one weighted part per signal (weights in ``HealPolicy``)."""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Any

from lxml import etree

from scrape_contracts.engine.extract import ValueParseError
from scrape_contracts.engine.heal.decoys import Flag, distractor_score, flags_of, identity_conflict, stepping
from scrape_contracts.engine.heal.fingerprint import Fingerprint, similarity
from scrape_contracts.engine.heal.labels import inline_label, label_similarity
from scrape_contracts.engine.heal.query import on_one_branch
from scrape_contracts.engine.heal.policy import AnchorScoring, HealPolicy
from scrape_contracts.engine.heal.spec import HealSpec, same_value, specificity, value_score
from scrape_contracts.engine.heal.vocabulary import (
    CHANGED_WORDS,
    CREATED_WORDS,
    DATED,
    SEMANTIC_ATTRS,
    STRONG_ANCHOR_ATTRS,
    TAG_FAMILY,
    content_words,
    expand_synonyms,
    matching_words,
)

if TYPE_CHECKING:
    from scrape_contracts.engine.heal.candidates import Candidate
    from scrape_contracts.engine.heal.context import Context

INLINE_LABEL = 30  # the words inside a numeric text label it when they are this short ("3 beds")


class Part(StrEnum):
    """One signal of a candidate's score, as listed in the heal evidence ("parts")."""

    FINGERPRINT = "fingerprint"
    ANCHOR = "anchor"
    LABEL = "label"
    LABEL_CONFLICT = "label_conflict"
    VALUE = "value"
    JSONLD = "jsonld"
    OLD_SELECTOR = "old_selector"
    DISTRACTOR = "distractor"
    IDENTITY = "identity"
    CHROME = "chrome"
    CARD = "card"
    UNIQUE_VALUE = "unique_value"
    SEQUENCE = "sequence"


def anchor_score(ctx: Context, fp: Fingerprint) -> float:
    """1.0 for the old element's own strong name (itemprop, data-testid, id); less for naming attributes,
    classes or an id whose words name the field or the old element."""
    scoring = ctx.policy.anchors
    for target in ctx.targets:
        shared = {a for a, _ in fp.sem & target.sem} & STRONG_ANCHOR_ATTRS
        if shared:
            return 1.0
        if fp.id and fp.id == target.id:
            return 1.0
    best = 0.0
    for attr, value in fp.sem:
        if attr in ("role", "headers", "for"):
            continue
        words = content_words(value)
        hits = matching_words(words, ctx.anchor_words)
        if hits:
            weight = scoring.named_attr if attr != "aria-label" else scoring.named_aria
            base = scoring.named_base
            best = max(best, weight * (base + (1.0 - base) * len(hits) / len(words)))
    words = fp.class_tokens | content_words(fp.id or "")
    hits = matching_words(words, ctx.anchor_words)
    if hits:
        base = scoring.named_class_base
        best = max(best, scoring.named_class * (base + (1.0 - base) * len(hits) / len(words)))
    return best


def full_label(fp: Fingerprint, raw: str, ftype: str) -> str:
    """Context label plus the words inside a numeric or date text ("3 beds", "Parking: 1", "Last updated on
    5 March 2024."). A text that starts with its own label ("Parking 1 space") is labelled by that, not by
    whatever precedes it."""
    inline, leads = inline_label(raw, ftype)
    if not inline or len(inline) > INLINE_LABEL:
        return fp.label
    return inline if leads else f"{fp.label} {inline}".strip()


def label_score(ctx: Context, fp: Fingerprint, raw: str) -> float:
    """Similarity to the old element's label, or a label naming the field."""
    scoring = ctx.policy.anchors
    label = full_label(fp, raw, ctx.spec.type)
    if not label or ctx.spec.type in DATED and _other_date(content_words(label), ctx):
        return 0.0  # no label, or one naming the other date of the page
    best = 0.0
    for target_label in ctx.target_labels:
        if target_label:
            best = max(best, label_similarity(label, target_label, ctx.policy.similarity.label_trigrams))
    words = content_words(label)
    if words:
        hits = matching_words(words, ctx.field_head)
        if hits:
            base = scoring.head_label_base
            best = max(best, base + (1.0 - base) * len(hits) / len(words))
        elif matching_words(words, ctx.field_words):
            best = max(best, scoring.modifier_label)  # "Tickets left" for ticket_price
    return best


def label_conflict(ctx: Context, fp: Fingerprint, raw: str) -> float:
    """1.0 when the candidate is labelled, the old element was labelled, and the labels name different
    things ("Living area" where "Year built" was): a name that differs is evidence against."""
    words = content_words(full_label(fp, raw, ctx.spec.type))
    if ctx.spec.type in DATED and _other_date(words, ctx):
        return 1.0  # "Updated" where the field is the date of creation, or the other way round
    if not words or matching_words(words, ctx.field_words):
        return 0.0
    labels = [label for label in ctx.target_labels if content_words(label)]
    if not labels:
        return 0.0
    label = " ".join(sorted(words))
    trigram_min = ctx.policy.similarity.label_trigrams
    different = ctx.policy.anchors.conflict_similarity
    return 1.0 if all(label_similarity(label, other, trigram_min) < different for other in labels) else 0.0


def _other_date(words: frozenset[str], ctx: Context) -> bool:
    """The candidate's label names the other kind of date than the field and its old label do: a page
    shows when a post was written and when it was last changed, and "date" synonyms cover both."""
    own = set(content_words(ctx.spec.name.replace("_", " ")))
    for label in ctx.target_labels:
        own |= content_words(label)
    for kind, other in ((CHANGED_WORDS, CREATED_WORDS), (CREATED_WORDS, CHANGED_WORDS)):
        if words & kind and not words & other and own & other and not own & kind:
            return True
    return False


def jsonld_score(ctx: Context, value: Any) -> float:
    """Agreement with the page's JSON-LD: a scalar under a key naming the field, or any scalar."""
    scoring = ctx.policy.anchors
    score = 0.0
    mismatch = False
    for keyed, typed in _jsonld_values(ctx):
        if same_value(typed, value):
            score = max(score, scoring.jsonld_keyed if keyed else scoring.jsonld_unkeyed)
        elif keyed:
            mismatch = True
    if score == 0.0 and mismatch:
        return scoring.jsonld_mismatch
    return score


def _jsonld_values(ctx: Context) -> list[tuple[bool, Any]]:
    """(under a key naming the field, typed value) of the page's JSON-LD scalars outside related items that
    read as the field's type: the same for every candidate of the field, so read once per page and field."""
    key = ("jsonld", ctx.spec.type, ctx.spec.pattern, ctx.spec.normalise, ctx.field_words)
    memo = ctx.after.memo
    if key not in memo:
        out = []
        for words, scalar, related in ctx.after.jsonld():
            if related:
                continue
            keyed = bool(expand_synonyms(words) & ctx.field_words)
            try:
                if isinstance(scalar, bool):
                    typed = scalar
                else:
                    typed = ctx.spec.parse(str(scalar), ctx.after.limits, ctx.after.base_url)
            except ValueParseError:
                continue
            out.append((keyed, typed))
        memo[key] = out
    return memo[key]


def score_cheap(ctx: Context, cand: Candidate) -> None:
    """Evidence that needs only the candidate's own fingerprint: structure, anchors, label, value."""
    fp, w, alike = cand.fp, ctx.policy.weights, ctx.policy.similarity
    struct = max((similarity(fp, t, alike) for t in ctx.targets), default=0.0)
    struct = max([struct, *(ctx.policy.alias_discount * similarity(fp, a, alike) for a in ctx.aliases)])
    cand.parts = {
        Part.FINGERPRINT: round(w.fingerprint * struct, 4),
        Part.ANCHOR: round(w.anchor * anchor_score(ctx, fp), 4),
        Part.LABEL: round(w.label * label_score(ctx, fp, cand.raw), 4),
        Part.LABEL_CONFLICT: round(-w.label_conflict * label_conflict(ctx, fp, cand.raw), 4),
        Part.VALUE: round(w.value * value_score(ctx.spec, cand.value, cand.raw, ctx.policy), 4),
    }
    cand.score = sum(cand.parts.values())


def score_context(ctx: Context, cand: Candidate) -> None:
    """Costlier evidence, for the shortlist: JSON-LD, old-selector locality, look-alikes, page context."""
    w, anchors = ctx.policy.weights, ctx.policy.anchors
    flags = flags_of(ctx.after, cand.el)
    if cand.el in ctx.old_matches:
        oldsel = 1.0
    else:
        oldsel = anchors.near_old_selector * locality(cand.el, ctx.old_matches, anchors)
    struct = cand.parts[Part.FINGERPRINT] / w.fingerprint
    step = stepping(ctx, flags)
    chrome = Flag.CHROME in flags and Flag.CHROME not in ctx.target_flags and not step  # a pager's <nav>
    cand.parts.update(
        {
            Part.JSONLD: round(w.jsonld * jsonld_score(ctx, cand.value), 4),
            Part.OLD_SELECTOR: round(w.old_selector * oldsel, 4),
            Part.DISTRACTOR: round(-w.distractor * distractor_score(ctx, cand, struct), 4),
            Part.IDENTITY: round(-w.identity * identity_conflict(ctx, cand), 4),
            Part.CHROME: -w.chrome if chrome else 0.0,
            Part.CARD: -w.card if Flag.CARD in flags and Flag.CARD not in ctx.target_flags else 0.0,
            # a step to the previous or next item that still leads where the field led: which of a pager's
            # links is the field, the last accepted URL says, whatever the two designs call the direction
            Part.SEQUENCE: w.sequence if step and same_value(cand.value, ctx.spec.before) else 0.0,
        }
    )
    cand.score = sum(cand.parts.values())


def prefilter_key(ctx: Context, cand: Candidate) -> float:
    """Cheap ordering used only to cap how many candidates get a full fingerprint on huge pages."""
    before, pre = ctx.spec.before, ctx.policy.prefilter
    if ctx.spec.numeric or ctx.spec.type == "boolean" or before is None:
        key = value_score(ctx.spec, cand.value, cand.raw, ctx.policy)
    elif cand.value == before:
        key = 1.0
    else:
        ratio = len(str(cand.value)) / max(1, len(str(before)))
        shortest, longest = pre.length_ratio
        key = value_score(ctx.spec, cand.value, cand.raw, ctx.policy) if shortest <= ratio <= longest else 0.0
    el = cand.el
    for target in ctx.targets:
        if el.tag == target.tag:
            key += pre.same_tag
        else:
            key += pre.same_family if TAG_FAMILY.get(el.tag) == target.family else 0.0
        if target.classes and target.classes & set(ctx.after.classes(el)):
            key += pre.shared_class
        break
    names = " ".join(
        [
            el.get("class") or "",
            el.get("id") or "",
            *(v for a, v in el.attrib.items() if a in SEMANTIC_ATTRS or a.startswith("data-")),
        ]
    )
    if names.strip() and matching_words(content_words(names), ctx.anchor_words):
        key += pre.naming
    return key


def locality(el: etree._Element, anchors: frozenset[etree._Element], scoring: AnchorScoring) -> float:
    """Closeness in the tree to where the old selector still points (values move next door, not far)."""
    if not anchors or len(anchors) > scoring.locality_max_anchors:
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
        best = max(best, 1.0 - distance / scoring.locality_distance)
    return max(0.0, best)


def credit_copies(candidates: list[Candidate], copies: list[Candidate], policy: HealPolicy) -> None:
    """A machine-readable copy naming the field (itemprop="price") that agrees is structured-data evidence."""
    w = policy.weights
    confirms = policy.anchors.copy_anchor * w.anchor
    agreeing = [c.value for c in copies if c.parts.get(Part.ANCHOR, 0.0) >= confirms]
    for cand in candidates:
        if any(same_value(cand.value, v) for v in agreeing) and cand.parts.get(Part.JSONLD, 0.0) < w.jsonld:
            cand.score += w.jsonld - cand.parts.get(Part.JSONLD, 0.0)
            cand.parts[Part.JSONLD] = w.jsonld


def reward_unique_value(spec: HealSpec, candidates: list[Candidate], policy: HealPolicy) -> None:
    """A specific last accepted value found in exactly one place is strong evidence that it is the field."""
    if spec.before is None:
        return
    values = policy.value
    exact = [
        c
        for c in candidates
        if same_value(c.value, spec.before) and specificity(spec, c.raw, values) >= values.specific
    ]
    slots: list[etree._Element] = []
    for cand in exact:
        if not any(on_one_branch(cand.slot, s) for s in slots):
            slots.append(cand.slot)
    if len(slots) == 1:
        for cand in exact:
            cand.parts[Part.UNIQUE_VALUE] = policy.weights.unique_value
            cand.score += policy.weights.unique_value
