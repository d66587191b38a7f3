"""``weft kb``: create knowledge bases, list them and their documents, ingest files with a
progress bar per file (public API, ``WEFT_API_KEY``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from weft_cli.gateway import gateway
from weft_cli.ingestion import check_files, ingest
from weft_cli.outcome import ExitCode
from weft_cli.output import out, print_json, report
from weft_cli.runner import options, run

kb = typer.Typer(help="Knowledge bases: create, list, ingest files.", no_args_is_help=True)
Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


@kb.command("create")
def create(
    ctx: typer.Context,
    name: str,
    description: Annotated[str, typer.Option()] = "",
    as_json: Json = False,
) -> None:
    """Create a knowledge base; prints its id."""

    async def work() -> ExitCode:
        async with gateway(options(ctx).api(), "api_key") as gw:
            made = await gw.call("POST", "/api/v1/knowledge-bases", f"create {name!r}",
                                 json={"name": name, "description": description})  # fmt: skip
        if as_json:
            print_json(made)
        else:
            out.print(made["id"])
        return ExitCode.OK

    run(work)


@kb.command("ls")
def ls(
    ctx: typer.Context,
    kb_id: Annotated[str | None, typer.Argument(help="List this base's documents.")] = None,
    as_json: Json = False,
) -> None:
    """List knowledge bases, or one base's documents with their ingestion status."""

    async def work() -> ExitCode:
        async with gateway(options(ctx).api(), "api_key") as gw:
            if kb_id is None:
                bases = await gw.call("GET", "/api/v1/knowledge-bases", "list knowledge bases")
                report(bases, as_json, "knowledge bases", ["id", "name", "description"])
                return ExitCode.OK
            page = await gw.call("GET", f"/api/v1/knowledge-bases/{kb_id}/documents",
                                 f"documents of {kb_id}", params={"page_size": 100})  # fmt: skip
        columns = ["id", "title", "status", "chunk_count", "embedded_count", "error"]
        report(page["items"], as_json, f"documents of {kb_id} ({page['total']} in all)", columns)
        return ExitCode.OK

    run(work)


@kb.command("ingest")
def ingest_files(
    ctx: typer.Context,
    kb_id: str,
    paths: Annotated[list[Path], typer.Argument(help="txt, md, csv, xlsx or pdf files.")],
    timeout: Annotated[float, typer.Option(min=1, help="Seconds to wait for all files.")] = 600,
    as_json: Json = False,
) -> None:
    """Upload files and wait until each is ingested or failed (exit 1 if any failed or
    was not done in time)."""

    async def work() -> ExitCode:
        check_files(paths)
        async with gateway(options(ctx).api(), "api_key") as gw:
            results = await ingest(gw, kb_id, paths, timeout, show=not as_json)
        if as_json:
            print_json([r.as_dict() for r in results])
        else:
            for r in results:
                state = f"{r.status}: {r.error}" if r.error else r.status
                out.print(f"{r.file}: {state} ({r.embedded_count}/{r.chunk_count} chunks embedded,"
                          f" document {r.document_id})")  # fmt: skip
        return ExitCode.OK if all(r.status == "ready" for r in results) else ExitCode.FAILED

    run(work)
