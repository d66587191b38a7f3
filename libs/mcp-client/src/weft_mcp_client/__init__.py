"""Reaching a tenant's MCP server safely: the SSRF-safe HTTP client and address policy
(:mod:`weft_mcp_client.safe_http`), the pinned transport the MCP SDK is given
(:mod:`weft_mcp_client.transport`), sessions and tool lists
(:mod:`weft_mcp_client.session`), the limits on servers' tool names and schemas
(:mod:`weft_mcp_client.schema`) and OAuth (:mod:`weft_mcp_client.oauth`).

Shared by agent-config (registration health, tool lists, OAuth) and tool-exec (calls; its
web tools use the SSRF-safe client too), so that agent-config needs neither the tool
implementations nor a copy of this code.
"""
