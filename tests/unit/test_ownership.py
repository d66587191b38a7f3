"""The ownership map: one owner per table, each role's rights on its own tables only."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy.engine.url import make_url
from weft_storage.ownership import (
    ALL,
    OWNED_TABLES,
    SERVICE_ROLES,
    TABLE_PRIVILEGES,
    granted,
    owner_of,
    service_url,
)
from weft_testkit.stack import NO_DATABASE, SERVICES, WORKERS, LocalStack, StackConfig


def test_no_table_has_two_owners() -> None:
    counts = Counter(t for tables in OWNED_TABLES.values() for t in tables)
    assert [t for t, n in counts.items() if n > 1] == []


def test_every_service_of_the_stack_but_the_engine_has_a_role() -> None:
    assert set(SERVICE_ROLES) == set(SERVICES) - {"engine"}
    assert set(OWNED_TABLES) == set(SERVICE_ROLES)
    assert len(set(SERVICE_ROLES.values())) == len(SERVICE_ROLES)


def test_the_engine_has_no_role_and_tool_exec_owns_nothing() -> None:
    assert "engine" not in SERVICE_ROLES and "engine" not in OWNED_TABLES
    assert OWNED_TABLES["tool_exec"] == ()


def test_an_owner_gets_all_rights_on_its_tables_but_admin_audit_is_append_only() -> None:
    rights = granted("gateway")
    assert rights["tenants"] == frozenset(ALL)
    assert rights["admin_audit"] == frozenset(TABLE_PRIVILEGES["admin_audit"])
    assert "UPDATE" not in rights["admin_audit"] and "DELETE" not in rights["admin_audit"]
    assert set(granted("memory")) == set(OWNED_TABLES["memory"])


@pytest.mark.parametrize("service", sorted(SERVICE_ROLES))
def test_a_role_is_granted_its_own_tables_and_no_other(service: str) -> None:
    assert set(granted(service)) == set(OWNED_TABLES[service])
    assert all(owner_of(t) == service for t in granted(service))


def test_a_service_url_logs_in_as_the_services_role() -> None:
    owner = "postgresql+asyncpg://weft:weft@db.example:5432/weft"
    url = make_url(service_url(owner, "agent_config", "s3cr:t@"))
    assert (url.username, url.password, url.host, url.database) == (
        "weft_agent_config", "s3cr:t@", "db.example", "weft",
    )  # fmt: skip
    assert make_url(service_url(owner, "memory")).password == "weft_memory"


def test_infra_creates_every_role_of_the_map_and_no_engine_role() -> None:
    infra = (Path(__file__).parents[2] / "deploy" / "local" / "infra.sh").read_text()
    assert all(f"'{role}'" in infra for role in SERVICE_ROLES.values())
    # weft_engine only as an earlier release left it, without login (the retired-role test)
    logins = infra[infra.index("unnest(ARRAY[") : infra.index("AS r\\gexec")]
    assert "weft_engine" not in logins
    assert "CREATE ROLE weft_engine NOLOGIN" in infra


def test_the_test_stack_logs_each_process_in_as_its_services_role(tmp_path: Path) -> None:
    owner = "postgresql+asyncpg://weft:weft@127.0.0.1:15432/weft"
    stack = LocalStack(StackConfig(log_dir=tmp_path, database_url=owner))
    stack.ports = {name: [1] for name in ("scripted_llm", *SERVICES, *WORKERS)}
    users = {
        name: make_url(stack.service_env(name, 1)["WEFT_DATABASE_URL"]).username
        for name in (*SERVICES, *WORKERS)
    }
    assert users["knowledge_worker"] == "weft_knowledge"  # a worker: its service's role
    assert stack.service_env("engine", 1)["WEFT_DATABASE_URL"] == NO_DATABASE
    assert {n: u for n, u in users.items() if n not in ("engine", *WORKERS)} == {
        n: SERVICE_ROLES[n] for n in SERVICES if n != "engine"
    }
