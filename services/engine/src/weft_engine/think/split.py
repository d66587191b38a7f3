"""ThinkSplitter: routes ``<think>...</think>`` blocks inside streamed content to thoughts.

Some models put their reasoning in the content between think tags instead of a separate
``reasoning_content`` field (SPEC E-08). Tags may be split across chunks, so the splitter
holds back a possible partial tag until the next chunk tells what it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

OPEN, CLOSE = "<think>", "</think>"
THOUGHT_SEPARATOR = "\n\n"
"""Between thought parts of different origin (``reasoning_content``, ``<think>`` blocks)."""


@dataclass
class Split:
    """What one chunk of content contained."""

    thought: str = ""
    content: str = ""


class ThinkSplitter:
    """Stateful splitter for one streamed completion."""

    def __init__(self) -> None:
        self._inside = False
        self._pending = ""

    def feed(self, chunk: str) -> Split:
        """Split ``chunk``; text that may start a tag is kept for the next call."""
        text = self._pending + chunk
        self._pending = ""
        out = Split()
        while text:
            tag = CLOSE if self._inside else OPEN
            pos = text.find(tag)
            if pos >= 0:
                self._add(out, text[:pos])
                self._inside = not self._inside
                text = text[pos + len(tag) :]
                continue
            keep = _partial_tag_suffix(text, tag)
            self._add(out, text[: len(text) - keep])
            self._pending = text[len(text) - keep :]
            break
        return out

    def flush(self) -> Split:
        """Whatever was held back, at the end of the stream."""
        out = Split()
        self._add(out, self._pending)
        self._pending = ""
        return out

    def _add(self, out: Split, text: str) -> None:
        if self._inside:
            out.thought += text
        else:
            out.content += text


class ThoughtJoiner:
    """The thought text of one completion, from its two origins: the ``reasoning_content``
    stream and the ``<think>`` blocks of the content. A blank line goes where the origin
    changes, so the two never run together into one sentence. The streamed thought events
    and the stored step both join through this, so they read the same."""

    def __init__(self) -> None:
        self.text = ""
        self._origin: str | None = None

    def add(self, origin: Literal["reasoning", "think"], delta: str) -> str:
        """``delta`` as it extends the text (with the separator when the origin changes)."""
        if not delta:
            return ""
        if self.text and origin != self._origin:
            delta = THOUGHT_SEPARATOR + delta
        self._origin = origin
        self.text += delta
        return delta


def _partial_tag_suffix(text: str, tag: str) -> int:
    """Length of the longest suffix of ``text`` that is a proper prefix of ``tag``."""
    for size in range(min(len(tag) - 1, len(text)), 0, -1):
        if text.endswith(tag[:size]):
            return size
    return 0
