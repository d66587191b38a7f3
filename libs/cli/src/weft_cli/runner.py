"""Running one command: the shared options of the root command, and the one place where a
command's coroutine runs and its failure becomes a message on stderr and an exit code."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import typer
from pydantic import SecretStr, ValidationError
from rich.markup import escape

from weft_cli.outcome import CommandFailed, ExitCode
from weft_cli.output import err
from weft_cli.settings import ApiSettings, KafkaSettings, kafka_settings


@dataclass(frozen=True)
class Options:
    """The root command's options (flags over the environment)."""

    api_url: str | None = None
    api_key: str | None = None
    admin_token: str | None = None
    kafka_bootstrap: str | None = None
    prefix: str | None = None

    def api(self) -> ApiSettings:
        """The gateway settings: environment, then these flags."""
        try:
            settings = ApiSettings()
        except ValidationError as exc:
            raise CommandFailed(f"settings: {exc.errors()[0]['msg']}", ExitCode.USAGE) from exc
        changes: dict[str, Any] = {}
        if self.api_url:
            changes["api_url"] = self.api_url
        if self.api_key:
            changes["api_key"] = SecretStr(self.api_key)
        if self.admin_token:
            changes["admin_token"] = SecretStr(self.admin_token)
        return settings.model_copy(update=changes)

    def kafka(self) -> KafkaSettings:
        """The Kafka settings: environment, then these flags."""
        return kafka_settings(self.kafka_bootstrap, self.prefix)


def options(ctx: typer.Context) -> Options:
    """The root options of this invocation."""
    found = ctx.find_root().obj
    return found if isinstance(found, Options) else Options()


def run(work: Callable[[], Coroutine[Any, Any, ExitCode | None]]) -> None:
    """Run a command's coroutine; exit with its code, or with the failure's."""
    try:
        code = asyncio.run(work())
    except CommandFailed as exc:
        err.print(f"[red]error:[/] {escape(exc.message)}")
        raise typer.Exit(int(exc.code)) from None
    except (KeyboardInterrupt, asyncio.CancelledError):
        err.print("[yellow]interrupted[/]")
        raise typer.Exit(int(ExitCode.INTERRUPTED)) from None
    except Exception as exc:  # a bug or an answer of a shape we did not expect
        if os.environ.get("WEFT_CLI_DEBUG"):
            raise
        err.print(
            f"[red]error:[/] unexpected {type(exc).__name__}: {escape(str(exc)[:500])} "
            "(WEFT_CLI_DEBUG=1 shows the traceback)"
        )
        raise typer.Exit(int(ExitCode.FAILED)) from None
    if code:
        raise typer.Exit(int(code))
