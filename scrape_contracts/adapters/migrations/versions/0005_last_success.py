"""When each target's scrape last succeeded (issue 11): the freshness check compares it with the schedule.

Revision 0005 (after 0004). One nullable column: existing targets start unknown, and their next success
sets it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0005'
down_revision = '0004'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('sc_partition_state', schema=None) as batch_op:
        batch_op.add_column(sa.Column('last_success_at', sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('sc_partition_state', schema=None) as batch_op:
        batch_op.drop_column('last_success_at')
