"""Administration: tenants, key expiry, and an append-only audit log of admin actions.

Tenants existed before only as ids on rows: every tenant id found on ``api_keys`` gets a
row (active), so existing keys keep working and the operator sees them. Keys of a tenant
without a row still authenticate (rows written by hand or by older tools); a tenant is
suspended or deleted only through its row.

``admin_audit`` refuses UPDATE, DELETE and TRUNCATE through triggers: the services' role
owns the table, and an owner keeps every privilege a REVOKE would take away.

Revision ID: 0010_admin
Revises: 0009_suggestions
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import JSONB

revision = "0010_admin"
down_revision = "0009_suggestions"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)
_NOW = sa.text("now()")

_REFUSE = """
CREATE FUNCTION weft_admin_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'admin_audit is append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$$
"""


def upgrade() -> None:
    op.create_table(
        "tenants",
        sa.Column("id", sa.String(128), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False, server_default=""),
        sa.Column("status", sa.String(16), nullable=False, server_default="active"),
        sa.Column("settings", JSONB, nullable=False, server_default="{}"),
        sa.Column("issuer", sa.String(500), nullable=True, unique=True),
        sa.Column("created_at", _TS, nullable=False, server_default=_NOW),
        sa.Column("updated_at", _TS, nullable=False, server_default=_NOW),
        sa.CheckConstraint(
            "status IN ('active', 'suspended', 'deleting')", name="ck_tenants_status"
        ),
    )
    op.execute(
        "INSERT INTO tenants (id, name) SELECT DISTINCT tenant_id, tenant_id FROM api_keys "
        "ON CONFLICT DO NOTHING"
    )
    op.add_column("api_keys", sa.Column("expires_at", _TS, nullable=True))
    op.create_table(
        "admin_audit",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("at", _TS, nullable=False, server_default=_NOW),
        sa.Column("actor", sa.String(200), nullable=False),
        sa.Column("action", sa.String(64), nullable=False),
        sa.Column("target_type", sa.String(32), nullable=False),
        sa.Column("target_id", sa.String(256), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("detail", JSONB, nullable=False, server_default="{}"),
        sa.Column("error", sa.Text, nullable=True),
    )
    op.create_index("ix_admin_audit_target", "admin_audit", ["target_type", "target_id", "id"])
    op.create_index("ix_admin_audit_at", "admin_audit", ["at"])
    op.execute(_REFUSE)
    op.execute(
        "CREATE TRIGGER admin_audit_no_change BEFORE UPDATE OR DELETE ON admin_audit "
        "FOR EACH ROW EXECUTE FUNCTION weft_admin_audit_append_only()"
    )
    op.execute(
        "CREATE TRIGGER admin_audit_no_truncate BEFORE TRUNCATE ON admin_audit "
        "FOR EACH STATEMENT EXECUTE FUNCTION weft_admin_audit_append_only()"
    )
    op.execute("REVOKE UPDATE, DELETE, TRUNCATE ON admin_audit FROM PUBLIC")


def downgrade() -> None:
    op.drop_table("admin_audit")
    op.execute("DROP FUNCTION IF EXISTS weft_admin_audit_append_only()")
    op.drop_column("api_keys", "expires_at")
    op.drop_table("tenants")
