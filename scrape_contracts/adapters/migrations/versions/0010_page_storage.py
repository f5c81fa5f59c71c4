"""Raw pages in the project store (issue 23): a page storage every worker host reaches.

Revision 0010_page_storage (after 0009_repair_intermediate_stores). A new table, used only when the page
storage is ``store`` (docs/scale.md); stores keeping their pages in a folder or an object store leave it empty.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0010_page_storage'
down_revision = '0009_repair_intermediate_stores'
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        'sc_pages',
        sa.Column('sha256', sa.String(length=64), nullable=False),
        sa.Column('body', sa.LargeBinary(), nullable=False),
        sa.Column('stored_at', sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint('sha256'),
    )


def downgrade() -> None:
    op.drop_table('sc_pages')
