"""Which knowledge bases a call may read, and the handles that name their contents."""

from __future__ import annotations

from weft_tool_catalog.registry import ToolInvocation

from weft_tools.aliases import AliasBook


class OutOfScope(LookupError):
    """The handle or KB is unknown or outside the conversation's knowledge bases."""


class KnowledgeScope:
    """Resolves ``bN``/``dN``/``cN`` handles and limits requests to the allowed KBs."""

    def __init__(self, aliases: AliasBook):
        self.aliases = aliases

    async def handle(self, call: ToolInvocation, kind: str, real_id: str) -> str:
        """The session's handle for ``real_id``."""
        return await self.aliases.alias(call.tenant_id, call.session_id, kind, real_id)

    async def resolve(self, call: ToolInvocation, handle: str, prefix: str) -> str:
        """The id behind ``handle`` (``prefix`` is c, d or b); raw ids pass through."""
        handle = handle.strip()
        if len(handle) > 1 and handle[0] == prefix and handle[1:].isdigit():
            real = await self.aliases.resolve(call.tenant_id, call.session_id, handle)
            if real is None:
                raise OutOfScope(f"unknown id {handle!r}; use ids returned by earlier tools")
            return real
        return handle

    async def knowledge_bases(self, call: ToolInvocation, requested: list[str]) -> list[str]:
        """KB ids to search: the requested ones (checked against the agent's), else all
        the agent's (empty = every KB of the tenant)."""
        allowed = call.context.knowledge_base_ids
        if not requested:
            return list(allowed)
        chosen = [await self.resolve(call, r, "b") for r in requested]
        outside = [
            r for r, c in zip(requested, chosen, strict=True) if allowed and c not in allowed
        ]
        if outside:
            raise OutOfScope(f"knowledge base(s) {outside} are not available to this conversation")
        return chosen
