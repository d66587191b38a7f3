"""Each prompt names the deployment (topic prefix) whose memory recorded it: a memory's
expiry timer fires only its own deployment's prompts, so deployments that share a database
(test stacks, a staging copy) never publish each other's expiries on their own topics.

Revision ID: 0020_prompt_deployment
Revises: 0019_approvals
"""

import sqlalchemy as sa
from alembic import op

revision = "0020_prompt_deployment"
down_revision = "0019_approvals"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column(
        "agent_prompts",
        sa.Column("deployment", sa.String(128), nullable=False, server_default=""),
    )


def downgrade() -> None:
    op.drop_column("agent_prompts", "deployment")
