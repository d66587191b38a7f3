"""Unfinished turns, fast: a partial index over running assistant rows, which the engine's
``TurnAuditor`` reads every few seconds through memory (``/internal/turns/unfinished``).

Revision ID: 0008_unfinished_turns
Revises: 0006_message_images
"""

import sqlalchemy as sa
from alembic import op

revision = "0008_unfinished_turns"
down_revision = "0006_message_images"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(
        "ix_messages_unfinished",
        "messages",
        ["created_at"],
        postgresql_where=sa.text("role = 'assistant' AND status = 'running'"),
    )


def downgrade() -> None:
    op.drop_index("ix_messages_unfinished", table_name="messages")
