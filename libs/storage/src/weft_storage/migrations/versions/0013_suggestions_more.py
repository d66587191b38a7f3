"""Suggestions: an index on ``suggestion_turns.created_at`` for the retention job that
deletes the turns older than its setting (``WEFT_TURN_RETENTION_DAYS``).

Revision ID: 0013_suggestions_more
Revises: 0009_suggestions
"""

from alembic import op

revision = "0013_suggestions_more"
down_revision = "0012_usage"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_suggestion_turns_created", "suggestion_turns", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_suggestion_turns_created", table_name="suggestion_turns")
