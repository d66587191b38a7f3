"""File paths read and written during the summarised part, carried into the summary so the
agent still knows which files it touched (SPEC M-05; fileops.go of the reference)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from weft_llm import ChatMessage

READ_TOOLS = frozenset({"read_file", "read_sandbox_file", "view_file", "cat_file"})
WRITE_TOOLS = frozenset(
    {"write_file", "write_sandbox_file", "edit_file", "create_file", "append_file"}
)
PATH_KEYS = ("path", "file_path", "filename", "file", "target_path")
_BLOCK = re.compile(r"<(read-files|modified-files)>\n?(.*?)\n?</\1>", re.DOTALL)


@dataclass
class FileOps:
    """Paths read and paths written, in first-seen order."""

    read: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)

    def add(self, kind: str, path: str) -> None:
        """Record one path (``kind`` is "read" or "modified")."""
        bucket = self.modified if kind == "modified" else self.read
        if path and path not in bucket:
            bucket.append(path)

    def merge(self, other: FileOps) -> None:
        """Add ``other``'s paths after ours."""
        for path in other.read:
            self.add("read", path)
        for path in other.modified:
            self.add("modified", path)

    def render(self) -> str:
        """The blocks appended to a summary (empty when no file was touched)."""
        blocks = []
        if self.read:
            blocks.append("<read-files>\n" + "\n".join(self.read) + "\n</read-files>")
        if self.modified:
            blocks.append("<modified-files>\n" + "\n".join(self.modified) + "\n</modified-files>")
        return "\n".join(blocks)


def extract_file_ops(messages: Iterable[ChatMessage]) -> FileOps:
    """Paths from the tool calls of ``messages``."""
    ops = FileOps()
    for message in messages:
        if message["role"] != "assistant":
            continue
        for call in message.get("tool_calls", []):
            fn = call["function"]
            name = fn["name"]
            kind = "read" if name in READ_TOOLS else "modified" if name in WRITE_TOOLS else None
            if kind is None:
                continue
            path = _path(fn["arguments"])
            if path:
                ops.add(kind, path)
    return ops


def parse_file_ops(summary: str) -> FileOps:
    """The file lists a previous summary carried."""
    ops = FileOps()
    for kind, body in _BLOCK.findall(summary):
        for line in body.splitlines():
            ops.add("read" if kind == "read-files" else "modified", line.strip())
    return ops


def strip_file_ops(summary: str) -> str:
    """A summary without its file blocks (they are re-rendered after merging)."""
    return _BLOCK.sub("", summary).strip()


def _path(arguments: Any) -> str | None:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return None
    if not isinstance(arguments, dict):
        return None
    for key in PATH_KEYS:
        value = arguments.get(key)
        if isinstance(value, str) and value:
            return value
    return None
