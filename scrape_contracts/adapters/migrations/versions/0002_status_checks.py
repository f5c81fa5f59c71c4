"""Statuses are enums: the database refuses a status, outcome, source or decision outside them.

The stored strings stay the same, so rows written by earlier releases pass the checks unchanged (a row
that does not makes the upgrade fail, and roll back, naming the constraint). On SQLite a CHECK can only
come with the table, so the four tables are rebuilt (copied) once; on PostgreSQL it is an ALTER TABLE.
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# the values of CandidateStatus, Outcome, AcceptSource, SelectorSource and Decision at this revision
CHECKS = {
    "sc_candidates": {
        "ck_sc_candidates_status": ("status", ("pending", "accepted", "quarantined", "rejected", "unchanged",
                                               "superseded")),
        "ck_sc_candidates_outcome": ("outcome", ("valid", "unchanged", "healed", "review_required",
                                                 "rejected", "failed")),
    },
    "sc_accepted": {"ck_sc_accepted_source": ("source", ("scrape", "review"))},
    "sc_selector_versions": {"ck_sc_selector_versions_source": ("source", ("contract", "heal"))},
    "sc_reviews": {"ck_sc_reviews_decision": ("decision", ("accept", "reject"))},
}


def _condition(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


def upgrade() -> None:
    for table, checks in CHECKS.items():
        with op.batch_alter_table(table) as batch:
            for name, (column, values) in checks.items():
                batch.create_check_constraint(name, _condition(column, values))


def downgrade() -> None:
    for table, checks in CHECKS.items():
        with op.batch_alter_table(table) as batch:
            for name in checks:
                batch.drop_constraint(name, type_="check")
