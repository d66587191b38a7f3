"""The registry with Weft's built-in tools, ready to execute (tool-exec).

Their specs alone (what the engine and agent-config need) are in :mod:`weft_tool_catalog.specs`,
which imports none of the implementations.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from weft_mcp_client.safe_http import AddressPolicy, SafeHttpClient
from weft_mcp_client.transport import pinned_client_factory
from weft_platform.web_snapshots import SnapshotStore
from weft_storage.ownership import OWNED, UNOWNED_TABLES
from weft_tool_catalog.registry import ToolRegistry

from weft_tools.aliases import AliasBook
from weft_tools.data_tools import DataAnalysisTool, DataSchemaTool, DatasetFile
from weft_tools.database_query import DatabaseQueryTool, QueryLimits
from weft_tools.document_parsing import is_table
from weft_tools.document_tools import ListDocumentsTool, ReadDocumentTool
from weft_tools.duckdb_workspace import DuckDBWorkspace
from weft_tools.graph_tools import QueryKnowledgeGraphTool
from weft_tools.knowledge_client import KnowledgeClient
from weft_tools.knowledge_scope import KnowledgeScope
from weft_tools.knowledge_tools import SearchKnowledgeTool
from weft_tools.mcp_calls import McpCaller
from weft_tools.mcp_directory import HttpMcpDirectory
from weft_tools.mcp_pool import McpSessionPool
from weft_tools.mcp_tools import mcp_tools
from weft_tools.memory_tools import MemoryServiceClient, memory_tools
from weft_tools.planning_tools import ThinkingTool, TodoWriteTool
from weft_tools.web_fetch import WebFetchTool
from weft_tools.web_search import SearchProvider, WebSearchTool
from weft_tools.wiki_tools import wiki_tools


@dataclass(frozen=True, kw_only=True)
class ToolDependencies:
    """What the built-in tools need from the process that runs them."""

    sessions: async_sessionmaker[AsyncSession]
    """``database_query``'s connections (as ``weft_sql_reader``, the ``weft_sql`` views)."""
    snapshots: SnapshotStore
    aliases: AliasBook
    knowledge: KnowledgeClient = field(default_factory=KnowledgeClient)
    """The knowledge service: search_knowledge, read_document, list_documents and the
    data tools' stored files, asked with the turn's credential."""
    http: SafeHttpClient = field(default_factory=SafeHttpClient)
    search_provider: SearchProvider | None = None
    """None: ``web_search`` answers that no provider is configured (a readable tool error)."""
    web_fetch_timeout_s: float = 180.0
    sql_limits: QueryLimits = field(default_factory=QueryLimits)
    """Row cap and statement timeout of ``database_query``."""
    workspace: DuckDBWorkspace = field(default_factory=DuckDBWorkspace)
    """The process's DuckDB databases of data_schema / data_analysis."""
    mcp: McpCaller = field(
        default_factory=lambda: McpCaller(
            HttpMcpDirectory(), McpSessionPool(pinned_client_factory(AddressPolicy()))
        )
    )
    """MCP catalog look-ups and the worker's session pool (SPEC T-19)."""
    memory: MemoryServiceClient = field(default_factory=MemoryServiceClient)
    """The memory service's search routes (search_memory, search_conversations)."""


def builtin_registry(deps: ToolDependencies) -> ToolRegistry:
    """A registry holding every built-in tool, ready to execute."""
    registry = ToolRegistry()
    workspace = deps.workspace
    scope = KnowledgeScope(deps.aliases)
    datasets = StoredDatasets(deps.knowledge, scope)
    registry.register(SearchKnowledgeTool(deps.knowledge, scope))
    registry.register(ReadDocumentTool(deps.knowledge, scope))
    registry.register(ListDocumentsTool(deps.knowledge, scope))
    registry.register(QueryKnowledgeGraphTool(deps.knowledge, scope))
    for wiki_tool in wiki_tools(deps.knowledge, scope):
        registry.register(wiki_tool)
    registry.register(ThinkingTool())
    registry.register(TodoWriteTool())
    # Every table of the schema is a name no CTE may take (SPEC T-11).
    reserved = OWNED | frozenset(UNOWNED_TABLES)
    registry.register(DatabaseQueryTool(deps.sessions, limits=deps.sql_limits, reserved=reserved))
    registry.register(DataSchemaTool(datasets, workspace))
    registry.register(DataAnalysisTool(datasets, workspace))
    registry.register(
        WebFetchTool(deps.http, deps.snapshots, page_timeout_s=deps.web_fetch_timeout_s)
    )
    for tool in memory_tools(deps.memory):
        registry.register(tool)
    registry.register(WebSearchTool(deps.search_provider, deps.http))
    discover, call, dynamic = mcp_tools(deps.mcp)
    registry.register(discover)
    registry.register(call)
    registry.add_dynamic(dynamic)
    return registry


class StoredDatasets:
    """CSV/Excel uploads of the knowledge store as data_analysis inputs (dN or id)."""

    def __init__(self, knowledge: KnowledgeClient, scope: KnowledgeScope):
        self._knowledge = knowledge
        self._scope = scope

    async def dataset_file(
        self, tenant_id: str, session_id: str, knowledge_id: str, *, credential: str | None
    ) -> DatasetFile | None:
        """The stored file, when it is a table file of the tenant."""
        doc_id = knowledge_id
        if knowledge_id[:1] == "d" and knowledge_id[1:].isdigit():
            doc_id = await self._scope.aliases.resolve(tenant_id, session_id, knowledge_id) or ""
        found = await self._knowledge.file(tenant_id, doc_id, credential=credential)
        if found is None or not is_table(found[0]):
            return None
        return DatasetFile(file_name=found[0], content=found[1])
