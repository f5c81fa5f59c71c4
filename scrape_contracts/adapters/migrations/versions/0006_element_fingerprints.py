"""Element fingerprints per field of a candidate (issue 15): healing works once the old raw page is pruned.

Revision 0006 (after 0005). A new table:
existing stores get it empty, and records accepted before it heal from their kept pages as before.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0006'
down_revision = '0005'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'sc_fingerprints',
        sa.Column('candidate_id', sa.Integer(), nullable=False),
        sa.Column('field', sa.String(length=128), nullable=False),
        sa.Column('contract', sa.String(length=128), nullable=False),
        sa.Column('partition', sa.String(length=256), nullable=False),
        sa.Column('fingerprint', sa.JSON(), nullable=False),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(['candidate_id'], ['sc_candidates.id'], ),
        sa.PrimaryKeyConstraint('candidate_id', 'field'),
    )
    with op.batch_alter_table('sc_fingerprints', schema=None) as batch_op:
        batch_op.create_index('ix_sc_fingerprints_partition', ['contract', 'partition', 'candidate_id'],
                              unique=False)


def downgrade() -> None:
    with op.batch_alter_table('sc_fingerprints', schema=None) as batch_op:
        batch_op.drop_index('ix_sc_fingerprints_partition')
    op.drop_table('sc_fingerprints')
