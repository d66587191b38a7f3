"""The ``weft`` command: one typer application, its root options, and ``weft chat``.

Exit codes are :class:`weft_cli.outcome.ExitCode` (docs/cli.md, "Exit codes")."""

from __future__ import annotations

from typing import Annotated

import typer

from weft_cli.admin_commands import admin
from weft_cli.chat_turn import ApprovalMode, ChatRequest, chat
from weft_cli.gateway import gateway
from weft_cli.kafka_commands import dlq, lag, topics
from weft_cli.kb_commands import kb
from weft_cli.outcome import ExitCode
from weft_cli.runner import Options, options, run

app = typer.Typer(
    name="weft",
    help="Weft's command line: chat with an agent, knowledge bases, tenant administration, "
    "dead letters, consumer lag and topics. Settings come from WEFT_* variables "
    "(docs/cli.md); exit codes: 0 ok, 1 failed, 2 usage, 3 refused (auth), 4 unreachable, "
    "130 interrupted.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)
app.add_typer(kb, name="kb")
app.add_typer(admin, name="admin")
app.add_typer(dlq, name="dlq")
app.add_typer(topics, name="topics")
app.command("lag")(lag)


@app.callback()
def root(
    ctx: typer.Context,
    api_url: Annotated[str | None, typer.Option(help="Gateway URL (env WEFT_API_URL).")] = None,
    api_key: Annotated[
        str | None,
        typer.Option(help="Tenant API key; prefer env WEFT_API_KEY (a flag shows in ps)."),
    ] = None,
    admin_token: Annotated[
        str | None, typer.Option(help="Operator token; prefer env WEFT_ADMIN_TOKEN.")
    ] = None,
    kafka_bootstrap: Annotated[
        str | None, typer.Option(help="Kafka bootstrap (env WEFT_KAFKA_BOOTSTRAP).")
    ] = None,
    prefix: Annotated[
        str | None, typer.Option(help="Topic prefix of the deployment (env WEFT_TOPIC_PREFIX).")
    ] = None,
) -> None:
    """Weft's command line."""
    ctx.obj = Options(api_url, api_key, admin_token, kafka_bootstrap, prefix)


@app.command("chat")
def chat_command(
    ctx: typer.Context,
    query: Annotated[str | None, typer.Argument(help="The message (omit with --resume).")] = None,
    session: Annotated[
        str | None, typer.Option(help="Continue this session (default: a new one).")
    ] = None,
    agent: Annotated[
        str | None, typer.Option(help="Agent id, e.g. builtin-smart-reasoning.")
    ] = None,
    kb_ids: Annotated[
        list[str] | None, typer.Option("--kb", help="Knowledge base to search (repeat).")
    ] = None,
    approvals: Annotated[
        str, typer.Option(help="Approval prompts: ask (on a terminal), approve, deny or wait.")
    ] = "ask",
    resume: Annotated[bool, typer.Option(help="Rejoin the session's running turn.")] = False,
    last_event_id: Annotated[
        str | None, typer.Option(help="With --resume: after this event.")
    ] = None,
    reconnects: Annotated[
        int, typer.Option(min=0, max=100, help="Resumes in a row after a cut.")
    ] = 5,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON line per event.")] = False,
) -> None:
    """Send a message and stream the turn: thoughts, tool calls, the answer as Markdown.
    Ctrl-C stops the turn (a second one quits at once); a cut connection is resumed
    where it stopped; approval prompts are answered as --approvals says."""
    if approvals not in ("ask", "approve", "deny", "wait"):
        raise typer.BadParameter("one of ask, approve, deny, wait", param_hint="--approvals")
    if resume == (query is not None):
        raise typer.BadParameter("give a message, or --resume with --session (not both)")
    if resume and not session:
        raise typer.BadParameter("--resume needs --session")
    mode: ApprovalMode = approvals  # type: ignore[assignment]  # checked above
    request = ChatRequest(
        query=query, session_id=session, agent_id=agent, knowledge_base_ids=kb_ids or [],
        approvals=mode, as_json=as_json, reconnects=reconnects, last_event_id=last_event_id,
    )  # fmt: skip

    async def work() -> ExitCode:
        async with gateway(options(ctx).api(), "api_key") as gw:
            return await chat(gw, request)

    run(work)


def main() -> None:
    """The console script."""
    app()
