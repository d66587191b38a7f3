"""A prompt of kind ``mcp_authorization`` keeps the URL where the user authorises the MCP
server (SPEC H-06), so a client that reloads still shows the link.

Revision ID: 0022_prompt_authorization_url
Revises: 0021_mcp_servers
"""

import sqlalchemy as sa
from alembic import op

revision = "0022_prompt_authorization_url"
down_revision = "0021_mcp_servers"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("agent_prompts", sa.Column("authorization_url", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("agent_prompts", "authorization_url")
