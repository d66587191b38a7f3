"""Agent sharing: organisations of tenants, agents shared with them, recipients' switches
(SPEC A-10, E-26).

Revision ID: 0005_agent_sharing
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0005_agent_sharing"
down_revision = "0001"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "organisations",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("created_at", _TS, server_default=sa.func.now(), nullable=False),
    )
    op.create_table(
        "organisation_members",
        sa.Column(
            "organisation_id",
            sa.String(64),
            sa.ForeignKey("organisations.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("tenant_id", sa.String(128), primary_key=True),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("created_at", _TS, server_default=sa.func.now(), nullable=False),
    )
    op.create_index("ix_organisation_members_tenant", "organisation_members", ["tenant_id"])
    op.create_table(
        "agent_shares",
        sa.Column("owner_tenant_id", sa.String(128), primary_key=True),
        sa.Column("agent_id", sa.String(64), primary_key=True),
        sa.Column(
            "organisation_id",
            sa.String(64),
            sa.ForeignKey("organisations.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("shared_by", sa.String(128), nullable=False, server_default=""),
        sa.Column("created_at", _TS, server_default=sa.func.now(), nullable=False),
    )
    op.create_index("ix_agent_shares_organisation", "agent_shares", ["organisation_id"])
    op.create_table(
        "shared_agent_settings",
        sa.Column("tenant_id", sa.String(128), primary_key=True),
        sa.Column("agent_id", sa.String(64), primary_key=True),
        sa.Column("disabled", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("updated_at", _TS, server_default=sa.func.now(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("shared_agent_settings")
    op.drop_index("ix_agent_shares_organisation", table_name="agent_shares")
    op.drop_table("agent_shares")
    op.drop_index("ix_organisation_members_tenant", table_name="organisation_members")
    op.drop_table("organisation_members")
    op.drop_table("organisations")
