"""What knowledge answers about its documents: the rows its store reads and the shapes its
internal routes return to tool-exec's knowledge tools (one definition for both sides)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class DocumentInfo:
    """A document's metadata."""

    id: str
    knowledge_base_id: str
    title: str
    file_name: str
    status: str
    chunk_count: int
    embedded_count: int
    error: str | None
    tags: tuple[str, ...] = ()
    """Labels an ``@tag`` mention narrows a search to (SPEC A-11)."""


@dataclass(frozen=True, kw_only=True)
class ChunkRow:
    """A chunk in reading order."""

    id: str
    position: int
    content: str
