"""Where a document came from, for its wiki and graph work (SPEC T-18, T-10): the session
the upload named (its progress notices go to that session's stream), and the token
budgets the gateway admitted the upload under (generation pauses on the tenant's own
limits; NULL: the worker's defaults, as for a document queued before this).

Expand only: three nullable columns, so the last release keeps working on the schema.

Revision ID: 0025_document_origin
Revises: 0024_wiki
"""

import sqlalchemy as sa
from alembic import op

revision = "0025_document_origin"
down_revision = "0024_wiki"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("documents", sa.Column("session_id", sa.String(128), nullable=True))
    op.add_column("documents", sa.Column("budget_tokens_per_minute", sa.Integer, nullable=True))
    op.add_column("documents", sa.Column("budget_tokens_per_day", sa.BigInteger, nullable=True))


def downgrade() -> None:
    for column in ("budget_tokens_per_day", "budget_tokens_per_minute", "session_id"):
        op.drop_column("documents", column)
