"""Sandbox checkpoints (SPEC S-03): a git commit of a session's /workspace, the latest
with the whole repository as a git bundle so any replica can restore it.

Revision ID: 0014_sandbox
Revises: 0009_suggestions
"""

import sqlalchemy as sa
from alembic import op

revision = "0014_sandbox"
down_revision = "0013_suggestions_more"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sandbox_checkpoints",
        sa.Column("tenant_id", sa.String(128), primary_key=True),
        sa.Column("session_id", sa.String(128), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("call_id", sa.String(128), nullable=False),
        sa.Column("commit", sa.String(64), nullable=False),
        # Only the newest row keeps its bundle: a bundle holds the whole history.
        sa.Column("bundle", sa.LargeBinary, nullable=True),
        sa.Column("size_bytes", sa.BigInteger, nullable=False, server_default="0"),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
    )
    op.create_index(
        "ix_sandbox_checkpoints_turn",
        "sandbox_checkpoints",
        ["tenant_id", "session_id", "request_id"],
    )


def downgrade() -> None:
    op.drop_table("sandbox_checkpoints")
