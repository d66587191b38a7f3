"""agent-config rules without infrastructure: defaults, presets, built-ins, tools, scopes."""

from __future__ import annotations

from typing import cast

import pytest
from fastapi import HTTPException
from weft_agent_config.agent_service import AgentService
from weft_agent_config.catalogs import BuiltinAgents, TypePresets
from weft_agent_config.definition import (
    AgentDefinition,
    effective_reasoning_effort,
    ensure_defaults,
    normalize_max_iterations,
)
from weft_agent_config.resolver import (
    AgentResolver,
    KnowledgeScopeDenied,
    TurnOverrides,
    knowledge_scope,
    runtime_config,
)
from weft_agent_config.store import AgentStore
from weft_agent_config.tool_policy import (
    UnknownTool,
    catalog_json,
    missing_tools,
    normalize_allowed_tools,
    runtime_tools,
)
from weft_contracts import AgentMode

SMART = AgentMode.SMART_REASONING
QUICK = AgentMode.QUICK_ANSWER


def _agent(**fields: object) -> AgentDefinition:
    return AgentDefinition.model_validate({"name": "a", **fields})


def _service() -> AgentService:
    return AgentService(None, BuiltinAgents.load(), TypePresets.load(), "m")  # type: ignore[arg-type]


# SPEC A-04
def test_ensure_defaults_fills_unset_fields() -> None:
    full = ensure_defaults(_agent(), "default-model")
    assert full.model == "default-model"
    assert full.temperature == 0.7
    assert full.max_completion_tokens == 4096
    assert full.max_iterations == 10
    assert full.llm_call_timeout_s == 120.0
    assert full.citation_enabled is True
    assert full.access_level == "auto_write"
    assert full.history_turns == 5
    assert full.web_search_max_results == 5
    sugg = full.question_suggestions
    assert sugg is not None
    assert (sugg.starters.enabled, sugg.starters.mode, sugg.starters.count) == (True, "hybrid", 6)
    assert (sugg.follow_ups.enabled, sugg.follow_ups.mode, sugg.follow_ups.count) == (
        False,
        "hybrid",
        3,
    )


# SPEC A-04
def test_ensure_defaults_keeps_explicit_values() -> None:
    agent = _agent(
        temperature=0.0,
        max_iterations=-1,
        citation_enabled=False,
        access_level="read_only",
        history_turns=0,
        llm_call_timeout_s=30,
        model="m2",
    )
    full = ensure_defaults(agent, "default-model")
    assert full.temperature == 0.0
    assert full.max_iterations == -1
    assert full.citation_enabled is False
    assert full.access_level == "read_only"
    assert full.history_turns == 0
    assert full.llm_call_timeout_s == 30
    assert full.model == "m2"


# SPEC A-04
@pytest.mark.parametrize(
    ("mode", "sandbox", "given", "expected"),
    [
        (QUICK, False, 0, 2048),
        (SMART, False, 0, 4096),
        (SMART, True, 0, 24576),
        (SMART, True, 1000, 8192),
        (SMART, True, 9000, 9000),
        (SMART, False, 1000, 1000),
        (QUICK, True, 1000, 1000),
    ],
)
def test_completion_token_defaults(
    mode: AgentMode, sandbox: bool, given: int, expected: int
) -> None:
    agent = _agent(mode=mode, sandbox_enabled=sandbox, max_completion_tokens=given)
    assert ensure_defaults(agent, "m").max_completion_tokens == expected


# SPEC A-04 (service validation)
@pytest.mark.parametrize(
    ("given", "expected"), [(None, None), (0, 5), (-7, -1), (1, 1), (100, 100), (500, 100)]
)
def test_max_iterations_validation(given: int | None, expected: int | None) -> None:
    assert normalize_max_iterations(given) == expected


def test_negative_temperature_means_default() -> None:  # SPEC A-04
    assert ensure_defaults(_agent(temperature=-3), "m").temperature == 0.7


# SPEC A-05
def test_reasoning_effort_rules() -> None:
    assert effective_reasoning_effort(None, None) is None
    assert effective_reasoning_effort(None, True) == "auto"
    assert effective_reasoning_effort(None, False) == "off"
    assert effective_reasoning_effort("high", False) == "high"  # effort wins over thinking
    assert effective_reasoning_effort("high", None, request_override="low") == "low"
    levels = ["off", "low", "medium", "high"]
    assert effective_reasoning_effort("max", None, supported=levels) == "high"
    assert effective_reasoning_effort("minimal", None, supported=levels) == "off"
    assert effective_reasoning_effort("auto", None, supported=levels) == "medium"
    assert effective_reasoning_effort("medium", None, supported=levels) == "medium"


def test_reasoning_effort_rejects_unknown_level() -> None:  # SPEC A-05
    with pytest.raises(ValueError):
        _agent(reasoning_effort="extreme")


# SPEC A-06
def test_allowed_tools_null_means_default_list() -> None:
    assert normalize_allowed_tools(None) == [
        "search_knowledge",
        "read_document",
        "list_documents",
        "search_conversations",
    ]


def test_allowed_tools_empty_stays_empty() -> None:  # SPEC A-06
    assert normalize_allowed_tools([]) == []


def test_allowed_tools_legacy_names_mapped_and_deduplicated() -> None:  # SPEC A-06
    names = ["knowledge_search", "grep_chunks", "get_document_info", "wiki_read_source_doc"]
    assert normalize_allowed_tools(names) == ["search_knowledge", "read_document"]
    assert normalize_allowed_tools(["list_knowledge_chunks"]) == ["read_document"]


def test_allowed_tools_managed_elsewhere_removed() -> None:  # SPEC A-06
    names = ["web_search", "search_knowledge", "web_fetch", "search_memory"]
    assert normalize_allowed_tools(names) == ["search_knowledge"]


def test_allowed_tools_unknown_name_is_refused() -> None:  # SPEC A-06
    with pytest.raises(UnknownTool, match="no_such_tool"):
        normalize_allowed_tools(["search_knowledge", "no_such_tool"])


def test_unknown_tool_is_http_400_on_create() -> None:  # SPEC A-06
    with pytest.raises(HTTPException) as err:
        _service().validate({"name": "x", "allowed_tools": ["nope"]}, apply_preset=True)
    assert err.value.status_code == 400


# SPEC A-08
def test_runtime_tools_injection_and_pure_agent() -> None:
    tools = runtime_tools(
        ["search_knowledge", "thinking"], has_kb_scope=True, web_search=True, memory=True
    )
    assert tools == ["search_knowledge", "thinking", "web_search", "web_fetch", "search_memory"]
    pure = runtime_tools(
        ["search_knowledge", "wiki_search", "thinking"],
        has_kb_scope=False,
        web_search=False,
        memory=False,
    )
    assert pure == ["thinking"]


def test_web_needs_agent_and_request() -> None:  # SPEC A-11
    agent = _agent(web_search_enabled=True, allowed_tools=[])
    on = runtime_config("a", agent, default_model="m", knowledge_base_ids=[])
    off = runtime_config(
        "a",
        agent,
        default_model="m",
        knowledge_base_ids=[],
        overrides=TurnOverrides(web_allowed=False),
    )
    assert "web_search" in on.allowed_tools and "web_search" not in off.allowed_tools


# SPEC A-07
def test_catalog_is_json_with_every_registered_tool() -> None:
    catalog = catalog_json()
    names = [entry["name"] for entry in catalog]
    assert "search_knowledge" in names and names == sorted(names)
    assert all(isinstance(entry["read_only"], bool) for entry in catalog)


# SPEC A-02
def test_presets_prefill_only_unset_fields() -> None:
    presets = TypePresets.load()
    assert set(presets.presets) == {
        "rag-qa",
        "wiki-qa",
        "hybrid-rag-wiki",
        "data-analysis",
        "custom",
    }
    agent = presets.prefill(_agent(agent_type="rag-qa", temperature=0.2))
    assert agent.temperature == 0.2  # the creator's value wins
    assert agent.max_iterations == 30
    assert agent.allowed_tools == ["search_knowledge", "read_document", "list_documents"]
    assert presets.prefill(_agent(agent_type="bogus")).agent_type == "custom"
    assert presets.prefill(_agent(agent_type="")).agent_type == "custom"
    data = presets.prefill(_agent(agent_type="data-analysis"))
    assert data.temperature == 0.3 and data.allowed_tools == ["data_schema", "data_analysis"]


def test_presets_do_not_apply_to_quick_answer() -> None:  # SPEC A-02
    agent = TypePresets.load().prefill(_agent(mode="quick-answer", agent_type="rag-qa"))
    assert agent.max_iterations is None


# SPEC A-03
def test_builtin_agents_with_i18n_names_and_hidden_ones() -> None:
    builtins = BuiltinAgents.load()
    assert set(builtins.agents) == {
        "builtin-quick-answer",
        "builtin-smart-reasoning",
        "builtin-data-analyst",
        "builtin-wiki-researcher",
        "builtin-wiki-fixer",
        "builtin-skill-installer",
    }
    assert "builtin-wiki-fixer" not in builtins.listed()
    assert "builtin-skill-installer" not in builtins.listed()
    assert "builtin-smart-reasoning" in builtins.listed()
    for agent in builtins.agents.values():
        assert isinstance(agent.name, dict)
        assert {"default", "zh-CN", "zh-TW", "ja-JP", "ko-KR"} <= set(agent.name)
    assert builtins.is_builtin_id("builtin-deep-research")  # reserved without a definition
    assert builtins.agents["builtin-smart-reasoning"].max_iterations == 50


def test_builtins_are_read_only() -> None:  # SPEC A-03
    with pytest.raises(HTTPException) as err:
        _service().refuse_builtin("builtin-quick-answer")
    assert err.value.status_code == 403


# SPEC A-09
def test_knowledge_scope_with_restricted_key() -> None:
    everything = _agent(kb_selection_mode="all")
    with pytest.raises(KnowledgeScopeDenied):
        knowledge_scope(everything, None, ["kb1"])
    assert knowledge_scope(everything, ["kb1"], ["kb1", "kb2"]) == ["kb1"]
    with pytest.raises(KnowledgeScopeDenied):
        knowledge_scope(everything, ["kb3"], ["kb1"])
    selected = _agent(kb_selection_mode="selected", knowledge_base_ids=["kb1", "kb2"])
    assert knowledge_scope(selected, None, ["kb1", "kb2", "kb9"]) == ["kb1", "kb2"]
    with pytest.raises(KnowledgeScopeDenied):
        knowledge_scope(selected, None, ["kb1"])
    assert knowledge_scope(_agent(kb_selection_mode="none"), ["kb1"], ["kb2"]) == []
    assert knowledge_scope(everything, None, None) == []
    # Empty means every KB of the tenant downstream: never for a restricted key.
    for agent, requested in ((everything, []), (_agent(kb_selection_mode="selected"), None)):
        with pytest.raises(KnowledgeScopeDenied, match="empty knowledge base list"):
            knowledge_scope(agent, requested, ["kb1"])
    assert knowledge_scope(everything, [], None) == []  # an unrestricted key: every KB


def test_create_normalizes_and_refuses_hidden() -> None:  # SPEC
    svc = _service()
    agent = svc.validate(
        {"name": "x", "max_iterations": 0, "allowed_tools": ["grep_chunks"]}, apply_preset=True
    )
    assert agent.max_iterations == 5 and agent.allowed_tools == ["search_knowledge"]
    with pytest.raises(HTTPException) as err:
        svc.validate({"name": "x", "hidden": True}, apply_preset=True)
    assert err.value.status_code == 422
    with pytest.raises(HTTPException):
        svc.validate({"name": "  "}, apply_preset=True)


async def test_builtins_whose_tools_do_not_exist_are_unavailable() -> None:
    """SPEC A-03: a built-in whose tools no worker runs would be unavailable; every
    built-in's tools run now (the wiki tools since issue 39, the skill installer's: S-04),
    while a reference tool the catalog lacks is still reported missing."""
    builtins = BuiltinAgents.load()
    assert builtins.unavailable == {}
    assert missing_tools(["search_knowledge", "web_search", "knowledge_search"]) == []
    assert missing_tools(["wiki_search", "wiki_list_issues", "write_file"]) == ["write_file"]
    resolver = AgentResolver(cast(AgentStore, None), builtins, "weft-scripted")
    found = await resolver.find("t", "builtin-wiki-researcher")
    assert "wiki_search" in (found.definition.allowed_tools or [])
    found = await resolver.find("t", "builtin-data-analyst")
    assert found.definition.allowed_tools == ["data_schema", "data_analysis"]
