"""``database_query`` (SPEC T-11): a read-only SELECT over whitelisted tables of the caller's
tenant.

Safety comes from the parse tree and from PostgreSQL, not from string matching:
the statement must parse as one SELECT (:mod:`weft_tools.sql_guard`); every whitelisted
table reference is replaced by a subquery filtered on the caller's tenant (a bound
parameter), so joins, sub-selects and CTEs all see only that tenant's rows; the query runs
in a READ ONLY transaction with a statement timeout, and at most ``max_rows`` rows are read.
Literal values of the SQL are masked wherever the call is shown (events, logs, E-23).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlglot import exp

from weft_tools.registry import ToolInvocation, ToolOutcome, dumps
from weft_tools.specs import DATABASE_QUERY
from weft_tools.sql_guard import UnsafeQuery, parse_select, table_names
from weft_tools.sql_masking import mask_sql


@dataclass(frozen=True, kw_only=True)
class QueryableTable:
    """A table the model may read, and whether it has a soft-delete column."""

    name: str
    soft_delete: bool = False


DEFAULT_TABLES: tuple[QueryableTable, ...] = (
    QueryableTable(name="knowledge_bases"),
    QueryableTable(name="documents"),
    QueryableTable(name="chunks"),
)


def scoped_sql(sql: str, tables: tuple[QueryableTable, ...], tenant_id: str) -> str:
    """The SELECT rewritten so each table reference reads only ``tenant_id``'s rows.

    The tenant id is rendered as a literal by sqlglot (quoted and escaped): the SQL goes to
    the driver as is, because SQLAlchemy bind syntax (``:name``) would misread the model's
    text (``'10:30'``).
    """
    tree = parse_select(sql, "postgres")
    allowed = {t.name: t for t in tables}
    unknown = sorted(table_names(tree) - set(allowed))
    if unknown:
        names = ", ".join(sorted(allowed))
        raise UnsafeQuery(f"table(s) {', '.join(unknown)} not allowed; allowed: {names}")
    ctes = {c.alias_or_name.lower() for c in tree.find_all(exp.CTE)}
    for table in list(tree.find_all(exp.Table)):
        name = table.name.lower()
        if name in ctes:
            continue
        if table.args.get("db") or table.args.get("catalog"):
            raise UnsafeQuery("schema-qualified table names are not allowed")
        table.replace(_tenant_subquery(allowed[name], table.alias_or_name, tenant_id))
    return tree.sql(dialect="postgres")


def _tenant_subquery(table: QueryableTable, alias: str, tenant_id: str) -> exp.Expression:
    condition: exp.Expr = exp.EQ(
        this=exp.column("tenant_id"), expression=exp.Literal.string(tenant_id)
    )
    if table.soft_delete:
        condition = exp.and_(condition, exp.column("deleted_at").is_(exp.null()))
    inner = exp.select("*").from_(table.name).where(condition)
    return exp.Subquery(this=inner, alias=exp.TableAlias(this=exp.to_identifier(alias)))


class DatabaseQueryTool:
    """Runs the scoped SELECT on PostgreSQL."""

    spec = DATABASE_QUERY

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        *,
        tables: tuple[QueryableTable, ...] = DEFAULT_TABLES,
        max_rows: int = 200,
        timeout_ms: int = 5000,
    ):
        self._sessions = sessions
        self._tables = tables
        self._max_rows = max_rows
        self._timeout_ms = timeout_ms

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Check, scope and run the query; a refused query is an error the model reads."""
        try:
            sql = scoped_sql(str(call.arguments["sql"]), self._tables, call.tenant_id)
        except UnsafeQuery as exc:
            return ToolOutcome(success=False, error=f"database_query refused: {exc}")
        try:
            columns, rows, more = await self._fetch(sql)
        except DBAPIError as exc:
            # Bad column names, type errors, the statement timeout: the model can fix them.
            reason = str(exc.orig).splitlines()[0] if exc.orig else type(exc).__name__
            return ToolOutcome(success=False, error=f"database_query failed: {reason}")
        result: dict[str, Any] = {"columns": columns, "rows": rows, "row_count": len(rows)}
        if more:
            result["truncated"] = f"only the first {self._max_rows} rows are shown"
        return ToolOutcome(
            success=True,
            output=dumps(result),
            display_type="table",
            data={"sql": mask_sql(str(call.arguments["sql"]))},
        )

    async def _fetch(self, sql: str) -> tuple[list[str], list[list[Any]], bool]:
        async with self._sessions() as session, session.begin():
            await session.execute(text("SET TRANSACTION READ ONLY"))
            await session.execute(text(f"SET LOCAL statement_timeout = {int(self._timeout_ms)}"))
            connection = await session.connection()
            cursor = await connection.exec_driver_sql(sql)
            columns = list(cursor.keys())
            fetched = cursor.fetchmany(self._max_rows + 1)
        rows = [[_jsonable(v) for v in row] for row in fetched[: self._max_rows]]
        return columns, rows, len(fetched) > self._max_rows


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
