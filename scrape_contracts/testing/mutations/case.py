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
# change kinds whose targeted field is absent from the new page: every one of them must be refused
REMOVAL_KINDS = ("removed_field", "decoy_only")


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

    def field_cases(self) -> Iterator[tuple[str, dict[str, Any], Any]]:
        for name, spec in self.fields.items():
            yield name, spec, self.expected[name]
