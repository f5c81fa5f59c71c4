"""The schema of the releases before migrations: what ``metadata.create_all`` made (c37f228).

A store created by one of those releases has exactly these tables and no version table: opening it stamps
this revision without running it, and the later revisions upgrade it in place. Kept verbatim on purpose:
a migration describes the schema of its own time and never imports ``adapters/schema.py``.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sc_candidates",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("contract", sa.String(128), nullable=False),
        sa.Column("partition", sa.String(256), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("record", sa.JSON, nullable=False),
        sa.Column("outcome", sa.String(32), nullable=False),
        sa.Column("status", sa.String(32), nullable=False),
        sa.Column("details", sa.JSON, nullable=False),
        sa.Column("page_sha256", sa.String(64)),
        sa.Column("selector_version", sa.Integer),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_sc_candidates_partition", "sc_candidates", ["contract", "partition", "id"])
    op.create_table(
        "sc_accepted",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("contract", sa.String(128), nullable=False),
        sa.Column("partition", sa.String(256), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("record", sa.JSON, nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("candidate_id", sa.Integer, sa.ForeignKey("sc_candidates.id"), unique=True),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("page_sha256", sa.String(64)),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("reviewer", sa.String(256)),
        sa.Column("reason", sa.Text),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("contract", "partition", "version", name="uq_sc_accepted_version"),
    )
    op.create_table(
        "sc_selector_versions",
        sa.Column("contract", sa.String(128), primary_key=True),
        sa.Column("version", sa.Integer, primary_key=True),
        sa.Column("parent_version", sa.Integer),
        sa.Column("selectors", sa.JSON, nullable=False),
        sa.Column("contract_selectors", sa.JSON, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("run_id", sa.String(64)),
        sa.Column("partition", sa.String(256)),
        sa.Column("changes", sa.JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "sc_reviews",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("contract", sa.String(128), nullable=False),
        sa.Column("partition", sa.String(256), nullable=False),
        sa.Column("candidate_id", sa.Integer, sa.ForeignKey("sc_candidates.id"), nullable=False, unique=True),
        sa.Column("decision", sa.String(16), nullable=False),
        sa.Column("reviewer", sa.String(256), nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("run_id", sa.String(64)),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "sc_partition_state",
        sa.Column("contract", sa.String(128), primary_key=True),
        sa.Column("partition", sa.String(256), primary_key=True),
        sa.Column("paused", sa.Boolean, nullable=False),
        sa.Column("pause_reason", sa.Text),
        sa.Column("heal_attempts", sa.Integer, nullable=False),
        sa.Column("etag", sa.Text),
        sa.Column("last_modified", sa.Text),
        sa.Column("last_page_sha256", sa.String(64)),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_table(
        "sc_targets",
        sa.Column("contract", sa.String(128), primary_key=True),
        sa.Column("partition", sa.String(256), primary_key=True),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    for table in ("sc_targets", "sc_partition_state", "sc_reviews", "sc_selector_versions", "sc_accepted",
                  "sc_candidates"):
        op.drop_table(table)
