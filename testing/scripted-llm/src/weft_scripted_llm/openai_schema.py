"""The parts of OpenAI request bodies the test double reads (everything else is kept)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class ChatMessage(_Lenient):
    """One message; `content` is a string, a list of content parts or null."""

    role: str
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_call_id: str | None = None
    tool_calls: list[dict[str, Any]] | None = None

    def text(self) -> str:
        """The text of the message, content parts joined."""
        if isinstance(self.content, str):
            return self.content
        if not self.content:
            return ""
        return "".join(str(p.get("text", "")) for p in self.content if isinstance(p, dict))


class StreamOptions(_Lenient):
    include_usage: bool = False


class ToolFunction(_Lenient):
    name: str


class ToolDefinition(_Lenient):
    type: str = "function"
    function: ToolFunction | None = None


class ChatCompletionRequest(_Lenient):
    """A Chat Completions request body."""

    model: str = ""
    messages: list[ChatMessage] = Field(default_factory=list)
    stream: bool = False
    stream_options: StreamOptions | None = None
    tools: list[ToolDefinition] | None = None
    user: str | None = None

    @property
    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def tool_names(self) -> set[str]:
        """The names of the function tools offered."""
        return {t.function.name for t in self.tools or [] if t.function is not None}


class EmbeddingRequest(_Lenient):
    """An Embeddings request body; `input` is text(s) or token id array(s)."""

    model: str = ""
    input: str | list[str] | list[int] | list[list[int]]
    dimensions: int | None = Field(default=None, ge=1, le=8192)
    encoding_format: str = "float"
