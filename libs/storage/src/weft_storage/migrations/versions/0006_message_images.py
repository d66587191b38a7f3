"""Images of user messages (SPEC E-26): their references and the VLM's descriptions.

Revision ID: 0006_message_images
Revises: 0005_memory
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql as pg

revision = "0006_message_images"
down_revision = "0005_memory"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "messages",
        sa.Column("images", pg.JSONB, nullable=False, server_default=sa.text("'[]'::jsonb")),
    )


def downgrade() -> None:
    op.drop_column("messages", "images")
