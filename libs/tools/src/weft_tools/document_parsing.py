"""Text out of uploaded files: txt, md, csv, xlsx, pdf (maintained parsers: csv module,
openpyxl, pypdf).

Tables become one line per row (``column: value; ...``) so keyword and semantic search
find rows; the original bytes stay stored for ``data_analysis``.
"""

from __future__ import annotations

import io

from pypdf import PdfReader
from weft_contracts.text import clean_text

from weft_tools.ingestion_limits import (
    DEFAULT_LIMITS,
    DocumentRefused,
    DocumentTooLarge,
    IngestionLimits,
)
from weft_tools.tabular import EmptyDataset, read_table

TEXT_TYPES = (".txt", ".md", ".markdown", ".text")
TABLE_TYPES = (".csv", ".tsv", ".xlsx", ".xlsm")
SUPPORTED = (*TEXT_TYPES, *TABLE_TYPES, ".pdf")


class UnsupportedDocument(DocumentRefused):
    """The file type cannot be ingested, or the file is unreadable."""


def is_table(file_name: str) -> bool:
    """Whether ``file_name`` is a CSV/Excel file (usable by data_schema/data_analysis)."""
    return file_name.lower().endswith(TABLE_TYPES)


def extract_text(file_name: str, content: bytes, limits: IngestionLimits = DEFAULT_LIMITS) -> str:
    """The text of the file; raise UnsupportedDocument for other types or broken files,
    DocumentTooLarge past ``limits``.

    NUL characters (binary junk in a text file, PDF extraction artefacts) are dropped:
    PostgreSQL cannot store them, and a document is worth ingesting without them.
    """
    text = _extract(file_name, content, limits)
    if len(text) > limits.max_text_chars:
        raise _too_much_text(file_name, len(text), limits)
    return clean_text(text)


def _too_much_text(file_name: str, size: int, limits: IngestionLimits) -> DocumentTooLarge:
    return DocumentTooLarge(
        f"{file_name}: more than {size:,} characters of text, over the limit of "
        f"{limits.max_text_chars:,} per document"
    )


def _extract(file_name: str, content: bytes, limits: IngestionLimits) -> str:
    lower = file_name.lower()
    if lower.endswith(TEXT_TYPES):
        return content.decode("utf-8-sig", errors="replace")
    if lower.endswith(".pdf"):
        return _pdf(file_name, content, limits)
    if lower.endswith(TABLE_TYPES):
        return _table_text(file_name, content, limits)
    raise UnsupportedDocument(f"{file_name}: unsupported type; supported: {', '.join(SUPPORTED)}")


def _pdf(file_name: str, content: bytes, limits: IngestionLimits) -> str:
    try:
        reader = PdfReader(io.BytesIO(content))
        count = len(reader.pages)
    except Exception as exc:  # pypdf raises many types for damaged files
        raise UnsupportedDocument(f"unreadable PDF: {exc}") from exc
    if count > limits.max_pages:
        raise DocumentTooLarge(
            f"{file_name}: {count:,} pages, over the limit of {limits.max_pages:,} per document"
        )
    pages: list[str] = []
    extracted = 0
    try:
        for page in reader.pages:
            text = (page.extract_text() or "").strip()
            extracted += len(text)
            if extracted > limits.max_text_chars:  # stop extracting at the bound
                raise _too_much_text(file_name, extracted, limits)
            pages.append(text)
    except DocumentRefused:
        raise
    except Exception as exc:
        raise UnsupportedDocument(f"unreadable PDF: {exc}") from exc
    return "\n\n".join(p for p in pages if p)


def _table_text(file_name: str, content: bytes, limits: IngestionLimits) -> str:
    try:
        table = read_table(file_name, content, limits)
    except EmptyDataset as exc:
        raise UnsupportedDocument(f"{file_name}: {exc}") from exc
    except DocumentRefused:
        raise
    except Exception as exc:  # openpyxl/zipfile raise many types for damaged files
        raise UnsupportedDocument(f"{file_name}: unreadable table: {exc}") from exc
    lines = [f"Columns: {', '.join(table.columns)}"]
    for row in table.rows:
        cells = [
            f"{c}: {v}" for c, v in zip(table.columns, row, strict=True) if v not in (None, "")
        ]
        lines.append("; ".join(cells))
    return "\n".join(lines)
