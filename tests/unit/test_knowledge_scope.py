"""The knowledge tools' scope, without infrastructure: which KBs a call may read and which
ids its handles name (SPEC T-07, T-08, A-09, E-22)."""

from __future__ import annotations

import pytest
from weft_contracts import ToolContext
from weft_tool_catalog.registry import ToolInvocation
from weft_tools.aliases import MemoryAliasBook
from weft_tools.knowledge_scope import KnowledgeScope, OutOfScope


def _call(kbs: list[str], *, tenant: str = "t1", session: str = "s1") -> ToolInvocation:
    context = ToolContext(user_id="u", agent_id="a", knowledge_base_ids=kbs)
    return ToolInvocation(
        tenant_id=tenant, session_id=session, request_id="r", arguments={}, context=context
    )


async def test_no_request_searches_the_agents_bases() -> None:
    scope = KnowledgeScope(MemoryAliasBook())
    assert await scope.knowledge_bases(_call(["kb_a", "kb_b"]), []) == ["kb_a", "kb_b"]


async def test_a_base_outside_the_agents_is_refused_by_handle_and_by_raw_id() -> None:
    book = MemoryAliasBook()
    scope = KnowledgeScope(book)
    call = _call(["kb_a"])
    other = await scope.handle(call, "knowledge_base", "kb_other")
    with pytest.raises(OutOfScope, match="not available"):
        await scope.knowledge_bases(call, [other])
    with pytest.raises(OutOfScope, match="not available"):
        await scope.knowledge_bases(call, ["kb_other"])
    mine = await scope.handle(call, "knowledge_base", "kb_a")
    assert await scope.knowledge_bases(call, [mine]) == ["kb_a"]


async def test_a_handle_names_an_id_only_in_its_own_session_and_tenant() -> None:
    book = MemoryAliasBook()
    scope = KnowledgeScope(book)
    handle = await scope.handle(_call([]), "document", "doc_secret")
    assert await scope.resolve(_call([]), handle, "d") == "doc_secret"
    for stranger in (_call([], session="s2"), _call([], tenant="t2")):
        with pytest.raises(OutOfScope, match="unknown id"):
            await scope.resolve(stranger, handle, "d")


async def test_only_handles_of_the_expected_kind_are_looked_up() -> None:
    scope = KnowledgeScope(MemoryAliasBook())
    assert await scope.resolve(_call([]), " c12x ", "c") == "c12x"  # not a handle: raw
    assert await scope.resolve(_call([]), "d7", "c") == "d7"
