"""Provider jobs (issue 25): the jobs a target asked a hosted scraping provider for, and their submit markers

Revision 0012_provider_jobs (after 0011_discovered_targets). A new table only: nothing existing
changes, and a store without provider contracts keeps it empty.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0012_provider_jobs'
down_revision = '0011_discovered_targets'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'sc_provider_jobs',
        sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
        sa.Column('contract', sa.String(length=128), nullable=False),
        sa.Column('partition', sa.String(length=256), nullable=False),
        sa.Column('url', sa.Text(), nullable=False),
        sa.Column('run_id', sa.String(length=64), nullable=False),
        sa.Column('sweep', sa.String(length=256), nullable=False),
        sa.Column('state', sa.Enum('submitting', 'submitted', 'done', 'failed', 'indeterminate', 'abandoned',
                                   name='ck_sc_provider_jobs_state', native_enum=False,
                                   create_constraint=True, length=16), nullable=False),
        sa.Column('job_id', sa.String(length=256), nullable=True),
        sa.Column('cost_micros', sa.BigInteger(), nullable=True),
        sa.Column('polls', sa.Integer(), server_default='0', nullable=False),
        sa.Column('error', sa.Text(), nullable=True),
        sa.Column('note', sa.Text(), nullable=True),
        sa.Column('submitting_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('updated_at', sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint('id'),
    )
    with op.batch_alter_table('sc_provider_jobs', schema=None) as batch_op:
        batch_op.create_index('ix_sc_provider_jobs_target', ['contract', 'partition', 'id'], unique=False)
        batch_op.create_index('ix_sc_provider_jobs_spend', ['contract', 'submitting_at'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('sc_provider_jobs', schema=None) as batch_op:
        batch_op.drop_index('ix_sc_provider_jobs_spend')
        batch_op.drop_index('ix_sc_provider_jobs_target')
    op.drop_table('sc_provider_jobs')
