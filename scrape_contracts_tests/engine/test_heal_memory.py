"""Healing from stored fingerprints (``remember`` at acceptance, the old page deleted afterwards)."""

from __future__ import annotations

import json
from functools import lru_cache

import pytest

from scrape_contracts.engine.heal import FieldMemory, RefusalReason, heal, remember
from scrape_contracts.testing.mutations import REFUSE, REMOVAL_KINDS, build_cases

SUITE = build_cases(seeds=range(1))


def _same(a, b) -> bool:
    return type(a) is type(b) and a == b if not isinstance(a, float) else abs(a - float(b)) < 1e-9


@lru_cache(maxsize=None)
def _both() -> tuple[list[tuple], list[tuple]]:
    """(page-healed, fingerprint-healed) outcomes: (case, field, expected, value) per field of the suite."""
    page, stored = [], []
    for case in SUITE:
        # stored as the project store stores them: JSON, read back
        kept = remember(case.before_html, case.fields)
        raw = {n: json.loads(json.dumps(m.to_json())) for n, m in kept.items()}
        memories = {n: FieldMemory.from_json(m) for n, m in raw.items()}
        from_page = heal(case.before_html, case.after_html, case.fields)
        from_memory = heal(None, case.after_html, case.fields, memories=memories)
        for name in case.fields:
            page.append((case, name, case.expected[name], from_page[name].value))
            stored.append((case, name, case.expected[name], from_memory[name].value))
    return page, stored


def test_a_memory_survives_json() -> None:
    case = next(c for c in SUITE if c.change == "redesign")
    for name, memory in remember(case.before_html, case.fields).items():
        assert memory.targets, name
        again = FieldMemory.from_json(json.loads(json.dumps(memory.to_json())))
        assert again.to_json() == memory.to_json() and again.targets[0].tag == memory.targets[0].tag
        assert len(json.dumps(memory.to_json())) < 6000  # compact: a few KB per field


def test_from_fingerprints_never_wrong_and_close_to_the_page() -> None:
    page, stored = _both()
    wrong = [(c.case_id, n, e, v) for c, n, e, v in stored
             if v is not None and (e == REFUSE or not _same(v, e))]
    assert wrong == []
    removed = [v for c, n, e, v in stored if c.change in REMOVAL_KINDS and n in c.targeted]
    assert removed and all(v is None for v in removed)
    right_page = sum(v is not None and _same(v, e) for _, _, e, v in page if e != REFUSE)
    right_stored = sum(v is not None and _same(v, e) for _, _, e, v in stored if e != REFUSE)
    assert right_stored >= 0.95 * right_page


def test_no_page_and_no_fingerprint_refuses() -> None:
    case = SUITE[0]
    results = heal(None, case.after_html, case.fields, memories={})
    assert {r.refusal for r in results.values()} == {RefusalReason.NO_LAST_GOOD}


@pytest.mark.parametrize("raw", [{"format": 999}, {"format": 1, "selector": "#x"}, {}])
def test_a_memory_of_another_format_or_damaged_is_not_read(raw: dict) -> None:
    with pytest.raises(ValueError):
        FieldMemory.from_json(raw)
