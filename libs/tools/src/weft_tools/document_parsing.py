"""Text out of uploaded files: txt, md, csv, xlsx, pdf (maintained parsers: csv module,
openpyxl, pypdf).

Tables become one line per row (``column: value; ...``) so keyword and semantic search
find rows; the original bytes stay stored for ``data_analysis``.
"""

from __future__ import annotations

import io

from pypdf import PdfReader
from weft_contracts.text import clean_text

from weft_tools.tabular import EmptyDataset, read_table

TEXT_TYPES = (".txt", ".md", ".markdown", ".text")
TABLE_TYPES = (".csv", ".tsv", ".xlsx", ".xlsm")
SUPPORTED = (*TEXT_TYPES, *TABLE_TYPES, ".pdf")


class UnsupportedDocument(ValueError):
    """The file type cannot be ingested, or the file is unreadable."""


def is_table(file_name: str) -> bool:
    """Whether ``file_name`` is a CSV/Excel file (usable by data_schema/data_analysis)."""
    return file_name.lower().endswith(TABLE_TYPES)


def extract_text(file_name: str, content: bytes) -> str:
    """The text of the file; raise UnsupportedDocument for other types or broken files.

    NUL characters (binary junk in a text file, PDF extraction artefacts) are dropped:
    PostgreSQL cannot store them, and a document is worth ingesting without them.
    """
    return clean_text(_extract(file_name, content))


def _extract(file_name: str, content: bytes) -> str:
    lower = file_name.lower()
    if lower.endswith(TEXT_TYPES):
        return content.decode("utf-8-sig", errors="replace")
    if lower.endswith(".pdf"):
        return _pdf(content)
    if lower.endswith(TABLE_TYPES):
        return _table_text(file_name, content)
    raise UnsupportedDocument(f"{file_name}: unsupported type; supported: {', '.join(SUPPORTED)}")


def _pdf(content: bytes) -> str:
    try:
        reader = PdfReader(io.BytesIO(content))
        pages = [page.extract_text() or "" for page in reader.pages]
    except Exception as exc:  # pypdf raises many types for damaged files
        raise UnsupportedDocument(f"unreadable PDF: {exc}") from exc
    return "\n\n".join(p.strip() for p in pages if p.strip())


def _table_text(file_name: str, content: bytes) -> str:
    try:
        table = read_table(file_name, content)
    except EmptyDataset as exc:
        raise UnsupportedDocument(f"{file_name}: {exc}") from exc
    lines = [f"Columns: {', '.join(table.columns)}"]
    for row in table.rows:
        cells = [
            f"{c}: {v}" for c, v in zip(table.columns, row, strict=True) if v not in (None, "")
        ]
        lines.append("; ".join(cells))
    return "\n".join(lines)
