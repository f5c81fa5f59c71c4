"""The shortlist: the new page's candidates for one field, scored, with decoys and hidden copies set apart."""

from __future__ import annotations

from dataclasses import dataclass, field

from scrape_contracts.engine.heal.candidates import Candidate, slot_of, value_sources
from scrape_contracts.engine.heal.context import Context
from scrape_contracts.engine.heal.decoys import decoy_reason
from scrape_contracts.engine.heal.fingerprint import fingerprint_of
from scrape_contracts.engine.heal.policy import HealPolicy
from scrape_contracts.engine.heal.scoring import credit_copies, prefilter_key, score_cheap, score_context
from scrape_contracts.engine.heal.vocabulary import DIGIT, LABEL_TAGS


@dataclass
class Shortlist:
    candidates: list[Candidate] = field(default_factory=list)  # best first after ``rank``
    decoys: list[Candidate] = field(default_factory=list)
    copies: list[Candidate] = field(default_factory=list)  # machine-readable copies of a shown value
    rejected_by_rules: int = 0


def shortlist(ctx: Context) -> Shortlist:
    """Every valid value on the new page, cheaply scored; the best ``max_shortlist`` that are not decoys get
    the costly context scores."""
    spec, after, policy = ctx.spec, ctx.after, ctx.policy
    out = Shortlist()
    pool: list[Candidate] = []
    ruled = spec.numeric or spec.expected is not None  # a string without an expected value breaks no rule
    edited = spec.type == "string" and spec.before is not None
    shape = _Shape(str(spec.before), policy) if edited else None
    for el, src, raw, value in value_sources(after, spec, old_raw=ctx.target_raw):
        if ruled and spec.violation(value, policy) is not None:
            out.rejected_by_rules += 1
            continue
        if edited and value != spec.before and not shape.fits(value):
            continue
        if el.tag in LABEL_TAGS and not any(t.tag == el.tag for t in ctx.targets):
            continue  # a <dt>/<th>/<label> names a value; it is one only if the old element was one too
        pool.append(Candidate(el, src, raw, value))
    if len(pool) > policy.max_fingerprinted:
        pool.sort(key=lambda c: -prefilter_key(ctx, c))
        pool = pool[: policy.max_fingerprinted]
    for cand in pool:
        cand.fp = fingerprint_of(after, cand.el, cand.src)
        cand.slot = slot_of(after, cand.el, cand.src)
        score_cheap(ctx, cand)
    pool.sort(key=lambda c: (-c.score, after.index[c.el]))

    for cand in pool:
        if len(out.candidates) >= policy.max_shortlist:
            break
        cand.decoy = decoy_reason(ctx, cand.el, cand.raw)
        if cand.decoy:
            out.decoys.append(cand)
            continue
        score_context(ctx, cand)
        out.candidates.append(cand)
    if ctx.targets and all(t.src == "text" for t in ctx.targets):
        # the field was shown text: machine-readable copies (meta content) confirm a shown value, they do not
        # replace it (a page that no longer shows the value has lost the field)
        out.copies = [c for c in out.candidates if c.src != "text"]
        out.candidates = [c for c in out.candidates if c.src == "text"]
        credit_copies(out.candidates, out.copies, policy)
    return out


class _Shape:
    """A changed text may be an edit of the old one, not a different kind of text (a label, a date): the
    old text's shape, worked out once for all of a page's texts."""

    def __init__(self, before: str, policy: HealPolicy) -> None:
        self.digits = bool(DIGIT.search(before))
        self.length = max(1, len(before))
        self.shortest, self.longest = policy.changed_text_shape

    def fits(self, value: str) -> bool:
        if not self.shortest <= len(value) / self.length <= self.longest:
            return False  # most texts: no pattern search
        return bool(DIGIT.search(value)) == self.digits
