"""The built-in tools' implementations, run by tool-exec alone.

What each tool is (spec, arguments, schema, risk, capabilities) and the registry that runs
them live in :mod:`weft_tool_catalog`, which the engine and agent-config import instead of
this package: the implementations pull in SQLAlchemy, DuckDB, pypdf, openpyxl, numpy and
HTTP clients. ``make lint`` (import-linter) keeps every other service out of here.
"""
