"""Discovery pages (issue 24): each sitemap a discovery read, with its validators, for conditional requests

Revision 0015_discovery_pages (after 0014_repair_proposals). A new table only: nothing existing changes.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0015_discovery_pages'
down_revision = '0014_repair_proposals'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'sc_discovery_pages',
        sa.Column('contract', sa.String(length=128), nullable=False),
        sa.Column('url', sa.String(length=2048), nullable=False),
        sa.Column('etag', sa.Text(), nullable=True),
        sa.Column('last_modified', sa.Text(), nullable=True),
        sa.Column('body', sa.LargeBinary(), nullable=False),
        sa.Column('fetched_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('contract', 'url'),
    )


def downgrade() -> None:
    op.drop_table('sc_discovery_pages')
