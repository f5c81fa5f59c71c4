"""retention_job on a real instance: it prunes exactly the raw pages and fingerprints the policy does not
keep, and healing still works from the fingerprints once every page is gone."""

from __future__ import annotations

from typing import Any

from scrape_contracts import settings
from scrape_contracts.adapters.pages.folder import FolderPages
from scrape_contracts.adapters.fingerprints import SqlFingerprintStore
from scrape_contracts.defs.retention import RETENTION_JOB
from scrape_contracts_tests.conftest import Harness, product_page


def _retention(harness: Harness, **config: Any) -> dict[str, Any]:
    job = harness.definitions().resolve_job_def(RETENTION_JOB)
    run_config = {"ops": {"prune_raw_pages": {"config": {"grace_s": 0, **config}}}}
    result = job.execute_in_process(run_config=run_config, instance=harness.instance)
    assert result.success
    return result.output_for_node("prune_raw_pages")


def test_retention_keeps_what_the_policy_says(sqlite_harness: Harness, site, monkeypatch) -> None:
    harness = sqlite_harness
    # a deployment that lets retention prune the last accepted pages: only then are fingerprints taken
    monkeypatch.setenv("SCRAPE_CONTRACTS_RETENTION_KEEP_LAST", "false")
    urls = {key: site.url(f"/p/{key}") for key in ("p1", "p2", "p3")}
    for i, key in enumerate(urls):
        site.set_page(f"/p/{key}", product_page(f"Book {i}", f"BK-{i}", "$100.00"))
    harness.write_product_contract("shop", urls)

    def scrape(key: str, page: str) -> tuple[str, str]:
        site.set_page(f"/p/{key}", page)
        result = harness.run("shop", key)
        candidate = harness.store.latest_candidate("shop", key, run_id=result.run_id)
        return candidate.outcome, candidate.page_sha256

    store = harness.store
    outcome, p1_old = scrape("p1", product_page("Book 0", "BK-0", "$100.00"))
    assert outcome == "valid"
    old_candidate = store.latest_accepted("shop", "p1").candidate_id
    assert scrape("p1", product_page("Book 0", "BK-0", "$101.00"))[0] == "valid"
    p1_new = store.latest_accepted("shop", "p1").page_sha256
    assert scrape("p2", product_page("Book 1", "BK-1", "$100.00"))[0] == "valid"
    p2_accepted = store.latest_accepted("shop", "p2").page_sha256
    # beyond the change limit
    outcome, p2_quarantined = scrape("p2", product_page("Book 1", "BK-1", "$500.00"))
    assert outcome == "review_required"
    assert scrape("p3", product_page("Book 2", "BK-2", "$100.00"))[0] == "valid"
    p3_accepted = store.latest_accepted("shop", "p3").page_sha256
    outcome, p3_rejected = scrape("p3", product_page("Book 2", layout="gone"))
    assert outcome == "rejected"
    artifacts = FolderPages(settings.artifacts_dir())
    everything = {p1_old, p1_new, p2_accepted, p2_quarantined, p3_accepted, p3_rejected}
    assert all(artifacts.exists(sha) for sha in everything)

    # within keep_days: every accepted and quarantined page stays, the rejected one goes
    assert _retention(harness, keep_days=30, keep_last_accepted=True)["pages_removed"] == 1
    assert {sha for sha in everything if artifacts.exists(sha)} == everything - {p3_rejected}

    # past keep_days: only each target's newest accepted page stays, and the one waiting for its review
    _retention(harness, keep_days=0, keep_last_accepted=True)
    assert {sha for sha in everything if artifacts.exists(sha)} == {p1_new, p2_accepted, p3_accepted,
                                                                     p2_quarantined}
    fingerprints = SqlFingerprintStore(store.engine)
    assert old_candidate not in fingerprints.candidates()  # superseded: its fingerprints went too
    assert store.latest_accepted("shop", "p1").candidate_id in fingerprints.candidates()
    assert store.pending_review("shop", "p2").id in fingerprints.candidates()  # a reviewer may accept it

    # and without keep_last_accepted nothing else is left: healing works from the stored fingerprints
    report = _retention(harness, keep_days=0, keep_last_accepted=False)
    assert report["pages_kept"] == 1 and {sha for sha in everything if artifacts.exists(sha)} == {p2_quarantined}
    assert scrape("p1", product_page("Book 0", "BK-0", "$102.00", layout="renamed"))[0] == "healed"
    assert harness.accepted("shop", "p1")["price"] == 102.0


def test_retention_grace_spares_pages_of_runs_in_flight(sqlite_harness: Harness, site) -> None:
    harness = sqlite_harness
    artifacts = FolderPages(settings.artifacts_dir())
    stray = artifacts.put("<html><body>fetched a moment ago, its candidate not stored yet</body></html>")
    job = harness.definitions().resolve_job_def(RETENTION_JOB)
    assert job.execute_in_process(instance=harness.instance).success  # default grace: an hour
    assert artifacts.exists(stray)
    _retention(harness, keep_days=0)
    assert not artifacts.exists(stray)


def test_retention_forgets_old_unchanged_candidates_but_each_targets_newest(harness: Harness, site) -> None:
    site.set_page("/p/a", product_page("Book A", "BK-A", "$10.00"))
    site.set_page("/p/b", product_page("Book B", "BK-B", "$20.00"))
    harness.write_product_contract("shop", {"a": site.url("/p/a"), "b": site.url("/p/b")})
    for _ in range(3):
        for key in ("a", "b"):
            harness.run("shop", key)
    site.set_page("/p/b", product_page("Book B", "BK-B", "$99.00"))  # beyond the change limit: for review
    harness.run("shop", "b")
    store = harness.store

    def statuses(key: str) -> list[str]:
        import sqlalchemy as sa

        from scrape_contracts.adapters.schema import candidates

        with store.engine.connect() as conn:
            return sorted(conn.execute(sa.select(candidates.c.status).where(
                candidates.c.contract == "shop", candidates.c.partition == key)).scalars())

    assert statuses("a") == ["accepted", "unchanged", "unchanged"]
    assert _retention(harness, keep_days=30)["unchanged_removed"] == 0  # all recent
    from scrape_contracts.adapters.retention import forget_unchanged

    import datetime as dt
    now = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=1)
    assert forget_unchanged(store.engine, now, chunk=2) == 3  # a's older one, b's two: in chunks of two
    assert statuses("a") == ["accepted", "unchanged"]  # its newest stays
    assert statuses("b") == ["accepted", "quarantined"]
    assert harness.accepted("shop", "a")["price"] == 10.0 and harness.accepted("shop", "b")["price"] == 20.0


def test_a_quarantined_page_is_kept_until_its_review_decides(sqlite_harness: Harness, site) -> None:
    import time

    from scrape_contracts.service.retention import RetentionPolicy, prune

    harness = sqlite_harness
    site.set_page("/p/b", product_page("Book B", "BK-B", "$20.00"))
    harness.write_product_contract("shop", {"b": site.url("/p/b")})
    assert harness.run("shop", "b").success
    site.set_page("/p/b", product_page("Book B", "BK-B", "$99.00"))  # beyond the change limit: for review
    harness.run("shop", "b")
    waiting = harness.store.pending_review("shop", "b")
    artifacts = FolderPages(settings.artifacts_dir())
    policy = RetentionPolicy(keep_days=30, grace_s=0)
    for day in range(1, 32):  # a month of daily retention while nobody reviews
        prune(harness.store, artifacts, policy, clock=lambda day=day: time.time() + day * 86400)
    assert artifacts.exists(waiting.page_sha256)
    assert harness.review("shop", "b", "accept").success
    prune(harness.store, artifacts, policy, clock=lambda: time.time() + 32 * 86400)
    accepted = harness.store.latest_accepted("shop", "b")
    assert accepted.page_sha256 == waiting.page_sha256
    assert artifacts.exists(accepted.page_sha256)  # what the next redesign's heal reads
