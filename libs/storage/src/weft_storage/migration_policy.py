"""Expand/contract: a migration newer than the last release must leave a schema that the
last release's code still works on, so an upgrade can roll its pods while old and new
replicas run side by side, and a rollback of the code needs no downgrade of the schema.

Checked statically (``tests/unit/test_migration_policy.py``, in ``make test``): every
migration that is not an ancestor of the heads recorded in ``release_baseline.json`` is
read with :mod:`ast`, and its ``upgrade()`` may not

- drop a table or a column, rename a table or a column, or change a column's type;
- make a column NOT NULL (``alter_column(nullable=False)``, ``SET NOT NULL``) or add one
  that is NOT NULL without a server default (the last release's inserts do not name it);

in Alembic operations or in SQL strings, unless the migration lists the table or
``table.column`` in a module-level ``contracts`` tuple *and* the last release's ORM models
(the column snapshot of ``release_baseline.json``) no longer map it: the contract step of
a column that an earlier expand step made unused. What the check cannot see: SQL the last
release sends by hand for a column its models do not map, and data migrations (an
``UPDATE`` that rewrites values the old code reads); review those.

At each release, record the new baseline: ``python -m weft_storage.migration_policy
record`` (docs/operations-production.md, "Upgrades and rollbacks").
"""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from alembic.script import ScriptDirectory

from weft_storage.base import Base
from weft_storage.ownership import OWNED

BASELINE = Path(__file__).parent / "release_baseline.json"
"""The last release's migration heads and the ``table.column`` names its models map."""

_SQL_RULES = (
    (re.compile(r"\bDROP\s+TABLE\s+(?:IF\s+EXISTS\s+)?\"?(\w+)", re.I), "drop table {0}"),
    (
        re.compile(
            r"\bALTER\s+TABLE\s+(?:ONLY\s+)?\"?(\w+)\"?\s+DROP\s+(?!CONSTRAINT\b)(?:COLUMN\s+)?"
            r"(?:IF\s+EXISTS\s+)?\"?(\w+)",
            re.I,
        ),
        "drop column {0}.{1}",
    ),
    (re.compile(r"\bALTER\s+TABLE\s+(?:ONLY\s+)?\"?(\w+)\"?\s+RENAME\b", re.I), "rename in {0}"),
    (
        re.compile(
            r"\bALTER\s+TABLE\s+(?:ONLY\s+)?\"?(\w+)\"?\s+ALTER\s+(?:COLUMN\s+)?\"?(\w+)"
            r"\"?\s+(?:SET\s+DATA\s+)?TYPE\b",
            re.I,
        ),
        "change type of {0}.{1}",
    ),
    (
        re.compile(
            r"\bALTER\s+TABLE\s+(?:ONLY\s+)?\"?(\w+)\"?\s+ALTER\s+(?:COLUMN\s+)?\"?(\w+)"
            r"\"?\s+SET\s+NOT\s+NULL\b",
            re.I,
        ),
        "set not null on {0}.{1}",
    ),
)


@dataclass(frozen=True)
class Finding:
    """One statement that would break the last release, with what it touches."""

    revision: str
    statement: str
    """e.g. ``drop column agents.legacy``."""
    target: str
    """The table, or ``table.column``, it acts on."""


def _const(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _keyword(call: ast.Call, name: str) -> ast.AST | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _arg(call: ast.Call, index: int, name: str) -> str | None:
    if len(call.args) > index:
        return _const(call.args[index])
    return _const(_keyword(call, name))


def _op_findings(call: ast.Call) -> list[tuple[str, str]]:
    """(statement, target) of one ``op.<name>(...)`` call."""
    func = call.func
    if not (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)):
        return []
    name, table = func.attr, _arg(call, 0, "table_name") or "?"
    if name == "drop_table":
        return [(f"drop table {table}", table)]
    if name == "rename_table":
        return [(f"rename table {table}", table)]
    column = f"{table}.{_arg(call, 1, 'column_name') or '?'}"
    if name == "drop_column":
        return [(f"drop column {column}", column)]
    if name == "alter_column":
        found = []
        if _keyword(call, "new_column_name") is not None:
            found.append((f"rename column {column}", column))
        if _keyword(call, "type_") is not None:
            found.append((f"change type of {column}", column))
        nullable = _keyword(call, "nullable")
        if isinstance(nullable, ast.Constant) and nullable.value is False:
            found.append((f"set not null on {column}", column))
        return found
    if name == "add_column" and len(call.args) > 1:
        return _new_required_column(table, call.args[1])
    return []


def _new_required_column(table: str, column: ast.AST) -> list[tuple[str, str]]:
    """``sa.Column(name, ..., nullable=False)`` without ``server_default``."""
    if not isinstance(column, ast.Call):
        return []
    nullable = _keyword(column, "nullable")
    required = isinstance(nullable, ast.Constant) and nullable.value is False
    if required and _keyword(column, "server_default") is None:
        target = f"{table}.{_arg(column, 0, 'name') or '?'}"
        return [(f"add NOT NULL column {target} without a server default", target)]
    return []


def _sql_findings(text: str) -> list[tuple[str, str]]:
    found = []
    for pattern, template in _SQL_RULES:
        for match in pattern.finditer(text):
            groups = [g.lower() for g in match.groups()]
            found.append((template.format(*groups), ".".join(groups)))
    return found


def destructive_statements(source: str, revision: str = "?") -> list[Finding]:
    """What ``upgrade()`` of the migration ``source`` does that the last release's code
    may not survive, contracts not yet taken into account."""
    tree = ast.parse(source)
    upgrade = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "upgrade"), None
    )
    if upgrade is None:
        return []
    found: list[tuple[str, str]] = []
    for node in ast.walk(upgrade):
        if isinstance(node, ast.Call):
            found += _op_findings(node)
        elif (text := _const(node)) is not None:
            found += _sql_findings(text)
    return [Finding(revision, statement, target) for statement, target in found]


def declared_contracts(source: str) -> tuple[str, ...]:
    """The module-level ``contracts = ("table", "table.column", ...)`` of a migration."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "contracts" for t in node.targets
        ):
            value = ast.literal_eval(node.value)
            return tuple(str(v).lower() for v in value)
    return ()


def load_baseline(path: Path = BASELINE) -> tuple[set[str], set[str]]:
    """The last release's (heads, mapped ``table.column`` names)."""
    data = json.loads(path.read_text())
    return set(data["heads"]), set(data["columns"])


def unreleased(script: ScriptDirectory, released_heads: set[str]) -> list[str]:
    """Revisions newer than the release: not one of its heads nor their ancestors."""
    released = {rev.revision for rev in script.iterate_revisions(tuple(released_heads), "base")}
    return [r.revision for r in script.walk_revisions() if r.revision not in released]


def violations(script: ScriptDirectory, path: Path = BASELINE) -> list[Finding]:
    """Every destructive statement of a migration newer than the release that no valid
    contract declaration covers."""
    heads, columns = load_baseline(path)
    bad = []
    for revision in unreleased(script, heads):
        module = script.get_revision(revision)
        assert module is not None and module.path is not None
        bad += uncovered(Path(module.path).read_text(), revision, columns)
    return bad


def uncovered(source: str, revision: str, columns: set[str]) -> list[Finding]:
    """The destructive statements of one migration that its ``contracts`` do not cover: a
    declared target the last release still reads (in ``columns``) covers nothing."""
    contracts = set(declared_contracts(source))
    read_tables = {c.split(".", 1)[0] for c in columns}
    bad = []
    for finding in destructive_statements(source, revision):
        table = finding.target.split(".", 1)[0]
        if "." in finding.target:
            still_read = finding.target in columns or f"{table}.*" in columns
        else:
            still_read = table in read_tables
        if finding.target not in contracts or still_read:
            bad.append(finding)
    return bad


def mapped_columns() -> list[str]:
    """``table.column`` of every model of every owner package (all imported first), and
    ``table.*`` for an owned table that no model maps."""
    import weft_storage

    for info in pkgutil.walk_packages(weft_storage.__path__, "weft_storage."):
        if info.name.count(".") > 1 and ".migrations" not in info.name:
            importlib.import_module(info.name)  # an owner's module: its models register
    tables = Base.metadata.tables.values()
    columns = {f"{t.name}.{c.name}" for t in tables for c in t.c}
    # A table no model maps is read by hand-written SQL: all of it counts as read.
    unmapped = OWNED - {t.name for t in tables}
    return sorted(columns | {f"{table}.*" for table in unmapped})


def record(script: ScriptDirectory, path: Path = BASELINE) -> None:
    """Write the baseline of the code as it is now (run when cutting a release)."""
    columns = mapped_columns()
    body = {"heads": sorted(script.get_heads()), "columns": columns}
    path.write_text(json.dumps(body, indent=1) + "\n")


def main() -> int:
    """``python -m weft_storage.migration_policy record|check``."""
    from weft_storage.migrate import alembic_config

    script = ScriptDirectory.from_config(alembic_config(""))
    if sys.argv[1:] == ["record"]:
        record(script)
        print(f"recorded {BASELINE}")
        return 0
    if sys.argv[1:] == ["check"]:
        bad = violations(script)
        for finding in bad:
            print(f"{finding.revision}: {finding.statement}", file=sys.stderr)
        return 1 if bad else 0
    print("usage: python -m weft_storage.migration_policy record|check", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
