"""Wiki and graph progress on ``weft.session.notices.v1`` (ARCHITECTURE "Topics":
knowledge writes session notices; SPEC T-18, T-10).

A document's wiki generation and graph extraction run long after its upload answered.
When the upload named a session (``session_id`` of the public upload routes, checked by
the gateway to be the caller's own), each attempt's end (``done``, ``retrying``,
``paused``, ``failed``) is announced there as a ``knowledge_progress`` notice with the
knowledge base's counts, and the gateway's notices group copies it into that session's
stream. A document uploaded without a session (or queued by a KB switched on later) gets
none: its progress stays on the KB's reads, which show it in any case.

A notice is signed with knowledge's own service credential, scoped
``records:weft.session.notices.v1`` (the worker holds no request credential of the
uploader). Publishing is best effort: a broker that is away costs the notice, never the
document's work (its status is stored before the notice is sent).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Protocol

import structlog
from weft_contracts import (
    KnowledgeProgress,
    KnowledgeProgressData,
    KnowledgeProgressState,
    KnowledgeStage,
    Topic,
)
from weft_platform.bus import EventBus
from weft_storage.knowledge.documents import DocumentReader

log = structlog.get_logger(__name__)

StageCounts = tuple[dict[str, int], dict[str, int]]
"""The KB's documents of one stage by status, and what it holds (pages, entities...)."""


class DocumentJob(Protocol):
    """What a claimed wiki or graph job names."""

    @property
    def tenant_id(self) -> str:
        """The document's tenant."""
        ...

    @property
    def knowledge_base_id(self) -> str:
        """Its knowledge base."""
        ...

    @property
    def document_id(self) -> str:
        """The document."""
        ...


class ProgressNotices:
    """Announces the end of a document's wiki or graph attempts to its upload's session."""

    def __init__(
        self, bus: EventBus, origins: DocumentReader, credential: Callable[[], str]
    ):  # fmt: skip
        """``credential``: knowledge's service credential for records of the notices topic."""
        self._bus = bus
        self._origins = origins
        self._credential = credential

    async def announce(
        self,
        job: DocumentJob,
        stage: KnowledgeStage,
        state: KnowledgeProgressState,
        counts: Callable[[], Awaitable[StageCounts]],
        *,
        reason: str = "",
        resumes_at: datetime | None = None,
    ) -> bool:
        """Publish the notice when the upload named a session; True when one was sent."""
        try:
            origin = await self._origins.origin(job.tenant_id, job.document_id)
            if origin is None or origin.session_id is None:
                return False
            documents, totals = await counts()
            notice = KnowledgeProgress(
                tenant_id=job.tenant_id,
                session_id=origin.session_id,
                request_id=job.document_id,
                credential=self._credential(),
                data=KnowledgeProgressData(
                    knowledge_base_id=job.knowledge_base_id, document_id=job.document_id,
                    stage=stage, state=state, reason=reason[:1000], resumes_at=resumes_at,
                    documents=documents, totals=totals,
                ),
            )  # fmt: skip
            await self._bus.publish(Topic.SESSION_NOTICES, notice)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the broker or database away: the KB still shows it
            log.warning(
                "knowledge_progress_unsent", document_id=job.document_id, stage=stage,
                state=state, error=repr(exc),
            )  # fmt: skip
            return False
        return True
