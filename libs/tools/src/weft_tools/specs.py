"""The specs of Weft's built-in tools, without their implementations.

What the model is told about each tool (name, description, JSON schema) and what the
engine needs to route and show a call (read_only, sensitive arguments). The engine and
agent-config import only this module: the implementations (``weft_tools.builtin`` and the
tool modules) pull in pypdf, openpyxl, bs4, duckdb, numpy and sqlglot, which only
tool-exec needs. Each tool module takes its spec from here, so the registry executes
exactly the specs advertised.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from weft_tools.capabilities import DOCUMENT_READER, RETRIEVAL
from weft_tools.registry import ToolSpec


class SearchMode(StrEnum):
    """How ``search_knowledge`` finds candidates."""

    HYBRID = "hybrid"
    SEMANTIC = "semantic"
    KEYWORD = "keyword"


WEB_FETCH_CHAR_BUDGET = 8000
"""Characters of page text one ``web_fetch`` call returns, shared by its pages."""

WEB_SEARCH_MAX_COUNT = 20
"""Most results one ``web_search`` call asks for."""

SEARCH_KNOWLEDGE = ToolSpec(
    name="search_knowledge",
    description=(
        "Search the knowledge bases available to this conversation. mode: hybrid (default), "
        "keyword for exact terms, error codes and identifiers, semantic for rephrasings. "
        "Returns passages with short ids (c1, c2, ...) to cite as [c1]; read more of a "
        "document with read_document."
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "description": "What to look for."},
            "mode": {"enum": [m.value for m in SearchMode], "default": "hybrid"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 30, "default": 10},
            "knowledge_base_ids": {"type": "array", "items": {"type": "string"}, "maxItems": 10},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    read_only=True,
    requirement=RETRIEVAL,
)

READ_DOCUMENT = ToolSpec(
    name="read_document",
    description=(
        "Read a document (dN) page by page in reading order, or a chunk (cN) with its "
        "neighbours. With `query`, find passages containing all its words (any order) "
        "or, with regex=true, matching the regular expression."
    ),
    parameters={
        "type": "object",
        "properties": {
            "id": {"type": "string", "minLength": 1, "description": "dN or cN."},
            "offset": {"type": "integer", "minimum": 0, "default": 0},
            "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
            "context": {"type": "integer", "minimum": 0, "maximum": 5, "default": 1},
            "query": {"type": "string"},
            "regex": {"type": "boolean", "default": False},
        },
        "required": ["id"],
        "additionalProperties": False,
    },
    requirement=DOCUMENT_READER,
)

LIST_DOCUMENTS = ToolSpec(
    name="list_documents",
    description="List the documents of the conversation's knowledge bases (dN handles).",
    parameters={
        "type": "object",
        "properties": {
            "keyword": {"type": "string", "description": "Filter on title or file name."},
            "page": {"type": "integer", "minimum": 1, "default": 1},
            "page_size": {"type": "integer", "minimum": 1, "maximum": 100, "default": 20},
        },
        "additionalProperties": False,
    },
    requirement=DOCUMENT_READER,
)

THINKING = ToolSpec(
    name="thinking",
    description=(
        "Sequential thinking: record one reasoning step, revise an earlier one or branch "
        "from it. Do not name tools or write the final answer inside a thought."
    ),
    parameters={
        "type": "object",
        "properties": {
            "thought": {"type": "string", "minLength": 1},
            "next_thought_needed": {"type": "boolean"},
            "thought_number": {"type": "integer", "minimum": 1},
            "total_thoughts": {"type": "integer", "minimum": 1},
            "is_revision": {"type": "boolean"},
            "revises_thought": {"type": "integer", "minimum": 1},
            "branch_from_thought": {"type": "integer", "minimum": 1},
            "branch_id": {"type": "string"},
            "needs_more_thoughts": {"type": "boolean"},
        },
        "required": ["thought", "next_thought_needed", "thought_number", "total_thoughts"],
        "additionalProperties": False,
    },
)

TODO_WRITE = ToolSpec(
    name="todo_write",
    description=(
        "Create or update the retrieval plan of this turn (steps with status pending, "
        "in_progress or completed). Put reasoning in `thinking`, not here."
    ),
    parameters={
        "type": "object",
        "properties": {
            "task": {"type": "string"},
            "steps": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string", "minLength": 1},
                        "description": {"type": "string", "minLength": 1},
                        "status": {"enum": ["pending", "in_progress", "completed"]},
                    },
                    "required": ["id", "description", "status"],
                    "additionalProperties": False,
                },
            },
        },
        "required": ["steps"],
        "additionalProperties": False,
    },
)

DATABASE_QUERY = ToolSpec(
    name="database_query",
    description=(
        "Run one read-only SQL SELECT (PostgreSQL) over the tables knowledge_bases, "
        "documents and chunks. Rows of other tenants are never visible."
    ),
    parameters={
        "type": "object",
        "properties": {"sql": {"type": "string", "minLength": 1}},
        "required": ["sql"],
        "additionalProperties": False,
    },
    requirement=RETRIEVAL,
    sensitive_arguments=frozenset({"sql"}),
)

_KNOWLEDGE_ID = {"type": "string", "minLength": 1, "description": "The CSV/Excel document."}

DATA_SCHEMA = ToolSpec(
    name="data_schema",
    description=(
        "Columns, types and row count of a CSV/Excel document. data_analysis always "
        "queries it as the table `dataset`."
    ),
    parameters={
        "type": "object",
        "properties": {"knowledge_id": _KNOWLEDGE_ID},
        "required": ["knowledge_id"],
        "additionalProperties": False,
    },
    requirement=RETRIEVAL,
)

DATA_ANALYSIS = ToolSpec(
    name="data_analysis",
    description=(
        "Run one DuckDB SELECT over a CSV/Excel document loaded as the table `dataset` "
        "(Excel sheets merged, the sheet in column __sheet_name)."
    ),
    parameters={
        "type": "object",
        "properties": {"knowledge_id": _KNOWLEDGE_ID, "sql": {"type": "string", "minLength": 1}},
        "required": ["knowledge_id", "sql"],
        "additionalProperties": False,
    },
    requirement=RETRIEVAL,
)

WEB_FETCH = ToolSpec(
    name="web_fetch",
    description=(
        "Fetch web pages (http/https, at most 8) as Markdown. Page through long pages "
        "with offset/limit (characters, 8000 shared by the call); the full text is saved "
        "at full_output_path for read_file."
    ),
    parameters={
        "type": "object",
        "properties": {
            "items": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": {
                        "url": {"type": "string", "minLength": 1},
                        "offset": {"type": "integer", "minimum": 0, "default": 0},
                        "limit": {
                            "type": "integer",
                            "minimum": 1,
                            "maximum": WEB_FETCH_CHAR_BUDGET,
                        },
                    },
                    "required": ["url"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["items"],
        "additionalProperties": False,
    },
)

WEB_SEARCH = ToolSpec(
    name="web_search",
    description="Search the web. Set content=true to also read the top 3 pages.",
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1},
            "count": {
                "type": "integer",
                "minimum": 1,
                "maximum": WEB_SEARCH_MAX_COUNT,
                "default": 5,
            },
            "country": {"type": "string"},
            "freshness": {"type": "string"},
            "content": {"type": "boolean", "default": False},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)

SEARCH_MEMORY = ToolSpec(
    name="search_memory",
    description=(
        "Search the long-term memory about the current user (facts, preferences, projects "
        "remembered from earlier conversations)."
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "description": "What to recall."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 20, "default": 10},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)

SEARCH_CONVERSATIONS = ToolSpec(
    name="search_conversations",
    description="Search the current user's past conversations for messages about a topic.",
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "description": "Words to look for."},
            "limit": {"type": "integer", "minimum": 1, "maximum": 8, "default": 5},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
)

MEMORY_SPECS: tuple[ToolSpec, ...] = (SEARCH_MEMORY, SEARCH_CONVERSATIONS)

BUILTIN_SPECS: tuple[ToolSpec, ...] = (
    SEARCH_KNOWLEDGE,
    READ_DOCUMENT,
    LIST_DOCUMENTS,
    THINKING,
    TODO_WRITE,
    DATABASE_QUERY,
    DATA_SCHEMA,
    DATA_ANALYSIS,
    WEB_FETCH,
    WEB_SEARCH,
    *MEMORY_SPECS,
)
"""Specs of every built-in tool tool-exec runs (what the engine sends the model)."""

SANDBOX_TOOLS: frozenset[str] = frozenset({"shell_exec", "read_file", "write_sandbox_file"})
"""Tools routed to ``sandbox.calls`` instead of ``tool.calls``."""


def spec_by_name(name: str) -> ToolSpec | None:
    """The built-in spec named ``name``."""
    return next((s for s in BUILTIN_SPECS if s.name == name), None)


def offered_tools(allowed: Iterable[str]) -> list[str]:
    """The turn's effective tool set: the allowed names that are built-ins, sorted. The
    model is offered exactly these, and the engine and the workers run no other tool
    (SPEC A-08: ``allowed`` is the agent's list after the runtime registration rules)."""
    wanted = set(allowed)
    return sorted(s.name for s in BUILTIN_SPECS if s.name in wanted)


def definitions_for(allowed: Iterable[str]) -> list[dict[str, object]]:
    """OpenAI tool definitions of the allowed built-ins, sorted by name (SPEC T-01)."""
    specs = {s.name: s for s in BUILTIN_SPECS}
    return [specs[name].definition() for name in offered_tools(allowed)]
