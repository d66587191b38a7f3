"""A clicked knowledge suggestion's source, given to the model before it answers (SPEC Q-03).

The gateway resolved the source from the stored suggestion set and retrieved its text
within the caller's knowledge scope (``ChatRequestedData.question_origin``); the engine
appends it to this turn's user message, like the runtime context: the model reads it on
every round of the turn, and it is not stored as the user's words."""

from __future__ import annotations

from weft_contracts import QuestionOrigin
from weft_llm import ChatMessage

from weft_engine.vision import append_text


def source_context(origin: QuestionOrigin) -> str:
    """The source as the model reads it, or nothing for a question without one."""
    if origin.source != "knowledge" or not origin.excerpt:
        return ""
    return (
        f'<question_source document_id="{origin.document_id or ""}" '
        f'chunk_id="{origin.chunk_id or ""}" title="{origin.title}">\n'
        "The user clicked a suggested question about this source; start from it and cite "
        f"it when it answers the question.\n{origin.excerpt}\n</question_source>"
    )


def with_question_source(
    messages: list[ChatMessage], origin: QuestionOrigin | None
) -> list[ChatMessage]:
    """``messages`` whose last user message carries the clicked question's source."""
    text = source_context(origin) if origin is not None else ""
    if not text:
        return messages
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message["role"] == "user":
            return [*messages[:index], append_text(message, text), *messages[index + 1 :]]
    return messages
