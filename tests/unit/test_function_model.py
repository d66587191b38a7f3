"""The in-process model double of the test kit (weft_testkit.function_model)."""

from __future__ import annotations

import pytest
from weft_llm import LLMCallError, LLMRequest, LLMResponse, TransientLLMError
from weft_testkit.function_model import (
    FunctionModel,
    ModelCall,
    Reply,
    answer,
    queued,
    replies,
    tool_calls,
)


class _Sink:
    def __init__(self) -> None:
        self.reasoning: list[str] = []
        self.content: list[str] = []

    async def on_reasoning(self, delta: str) -> None:
        self.reasoning.append(delta)

    async def on_content(self, delta: str) -> None:
        self.content.append(delta)


def _request(text: str) -> LLMRequest:
    return LLMRequest(model="m", messages=[{"role": "user", "content": text}])


async def test_a_reply_streams_in_pieces_and_is_returned_whole() -> None:
    model = replies(answer("Within thirty days.", reasoning="Check section 4."), chunk_chars=5)
    sink = _Sink()
    response = await model.stream(_request("refunds?"), sink)
    assert response.content == "Within thirty days."
    assert len(sink.content) == 4 and "".join(sink.content) == response.content
    assert "".join(sink.reasoning) == "Check section 4."
    assert model.requests[0].messages[-1]["content"] == "refunds?"


async def test_the_function_sees_each_call_and_may_raise() -> None:
    def reply(call: ModelCall) -> LLMResponse | BaseException:
        if call.index == 0:
            return TransientLLMError("overloaded")
        return answer(f"echo {call.last_message['content']}")

    model = FunctionModel(reply=reply)
    sink = _Sink()
    with pytest.raises(LLMCallError):
        await model.stream(_request("a"), sink)
    assert sink.content == []  # nothing streamed before the error
    assert (await model.stream(_request("b"), sink)).content == "echo b"


async def test_tool_calls_carry_json_or_raw_arguments() -> None:
    response = tool_calls(("search_knowledge", {"query": "x"}), ("thinking", "{broken"))
    assert [c.name for c in response.tool_calls] == ["search_knowledge", "thinking"]
    assert response.tool_calls[0].arguments == '{"query": "x"}'
    assert response.tool_calls[1].arguments == "{broken"
    assert response.finish_reason == "tool_calls"


async def test_asking_more_than_scripted_fails_clearly() -> None:
    model = replies(answer("one"))
    await model.stream(_request("a"), _Sink())
    with pytest.raises(AssertionError, match="asked 2 times, scripted for 1"):
        await model.stream(_request("b"), _Sink())


async def test_a_queued_model_answers_from_a_list_the_test_fills_later() -> None:
    pending: list[Reply] = []
    model = queued(pending)
    pending += [answer("first"), TransientLLMError("down")]
    assert (await model.stream(_request("a"), _Sink())).content == "first"
    with pytest.raises(LLMCallError):
        await model.stream(_request("b"), _Sink())
    assert pending == [] and len(model.requests) == 2
    with pytest.raises(AssertionError, match="asked 3 times, nothing queued"):
        await model.stream(_request("c"), _Sink())
    pending.append(answer("late"))
    assert (await model.stream(_request("d"), _Sink())).content == "late"
