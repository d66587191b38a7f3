"""``weft dlq``, ``weft lag`` and ``weft topics``: Kafka operations, each under its own
principal (``weft-dlq-replay``, ``weft-ops-lag``, ``weft-ops-topics``), logged in with
``WEFT_KAFKA_USERNAME``/``WEFT_KAFKA_PASSWORD``."""

from __future__ import annotations

import os
from typing import Annotated, Any

import typer
from rich.markup import escape
from weft_platform.kafka_acls import CONSUMER_GROUPS

from weft_cli.dead_letters import NotReplayable, Replay, StoredLetter, detail, replay_of, summary
from weft_cli.dlq_log import publish, read_letters
from weft_cli.lag_report import lag_rows, totals
from weft_cli.outcome import CommandFailed, ExitCode
from weft_cli.output import cell, clean, err, out, print_json, report, to_json
from weft_cli.runner import options, run
from weft_cli.topic_admin import REPARTITION_WARNING, add_partitions, describe, ensure, resolve

Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]

dlq = typer.Typer(
    help="Dead letters: list, show, replay (as weft-dlq-replay). A replayed record keeps its "
    "envelope, id, time and credential; consumers drop one they handled already.",
    no_args_is_help=True,
)
topics = typer.Typer(
    help="Weft's topics (as weft-ops-topics): list, create the missing ones, add partitions.",
    no_args_is_help=True,
)


@dlq.command("ls")
def dlq_ls(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option(min=1, help="Show the newest N.")] = 50,
    as_json: Json = False,
) -> None:
    """List dead letters: where they came from, why, and whether they can be replayed."""

    async def work() -> ExitCode:
        letters = await read_letters(options(ctx).kafka())
        rows = [summary(s) for s in _newest(letters)[:limit]]
        columns = ["id", "position", "dead_lettered_at", "source_topic", "consumer_group",
                   "reason", "replayable"]  # fmt: skip
        report(rows, as_json, f"dead letters ({len(letters)} in all, newest first)", columns)
        return ExitCode.OK

    run(work)


@dlq.command("show")
def dlq_show(
    ctx: typer.Context,
    letter_id: Annotated[str, typer.Argument(help="Its id, or partition:offset.")],
    as_json: Json = False,
) -> None:
    """Show one dead letter and its record."""

    async def work() -> ExitCode:
        (stored,) = _find(await read_letters(options(ctx).kafka()), [letter_id])
        shown = detail(stored)
        if as_json:
            print_json(shown)
            return ExitCode.OK
        record = shown.pop("record", None)
        for name, value in shown.items():
            out.print(f"[bold]{name}[/]: {escape(cell(value, 2000))}")
        if record is not None:
            out.print("[bold]record[/]:")
            out.print(
                escape(clean(to_json(record) if isinstance(record, dict) else str(record))[:20_000])
            )
        return ExitCode.OK

    run(work)


@dlq.command("replay")
def dlq_replay(
    ctx: typer.Context,
    letter_ids: Annotated[list[str] | None, typer.Argument(help="Ids or partition:offset.")] = None,
    every: Annotated[bool, typer.Option("--all", help="Every replayable dead letter.")] = False,
    as_json: Json = False,
) -> None:
    """Put dead letters back on the topic they came from, unchanged. A letter that cannot
    go back (undecodable, cut, forged, of a topic only its producer writes) is refused
    with the reason; exit 1 if any was refused."""
    if not letter_ids and not every:
        raise typer.BadParameter("name dead letters to replay, or --all")

    async def work() -> ExitCode:
        settings = options(ctx).kafka()
        letters = await read_letters(settings)
        chosen = letters if every else _find(letters, letter_ids or [])
        outcomes, ready = _checked(chosen, skip_refused=every)
        if ready:
            await publish(settings, ready)
        report(outcomes, as_json, "replay", ["id", "status", "topic", "envelope_id", "reason"])
        refused = [o for o in outcomes if o["status"] == "refused"]
        return ExitCode.FAILED if refused and not every else ExitCode.OK

    run(work)


def _checked(
    chosen: list[StoredLetter], skip_refused: bool
) -> tuple[list[dict[str, Any]], list[tuple[StoredLetter, Replay]]]:
    outcomes: list[dict[str, Any]] = []
    ready: list[tuple[StoredLetter, Replay]] = []
    for stored in chosen:
        try:
            replay = replay_of(stored)
        except NotReplayable as exc:
            status = "skipped" if skip_refused else "refused"
            outcomes.append({"id": stored.id, "status": status, "topic": None,
                             "envelope_id": None, "reason": str(exc)})  # fmt: skip
            continue
        ready.append((stored, replay))
        outcomes.append({"id": stored.id, "status": "replayed", "topic": replay.topic.value,
                         "envelope_id": replay.envelope_id, "reason": None})  # fmt: skip
    return outcomes, ready


def _newest(letters: list[StoredLetter]) -> list[StoredLetter]:
    return sorted(letters, key=lambda s: (s.timestamp_ms, s.partition, s.offset), reverse=True)


def _find(letters: list[StoredLetter], wanted: list[str]) -> list[StoredLetter]:
    found = []
    for name in wanted:
        match = next((s for s in letters if s.matches(name)), None)
        if match is None:
            raise CommandFailed(f"no dead letter {name[:100]!r} (weft dlq ls lists them)")
        found.append(match)
    return found


def lag(
    ctx: typer.Context,
    group: Annotated[
        list[str] | None, typer.Option("--group", help="Only this group (repeat).")
    ] = None,
    as_json: Json = False,
) -> None:
    """Consumer lag per group, topic and partition (as weft-ops-lag: offsets only)."""
    groups = group or sorted(CONSUMER_GROUPS)
    unknown = sorted(set(groups) - CONSUMER_GROUPS)
    if unknown:
        raise typer.BadParameter(f"unknown group {unknown[0]!r}; one of {sorted(CONSUMER_GROUPS)}")

    async def work() -> ExitCode:
        rows = await lag_rows(options(ctx).kafka(), groups)
        if as_json:
            print_json({"partitions": rows, "total_by_group": totals(rows)})
            return ExitCode.OK
        report(
            rows, False, "consumer lag", ["group", "topic", "partition", "committed", "end", "lag"]
        )
        for name, total in sorted(totals(rows).items()):
            out.print(f"{name}: {total}")
        return ExitCode.OK

    run(work)


@topics.command("ls")
def topics_ls(ctx: typer.Context, as_json: Json = False) -> None:
    """Weft's topics of the deployment and their partitions."""

    async def work() -> ExitCode:
        rows = await describe(options(ctx).kafka())
        report(rows, as_json, "topics", ["topic", "exists", "partitions"])
        return ExitCode.OK

    run(work)


@topics.command("ensure")
def topics_ensure(ctx: typer.Context, as_json: Json = False) -> None:
    """Create the deployment's missing topics (WEFT_TOPIC_PARTITIONS[_<NAME>],
    WEFT_TOPIC_REPLICATION_FACTOR, WEFT_TOPIC_MIN_INSYNC_REPLICAS). ACLs are the topics
    job's (python -m weft_platform.topics ensure, as the super user)."""

    async def work() -> ExitCode:
        rows = await ensure(options(ctx).kafka(), dict(os.environ))
        report(rows, as_json, "topics", ["topic", "action", "partitions"])
        return ExitCode.OK

    run(work)


@topics.command(
    "add-partitions",
    help=f"Raise a topic's partitions to TOTAL. {REPARTITION_WARNING} Refused without --yes.",
)
def topics_add_partitions(
    ctx: typer.Context,
    topic: Annotated[str, typer.Argument(help="e.g. agent.requests or weft.agent.requests.v1")],
    total: Annotated[int, typer.Option("--to", min=2, help="Partitions in all afterwards.")],
    yes: Annotated[bool, typer.Option("--yes", help="Sessions are drained: go ahead.")] = False,
    as_json: Json = False,
) -> None:
    chosen = resolve_or_usage(topic)
    err.print(f"[yellow]{REPARTITION_WARNING}[/]")
    if not yes:
        err.print("[red]refused:[/] add --yes once the sessions are drained")
        raise typer.Exit(int(ExitCode.USAGE))

    async def work() -> ExitCode:
        done = await add_partitions(options(ctx).kafka(), chosen, total)
        if as_json:
            print_json(done)
        else:
            out.print(
                f"{done['topic']}: {done['partitions_before']} -> {done['partitions']} partitions"
            )
        return ExitCode.OK

    run(work)


def resolve_or_usage(name: str) -> Any:
    """:func:`resolve`, its failure printed as a usage error."""
    try:
        return resolve(name)
    except CommandFailed as exc:
        err.print(f"[red]error:[/] {escape(exc.message)}")
        raise typer.Exit(int(exc.code)) from None
