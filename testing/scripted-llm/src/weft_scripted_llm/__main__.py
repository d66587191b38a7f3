"""Command line: `weft-scripted-llm serve [--host] [--port] [--script PATH] [--policy]`."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer
import uvicorn

from weft_scripted_llm.app import create_app
from weft_scripted_llm.settings import PolicyName, Settings

cli = typer.Typer(
    help="Weft scripted LLM: an OpenAI-compatible TEST DOUBLE (not a real model).",
    add_completion=False,
)


@cli.callback()
def _group() -> None:
    """Weft scripted LLM test double."""


def resolve_policy(policy: PolicyName | None, script: Path | None) -> PolicyName:
    """`script` when a script file is given, else `demo`, unless chosen explicitly."""
    if policy is not None:
        return policy
    return "script" if script is not None else "demo"


@cli.command()
def serve(
    host: Annotated[str, typer.Option(envvar="SCRIPTED_LLM_HOST")] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="SCRIPTED_LLM_PORT")] = 8089,
    script: Annotated[
        Path | None,
        typer.Option(envvar="SCRIPTED_LLM_SCRIPT", exists=True, dir_okay=False, readable=True),
    ] = None,
    policy: Annotated[
        PolicyName | None,
        typer.Option(envvar="SCRIPTED_LLM_POLICY", help="demo (default) or script"),
    ] = None,
    embedding_dimensions: Annotated[int, typer.Option(min=1, max=8192)] = 256,
    log_level: Annotated[str, typer.Option()] = "info",
) -> None:
    """Serve the OpenAI-compatible test double over HTTP."""
    settings = Settings(
        host=host,
        port=port,
        script_path=script,
        policy=resolve_policy(policy, script),
        embedding_dimensions=embedding_dimensions,
    )
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(name)s %(message)s")
    uvicorn.run(create_app(settings), host=host, port=port, log_level=log_level.lower())


def main() -> None:
    cli()


if __name__ == "__main__":
    main()
