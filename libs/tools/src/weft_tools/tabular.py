"""Read CSV and Excel bytes into one table of rows (SPEC T-12).

Excel sheets are merged into one table with a ``__sheet_name`` column; empty sheets are
ignored and a file whose sheets are all empty is an explicit error. Column names are
normalised (lower case, ``_`` for anything not a letter or digit, unique, never empty) so
the model can write them in SQL without quoting.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from typing import Any

from openpyxl import load_workbook

from weft_tools.ingestion_limits import (
    IngestionLimits,
    check_archive,
    check_sheet_rows,
    too_many_rows,
)

SHEET_COLUMN = "__sheet_name"
ANALYSIS_LIMITS = IngestionLimits(max_rows=1_000_000, max_decompressed_bytes=256 * 1024 * 1024)
"""Bounds of a table loaded for data_schema / data_analysis (looser than ingestion's: the
table is queried, not turned into chunks)."""
_NOT_WORD = re.compile(r"[^0-9a-z]+")


class EmptyDataset(ValueError):
    """The file has no rows in any sheet."""


@dataclass(frozen=True, kw_only=True)
class Table:
    """Column names and rows, every cell a string or None."""

    columns: list[str]
    rows: list[list[Any]]


def normalise_columns(names: list[Any]) -> list[str]:
    """Unique SQL-friendly names: ``"Unit Price (€)"`` -> ``unit_price``."""
    result: list[str] = []
    for i, raw in enumerate(names, start=1):
        name = _NOT_WORD.sub("_", str(raw or "").strip().lower()).strip("_")
        if not name:
            name = f"column_{i}"
        if name[0].isdigit():
            name = f"c_{name}"
        base, n = name, 2
        while name in result:
            name, n = f"{base}_{n}", n + 1
        result.append(name)
    return result


def read_table(file_name: str, content: bytes, limits: IngestionLimits = ANALYSIS_LIMITS) -> Table:
    """The rows of a ``.csv``/``.tsv`` or ``.xlsx`` file; raise EmptyDataset when empty,
    DocumentTooLarge past ``limits`` (inflated size, rows)."""
    lower = file_name.lower()
    if lower.endswith((".xlsx", ".xlsm")):
        check_archive(file_name, content, limits)
        check_sheet_rows(file_name, content, limits)
        return _excel(file_name, content, limits)
    if lower.endswith((".csv", ".tsv", ".txt")):
        return _csv(file_name, content, limits)
    raise ValueError(f"unsupported data file {file_name!r}; expected .csv or .xlsx")


def _csv(file_name: str, content: bytes, limits: IngestionLimits) -> Table:
    text = content.decode("utf-8-sig", errors="replace")
    try:
        dialect: Any = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    rows: list[list[Any]] = []
    for row in csv.reader(io.StringIO(text), dialect):
        if any(c.strip() for c in row):
            rows.append(row)
            if len(rows) > limits.max_rows + 1:  # the header is not a row of data
                raise too_many_rows(file_name, limits)
    if len(rows) < 1:
        raise EmptyDataset("the file has no rows")
    return _table(rows[0], rows[1:])


def _excel(file_name: str, content: bytes, limits: IngestionLimits) -> Table:
    book = load_workbook(io.BytesIO(content), read_only=True, data_only=True)
    sheets: list[tuple[str, Table]] = []
    counted = 0
    try:
        for sheet in book.worksheets:
            rows: list[list[Any]] = []
            for values in sheet.iter_rows(values_only=True):
                if any(c is not None and str(c).strip() for c in values):
                    rows.append(list(values))
                    counted += 1
                    if counted > limits.max_rows + len(sheets) + 1:  # headers aside
                        raise too_many_rows(file_name, limits)
            if rows:
                sheets.append((sheet.title, _table(rows[0], rows[1:])))
    finally:
        book.close()
    if not sheets:
        raise EmptyDataset("every sheet of the workbook is empty")
    return _merge(sheets)


def _table(header: list[Any], body: list[list[Any]]) -> Table:
    columns = normalise_columns(header)
    width = len(columns)
    rows = [(list(r) + [None] * width)[:width] for r in body]
    return Table(columns=columns, rows=rows)


def _merge(sheets: list[tuple[str, Table]]) -> Table:
    """One table: the union of the sheets' columns, plus the sheet each row came from."""
    columns: list[str] = []
    for _, table in sheets:
        columns += [c for c in table.columns if c not in columns and c != SHEET_COLUMN]
    rows: list[list[Any]] = []
    for title, table in sheets:
        index = {c: i for i, c in enumerate(table.columns)}
        for row in table.rows:
            rows.append([row[index[c]] if c in index else None for c in columns] + [title])
    return Table(columns=[*columns, SHEET_COLUMN], rows=rows)
