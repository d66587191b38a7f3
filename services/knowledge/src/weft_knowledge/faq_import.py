"""Bulk import of FAQ entries from a CSV or XLSX file (SPEC C-04).

The file is read by the same reader and under the same bounds as ingested spreadsheets
(``weft_tools.tabular``, ``weft_tools.ingestion_limits``): an archive that would inflate
past the limit or at a bomb's ratio, and a sheet of too many rows, are refused before
any row is parsed. Every problem is refused whole, naming the row and column, so an
import never lands half of a file or drops a row without saying so.

Columns (header names are normalised: ``Question`` and ``question`` are the same):
``question`` and ``answer`` (required), ``similar_questions`` (other phrasings, separated
by ``|`` or new lines) and ``tag`` (optional). A cell is stored as the text it holds: a
formula (``=HYPERLINK(...)``) is never evaluated, and an XLSX formula is read as the
value the workbook saved with it.
"""

from __future__ import annotations

import csv
from dataclasses import replace
from typing import Any

from weft_storage.knowledge.faq import FaqDraft
from weft_tools.ingestion_limits import DocumentRefused, DocumentTooLarge, IngestionLimits
from weft_tools.tabular import SHEET_COLUMN, EmptyDataset, read_table

IMPORT_MAX_ROWS = 10_000
"""Entries of one import (the ingestion's row bound when that is lower)."""
IMPORT_MAX_BYTES = 10 * 1024 * 1024
QUESTION_MAX_CHARS = 1_000
ANSWER_MAX_CHARS = 20_000
SIMILAR_MAX = 20
TAG_MAX_CHARS = 64
REQUIRED = ("question", "answer")
OPTIONAL = ("similar_questions", "tag")
SUFFIXES = (".csv", ".xlsx")


class FaqImportRefused(ValueError):
    """The file cannot be imported; the text names the problem (a 422 or 413)."""


class FaqImportTooLarge(FaqImportRefused):
    """The file is over a size, row or decompression bound (a 413)."""


def import_limits(limits: IngestionLimits) -> IngestionLimits:
    """The ingestion's bounds with the import's own row bound."""
    return replace(limits, max_rows=min(limits.max_rows, IMPORT_MAX_ROWS))


def parse_faq_file(file_name: str, content: bytes, limits: IngestionLimits) -> list[FaqDraft]:
    """The entries of a CSV or XLSX file, or :class:`FaqImportRefused` naming why not."""
    if not file_name.lower().endswith(SUFFIXES):
        raise FaqImportRefused(f"unsupported file {file_name!r}: use a .csv or .xlsx file")
    if len(content) > IMPORT_MAX_BYTES:
        raise FaqImportTooLarge(f"{file_name}: over {IMPORT_MAX_BYTES // (1024 * 1024)} MB")
    try:
        table = read_table(file_name, content, import_limits(limits))
    except DocumentTooLarge as exc:  # a bomb, too many rows
        raise FaqImportTooLarge(str(exc)) from exc
    except DocumentRefused as exc:
        raise FaqImportRefused(str(exc)) from exc
    except EmptyDataset as exc:
        raise FaqImportRefused(f"{file_name}: {exc}") from exc
    except (csv.Error, UnicodeError, ValueError, KeyError, OSError) as exc:
        raise FaqImportRefused(f"{file_name}: not a readable table ({exc})") from exc
    columns = [c for c in table.columns if c != SHEET_COLUMN]
    _check_columns(columns)
    index = {c: i for i, c in enumerate(table.columns)}
    drafts = [_draft(n, row, index) for n, row in enumerate(table.rows, start=2)]
    if not drafts:
        raise FaqImportRefused(f"{file_name}: a header but no entries")
    return drafts


def _check_columns(columns: list[str]) -> None:
    missing = [c for c in REQUIRED if c not in columns]
    unknown = [c for c in columns if c not in REQUIRED + OPTIONAL]
    if missing or unknown:
        problems = []
        if missing:
            problems.append(f"missing column(s) {missing}")
        if unknown:
            problems.append(f"unknown column(s) {unknown}")
        raise FaqImportRefused(
            f"{'; '.join(problems)}: the header must name {list(REQUIRED)} and may name "
            f"{list(OPTIONAL)}; found {columns}"
        )


def _cell(row: list[Any], index: dict[str, int], column: str) -> str:
    at = index.get(column)
    value = row[at] if at is not None else None
    return "" if value is None else str(value).strip()


def _draft(line: int, row: list[Any], index: dict[str, int]) -> FaqDraft:
    question = _cell(row, index, "question")
    answer = _cell(row, index, "answer")
    similar_cell = _cell(row, index, "similar_questions")
    similar = tuple(q.strip() for q in similar_cell.replace("|", "\n").split("\n") if q.strip())
    draft = FaqDraft(
        question=question, answer=answer, similar_questions=similar,
        tag=_cell(row, index, "tag"),
    )  # fmt: skip
    problem = draft_problem(draft)
    if problem:
        raise FaqImportRefused(f"row {line}: {problem}")
    return draft


def draft_problem(draft: FaqDraft) -> str | None:
    """What makes an entry unstorable (the import's and the API's rule), or None."""
    if not draft.question:
        return "column 'question' is empty"
    if not draft.answer:
        return "column 'answer' is empty"
    for column, value, bound in (
        ("question", draft.question, QUESTION_MAX_CHARS),
        ("answer", draft.answer, ANSWER_MAX_CHARS),
        ("tag", draft.tag, TAG_MAX_CHARS),
    ):
        if len(value) > bound:
            return f"column {column!r} has {len(value):,} characters, over the limit of {bound:,}"
    if len(draft.similar_questions) > SIMILAR_MAX:
        return f"column 'similar_questions' has more than {SIMILAR_MAX} phrasings"
    long = [q for q in draft.similar_questions if len(q) > QUESTION_MAX_CHARS]
    if long:
        return f"a similar question is over the limit of {QUESTION_MAX_CHARS:,} characters"
    return None
