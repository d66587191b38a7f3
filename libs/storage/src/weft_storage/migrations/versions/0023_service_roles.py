"""A PostgreSQL role per service (docs/architecture.md, "Data ownership").

Each service connects as its own role (``weft_storage.ownership.SERVICE_ROLES``) with
rights on its own tables only; the role running migrations owns every table and is not
used by a service at run time. Roles are cluster-wide: created here (LOGIN, no password)
when the migrating role may (CREATEROLE), else this fails naming what a DBA must create
(deploy/local/infra.sh does it locally). Their passwords come from the services' URLs
(``python -m weft_storage.migrate upgrade``, docs/operations.md), their grants from the
ownership map after every upgrade (``migrations/env.py``), so this revision has nothing
to undo: dropping roles that other databases of the cluster may use is a DBA's call.

Revision ID: 0023_service_roles
Revises: 0001
"""

from alembic import op
from weft_storage.roles import ensure_roles

revision = "0023_service_roles"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    ensure_roles(op.get_bind())


def downgrade() -> None:
    pass
