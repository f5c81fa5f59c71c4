"""Provider repairs (issue 25, item 2): the repairs a target asked its provider for, and their review

Revision 0014_repair_proposals (after 0013_host_budgets). A new table,
and one more value a selector version's source may hold (``provider_repair``): the check constraint of
sc_selector_versions.source is made again with it (SQLite copies the table once; PostgreSQL alters it).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0014_repair_proposals'
down_revision = '0013_host_budgets'
branch_labels = None
depends_on = None

SOURCE_CHECK = 'ck_sc_selector_versions_source'


def _sources(*values: str) -> str:
    return f"source IN ({', '.join(repr(v) for v in values)})"


def upgrade() -> None:
    op.create_table(
        'sc_repair_proposals',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('contract', sa.String(length=128), nullable=False),
        sa.Column('partition', sa.String(length=256), nullable=False),
        sa.Column('url', sa.Text(), nullable=False),
        sa.Column('run_id', sa.String(length=64), nullable=False),
        sa.Column('sweep', sa.String(length=256), nullable=False),
        sa.Column('job_id', sa.String(length=256), nullable=True),
        sa.Column('page_sha256', sa.String(length=64), nullable=True),
        sa.Column('state', sa.Enum('requesting', 'proposed', 'failed', 'accepted', 'refused', 'rejected',
                                   name='ck_sc_repair_proposals_state', native_enum=False,
                                   create_constraint=True, length=16), nullable=False),
        sa.Column('repair_id', sa.String(length=256), nullable=True),
        sa.Column('fields', sa.JSON(), nullable=False),
        sa.Column('selectors', sa.JSON(), nullable=True),
        sa.Column('proposed_values', sa.JSON(), nullable=True),
        sa.Column('cost_micros', sa.BigInteger(), nullable=True),
        sa.Column('error', sa.Text(), nullable=True),
        sa.Column('selector_version', sa.Integer(), nullable=True),
        sa.Column('decided_by', sa.String(length=256), nullable=True),
        sa.Column('decided_reason', sa.Text(), nullable=True),
        sa.Column('decided_at', sa.DateTime(timezone=True), nullable=True),
        sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('id'),
    )
    with op.batch_alter_table('sc_repair_proposals', schema=None) as batch_op:
        batch_op.create_index('ix_sc_repair_proposals_target', ['contract', 'partition', 'id'], unique=False)
        batch_op.create_index('ix_sc_repair_proposals_spend', ['contract', 'created_at'], unique=False)
    with op.batch_alter_table('sc_selector_versions', schema=None) as batch_op:
        batch_op.drop_constraint(SOURCE_CHECK, type_='check')
        batch_op.create_check_constraint(SOURCE_CHECK, _sources('contract', 'heal', 'provider_repair'))


def downgrade() -> None:
    with op.batch_alter_table('sc_selector_versions', schema=None) as batch_op:
        batch_op.drop_constraint(SOURCE_CHECK, type_='check')
        batch_op.create_check_constraint(SOURCE_CHECK, _sources('contract', 'heal'))
    with op.batch_alter_table('sc_repair_proposals', schema=None) as batch_op:
        batch_op.drop_index('ix_sc_repair_proposals_spend')
        batch_op.drop_index('ix_sc_repair_proposals_target')
    op.drop_table('sc_repair_proposals')
