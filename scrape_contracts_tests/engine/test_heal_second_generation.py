"""The second generation of the mutation suite (issue 15): redesigns keeping only JSON-LD, moved sections with
changed values, translated labels, an earlier layout coming back, date and link fields."""

from __future__ import annotations

from collections import Counter

from scrape_contracts.engine.heal import heal
from scrape_contracts.testing.mutations import NEW_CHANGE_KINDS, REFUSE, build_cases

SUITE = build_cases(seeds=range(2), changes=NEW_CHANGE_KINDS)


def _same(a, b) -> bool:
    if isinstance(a, float) and isinstance(b, (int, float)):
        return abs(a - b) < 1e-9
    return type(a) is type(b) and a == b


def test_every_kind_is_generated_for_several_page_kinds() -> None:
    wider = build_cases(seeds=range(4), changes=NEW_CHANGE_KINDS)
    assert set(Counter(case.change for case in SUITE)) == set(NEW_CHANGE_KINDS)
    for change in NEW_CHANGE_KINDS:
        assert len({case.kind for case in wider if case.change == change}) >= 3, change
    typed = {spec["type"] for case in SUITE if case.change == "dates_and_links"
             for spec in case.fields.values()}
    assert {"date", "url"} <= typed
    assert any(case.removed(name) for case in SUITE if case.change == "jsonld_redesign"
               for name in case.fields)


def test_never_wrong_removed_refused_and_mostly_right() -> None:
    wrong, removed, right, on_page = [], [], 0, 0
    for case in SUITE:
        results = heal(case.before_html, case.after_html, case.fields, page_url=case.page_url)
        for name, result in results.items():
            expected = case.expected[name]
            if case.removed(name):
                removed.append(result.value)
            if expected == REFUSE:
                if result.value is not None:
                    wrong.append((case.case_id, name, result.value))
                continue
            on_page += 1
            if result.value is None:
                continue
            if _same(result.value, expected):
                right += 1
            else:
                wrong.append((case.case_id, name, expected, result.value))
    assert wrong == []
    assert removed and all(value is None for value in removed)
    assert right >= 0.9 * on_page
