"""``data_schema`` and ``data_analysis`` (SPEC T-12): SQL over CSV/Excel documents.

``knowledge_id`` names the document; the SQL always reads the view ``dataset`` (never a
document id). The SQL must be one SELECT over ``dataset``; it runs in a worker thread,
is interrupted at ``timeout_s`` and returns at most ``max_rows`` rows.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any, Protocol

import duckdb
from sqlglot import exp
from weft_tool_catalog.registry import ToolInvocation, ToolOutcome, dumps
from weft_tool_catalog.specs import (
    DATA_ANALYSIS,
    DATA_SCHEMA,
    DataAnalysisArguments,
    DataSchemaArguments,
)
from weft_tool_catalog.sql_guard import UnsafeQuery, function_name, parse_select, table_names

from weft_tools.duckdb_workspace import DuckDBWorkspace
from weft_tools.tabular import EmptyDataset, read_table

DATASET_VIEW = "dataset"
_READABLE = frozenset(
    {DATASET_VIEW, "generate_series", "exploding_generate_series", "range", "unnest"}
)
"""What the SQL may read: the view and row generators, never catalog or file functions."""
_REFUSED_FUNCTIONS = frozenset(
    {"getenv", "current_setting", "sleep", "pg_sleep", "glob", "sniff_csv", "query", "query_table"}
)
_REFUSED_PREFIXES = ("read_", "duckdb_", "pragma_", "parquet_", "iceberg_", "delta_", "sqlite_")
"""Scalar functions that reach files, settings or the catalog; DuckDB's external access is
off anyway, this answers the model before it tries."""


@dataclass(frozen=True, kw_only=True)
class DatasetFile:
    """An uploaded CSV/Excel document."""

    file_name: str
    content: bytes


class DatasetSource(Protocol):
    """Finds a tenant's data document by id (the knowledge store in production)."""

    async def dataset_file(
        self, tenant_id: str, session_id: str, knowledge_id: str, *, credential: str | None
    ) -> DatasetFile | None:
        """The file of ``knowledge_id`` (a ``dN`` handle of the session or an id) if the
        tenant has it; ``credential``: the turn's (knowledge reads the tenant from it)."""
        ...


class _DataDocuments:
    """Fetch a document and load it into the session's DuckDB database."""

    def __init__(self, source: DatasetSource, workspace: DuckDBWorkspace):
        self._source = source
        self.workspace = workspace

    async def load(self, call: ToolInvocation) -> tuple[str, int] | ToolOutcome:
        knowledge_id = call.args(DataSchemaArguments).knowledge_id
        file = await self._source.dataset_file(
            call.tenant_id, call.session_id, knowledge_id, credential=call.credential
        )
        if file is None:
            return ToolOutcome(success=False, error=f"no data document {knowledge_id!r}")
        try:
            table = await asyncio.to_thread(read_table, file.file_name, file.content)
            return await asyncio.to_thread(
                self.workspace.load, call.session_id, knowledge_id, table, call.request_id
            )
        except EmptyDataset as exc:
            return ToolOutcome(success=False, error=f"{file.file_name}: {exc}")
        except ValueError as exc:
            return ToolOutcome(success=False, error=str(exc))

    async def cleanup(self, session_id: str, request_id: str) -> None:
        """Drop the session's tables unless a later turn uses them (T-04)."""
        await asyncio.to_thread(self.workspace.end_turn, session_id, request_id)


class DataSchemaTool(_DataDocuments):
    """Describes the ``dataset`` of a document."""

    spec = DATA_SCHEMA

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Columns and row count."""
        loaded = await self.load(call)
        if isinstance(loaded, ToolOutcome):
            return loaded
        name, count = loaded
        cur = self.workspace.session(call.session_id, call.request_id).connection.cursor()
        try:
            described = cur.execute(f"DESCRIBE {name}").fetchall()
        finally:
            cur.close()
        schema = {
            "table": DATASET_VIEW,
            "row_count": count,
            "columns": [{"name": row[0], "type": row[1]} for row in described],
            "note": "data_analysis always queries this document as the table `dataset`.",
        }
        return ToolOutcome(success=True, output=dumps(schema), display_type="table_schema")


class DataAnalysisTool(_DataDocuments):
    """Runs the model's SELECT over ``dataset``."""

    spec = DATA_ANALYSIS

    def __init__(
        self,
        source: DatasetSource,
        workspace: DuckDBWorkspace,
        *,
        timeout_s: float = 20.0,
        max_rows: int = 200,
    ):
        super().__init__(source, workspace)
        self._timeout_s = timeout_s
        self._max_rows = max_rows

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Check the SQL, load the document, query it."""
        sql = call.args(DataAnalysisArguments).sql
        try:
            tree = parse_select(sql, "duckdb")
            other = table_names(tree) - _READABLE
            if other:
                raise UnsafeQuery(f"only the table `dataset` can be read, not {sorted(other)}")
            _check_functions(tree)
        except UnsafeQuery as exc:
            return ToolOutcome(success=False, error=f"data_analysis refused: {exc}")
        loaded = await self.load(call)
        if isinstance(loaded, ToolOutcome):
            return loaded
        sql = tree.sql(dialect="duckdb", comments=False)  # comments never reach DuckDB
        return await self._query(call.session_id, loaded[0], sql)

    async def _query(self, session_id: str, table: str, sql: str) -> ToolOutcome:
        cur = self.workspace.session(session_id).connection.cursor()
        try:
            cur.execute(f"CREATE OR REPLACE TEMP VIEW {DATASET_VIEW} AS SELECT * FROM {table}")
            columns, rows, more = await self._bounded(cur, sql)
        except TimeoutError:
            return ToolOutcome(
                success=False, error=f"data_analysis: query exceeded {self._timeout_s:g}s"
            )
        except duckdb.Error as exc:  # unknown column, bad cast: the model can fix it
            return ToolOutcome(success=False, error=f"data_analysis failed: {exc}")
        finally:
            cur.close()
        result: dict[str, Any] = {"columns": columns, "rows": rows, "row_count": len(rows)}
        if more:
            result["truncated"] = f"only the first {self._max_rows} rows are shown"
        return ToolOutcome(success=True, output=dumps(result), display_type="table")

    async def _bounded(
        self, cur: duckdb.DuckDBPyConnection, sql: str
    ) -> tuple[list[str], list[list[Any]], bool]:
        """Run in a thread; past the timeout, interrupt DuckDB and wait for the thread."""
        task = asyncio.ensure_future(asyncio.to_thread(self._fetch, cur, sql))
        try:
            return await asyncio.wait_for(asyncio.shield(task), self._timeout_s)
        except TimeoutError:
            cur.interrupt()
            with contextlib.suppress(duckdb.Error):
                await task
            raise

    def _fetch(
        self, cur: duckdb.DuckDBPyConnection, sql: str
    ) -> tuple[list[str], list[list[Any]], bool]:
        cur.execute(sql)
        columns = [d[0] for d in cur.description or []]
        fetched = cur.fetchmany(self._max_rows + 1)
        rows = [[_jsonable(v) for v in r] for r in fetched[: self._max_rows]]
        return columns, rows, len(fetched) > self._max_rows


def _check_functions(tree: exp.Expr) -> None:
    for node in tree.walk():
        if isinstance(node, exp.Func):
            name = function_name(node)
            if name in _REFUSED_FUNCTIONS or name.startswith(_REFUSED_PREFIXES):
                raise UnsafeQuery(f"function {name} is not allowed")


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
