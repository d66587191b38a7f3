"""Workspace memory (docs/sandbox.md, "Bounded workspaces"), sent as a model would send
it, through the public API on the real stack: a tenant that fills workspaces in session
after session never holds more than its cap. The least recently used idle workspace is
evicted first and comes back from its checkpoint when used again; a write that no eviction
can make room for is refused with the cap named and undone; another tenant is unaffected.

The stack's sandbox holds a tenant to 8 MiB (``tests.stack_fixtures``); the files are of
3 MiB, and both tenants are the test's own.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from weft_sandbox.settings import MIB
from weft_sandbox.workspace import workspace_key
from weft_testkit import LocalStack

from tests.e2e.sandbox_helpers import sandbox_session, scripted_turn
from tests.stack_fixtures import SANDBOX_TENANT_BYTES, ApiKeys, KeyedClient, weft_home

TENANT_CAP = SANDBOX_TENANT_BYTES
FILE = 3 * MIB


@dataclass
class Tenant:
    """A tenant of the test: its client and a way to run one command in a session."""

    name: str
    who: KeyedClient
    stack: LocalStack
    llm: httpx.AsyncClient

    async def session(self) -> str:
        return await sandbox_session(self.who.http, f"filler-{secrets.token_hex(3)}")

    async def shell(self, sid: str, command: str) -> dict[str, Any]:
        """One turn whose model runs ``command`` in session ``sid``: its tool result."""
        marker = f"CAPS-{secrets.token_hex(4)}"
        results, _ = await scripted_turn(self.who.http, self.who.key, self.llm, sid, marker, [
            {"id": "call_sh", "name": "shell_exec", "arguments": {"command": command}},
        ])  # fmt: skip
        return results["call_sh"]

    def on_host(self, sid: str) -> Path:
        """The host folder of the session's live workspace (the stack's one sandbox)."""
        port = self.stack.ports["sandbox"][0]
        root = weft_home() / "sandbox" / f"sandbox-{port}"
        return root / workspace_key(self.name, sid) / "ws"


def fill(name: str) -> str:
    """A command writing a ``FILE``-byte file ``name`` and a small note about it."""
    return f"head -c {FILE} /dev/urandom > {name} && echo kept-{name} > note-{name} && echo wrote"


def wrote(result: dict[str, Any]) -> bool:
    return bool(result["success"]) and "wrote" in result["output"]


async def test_a_tenant_filling_workspaces_is_held_to_its_cap(
    stack: LocalStack, api_keys: ApiKeys, llm: httpx.AsyncClient
) -> None:
    assert stack.config.extra_env["WEFT_SANDBOX_TENANT_BYTES"] == str(TENANT_CAP)
    names = [f"tenant-caps-{secrets.token_hex(4)}" for _ in range(2)]
    filler, bystander = [Tenant(n, await api_keys.client(tenant=n), stack, llm) for n in names]
    s1, s2, s3 = [await filler.session() for _ in range(3)]
    assert wrote(await filler.shell(s1, fill("one")))  # 3 MiB
    assert wrote(await filler.shell(s2, fill("two")))  # 6 MiB
    assert filler.on_host(s1).is_dir() and filler.on_host(s2).is_dir()

    # 9 MiB would pass the cap: the least recently used idle workspace (s1) goes first.
    assert wrote(await filler.shell(s3, fill("three")))
    assert not filler.on_host(s1).exists() and filler.on_host(s2).is_dir()

    # s1 comes back from its checkpoint (evicting s2, now the least recently used).
    back = await filler.shell(s1, "cat note-one; wc -c < one")
    assert back["success"] and "kept-one" in back["output"], back
    assert str(FILE) in back["output"], back
    assert not filler.on_host(s2).exists() and filler.on_host(s3).is_dir()

    # The other tenant writes 6 MiB: its own cap, and none of the filler's workspaces goes.
    other = await bystander.session()
    assert wrote(await bystander.shell(other, fill("a") + " && " + fill("b")))
    assert filler.on_host(s1).is_dir() and filler.on_host(s3).is_dir()

    # One session growing past the cap by itself: every other idle workspace of the tenant
    # is released, and still no room: refused, the cap named, the call undone.
    over = await filler.shell(s1, fill("more") + " && " + fill("most"))
    error = str(over.get("error"))
    assert not over["success"] and "WEFT_SANDBOX_TENANT_BYTES" in error, over
    assert "8 MiB" in error and "undone" in error, over
    assert not filler.on_host(s3).exists()
    after = await filler.shell(s1, "ls")
    listed = after["output"].split("stdout:")[1].split("stderr:")[0].split()
    assert sorted(listed) == ["input", "note-one", "one", "output"], after
