"""Expand/contract (weft_storage.migration_policy): no migration newer than the recorded
release may drop, rename, retype or tighten what the last release's code reads, so old and
new replicas run side by side during an upgrade and a rollback needs no schema downgrade
(docs/operations-production.md, "Upgrades and rollbacks")."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from weft_storage.migrate import alembic_config
from weft_storage.migration_policy import (
    destructive_statements,
    load_baseline,
    mapped_columns,
    uncovered,
    unreleased,
    violations,
)


@pytest.fixture(scope="module")
def script() -> ScriptDirectory:
    return ScriptDirectory.from_config(alembic_config(""))


def test_migrations_newer_than_the_release_keep_it_working(script: ScriptDirectory) -> None:
    bad = violations(script)
    assert not bad, [f"{f.revision}: {f.statement}" for f in bad]


def test_the_baseline_names_real_revisions_and_covers_todays_models(
    script: ScriptDirectory,
) -> None:
    heads, columns = load_baseline()
    assert heads and all(script.get_revision(h) is not None for h in heads)
    # Every column the models map now was recorded or is added by an unreleased migration:
    # a column read today but missing from the baseline could be dropped unnoticed later.
    new_sources = "".join(
        Path(str(script.get_revision(r).path)).read_text() for r in unreleased(script, heads)
    )
    missing = [
        c for c in mapped_columns() if c not in columns and c.split(".")[1] not in new_sources
    ]
    assert not missing


MIGRATION = """
import sqlalchemy as sa
from alembic import op

{contracts}

def upgrade() -> None:
    {body}


def downgrade() -> None:
    op.drop_column("agents", "notes")  # a downgrade may drop what its upgrade added
"""


def _found(body: str, contracts: str = "") -> list[str]:
    source = MIGRATION.format(body=body, contracts=contracts)
    return [f.statement for f in destructive_statements(source, "r1")]


@pytest.mark.parametrize(
    ("body", "statement"),
    [
        ('op.drop_table("agents")', "drop table agents"),
        ('op.drop_column("agents", "name")', "drop column agents.name"),
        ('op.alter_column("agents", "name", new_column_name="title")', "rename column agents.name"),
        ('op.alter_column("agents", "name", type_=sa.Integer())', "change type of agents.name"),
        ('op.alter_column("agents", "name", nullable=False)', "set not null on agents.name"),
        ('op.rename_table("agents", "bots")', "rename table agents"),
        (
            'op.add_column("agents", sa.Column("tier", sa.Text(), nullable=False))',
            "add NOT NULL column agents.tier without a server default",
        ),
        ('op.execute("DROP TABLE IF EXISTS agents")', "drop table agents"),
        ('op.execute("ALTER TABLE agents DROP COLUMN name")', "drop column agents.name"),
        ('op.execute("alter table agents rename column name to title")', "rename in agents"),
        (
            'op.execute("ALTER TABLE agents ALTER COLUMN name TYPE int")',
            "change type of agents.name",
        ),
        (
            'op.execute(sa.text("ALTER TABLE agents ALTER COLUMN name SET NOT NULL"))',
            "set not null on agents.name",
        ),
    ],
)
def test_each_destructive_statement_is_found(body: str, statement: str) -> None:
    assert statement in _found(body)


@pytest.mark.parametrize(
    "body",
    [
        'op.add_column("agents", sa.Column("notes", sa.Text(), nullable=True))',
        'op.add_column("agents", sa.Column("tier", sa.Text(), nullable=False, server_default="a"))',
        'op.create_table("extras", sa.Column("id", sa.Text(), primary_key=True))',
        'op.create_index("ix_agents_name", "agents", ["name"])',
        'op.alter_column("agents", "name", nullable=True)',
        'op.execute("CREATE INDEX CONCURRENTLY ix ON agents (name)")',
    ],
)
def test_additive_steps_pass(body: str) -> None:
    assert _found(body) == []


def test_a_contract_step_passes_only_for_a_column_the_release_no_longer_reads() -> None:
    body = 'op.drop_column("agents", "legacy")'
    declared = MIGRATION.format(body=body, contracts='contracts = ("agents.legacy",)')
    undeclared = MIGRATION.format(body=body, contracts="")
    assert uncovered(declared, "r1", {"agents.name"}) == []
    assert [f.target for f in uncovered(undeclared, "r1", {"agents.name"})] == ["agents.legacy"]
    # Declared, but the last release's models still map it: refused all the same.
    assert len(uncovered(declared, "r1", {"agents.name", "agents.legacy"})) == 1
    # A table read by hand-written SQL counts as read whole.
    assert len(uncovered(declared, "r1", {"agents.*"})) == 1
