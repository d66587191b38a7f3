"""data_schema / data_analysis on DuckDB (SPEC T-12), cleanup hook (T-04)."""

from __future__ import annotations

import io
import json

import pytest
from openpyxl import Workbook
from weft_contracts import ToolContext
from weft_tool_catalog import ToolInvocation, ToolRegistry
from weft_tools.data_tools import DataAnalysisTool, DataSchemaTool, DatasetFile
from weft_tools.duckdb_workspace import DuckDBWorkspace
from weft_tools.tabular import SHEET_COLUMN, normalise_columns

SALES_CSV = b"Region,Unit Price (EUR),Qty\nNorth,10.5,3\nSouth,2,10\nNorth,1,1\n"


def _workbook(sheets: dict[str, list[list[object]]]) -> bytes:
    book = Workbook()
    book.remove(book.active)
    for title, rows in sheets.items():
        sheet = book.create_sheet(title)
        for row in rows:
            sheet.append(row)
    buffer = io.BytesIO()
    book.save(buffer)
    return buffer.getvalue()


class Files:
    def __init__(self, files: dict[str, DatasetFile]):
        self.files = files

    async def dataset_file(
        self, tenant_id: str, session_id: str, knowledge_id: str, *, credential: str | None
    ) -> DatasetFile | None:
        return self.files.get(f"{tenant_id}/{knowledge_id}")


def _setup(files: dict[str, DatasetFile], **kw: float) -> tuple[ToolRegistry, DuckDBWorkspace]:
    workspace = DuckDBWorkspace()
    source = Files(files)
    registry = ToolRegistry()
    registry.register(DataSchemaTool(source, workspace))
    registry.register(DataAnalysisTool(source, workspace, **kw))  # type: ignore[arg-type]
    return registry, workspace


def _call(args: dict[str, object], session: str = "s1") -> ToolInvocation:
    ctx = ToolContext(user_id="u", agent_id="a")
    return ToolInvocation(
        tenant_id="t", session_id=session, request_id="r", arguments=args, context=ctx
    )


def test_column_names_are_normalised() -> None:  # SPEC T-12
    assert normalise_columns(["Unit Price (EUR)", "", "Unit Price (EUR)", "2024"]) == [
        "unit_price_eur",
        "column_2",
        "unit_price_eur_2",
        "c_2024",
    ]


async def test_csv_schema_and_sql_over_dataset() -> None:  # SPEC T-12
    registry, _ = _setup({"t/d1": DatasetFile(file_name="sales.csv", content=SALES_CSV)})
    schema = await registry.execute("data_schema", _call({"knowledge_id": "d1"}))
    assert schema.success, schema.error
    body = json.loads(schema.output)
    assert body["row_count"] == 3 and body["table"] == "dataset"
    assert [c["name"] for c in body["columns"]] == ["region", "unit_price_eur", "qty"]
    sql = "SELECT region, sum(unit_price_eur * qty) AS total FROM dataset GROUP BY 1 ORDER BY 1"
    result = await registry.execute("data_analysis", _call({"knowledge_id": "d1", "sql": sql}))
    assert result.success, result.error
    assert json.loads(result.output)["rows"] == [["North", 32.5], ["South", 20.0]]


async def test_excel_sheets_merge_with_sheet_name_and_empty_sheets_are_ignored() -> None:  # T-12
    content = _workbook(
        {
            "Jan": [["Product", "Amount"], ["pen", 3], ["ink", 4]],
            "Empty": [],
            "Feb": [["Product", "Amount", "Note"], ["pen", 5, "late"]],
        }
    )
    registry, _ = _setup({"t/x": DatasetFile(file_name="book.xlsx", content=content)})
    sql = f"SELECT {SHEET_COLUMN}, sum(amount) FROM dataset GROUP BY 1 ORDER BY 1"
    result = await registry.execute("data_analysis", _call({"knowledge_id": "x", "sql": sql}))
    assert result.success, result.error
    assert json.loads(result.output)["rows"] == [["Feb", 5], ["Jan", 7]]


async def test_all_empty_workbook_is_an_explicit_error() -> None:  # SPEC T-12
    content = _workbook({"A": [], "B": [[None, None]]})
    registry, _ = _setup({"t/x": DatasetFile(file_name="empty.xlsx", content=content)})
    result = await registry.execute("data_schema", _call({"knowledge_id": "x"}))
    assert not result.success
    assert "every sheet of the workbook is empty" in str(result.error)


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM dataset",
        "SELECT 1; DROP TABLE dataset",
        "SELECT * FROM read_csv_auto('/etc/passwd')",
        "SELECT * FROM duckdb_tables()",
        "SELECT * FROM doc_0123456789abcdef",
        "COPY dataset TO '/tmp/out.csv'",
        "ATTACH '/tmp/x.db' AS x",
    ],
)
async def test_only_selects_over_dataset_are_run(sql: str) -> None:  # SPEC T-12
    registry, _ = _setup({"t/d1": DatasetFile(file_name="sales.csv", content=SALES_CSV)})
    result = await registry.execute("data_analysis", _call({"knowledge_id": "d1", "sql": sql}))
    assert not result.success
    assert "refused" in str(result.error)


async def test_runaway_query_is_interrupted_and_rows_are_bounded() -> None:  # T-12, invariant 6
    registry, _ = _setup(
        {"t/d1": DatasetFile(file_name="sales.csv", content=SALES_CSV)}, timeout_s=0.5
    )
    slow = "SELECT count(*) FROM dataset a, range(1000000000) b, range(1000) c"
    result = await registry.execute("data_analysis", _call({"knowledge_id": "d1", "sql": slow}))
    assert not result.success and "exceeded" in str(result.error)
    many = "SELECT b.range FROM dataset a, range(1000) b"
    result = await registry.execute("data_analysis", _call({"knowledge_id": "d1", "sql": many}))
    body = json.loads(result.output)
    assert body["row_count"] == 200 and "truncated" in body


async def test_cleanup_drops_the_sessions_tables() -> None:  # SPEC T-04, T-12
    registry, workspace = _setup({"t/d1": DatasetFile(file_name="sales.csv", content=SALES_CSV)})
    await registry.execute("data_schema", _call({"knowledge_id": "d1"}, session="s9"))
    assert workspace.table_count("s9") == 1
    await registry.cleanup("s9", "r")
    assert workspace.table_count("s9") == 0


async def test_unknown_document_and_other_tenants_files_are_not_found() -> None:  # invariant 5
    registry, _ = _setup({"other/d1": DatasetFile(file_name="sales.csv", content=SALES_CSV)})
    result = await registry.execute("data_schema", _call({"knowledge_id": "d1"}))
    assert not result.success and "no data document" in str(result.error)
