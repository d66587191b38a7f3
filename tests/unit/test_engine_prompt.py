"""System prompt sections in the reference's order (SPEC E-24) and display hints (E-18)."""

from __future__ import annotations

from datetime import UTC, datetime

from weft_contracts import AgentConfig, KnowledgeBaseInfo
from weft_engine.prompt import (
    CITATION_PROTOCOL,
    OUTPUT,
    PURE_BASE,
    RAG_BASE,
    RUNTIME_CONVENTIONS,
    display_hint,
    initial_messages,
    message_language,
    placeholder_values,
    render_placeholders,
    system_prompt,
)

from tests.unit.turn_states import text


def test_rag_agent_sections_in_order() -> None:
    prompt = system_prompt(AgentConfig(agent_id="a", model="m", allowed_tools=["search_knowledge"]))
    order = [prompt.index(s) for s in (RAG_BASE, RUNTIME_CONVENTIONS, OUTPUT, CITATION_PROTOCOL)]
    assert order == sorted(order)


def test_pure_agent_has_no_citation_protocol_and_explicit_body_wins() -> None:
    pure = system_prompt(AgentConfig(agent_id="a", model="m", allowed_tools=[]))
    assert pure.startswith(PURE_BASE) and CITATION_PROTOCOL not in pure
    custom = system_prompt(AgentConfig(agent_id="a", model="m", system_prompt="Be a pirate."))
    assert custom.startswith("Be a pirate.")


def test_runtime_context_goes_in_the_user_message_not_the_system_prompt() -> None:
    agent = AgentConfig(agent_id="a", model="m")
    messages = initial_messages(agent, [], "hello", "ses_1")
    assert "date: " not in text(messages[0])
    assert text(messages[-1]).startswith("hello\n\n<runtime_context>date: ")
    assert "session: ses_1" in text(messages[-1])


def test_display_hints() -> None:
    assert display_hint("search_knowledge") == "Searching the knowledge base"
    assert display_hint("mcp_x") == "Using mcp_x"


def test_placeholders_are_substituted_per_request_and_unknown_ones_kept() -> None:
    """Placeholders of agent-config's list (PLACEHOLDERS) become this request's values in
    the system prompt; an unknown one stays as written (SPEC A-09 placeholders)."""
    agent = AgentConfig(
        agent_id="a",
        model="m",
        name="Helper",
        allowed_tools=["search_knowledge", "web_search"],
        knowledge_bases=[
            KnowledgeBaseInfo(id="kb_1", name="Handbook", description="HR rules"),
            KnowledgeBaseInfo(id="kb_2", name="Pricing"),
        ],
        system_prompt=(
            "I am {{agent_name}} for {{user_name}}; it is {{ current_time }}. Reply in "
            "{{language}}. Sources:\n{{knowledge_bases}}\nWeb: {{web_search_status}}. "
            "Keep {{unknown_thing}} and {single} braces."
        ),
    )
    system = text(initial_messages(agent, [], "Wie spät ist es?", "s", user_name="alice")[0])
    assert system.startswith("I am Helper for alice; it is 20")
    assert "Reply in German." in system
    assert "- Handbook: HR rules\n- Pricing\n" in system
    assert "Web: enabled." in system
    assert "Keep {{unknown_thing}} and {single} braces." in system
    assert "{{" not in system.replace("{{unknown_thing}}", "")


def test_placeholder_values() -> None:
    agent = AgentConfig(agent_id="a", model="m", allowed_tools=["search_knowledge"])
    at = datetime(2026, 1, 2, 3, 4, tzinfo=UTC)
    values = placeholder_values(agent, "你好 请问", now=at)
    assert values["current_time"] == "2026-01-02 03:04 UTC"
    assert values["language"] == "Chinese"
    assert values["knowledge_bases"] == "all knowledge bases of the workspace"
    assert values["web_search_status"] == "disabled"
    assert message_language("こんにちは、元気") == "Japanese"
    assert message_language("안녕하세요") == "Korean"
    assert message_language("Привет") == "Russian"
    assert message_language("Comment est-ce que je peux annuler?") == "French"
    assert message_language("How do I cancel the plan?") == "English"
    assert message_language("Refund 42") == "English"
    pure = AgentConfig(agent_id="a", model="m", allowed_tools=[])
    assert placeholder_values(pure, "hi")["knowledge_bases"] == "none"
    assert render_placeholders("{{a}} {{b}}", {"a": "1"}) == "1 {{b}}"
