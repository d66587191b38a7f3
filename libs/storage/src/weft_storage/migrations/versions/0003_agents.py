"""Agents: who created a custom agent, and a per-tenant listing index.

Revision ID: 0003
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "agents", sa.Column("created_by", sa.String(128), nullable=False, server_default="")
    )
    op.create_index("ix_agents_tenant_created", "agents", ["tenant_id", "created_at"])


def downgrade() -> None:
    op.drop_index("ix_agents_tenant_created", table_name="agents")
    op.drop_column("agents", "created_by")
