"""Installed skill packages per tenant (SPEC S-04): name, description and the package as
a zip, with its content digest (sandboxes cache a mounted copy by it) and the installer
session that wrote it, if any.

Revision ID: 0017_skills
Revises: 0014_sandbox
"""

import sqlalchemy as sa
from alembic import op

revision = "0017_skills"
down_revision = "0014_sandbox"
branch_labels = None
depends_on = None

NOW = sa.text("now()")


def upgrade() -> None:
    op.create_table(
        "skill_packages",
        sa.Column("tenant_id", sa.String(128), primary_key=True),
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("description", sa.String(1024), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("archive", sa.LargeBinary, nullable=False),
        sa.Column("size_bytes", sa.BigInteger, nullable=False),
        sa.Column("file_count", sa.Integer, nullable=False),
        # The session of the skill installer that wrote it (None: uploaded through the
        # API); that installer may replace it, never another skill.
        sa.Column("installer_session", sa.String(128), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            nullable=False,
            server_default=sa.text("now()"),
        ),
    )


def downgrade() -> None:
    op.drop_table("skill_packages")
