"""Sequence links: the links to the previous and next item of a sequence (the newer and the older post, the
next page of a listing).

Designers name that step in many ways: ``rel="prev"``, a class or id of the link or of its wrapper
(``nav-newer``, ``post-prev``, ``id="next"``), a caption inside the link ("Older", "Nächster Beitrag",
"Previous" above the neighbour's title, an arrow). They also disagree on which way is "previous": a blog
that lists its posts newest first calls the newer post the previous one. So this module says only *that*
a link steps through a sequence, never which way: which of the two links is the field, the last accepted
URL says (``scoring`` credits a sequence link only when it still leads where the field led).
"""

from __future__ import annotations

from itertools import islice
from typing import TYPE_CHECKING

from lxml import etree

from scrape_contracts.engine.heal.vocabulary import (
    SEQUENCE_ARROWS,
    SEQUENCE_RELS,
    SEQUENCE_WORDS,
    words_of,
)

if TYPE_CHECKING:
    from scrape_contracts.engine.heal.page import Page

WRAPPER_DEPTH = 2  # a link's wrappers this close name it ("div.post-prev > a"); further up is the pager
CAPTION_WORDS = 3  # a caption inside the link is this short ("Prev posts"); a longer text is a title
LINK_PARTS = 40  # elements of a link's subtree looked at for a caption (a card link holds a whole teaser)


def is_sequence_link(page: Page, el: etree._Element) -> bool:
    """``el`` is a link whose rel, names (its own or its close wrappers') or caption say it steps to the
    previous or next item."""
    if el.tag != "a":
        return False
    if SEQUENCE_RELS & set((el.get("rel") or "").lower().split()):
        return True
    for node in (el, *islice(el.iterancestors(), WRAPPER_DEPTH)):
        if page.context_words(node) & SEQUENCE_WORDS:
            return True
    return any(_is_caption(page.text.get(part, "")) for part in islice(el.iter(etree.Element), LINK_PARTS))


def _is_caption(text: str) -> bool:
    """A short text naming a step ("Older", "Next post", "Précédent"), or only arrows ("«", "→")."""
    if not text:
        return False
    bare = text.replace(" ", "")
    if bare and all(c in SEQUENCE_ARROWS for c in bare):
        return True
    words = words_of(text)
    return 0 < len(words) <= CAPTION_WORDS and any(w in SEQUENCE_WORDS for w in words)
