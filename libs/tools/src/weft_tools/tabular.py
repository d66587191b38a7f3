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

SHEET_COLUMN = "__sheet_name"
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


def read_table(file_name: str, content: bytes) -> Table:
    """The rows of a ``.csv``/``.tsv`` or ``.xlsx`` file; raise EmptyDataset when empty."""
    lower = file_name.lower()
    if lower.endswith((".xlsx", ".xlsm")):
        return _excel(content)
    if lower.endswith((".csv", ".tsv", ".txt")):
        return _csv(content)
    raise ValueError(f"unsupported data file {file_name!r}; expected .csv or .xlsx")


def _csv(content: bytes) -> Table:
    text = content.decode("utf-8-sig", errors="replace")
    try:
        dialect: Any = csv.Sniffer().sniff(text[:4096], delimiters=",;\t|")
    except csv.Error:
        dialect = csv.excel
    rows = [r for r in csv.reader(io.StringIO(text), dialect) if any(c.strip() for c in r)]
    if len(rows) < 1:
        raise EmptyDataset("the file has no rows")
    return _table(rows[0], rows[1:])


def _excel(content: bytes) -> Table:
    book = load_workbook(io.BytesIO(content), read_only=True, data_only=True)
    sheets: list[tuple[str, Table]] = []
    for sheet in book.worksheets:
        rows = [list(r) for r in sheet.iter_rows(values_only=True)]
        rows = [r for r in rows if any(c is not None and str(c).strip() for c in r)]
        if rows:
            sheets.append((sheet.title, _table(rows[0], rows[1:])))
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
