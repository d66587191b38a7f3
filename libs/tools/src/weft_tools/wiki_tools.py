"""The wiki tools (SPEC T-18): search, read, write, replace, rename, delete, and issues.

Each asks knowledge's wiki routes with the turn's credential, in the conversation's
knowledge bases. The model sees slugs and session handles, never a stored id (E-22): a
page read or found is ``wN`` (cited as ``[wN]``; ``data.references`` maps it to the page
for the engine), its sources ``cN``/``dN``, its KB ``bN``, an issue ``iN``. A page the
session has seen already (it has its ``wN``) is listed without its summary, in search
results and among a page's links, as the reference does.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

from weft_tool_catalog.registry import ToolInvocation, ToolOutcome, ToolSpec, dumps
from weft_tool_catalog.wiki_specs import (
    WIKI_DELETE_PAGE,
    WIKI_FLAG_ISSUE,
    WIKI_READ_ISSUE,
    WIKI_READ_PAGE,
    WIKI_RENAME_PAGE,
    WIKI_REPLACE_TEXT,
    WIKI_SEARCH,
    WIKI_UPDATE_ISSUE,
    WIKI_WRITE_PAGE,
    WikiDeletePageArguments,
    WikiFlagIssueArguments,
    WikiReadIssueArguments,
    WikiReadPageArguments,
    WikiRenamePageArguments,
    WikiReplaceTextArguments,
    WikiSearchArguments,
    WikiUpdateIssueArguments,
    WikiWritePageArguments,
)

from weft_tools.knowledge_client import KnowledgeClient, KnowledgeUnavailable
from weft_tools.knowledge_scope import KnowledgeScope, OutOfScope
from weft_tools.wiki_client import WikiClient, WikiRefused


class WikiTool:
    """What every wiki tool shares: its spec, the wiki routes, the session's handles."""

    spec: ToolSpec

    def __init__(self, knowledge: KnowledgeClient, scope: KnowledgeScope):
        self._knowledge = knowledge
        self._wiki = WikiClient(knowledge)
        self._scope = scope

    async def run(self, call: ToolInvocation) -> ToolOutcome:
        """Run the tool; a refusal or an unknown handle is an error the model reads."""
        try:
            return await self._run(call)
        except (WikiRefused, OutOfScope, KnowledgeUnavailable) as exc:
            return ToolOutcome(success=False, error=f"{self.spec.name}: {without_ids(str(exc))}")

    async def _run(self, call: ToolInvocation) -> ToolOutcome:
        raise NotImplementedError

    async def kbs(self, call: ToolInvocation, requested: list[str] | None = None) -> list[str]:
        """The KBs the call may reach (empty: all the tenant's)."""
        return await self._scope.knowledge_bases(call, requested or [])

    async def handle(self, call: ToolInvocation, kind: str, real_id: str) -> str:
        """The session's handle of ``real_id``."""
        return await self._scope.handle(call, kind, real_id)

    async def seen(self, call: ToolInvocation, page_id: str | None) -> bool:
        """Whether the session was shown this page already."""
        if not page_id:
            return False
        return await self._scope.aliases.known(call.tenant_id, call.session_id, page_id) is not None

    async def sources(self, call: ToolInvocation, handles: list[str]) -> list[dict[str, str]]:
        """``cN``/``dN`` handles as source references (a chunk with its document)."""
        refs: list[dict[str, str]] = []
        kbs = await self.kbs(call)
        for handle in handles:
            kind = handle.strip()[:1]
            if kind == "d":
                refs.append({"document_id": await self._scope.resolve(call, handle, "d")})
            elif kind == "c":
                chunk_id = await self._scope.resolve(call, handle, "c")
                hit = await self._knowledge.chunk(
                    call.tenant_id, kbs, chunk_id, credential=self._knowledge.credential_for(call)
                )
                if hit is None:
                    raise OutOfScope(f"unknown source {handle!r}")
                refs.append({"document_id": hit.document_id, "chunk_id": chunk_id})
            else:
                raise OutOfScope(f"source {handle!r}: use cN or dN ids returned by earlier tools")
        return refs

    async def source_handles(self, call: ToolInvocation, refs: list[dict[str, Any]]) -> list[str]:
        """Stored source references as the session's handles."""
        out = []
        for ref in refs:
            if ref.get("chunk_id"):
                out.append(await self.handle(call, "chunk", ref["chunk_id"]))
            else:
                out.append(await self.handle(call, "document", ref["document_id"]))
        return list(dict.fromkeys(out))

    def answer(self, payload: dict[str, Any], **data: Any) -> ToolOutcome:
        """A successful answer (JSON the model reads)."""
        return ToolOutcome(success=True, output=dumps(payload), data=data)


class WikiSearchTool(WikiTool):
    """``wiki_search``: pages by regex or literal text, per-KB limits."""

    spec = WIKI_SEARCH

    async def _run(self, call: ToolInvocation) -> ToolOutcome:
        args = call.args(WikiSearchArguments)
        named = list(args.knowledge_base_ids or [])
        if args.knowledge_base_id:
            named.append(args.knowledge_base_id)
        query = args.query or "|".join(_posix_literal(q) for q in args.queries or [] if q)
        regex = args.regex if args.query else True
        body = {
            "knowledge_base_ids": await self.kbs(call, named),
            "query": query,
            "regex": regex,
            "limit": args.limit,
        }
        found = await self._wiki.post(call, "/internal/wiki/search", body)
        results = []
        for hit in found["results"]:
            already = await self.seen(call, hit["id"])
            item: dict[str, Any] = {
                "slug": hit["slug"],
                "page": await self.handle(call, "wiki_page", hit["id"]),
                "knowledge_base": await self.handle(
                    call, "knowledge_base", hit["knowledge_base_id"]
                ),
                "title": hit["title"],
                "type": hit["page_type"],
                "matched_in": hit["matched_in"],
            }
            if already:
                item["seen"] = True
            else:
                item["summary"] = hit["summary"]
            results.append(item)
        payload = {"query": query, "mode": found["mode"], "count": len(results), "results": results}
        if not results:
            payload["hint"] = "No page matched; try other words, aliases or a shorter pattern."
        return self.answer(payload)


class WikiReadPageTool(WikiTool):
    """``wiki_read_page``: pages by slug with their links and sources."""

    spec = WIKI_READ_PAGE

    async def _run(self, call: ToolInvocation) -> ToolOutcome:
        args = call.args(WikiReadPageArguments)
        body = {"knowledge_base_ids": await self.kbs(call), "slugs": list(args.slugs)}
        found = await self._wiki.post(call, "/internal/wiki/pages/read", body)
        pages, references = [], []
        for page in found["pages"]:
            links_out = [await self._link(call, link) for link in page["outgoing"]]
            links_in = [await self._link(call, link) for link in page["incoming"]]
            alias = await self.handle(call, "wiki_page", page["id"])
            sources = page["source_refs"]
            pages.append(
                {
                    "page": alias,
                    "slug": page["slug"],
                    "title": page["title"],
                    "knowledge_base": await self.handle(
                        call, "knowledge_base", page["knowledge_base_id"]
                    ),
                    "type": page["page_type"],
                    "aliases": page["aliases"],
                    "summary": page["summary"],
                    "revision": page["revision"],
                    "updated_at": page["updated_at"],
                    "sources": await self.source_handles(call, sources),
                    "content": page["content"],
                    "links_out": links_out,
                    "links_in": links_in,
                }
            )
            references.append(
                {
                    "alias": alias,
                    "chunk_id": page["id"],
                    "document_id": sources[0]["document_id"] if sources else "",
                    "knowledge_base_id": page["knowledge_base_id"],
                    "title": page["title"],
                    "excerpt": page["summary"][:300],
                }
            )
        payload: dict[str, Any] = {"pages": pages}
        if found["missing"]:
            payload["missing"] = found["missing"]
            payload["hint"] = "Missing slugs: find pages with wiki_search."
        if "index" in found:
            payload["index"] = {
                kind: [{"slug": e["slug"], "title": e["title"]} for e in entries]
                for kind, entries in found["index"].items()
            }
        outcome = self.answer(payload, references=references)
        return ToolOutcome(
            success=True, output=outcome.output, display_type="wiki_pages", data=outcome.data
        )

    async def _link(self, call: ToolInvocation, link: dict[str, Any]) -> dict[str, Any]:
        shown: dict[str, Any] = {"slug": link["slug"]}
        if not link["exists"]:
            shown["missing"] = True
            return shown
        shown["title"] = link["title"]
        if not await self.seen(call, link["id"]):
            shown["summary"] = link["summary"]
        return shown


class WikiWritePageTool(WikiTool):
    """``wiki_write_page``: create or replace a page."""

    spec = WIKI_WRITE_PAGE

    async def _run(self, call: ToolInvocation) -> ToolOutcome:
        args = call.args(WikiWritePageArguments)
        kbs = await self.kbs(call)
        target = None
        if args.knowledge_base_id:
            (target,) = await self.kbs(call, [args.knowledge_base_id])
        body = {
            "knowledge_base_ids": kbs,
            "knowledge_base_id": target,
            "slug": args.slug,
            "title": args.title,
            "summary": args.summary,
            "content": args.content,
            "page_type": args.page_type,
            "aliases": list(args.aliases or []),
            "source_refs": await self.sources(call, list(args.source_refs or [])),
        }
        changed = await self._wiki.call(
            call, "PUT", "/internal/wiki/pages", json={"tenant_id": call.tenant_id, **body}
        )
        return self.answer(await self._changed(call, changed))

    async def _changed(self, call: ToolInvocation, changed: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = {
            "slug": changed["slug"],
            "page": await self.handle(call, "wiki_page", changed["id"]),
            "revision": changed["revision"],
        }
        if changed.get("created"):
            out["created"] = True
        if changed.get("relinked"):
            out["updated_links_in"] = changed["relinked"]
        return out


class WikiReplaceTextTool(WikiWritePageTool):
    """``wiki_replace_text``: one exact passage."""

    spec = WIKI_REPLACE_TEXT

    async def _run(self, call: ToolInvocation) -> ToolOutcome:
        args = call.args(WikiReplaceTextArguments)
        body = {
            "knowledge_base_ids": await self.kbs(call),
            "slug": args.slug,
            "old_text": args.old_text,
            "new_text": args.new_text,
            "source_refs": await self.sources(call, list(args.source_refs or [])),
        }
        changed = await self._wiki.post(call, "/internal/wiki/pages/replace-text", body)
        return self.answer(await self._changed(call, changed))


class WikiRenamePageTool(WikiWritePageTool):
    """``wiki_rename_page``: the pages linking to it follow."""

    spec = WIKI_RENAME_PAGE

    async def _run(self, call: ToolInvocation) -> ToolOutcome:
        args = call.args(WikiRenamePageArguments)
        body = {
            "knowledge_base_ids": await self.kbs(call),
            "slug": args.slug,
            "new_slug": args.new_slug,
        }
        changed = await self._wiki.post(call, "/internal/wiki/pages/rename", body)
        return self.answer({"renamed_from": args.slug, **await self._changed(call, changed)})


class WikiDeletePageTool(WikiWritePageTool):
    """``wiki_delete_page``: links to it become plain text."""

    spec = WIKI_DELETE_PAGE

    async def _run(self, call: ToolInvocation) -> ToolOutcome:
        args = call.args(WikiDeletePageArguments)
        body = {"knowledge_base_ids": await self.kbs(call), "slug": args.slug}
        changed = await self._wiki.post(call, "/internal/wiki/pages/delete", body)
        payload: dict[str, Any] = {"deleted": changed["slug"]}
        if changed.get("relinked"):
            payload["updated_links_in"] = changed["relinked"]
        return self.answer(payload)


class WikiIssueTool(WikiTool):
    """What the issue tools share: an issue as the model reads it."""

    async def shown(self, call: ToolInvocation, issue: dict[str, Any]) -> dict[str, Any]:
        """The issue with handles instead of ids."""
        suspected = []
        for real in issue["suspected_knowledge_ids"]:
            kind = "chunk" if real.startswith("chk_") else "document"
            suspected.append(await self.handle(call, kind, real))
        return {
            "issue_id": await self.handle(call, "wiki_issue", issue["id"]),
            "slug": issue["slug"],
            "issue_type": issue["issue_type"],
            "description": issue["description"],
            "status": issue["status"],
            "suspected_knowledge_ids": suspected,
            "reported_by": issue["reported_by"],
            "created_at": issue["created_at"],
        }


class WikiFlagIssueTool(WikiIssueTool):
    """``wiki_flag_issue``."""

    spec = WIKI_FLAG_ISSUE

    async def _run(self, call: ToolInvocation) -> ToolOutcome:
        args = call.args(WikiFlagIssueArguments)
        suspected = [
            r.get("chunk_id") or r["document_id"]
            for r in await self.sources(call, list(args.suspected_knowledge_ids or []))
        ]
        body = {
            "knowledge_base_ids": await self.kbs(call),
            "slug": args.slug,
            "issue_type": args.issue_type,
            "description": args.description,
            "suspected_knowledge_ids": suspected,
        }
        issue = await self._wiki.post(call, "/internal/wiki/issues/flag", body)
        return self.answer({"flagged": await self.shown(call, issue)})


class WikiReadIssueTool(WikiIssueTool):
    """``wiki_read_issue`` (alias ``wiki_list_issues``)."""

    spec = WIKI_READ_ISSUE

    async def _run(self, call: ToolInvocation) -> ToolOutcome:
        args = call.args(WikiReadIssueArguments)
        kbs = await self.kbs(call)
        if args.issue_id:
            real = await self._scope.resolve(call, args.issue_id, "i")
            return self.answer(
                {"issue": await self.shown(call, await self._wiki.issue(call, real, kbs))}
            )
        found = await self._wiki.issues(call, kbs, args.slug)
        issues = [await self.shown(call, i) for i in found]
        return self.answer({"slug": args.slug, "pending": issues, "count": len(issues)})


class WikiUpdateIssueTool(WikiIssueTool):
    """``wiki_update_issue``."""

    spec = WIKI_UPDATE_ISSUE

    async def _run(self, call: ToolInvocation) -> ToolOutcome:
        args = call.args(WikiUpdateIssueArguments)
        real = await self._scope.resolve(call, args.issue_id, "i")
        body = {
            "tenant_id": call.tenant_id,
            "knowledge_base_ids": await self.kbs(call),
            "status": args.status,
        }
        issue = await self._wiki.call(
            call, "POST", f"/internal/wiki/issues/{quote(real, safe='')}/status", json=body
        )
        return self.answer({"updated": await self.shown(call, issue)})


STORED_ID = re.compile(r"\b(?:kb|doc|chk|wp|wi)_[0-9A-Z]{26}\b")
"""A stored id in a refusal of knowledge (a source or issue it did not find)."""


def without_ids(text: str) -> str:
    """``text`` with stored ids left out: the model reads only handles (SPEC E-22)."""
    return STORED_ID.sub("(that id)", text)


_POSIX_SPECIAL = re.compile(r"([\\.^$|?*+()\[\]{}])")


def _posix_literal(text: str) -> str:
    """``text`` as a POSIX regex matching it literally (the older ``queries`` list)."""
    return _POSIX_SPECIAL.sub(r"\\\1", text)


def wiki_tools(knowledge: KnowledgeClient, scope: KnowledgeScope) -> list[WikiTool]:
    """Every wiki tool, ready to register."""
    kinds: tuple[type[WikiTool], ...] = (
        WikiSearchTool,
        WikiReadPageTool,
        WikiWritePageTool,
        WikiReplaceTextTool,
        WikiRenamePageTool,
        WikiDeletePageTool,
        WikiFlagIssueTool,
        WikiReadIssueTool,
        WikiUpdateIssueTool,
    )
    return [kind(knowledge, scope) for kind in kinds]
