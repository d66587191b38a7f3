"""An MCP ``CallToolResult`` as a Weft tool outcome (SPEC T-19).

Text blocks are joined; structured content is added as compact JSON (and kept under
``data["structured"]``); an image becomes a line naming it in the output and, bounded,
an entry of ``data["images"]``; an embedded resource's text is included; ``isError``
makes the outcome a failure whose text the model reads. Output truncation is the
registry's (SPEC T-03).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from mcp import types
from weft_tool_catalog.registry import ToolOutcome, dumps

MAX_IMAGE_BYTES = 1_000_000
MAX_IMAGES = 4
MAX_STRUCTURED_CHARS = 200_000
"""Structured content kept under ``data`` (the output carries it too, truncated)."""


def _decoded_size(data: str) -> int | None:
    try:
        return len(base64.b64decode(data, validate=True))
    except (binascii.Error, ValueError):
        return None


def _image_line(block: types.ImageContent, images: list[dict[str, str]]) -> str:
    size = _decoded_size(block.data)
    mime = block.mimeType[:100]
    if size is None:
        return f"[image {mime}: not valid base64, dropped]"
    line = f"[image {mime}, {size} bytes]"
    if size > MAX_IMAGE_BYTES:
        return f"{line} (dropped: larger than {MAX_IMAGE_BYTES} bytes)"
    if len(images) >= MAX_IMAGES:
        return f"{line} (dropped: more than {MAX_IMAGES} images)"
    images.append({"mime_type": mime, "data": block.data})
    return line


def _block_text(block: types.ContentBlock, images: list[dict[str, str]]) -> str:
    match block:
        case types.TextContent():
            return block.text
        case types.ImageContent():
            return _image_line(block, images)
        case types.AudioContent():
            return f"[audio {block.mimeType[:100]}: not shown]"
        case types.EmbeddedResource(resource=types.TextResourceContents() as res):
            return f"[resource {str(res.uri)[:200]}]\n{res.text}"
        case types.EmbeddedResource(resource=res):
            return f"[resource {str(res.uri)[:200]}: binary, not shown]"
        case types.ResourceLink():
            return f"[resource link {str(block.uri)[:200]}]"
    return ""


def outcome_of(result: types.CallToolResult) -> ToolOutcome:
    """The outcome the model reads for ``result``."""
    images: list[dict[str, str]] = []
    parts = [_block_text(block, images) for block in result.content]
    data: dict[str, Any] = {}
    if result.structuredContent is not None:
        structured = dumps(result.structuredContent)
        # Servers also send structured content as text (the specification asks them
        # to, for older clients): add it only when no text block carries it.
        if not any(isinstance(block, types.TextContent) for block in result.content):
            parts.append(structured)
        if len(structured) <= MAX_STRUCTURED_CHARS:
            data["structured"] = result.structuredContent
    if images:
        data["images"] = images
    text = "\n".join(part for part in parts if part)
    if result.isError:
        return ToolOutcome(success=False, error=text or "the tool reported an error", data=data)
    return ToolOutcome(success=True, output=text, data=data)
