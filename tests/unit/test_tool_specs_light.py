"""The engine and agent-config see the built-in tools through their specs alone.

``weft_tools.specs`` holds what the model is told about each tool; the implementations
(and pypdf, openpyxl, bs4, duckdb, numpy, sqlglot behind them) stay in tool-exec. The
specs advertised must be exactly the ones the registry executes (SPEC T-01).
"""

from __future__ import annotations

import json
import subprocess
import sys

from redis.asyncio import Redis
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from weft_storage.knowledge import KnowledgeStore
from weft_storage.knowledge_documents import DocumentReader
from weft_tools import database_query, sql_masking
from weft_tools.aliases import RedisAliasBook
from weft_tools.builtin import ToolDependencies, builtin_registry
from weft_tools.specs import BUILTIN_SPECS, definitions_for, spec_by_name
from weft_tools.web_snapshots import MemorySnapshotStore

HEAVY = ("pypdf", "openpyxl", "bs4", "duckdb", "numpy", "sqlglot")

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


def test_specs_module_advertises_what_the_registry_executes() -> None:  # SPEC T-01
    # Nothing is connected: the engine and the Redis client are lazy, no tool is run.
    sessions = async_sessionmaker(create_async_engine("postgresql+asyncpg://weft@127.0.0.1/weft"))
    registry = builtin_registry(
        ToolDependencies(
            store=KnowledgeStore(sessions),
            reader=DocumentReader(sessions),
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
    assert database_query.mask_sql is sql_masking.mask_sql
    assert sql_masking.mask_sql("SELECT id FROM chunks WHERE id = 'x'") == (
        "SELECT id FROM chunks WHERE id = %s"
    )
