"""agent-config rules, without infrastructure: reasoning
effort against the model table (SPEC A-05), the KB capability guard (A-07) and the
sharing rules (A-10)."""

from __future__ import annotations

from pathlib import Path

import pytest
from weft_agent_config.definition import (
    AgentDefinition,
    effective_reasoning_effort,
    synthesis_reasoning_effort,
)
from weft_agent_config.knowledge_guard import (
    DOCUMENT_KB,
    IncompatibleKnowledgeBase,
    ScopedKnowledgeBase,
    check_compatible,
    missing_capabilities,
)
from weft_agent_config.model_capabilities import ModelCapabilities
from weft_agent_config.resolver import TurnOverrides, runtime_config
from weft_agent_config.sharing import (
    NotShareable,
    SharedAgentRef,
    SharingRefused,
    check_shareable,
    check_sharer_role,
)
from weft_agent_config.sharing_api import capability_view
from weft_contracts import KnowledgeBaseInfo
from weft_llm import wire_reasoning_effort
from weft_tool_catalog.capabilities import KBCapability

MODELS = ModelCapabilities.load()


def _agent(**fields: object) -> AgentDefinition:
    return AgentDefinition.model_validate({"name": "a", **fields})


def _effort(agent: AgentDefinition, override: str | None = None) -> str | None:
    config = runtime_config(
        "a", agent, default_model="weft-scripted", knowledge_base_ids=[], models=MODELS,
        overrides=TurnOverrides(reasoning_effort=override),  # type: ignore[arg-type]
    )  # fmt: skip
    return config.reasoning_effort


def test_model_table_levels() -> None:  # SPEC A-05
    assert MODELS.reasoning_levels("weft-scripted") == (
        "off", "auto", "minimal", "low", "medium", "high",
    )  # fmt: skip
    assert MODELS.reasoning_levels("gpt-4o-mini") == ()
    assert MODELS.reasoning_levels("o3-mini") == ("auto", "low", "medium", "high")
    assert MODELS.reasoning_levels("some-other-model") is None  # the catch-all row: unknown


def test_effort_is_clamped_to_the_model() -> None:  # SPEC A-05
    o3 = MODELS.reasoning_levels("o3")
    assert effective_reasoning_effort("max", None, supported=o3) == "high"
    assert effective_reasoning_effort("xhigh", None, supported=o3) == "high"
    assert effective_reasoning_effort("minimal", None, supported=o3) == "low"
    assert effective_reasoning_effort("off", None, supported=o3) == "low"  # cannot switch off
    assert effective_reasoning_effort(None, True, supported=o3) == "auto"
    codex = MODELS.reasoning_levels("gpt-5.1-codex-max")
    assert effective_reasoning_effort("max", None, supported=codex) == "xhigh"
    assert effective_reasoning_effort("off", None, supported=codex) == "off"
    assert effective_reasoning_effort("high", None, supported=()) is None  # no reasoning
    assert effective_reasoning_effort("high", None, supported=None) == "high"  # unknown


def test_a_closing_synthesis_runs_with_thinking_off_as_far_as_the_model_allows() -> None:
    """SPEC E-21: "off" where the model can switch reasoning off, its lowest level where it
    cannot, nothing for a model that does not reason; an unknown model only gets "off"
    when the turn already sends an effort."""
    assert synthesis_reasoning_effort("high", MODELS.reasoning_levels("weft-scripted")) == "off"
    assert synthesis_reasoning_effort(None, MODELS.reasoning_levels("weft-scripted")) == "off"
    assert synthesis_reasoning_effort("high", MODELS.reasoning_levels("o3")) == "low"
    assert synthesis_reasoning_effort(None, MODELS.reasoning_levels("gpt-4o-mini")) is None
    assert synthesis_reasoning_effort("high", None) == "off"
    assert synthesis_reasoning_effort(None, None) is None
    config = runtime_config(
        "a", _agent(reasoning_effort="high"), default_model="o3-mini", knowledge_base_ids=[],
        models=MODELS,
    )  # fmt: skip
    assert (config.reasoning_effort, config.synthesis_reasoning_effort) == ("high", "low")


def test_an_unknown_model_gets_nothing_reasoning_related_the_turn_did_not_send() -> None:
    """SPEC E-21, A-05: the table's catch-all row does not claim that every model reasons;
    a model it does not name keeps the turn's own effort, and its closing synthesis adds
    no effort when the turn sends none."""
    for agent in (_agent(), _agent(thinking=None)):
        config = runtime_config(
            "a", agent, default_model="acme-chat-7", knowledge_base_ids=[], models=MODELS
        )
        assert (config.reasoning_effort, config.synthesis_reasoning_effort) == (None, None)
    config = runtime_config(
        "a", _agent(reasoning_effort="max"), default_model="acme-chat-7", knowledge_base_ids=[],
        models=MODELS,
    )  # fmt: skip
    assert (config.reasoning_effort, config.synthesis_reasoning_effort) == ("max", "off")


def test_a_row_without_levels_leaves_them_unknown(tmp_path: Path) -> None:  # SPEC A-05
    table = tmp_path / "models.yaml"
    table.write_text("models:\n  - match: plain\n    reasoning_efforts: []\n  - match: '*'\n")
    models = ModelCapabilities.load(table)
    assert models.reasoning_levels("plain") == ()
    assert models.reasoning_levels("anything") is None


def test_runtime_config_resolves_effort_with_request_override() -> None:  # SPEC A-05
    assert _effort(_agent()) is None
    assert _effort(_agent(thinking=True)) == "auto"
    assert _effort(_agent(thinking=False)) == "off"
    assert _effort(_agent(thinking=False, reasoning_effort="xhigh")) == "high"
    assert _effort(_agent(reasoning_effort="high"), override="minimal") == "minimal"
    assert _effort(_agent(thinking=True), override="max") == "high"
    gpt4 = runtime_config(
        "a", _agent(reasoning_effort="high", model="gpt-4o"), default_model="m",
        knowledge_base_ids=[], models=MODELS,
    )  # fmt: skip
    assert gpt4.reasoning_effort is None


def test_wire_mapping_of_levels() -> None:  # SPEC A-05
    assert wire_reasoning_effort(None) is None
    assert wire_reasoning_effort("auto") is None  # the model's own default
    assert wire_reasoning_effort("off") == "none"
    assert wire_reasoning_effort("high") == "high"


def test_bad_model_table_fails_at_load(tmp_path: object) -> None:  # SPEC A-05
    from pathlib import Path

    path = Path(str(tmp_path)) / "models.yaml"
    path.write_text("models:\n  - match: x\n    reasoning_efforts: [turbo]\n")
    with pytest.raises(ValueError, match="turbo"):
        ModelCapabilities.load(path)


def _kb(kb_id: str, caps: frozenset[KBCapability] = DOCUMENT_KB) -> ScopedKnowledgeBase:
    return ScopedKnowledgeBase(KnowledgeBaseInfo(id=kb_id, name=f"name-{kb_id}"), caps)


def test_capability_rules() -> None:  # SPEC A-07
    wiki = frozenset({KBCapability.WIKI})
    assert missing_capabilities(["search_knowledge"], DOCUMENT_KB) is None
    assert missing_capabilities(["search_knowledge"], wiki) == {
        "search_knowledge": ["keyword", "vector"]
    }
    # one primary tool served is enough (hybrid agents)
    assert missing_capabilities(["search_knowledge", "wiki_search"], wiki) is None
    # auxiliary tools do not count when a primary tool exists
    assert missing_capabilities(["wiki_search", "read_document"], DOCUMENT_KB) == {
        "wiki_search": ["wiki"]
    }
    # only auxiliary tools: they decide
    assert missing_capabilities(["read_document"], wiki) is None
    assert missing_capabilities(["read_document"], frozenset({KBCapability.FAQ})) is not None
    # AllOf
    assert missing_capabilities(["query_knowledge_graph"], DOCUMENT_KB) == {
        "query_knowledge_graph": ["graph"]
    }
    # tools that need no KB never refuse one
    assert missing_capabilities(["thinking", "todo_write"], frozenset()) is None


def test_guard_names_kb_and_missing_capability() -> None:  # SPEC A-07
    check_compatible(["search_knowledge"], [_kb("kb_1")])
    with pytest.raises(IncompatibleKnowledgeBase) as err:
        check_compatible(["wiki_search", "wiki_read_page"], [_kb("kb_1")])
    text = str(err.value)
    assert "'kb_1'" in text and "name-kb_1" in text and "lacks the capability wiki" in text
    assert "wiki_read_page, wiki_search" in text and "offers keyword, vector" in text


def test_share_needs_model_and_rerank_model() -> None:  # SPEC A-10
    with pytest.raises(NotShareable, match="model"):
        check_shareable(_agent(allowed_tools=[]))
    with pytest.raises(NotShareable, match="rerank_model_id"):
        check_shareable(_agent(model="m"))  # default tools include search_knowledge
    check_shareable(_agent(model="m", allowed_tools=["thinking"]))
    check_shareable(_agent(model="m", rerank_model_id="r"))


def test_sharer_needs_editor_or_above() -> None:  # SPEC A-10
    with pytest.raises(SharingRefused, match="not a member"):
        check_sharer_role(None)
    with pytest.raises(SharingRefused, match="viewer"):
        check_sharer_role("viewer")
    check_sharer_role("editor")
    check_sharer_role("admin")


def test_recipient_view_hides_prompt_creator_and_models() -> None:  # SPEC A-10
    agent = _agent(
        system_prompt="secret recipe", model="m", rerank_model_id="r",
        knowledge_base_ids=["kb_owner"], kb_selection_mode="selected",
    )  # fmt: skip
    ref = SharedAgentRef(
        agent_id="agt_1", owner_tenant_id="owner", organisation_ids=("org_1",), disabled=False
    )
    view = capability_view(ref, agent)
    assert view["permission"] == "viewer" and view["shared"] is True
    assert view["allowed_tools"] == [
        "search_knowledge", "read_document", "list_documents", "search_conversations",
    ]  # fmt: skip
    flat = repr(view)
    for hidden in ("secret recipe", "created_by", "rerank", "kb_owner", "owner'"):
        assert hidden not in flat


def test_shared_agent_knowledge_tools_read_the_owner_tenant() -> None:  # SPEC E-26
    from datetime import UTC, datetime

    from weft_contracts import ToolCallRequested, ToolCallRequestedData, ToolContext
    from weft_tool_catalog.specs import BUILTIN_SPECS
    from weft_tool_exec.worker import invocation_tenant

    specs = {s.name: s for s in BUILTIN_SPECS}

    def call(owner: str | None) -> ToolCallRequested:
        context = ToolContext(user_id="u", agent_id="a", retrieval_tenant_id=owner)
        data = ToolCallRequestedData(
            call_id="c", tool_name="t", round=0, deadline=datetime.now(UTC), context=context
        )
        return ToolCallRequested(tenant_id="recipient", session_id="s", request_id="r", data=data)

    assert invocation_tenant(call("owner"), specs["search_knowledge"]) == "owner"
    assert invocation_tenant(call("owner"), specs["read_document"]) == "owner"
    assert invocation_tenant(call("owner"), specs["search_conversations"]) == "recipient"
    assert invocation_tenant(call("owner"), None) == "recipient"
    assert invocation_tenant(call(None), specs["search_knowledge"]) == "recipient"
