"""tool-exec settings (environment, prefix ``WEFT_``)."""

from __future__ import annotations

from pydantic import Field
from weft_mcp_client.transport import McpReachSettings
from weft_platform.settings import ServiceSettings


class ToolExecSettings(ServiceSettings, McpReachSettings):
    """tool-exec settings."""

    service_name: str = "tool-exec"
    http_port: int = 8083
    tool_concurrency: int = Field(
        default=4, ge=1, le=64, description="Calls one worker runs at once (its runner tasks)."
    )
    tool_tenant_max_inflight: int = Field(
        default=3,
        ge=1,
        description="Calls one tenant runs at once across every tool-exec replica (Redis leases).",
    )
    tool_tenant_max_local: int | None = Field(
        default=None,
        ge=0,
        description="Runners of one worker a single tenant may hold at once; unset: all "
        "but one (tool_concurrency - 1, at least 1), so that a flooding tenant leaves a "
        "runner free on every worker; 0: no limit per worker.",
    )
    tool_slot_lease_s: float = Field(
        default=30.0,
        gt=1,
        description="A tenant slot's lease, renewed while its call runs: a killed "
        "replica's slots come back after at most this long.",
    )
    tool_read_ahead: int = Field(
        default=256,
        ge=1,
        description="Tool calls a worker reads ahead of its commit points (all its "
        "partitions); at this many it pauses fetching.",
    )
    tool_partition_read_ahead: int = Field(
        default=64, ge=1, description="The same bound for one partition (that partition pauses)."
    )
    knowledge_url: str = Field(
        default="http://127.0.0.1:8088",
        description="knowledge (WEFT_KNOWLEDGE_URL): search_knowledge, read_document, "
        "list_documents and the data tools' stored files.",
    )
    knowledge_timeout_s: float = Field(default=15.0, gt=0, description="One call to knowledge.")
    web_search_api_key: str = Field(
        default="", description="Brave Search key; empty: web_search answers it is not set up."
    )
    web_search_base_url: str = Field(
        default="https://api.search.brave.com", description="Brave Search API base URL."
    )
    web_search_timeout_s: float = Field(default=15.0, gt=0, description="Per search request.")
    web_fetch_timeout_s: float = Field(default=180.0, gt=0, description="Page budget (E-17).")
    sql_query_timeout_ms: int = Field(
        default=5000, ge=100, le=60_000, description="database_query statement timeout (T-11)."
    )
    sql_query_max_rows: int = Field(
        default=200, ge=1, le=10_000, description="Rows database_query returns at most."
    )
    duckdb_memory_limit: str = Field(
        default="256MB", description="Memory of one session's DuckDB database (T-12)."
    )
    web_fetch_allow_loopback: bool = Field(
        default=False, description="Tests only: lets web tools reach 127.0.0.1."
    )
    agent_config_url: str = Field(
        default="http://127.0.0.1:8081", description="agent-config (MCP catalog, connections)."
    )
    mcp_session_idle_s: float = Field(
        default=120.0, gt=0, description="An unused MCP session of a turn is closed after this."
    )
    mcp_catalog_ttl_s: float = Field(
        default=10.0,
        ge=0,
        description="A turn's MCP catalog is kept on the worker this long (0: read from "
        "agent-config on every call); a turn's end or discover_mcp_tools' refresh drops it.",
    )
    mcp_request_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="One request inside an MCP session (the call's "
        "deadline still bounds the whole call).",
    )
