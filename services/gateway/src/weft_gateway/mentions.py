"""SPEC A-11: ``@doc`` and ``@tag`` mentions narrow a turn's search targets.

A chat request names documents and tags in its ``mentions`` list (what a client's @ menu
sends) or inline in its query as ``@doc:<document id>`` and ``@tag:<tag>``. Knowledge
resolves them to documents among the agent's knowledge bases, and an ``@tag`` also to
the FAQ entries carrying it, under the caller's credential (a KB-restricted key reaches
only its bases): a mentioned document outside them is the 404 of a missing one, a tag
that no document or FAQ entry in scope carries is a 422. The turn's agent snapshot then
reads only those documents and FAQ entries, in their knowledge bases (``search_knowledge``,
``read_document``, ``list_documents``): a mention chooses among the sources the turn may
use and never widens them.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from fastapi import HTTPException
from pydantic import BaseModel, Field
from weft_contracts import AgentConfig

from weft_gateway.clients import ServiceClient

MENTION_VALUE = r"^[\w.:-]+$"
_INLINE = re.compile(r"(?<![\w@])@(doc|tag):([\w.:-]*[\w-])")
MAX_MENTIONS = 20


class Mention(BaseModel):
    """One ``@`` mention of a chat request."""

    type: Literal["doc", "tag"]
    value: Annotated[str, Field(min_length=1, max_length=128, pattern=MENTION_VALUE)]


def inline_mentions(query: str) -> list[Mention]:
    """The ``@doc:<id>`` and ``@tag:<tag>`` tokens of a query, in order."""
    found = [
        Mention(type="doc" if kind == "doc" else "tag", value=value)
        for kind, value in _INLINE.findall(query)
    ]
    if len(found) > MAX_MENTIONS:
        raise HTTPException(422, f"a message may hold at most {MAX_MENTIONS} mentions")
    return found


class MentionResolver:
    """Narrows an agent snapshot to the documents a request mentions."""

    def __init__(self, knowledge: ServiceClient):
        self._knowledge = knowledge

    async def narrow(
        self, tenant_id: str, agent: AgentConfig, mentions: list[Mention]
    ) -> AgentConfig:
        """``agent`` searching only the mentioned documents (unchanged without mentions)."""
        if not mentions:
            return agent
        if "search_knowledge" not in agent.allowed_tools:
            raise HTTPException(
                400, "this agent does not search knowledge bases: @doc and @tag mentions "
                "need one that does",
            )  # fmt: skip
        if agent.retrieval_tenant_id not in (None, tenant_id):
            raise HTTPException(400, "@doc and @tag mentions are not available with a shared agent")
        body = {
            "tenant_id": tenant_id,
            "knowledge_base_ids": agent.knowledge_base_ids,
            "document_ids": sorted({m.value for m in mentions if m.type == "doc"}),
            "tags": sorted({m.value for m in mentions if m.type == "tag"}),
        }
        found = await self._knowledge.call("POST", "/internal/search-targets", json=body)
        targets = found["targets"]
        faqs = found.get("faq_targets") or []
        kbs = sorted({t["knowledge_base_id"] for t in [*targets, *faqs]})
        docs = sorted({t["document_id"] for t in targets})
        tags = sorted({t["tag"] for t in faqs})
        if not kbs:  # no knowledge base would mean every one of the tenant's: never widen
            raise HTTPException(422, "the mentions select nothing in this agent's knowledge")
        return agent.model_copy(
            update={"knowledge_base_ids": kbs, "search_document_ids": docs,
                    "search_faq_tags": tags}
        )  # fmt: skip
