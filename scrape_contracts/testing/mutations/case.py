"""One healing case of the mutation suite and the names of its page and change kinds."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

REFUSE = "REFUSE"

PAGE_KINDS = ("product", "real_estate", "review", "job", "news", "event")
CHANGE_KINDS = tuple(
    "renamed_ids hashed_classes inserted_wrappers reordered_siblings changed_tags moved_section "
    "reworded_labels value_changed decoy_at_old removed_field redesign decoy_only duplicate_matches "
    "value_beyond_limit".split()
)
# the second generation (issue 15): harder changes, and date and link fields
NEW_CHANGE_KINDS = tuple(
    "jsonld_redesign moved_value_changed translated_labels layout_reverted dates_and_links".split()
)
ALL_CHANGE_KINDS = CHANGE_KINDS + NEW_CHANGE_KINDS
PAGE_URL = "https://www.example.com/item/1"  # what relative links of a case resolve against
# change kinds whose targeted field is absent from the new page: every one of them must be refused
REMOVAL_KINDS = ("removed_field", "decoy_only")
# targeted fields still on the page that must be refused all the same (their value broke the rules)
KEPT_REFUSALS = ("value_beyond_limit",)


@dataclass(frozen=True)
class HealCase:
    case_id: str
    kind: str
    change: str
    before_html: str
    after_html: str
    fields: dict[str, dict[str, Any]]
    expected: dict[str, Any]  # field -> typed value, or REFUSE
    targeted: tuple[str, ...] = ()
    page_url: str = PAGE_URL

    def removed(self, name: str) -> bool:
        """The change took this field off the page (every such field must be refused)."""
        return name in self.targeted and self.expected[name] == REFUSE and self.change not in KEPT_REFUSALS

    def field_cases(self) -> Iterator[tuple[str, dict[str, Any], Any]]:
        for name, spec in self.fields.items():
            yield name, spec, self.expected[name]
