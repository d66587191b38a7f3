"""The user's locale of each turn suggestions saw (from ``turn_started``): follow-up sets
are keyed and written in it (SPEC Q-04).

Revision ID: 0018_suggestion_locale
Revises: 0017_skills
"""

import sqlalchemy as sa
from alembic import op

revision = "0018_suggestion_locale"
down_revision = "0017_skills"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("suggestion_turns", sa.Column("locale", sa.String(35), nullable=True))


def downgrade() -> None:
    op.drop_column("suggestion_turns", "locale")
