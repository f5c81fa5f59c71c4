"""A project store as the previous release left it, and a worker process that opens a store.

``OLD_DDL`` is the DDL that release's ``metadata.create_all`` emitted (c37f228, compiled for each dialect
and copied here), so the test does not depend on today's code to build yesterday's store. ``seed`` fills it
with what a store holds after some runs: accepted versions, candidates of every status, a review, selector
versions (one healed), partition states (one paused for review) and dynamic targets.

``python -m scrape_contracts_tests.adapters._old_store URL``: a separate OS process that reads the store's
revision (printing it), then opens the store as a run worker does and prints the revision it ends at.
"""

from __future__ import annotations

import json
import sys

import sqlalchemy as sa

_TABLES = """
CREATE TABLE sc_candidates (
    id {serial} NOT NULL, contract VARCHAR(128) NOT NULL, partition VARCHAR(256) NOT NULL,
    run_id VARCHAR(64) NOT NULL, url TEXT NOT NULL, record JSON NOT NULL, outcome VARCHAR(32) NOT NULL,
    status VARCHAR(32) NOT NULL, details JSON NOT NULL, page_sha256 VARCHAR(64), selector_version INTEGER,
    created_at {timestamp} NOT NULL, PRIMARY KEY (id)
);
CREATE INDEX ix_sc_candidates_partition ON sc_candidates (contract, partition, id);
CREATE TABLE sc_partition_state (
    contract VARCHAR(128) NOT NULL, partition VARCHAR(256) NOT NULL, paused BOOLEAN NOT NULL,
    pause_reason TEXT, heal_attempts INTEGER NOT NULL, etag TEXT, last_modified TEXT,
    last_page_sha256 VARCHAR(64), updated_at {timestamp} NOT NULL, PRIMARY KEY (contract, partition)
);
CREATE TABLE sc_selector_versions (
    contract VARCHAR(128) NOT NULL, version INTEGER NOT NULL, parent_version INTEGER, selectors JSON NOT NULL,
    contract_selectors JSON NOT NULL, source VARCHAR(16) NOT NULL, run_id VARCHAR(64), partition VARCHAR(256),
    changes JSON NOT NULL, created_at {timestamp} NOT NULL, PRIMARY KEY (contract, version)
);
CREATE TABLE sc_targets (
    contract VARCHAR(128) NOT NULL, partition VARCHAR(256) NOT NULL, url TEXT NOT NULL,
    created_at {timestamp} NOT NULL, PRIMARY KEY (contract, partition)
);
CREATE TABLE sc_accepted (
    id {serial} NOT NULL, contract VARCHAR(128) NOT NULL, partition VARCHAR(256) NOT NULL,
    version INTEGER NOT NULL, record JSON NOT NULL, url TEXT NOT NULL, candidate_id INTEGER,
    run_id VARCHAR(64) NOT NULL, page_sha256 VARCHAR(64), source VARCHAR(16) NOT NULL, reviewer VARCHAR(256),
    reason TEXT, created_at {timestamp} NOT NULL, PRIMARY KEY (id),
    CONSTRAINT uq_sc_accepted_version UNIQUE (contract, partition, version), UNIQUE (candidate_id),
    FOREIGN KEY(candidate_id) REFERENCES sc_candidates (id)
);
CREATE TABLE sc_reviews (
    id {serial} NOT NULL, contract VARCHAR(128) NOT NULL, partition VARCHAR(256) NOT NULL,
    candidate_id INTEGER NOT NULL, decision VARCHAR(16) NOT NULL, reviewer VARCHAR(256) NOT NULL,
    reason TEXT NOT NULL, run_id VARCHAR(64), created_at {timestamp} NOT NULL, PRIMARY KEY (id),
    UNIQUE (candidate_id), FOREIGN KEY(candidate_id) REFERENCES sc_candidates (id)
)
"""

OLD_DDL = {
    "sqlite": _TABLES.format(serial="INTEGER", timestamp="DATETIME"),
    "postgresql": _TABLES.format(serial="SERIAL", timestamp="TIMESTAMP WITH TIME ZONE"),
}

OLD_TABLES = ("sc_candidates", "sc_partition_state", "sc_selector_versions", "sc_targets", "sc_accepted",
              "sc_reviews")

SHA = {"p1v1": "1" * 64, "p1v2": "2" * 64, "p1v3": "3" * 64, "p2": "4" * 64}
BASE = {"title": "#title", "price": "#price"}
HEALED = {"title": "#title", "price": "[data-field=price]"}
CHANGE_VIOLATION = {"check": "price_change_within_limit", "field": "price",
                    "message": "price changed by 172%", "severity": "error"}

# (partition, run_id, record, outcome, status, violations, page, selector_version), inserted in this order:
# ids 1..7
CANDIDATES = [
    ("p1", "r1", {"title": "Dune", "price": 100.0}, "valid", "accepted", [], "p1v1", 1),
    ("p1", "r2", {"title": "Dune", "price": 110.0}, "healed", "accepted", [], "p1v2", 2),
    ("p1", "r3", {"title": "Dune", "price": 300.0}, "review_required", "quarantined", [CHANGE_VIOLATION],
     "p1v3", 2),
    ("p2", "r1", {"title": "Emma", "price": 8.5}, "valid", "accepted", [], "p2", 1),
    ("p2", "r2", {"title": "Emma", "price": 99.0}, "review_required", "rejected", [CHANGE_VIOLATION],
     "p2", 1),
    ("p2", "r3", {"title": "Emma", "price": -1.0}, "rejected", "rejected",
     [{"check": "price_bounds", "field": "price", "message": "below 0", "severity": "error"}], "p2", 1),
    ("p2", "r4", {"title": "Emma", "price": 8.5}, "unchanged", "unchanged", [], "p2", 1),
]
# (partition, version, candidate id, source, reviewer, reason)
ACCEPTED = [("p1", 1, 1, "scrape", None, None), ("p1", 2, 2, "scrape", None, None),
            ("p2", 1, 4, "scrape", None, None)]
PAUSE = "review required: price changed by 172%"


def create_old_store(engine: sa.Engine) -> None:
    """The previous release's tables, in the file or database of ``engine``."""
    if engine.dialect.name == "sqlite":
        with engine.connect() as conn:
            conn.exec_driver_sql("PRAGMA journal_mode=WAL")  # as that release set every connection
    with engine.begin() as conn:
        for statement in OLD_DDL[conn.dialect.name].split(";"):
            conn.exec_driver_sql(statement)


def seed(engine: sa.Engine) -> dict[str, int]:
    """Rows as the previous release wrote them (ids from the database); returns the row count per table."""
    at = "2026-11-01 10:00:00" if engine.dialect.name == "sqlite" else "2026-11-01 10:00:00+00"
    rows = {
        "sc_targets": [{"contract": "books", "partition": p, "url": f"http://shop.test/{p}", "created_at": at}
                       for p in ("p1", "p2")],
        "sc_selector_versions": [
            {"contract": "books", "version": 1, "parent_version": None, "selectors": json.dumps(BASE),
             "contract_selectors": json.dumps(BASE), "source": "contract", "run_id": None, "partition": None,
             "changes": "{}", "created_at": at},
            {"contract": "books", "version": 2, "parent_version": 1, "selectors": json.dumps(HEALED),
             "contract_selectors": json.dumps(BASE), "source": "heal", "run_id": "r2", "partition": "p1",
             "changes": json.dumps({"price": {"old": "#price", "new": "[data-field=price]"}}),
             "created_at": at},
        ],
        "sc_candidates": [
            {"contract": "books", "partition": p, "run_id": run, "url": f"http://shop.test/{p}",
             "record": json.dumps(record), "outcome": outcome, "status": status,
             "details": json.dumps({"violations": violations, "validators": {"etag": f'"{page}"'},
                                    "contract_fingerprint": "fp-old"}),
             "page_sha256": SHA[page], "selector_version": selectors, "created_at": at}
            for p, run, record, outcome, status, violations, page, selectors in CANDIDATES],
        "sc_accepted": [
            {"contract": "books", "partition": p, "version": version,
             "record": json.dumps(CANDIDATES[cid - 1][2]), "url": f"http://shop.test/{p}",
             "candidate_id": cid, "run_id": CANDIDATES[cid - 1][1],
             "page_sha256": SHA[CANDIDATES[cid - 1][6]],
             "source": source, "reviewer": reviewer, "reason": reason, "created_at": at}
            for p, version, cid, source, reviewer, reason in ACCEPTED],
        "sc_reviews": [{"contract": "books", "partition": "p2", "candidate_id": 5, "decision": "reject",
                        "reviewer": "alice", "reason": "a typo on the site", "run_id": "rv1",
                        "created_at": at}],
        "sc_partition_state": [
            {"contract": "books", "partition": "p1", "paused": True, "pause_reason": PAUSE,
             "heal_attempts": 0, "etag": '"p1v2"', "last_modified": None, "last_page_sha256": SHA["p1v2"],
             "updated_at": at},
            {"contract": "books", "partition": "p2", "paused": False, "pause_reason": None,
             "heal_attempts": 1, "etag": '"p2"',
             "last_modified": "Sun, 01 Nov 2026 10:00:00 GMT", "last_page_sha256": SHA["p2"],
             "updated_at": at},
        ],
    }
    with engine.begin() as conn:
        for table, values in rows.items():  # in this order: foreign keys point at earlier tables
            columns = list(values[0])
            conn.execute(sa.text(f"INSERT INTO {table} ({', '.join(columns)}) "
                                 f"VALUES ({', '.join(':' + c for c in columns)})"), values)
    return {table: len(values) for table, values in rows.items()}


def dump(engine: sa.Engine) -> dict[str, list[tuple]]:
    """Every row of the previous release's tables, as text, in key order (to compare before and after)."""
    keys = {"sc_partition_state": "contract, partition", "sc_selector_versions": "contract, version",
            "sc_targets": "contract, partition"}
    dumped = {}
    with engine.connect() as conn:
        for table in OLD_TABLES:
            result = conn.exec_driver_sql(f"SELECT * FROM {table} ORDER BY {keys.get(table, 'id')}")
            # columns added by later migrations (with defaults) are not the previous release's data
            keep = [i for i, name in enumerate(result.keys()) if name not in ADDED_COLUMNS.get(table, ())]
            dumped[table] = [tuple(str(row[i]) for i in keep) for row in result]
    return dumped


# columns that migrations after the previous release added to its tables
ADDED_COLUMNS = {"sc_partition_state": ("failure_streak", "failure_count", "last_success_at"),
                 "sc_targets": ("source", "seen_at", "lastmod", "gone_at")}


def main(url: str) -> None:
    from scrape_contracts.adapters import migrations
    from scrape_contracts.adapters.store import ProjectStore, new_engine

    engine = new_engine(url)
    print(json.dumps({"seen": migrations.head_revision(engine)}), flush=True)
    engine.dispose()
    store = ProjectStore(url)
    print(json.dumps({"opened": migrations.head_revision(store.engine)}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
