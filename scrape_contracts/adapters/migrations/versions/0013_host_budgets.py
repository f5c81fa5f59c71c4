"""Host budgets (issue 23): every site host's request slots and rate, shared by all fetching processes

Revision 0013_host_budgets (after 0012_provider_jobs). New tables only: nothing existing changes. They are
used on PostgreSQL, where chunk steps of several worker hosts fetch at once; on SQLite they stay empty.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0013_host_budgets'
down_revision = '0012_provider_jobs'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'sc_host_slots',
        sa.Column('host', sa.String(length=255), nullable=False),
        sa.Column('slot', sa.Integer(), nullable=False),
        sa.Column('holder', sa.String(length=128), nullable=False),
        sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('host', 'slot'),
    )
    op.create_table(
        'sc_host_rates',
        sa.Column('host', sa.String(length=255), nullable=False),
        sa.Column('next_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('host'),
    )


def downgrade() -> None:
    op.drop_table('sc_host_rates')
    op.drop_table('sc_host_slots')
