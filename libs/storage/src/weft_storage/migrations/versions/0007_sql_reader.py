"""The database role of ``database_query`` (SPEC T-11): views and row-level security.

``database_query`` runs the model's SELECT after ``SET LOCAL ROLE weft_sql_reader``. That
role reads only the views of schema ``weft_sql``, which expose the whitelisted columns of
``knowledge_bases``, ``documents`` and ``chunks``. The views are ``security_invoker``, so
the base tables' row-level security is checked against the reader, not against the view
owner (a view normally runs as its owner, and the owner of a table bypasses its RLS). A
restrictive policy for the reader keeps only the rows of the transaction's tenant
(``weft.tenant_id``) and knowledge bases (``weft.kb_scope``: ``*`` or comma-separated ids),
both set by the tool with ``set_config(..., true)``; unset settings match no row. Every
other role keeps all rows through a permissive ``true`` policy, and the table owner (the
services' role here) is not subject to RLS at all.

The role itself is cluster-wide: created here when the migrating role may (CREATEROLE),
else it must exist already (deploy/local/infra.sh, or a DBA in production).

Revision ID: 0007_sql_reader
Revises: 0005_knowledge_keyword
"""

from alembic import op

revision = "0007_sql_reader"
down_revision = "0005_knowledge_keyword"
branch_labels = None
depends_on = None

READER = "weft_sql_reader"
SCHEMA = "weft_sql"

# table -> (exposed columns, the column naming the knowledge base)
_VIEWS: dict[str, tuple[tuple[str, ...], str]] = {
    "knowledge_bases": (("id", "tenant_id", "name", "description", "created_at"), "id"),
    "documents": (
        (
            "id",
            "tenant_id",
            "knowledge_base_id",
            "title",
            "file_name",
            "status",
            "content_type",
            "size_bytes",
            "chunk_count",
            "embedded_count",
            "error",
            "created_at",
            "updated_at",
        ),
        "knowledge_base_id",
    ),
    "chunks": (
        ("id", "tenant_id", "knowledge_base_id", "document_id", "position", "content"),
        "knowledge_base_id",
    ),
}

_ENSURE_ROLE = f"""
DO $$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = '{READER}') THEN
        BEGIN
            CREATE ROLE {READER} NOLOGIN NOINHERIT;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE EXCEPTION 'role {READER} is missing and % may not create it', current_user
                USING HINT = 'as a superuser: CREATE ROLE {READER} NOLOGIN NOINHERIT; '
                             'GRANT {READER} TO <the services'' role> (docs/operations.md)';
        END;
    END IF;
    IF NOT pg_has_role(current_user, '{READER}', 'MEMBER') THEN
        EXECUTE format('GRANT {READER} TO %I', current_user);
    END IF;
END
$$
"""


def _scope_predicate(kb_column: str) -> str:
    return (
        "tenant_id = current_setting('weft.tenant_id', true) AND ("
        "current_setting('weft.kb_scope', true) = '*' OR "
        f"{kb_column} = ANY (string_to_array(current_setting('weft.kb_scope', true), ',')))"
    )


def upgrade() -> None:
    op.execute(_ENSURE_ROLE)
    op.execute(f"CREATE SCHEMA {SCHEMA}")
    op.execute(f"REVOKE ALL ON SCHEMA {SCHEMA} FROM PUBLIC")
    op.execute(f"GRANT USAGE ON SCHEMA {SCHEMA} TO {READER}")
    # Functions the services' role creates from now on are not callable by everyone.
    op.execute("ALTER DEFAULT PRIVILEGES REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC")
    for table, (columns, kb_column) in _VIEWS.items():
        cols = ", ".join(columns)
        op.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")
        op.execute(f"CREATE POLICY weft_all_rows ON {table} USING (true) WITH CHECK (true)")
        op.execute(
            f"CREATE POLICY weft_sql_reader_scope ON {table} AS RESTRICTIVE FOR SELECT "
            f"TO {READER} USING ({_scope_predicate(kb_column)})"
        )
        # security_invoker views read the table as the reader, so it needs the columns.
        op.execute(f"GRANT SELECT ({cols}) ON {table} TO {READER}")
        op.execute(
            f"CREATE VIEW {SCHEMA}.{table} WITH (security_invoker = true, "
            f"security_barrier = true) AS SELECT {cols} FROM public.{table}"
        )
        op.execute(f"GRANT SELECT ON {SCHEMA}.{table} TO {READER}")


def downgrade() -> None:
    for table, (columns, _) in _VIEWS.items():
        op.execute(f"DROP VIEW IF EXISTS {SCHEMA}.{table}")
        op.execute(f"REVOKE SELECT ({', '.join(columns)}) ON {table} FROM {READER}")
        op.execute(f"DROP POLICY IF EXISTS weft_sql_reader_scope ON {table}")
        op.execute(f"DROP POLICY IF EXISTS weft_all_rows ON {table}")
        op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
    op.execute("ALTER DEFAULT PRIVILEGES GRANT EXECUTE ON FUNCTIONS TO PUBLIC")
    op.execute(f"DROP SCHEMA IF EXISTS {SCHEMA}")
