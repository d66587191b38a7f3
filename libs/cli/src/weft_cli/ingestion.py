"""``weft kb ingest``: upload files to a knowledge base and follow each document until it is
ingested (``ready``) or ``failed``, with a progress bar per file (chunks embedded out of
the document's chunks, as knowledge reports them)."""

from __future__ import annotations

import asyncio
import mimetypes
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn

from weft_cli.gateway import Gateway
from weft_cli.outcome import CommandFailed, ExitCode
from weft_cli.output import err

POLL_S = 0.5
FINAL = ("ready", "failed")


@dataclass
class Ingested:
    """One file's outcome (and the progress it was seen at)."""

    file: str
    document_id: str | None = None
    status: str = "not sent"
    chunk_count: int = 0
    embedded_count: int = 0
    error: str | None = None
    seen: list[tuple[str, int, int]] = field(default_factory=list)
    """(status, embedded, chunks) each time one of them changed."""

    def as_dict(self) -> dict[str, Any]:
        """The JSON of ``weft kb ingest --json``."""
        return {"file": self.file, "document_id": self.document_id, "status": self.status,
                "chunk_count": self.chunk_count, "embedded_count": self.embedded_count,
                "error": self.error, "progress": [list(s) for s in self.seen]}  # fmt: skip


def check_files(paths: list[Path]) -> None:
    """Every path a readable, non-empty file: a usage error before anything is sent."""
    for path in paths:
        if not path.is_file():
            raise CommandFailed(f"{path}: not a file", ExitCode.USAGE)
        if path.stat().st_size == 0:
            raise CommandFailed(f"{path}: empty file", ExitCode.USAGE)


async def ingest(
    gw: Gateway, kb_id: str, paths: list[Path], timeout_s: float, show: bool
) -> list[Ingested]:
    """Upload every file, then follow them all until each is ready or failed (or the
    timeout passes: those are reported with their last status)."""
    results = [Ingested(p.name) for p in paths]
    progress = Progress(
        TextColumn("{task.fields[file]}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[status]}"), console=err, disable=not show,
    )  # fmt: skip
    with progress:
        tasks = [
            progress.add_task("", total=None, file=r.file, status="uploading") for r in results
        ]
        for path, result, task in zip(paths, results, tasks, strict=True):
            queued = await _upload(gw, kb_id, path)
            result.document_id, result.status = str(queued["id"]), str(queued.get("status", ""))
            progress.update(task, status=result.status)
        await _follow(gw, kb_id, results, progress, tasks, timeout_s)
    return results


async def _upload(gw: Gateway, kb_id: str, path: Path) -> dict[str, Any]:
    kind = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    content = await asyncio.to_thread(path.read_bytes)
    files = {"file": (path.name, content, kind)}
    queued: dict[str, Any] = await gw.call(
        "POST", f"/api/v1/knowledge-bases/{kb_id}/files", f"upload {path.name}", files=files
    )
    return queued


async def _follow(
    gw: Gateway, kb_id: str, results: list[Ingested], progress: Progress,
    tasks: list[TaskID], timeout_s: float,
) -> None:  # fmt: skip
    deadline = time.monotonic() + timeout_s
    while any(r.status not in FINAL for r in results) and time.monotonic() < deadline:
        for result, task in zip(results, tasks, strict=True):
            if result.status in FINAL:
                continue
            doc = await gw.call(
                "GET", f"/api/v1/knowledge-bases/{kb_id}/documents/{result.document_id}",
                f"document {result.document_id}",
            )  # fmt: skip
            _note(result, doc)
            total = result.chunk_count or None
            status = result.status + (f": {result.error}" if result.error else "")
            progress.update(task, total=total, completed=result.embedded_count, status=status)
        await asyncio.sleep(POLL_S)


def _note(result: Ingested, doc: dict[str, Any]) -> None:
    result.status = str(doc.get("status", "?"))
    result.chunk_count = int(doc.get("chunk_count") or 0)
    result.embedded_count = int(doc.get("embedded_count") or 0)
    result.error = doc.get("error")
    state = (result.status, result.embedded_count, result.chunk_count)
    if not result.seen or result.seen[-1] != state:
        result.seen.append(state)
