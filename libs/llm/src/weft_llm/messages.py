"""Chat messages in the OpenAI wire format, typed.

They stay plain dicts at run time (what the engine stores in a turn's state and what the
client posts as JSON, with no conversion per round); the type checker holds every builder
and reader to the shapes a provider accepts, and pydantic validates them where messages
come in from storage (:data:`CHAT_MESSAGES`).
"""

# No ``from __future__ import annotations``: on Python 3.11 a TypedDict only sees
# NotRequired in evaluated annotations (``__optional_keys__``). typing_extensions, not
# typing: pydantic refuses to validate ``typing.TypedDict`` before Python 3.12.
from typing import Annotated, Literal, NotRequired

from pydantic import Field, TypeAdapter
from typing_extensions import TypedDict


class TextPart(TypedDict):
    """A text part of multimodal content."""

    type: Literal["text"]
    text: str


class ImageURL(TypedDict):
    """Where an image part's image is: an https URL or a ``data:`` URL."""

    url: str
    detail: NotRequired[Literal["auto", "low", "high"]]


class ImagePart(TypedDict):
    """An image part of multimodal content (SPEC E-26)."""

    type: Literal["image_url"]
    image_url: ImageURL


ContentPart = TextPart | ImagePart
"""One part of a user message's multimodal content."""


class FunctionCall(TypedDict):
    """The function a tool call names, with its arguments as the model wrote them."""

    name: str
    arguments: str


class ToolCall(TypedDict):
    """A tool call of an assistant message."""

    id: str
    type: Literal["function"]
    function: FunctionCall


class SystemMessage(TypedDict):
    """The agent's instructions."""

    role: Literal["system"]
    content: str


class UserMessage(TypedDict):
    """What the user said: text, or text and images as parts."""

    role: Literal["user"]
    content: str | list[ContentPart]


class AssistantMessage(TypedDict):
    """What the model answered: text, tool calls, or both."""

    role: Literal["assistant"]
    content: str | None
    tool_calls: NotRequired[list[ToolCall]]


class ToolMessage(TypedDict):
    """A tool's result, answering the call ``tool_call_id``."""

    role: Literal["tool"]
    tool_call_id: str
    content: str


ChatMessage = Annotated[
    SystemMessage | UserMessage | AssistantMessage | ToolMessage, Field(discriminator="role")
]
"""One message of a chat completion request; pydantic picks the shape by ``role``."""

CHAT_MESSAGES: TypeAdapter[list[ChatMessage]] = TypeAdapter(list[ChatMessage])
"""Validates messages that come from storage (a session's history, a JSON body) once, where
they enter, so a malformed one is a clear error there rather than a KeyError later."""
