"""``database_query`` (SPEC T-11): a read-only SELECT over whitelisted tables of the caller's
tenant, in two layers.

1. The parse tree (:mod:`weft_tool_catalog.sql_guard`): one SELECT, functions from an allowlist,
   tables from the whitelist, no CTE named like a table; each table reference is pointed
   at the view of the same name in schema ``weft_sql``.
2. PostgreSQL (migration ``0007_sql_reader``): the query runs as role ``weft_sql_reader``,
   which may read only those views; row-level security on the tables under them keeps the
   rows of the tenant and knowledge bases this transaction set. So SQL that gets past the
   parse checks still sees only its tenant's rows and never a key table.

The transaction is READ ONLY, has a statement timeout, reads at most ``max_rows`` + 1 rows
and is rolled back. Literal values of the SQL are masked wherever the call is shown (E-23).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlglot import exp
from weft_contracts import ToolContext
from weft_tool_catalog.registry import ToolInvocation, ToolOutcome, dumps
from weft_tool_catalog.specs import DATABASE_QUERY, DatabaseQueryArguments
from weft_tool_catalog.sql_guard import (
    ANALYTICS_FUNCTIONS,
    UnsafeQuery,
    check_cte_names,
    check_functions,
    cte_names,
    parse_select,
    table_names,
)
from weft_tool_catalog.sql_masking import mask_sql

READER_ROLE = "weft_sql_reader"
VIEW_SCHEMA = "weft_sql"
QUERYABLE_TABLES: tuple[str, ...] = ("knowledge_bases", "documents", "chunks")
"""The views of :data:`VIEW_SCHEMA` (migration ``0007_sql_reader`` defines their columns)."""
ALL_KNOWLEDGE_BASES = "*"


def scoped_sql(
    sql: str,
    tables: tuple[str, ...] = QUERYABLE_TABLES,
    reserved: frozenset[str] = frozenset(),
) -> str:
    """The checked SELECT with each table reference read from its ``weft_sql`` view.

    ``reserved`` names other tables of the database, which a CTE may not shadow either.
    The SQL goes to the driver as is, because SQLAlchemy bind syntax (``:name``) would
    misread the model's text (``'10:30'``).
    """
    tree = parse_select(sql, "postgres")
    check_functions(tree, ANALYTICS_FUNCTIONS)
    check_cte_names(tree, {*tables, *reserved})
    unknown = sorted(table_names(tree) - set(tables))
    if unknown:
        names = ", ".join(sorted(tables))
        raise UnsafeQuery(f"table(s) {', '.join(unknown)} not allowed; allowed: {names}")
    ctes = cte_names(tree)
    for table in list(tree.find_all(exp.Table)):
        if table.args.get("db") or table.args.get("catalog"):
            raise UnsafeQuery("schema-qualified table names are not allowed")
        name = table.name.lower()
        if name in ctes:  # no CTE shadows a table, so this reference is the CTE's
            continue
        table.set("db", exp.to_identifier(VIEW_SCHEMA))
        table.set("this", exp.to_identifier(name))
        if not table.alias:
            table.set("alias", exp.TableAlias(this=exp.to_identifier(name)))
    return tree.sql(dialect="postgres", comments=False)  # a comment never reaches PostgreSQL


def knowledge_scope(context: ToolContext) -> str:
    """The ``weft.kb_scope`` setting of a call: the turn's knowledge bases, else the API
    key's restriction, else every knowledge base of the tenant (``*``)."""
    if context.knowledge_base_ids:
        ids = context.knowledge_base_ids
    elif context.key_knowledge_base_ids is not None:
        ids = context.key_knowledge_base_ids
    else:
        return ALL_KNOWLEDGE_BASES
    # The setting is comma-separated; an id with a comma or a star names no real base, and
    # an empty setting matches no row.
    return ",".join(i for i in ids if "," not in i and i != ALL_KNOWLEDGE_BASES)


@dataclass(frozen=True, kw_only=True)
class QueryLimits:
    """Bounds of one ``database_query`` call."""

    max_rows: int = 200
    timeout_ms: int = 5000


class DatabaseQueryTool:
    """Runs the checked SELECT on PostgreSQL as ``weft_sql_reader``."""

    spec = DATABASE_QUERY

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        limits: QueryLimits = QueryLimits(),
        reserved: frozenset[str] = frozenset(),
    ):
        self._sessions = sessions
        self._limits = limits
        self._reserved = reserved

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Check and run the query; a refused or failed query is an error the model reads."""
        asked = call.args(DatabaseQueryArguments).sql
        try:
            sql = scoped_sql(asked, reserved=self._reserved)
        except UnsafeQuery as exc:
            return ToolOutcome(success=False, error=f"database_query refused: {exc}")
        try:
            columns, rows, more = await self._fetch(
                sql, call.tenant_id, knowledge_scope(call.context)
            )
        except DBAPIError as exc:
            # Bad column names, type errors, the statement timeout: the model can fix them.
            reason = str(exc.orig).splitlines()[0] if exc.orig else type(exc).__name__
            return ToolOutcome(success=False, error=f"database_query failed: {reason}")
        result: dict[str, Any] = {"columns": columns, "rows": rows, "row_count": len(rows)}
        if more:
            result["truncated"] = f"only the first {self._limits.max_rows} rows are shown"
        return ToolOutcome(
            success=True,
            output=dumps(result),
            display_type="table",
            data={"sql": mask_sql(asked)},
        )

    async def _fetch(
        self, sql: str, tenant_id: str, kb_scope: str
    ) -> tuple[list[str], list[list[Any]], bool]:
        async with self._sessions() as session:
            try:
                await enter_reader_transaction(session, tenant_id, kb_scope, self._limits)
                connection = await session.connection()
                # The driver reads whole results: the cap goes into the SQL, so PostgreSQL
                # never sends more than one row past it.
                capped = f"SELECT * FROM ({sql}) AS result LIMIT {self._limits.max_rows + 1}"
                cursor = await connection.exec_driver_sql(capped)
                columns = list(cursor.keys())
                fetched = cursor.fetchmany(self._limits.max_rows + 1)
            finally:
                await session.rollback()  # nothing to keep, and SET LOCAL ends with it
        rows = [[_jsonable(v) for v in row] for row in fetched[: self._limits.max_rows]]
        return columns, rows, len(fetched) > self._limits.max_rows


async def enter_reader_transaction(
    session: AsyncSession, tenant_id: str, kb_scope: str, limits: QueryLimits
) -> None:
    """READ ONLY, bounded in time, scoped to the tenant and knowledge bases, and then the
    reader role: the settings are made by the services' role before the switch."""
    await session.execute(text("SET TRANSACTION READ ONLY"))
    await session.execute(text(f"SET LOCAL statement_timeout = {int(limits.timeout_ms)}"))
    await session.execute(
        text(
            "SELECT set_config('weft.tenant_id', :t, true), set_config('weft.kb_scope', :k, true)"
        ),
        {"t": tenant_id, "k": kb_scope},
    )
    await session.execute(text(f"SET LOCAL search_path = {VIEW_SCHEMA}"))
    await session.execute(text(f"SET LOCAL ROLE {READER_ROLE}"))


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
