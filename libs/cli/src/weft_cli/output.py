"""How ``weft`` prints: tables and text for people on stdout, problems on stderr, and with
``--json`` the same data as JSON (one document, or one line per event for streams)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

out = Console(highlight=False, soft_wrap=True)
"""stdout: results."""
err = Console(stderr=True, highlight=False, soft_wrap=True)
"""stderr: progress, warnings and failures."""

_CONTROLS = dict.fromkeys([*range(0, 9), *range(11, 32), 127, *range(128, 160)])
"""C0 and C1 control characters but tab and newline: what a terminal would act on."""


def clean(text: str) -> str:
    """``text`` without control characters. What the CLI shows comes from the model, the
    tools and other tenants' data; rich passes an escape sequence through to the terminal
    (which could retitle it, rewrite the screen or fake a prompt), so it is dropped."""
    return text.translate(_CONTROLS)


def to_json(value: Any) -> str:
    """``value`` as JSON (datetimes as ISO 8601, anything else unknown as its text)."""

    def fallback(item: Any) -> Any:
        if isinstance(item, datetime):
            return item.isoformat()
        return str(item)

    return json.dumps(value, default=fallback, ensure_ascii=False)


def print_json(value: Any) -> None:
    """One JSON document on stdout, unstyled (a pipe gets exactly the JSON)."""
    out.file.write(to_json(value) + "\n")
    out.file.flush()


def cell(value: Any, width: int = 60) -> str:
    """One table cell: None as ``-``, lists joined, long text cut with an ellipsis."""
    if value is None:
        return "-"
    if isinstance(value, list | tuple):
        text = ", ".join(str(v) for v in value) or "-"
    elif isinstance(value, dict):
        text = to_json(value)
    else:
        text = str(value)
    text = clean(text).replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> Table:
    """A rich table of ``rows`` (cells through :func:`cell`)."""
    shown = Table(title=escape(title), title_justify="left", show_lines=False)
    for column in columns:
        shown.add_column(column, overflow="fold")
    for row in rows:
        shown.add_row(*(escape(cell(v)) for v in row))  # data, never markup
    return shown


def report(value: Any, as_json: bool, title: str, columns: Sequence[str]) -> None:
    """Print ``value`` (a list of dicts) as JSON or as a table of ``columns``."""
    if as_json:
        print_json(value)
        return
    rows = [[item.get(c) for c in columns] for item in value]
    out.print(table(title, columns, rows))
    if not rows:
        out.print("(none)")
