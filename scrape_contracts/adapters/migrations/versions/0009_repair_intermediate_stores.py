"""Repair stores migrated by an intermediate commit: create whatever of 0005-0007 they lack (issue 28).

Revision 0009_repair_intermediate_stores (after 0008_target_leases).
Before revision ids were fixed for good, parallel branches numbered their migrations apart and the merges
renumbered them: a store migrated by the front door's commit is at "0007" without 0005's column and
0006's table; one migrated by the fingerprints' commit is at "0006" without 0005's column (its next upgrade
then ran 0007 only). This creates what is missing and nothing else, so it is a no-op on every store whose
migrations ran in order, and running it twice changes nothing. Self-contained: the schema of 0005-0007.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0009_repair_intermediate_stores'
down_revision = '0008_target_leases'
branch_labels = None
depends_on = None


def _tables() -> dict[str, list[sa.SchemaItem]]:
    """What 0006 and 0007 create, by table."""
    return {
        'sc_fingerprints': [
            sa.Column('candidate_id', sa.Integer(), nullable=False),
            sa.Column('field', sa.String(length=128), nullable=False),
            sa.Column('contract', sa.String(length=128), nullable=False),
            sa.Column('partition', sa.String(length=256), nullable=False),
            sa.Column('fingerprint', sa.JSON(), nullable=False),
            sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
            sa.ForeignKeyConstraint(['candidate_id'], ['sc_candidates.id'], ),
            sa.PrimaryKeyConstraint('candidate_id', 'field'),
        ],
        'sc_api_audit': [
            sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
            sa.Column('token_id', sa.String(length=32), nullable=False),
            sa.Column('owner', sa.String(length=256), nullable=False),
            sa.Column('action', sa.String(length=64), nullable=False),
            sa.Column('contract', sa.String(length=128), nullable=False),
            sa.Column('target', sa.Text(), nullable=False),
            sa.Column('reason', sa.Text(), nullable=False),
            sa.Column('request_id', sa.String(length=64), nullable=False),
            sa.Column('outcome', sa.Text(), nullable=False),
            sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
            sa.PrimaryKeyConstraint('id'),
        ],
        'sc_api_idempotency': [
            sa.Column('contract', sa.String(length=128), nullable=False),
            sa.Column('key', sa.String(length=256), nullable=False),
            sa.Column('request_sha256', sa.String(length=64), nullable=False),
            sa.Column('run_ids', sa.JSON(), nullable=False),
            sa.Column('token_id', sa.String(length=32), nullable=False),
            sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
            sa.PrimaryKeyConstraint('contract', 'key'),
        ],
        'sc_api_tokens': [
            sa.Column('id', sa.String(length=32), nullable=False),
            sa.Column('token_sha256', sa.String(length=64), nullable=False),
            sa.Column('owner', sa.String(length=256), nullable=False),
            sa.Column('scope', sa.Enum('read', 'write', name='ck_sc_api_tokens_scope', native_enum=False,
                                       create_constraint=True, length=16), nullable=False),
            sa.Column('label', sa.Text(), nullable=False),
            sa.Column('created_at', sa.DateTime(timezone=True), nullable=False),
            sa.Column('revoked_at', sa.DateTime(timezone=True), nullable=True),
            sa.PrimaryKeyConstraint('id'),
            sa.UniqueConstraint('token_sha256'),
        ],
    }


def upgrade() -> None:
    inspector = sa.inspect(op.get_bind())
    tables = set(inspector.get_table_names())
    if 'last_success_at' not in {c['name'] for c in inspector.get_columns('sc_partition_state')}:  # 0005
        with op.batch_alter_table('sc_partition_state', schema=None) as batch_op:
            batch_op.add_column(sa.Column('last_success_at', sa.DateTime(timezone=True), nullable=True))
    for name, items in _tables().items():  # 0006, 0007
        if name not in tables:
            op.create_table(name, *items)
    indexed = 'sc_fingerprints' in tables and 'ix_sc_fingerprints_partition' in {
        i['name'] for i in inspector.get_indexes('sc_fingerprints')}
    if not indexed:
        with op.batch_alter_table('sc_fingerprints', schema=None) as batch_op:
            batch_op.create_index('ix_sc_fingerprints_partition', ['contract', 'partition', 'candidate_id'],
                                  unique=False)


def downgrade() -> None:
    pass  # it only created what 0005-0007 should have: their own downgrades remove it
