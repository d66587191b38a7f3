"""The engine and agent-config see the built-in tools through their specs alone.

``weft_tool_catalog.specs`` holds what the model is told about each tool; the implementations
(and pypdf, openpyxl, bs4, duckdb, numpy, sqlglot behind them) stay in tool-exec. The
specs advertised must be exactly the ones the registry executes (SPEC T-01).
"""

from __future__ import annotations

import json
import subprocess
import sys

from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from weft_platform.web_snapshots import MemorySnapshotStore
from weft_tool_catalog import sql_masking
from weft_tool_catalog.specs import BUILTIN_SPECS, definitions_for, spec_by_name
from weft_tools import database_query
from weft_tools.aliases import RedisAliasBook
from weft_tools.builtin import ToolDependencies, builtin_registry

HEAVY = ("pypdf", "openpyxl", "bs4", "duckdb", "numpy", "sqlglot", "weft_tools")

_PROBE = f"""
import json, sys
import weft_engine.app, weft_agent_config.app
print(json.dumps(sorted({{m.split(".")[0] for m in sys.modules}} & set({HEAVY!r}))))
"""


def test_engine_and_agent_config_import_no_tool_implementation() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=180, check=True
    )
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


_PREPARE_PROBE = """
import asyncio, json, sys, threading
from weft_tool_catalog import sql_masking
from weft_engine.masking import masked_arguments, prepare_masking
on_main_thread = []
real_load = sql_masking.load
def load():
    on_main_thread.append(threading.current_thread() is threading.main_thread())
    real_load()
sql_masking.load = load
asyncio.run(prepare_masking(["thinking"]))
untouched = "sqlglot" not in sys.modules
asyncio.run(prepare_masking(["thinking", "database_query"]))
asyncio.run(prepare_masking(["database_query"]))
shown = masked_arguments("database_query", {"sql": "SELECT name FROM t WHERE id = 42"})
print(json.dumps([untouched, on_main_thread, shown["sql"]]))
"""


def test_the_engine_loads_sql_masking_off_its_event_loop_once() -> None:
    """SPEC E-23 masking needs sqlglot (about 0.7 s to import): the engine loads it in a
    worker thread before it shows its first ``database_query`` call, once, and not at all
    for other tools, so the import never stalls the replica's other turns (invariant 4)."""
    done = subprocess.run(
        [sys.executable, "-c", _PREPARE_PROBE],
        capture_output=True, text=True, timeout=180, check=True,
    )  # fmt: skip
    untouched, on_main_thread, shown = json.loads(done.stdout.strip().splitlines()[-1])
    assert untouched, "no database_query call: sqlglot not loaded"
    assert on_main_thread == [False], "loaded once, in a worker thread"
    assert "42" not in shown and "id =" in shown


def test_specs_module_advertises_what_the_registry_executes() -> None:  # SPEC T-01
    # Nothing is connected: the engine and the Redis client are lazy, no tool is run.
    sessions = async_sessionmaker(create_async_engine("postgresql+asyncpg://weft@127.0.0.1/weft"))
    registry = builtin_registry(
        ToolDependencies(
            sessions=sessions,
            snapshots=MemorySnapshotStore(),
            aliases=RedisAliasBook(Redis.from_url("redis://127.0.0.1:1/0")),
        )
    )
    names = [s.name for s in BUILTIN_SPECS]
    assert registry.names() == sorted(names)
    assert definitions_for(names) == registry.definitions(names)
    assert json.dumps(definitions_for(names)) == json.dumps(registry.definitions(names))
    for name in names:
        assert registry.spec(name) is spec_by_name(name)
    assert definitions_for(["web_search", "thinking", "unknown"]) == registry.definitions(
        ["web_search", "thinking", "unknown"]
    )


def test_database_query_masks_with_the_light_masker() -> None:  # SPEC E-23
    assert vars(database_query)["mask_sql"] is sql_masking.mask_sql
    assert sql_masking.mask_sql("SELECT id FROM chunks WHERE id = 'x'") == (
        "SELECT id FROM chunks WHERE id = %s"
    )
