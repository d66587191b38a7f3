"""Token usage: rough estimates (four characters a token) unless the step overrides them."""

from __future__ import annotations

import json

from weft_scripted_llm.openai_schema import ChatCompletionRequest
from weft_scripted_llm.reply import Reply
from weft_scripted_llm.tokens import estimate_tokens


def prompt_tokens(request: ChatCompletionRequest) -> int:
    """len(JSON of the messages) / 4."""
    messages = [m.model_dump(mode="json", exclude_none=True) for m in request.messages]
    return estimate_tokens(json.dumps(messages, ensure_ascii=False))


def completion_output(reply: Reply) -> str:
    """Everything the model "generated": reasoning, content and tool calls."""
    calls = "".join(f"{c.name}{c.arguments}" for c in reply.tool_calls)
    return f"{reply.reasoning_text or ''}{reply.content_text or ''}{calls}"


def usage_for(request: ChatCompletionRequest, reply: Reply) -> dict[str, int]:
    """The `usage` object of the response."""
    override = reply.usage
    prompt = prompt_tokens(request)
    completion = estimate_tokens(completion_output(reply))
    if override is not None:
        prompt = override.prompt_tokens if override.prompt_tokens is not None else prompt
        completion = (
            override.completion_tokens if override.completion_tokens is not None else completion
        )
    total = prompt + completion
    if override is not None and override.total_tokens is not None:
        total = override.total_tokens
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}
