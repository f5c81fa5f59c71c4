"""The decision for one field: heal to the best candidate, or refuse with a ``RefusalReason``.

Accept the best only if its score clears a floor, it has evidence besides its value, and it beats the best
competitor elsewhere on the page by a margin; a changed text also needs a strong anchor or fingerprint; and
a stable selector must re-extract it. Otherwise refuse: a wrong heal is far worse than a refusal.
"""

from __future__ import annotations

import math
from enum import StrEnum
from typing import Any

from lxml import etree

from scrape_contracts.engine.heal.candidates import Candidate
from scrape_contracts.engine.heal.context import Context, build_context
from scrape_contracts.engine.heal.decoys import DECOY_MESSAGES
from scrape_contracts.engine.heal.fingerprint import fingerprint_of, similarity
from scrape_contracts.engine.heal.memory import FieldMemory
from scrape_contracts.engine.heal.page import Page
from scrape_contracts.engine.heal.query import on_one_branch, split_selector
from scrape_contracts.engine.heal.policy import HealPolicy
from scrape_contracts.engine.heal.positional import heal_item, row_to_keep
from scrape_contracts.engine.heal.result import HEALED, HealResult, RefusalReason, refusal
from scrape_contracts.engine.heal.scoring import Part, reward_unique_value
from scrape_contracts.engine.heal.selectors import SelectorKind, build_selector
from scrape_contracts.engine.heal.shortlist import Shortlist, shortlist
from scrape_contracts.engine.heal.spec import UNPARSEABLE, HealSpec, same_value, specificity
from scrape_contracts.engine.heal.vocabulary import DIGIT

SCORE_DECIMALS = 4  # scores and confidences in the evidence


class Trigger(StrEnum):
    """What the old selector does on the new page (why the pipeline asked for a heal)."""

    NO_MATCH = "no_match"
    MULTIPLE_MATCHES = "multiple_matches"
    UNPARSEABLE = "unparseable"
    RULE_VIOLATION = "rule_violation"
    NONE = "none"  # nothing wrong on its own: the heal was asked for another reason


# the strongest part of the winner's score names the strategy that found it
STRATEGY_NAMES = {
    Part.ANCHOR: "semantic_anchor",
    Part.LABEL: "label",
    Part.FINGERPRINT: "fingerprint",
    Part.VALUE: "value_proximity",
    Part.JSONLD: "jsonld",
    Part.OLD_SELECTOR: "old_selector",
    Part.SEQUENCE: "sequence_link",
}


def heal_field(before: Page | FieldMemory, after: Page, spec: HealSpec, policy: HealPolicy) -> HealResult:
    """Heal one field of ``before`` (the last good page, or its stored memory) on ``after``, or refuse."""
    if not spec.selector:
        return refusal(RefusalReason.INVALID_SELECTOR, "field has no selector", 0)
    ctx = build_context(before, after, spec, policy)
    still_there = _still_there(ctx)
    if still_there is not None:
        return refusal(RefusalReason.VALUE_OUT_OF_RULES, still_there, 1, located=ctx.located.value,
                       trigger=_trigger(ctx).value)
    if spec.item is not None:
        return heal_item(ctx)
    row = row_to_keep(ctx)
    if isinstance(row, HealResult):
        return row
    found = shortlist(ctx)
    if row is not None:
        # a positional field whose list kept its order: only its own row can hold it
        found.candidates = [c for c in found.candidates if c.el is row or row in c.el.iterancestors()]
    extra = {
        "located": ctx.located.value,
        "from": "page" if isinstance(before, Page) else "fingerprint",
        "trigger": _trigger(ctx).value,
        "rejected_by_rules": found.rejected_by_rules,
        "decoys": len(found.decoys),
        "change_limit_pct": spec.change_limit(policy),
        "change_limit_from": "contract" if spec.max_change_pct is not None else "healer default",
    }
    if not found.candidates:
        return _nothing_left(found, extra)
    return _judge(ctx, found, extra)


def _nothing_left(found: Shortlist, extra: dict[str, Any]) -> HealResult:
    if found.copies:
        copy = found.copies[0]
        return refusal(
            RefusalReason.HIDDEN_COPY_ONLY,
            "the page no longer shows the value; only a machine-readable "
            f"copy remains ({copy.el.tag} {copy.src[5:]}={copy.raw!r})",
            len(found.copies),
            **extra,
        )
    if found.decoys:
        top = found.decoys[0]
        detail = f"only decoy values remain ({DECOY_MESSAGES[top.decoy]}: {top.raw!r})"
        return refusal(RefusalReason.ONLY_DECOYS, detail, len(found.decoys), **extra)
    return refusal(RefusalReason.FIELD_GONE, "no element on the new page holds a valid value", 0, **extra)


def _judge(ctx: Context, found: Shortlist, extra: dict[str, Any]) -> HealResult:
    spec, policy, weights = ctx.spec, ctx.policy, ctx.policy.weights
    candidates = found.candidates
    reward_unique_value(spec, candidates, policy)
    candidates.sort(key=lambda c: (-c.score, ctx.after.index[c.el]))
    best = _pick_in_slot(candidates, policy)
    runner = _runner_up(candidates, best, spec, policy)
    runner_info = None
    if runner is not None:
        score = round(runner.score, SCORE_DECIMALS)
        runner_info = {"selector": None, "value": runner.value, "raw": runner.raw, "score": score}
    margin = best.score - runner.score if runner else best.score
    strategy = STRATEGY_NAMES[max(STRATEGY_NAMES, key=lambda k: best.parts.get(k, 0.0))]
    info = {
        **extra,
        "runner_up": runner_info,
        "score": round(best.score, SCORE_DECIMALS),
        "candidates": len(candidates),
        "parts": {part.value: value for part, value in best.parts.items()},
        "strategy": strategy,
        "margin": round(margin, SCORE_DECIMALS),
        "value_raw": best.raw,
    }
    if not ctx.targets:
        info["note"] = "old element not found on the last good page; no fingerprint"
    floor = policy.min_score if ctx.targets else policy.min_score + policy.no_fingerprint_penalty
    if runner is None or runner.score < policy.lone_runner_up:
        floor -= policy.lone_discount  # nothing else on the page could be this field
    needed = 0.0
    if runner is not None:
        same = same_value(runner.value, best.value)
        needed = policy.min_margin if not same else policy.min_margin_same_value
    confidence = _confidence(best.score, floor, margin, needed, policy)
    weak = min(confidence, policy.weak_confidence)
    if best.score < floor:
        detail = f"best score {best.score:.2f} below {floor:.2f}"
        review = _with_review(ctx, info, best, runner)
        return _refused(review, RefusalReason.LOW_CONFIDENCE, detail, confidence)
    support = best.parts[Part.FINGERPRINT] + best.parts[Part.ANCHOR] + best.parts[Part.LABEL]
    support += best.parts.get(Part.SEQUENCE, 0.0)
    if spec.expected is not None:
        support += policy.min_support  # the contract pins the value: matching it is not a coincidence
    if best.parts.get(Part.UNIQUE_VALUE) and best.parts.get(Part.JSONLD, 0.0) >= weights.jsonld:
        # structured data names the field and agrees, and the page shows that value in one place only: a
        # redesign that kept only its JSON-LD still says which visible value is the field
        support += policy.structured_support
    if support < policy.min_support:
        detail = f"only the value matches (structure/anchor/label {support:.2f})"
        return _refused(_with_review(ctx, info, best, runner), RefusalReason.VALUE_ONLY, detail, weak)
    if (
        spec.type == "string"
        and spec.before is not None
        and best.value != spec.before
        and not (
            best.parts[Part.ANCHOR] >= policy.changed_text_anchor * weights.anchor
            or best.parts[Part.FINGERPRINT] >= policy.changed_text_fingerprint * weights.fingerprint
        )
    ):
        detail = "a different text needs a strong anchor or fingerprint"
        return _refused(_with_review(ctx, info, best, runner), RefusalReason.CHANGED_VALUE_WEAK, detail, weak)
    if runner is not None and margin < needed:
        detail = f"runner-up {runner.raw!r} within {margin:.2f} of best {best.raw!r}"
        return _refused(_with_review(ctx, info, best, runner), RefusalReason.AMBIGUOUS, detail, confidence)
    built = _selector_for(ctx, best, candidates, found.copies, info)
    if built is None:
        detail = "no stable selector matches exactly this element"
        return _refused(info, RefusalReason.NO_STABLE_SELECTOR, detail, confidence)
    selector, kind = built
    if runner is not None and runner_info is not None:
        runner_sel = build_selector(ctx, runner, limit=policy.review_selector_tries)
        runner_info["selector"] = runner_sel[0] if runner_sel else None
    info.update({"reason": HEALED, "selector_kind": kind.value})
    return HealResult(best.value, selector, round(confidence, SCORE_DECIMALS), info)


def _selector_for(ctx: Context, best: Candidate, candidates: list[Candidate], copies: list[Candidate],
                  info: dict[str, Any]) -> tuple[str, SelectorKind] | None:
    """A stable selector for the best, else for a wrapper or a machine-readable copy of the same value."""
    built = build_selector(ctx, best)
    if built is None:
        # a wrapper of the same value, or the page's machine-readable copy of it (<meta itemprop="price">),
        # may be selectable where the element itself is not
        for alt in [*candidates[1:], *copies]:
            same_place = alt.slot is best.slot
            copy = alt.src != "text" and alt.el.get("itemprop") is not None or alt.el.tag == "meta"
            if (same_place or copy) and same_value(alt.value, best.value):
                built = build_selector(ctx, alt)
                if built:
                    info["selected_copy"] = not same_place
                    break
    return built


def _still_there(ctx: Context) -> str | None:
    """The old selector still finds the very same element, but its value broke the rules or is gone
    ("Sold out" where a price was). That is a data change for review, not a layout change to heal: any
    other element chosen now would be an impostor."""
    if not ctx.targets or len(ctx.old_matches) != 1:
        return None
    el = next(iter(ctx.old_matches))
    _, src = split_selector(ctx.spec.selector)
    raw = ctx.after.raw_value(el, src)
    now = fingerprint_of(ctx.after, el, src)
    alike = max(similarity(now, t, ctx.policy.similarity) for t in ctx.targets)
    if alike < ctx.policy.still_there_similarity:
        return None
    value = ctx.after.parse(ctx.spec, raw)
    if value is not UNPARSEABLE:
        problem = ctx.spec.violation(value, ctx.policy)
        return f"the old element is still there but its value {raw!r} is {problem}" if problem else None
    if ctx.spec.numeric and not DIGIT.search(raw):
        return f"the old element is still there but shows no number ({raw!r})"
    return None


def _trigger(ctx: Context) -> Trigger:
    _, src = split_selector(ctx.spec.selector)
    matched = [el for el in ctx.old_matches if ctx.after.raw_value(el, src)]
    if not matched:
        return Trigger.NO_MATCH
    values = {ctx.after.raw_value(el, src) for el in matched}
    if len(values) > 1:
        return Trigger.MULTIPLE_MATCHES
    value = ctx.after.parse(ctx.spec, values.pop())
    if value is UNPARSEABLE:
        return Trigger.UNPARSEABLE
    if ctx.spec.violation(value, ctx.policy) is not None:
        return Trigger.RULE_VIOLATION
    return Trigger.NONE


def _pick_in_slot(candidates: list[Candidate], policy: HealPolicy) -> Candidate:
    """Within the winning place, the element that names the field, else the one holding the text itself."""
    top = candidates[0]
    group = [
        c
        for c in candidates
        if c.slot is top.slot
        and c.src == top.src
        and c.score >= top.score - policy.same_slot_tie
        and same_value(c.value, top.value)
    ]
    # anchors that differ only past the third decimal are a tie: then the innermost element wins
    return max(group, key=lambda c: (round(c.parts.get(Part.ANCHOR, 0.0), 3), _depth(c.el), c.score))


def _depth(el: etree._Element) -> int:
    return sum(1 for _ in el.iterancestors())


def _refused(info: dict, reason: RefusalReason, detail: str, confidence: float) -> HealResult:
    evidence = {**info, "reason": reason.value, "detail": detail}
    return HealResult(None, None, round(confidence, SCORE_DECIMALS), evidence)


def _with_review(ctx: Context, info: dict, best: Candidate, runner: Candidate | None) -> dict:
    """Where the rejected best and runner-up are, with selectors, so a reviewer can pick one by hand."""
    tries = ctx.policy.review_selector_tries
    found = build_selector(ctx, best, limit=tries)
    info = {
        **info,
        "best": {
            "selector": found[0] if found else None,
            "value": best.value,
            "raw": best.raw,
            "score": round(best.score, SCORE_DECIMALS),
        },
    }
    if runner is not None and info.get("runner_up"):
        found = build_selector(ctx, runner, limit=tries)
        info["runner_up"] = {**info["runner_up"], "selector": found[0] if found else None}
    return info


def _runner_up(candidates: list[Candidate], best: Candidate, spec: HealSpec,
               policy: HealPolicy) -> Candidate | None:
    """Best candidate that is another answer: another place on the page (not a wrapper of, or inside, the
    best) with another value. A specific value printed twice (a title in a header bar and a footer bar, a
    price in a sticky bar) is one answer; a short one ("3") in two places is a coincidence, and which of
    them is the field a guess."""
    specific = specificity(spec, best.raw, policy.value) >= policy.value.specific
    for cand in candidates[1:]:
        if specific and same_value(cand.value, best.value):
            continue
        nested = (
            cand.slot is best.slot or on_one_branch(cand.slot, best.slot) or on_one_branch(cand.el, best.el)
        )
        if nested and same_value(cand.value, best.value):
            continue  # a wrapper of the same value is the same answer; a wrapper adding text is another
        if cand.src != "text" and best.src != "text" and same_value(cand.value, best.value):
            continue  # duplicate machine-readable copies (og: and itemprop metas) agree by design
        if cand.el.tag == "meta" or best.el.tag == "meta":
            if same_value(cand.value, best.value):
                continue
        return cand
    return None


def _confidence(score: float, floor: float, margin: float, needed: float, policy: HealPolicy) -> float:
    """Above 0.5 exactly when both the score clears its floor and the margin clears its threshold."""

    def sigmoid(x: float) -> float:
        return 1.0 / (1.0 + math.exp(-x))

    by_score = sigmoid(policy.score_slope * (score - floor))
    return min(by_score, sigmoid(policy.margin_slope * (margin - needed)))
