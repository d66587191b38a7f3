"""Bounds on what one uploaded document may cost to ingest (invariant 6).

A small upload can expand enormously: an xlsx or docx is a zip whose members inflate
hundreds of times (a "zip bomb"), a spreadsheet of 2 MB can hold 400,000 rows, a PDF
thousands of pages. Each bound is checked as early as it can be (the archive's declared
sizes before anything is inflated, rows while they are read, pages before any is
extracted) and a document over one is refused with :class:`DocumentTooLarge`, whose text
names the bound; the ingestion loop stores it as the document's error.
"""

from __future__ import annotations

import io
import zipfile
from dataclasses import dataclass


class DocumentRefused(ValueError):
    """The document cannot be ingested (unsupported type, unreadable, or over a bound)."""


class DocumentTooLarge(DocumentRefused):
    """The document exceeds one of the :class:`IngestionLimits`."""


@dataclass(frozen=True, kw_only=True)
class IngestionLimits:
    """Per-document and per-tenant bounds of ingestion (settings ``WEFT_INGESTION_*``)."""

    max_decompressed_bytes: int = 64 * 1024 * 1024
    """What the members of a zip-based file (xlsx, docx) may inflate to, together."""
    max_compression_ratio: int = 200
    """Inflated size over stored size of one zip member; above it the file is a bomb."""
    max_rows: int = 100_000
    """Rows of a table (all sheets of a workbook together)."""
    max_pages: int = 2_000
    """Pages of a PDF."""
    max_text_chars: int = 50_000_000
    """Characters of text extracted from one document."""
    max_chunks: int = 20_000
    """Chunks of one document."""
    tenant_max_chunks: int = 2_000_000
    """Chunks of every document of one tenant together."""


DEFAULT_LIMITS = IngestionLimits()


def check_archive(file_name: str, content: bytes, limits: IngestionLimits) -> None:
    """Refuse a zip-based file whose members would inflate past the bounds, reading only
    its directory (``zipfile`` then never inflates a member past its declared size)."""
    try:
        members = zipfile.ZipFile(io.BytesIO(content)).infolist()
    except (zipfile.BadZipFile, ValueError) as exc:
        raise DocumentRefused(f"{file_name}: not a readable zip archive ({exc})") from exc
    total = sum(m.file_size for m in members)
    if total > limits.max_decompressed_bytes:
        raise DocumentTooLarge(
            f"{file_name}: decompresses to {_mb(total)}, over the limit of "
            f"{_mb(limits.max_decompressed_bytes)} per document"
        )
    for member in members:
        stored = max(member.compress_size, 1)
        if (
            member.file_size > 1024 * 1024
            and member.file_size / stored > limits.max_compression_ratio
        ):
            raise DocumentTooLarge(
                f"{file_name}: member {member.filename!r} inflates {member.file_size // stored}"
                f" times (limit {limits.max_compression_ratio}): refused as a zip bomb"
            )


def check_sheet_rows(file_name: str, content: bytes, limits: IngestionLimits) -> None:
    """Refuse a workbook whose sheets declare more rows than ``limits.max_rows``, counting
    ``<row`` tags in the inflated sheet XML as it streams by (fast, C-level) instead of
    parsing the rows: a 400,000-row sheet is refused in a fraction of a second rather than
    after the parser has built 100,000 rows. Formatted but empty rows count here too."""
    book = zipfile.ZipFile(io.BytesIO(content))
    sheets = [m for m in book.infolist() if m.filename.startswith("xl/worksheets/")]
    rows = 0
    for member in sheets:
        tail = b""
        with book.open(member) as stream:
            while chunk := stream.read(1024 * 1024):
                window = tail + chunk
                rows += window.count(b"<row ") + window.count(b"<row>") - _counted(tail)
                tail = window[-5:]
                if rows > limits.max_rows + len(sheets):  # a header row per sheet
                    raise too_many_rows(file_name, limits)


def _counted(tail: bytes) -> int:
    """Tags already counted in ``tail`` (the end of the previous window)."""
    return tail.count(b"<row ") + tail.count(b"<row>")


def too_many_rows(file_name: str, limits: IngestionLimits) -> DocumentTooLarge:
    """The refusal of a table with more rows than ``limits.max_rows``."""
    return DocumentTooLarge(
        f"{file_name}: more than {limits.max_rows:,} rows, the limit per document"
    )


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB"
