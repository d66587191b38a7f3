"""The knowledge graph in PostgreSQL (SPEC T-10): the extraction queue, storing what a
document's extraction found, and the per-KB reads of ``query_knowledge_graph``.

Every statement names its tenant and knowledge base. Names are matched on
``normalized_name`` by equality (the unique index) and by prefix (the
``text_pattern_ops`` index); a relation's chunk and document cascade into it, so what a
replaced or deleted document sourced goes with it, and an entity nothing mentions any
more is left out of every read and pruned at the next extraction of its KB.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import (
    ColumnElement,
    Row,
    Select,
    and_,
    delete,
    exists,
    func,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from sqlalchemy.orm import aliased
from ulid import ULID

from weft_storage.knowledge.fair_claims import running_per_tenant
from weft_storage.knowledge.models import Chunk, Document, KnowledgeBase
from weft_storage.knowledge.models_graph import (
    GraphEntity,
    GraphExtraction,
    GraphMention,
    GraphRelation,
)

MAX_NAME = 200
"""Characters of an entity name or a relation label (longer ones are cut)."""
MAX_DESCRIPTION = 1000
LONG_TOKEN = 4
"""A query word this long or longer is matched alone and as a name's prefix."""
MAX_CANDIDATES = 200
"""Exact-name candidates one query tries (word n-grams of the query)."""
MAX_PREFIXES = 8
EXTRACTION_QUEUED_STATES = ("pending", "paused", "processing")
"""States of a graph extraction job not finished yet (``paused``: its tenant is over budget)."""
_WORD = re.compile(r"\w+")


def normalize_name(name: str) -> str:
    """An entity name as it is matched: NFKC, case-folded, words joined by one space,
    punctuation dropped, at most :data:`MAX_NAME` characters."""
    words = _WORD.findall(unicodedata.normalize("NFKC", name).casefold())
    return " ".join(words)[:MAX_NAME]


@dataclass(frozen=True)
class NameProbe:
    """What a query matches names on: exact candidates and prefixes."""

    exact: list[str]
    prefixes: list[str]


def name_probe(query: str, *, max_ngram: int = 4) -> NameProbe:
    """The query itself, its word n-grams (1..``max_ngram`` words; single words only when
    long) as exact candidates, and its long words as prefixes."""
    words = normalize_name(query[: MAX_NAME * 20]).split()[:64]
    exact: dict[str, None] = {}
    whole = " ".join(words)[:MAX_NAME]
    if whole:
        exact[whole] = None
    for n in range(max_ngram, 0, -1):
        for i in range(len(words) - n + 1):
            gram = " ".join(words[i : i + n])
            if n > 1 or len(gram) >= LONG_TOKEN:
                exact[gram] = None
    longs = sorted({w for w in words if len(w) >= LONG_TOKEN}, key=len, reverse=True)
    return NameProbe(list(exact)[:MAX_CANDIDATES], longs[:MAX_PREFIXES])


@dataclass(frozen=True, kw_only=True)
class ExtractedEntity:
    """An entity the model found in one chunk."""

    name: str
    entity_type: str = ""
    description: str = ""


@dataclass(frozen=True, kw_only=True)
class ExtractedRelation:
    """A relation the model found in one chunk (entities by name)."""

    source: str
    target: str
    relation: str
    description: str = ""


@dataclass(frozen=True, kw_only=True)
class ChunkGraph:
    """What the model found in one chunk."""

    chunk_id: str
    entities: list[ExtractedEntity] = field(default_factory=list)
    relations: list[ExtractedRelation] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class ExtractionJob:
    """A claimed document to extract."""

    document_id: str
    tenant_id: str
    knowledge_base_id: str
    attempts: int


@dataclass(frozen=True, kw_only=True)
class ChunkText:
    """A chunk to read."""

    chunk_id: str
    content: str


@dataclass(frozen=True, kw_only=True)
class EntityView:
    """An entity as a query returns it."""

    name: str
    entity_type: str
    description: str


@dataclass(frozen=True, kw_only=True)
class RelationView:
    """A relation with its source chunk."""

    source: str
    relation: str
    target: str
    description: str
    chunk_id: str
    document_id: str
    title: str
    content: str


@dataclass(frozen=True, kw_only=True)
class GraphHits:
    """One knowledge base's answer to a graph query."""

    knowledge_base_id: str
    entities: list[EntityView]
    relations: list[RelationView]
    path: list[RelationView] = field(default_factory=list)
    """Relations joining the first two entities matched, when some path of at most
    three hops does and no relation shown joins them directly."""


class GraphStore:
    """Reads and writes one tenant's graph tables (every call names the tenant)."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession], *, stale_after_s: float = 300):
        self._sessions = sessions
        self._stale = timedelta(seconds=stale_after_s)

    # -- the extraction queue ---------------------------------------------------------

    async def claim(self, tenants: Sequence[str] = ()) -> ExtractionJob | None:
        """Take a pending extraction that is due (or one whose worker died), or None; of
        ``tenants`` only, when given (workers dedicated to some tenants).

        Fair across tenants, as the documents' queue is (``IngestionQueue.claim``): the job
        of the tenant with the fewest extractions running now goes first, then the one due
        first, so one tenant's backlog never holds every worker."""
        now = datetime.now(UTC)
        running = running_per_tenant(GraphExtraction, "processing", now - self._stale)
        due = or_(
            and_(
                GraphExtraction.status.in_(("pending", "paused")),
                GraphExtraction.not_before <= now,
            ),
            and_(
                GraphExtraction.status == "processing",
                GraphExtraction.updated_at < now - self._stale,
            ),
        )
        stmt = (
            select(GraphExtraction)
            .join(KnowledgeBase, KnowledgeBase.id == GraphExtraction.knowledge_base_id)
            # A KB whose graph was switched off keeps its queue; it resumes when switched on.
            .where(due, KnowledgeBase.graph_enabled.is_(True))
            .where(GraphExtraction.tenant_id.in_(list(tenants)) if tenants else true())
            .order_by(running, GraphExtraction.not_before)
            .limit(1)
            .with_for_update(of=GraphExtraction, skip_locked=True)
        )
        async with self._sessions.begin() as s:
            row = await s.scalar(stmt)
            if row is None:
                return None
            row.status, row.updated_at, row.attempts = "processing", func.now(), row.attempts + 1
            return ExtractionJob(
                document_id=row.document_id, tenant_id=row.tenant_id,
                knowledge_base_id=row.knowledge_base_id, attempts=row.attempts,
            )  # fmt: skip

    async def chunks(self, job: ExtractionJob) -> list[ChunkText]:
        """The document's chunks in reading order."""
        stmt = (
            select(Chunk.id, Chunk.content)
            .where(Chunk.tenant_id == job.tenant_id, Chunk.document_id == job.document_id)
            .order_by(Chunk.position)
        )
        async with self._sessions() as s:
            return [ChunkText(chunk_id=i, content=c) for i, c in (await s.execute(stmt)).all()]

    async def store(self, job: ExtractionJob, found: Sequence[ChunkGraph]) -> tuple[int, int]:
        """Replace what the document sourced with ``found``; mark the extraction ready;
        (entities, relations) stored. Entities of the KB that nothing mentions any more
        are pruned."""
        async with self._sessions.begin() as s:
            for table in (GraphRelation, GraphMention):
                await s.execute(
                    delete(table).where(
                        table.tenant_id == job.tenant_id, table.document_id == job.document_id
                    )
                )
            entities = relations = 0
            for chunk in found:
                ids = await self._entities(s, job, chunk)
                entities += len(ids)
                relations += await self._relations(s, job, chunk, ids)
            await self._prune(s, job.tenant_id, job.knowledge_base_id)
            await s.execute(
                update(GraphExtraction)
                .where(GraphExtraction.document_id == job.document_id)
                .values(status="ready", error=None, entity_count=entities,
                        relation_count=relations, updated_at=func.now())
            )  # fmt: skip
        return entities, relations

    async def _entities(
        self, s: AsyncSession, job: ExtractionJob, chunk: ChunkGraph
    ) -> dict[str, str]:
        """Upsert the chunk's entities; normalized name -> entity id."""
        ids: dict[str, str] = {}
        for e in chunk.entities:
            key = normalize_name(e.name)
            if not key or key in ids:
                continue
            stmt = insert(GraphEntity).values(
                id=f"ent_{ULID()}", tenant_id=job.tenant_id,
                knowledge_base_id=job.knowledge_base_id, name=e.name.strip()[:MAX_NAME],
                normalized_name=key, entity_type=e.entity_type[:64],
                description=e.description[:MAX_DESCRIPTION],
            )  # fmt: skip
            stmt = stmt.on_conflict_do_update(
                index_elements=["knowledge_base_id", "normalized_name"],
                set_={"entity_type": func.coalesce(func.nullif(GraphEntity.entity_type, ""),
                                                   stmt.excluded.entity_type)},
            )  # fmt: skip
            ids[key] = str(await s.scalar(stmt.returning(GraphEntity.id)))
            await s.execute(
                insert(GraphMention)
                .values(entity_id=ids[key], chunk_id=chunk.chunk_id, tenant_id=job.tenant_id,
                        knowledge_base_id=job.knowledge_base_id, document_id=job.document_id)
                .on_conflict_do_nothing()
            )  # fmt: skip
        return ids

    async def _relations(
        self, s: AsyncSession, job: ExtractionJob, chunk: ChunkGraph, ids: dict[str, str]
    ) -> int:
        """Store the relations whose two ends the chunk named as entities."""
        rows = []
        for r in chunk.relations:
            source, target = ids.get(normalize_name(r.source)), ids.get(normalize_name(r.target))
            if source is None or target is None or not r.relation.strip():
                continue  # a relation to an entity the model did not list: not stored
            rows.append(
                {"id": f"rel_{ULID()}", "tenant_id": job.tenant_id,
                 "knowledge_base_id": job.knowledge_base_id, "source_entity_id": source,
                 "target_entity_id": target, "relation": r.relation.strip()[:MAX_NAME],
                 "description": r.description[:MAX_DESCRIPTION], "chunk_id": chunk.chunk_id,
                 "document_id": job.document_id}
            )  # fmt: skip
        if rows:
            await s.execute(insert(GraphRelation), rows)
        return len(rows)

    @staticmethod
    async def _prune(s: AsyncSession, tenant_id: str, kb_id: str) -> None:
        mentioned = exists().where(GraphMention.entity_id == GraphEntity.id)
        await s.execute(
            delete(GraphEntity).where(
                GraphEntity.tenant_id == tenant_id,
                GraphEntity.knowledge_base_id == kb_id,
                ~mentioned,
            )
        )

    async def fail(self, job: ExtractionJob, error: str, *, retry_in_s: float | None) -> None:
        """Record a failed attempt: pending again after ``retry_in_s``, or ``failed``."""
        values: dict[str, object] = {"error": error[:2000], "updated_at": func.now()}
        if retry_in_s is None:
            values["status"] = "failed"
        else:
            values["status"] = "pending"
            values["not_before"] = datetime.now(UTC) + timedelta(seconds=retry_in_s)
        async with self._sessions.begin() as s:
            await s.execute(
                update(GraphExtraction)
                .where(GraphExtraction.document_id == job.document_id)
                .values(**values)
            )

    async def depth(self) -> dict[str, int]:
        """Extraction jobs not finished, by state (:data:`EXTRACTION_QUEUED_STATES`), over
        every tenant: what the worker's queue-depth metric reports."""
        query = (
            select(GraphExtraction.status, func.count())
            .where(GraphExtraction.status.in_(EXTRACTION_QUEUED_STATES))
            .group_by(GraphExtraction.status)
        )
        async with self._sessions() as s:
            found = {str(k): int(n) for k, n in (await s.execute(query)).all()}
        return {state: found.get(state, 0) for state in EXTRACTION_QUEUED_STATES}

    async def pause(self, job: ExtractionJob, reason: str, *, until: datetime) -> None:
        """Put the job back, ``paused`` with ``reason`` until ``until`` (its tenant is over
        a token budget); the attempt does not count."""
        async with self._sessions.begin() as s:
            await s.execute(
                update(GraphExtraction)
                .where(GraphExtraction.document_id == job.document_id)
                .values(status="paused", error=reason[:2000], not_before=until,
                        attempts=job.attempts - 1, updated_at=func.now())
            )  # fmt: skip

    async def progress(self, tenant_id: str, kb_id: str) -> dict[str, int]:
        """The KB's extractions by status, its (mentioned) entities and its relations."""
        by_status = (
            select(GraphExtraction.status, func.count())
            .where(GraphExtraction.tenant_id == tenant_id,
                   GraphExtraction.knowledge_base_id == kb_id)
            .group_by(GraphExtraction.status)
        )  # fmt: skip
        entities = select(func.count()).where(
            GraphEntity.tenant_id == tenant_id, GraphEntity.knowledge_base_id == kb_id,
            exists().where(GraphMention.entity_id == GraphEntity.id),
        )  # fmt: skip
        relations = select(func.count()).where(
            GraphRelation.tenant_id == tenant_id, GraphRelation.knowledge_base_id == kb_id
        )
        async with self._sessions() as s:
            counts = {str(k): int(n) for k, n in (await s.execute(by_status)).all()}
            found = {
                "entities": int((await s.execute(entities)).scalar_one()),
                "relations": int((await s.execute(relations)).scalar_one()),
            }
        states = ("pending", "paused", "processing", "ready", "failed")
        return {**{f"documents_{k}": counts.get(k, 0) for k in states}, **found}

    # -- reads ---------------------------------------------------------------------

    async def graph_enabled(self, tenant_id: str, kb_ids: Sequence[str]) -> dict[str, bool]:
        """The tenant's KBs among ``kb_ids`` -> whether each has a graph (others absent)."""
        stmt = select(KnowledgeBase.id, KnowledgeBase.graph_enabled).where(
            KnowledgeBase.tenant_id == tenant_id, KnowledgeBase.id.in_(list(kb_ids))
        )
        async with self._sessions() as s:
            return {i: bool(g) for i, g in (await s.execute(stmt)).all()}

    async def query(
        self, tenant_id: str, kb_id: str, query: str, *, entities: int = 10, relations: int = 20
    ) -> GraphHits:
        """Entities of one KB whose name the query holds (or starts one of its long words),
        then their relations with each relation's source chunk, relations among the
        matched entities first."""
        probe = name_probe(query)
        async with self._sessions() as s:
            matched = await self._match(s, tenant_id, kb_id, probe, entities)
            ids = [m[0] for m in matched]
            rels = await self._relations_of(s, tenant_id, kb_id, ids, relations) if ids else []
            path: list[RelationView] = []
            if len(ids) >= 2 and not _joined(rels, matched[0][1].name, matched[1][1].name):
                path = await self._path(s, tenant_id, kb_id, ids[0], ids[1])
        return GraphHits(
            knowledge_base_id=kb_id, entities=[m[1] for m in matched], relations=rels, path=path
        )

    async def _match(
        self, s: AsyncSession, tenant_id: str, kb_id: str, probe: NameProbe, limit: int
    ) -> list[tuple[str, EntityView]]:
        """Entities named exactly by the query or one of its n-grams, the longest first;
        only when none is, entities whose name starts with one of its long words (a
        common word would otherwise bury the named entity under its namesakes)."""
        name = GraphEntity.normalized_name
        found = []
        if probe.exact:
            found = await self._entities_where(s, tenant_id, kb_id, name.in_(probe.exact), limit)
        if not found and probe.prefixes:
            starts = or_(*(name.startswith(p, autoescape=True) for p in probe.prefixes))
            found = await self._entities_where(s, tenant_id, kb_id, starts, limit)
        return found

    @staticmethod
    async def _entities_where(
        s: AsyncSession, tenant_id: str, kb_id: str, hit: ColumnElement[bool], limit: int
    ) -> list[tuple[str, EntityView]]:
        name = GraphEntity.normalized_name
        stmt = (
            select(GraphEntity.id, GraphEntity.name, GraphEntity.entity_type,
                   GraphEntity.description)
            .where(GraphEntity.tenant_id == tenant_id, GraphEntity.knowledge_base_id == kb_id,
                   hit, exists().where(GraphMention.entity_id == GraphEntity.id))
            .order_by(func.length(name).desc(), GraphEntity.id)
            .limit(limit)
        )  # fmt: skip
        rows = (await s.execute(stmt)).all()
        return [
            (r.id, EntityView(name=r.name, entity_type=r.entity_type, description=r.description))
            for r in rows
        ]

    async def _relations_of(
        self, s: AsyncSession, tenant_id: str, kb_id: str, ids: list[str], limit: int
    ) -> list[RelationView]:
        src, dst = aliased(GraphEntity), aliased(GraphEntity)
        both = and_(
            GraphRelation.source_entity_id.in_(ids), GraphRelation.target_entity_id.in_(ids)
        )
        stmt = (
            _relation_columns(src, dst)
            .where(GraphRelation.tenant_id == tenant_id,
                   GraphRelation.knowledge_base_id == kb_id,
                   or_(GraphRelation.source_entity_id.in_(ids),
                       GraphRelation.target_entity_id.in_(ids)))
            .order_by(both.desc(), GraphRelation.id)
            .limit(limit)
        )  # fmt: skip
        return [_relation(r) for r in (await s.execute(stmt)).all()]

    async def _path(
        self, s: AsyncSession, tenant_id: str, kb_id: str, start: str, goal: str
    ) -> list[RelationView]:
        """The relations of a shortest path of at most three hops between ``start`` and
        ``goal`` (relations read in both directions), or none. Meet in the middle: the
        neighbours of each end (at most :data:`MAX_NEIGHBOURS`, through the entity-id
        indexes), then a shared neighbour (two hops) or one relation joining a neighbour
        of each (three hops). A recursive walk from one end measured 2 s and more on
        10,000 entities: through a hub its frontier grows with the hub's degree at every
        hop (docs/knowledge.md, "Knowledge graph")."""
        near_start = await self._neighbours(s, tenant_id, kb_id, start)
        if goal in near_start:
            rel_ids = [near_start[goal]]
        else:
            near_goal = await self._neighbours(s, tenant_id, kb_id, goal)
            shared = next((n for n in near_start if n in near_goal), None)
            if shared is not None:
                rel_ids = [near_start[shared], near_goal[shared]]
            else:
                rel_ids = await self._bridge(s, tenant_id, kb_id, near_start, near_goal)
        if not rel_ids:
            return []
        src, dst = aliased(GraphEntity), aliased(GraphEntity)
        stmt = _relation_columns(src, dst).where(
            GraphRelation.tenant_id == tenant_id, GraphRelation.id.in_(list(rel_ids))
        )
        by_id = {r.id: _relation(r) for r in (await s.execute(stmt)).all()}
        return [by_id[i] for i in rel_ids if i in by_id]

    @staticmethod
    async def _neighbours(s: AsyncSession, tenant_id: str, kb_id: str, node: str) -> dict[str, str]:
        """Entities one relation away from ``node`` -> that relation's id."""
        stmt = (
            select(GraphRelation.id, GraphRelation.source_entity_id,
                   GraphRelation.target_entity_id)
            .where(GraphRelation.tenant_id == tenant_id,
                   GraphRelation.knowledge_base_id == kb_id,
                   or_(GraphRelation.source_entity_id == node,
                       GraphRelation.target_entity_id == node))
            .limit(MAX_NEIGHBOURS)
        )  # fmt: skip
        found: dict[str, str] = {}
        for rel, src, dst in (await s.execute(stmt)).all():
            found.setdefault(dst if src == node else src, rel)
        found.pop(node, None)
        return found

    @staticmethod
    async def _bridge(
        s: AsyncSession, tenant_id: str, kb_id: str, near_start: dict[str, str],
        near_goal: dict[str, str],
    ) -> list[str]:  # fmt: skip
        """[start->x, x-y, y->goal] for one relation joining a neighbour x of the start
        and a neighbour y of the goal, or []."""
        a, b = list(near_start), list(near_goal)
        if not a or not b:
            return []
        src, dst = GraphRelation.source_entity_id, GraphRelation.target_entity_id
        stmt = (
            select(GraphRelation.id, src, dst)
            .where(GraphRelation.tenant_id == tenant_id,
                   GraphRelation.knowledge_base_id == kb_id,
                   or_(and_(src.in_(a), dst.in_(b)), and_(src.in_(b), dst.in_(a))))
            .limit(1)
        )  # fmt: skip
        row = (await s.execute(stmt)).first()
        if row is None:
            return []
        rel, x, y = row
        if x not in near_start:
            x, y = y, x
        return [near_start[x], rel, near_goal[y]]


MAX_NEIGHBOURS = 1000
"""Relations read around each end of a path search (a hub's others are not followed)."""


RelationSelect = Select[str, str, str, str, str, str, str, str, str]
"""A relation's id, ends, label, description, chunk, document, title and chunk text."""


def _relation_columns(src: type[GraphEntity], dst: type[GraphEntity]) -> RelationSelect:
    stmt: RelationSelect = (
        select(GraphRelation.id, src.name.label("source"), GraphRelation.relation,
               dst.name.label("target"), GraphRelation.description, GraphRelation.chunk_id,
               GraphRelation.document_id, Document.title, Chunk.content)
        .join(src, src.id == GraphRelation.source_entity_id)
        .join(dst, dst.id == GraphRelation.target_entity_id)
        .join(Chunk, Chunk.id == GraphRelation.chunk_id)
        .join(Document, Document.id == GraphRelation.document_id)
    )  # fmt: skip
    return stmt


def _relation(r: Row[str, str, str, str, str, str, str, str, str]) -> RelationView:
    return RelationView(
        source=r.source, relation=r.relation, target=r.target, description=r.description,
        chunk_id=r.chunk_id, document_id=r.document_id, title=r.title, content=r.content,
    )  # fmt: skip


def _joined(rels: list[RelationView], a: str, b: str) -> bool:
    return any({r.source, r.target} == {a, b} for r in rels)
