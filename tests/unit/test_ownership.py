"""The ownership map: one owner per table, transitional grants that name their path."""

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
    TRANSITIONAL_GRANTS,
    TransitionalGrant,
    granted,
    owner_of,
    service_url,
)
from weft_testkit.stack import SERVICES


def test_no_table_has_two_owners() -> None:
    counts = Counter(t for tables in OWNED_TABLES.values() for t in tables)
    assert [t for t, n in counts.items() if n > 1] == []


def test_every_service_of_the_stack_has_a_role_and_every_owner_is_a_service() -> None:
    assert set(SERVICES) <= set(SERVICE_ROLES)
    assert set(OWNED_TABLES) == set(SERVICE_ROLES)
    assert len(set(SERVICE_ROLES.values())) == len(SERVICE_ROLES)


def test_the_engine_and_tool_exec_own_nothing() -> None:
    assert OWNED_TABLES["engine"] == () and OWNED_TABLES["tool_exec"] == ()


def test_an_owner_gets_all_rights_on_its_tables_but_admin_audit_is_append_only() -> None:
    rights = granted("gateway", transitional=False)
    assert rights["tenants"] == frozenset(ALL)
    assert rights["admin_audit"] == frozenset(TABLE_PRIVILEGES["admin_audit"])
    assert "UPDATE" not in rights["admin_audit"] and "DELETE" not in rights["admin_audit"]
    assert set(granted("memory", transitional=False)) == set(OWNED_TABLES["memory"])


@pytest.mark.parametrize("grant", TRANSITIONAL_GRANTS, ids=lambda g: f"{g.service}-{g.table}")
def test_a_transitional_grant_is_cross_owner_names_its_path_and_is_granted(
    grant: TransitionalGrant,
) -> None:
    assert grant.service in SERVICE_ROLES
    assert owner_of(grant.table) not in (None, grant.service), "not a cross-owner right"
    assert grant.removed_by.strip()
    assert set(grant.privileges) <= set(ALL)
    assert set(grant.privileges) <= granted(grant.service)[grant.table]
    assert grant.table not in granted(grant.service, transitional=False)


def test_a_service_url_logs_in_as_the_services_role() -> None:
    owner = "postgresql+asyncpg://weft:weft@db.example:5432/weft"
    url = make_url(service_url(owner, "agent_config", "s3cr:t@"))
    assert (url.username, url.password, url.host, url.database) == (
        "weft_agent_config", "s3cr:t@", "db.example", "weft",
    )  # fmt: skip
    assert make_url(service_url(owner, "memory")).password == "weft_memory"


def test_infra_creates_every_role_of_the_map() -> None:
    infra = (Path(__file__).parents[2] / "deploy" / "local" / "infra.sh").read_text()
    assert all(f"'{role}'" in infra for role in SERVICE_ROLES.values())
