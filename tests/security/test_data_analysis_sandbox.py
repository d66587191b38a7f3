"""data_analysis's DuckDB sandbox (SPEC T-12): the model's SQL reads the `dataset` view and
nothing else, and the database it runs in can neither reach files nor grow past its limits.

The parse checks and the DuckDB settings are tested apart: a refused query never reaches
DuckDB, and DuckDB itself refuses the same reads when SQL is run on it directly.
"""

from __future__ import annotations

import json

import duckdb
import pytest
from weft_contracts import ToolContext
from weft_tool_catalog import ToolInvocation, ToolRegistry
from weft_tools.data_tools import DataAnalysisTool, DatasetFile
from weft_tools.duckdb_workspace import DuckDBWorkspace

CSV = b"region,amount\nNorth,10\nSouth,20\n"


class _OneFile:
    async def dataset_file(
        self, tenant_id: str, session_id: str, knowledge_id: str, *, credential: str | None
    ) -> DatasetFile | None:
        return DatasetFile(file_name="sales.csv", content=CSV) if knowledge_id == "d1" else None


def _registry(workspace: DuckDBWorkspace) -> ToolRegistry:
    registry = ToolRegistry()
    registry.register(DataAnalysisTool(_OneFile(), workspace, timeout_s=10))
    return registry


async def _analyse(registry: ToolRegistry, sql: str) -> tuple[bool, str]:
    call = ToolInvocation(
        tenant_id="t",
        session_id="s",
        request_id="r",
        arguments={"knowledge_id": "d1", "sql": sql},
        context=ToolContext(user_id="u", agent_id="a"),
    )
    outcome = await registry.execute("data_analysis", call)
    return outcome.success, outcome.output if outcome.success else str(outcome.error)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM read_csv('/etc/passwd')",
        "SELECT * FROM read_csv_auto('/etc/passwd')",
        "SELECT * FROM read_text('/etc/passwd')",
        "SELECT * FROM read_blob('/etc/passwd')",
        "SELECT * FROM read_parquet('https://example.com/x.parquet')",
        "SELECT * FROM read_json('/etc/hosts')",
        "SELECT * FROM glob('/etc/*')",
        "SELECT * FROM '/etc/passwd'",
        "SELECT * FROM 'https://example.com/data.csv'",
        "SELECT * FROM dataset JOIN read_csv('/etc/passwd') p ON true",
        "SELECT (SELECT count(*) FROM read_csv('/etc/passwd')) FROM dataset",
        "SELECT * FROM duckdb_settings()",
        "SELECT * FROM query('SELECT 1')",
        "SELECT getenv('HOME')",
        "SELECT current_setting('memory_limit')",
        "ATTACH '/tmp/x.db' AS x",
        "COPY dataset TO '/tmp/out.csv'",
        "INSTALL httpfs",
        "LOAD httpfs",
        "PRAGMA threads=8",
        "SET threads = 8",
        "SET enable_external_access = true",
        "RESET lock_configuration",
    ],
)
async def test_file_network_and_setting_access_is_refused(sql: str) -> None:  # SPEC T-12
    ok, error = await _analyse(_registry(DuckDBWorkspace()), sql)
    assert not ok
    assert error.startswith("data_analysis refused:"), error
    assert "root:" not in error


async def test_analysis_of_the_dataset_still_works() -> None:  # SPEC T-12
    ok, out = await _analyse(
        _registry(DuckDBWorkspace()),
        "SELECT region, sum(amount) AS total FROM dataset GROUP BY region ORDER BY region",
    )
    assert ok, out
    assert json.loads(out)["rows"] == [["North", 10], ["South", 20]]


@pytest.mark.parametrize(
    ("sql", "refusal"),
    [
        ("SELECT * FROM read_csv('/etc/passwd')", "file system operations are disabled"),
        ("SELECT * FROM read_text('/etc/passwd')", "file system operations are disabled"),
        ("ATTACH '/tmp/weft-attack.db' AS x", "disabled"),
        ("COPY (SELECT 1) TO '/tmp/weft-attack.csv'", "disabled"),
        ("SET threads = 8", "the configuration has been locked"),
        ("SET memory_limit = '10GB'", "the configuration has been locked"),
        ("SET enable_external_access = true", "the configuration has been locked"),
        ("PRAGMA threads = 8", "the configuration has been locked"),
    ],
)
async def test_duckdb_itself_refuses_without_the_parse_checks(  # SPEC T-12
    sql: str, refusal: str
) -> None:
    workspace = DuckDBWorkspace()
    loaded, _ = await _analyse(_registry(workspace), "SELECT count(*) FROM dataset")
    assert loaded, "the document is loaded before the attack"
    cursor = workspace.session("s").connection.cursor()
    try:
        with pytest.raises(duckdb.Error, match=refusal):
            cursor.execute(sql)
    finally:
        cursor.close()


async def test_one_thread_and_the_memory_limit_are_in_force() -> None:  # SPEC T-12
    workspace = DuckDBWorkspace(memory_limit="64MB")
    registry = _registry(workspace)
    cursor = workspace.session("s").connection.cursor()
    try:
        threads, memory = cursor.execute(
            "SELECT current_setting('threads'), current_setting('memory_limit')"
        ).fetchone() or (None, None)
    finally:
        cursor.close()
    assert threads == 1
    assert memory is not None and memory.endswith("MiB") and float(memory.split()[0]) <= 64
    ok, error = await _analyse(registry, "SELECT list(range) FROM range(40000000)")
    assert not ok
    assert "Out of Memory" in error
    ok, out = await _analyse(registry, "SELECT count(*) FROM dataset")
    assert ok and json.loads(out)["rows"] == [[2]], "the session survives the refused query"
