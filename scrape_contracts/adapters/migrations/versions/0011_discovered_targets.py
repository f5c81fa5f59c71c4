"""Discovered targets (issue 24): where each dynamic target was found, its lastmod, and whether it is gone.

Revision 0011_discovered_targets (after 0010_page_storage). Four nullable columns on
sc_targets: existing targets count as added by hand (no source), so no discovery ever marks them gone.
Only the columns a store lacks are added, as 0009 does, so running it again changes nothing.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0011_discovered_targets'
down_revision = '0010_page_storage'
branch_labels = None
depends_on = None


def upgrade() -> None:
    present = {c['name'] for c in sa.inspect(op.get_bind()).get_columns('sc_targets')}
    columns = [sa.Column('source', sa.Text(), nullable=True),
               sa.Column('seen_at', sa.DateTime(timezone=True), nullable=True),
               sa.Column('lastmod', sa.DateTime(timezone=True), nullable=True),
               sa.Column('gone_at', sa.DateTime(timezone=True), nullable=True)]
    missing = [column for column in columns if column.name not in present]
    if missing:
        with op.batch_alter_table('sc_targets', schema=None) as batch_op:
            for column in missing:
                batch_op.add_column(column)


def downgrade() -> None:
    with op.batch_alter_table('sc_targets', schema=None) as batch_op:
        batch_op.drop_column('gone_at')
        batch_op.drop_column('lastmod')
        batch_op.drop_column('seen_at')
        batch_op.drop_column('source')
