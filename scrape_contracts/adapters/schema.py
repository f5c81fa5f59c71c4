"""The project store's tables as the code sees them.

The database gets these tables from the migrations (``adapters/migrations``), never from ``create_all``:
change a table here and add a migration that makes the same change (the migrations' test compares the
two). Status columns hold the values of the enums in ``adapters/statuses.py``, the same strings earlier
releases stored, and the database refuses any other value (a CHECK constraint, added by migration 0002).
"""

from __future__ import annotations

from enum import Enum

import sqlalchemy as sa

from scrape_contracts.adapters.statuses import (
    AcceptSource, CandidateStatus, Decision, DeliveryState, OutboxKind, ProviderJobState, RepairState,
    SelectorSource, TokenScope,
)
from scrape_contracts.engine.outcome import Outcome


def _enum(enum: type[Enum], name: str, length: int = 32) -> sa.Enum:
    # VARCHAR plus a named CHECK on every database (no native PostgreSQL enum type: adding a member to one
    # cannot run inside a transaction, and the migrations run in one); reads give the enum member
    return sa.Enum(enum, name=name, native_enum=False, create_constraint=True, length=length,
                   values_callable=lambda members: [m.value for m in members], validate_strings=True)


metadata = sa.MetaData()

candidates = sa.Table(
    "sc_candidates", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("contract", sa.String(128), nullable=False),
    sa.Column("partition", sa.String(256), nullable=False),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("record", sa.JSON, nullable=False),
    sa.Column("outcome", _enum(Outcome, "ck_sc_candidates_outcome"), nullable=False),
    sa.Column("status", _enum(CandidateStatus, "ck_sc_candidates_status"), nullable=False),
    sa.Column("details", sa.JSON, nullable=False),
    sa.Column("page_sha256", sa.String(64)),
    sa.Column("selector_version", sa.Integer),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Index("ix_sc_candidates_partition", "contract", "partition", "id"),
)

accepted = sa.Table(
    "sc_accepted", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("contract", sa.String(128), nullable=False),
    sa.Column("partition", sa.String(256), nullable=False),
    sa.Column("version", sa.Integer, nullable=False),
    sa.Column("record", sa.JSON, nullable=False),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("candidate_id", sa.Integer, sa.ForeignKey("sc_candidates.id"), unique=True),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("page_sha256", sa.String(64)),
    sa.Column("source", _enum(AcceptSource, "ck_sc_accepted_source", 16), nullable=False),
    sa.Column("reviewer", sa.String(256)),
    sa.Column("reason", sa.Text),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.UniqueConstraint("contract", "partition", "version", name="uq_sc_accepted_version"),
)

selector_versions = sa.Table(
    "sc_selector_versions", metadata,
    sa.Column("contract", sa.String(128), primary_key=True),
    sa.Column("version", sa.Integer, primary_key=True),
    sa.Column("parent_version", sa.Integer),
    sa.Column("selectors", sa.JSON, nullable=False),
    sa.Column("contract_selectors", sa.JSON, nullable=False),  # the YAML's selectors this line descends from
    sa.Column("source", _enum(SelectorSource, "ck_sc_selector_versions_source", 16), nullable=False),
    sa.Column("run_id", sa.String(64)),
    sa.Column("partition", sa.String(256)),
    sa.Column("changes", sa.JSON, nullable=False),  # {field: {"old": sel, "new": sel, "evidence": {...}}}
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

reviews = sa.Table(
    "sc_reviews", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("contract", sa.String(128), nullable=False),
    sa.Column("partition", sa.String(256), nullable=False),
    sa.Column("candidate_id", sa.Integer, sa.ForeignKey("sc_candidates.id"), nullable=False, unique=True),
    sa.Column("decision", _enum(Decision, "ck_sc_reviews_decision", 16), nullable=False),
    sa.Column("reviewer", sa.String(256), nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("run_id", sa.String(64)),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

partition_state = sa.Table(
    "sc_partition_state", metadata,
    sa.Column("contract", sa.String(128), primary_key=True),
    sa.Column("partition", sa.String(256), primary_key=True),
    sa.Column("paused", sa.Boolean, nullable=False, default=False),
    sa.Column("pause_reason", sa.Text),
    sa.Column("heal_attempts", sa.Integer, nullable=False, default=0),
    # consecutive failed or rejected scrapes, and all of them ever (the id of each failure's outbox event)
    sa.Column("failure_streak", sa.Integer, nullable=False, default=0, server_default="0"),
    sa.Column("failure_count", sa.Integer, nullable=False, default=0, server_default="0"),
    # when a scrape last succeeded (accepted, or unchanged: a batch records no event of its own for those),
    # what the freshness check compares with the schedule
    sa.Column("last_success_at", sa.DateTime(timezone=True)),
    sa.Column("etag", sa.Text),
    sa.Column("last_modified", sa.Text),
    sa.Column("last_page_sha256", sa.String(64)),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

targets = sa.Table(
    "sc_targets", metadata,
    sa.Column("contract", sa.String(128), primary_key=True),
    sa.Column("partition", sa.String(256), primary_key=True),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    # discovery (contract ``discover:``): the declared source that last found the target (NULL: added by hand,
    # a file or the API, never marked gone), when it was last found, its sitemap ``lastmod`` when the contract
    # skips unchanged targets (NULL otherwise), and since when its source no longer lists it (NULL: listed)
    sa.Column("source", sa.Text),
    sa.Column("seen_at", sa.DateTime(timezone=True)),
    sa.Column("lastmod", sa.DateTime(timezone=True)),
    sa.Column("gone_at", sa.DateTime(timezone=True)),
)

# discovery's conditional requests: each sitemap a contract's discovery read, as it was answered (gzip) with
# its validators, so the next discovery asks with If-None-Match / If-Modified-Since and, on a 304, reads the
# kept copy: nothing is downloaded again and nothing the sitemap lists is marked gone
discovery_pages = sa.Table(
    "sc_discovery_pages", metadata,
    sa.Column("contract", sa.String(128), primary_key=True),
    sa.Column("url", sa.String(2048), primary_key=True),
    sa.Column("etag", sa.Text),
    sa.Column("last_modified", sa.Text),
    sa.Column("body", sa.LargeBinary, nullable=False),
    sa.Column("fetched_at", sa.DateTime(timezone=True), nullable=False),
)

# The outbox: every state change above that can interest someone, one row, written in the same transaction
# as the change. Its id orders the rows (the activation sensor's cursor); event_id is deterministic.
outbox = sa.Table(
    "sc_outbox", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("event_id", sa.String(36), nullable=False, unique=True),
    sa.Column("kind", _enum(OutboxKind, "ck_sc_outbox_kind"), nullable=False),
    sa.Column("contract", sa.String(128), nullable=False),
    sa.Column("partition", sa.String(256), nullable=False),
    sa.Column("version", sa.Integer),  # the accepted version, candidate id or selector version it is about
    sa.Column("data", sa.JSON, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

# What became of each message an outbox row gave (one per rule and destination).
deliveries = sa.Table(
    "sc_deliveries", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("outbox_id", sa.Integer, sa.ForeignKey("sc_outbox.id"), nullable=False),
    sa.Column("message_id", sa.String(36), nullable=False),  # X-Scrape-Contracts-Event-Id
    sa.Column("destination", sa.String(128), nullable=False),
    sa.Column("rule", sa.String(128), nullable=False),
    sa.Column("status", _enum(DeliveryState, "ck_sc_deliveries_status", 16), nullable=False),
    sa.Column("attempts", sa.Integer, nullable=False),
    sa.Column("history", sa.JSON, nullable=False),  # every attempt: status, duration, error, run id
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.UniqueConstraint("message_id", "destination", name="uq_sc_deliveries_message"),
    sa.Index("ix_sc_deliveries_status", "status", "id"),
)


# The front door (scrape_contracts/api): API tokens, stored as sha256 hashes only (a token is 256 random
# bits, so a fast hash is enough); the token itself is shown once, when it is created.
api_tokens = sa.Table(
    "sc_api_tokens", metadata,
    sa.Column("id", sa.String(32), primary_key=True),  # printed, listed and revoked by; not a secret
    sa.Column("token_sha256", sa.String(64), nullable=False, unique=True),
    sa.Column("owner", sa.String(256), nullable=False),
    sa.Column("scope", _enum(TokenScope, "ck_sc_api_tokens_scope", 16), nullable=False),
    sa.Column("label", sa.Text, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("revoked_at", sa.DateTime(timezone=True)),
)

# Every write through the front door: who (token id and owner), what, on which target, why, which request.
api_audit = sa.Table(
    "sc_api_audit", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("token_id", sa.String(32), nullable=False),
    sa.Column("owner", sa.String(256), nullable=False),
    sa.Column("action", sa.String(64), nullable=False),
    sa.Column("contract", sa.String(128), nullable=False),
    sa.Column("target", sa.Text, nullable=False),
    sa.Column("reason", sa.Text, nullable=False),
    sa.Column("request_id", sa.String(64), nullable=False),
    sa.Column("outcome", sa.Text, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

# Idempotency keys of launches: scoped to the contract, kept after the runs finish; the request's hash
# refuses the same key with another body (409), the run ids answer a repeat with the same runs.
api_idempotency = sa.Table(
    "sc_api_idempotency", metadata,
    sa.Column("contract", sa.String(128), primary_key=True),
    sa.Column("key", sa.String(256), primary_key=True),
    sa.Column("request_sha256", sa.String(64), nullable=False),
    sa.Column("run_ids", sa.JSON, nullable=False),
    sa.Column("token_id", sa.String(32), nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
)

# Per field of a candidate that could become accepted data, the fingerprint of the element its value came
# from (``engine.heal.FieldMemory`` as JSON): healing reads it when the old raw page has been pruned.
fingerprints = sa.Table(
    "sc_fingerprints", metadata,
    sa.Column("candidate_id", sa.Integer, sa.ForeignKey("sc_candidates.id"), primary_key=True),
    sa.Column("field", sa.String(128), primary_key=True),
    sa.Column("contract", sa.String(128), nullable=False),
    sa.Column("partition", sa.String(256), nullable=False),
    sa.Column("fingerprint", sa.JSON, nullable=False),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Index("ix_sc_fingerprints_partition", "contract", "partition", "candidate_id"),
)

# One row per target ever leased: who may commit for it now (docs/leases.md). ``token`` grows by one at every
# take by a new holder and never goes back (the row is never deleted), so a commit carrying an older token
# was overtaken; ``expires_at`` is pushed forward while the holder works and set to the release time at the end.
leases = sa.Table(
    "sc_leases", metadata,
    sa.Column("contract", sa.String(128), primary_key=True),
    sa.Column("partition", sa.String(256), primary_key=True),
    sa.Column("holder", sa.String(128), nullable=False),  # the Dagster run id of the worker
    sa.Column("token", sa.Integer, nullable=False),
    sa.Column("taken_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
)

# every site host's budget shared by the fetching processes of all chunk steps on all worker hosts
# (adapters/store/host_budgets.py; PostgreSQL only): a slot is one request in flight, held until its holder
# gives it back or ``expires_at`` (a frozen or killed holder's slot comes back by itself); ``next_at`` is when
# the host's next request may start under its contract's fetch.rate
host_slots = sa.Table(
    "sc_host_slots", metadata,
    sa.Column("host", sa.String(255), primary_key=True),
    sa.Column("slot", sa.Integer, primary_key=True),
    sa.Column("holder", sa.String(128), nullable=False),
    sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
)
host_rates = sa.Table(
    "sc_host_rates", metadata,
    sa.Column("host", sa.String(255), primary_key=True),
    sa.Column("next_at", sa.DateTime(timezone=True), nullable=False),
)

# each proxy of a contract's fetch.proxies as the last run that used it left it (adapters/store/proxy_health.py):
# its smoothed success and latency, its rest, and when a quarantined one may be re-checked, so the next run
# does not hand it requests before that; the counts are that run's. ``proxy`` is the proxy's shown name
# (its ``name``, or its URL, which never holds credentials).
proxy_health = sa.Table(
    "sc_proxy_health", metadata,
    sa.Column("contract", sa.String(128), primary_key=True),
    sa.Column("proxy", sa.String(512), primary_key=True),
    sa.Column("success", sa.Float, nullable=False),
    sa.Column("latency_s", sa.Float),
    sa.Column("rest_s", sa.Float, nullable=False),
    sa.Column("recheck_at", sa.DateTime(timezone=True)),  # null: in rotation
    sa.Column("score", sa.Float, nullable=False),
    sa.Column("requests", sa.Integer, nullable=False),
    sa.Column("failures", sa.Integer, nullable=False),
    sa.Column("quarantines", sa.Integer, nullable=False),
    sa.Column("rechecks", sa.Integer, nullable=False),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
)

# raw pages when the page storage is the project store (adapters/pages/database.py): gzip-compressed HTML
# under the sha256 of its UTF-8 text, so every worker host reaches the same pages through the store
pages = sa.Table(
    "sc_pages", metadata,
    sa.Column("sha256", sa.String(64), primary_key=True),
    sa.Column("body", sa.LargeBinary, nullable=False),
    # POSIX time the page was last stored or fetched again: retention's grace period spares fresh pages
    sa.Column("stored_at", sa.Float, nullable=False),
)

# One row per job a target asked a hosted scraping provider for (docs/providers.md). The row is written as
# ``submitting`` before the submit and gets the provider's job id before the first poll, so a run that dies
# in between leaves a marker without a job id: the target is then indeterminate until a person reconciles it.
# ``cost_micros``: what the provider charged, in millionths of the contract's currency (budgets sum it).
provider_jobs = sa.Table(
    "sc_provider_jobs", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("contract", sa.String(128), nullable=False),
    sa.Column("partition", sa.String(256), nullable=False),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("sweep", sa.String(256), nullable=False),
    sa.Column("state", _enum(ProviderJobState, "ck_sc_provider_jobs_state", 16), nullable=False),
    sa.Column("job_id", sa.String(256)),
    sa.Column("cost_micros", sa.BigInteger),
    sa.Column("polls", sa.Integer, nullable=False, default=0, server_default="0"),
    sa.Column("error", sa.Text),
    sa.Column("note", sa.Text),  # who reconciled it, how and why
    sa.Column("submitting_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Index("ix_sc_provider_jobs_target", "contract", "partition", "id"),
    sa.Index("ix_sc_provider_jobs_spend", "contract", "submitting_at"),
)

# One row per repair a target asked its provider for, when healing refused (docs/providers.md): the fields
# and the selectors that failed, the provider's proposal (field → selector, and the value it read), what it
# cost (budgets sum it with the jobs), and the person's decision. A proposal changes nothing by itself: its
# candidate waits in quarantine, and only an approval whose record passes the contract's checks makes a
# selector version (source ``provider_repair``).
repair_proposals = sa.Table(
    "sc_repair_proposals", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("contract", sa.String(128), nullable=False),
    sa.Column("partition", sa.String(256), nullable=False),
    sa.Column("url", sa.Text, nullable=False),
    sa.Column("run_id", sa.String(64), nullable=False),
    sa.Column("sweep", sa.String(256), nullable=False),
    sa.Column("job_id", sa.String(256)),  # the provider job whose page needed the repair
    sa.Column("page_sha256", sa.String(64)),  # that page, in the page storage
    sa.Column("state", _enum(RepairState, "ck_sc_repair_proposals_state", 16), nullable=False),
    sa.Column("repair_id", sa.String(256)),
    sa.Column("fields", sa.JSON, nullable=False),  # field → the selector that failed
    sa.Column("selectors", sa.JSON),  # the proposal: field → selector
    sa.Column("proposed_values", sa.JSON),  # field → the value the provider says its selector reads
    sa.Column("cost_micros", sa.BigInteger),
    sa.Column("error", sa.Text),
    sa.Column("selector_version", sa.Integer),  # the version an accepted proposal made
    sa.Column("decided_by", sa.String(256)),
    sa.Column("decided_reason", sa.Text),
    sa.Column("decided_at", sa.DateTime(timezone=True)),
    sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    sa.Index("ix_sc_repair_proposals_target", "contract", "partition", "id"),
    sa.Index("ix_sc_repair_proposals_spend", "contract", "created_at"),
)
