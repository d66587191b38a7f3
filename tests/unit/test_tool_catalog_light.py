"""The tool catalog is a contract, not an implementation (issue 38, docs/architecture.md).

The engine, agent-config, the gateway and the sandbox import ``weft_tool_catalog`` to know
what the tools are. Importing it must not load a database driver, SQLAlchemy, DuckDB, a
PDF or spreadsheet reader, an HTTP client or any of Weft's implementation packages, and
its declared dependencies must not bring one in either.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib.metadata import distribution

FORBIDDEN_MODULES = frozenset({
    # database drivers and ORMs
    "sqlalchemy", "asyncpg", "psycopg", "psycopg2", "redis", "hiredis", "duckdb",
    # documents and spreadsheets
    "pypdf", "openpyxl", "bs4", "markdownify", "numpy",
    # HTTP clients and the MCP SDK (built on httpx)
    "httpx", "httpcore", "aiohttp", "requests", "urllib3", "mcp", "openai",
    # SQL parsing: only sql_guard (loaded by the first mask_sql call) imports it
    "sqlglot",
    # Weft's implementation and plumbing packages
    "weft_tools", "weft_storage", "weft_platform", "weft_mcp_client", "weft_llm",
})  # fmt: skip

FORBIDDEN_DISTRIBUTIONS = frozenset({
    "sqlalchemy", "asyncpg", "psycopg", "psycopg2", "psycopg2-binary", "redis", "hiredis",
    "duckdb", "pypdf", "openpyxl", "beautifulsoup4", "markdownify", "numpy", "httpx",
    "httpcore", "aiohttp", "requests", "urllib3", "mcp", "openai", "weft-tools",
    "weft-storage", "weft-platform", "weft-mcp-client", "weft-llm",
})  # fmt: skip

LAZY = ("weft_tool_catalog.sql_guard",)
"""Modules imported on first use only: ``sql_masking.mask_sql`` imports the SQL guard
(sqlglot) when the first ``database_query`` call is shown (SPEC E-23)."""

_PROBE = f"""
import importlib, json, pkgutil, sys
import weft_tool_catalog
for info in pkgutil.walk_packages(weft_tool_catalog.__path__, "weft_tool_catalog."):
    if info.name not in {LAZY!r}:
        importlib.import_module(info.name)
print(json.dumps(sorted({{name.split(".")[0] for name in sys.modules}})))
"""


def test_importing_the_whole_catalog_loads_no_implementation_library() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = set(json.loads(done.stdout.strip().splitlines()[-1]))
    assert "weft_tool_catalog" in loaded and "weft_contracts" in loaded  # the probe ran
    assert loaded & FORBIDDEN_MODULES == set()


def _requirement_name(requirement: str) -> str:
    match = re.match(r"[A-Za-z0-9_.\-]+", requirement)
    assert match is not None, requirement
    return match.group(0).lower().replace("_", "-")


def _dependency_closure(root: str) -> set[str]:
    """Every distribution ``root`` needs, transitively (extras and markers not taken)."""
    seen: set[str] = set()
    pending = [root]
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for requirement in distribution(name).requires or []:
            if "extra ==" not in requirement:
                pending.append(_requirement_name(requirement))
    return seen - {root}


def test_the_catalog_depends_on_no_implementation_library() -> None:
    needed = _dependency_closure("weft-tool-catalog")
    assert {"weft-contracts", "pydantic", "jsonschema"} <= needed
    assert needed & FORBIDDEN_DISTRIBUTIONS == set()
