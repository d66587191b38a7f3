"""The specs of Weft's built-in tools, without their implementations.

What the model is told about each tool (name, description, JSON schema) and what the
engine needs to route and show a call (read_only, sensitive arguments). The engine and
agent-config import this catalog, never the implementations (``weft_tools.builtin`` and
the tool modules pull in pypdf, openpyxl, bs4, duckdb, numpy and SQLAlchemy, which only
tool-exec needs). Each tool module takes its spec from here, so the registry executes
exactly the specs advertised.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import Field, ValidationError
from weft_contracts import RiskClass

from weft_tool_catalog.arguments import ToolArguments
from weft_tool_catalog.capabilities import DOCUMENT_READER, GRAPH_QUERY, RETRIEVAL
from weft_tool_catalog.registry import ToolSpec
from weft_tool_catalog.sandbox_specs import SANDBOX_SPECS
from weft_tool_catalog.wiki_specs import WIKI_SPECS


class SearchMode(StrEnum):
    """How ``search_knowledge`` finds candidates."""

    HYBRID = "hybrid"
    SEMANTIC = "semantic"
    KEYWORD = "keyword"


WEB_FETCH_CHAR_BUDGET = 8000
"""Characters of page text one ``web_fetch`` call returns, shared by its pages."""

WEB_SEARCH_MAX_COUNT = 20
"""Most results one ``web_search`` call asks for."""

NonEmpty = Annotated[str, Field(min_length=1)]
"""A text argument the tool cannot do without."""


class SearchKnowledgeArguments(ToolArguments):
    """``search_knowledge``."""

    query: Annotated[str, Field(min_length=1, description="What to look for.")]
    mode: SearchMode = SearchMode.HYBRID
    limit: Annotated[int, Field(ge=1, le=30)] = 10
    knowledge_base_ids: Annotated[list[str] | None, Field(max_length=10)] = None


class QueryKnowledgeGraphArguments(ToolArguments):
    """``query_knowledge_graph`` (SPEC T-10)."""

    knowledge_base_ids: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=64)]],
        Field(min_length=1, max_length=10, description="Knowledge bases (bN) to query."),
    ]
    query: Annotated[
        str,
        Field(
            min_length=1,
            max_length=1000,
            description="An entity's name, or a question naming one or two entities.",
        ),
    ]


class ReadDocumentArguments(ToolArguments):
    """``read_document``."""

    id: Annotated[str, Field(min_length=1, description="dN or cN.")]
    offset: Annotated[int, Field(ge=0)] = 0
    limit: Annotated[int, Field(ge=1, le=100)] = 20
    context: Annotated[int, Field(ge=0, le=5)] = 1
    query: str | None = None
    regex: bool = False


class ListDocumentsArguments(ToolArguments):
    """``list_documents``."""

    keyword: Annotated[str | None, Field(description="Filter on title or file name.")] = None
    page: Annotated[int, Field(ge=1)] = 1
    page_size: Annotated[int, Field(ge=1, le=100)] = 20


class ThinkingArguments(ToolArguments):
    """``thinking``: one step of sequential thinking."""

    thought: NonEmpty
    next_thought_needed: bool
    thought_number: Annotated[int, Field(ge=1)]
    total_thoughts: Annotated[int, Field(ge=1)]
    is_revision: bool | None = None
    revises_thought: Annotated[int | None, Field(ge=1)] = None
    branch_from_thought: Annotated[int | None, Field(ge=1)] = None
    branch_id: str | None = None
    needs_more_thoughts: bool | None = None


StepStatus = Literal["pending", "in_progress", "completed"]


class PlanStep(ToolArguments):
    """One step of a ``todo_write`` plan."""

    id: NonEmpty
    description: NonEmpty
    status: StepStatus


class TodoWriteArguments(ToolArguments):
    """``todo_write``."""

    task: str | None = None
    steps: Annotated[list[PlanStep], Field(min_length=1)]


class DatabaseQueryArguments(ToolArguments):
    """``database_query``."""

    sql: NonEmpty


KnowledgeId = Annotated[str, Field(min_length=1, description="The CSV/Excel document.")]


class DataSchemaArguments(ToolArguments):
    """``data_schema``."""

    knowledge_id: KnowledgeId


class DataAnalysisArguments(DataSchemaArguments):
    """``data_analysis``: a data document (loaded as ``data_schema`` loads it) and a query."""

    sql: NonEmpty


class FetchItem(ToolArguments):
    """One page a ``web_fetch`` call reads."""

    url: NonEmpty
    offset: Annotated[int, Field(ge=0)] = 0
    limit: Annotated[int | None, Field(ge=1, le=WEB_FETCH_CHAR_BUDGET)] = None


class WebFetchArguments(ToolArguments):
    """``web_fetch``."""

    items: Annotated[list[FetchItem], Field(min_length=1)]


class WebSearchArguments(ToolArguments):
    """``web_search``."""

    query: NonEmpty
    count: Annotated[int, Field(ge=1, le=WEB_SEARCH_MAX_COUNT)] = 5
    country: str | None = None
    freshness: str | None = None
    content: bool = False


class RecallArguments(ToolArguments):
    """What both memory searches take; each tool narrows the limit and says what the query
    is for."""

    query: NonEmpty
    limit: int


class SearchMemoryArguments(RecallArguments):
    """``search_memory``."""

    query: Annotated[str, Field(min_length=1, description="What to recall.")]
    limit: Annotated[int, Field(ge=1, le=20)] = 10


class SearchConversationsArguments(RecallArguments):
    """``search_conversations``."""

    query: Annotated[str, Field(min_length=1, description="Words to look for.")]
    limit: Annotated[int, Field(ge=1, le=8)] = 5


class McpDiscoveryMode(StrEnum):
    """What ``discover_mcp_tools`` answers."""

    LIST_SERVERS = "list_servers"
    LIST_TOOLS = "list_tools"
    DESCRIBE = "describe"
    SEARCH = "search"


class DiscoverMcpToolsArguments(ToolArguments):
    """``discover_mcp_tools``."""

    mode: McpDiscoveryMode
    server_id: Annotated[
        str | None, Field(max_length=64, description="list_tools/describe: the server.")
    ] = None
    tool_name: Annotated[
        str | None,
        Field(max_length=256, description="describe: the server's tool name or its mcp_ name."),
    ] = None
    query: Annotated[str | None, Field(max_length=500, description="search: words.")] = None
    cursor: Annotated[
        str | None, Field(max_length=32, description="list_tools/search: next page.")
    ] = None
    limit: Annotated[int, Field(ge=1, le=50)] = 20
    refresh: bool = False


class CallMcpToolArguments(ToolArguments):
    """``call_mcp_tool``."""

    tool_ref: Annotated[
        str,
        Field(
            min_length=1,
            max_length=330,
            description="The tool's mcp_ name, or <server_id>/<tool_name>.",
        ),
    ]
    arguments: dict[str, object] = Field(description="The tool's arguments (a JSON object).")


SEARCH_KNOWLEDGE = ToolSpec(
    name="search_knowledge",
    description=(
        "Search the knowledge bases available to this conversation. mode: hybrid (default), "
        "keyword for exact terms, error codes and identifiers, semantic for rephrasings. "
        "Returns passages with short ids (c1, c2, ...) to cite as [c1]; read more of a "
        "document with read_document."
    ),
    arguments=SearchKnowledgeArguments,
    read_only=True,
    requirement=RETRIEVAL,
)

QUERY_KNOWLEDGE_GRAPH = ToolSpec(
    name="query_knowledge_graph",
    description=(
        "Query the knowledge graphs of knowledge bases (bN): entities whose name the query "
        "holds, their relations with the passages (cN) that state them, then passages "
        "matching the query's words. Use it for how entities relate; cite passages as [c1]."
    ),
    arguments=QueryKnowledgeGraphArguments,
    requirement=GRAPH_QUERY,
)

READ_DOCUMENT = ToolSpec(
    name="read_document",
    description=(
        "Read a document (dN) page by page in reading order, or a chunk (cN) with its "
        "neighbours. With `query`, find passages containing all its words (any order) "
        "or, with regex=true, matching the regular expression."
    ),
    arguments=ReadDocumentArguments,
    requirement=DOCUMENT_READER,
)

LIST_DOCUMENTS = ToolSpec(
    name="list_documents",
    description="List the documents of the conversation's knowledge bases (dN handles).",
    arguments=ListDocumentsArguments,
    requirement=DOCUMENT_READER,
)

THINKING = ToolSpec(
    name="thinking",
    description=(
        "Sequential thinking: record one reasoning step, revise an earlier one or branch "
        "from it. Do not name tools or write the final answer inside a thought."
    ),
    arguments=ThinkingArguments,
)

TODO_WRITE = ToolSpec(
    name="todo_write",
    description=(
        "Create or update the retrieval plan of this turn (steps with status pending, "
        "in_progress or completed). Put reasoning in `thinking`, not here."
    ),
    arguments=TodoWriteArguments,
)

DATABASE_QUERY = ToolSpec(
    name="database_query",
    description=(
        "Run one read-only SQL SELECT (PostgreSQL) over the tables knowledge_bases, "
        "documents and chunks. Rows of other tenants are never visible."
    ),
    arguments=DatabaseQueryArguments,
    requirement=RETRIEVAL,
    sensitive_arguments=frozenset({"sql"}),
)

DATA_SCHEMA = ToolSpec(
    name="data_schema",
    description=(
        "Columns, types and row count of a CSV/Excel document. data_analysis always "
        "queries it as the table `dataset`."
    ),
    arguments=DataSchemaArguments,
    requirement=RETRIEVAL,
)

DATA_ANALYSIS = ToolSpec(
    name="data_analysis",
    description=(
        "Run one DuckDB SELECT over a CSV/Excel document loaded as the table `dataset` "
        "(Excel sheets merged, the sheet in column __sheet_name)."
    ),
    arguments=DataAnalysisArguments,
    requirement=RETRIEVAL,
)

WEB_FETCH = ToolSpec(
    name="web_fetch",
    description=(
        "Fetch web pages (http/https, at most 8) as Markdown. Page through long pages "
        "with offset/limit (characters, 8000 shared by the call); the full text is saved "
        "at full_output_path for read_file."
    ),
    arguments=WebFetchArguments,
    risk="probe",
)

WEB_SEARCH = ToolSpec(
    name="web_search",
    description="Search the web. Set content=true to also read the top 3 pages.",
    arguments=WebSearchArguments,
    risk="probe",
)

SEARCH_MEMORY = ToolSpec(
    name="search_memory",
    description=(
        "Search the long-term memory about the current user (facts, preferences, projects "
        "remembered from earlier conversations)."
    ),
    arguments=SearchMemoryArguments,
)

SEARCH_CONVERSATIONS = ToolSpec(
    name="search_conversations",
    description="Search the current user's past conversations for messages about a topic.",
    arguments=SearchConversationsArguments,
)

MEMORY_SPECS: tuple[ToolSpec, ...] = (SEARCH_MEMORY, SEARCH_CONVERSATIONS)

DISCOVER_MCP_TOOLS = ToolSpec(
    name="discover_mcp_tools",
    description=(
        "Explore the MCP servers this agent may use: list_servers, list_tools (server_id), "
        "search (query), describe (server_id + tool_name: its full definition; a described "
        "tool becomes callable under its mcp_ name from the next step on)."
    ),
    arguments=DiscoverMcpToolsArguments,
)

CALL_MCP_TOOL = ToolSpec(
    name="call_mcp_tool",
    description=(
        "Call a tool of an MCP server this agent may use, by its mcp_ name or "
        "<server_id>/<tool_name>, with its arguments."
    ),
    arguments=CallMcpToolArguments,
    read_only=False,
)

MCP_SPECS: tuple[ToolSpec, ...] = (DISCOVER_MCP_TOOLS, CALL_MCP_TOOL)
"""Offered only to agents with MCP servers (``ToolContext.mcp_server_ids``)."""

MCP_DYNAMIC_PREFIX = "mcp_"
"""Dynamic MCP tool names start with this (``weft_contracts.mcp.dynamic_tool_name``)."""

BUILTIN_SPECS: tuple[ToolSpec, ...] = (
    SEARCH_KNOWLEDGE,
    READ_DOCUMENT,
    LIST_DOCUMENTS,
    QUERY_KNOWLEDGE_GRAPH,
    THINKING,
    TODO_WRITE,
    DATABASE_QUERY,
    DATA_SCHEMA,
    DATA_ANALYSIS,
    WEB_FETCH,
    WEB_SEARCH,
    *MEMORY_SPECS,
    *MCP_SPECS,
    *WIKI_SPECS,
)
"""Specs of every built-in tool tool-exec runs (what the engine sends the model)."""

SANDBOX_TOOLS: frozenset[str] = frozenset(s.name for s in SANDBOX_SPECS)
"""Tools routed to ``sandbox.calls`` instead of ``tool.calls``."""

OFFERABLE_SPECS: tuple[ToolSpec, ...] = (*BUILTIN_SPECS, *SANDBOX_SPECS)
"""What a turn may be offered: tool-exec's built-ins and the sandbox's tools."""


def spec_by_name(name: str) -> ToolSpec | None:
    """The built-in or sandbox spec named ``name``."""
    return next((s for s in OFFERABLE_SPECS if s.name == name), None)


def offered_tools(allowed: Iterable[str]) -> list[str]:
    """The turn's effective tool set: the allowed names that are built-ins, sorted. The
    model is offered exactly these, and the engine and the workers run no other tool
    (SPEC A-08: ``allowed`` is the agent's list after the runtime registration rules)."""
    wanted = set(allowed)
    return sorted(s.name for s in OFFERABLE_SPECS if s.name in wanted)


def risk_of(tool_name: str) -> RiskClass:
    """SPEC H-01: a built-in's risk class; a tool Weft does not know is ``destructive``
    (nothing it could do is assumed harmless)."""
    spec = spec_by_name(tool_name)
    return "destructive" if spec is None else spec.risk_class()


def always_asks(tool_name: str) -> bool:
    """Whether the tool's own spec says it is asked about at every level."""
    spec = spec_by_name(tool_name)
    return spec is not None and spec.always_ask


def argument_problems(tool_name: str, arguments: object) -> str | None:
    """Why ``arguments`` (a person's edit of a call, SPEC H-02) do not fit the built-in's
    argument model, for people; None when they do, or when Weft has no model for the tool
    (an MCP tool is checked against its registered schema where it runs)."""
    if not isinstance(arguments, dict):
        return "arguments must be a JSON object"
    spec = spec_by_name(tool_name)
    if spec is None or spec.arguments is None:
        return None
    try:
        spec.arguments.model_validate(arguments)
    except ValidationError as exc:
        return "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(arguments)'}: {e['msg']}"
            for e in exc.errors(include_url=False)
        )
    return None


def risk_table() -> str:
    """The built-ins' risk classes as ``docs/approvals.md`` shows them (a test keeps the
    page equal to this)."""
    rows = sorted(
        (s.name, s.risk_class(), "yes" if s.always_ask else "no") for s in OFFERABLE_SPECS
    )
    lines = ["| tool | risk class | always ask |", "| --- | --- | --- |"]
    lines += [f"| `{name}` | {risk} | {always} |" for name, risk, always in rows]
    return "\n".join(lines)


def definitions_for(allowed: Iterable[str]) -> list[dict[str, object]]:
    """OpenAI tool definitions of the allowed built-ins, sorted by name (SPEC T-01)."""
    specs = {s.name: s for s in OFFERABLE_SPECS}
    return [specs[name].definition() for name in offered_tools(allowed)]
