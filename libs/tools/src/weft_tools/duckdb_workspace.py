"""The DuckDB side of ``data_schema`` / ``data_analysis`` (SPEC T-12).

Each session gets one in-memory DuckDB database, created with external access disabled so
the model's SQL cannot read files or URLs (the documents come in as Python objects, which
that setting allows), one thread, a memory limit, and its configuration locked, so no
``SET``/``PRAGMA`` can undo any of it. A document is loaded once per session into a
table; each ``data_analysis`` call opens its own DuckDB connection (a cursor) where the
temporary view ``dataset`` points at that table, so the SQL never names a document id.
Queries are parsed (one SELECT over ``dataset`` only), bounded in time (interrupted) and
in rows. The turn-end cleanup (T-04) drops the session's tables, unless a later turn of
the session has used them since (its ``complete`` may arrive after the next turn started);
idle sessions are closed too, in case a worker never hears of a turn's end.
"""

from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np

from weft_tools.tabular import Table


@dataclass(kw_only=True)
class _SessionDb:
    connection: duckdb.DuckDBPyConnection
    tables: dict[str, tuple[str, int]] = field(default_factory=dict)
    """knowledge id -> (table name, row count)."""
    used: float = field(default_factory=time.monotonic)
    turn: str | None = None
    """Request id of the last turn that used the database (None: unknown)."""


class DuckDBWorkspace:
    """Per-session DuckDB databases holding the loaded documents."""

    def __init__(
        self, *, idle_s: float = 600.0, max_load_rows: int = 500_000, memory_limit: str = "256MB"
    ):
        self._sessions: dict[str, _SessionDb] = {}
        self._lock = threading.Lock()
        self._idle_s = idle_s
        self._max_load_rows = max_load_rows
        self._config: dict[str, str | bool | int] = {
            "enable_external_access": False,
            "threads": 1,
            "memory_limit": memory_limit,
            "lock_configuration": True,
        }

    def session(self, session_id: str, request_id: str | None = None) -> _SessionDb:
        """The session's database, created on first use; ``request_id`` marks the turn."""
        with self._lock:
            self._evict_idle()
            db = self._sessions.get(session_id)
            if db is None:
                conn = duckdb.connect(":memory:", config=dict(self._config))
                db = self._sessions[session_id] = _SessionDb(connection=conn)
            db.used = time.monotonic()
            if request_id is not None:
                db.turn = request_id
            return db

    def load(
        self, session_id: str, knowledge_id: str, table: Table, request_id: str | None = None
    ) -> tuple[str, int]:
        """Create the document's table (once per session); return (name, row count)."""
        db = self.session(session_id, request_id)
        if knowledge_id in db.tables:
            return db.tables[knowledge_id]
        if len(table.rows) > self._max_load_rows:
            raise ValueError(f"the file has more than {self._max_load_rows} rows")
        name = "doc_" + hashlib.sha256(knowledge_id.encode()).hexdigest()[:16]
        types = [_column_type([r[i] for r in table.rows]) for i in range(len(table.columns))]
        # Columns go in as numpy object arrays (one scan, ~300x faster than row inserts),
        # then get their inferred SQL types with an explicit CAST.
        source = {
            f"c{i}": np.array([_cell(r[i], kind) for r in table.rows], dtype=object)
            for i, kind in enumerate(types)
        }
        select = ", ".join(
            f'CAST(c{i} AS {kind}) AS "{col}"'
            for i, (col, kind) in enumerate(zip(table.columns, types, strict=True))
        )
        cur = db.connection.cursor()
        try:
            view = f"src_{name}"
            cur.register(view, source)
            cur.execute(f"CREATE OR REPLACE TABLE {name} AS SELECT {select} FROM {view}")
            cur.unregister(view)
        finally:
            cur.close()
        db.tables[knowledge_id] = (name, len(table.rows))
        return db.tables[knowledge_id]

    def drop_session(self, session_id: str) -> None:
        """Drop the session's tables and close its database."""
        with self._lock:
            db = self._sessions.pop(session_id, None)
        if db is not None:
            _close(db)

    def end_turn(self, session_id: str, request_id: str) -> bool:
        """Drop the session's tables at the end of turn ``request_id`` (T-04).

        Nothing is dropped when a later turn of the session has used the database since;
        returns whether the session's database was dropped.
        """
        with self._lock:  # check and remove at once: a new turn may be starting
            db = self._sessions.get(session_id)
            if db is None or (db.turn is not None and db.turn != request_id):
                return False
            del self._sessions[session_id]
        _close(db)
        return True

    def table_count(self, session_id: str) -> int:
        """How many documents the session has loaded (for tests and metrics)."""
        db = self._sessions.get(session_id)
        return len(db.tables) if db else 0

    def tables_by_session(self) -> dict[str, int]:
        """Loaded documents per open session (what the process holds in memory)."""
        with self._lock:
            return {sid: len(db.tables) for sid, db in self._sessions.items()}

    def _evict_idle(self) -> None:
        now = time.monotonic()
        for sid in [s for s, db in self._sessions.items() if now - db.used > self._idle_s]:
            self._sessions.pop(sid).connection.close()


def _close(db: _SessionDb) -> None:
    for name, _ in db.tables.values():
        db.connection.execute(f"DROP TABLE IF EXISTS {name}")
    db.connection.close()


def _column_type(values: list[Any]) -> str:
    present = [v for v in values if v is not None and str(v).strip() != ""]
    if present and all(_as_int(v) is not None for v in present):
        return "BIGINT"
    if present and all(_as_float(v) is not None for v in present):
        return "DOUBLE"
    return "VARCHAR"


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if value.is_integer() else None
    try:
        return int(str(value).strip())
    except ValueError:
        return None


def _as_float(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    try:
        return (
            float(str(value).strip().replace(",", "")) if isinstance(value, str) else float(value)
        )
    except (TypeError, ValueError):
        return None


def _cell(value: Any, kind: str) -> Any:
    if value is None or str(value).strip() == "":
        return None
    if kind == "BIGINT":
        return _as_int(value)
    if kind == "DOUBLE":
        return _as_float(value)
    return str(value)
