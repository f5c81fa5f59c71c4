"""The stand-in provider's repairs (scrape_contracts/testing/provider.py): a stand-in for a hosted scraping
API's own selector repair, which cannot run here.

A real provider's repair looks at the page with its own tools; the stand-in does not: it proposes the selectors
the test told it to (right or wrong ones) and says what each reads on the job's page, as a real proposal would.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class StandInRepair:
    repair_id: str
    url: str
    label: str
    job_id: str | None
    fields: dict[str, Any]
    cost: float
    status: str = "queued"
    polls: int = 0
    error: str | None = None
    selectors: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)

    def shown(self) -> dict[str, Any]:
        done = {"proposal": {"selectors": self.selectors, "values": self.values}} if self.status == "done" else {}
        return {"repair_id": self.repair_id, "label": self.label, "status": self.status, "cost": self.cost,
                **({"error": self.error} if self.error else {}), **done}


def read_values(html: str, selectors: dict[str, str]) -> dict[str, Any]:
    """The text each selector reads on the page (what the stand-in's proposal says it extracts)."""
    import parsel

    page = parsel.Selector(text=html)
    out: dict[str, Any] = {}
    for name, selector in selectors.items():
        try:
            found = page.xpath(selector) if selector.startswith(("/", "(")) else page.css(selector)
        except Exception:  # noqa: BLE001 — a wrong selector is a knob too: it reads nothing
            continue
        if found:
            out[name] = " ".join(" ".join(found[0].css("::text").getall()).split())
    return out
