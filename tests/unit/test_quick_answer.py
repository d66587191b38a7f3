"""Quick-answer's pipeline (SPEC C-04): what the query rewrite reads, what it keeps, who
gets it, and which retrieval calls follow.

The end-to-end behaviour (a follow-up searched with the model's rewrite, the question as
written when the rewrite fails, the web searched beside the knowledge base) is in
tests/e2e/test_engine_control.py.
"""

from __future__ import annotations

import json

from weft_agent_config.definition import AgentDefinition
from weft_agent_config.resolver import runtime_config
from weft_context.images import content_text
from weft_contracts import AgentConfig
from weft_engine.quick_answer import (
    MESSAGE_EXCERPT_CHARS,
    conversation_excerpt,
    retrieval_calls,
    retrieval_tools,
    rewrite_request,
    standalone_query,
)
from weft_engine.state import TurnState
from weft_llm import FinishReason, LLMResponse
from weft_scripted_llm.openai_schema import ChatCompletionRequest
from weft_scripted_llm.policy import DemoPolicy

from tests.unit.turn_states import with_history


def _state(turns: int, *, history_turns: int = 5) -> TurnState:
    agent = AgentConfig(
        agent_id="a", model="m", mode="quick-answer", history_turns=history_turns,
        query_rewrite=True,
    )  # fmt: skip
    return with_history(agent, turns, "and the second one?")


def _response(content: str, finish_reason: FinishReason = "stop") -> LLMResponse:
    return LLMResponse(content=content, reasoning="", tool_calls=[], finish_reason=finish_reason)


def test_the_rewrite_reads_the_last_turns_text_not_tool_traffic() -> None:
    excerpt = conversation_excerpt(_state(4), turns=2)
    assert excerpt == [("user", "q2"), ("assistant", "a2"), ("user", "q3"), ("assistant", "a3")]
    assert conversation_excerpt(_state(4), turns=9)[0] == ("user", "q0")


def test_long_messages_are_cut_for_the_rewrite() -> None:
    state = _state(1)
    long = {"role": "assistant", "content": "x" * (MESSAGE_EXCERPT_CHARS + 500)}
    state = state.model_copy(update={"messages": [*state.messages[:3], long, state.messages[-1]]})
    assert [len(text) for _, text in conversation_excerpt(state, turns=1)] == [
        2, MESSAGE_EXCERPT_CHARS,
    ]  # fmt: skip


def test_no_history_no_rewrite_call() -> None:
    assert rewrite_request(_state(0), "and the second one?") is None


def test_the_request_holds_the_conversation_then_the_question() -> None:
    request = rewrite_request(_state(2, history_turns=1), "and the second one?")
    assert request is not None
    assert request.model == "m" and request.temperature == 0 and not request.tools
    system, user = request.messages
    assert system["role"] == "system" and "standalone search query" in content_text(
        system["content"]
    )
    assert user["content"] == (
        "<conversation>\nuser: q1\nassistant: a1\n</conversation>\n"
        "<question>and the second one?</question>"
    )
    # history_turns 0 (the agent keeps no history) still reads the previous turn
    assert rewrite_request(_state(2, history_turns=0), "q") is not None


def test_what_the_model_returns_is_cleaned_or_set_aside() -> None:
    question = "and the second one?"
    assert standalone_query(_response('"Price of the Pro plan?"\n'), question) == (
        "Price of the Pro plan?"
    )
    assert standalone_query(_response("Pro plan price\nBecause..."), question) == "Pro plan price"
    assert standalone_query(_response("  \n"), question) == question
    assert standalone_query(_response("Pro plan", "length"), question) == question
    assert standalone_query(_response("y" * 1001), question) == question


def test_only_quick_answer_agents_rewrite_and_it_can_be_switched_off() -> None:
    def resolved(**fields: object) -> bool:
        agent = AgentDefinition.model_validate({"name": "a", **fields})
        config = runtime_config("a", agent, default_model="m", knowledge_base_ids=[])
        return config.query_rewrite

    assert resolved(mode="quick-answer")
    assert not resolved(mode="quick-answer", query_rewrite_enabled=False)
    assert not resolved(mode="smart-reasoning")


def test_the_demo_double_answers_a_rewrite_with_the_question_itself() -> None:
    request = rewrite_request(_state(1), "and the second one?")
    assert request is not None
    body = ChatCompletionRequest.model_validate(
        {"model": "m", "messages": request.messages, "stream": True}
    )
    reply = DemoPolicy(words_per_chunk=3).reply(body, None)
    assert "".join(reply.content) == "and the second one?"


def test_the_retrieval_calls_follow_the_agents_tools() -> None:
    def calls(tools: list[str], results: int = 5) -> list[tuple[str, dict[str, object]]]:
        agent = AgentConfig(
            agent_id="a", model="m", allowed_tools=tools, web_search_max_results=results
        )
        return [(c.name, json.loads(c.arguments)) for c in retrieval_calls(agent, "q")]

    assert calls(["search_knowledge", "read_document"]) == [("search_knowledge", {"query": "q"})]
    assert calls(["web_fetch", "web_search", "search_knowledge"], 8) == [
        ("search_knowledge", {"query": "q"}),
        ("web_search", {"query": "q", "count": 8}),
    ]
    assert calls(["web_search"], 50) == [("web_search", {"query": "q", "count": 20})]
    assert calls(["read_document"]) == []
    assert not retrieval_tools(AgentConfig(agent_id="a", model="m", allowed_tools=["web_fetch"]))


def test_agent_config_carries_the_web_result_count() -> None:
    def count(**fields: object) -> int:
        agent = AgentDefinition.model_validate({"name": "a", "mode": "quick-answer", **fields})
        return runtime_config(
            "a", agent, default_model="m", knowledge_base_ids=[]
        ).web_search_max_results

    assert count() == 5
    assert count(web_search_max_results=12) == 12
