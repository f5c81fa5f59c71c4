"""Target leases with a fencing token (issue 22): one scraper per target on any Dagster instance.

Revision 0008_target_leases (after 0007). A new table: existing stores start with no lease, and the first
scrape of each target takes one (docs/leases.md).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0008_target_leases'
down_revision = '0007'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'sc_leases',
        sa.Column('contract', sa.String(length=128), nullable=False),
        sa.Column('partition', sa.String(length=256), nullable=False),
        sa.Column('holder', sa.String(length=128), nullable=False),
        sa.Column('token', sa.Integer(), nullable=False),
        sa.Column('taken_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('contract', 'partition'),
    )


def downgrade() -> None:
    op.drop_table('sc_leases')
