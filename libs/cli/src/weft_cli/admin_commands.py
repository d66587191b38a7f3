"""``weft admin``: tenants, their API keys, their token budgets and the audit log, over the
gateway's admin API (``/admin/v1``) with the operator token (``WEFT_ADMIN_TOKEN``)."""

from __future__ import annotations

from typing import Annotated, Any

import typer
from rich.markup import escape

from weft_cli.gateway import gateway
from weft_cli.outcome import ExitCode
from weft_cli.output import cell, out, print_json, report
from weft_cli.runner import options, run

admin = typer.Typer(help="Tenants, API keys, budgets and the audit log (operator token).",
                    no_args_is_help=True)  # fmt: skip
tenants = typer.Typer(help="List, show, create, suspend and resume tenants.", no_args_is_help=True)
keys = typer.Typer(
    help="List, create, revoke and rotate a tenant's API keys.", no_args_is_help=True
)
budget = typer.Typer(help="Show or set a tenant's token budgets.", no_args_is_help=True)
admin.add_typer(tenants, name="tenants")
admin.add_typer(keys, name="keys")
admin.add_typer(budget, name="budget")

Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
Tenant = Annotated[str, typer.Argument(help="Tenant id.")]
TENANT_COLUMNS = ["id", "name", "status", "created_at"]
KEY_COLUMNS = ["id", "user_id", "name", "scopes", "knowledge_base_ids", "expires_at", "active"]


async def _admin(ctx: typer.Context, method: str, path: str, what: str, **kw: Any) -> Any:
    async with gateway(options(ctx).api(), "admin_token") as gw:
        return await gw.call(method, path, what, **kw)


def _one(ctx: typer.Context, as_json: bool, method: str, path: str, what: str, **kw: Any) -> None:
    """A command whose answer is one object: JSON, or its fields one per line."""

    async def work() -> ExitCode:
        shown = await _admin(ctx, method, path, what, **kw)
        if as_json:
            print_json(shown)
        else:
            for name, value in (shown or {}).items():
                out.print(f"[bold]{name}[/]: {escape(cell(value, 2000))}")
        return ExitCode.OK

    run(work)


@tenants.command("ls")
def tenants_ls(
    ctx: typer.Context,
    status: Annotated[str | None, typer.Option(help="active, suspended or deleting.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=500)] = 50,
    as_json: Json = False,
) -> None:
    """List tenants."""

    async def work() -> ExitCode:
        params: dict[str, Any] = {"limit": limit} | ({"status": status} if status else {})
        page = await _admin(ctx, "GET", "/admin/v1/tenants", "list tenants", params=params)
        report(page["items"], as_json, f"tenants ({page['total']} in all)", TENANT_COLUMNS)
        return ExitCode.OK

    run(work)


@tenants.command("show")
def tenants_show(ctx: typer.Context, tenant_id: Tenant, as_json: Json = False) -> None:
    """Show one tenant and its settings."""
    _one(ctx, as_json, "GET", f"/admin/v1/tenants/{tenant_id}", f"tenant {tenant_id}")


@tenants.command("create")
def tenants_create(
    ctx: typer.Context,
    tenant_id: Tenant,
    name: Annotated[str, typer.Option(help="Display name.")] = "",
    as_json: Json = False,
) -> None:
    """Create a tenant."""
    body = {"id": tenant_id, "name": name}
    _one(ctx, as_json, "POST", "/admin/v1/tenants", f"create tenant {tenant_id}", json=body)


@tenants.command("suspend")
def tenants_suspend(ctx: typer.Context, tenant_id: Tenant, as_json: Json = False) -> None:
    """Suspend a tenant (its keys stop working until it is resumed)."""
    path = f"/admin/v1/tenants/{tenant_id}/suspend"
    _one(ctx, as_json, "POST", path, f"suspend {tenant_id}")


@tenants.command("resume")
def tenants_resume(ctx: typer.Context, tenant_id: Tenant, as_json: Json = False) -> None:
    """Resume a suspended tenant."""
    _one(ctx, as_json, "POST", f"/admin/v1/tenants/{tenant_id}/resume", f"resume {tenant_id}")


@keys.command("ls")
def keys_ls(
    ctx: typer.Context,
    tenant_id: Tenant,
    include_inactive: Annotated[
        bool, typer.Option("--all", help="Revoked and expired too.")
    ] = False,
    as_json: Json = False,
) -> None:
    """List a tenant's API keys (never their secrets)."""

    async def work() -> ExitCode:
        params = {"include_inactive": str(include_inactive).lower()}
        found = await _admin(ctx, "GET", f"/admin/v1/tenants/{tenant_id}/keys", "list keys",
                             params=params)  # fmt: skip
        report(found, as_json, f"keys of {tenant_id}", KEY_COLUMNS)
        return ExitCode.OK

    run(work)


@keys.command("create")
def keys_create(
    ctx: typer.Context,
    tenant_id: Tenant,
    user: Annotated[str, typer.Option("--user", help="The user the key acts as.")],
    name: Annotated[str, typer.Option(help="A label for people.")] = "",
    kb: Annotated[
        list[str] | None, typer.Option("--kb", help="Limit to this knowledge base (repeat).")
    ] = None,
    expires_in: Annotated[int | None, typer.Option("--expires-in", min=1, help="Seconds.")] = None,
    scope: Annotated[
        list[str] | None, typer.Option("--scope", help="Extra right, e.g. approvals:decide.")
    ] = None,
    as_json: Json = False,
) -> None:
    """Create an API key; its secret is printed this once."""
    body: dict[str, Any] = {"user_id": user, "name": name, "scopes": scope or []}
    if kb:
        body["knowledge_base_ids"] = kb
    if expires_in is not None:
        body["expires_in_s"] = expires_in
    path = f"/admin/v1/tenants/{tenant_id}/keys"
    _one(ctx, as_json, "POST", path, f"create a key of {tenant_id}", json=body)


@keys.command("revoke")
def keys_revoke(ctx: typer.Context, tenant_id: Tenant, key_id: str, as_json: Json = False) -> None:
    """Revoke a key at once."""
    path = f"/admin/v1/tenants/{tenant_id}/keys/{key_id}/revoke"
    _one(ctx, as_json, "POST", path, f"revoke {key_id}")


@keys.command("rotate")
def keys_rotate(
    ctx: typer.Context,
    tenant_id: Tenant,
    key_id: str,
    overlap: Annotated[int, typer.Option(min=0, help="Seconds the old key keeps working.")] = 0,
    as_json: Json = False,
) -> None:
    """Replace a key by a new one (printed this once)."""
    path = f"/admin/v1/tenants/{tenant_id}/keys/{key_id}/rotate"
    _one(ctx, as_json, "POST", path, f"rotate {key_id}", json={"overlap_s": overlap})


@budget.command("show")
def budget_show(ctx: typer.Context, tenant_id: Tenant, as_json: Json = False) -> None:
    """A tenant's token budgets (null: the gateway's default; 0: unlimited)."""
    _one(ctx, as_json, "GET", f"/admin/v1/tenants/{tenant_id}/budget", f"budget of {tenant_id}")


@budget.command("set")
def budget_set(
    ctx: typer.Context,
    tenant_id: Tenant,
    per_minute: Annotated[int | None, typer.Option("--per-minute", min=0)] = None,
    per_day: Annotated[int | None, typer.Option("--per-day", min=0)] = None,
    as_json: Json = False,
) -> None:
    """Replace a tenant's token budgets (a budget left out goes back to the default)."""
    body = {"tokens_per_minute": per_minute, "tokens_per_day": per_day}
    path = f"/admin/v1/tenants/{tenant_id}/budget"
    _one(ctx, as_json, "PUT", path, f"set the budget of {tenant_id}", json=body)


@admin.command("audit")
def audit(
    ctx: typer.Context,
    actor: Annotated[str | None, typer.Option()] = None,
    action: Annotated[str | None, typer.Option(help="e.g. key.create")] = None,
    target_id: Annotated[str | None, typer.Option("--target")] = None,
    outcome: Annotated[str | None, typer.Option(help="ok, refused or failed.")] = None,
    since: Annotated[str | None, typer.Option(help="ISO 8601 time with a zone.")] = None,
    limit: Annotated[int, typer.Option(min=1, max=1000)] = 100,
    as_json: Json = False,
) -> None:
    """Read the admin audit log, newest first."""

    async def work() -> ExitCode:
        wanted = {"actor": actor, "action": action, "target_id": target_id,
                  "outcome": outcome, "since": since}  # fmt: skip
        params = {k: v for k, v in wanted.items() if v} | {"limit": limit}
        found = await _admin(ctx, "GET", "/admin/v1/audit", "read the audit log", params=params)
        columns = ["id", "at", "actor", "action", "target_id", "outcome", "error"]
        report(found, as_json, "audit log", columns)
        return ExitCode.OK

    run(work)
