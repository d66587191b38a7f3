"""search_memory / search_conversations specs and registration (SPEC T-17)."""

from __future__ import annotations

from weft_tool_catalog.specs import (
    SEARCH_CONVERSATIONS,
    SEARCH_MEMORY,
    definitions_for,
    spec_by_name,
)


def test_limits_follow_the_spec() -> None:
    # SPEC T-17: search_memory limit default 10 max 20; search_conversations 5 max 8.
    memory = SEARCH_MEMORY.parameters["properties"]["limit"]
    conversations = SEARCH_CONVERSATIONS.parameters["properties"]["limit"]
    assert (memory["default"], memory["maximum"]) == (10, 20)
    assert (conversations["default"], conversations["maximum"]) == (5, 8)
    # The scope is implicit: no tenant/user/session parameter for the model to fill.
    for spec in (SEARCH_MEMORY, SEARCH_CONVERSATIONS):
        assert set(spec.parameters["properties"]) == {"query", "limit"}
        assert spec.read_only


def test_registered_as_builtins() -> None:
    names = [d["function"]["name"] for d in definitions_for(["search_memory"])]  # type: ignore[index]
    assert names == ["search_memory"]
    assert spec_by_name("search_conversations") is SEARCH_CONVERSATIONS
