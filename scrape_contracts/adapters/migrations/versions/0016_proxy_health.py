"""Proxy health across runs (issue 24): each proxy's lasting health per contract, so a proxy quarantined by
one run rests out its quarantine in the next

Revision 0016_proxy_health (after 0015_discovery_pages). A new table only: nothing existing changes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0016_proxy_health'
down_revision = '0015_discovery_pages'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'sc_proxy_health',
        sa.Column('contract', sa.String(length=128), nullable=False),
        sa.Column('proxy', sa.String(length=512), nullable=False),
        sa.Column('success', sa.Float(), nullable=False),
        sa.Column('latency_s', sa.Float(), nullable=True),
        sa.Column('rest_s', sa.Float(), nullable=False),
        sa.Column('recheck_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('score', sa.Float(), nullable=False),
        sa.Column('requests', sa.Integer(), nullable=False),
        sa.Column('failures', sa.Integer(), nullable=False),
        sa.Column('quarantines', sa.Integer(), nullable=False),
        sa.Column('rechecks', sa.Integer(), nullable=False),
        sa.Column('run_id', sa.String(length=64), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('contract', 'proxy'),
    )


def downgrade() -> None:
    op.drop_table('sc_proxy_health')
