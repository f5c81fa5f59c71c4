"""A batch's chunk in the project store, on a real SQLite file and a real PostgreSQL database.

A chunk's partition states change together (PostgreSQL: one UPDATE per set of columns for the whole chunk,
``adapters/store/state.py``): each target keeps its own values, a target listed twice ends with its last
row (as row by row), and targets the chunk does not name are left alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from scrape_contracts.adapters.schema import partition_state
from scrape_contracts.adapters.statuses import CandidateStatus, OutboxKind
from scrape_contracts.adapters.store import CandidateAction, NewCandidate, ProjectStore
from scrape_contracts.engine.outcome import Outcome

CONTRACT = "shop"
TARGETS = 250  # more than one chunk's hundred


@pytest.fixture
def store(both_stores: ProjectStore) -> ProjectStore:
    return both_stores


def candidate(k: int, action: CandidateAction, *, compared_with: int | None = None,
              validators: dict[str, str] | None = None, partition: str | None = None) -> NewCandidate:
    outcome = {CandidateAction.ACCEPT: Outcome.VALID, CandidateAction.UNCHANGED: Outcome.UNCHANGED,
               CandidateAction.REJECT: Outcome.REJECTED}[action]
    return NewCandidate(
        contract=CONTRACT, partition=partition or f"t{k:03d}", run_id="run", url=f"http://127.0.0.1/t{k}",
        record={"k": k}, outcome=outcome, details={}, page_sha256=f"{k:064d}", selector_version=1, action=action,
        reason="price is negative" if action == CandidateAction.REJECT else None, validators=validators,
        compared_with=compared_with)


def columns(store: ProjectStore) -> dict[str, dict[str, object]]:
    with store.engine.connect() as conn:
        rows = conn.execute(sa.select(partition_state).where(partition_state.c.contract == CONTRACT)).all()
    return {row.partition: dict(row._mapping) for row in rows}


def test_a_chunk_sets_each_targets_own_state(store: ProjectStore) -> None:
    # first sweep: every target accepted with its validators, and one other target left out of the batches
    store.update_state(CONTRACT, "elsewhere", etag='"keep"')
    for start in range(0, TARGETS, 100):
        recorded = store.record_candidates([candidate(k, CandidateAction.ACCEPT, validators={
            "etag": f'"a{k}"', "last_modified": f"day {k}"}) for k in range(start, min(start + 100, TARGETS))])
        assert {r.status for r in recorded} == {CandidateStatus.ACCEPTED}
    first = columns(store)
    assert all(first[f"t{k:03d}"]["etag"] == f'"a{k}"' and first[f"t{k:03d}"]["last_modified"] == f"day {k}"
               and first[f"t{k:03d}"]["last_page_sha256"] == f"{k:064d}" for k in range(TARGETS))
    assert all(first[f"t{k:03d}"]["last_success_at"] is not None for k in range(TARGETS))

    # second sweep: a third re-tagged, a third unchanged with no validators, a third rejected; t000 twice
    chunk = [candidate(k, CandidateAction.UNCHANGED, validators={"etag": f'"b{k}"'}) if k % 3 == 0 else
             candidate(k, CandidateAction.UNCHANGED) if k % 3 == 1 else candidate(k, CandidateAction.REJECT)
             for k in range(TARGETS)]
    chunk.append(candidate(0, CandidateAction.UNCHANGED, validators={"etag": '"last"'}))
    store.record_candidates(chunk)
    second = columns(store)
    for k in range(TARGETS):
        before, after = first[f"t{k:03d}"], second[f"t{k:03d}"]
        if k % 3 == 0:
            assert after["etag"] == ('"last"' if k == 0 else f'"b{k}"') and after["last_modified"] is None, k
        else:
            assert (after["etag"], after["last_modified"]) == (before["etag"], before["last_modified"]), k
        if k % 3 == 2:
            assert (after["failure_streak"], after["failure_count"]) == (1, 1), k
            assert after["last_success_at"] == before["last_success_at"], k
        else:
            assert (after["failure_streak"], after["failure_count"]) == (0, 0), k
            assert after["last_success_at"] > before["last_success_at"], k
    assert second["elsewhere"] == first["elsewhere"]

    # third sweep: the rejected ones come back; each ends its streak with one "recovered" event
    store.record_candidates([candidate(k, CandidateAction.UNCHANGED) for k in range(2, TARGETS, 3)])
    third = columns(store)
    assert all((third[f"t{k:03d}"]["failure_streak"], third[f"t{k:03d}"]["failure_count"]) == (0, 1)
               for k in range(2, TARGETS, 3))
    recovered = store.outbox().after(0, limit=10_000, kinds=[OutboxKind.RECOVERED])
    assert sorted(row.partition for row in recovered) == [f"t{k:03d}" for k in range(2, TARGETS, 3)]


def test_states_of_some_partitions_are_those_only(store: ProjectStore) -> None:
    """A batched run reads the states of its own targets, not of every target of the contract."""
    for k in range(5):
        store.update_state(CONTRACT, f"t{k:03d}", etag=f'"e{k}"')
    store.update_state("other", "t001", etag='"not this contract"')
    assert set(store.states(CONTRACT)) == {f"t{k:03d}" for k in range(5)}
    some = store.states(CONTRACT, ["t001", "t003", "missing"])
    assert {key: state.etag for key, state in some.items()} == {"t001": '"e1"', "t003": '"e3"'}
    assert store.states(CONTRACT, []) == {}
