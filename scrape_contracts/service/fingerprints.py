"""Element fingerprints at acceptance: taken from the page a candidate was extracted from, stored with it,
read back when a heal finds the last accepted page pruned.

Fingerprints are taken, when retention may prune last accepted pages (``wanted``), for every candidate that
may become accepted data (valid, healed, or waiting for review) where its page is parsed anyway: in the
batch's worker processes, or in the single-target heal op. A reused record (the page unchanged) has the fingerprints of the candidate it reuses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from scrape_contracts import settings
from scrape_contracts.adapters.fingerprints import CandidateFingerprints, SqlFingerprintStore
from scrape_contracts.adapters.store import ProjectStore
from scrape_contracts.contract.loader import LoadedContract
from scrape_contracts.engine.outcome import Outcome
from scrape_contracts.service.records import Recorded, ScrapeResult

if TYPE_CHECKING:
    import parsel

# a rejected record never becomes accepted data: nothing will ever heal against it
KEPT_OUTCOMES = (Outcome.VALID, Outcome.HEALED, Outcome.REVIEW_REQUIRED)


def wanted() -> bool:
    """Whether candidates are fingerprinted: only when retention may prune a target's last accepted page.

    A heal reads the last accepted page while it is there; with retention's default (keep each target's
    newest accepted page, ``SCRAPE_CONTRACTS_RETENTION_KEEP_LAST``) it always is, and a fingerprint would
    never be read. Taking one costs about 7 ms of CPU for a 60 KB page with 7 fields (12-14 ms before the
    healer's page indexes) against 3-5 ms for its extraction: on a first sweep of 2,000 pages it cut a batch
    from 266 to 54 targets/s (measured on this machine before that change), so it is only paid where it
    buys something.
    """
    return not settings.retention_keep_last()


def with_fingerprints(loaded: LoadedContract, result: ScrapeResult, selectors: dict[str, str],
                      html: str | parsel.Selector | None, reused: bool) -> ScrapeResult:
    """``result`` carrying the fingerprint of each field's element on ``html`` (the page, or its tree the
    extraction parsed), when it may be accepted."""
    missing = html is None or isinstance(html, str) and not html
    if reused or missing or result.outcome not in KEPT_OUTCOMES or loaded.contract.is_list or not wanted():
        return result  # list targets heal by relocating their items (service/lists_heal.py), not from these
    from scrape_contracts.engine.heal import remember
    from scrape_contracts.service.heal_steps import heal_spec

    fields = loaded.contract.fields
    specs = {name: heal_spec(name, fields[name], selectors[name], value)
             for name, value in result.record.items() if value is not None and selectors.get(name)
             and name in fields}
    memories = remember(html, specs, limits=settings.engine_limits(), page_url=result.fetched.final_url)
    return dataclasses.replace(result, fingerprints={n: m.to_json() for n, m in memories.items()})


def save(store: ProjectStore, recorded: Sequence[tuple[ScrapeResult, Recorded]]) -> None:
    """Store the fingerprints of recorded candidates (after their own transaction; see adapters)."""
    items = [CandidateFingerprints(rec.candidate_id, result.contract, result.partition, result.fingerprints)
             for result, rec in recorded if result.fingerprints and rec.candidate_id]
    if items:
        SqlFingerprintStore(store.engine).save(items)


def memories_of(store: ProjectStore, candidate_id: int | None) -> dict[str, Any]:
    """field -> ``FieldMemory`` stored for a candidate; fields stored in a format this code cannot read
    are left out (they heal from the page, or refuse)."""
    if candidate_id is None:
        return {}
    from scrape_contracts.engine.heal import FieldMemory

    out = {}
    for name, raw in SqlFingerprintStore(store.engine).load(candidate_id).items():
        try:
            out[name] = FieldMemory.from_json(raw)
        except ValueError:
            continue
    return out
