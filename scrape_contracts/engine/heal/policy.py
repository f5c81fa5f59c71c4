"""Every threshold and weight the healer uses, in one frozen record.

``HealPolicy()`` is the tuned default; ``dataclasses.replace(DEFAULT_POLICY, min_score=0.5)`` gives a
variant to compare on the mutation suite (``benchmarks/healing.py --sweep``). Scores are sums of weighted
evidence, roughly 0..1.2; every threshold is on that scale. How the page is *read* (how far to look for a
label, what counts as a card) is not policy: those are named constants next to the code that reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class EvidenceWeights:
    """How much each kind of evidence adds to a candidate's score (penalties are subtracted)."""

    fingerprint: float = 0.28  # similarity to the old element's fingerprint
    anchor: float = 0.22  # a naming attribute or id that names the field or the old element
    label: float = 0.22  # the old label, or a label naming the field
    value: float = 0.28  # proximity to the last accepted value
    jsonld: float = 0.08  # a JSON-LD scalar or a machine-readable copy that agrees
    old_selector: float = 0.08  # the old selector still points at it, or next to it
    unique_value: float = 0.1  # the last accepted (specific) value found in exactly one place
    distractor: float = 0.45  # looks more like a non-target element of the old page
    chrome: float = 0.3  # page chrome: nav, breadcrumbs, footer
    card: float = 0.2  # inside another item's card of a repeated list
    identity: float = 0.35  # carries a name that belonged to another element on the old page
    label_conflict: float = 0.12  # labelled as something else than the old element was
    sequence: float = 0.2  # a link to the previous/next item, as the old one was, still leading there


@dataclass(frozen=True)
class SimilarityWeights:
    """Fingerprint similarity: the weight of each component (components absent on both sides skip)."""

    tag: float = 1.0
    same_family: float = 0.6  # partial credit for span vs strong, div vs p
    rare_tag: float = 1.5  # an h1/time/address occurring at most twice
    names: float = 1.5  # stable classes and class words
    id: float = 1.0
    semantic_attrs: float = 2.0
    label: float = 2.0
    ancestors: float = 1.5
    siblings: float = 1.0
    position: float = 0.5
    position_slope: float = 2.0  # relative page position; a move by half the page scores 0
    source: float = 0.5  # text vs attribute
    ancestor_depth: int = 7  # ancestors that enter a fingerprint...
    ancestor_decay: float = 0.35  # ...each weighing 1 / (1 + decay * depth)
    sibling_text: int = 30  # a neighbour's words count when its text is at most this long
    label_trigrams: float = 0.6  # trigram overlap that vouches for a near-identical label spelling


@dataclass(frozen=True)
class ValueScoring:
    """Proximity of a candidate's value to the last accepted one, and how telling a match is."""

    boolean_same: float = 0.5
    boolean_other: float = 0.15
    numeric_changed: float = 0.7  # a changed number scores at most this, falling to 0 at the change limit
    case_changed: float = 0.85  # the same text in another case
    text_similar: float = 0.6  # trigram similarity of an edited text is scaled by this...
    text_similar_min: float = 0.5  # ...when at least this
    digit_specificity: tuple[float, ...] = (0.5, 0.5, 0.7, 0.85)  # by digit count; 1.0 from 4 digits
    code_length: int = 5  # a text this long mixing digits and letters is a specific code
    short_text: int = 4  # texts shorter than this are as common as "3"...
    short_text_specificity: float = 0.5
    medium_text: int = 8  # ...and shorter than this still fairly common
    medium_text_specificity: float = 0.75
    specific: float = 0.85  # specificity from which a matching value locates the field by itself


@dataclass(frozen=True)
class AnchorScoring:
    """Naming evidence: anchors, labels, structured data, the old selector."""

    named_attr: float = 0.85  # a naming attribute whose words name the field...
    named_aria: float = 0.6  # ...an aria-label doing the same...
    named_base: float = 0.6  # ...scaled by base + (1 - base) * share of matching words
    named_class: float = 0.6  # a class or id naming the field...
    named_class_base: float = 0.5  # ...with its own base
    head_label_base: float = 0.5  # a label naming the field's head word: base + (1 - base) * share
    modifier_label: float = 0.3  # only a modifier matches: "Tickets left" for ticket_price
    conflict_similarity: float = 0.15  # labels below this similarity name different things
    jsonld_keyed: float = 1.0  # a JSON-LD scalar under a key naming the field agrees
    jsonld_unkeyed: float = 0.3  # an agreeing JSON-LD scalar under another key
    jsonld_mismatch: float = -0.5  # JSON-LD names the field with another value
    near_old_selector: float = 0.5  # locality to the old selector's match, scaled by this
    locality_distance: float = 8.0  # tree steps at which locality reaches 0
    locality_max_anchors: int = 6  # an old selector matching more says nothing about place
    distractor_slack: float = 0.05  # a non-target twin must look this much more alike to count
    distractor_twins: int = 8  # same-text elements of the old page compared
    identity_class: float = 0.5  # conflict weight of a class name (1.0 for id/testid/itemprop)
    identity_shared: int = 3  # a name on more elements says what kind of thing, not which one
    copy_anchor: float = 0.5  # share of the anchor weight a machine-readable copy needs to confirm


@dataclass(frozen=True)
class Prefilter:
    """Cheap ordering that caps how many candidates of a huge page get a full fingerprint."""

    same_tag: float = 0.5
    same_family: float = 0.25
    shared_class: float = 0.5
    naming: float = 0.5
    length_ratio: tuple[float, float] = (0.6, 1.7)  # a text this much shorter/longer may be an edit


@dataclass(frozen=True)
class HealPolicy:
    """Thresholds of the decision plus the weights above. The defaults are the tuned healer."""

    min_score: float = 0.42  # below this the best candidate is not trusted
    min_margin: float = 0.10  # best vs a competitor with a different value
    min_margin_same_value: float = 0.04  # best vs a competitor elsewhere with the same value
    lone_runner_up: float = 0.1  # a runner-up below this is no competitor...
    lone_discount: float = 0.08  # ...and the floor drops by this much
    no_fingerprint_penalty: float = 0.1  # the floor rises by this much when the old element was not found
    min_support: float = 0.1  # evidence other than the value (structure + anchors + label) a heal needs
    structured_support: float = 0.1  # counts as such: keyed JSON-LD agreeing with a value shown only once
    still_there_similarity: float = 0.75  # the old selector's match is the old element itself
    alias_discount: float = 0.8  # similarity to a same-value twin counts, less than to the old element
    default_change_pct: float = 50.0  # numeric guard when the contract sets no max_change_pct
    changed_text_anchor: float = 0.8  # a changed text needs this share of the anchor weight...
    changed_text_fingerprint: float = 0.7  # ...or this share of the fingerprint weight
    changed_text_shape: tuple[float, float] = (0.5, 2.0)  # length ratio of an edited text
    weak_confidence: float = 0.4  # confidence cap of a refusal for lack of non-value evidence
    same_slot_tie: float = 0.08  # within one place, candidates this close are the same answer
    score_slope: float = 10.0  # confidence = min(sigmoid(score_slope * (score - floor)),
    margin_slope: float = 15.0  #                  sigmoid(margin_slope * (margin - needed)))
    max_fingerprinted: int = 200  # huge pages: only the most plausible candidates get a fingerprint...
    max_shortlist: int = 30  # ...and only the best of those get the costly context checks
    max_numeric_text: int = 48  # longest text read as one number
    max_string_text: int = 160  # longest text read as one string (or twice the old value)
    max_boolean_text: int = 30
    max_site_text: int = 2000  # longer texts are prose, not field values
    min_allowed_words: int = 4  # words a number's text may carry: max(this, old words + extra)
    extra_allowed_words: int = 2
    max_targets: int = 3  # the old value found in more places than this does not locate the field
    max_aliases: int = 2  # visible twins of the old value kept as weaker targets
    selector_tries: int = 160  # selectors tried for a heal...
    review_selector_tries: int = 24  # ...and for pointing a reviewer at a rejected candidate
    weights: EvidenceWeights = field(default_factory=EvidenceWeights)
    similarity: SimilarityWeights = field(default_factory=SimilarityWeights)
    value: ValueScoring = field(default_factory=ValueScoring)
    anchors: AnchorScoring = field(default_factory=AnchorScoring)
    prefilter: Prefilter = field(default_factory=Prefilter)


DEFAULT_POLICY = HealPolicy()
