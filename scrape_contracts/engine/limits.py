"""Bounds on the work a contract or a page can cause in the engine, and the error that names one.

The defaults fit real pages with a wide margin; a hit is reported per field (extract, validate) or as a
refusal (heal), never a hang. Each limit has a setting (an environment variable read by
``scrape_contracts.settings``); docs/limits.md lists them.
"""

from __future__ import annotations

from dataclasses import dataclass

# limit → the setting that changes it (named in every error, so the reader knows what to turn)
SETTINGS = {
    "regex_timeout_s": "SCRAPE_CONTRACTS_REGEX_TIMEOUT_S",
    "selector_max_cost": "SCRAPE_CONTRACTS_SELECTOR_MAX_COST",
    "heal_timeout_s": "SCRAPE_CONTRACTS_HEAL_TIMEOUT_S",
    "heal_max_elements": "SCRAPE_CONTRACTS_HEAL_MAX_ELEMENTS",
    "list_max_items": "SCRAPE_CONTRACTS_LIST_MAX_ITEMS",
}


@dataclass(frozen=True)
class Limits:
    # one regex match (a field's ``pattern``, a JSON Schema ``pattern``): real patterns take microseconds
    regex_timeout_s: float = 1.0
    # estimated node visits of one selector on one page (engine/xpath_cost.py). Measured here: 1.4e7 to
    # 3e8 visits/s, so at most a few seconds; ".a .b .c" passes on pages of 100,000+ nodes, while
    # //*[count(//*[count(//*) > 0]) > 0] is refused from about 650 nodes (it took 6.5 s at 800)
    selector_max_cost: int = 500_000_000
    # one heal call (all its fields); a refusal when hit, which spends the budget like any other
    heal_timeout_s: float = 30.0
    # elements of the new page the healer will search; a bigger page is refused up front
    heal_max_elements: int = 100_000
    # items of one list target, over all its pages; a target with more is refused before its fields are read
    list_max_items: int = 100_000


DEFAULT_LIMITS = Limits()


class LimitExceeded(Exception):
    """A bound of ``Limits`` was hit; the message says what, the limit, and the setting that changes it."""

    def __init__(self, limit: str, value: object, what: str) -> None:
        self.limit = limit
        self.setting = SETTINGS[limit]
        self.value = value
        super().__init__(f"{what}: limit {limit}={value} (setting {self.setting})")
