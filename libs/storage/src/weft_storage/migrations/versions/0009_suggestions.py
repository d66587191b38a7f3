"""Suggestions (SPEC Q-01..Q-05): the turns the service saw, the suggestion set cache with
its generation lease (Q-04), and the suggestion events (Q-05).

Revision ID: 0009_suggestions
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0009_suggestions"
down_revision = "0001"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)
_NOW = sa.text("now()")


def upgrade() -> None:
    op.create_table(
        "suggestion_turns",
        sa.Column("tenant_id", sa.String(128), primary_key=True),
        sa.Column("request_id", sa.String(128), primary_key=True),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("agent_id", sa.String(128), nullable=False),
        sa.Column("user_message_id", sa.String(128), nullable=False),
        sa.Column("query", sa.Text, nullable=False),
        sa.Column("answer", sa.Text, nullable=True),
        sa.Column("status", sa.String(16), nullable=True),
        sa.Column("is_fallback", sa.Boolean, nullable=False, server_default="false"),
        sa.Column("references", JSONB, nullable=False, server_default="[]"),
        sa.Column("credential", sa.Text, nullable=True),
        sa.Column("created_at", _TS, nullable=False, server_default=_NOW),
        sa.Column("completed_at", _TS, nullable=True),
    )
    op.create_index(
        "ix_suggestion_turns_session",
        "suggestion_turns",
        ["tenant_id", "session_id", "created_at"],
    )
    op.create_table(
        "message_suggestion_sets",
        sa.Column("tenant_id", sa.String(128), primary_key=True),
        sa.Column("assistant_message_id", sa.String(128), primary_key=True),
        sa.Column("placement", sa.String(16), primary_key=True),
        sa.Column("config_hash", sa.String(64), primary_key=True),
        sa.Column("locale", sa.String(35), primary_key=True),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("request_id", sa.String(128), nullable=False),
        sa.Column("config", JSONB, nullable=False, server_default="{}"),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("questions", JSONB, nullable=False, server_default="[]"),
        sa.Column("reason", sa.String(200), nullable=False, server_default=""),
        sa.Column("owner", sa.String(64), nullable=True),
        sa.Column("lease_until", _TS, nullable=True),
        sa.Column("generations", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", _TS, nullable=False, server_default=_NOW),
        sa.Column("updated_at", _TS, nullable=False, server_default=_NOW),
        sa.CheckConstraint(
            "state IN ('generating', 'ready', 'suppressed', 'failed')",
            name="ck_suggestion_sets_state",
        ),
    )
    op.create_index(
        "ix_suggestion_sets_session", "message_suggestion_sets", ["tenant_id", "session_id"]
    )
    # The sweeper looks only at sets still generating (a crashed generator's expired lease).
    op.create_index(
        "ix_suggestion_sets_leases",
        "message_suggestion_sets",
        ["lease_until"],
        postgresql_where=sa.text("state = 'generating'"),
    )
    op.create_table(
        "suggestion_events",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column("tenant_id", sa.String(128), nullable=False),
        sa.Column("session_id", sa.String(128), nullable=False),
        sa.Column("user_id", sa.String(128), nullable=False),
        sa.Column("assistant_message_id", sa.String(128), nullable=False),
        sa.Column("placement", sa.String(16), nullable=False),
        sa.Column("question_id", sa.String(64), nullable=True),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("attributed_message_id", sa.String(128), nullable=True),
        sa.Column("created_at", _TS, nullable=False, server_default=_NOW),
        sa.CheckConstraint(
            "kind IN ('impression', 'click', 'dismiss', 'regenerate')",
            name="ck_suggestion_events_kind",
        ),
    )
    op.create_index(
        "ix_suggestion_events_session",
        "suggestion_events",
        ["tenant_id", "session_id", "created_at"],
    )
    op.create_index(
        "ix_suggestion_events_unattributed",
        "suggestion_events",
        ["tenant_id", "session_id"],
        postgresql_where=sa.text("kind = 'click' AND attributed_message_id IS NULL"),
    )


def downgrade() -> None:
    op.drop_table("suggestion_events")
    op.drop_table("message_suggestion_sets")
    op.drop_table("suggestion_turns")
