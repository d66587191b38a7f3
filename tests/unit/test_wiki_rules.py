"""The wiki's rules that need no infrastructure (SPEC T-18, A-08, E-22): slugs and links,
the model's generated pages, and which agents keep the wiki write tools."""

from __future__ import annotations

import json
from typing import Any, cast

import httpx
import pytest
from weft_agent_config.catalogs import BuiltinAgents
from weft_agent_config.knowledge_client import KnowledgeService
from weft_agent_config.knowledge_guard import KnowledgeDirectory
from weft_agent_config.resolver import AgentResolver
from weft_agent_config.store import AgentStore
from weft_knowledge.wiki_generation import WikiGenerationFailed, parse_pages
from weft_storage.knowledge.wiki_text import InvalidSlug, linked_slugs, normalize_slug, relink
from weft_tool_catalog.specs import risk_of
from weft_tool_catalog.wiki_specs import WIKI_SPECS, WIKI_WRITE_TOOLS
from weft_tools.wiki_tools import without_ids


def test_slugs_are_normalised_or_refused() -> None:
    assert normalize_slug("  Stardust Probe ") == "stardust-probe"
    assert normalize_slug("Product/Star_Dust") == "product/star-dust"
    assert normalize_slug("Éclair") == "éclair"
    for bad in ("../etc", "/a", "a/", "a//b", "a\\b", "a%2f", "-a", "a--b", "a/b/c/d/e",
                "", "x" * 201, "a\x00b", "a.b"):  # fmt: skip
        with pytest.raises(InvalidSlug):
            normalize_slug(bad)


def test_links_are_found_and_rewritten() -> None:
    text = "See [[Stardust Probe]], [[skyvault|the yard]], [[../x]] and [[stardust-probe]]."
    assert linked_slugs(text) == ["stardust-probe", "skyvault"]
    assert relink(text, "skyvault", "yard") == text.replace("[[skyvault|", "[[yard|")
    assert relink(text, "stardust-probe", None, "Stardust") == (
        "See Stardust, [[skyvault|the yard]], [[../x]] and Stardust."
    )


def test_generated_pages_are_checked_before_they_are_written() -> None:
    pages = [
        {"slug": "Stardust", "title": "Stardust", "summary": "s", "content": "c"},
        {"slug": "../../passwd", "title": "bad", "content": "skipped"},
        {"slug": "stardust", "title": "dup", "content": "the later one wins"},
    ]
    drafts = parse_pages("```json\n" + json.dumps({"pages": pages}) + "\n```", "doc_1")
    assert [(d.slug, d.title) for d in drafts] == [("stardust", "dup")]
    assert drafts[0].source_refs == [{"document_id": "doc_1"}]
    for answer in ("not json", '{"pages": "x"}', json.dumps({"pages": [{"slug": "a"}] * 13})):
        with pytest.raises(WikiGenerationFailed):
            parse_pages(answer, "doc_1")


def test_wiki_writes_are_write_risk() -> None:
    """SPEC H-01: every wiki change is asked about as a write."""
    assert {s.name for s in WIKI_SPECS if not s.read_only} == WIKI_WRITE_TOOLS | {"wiki_flag_issue"}
    assert all(risk_of(t) == "write" for t in WIKI_WRITE_TOOLS | {"wiki_flag_issue"})
    assert risk_of("wiki_search") == risk_of("wiki_read_issue") == "read"


def _resolver(capabilities: dict[str, list[str]]) -> AgentResolver:
    def lookup(request: httpx.Request) -> httpx.Response:
        asked = json.loads(request.content)["knowledge_base_ids"] or list(capabilities)
        found = [{"id": kb, "name": kb, "description": "", "capabilities": capabilities[kb]}
                 for kb in asked if kb in capabilities]  # fmt: skip
        return httpx.Response(200, json=found)

    service = KnowledgeService(
        "http://knowledge", lambda scopes: "token", transport=httpx.MockTransport(lookup)
    )
    return AgentResolver(
        cast(AgentStore, None), BuiltinAgents.load(), "weft-scripted",
        knowledge=KnowledgeDirectory(service),
    )  # fmt: skip


async def test_write_tools_stay_only_with_a_writable_wiki() -> None:
    """SPEC A-08 step 1: the wiki-fixer keeps its writes with a wiki KB in scope; a shared
    or read-only agent, or a scope without a wiki, loses them (flagging stays)."""
    resolver = _resolver({"kb_w": ["keyword", "vector", "wiki"], "kb_d": ["keyword", "vector"]})
    fixer = await resolver.resolve("t", "builtin-wiki-fixer", ["kb_w"])
    assert set(fixer.allowed_tools) >= WIKI_WRITE_TOOLS
    assert "wiki_read_issue" in fixer.allowed_tools  # the old wiki_list_issues
    assert fixer.retain_retrieval_history is True
    # A-08's safety net: over a KB without a wiki the fixer runs without any wiki tool
    unserved = await resolver.resolve("t", "builtin-wiki-fixer", ["kb_d"])
    assert not [t for t in unserved.allowed_tools if t.startswith("wiki_")], unserved

    wiki_writable: Any = resolver._wiki_writable
    assert await wiki_writable("t", fixer, shared=False) is True
    assert await wiki_writable("t", fixer, shared=True) is False
    read_only = fixer.model_copy(update={"approval": replace_level(fixer.approval, "read_only")})
    assert await wiki_writable("t", read_only, shared=False) is False
    documents_only = fixer.model_copy(update={"knowledge_base_ids": ["kb_d"]})
    assert await wiki_writable("t", documents_only, shared=False) is False


def replace_level(approval: Any, level: str) -> Any:
    return approval.model_copy(update={"access_level": level})


def test_refusals_reach_the_model_without_stored_ids() -> None:
    """SPEC E-22: knowledge names the source or issue it did not find by its stored id;
    the tool error the model reads does not."""
    text = (
        "source chunk 'chk_01M97X0RME2QMB534M6RZDNYT0' not found in kb_01M97X0RME2QMB534M6RZDNYT0"
    )
    assert without_ids(text) == "source chunk '(that id)' not found in (that id)"
    assert without_ids("no wiki page 'stardust'") == "no wiki page 'stardust'"
