"""The wiki tools' specs and arguments (SPEC T-18, the reference's table): search and
read for every wiki agent, writes and issues for the wiki-fixer.

Pages are named by slug; source references and suspected knowledge are the session's
``cN``/``dN`` handles, knowledge bases ``bN``, issues ``iN`` (SPEC E-22: the model never
sees a stored id). The writes are ``write`` risk under the approvals policy (H-01), and
agent-config drops them for read-only and shared agents (A-08).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from weft_tool_catalog.arguments import ToolArguments
from weft_tool_catalog.capabilities import KBCapability, ToolRequirement
from weft_tool_catalog.registry import ToolSpec

WIKI = ToolRequirement(all_of=frozenset({KBCapability.WIKI}))
WIKI_AUXILIARY = ToolRequirement(all_of=frozenset({KBCapability.WIKI}), auxiliary=True)
MAX_PAGE_CHARS = 100_000
"""Longest page (knowledge's own bound too)."""
WIKI_SEARCH_MAX_LIMIT = 50

Slug = Annotated[str, Field(min_length=1, max_length=200, description="The page's slug.")]
Handle = Annotated[str, Field(min_length=1, max_length=64)]
IssueType = Literal["mixed_entities", "contradictory_facts", "out_of_date", "other"]
IssueStatus = Literal["resolved", "ignored", "pending"]


class WikiSearchArguments(ToolArguments):
    """``wiki_search`` (``queries`` and ``knowledge_base_id``: older spellings)."""

    query: Annotated[
        str | None,
        Field(
            min_length=1,
            max_length=500,
            description=(
                "Case-insensitive POSIX regex, e.g. stardust|skyvault; text that is not a "
                "valid regex (C++) is matched literally."
            ),
        ),
    ] = None
    regex: Annotated[
        bool | None, Field(description="false: always literal; true: a valid regex is required.")
    ] = None
    knowledge_base_ids: Annotated[list[Handle] | None, Field(max_length=10)] = None
    limit: Annotated[int, Field(ge=1, le=WIKI_SEARCH_MAX_LIMIT, description="Per KB.")] = 10
    queries: Annotated[list[Annotated[str, Field(max_length=200)]] | None, Field(max_length=10)] = (
        None
    )
    knowledge_base_id: Handle | None = None

    @model_validator(mode="after")
    def _one_query(self) -> WikiSearchArguments:
        if not self.query and not self.queries:
            raise ValueError("query is required")
        return self


class WikiReadPageArguments(ToolArguments):
    """``wiki_read_page``."""

    slugs: Annotated[
        list[Slug],
        Field(min_length=1, max_length=10, description="Slugs to read; 'index' lists pages."),
    ]


class WikiWritePageArguments(ToolArguments):
    """``wiki_write_page``."""

    slug: Slug
    title: Annotated[str, Field(min_length=1, max_length=300)]
    summary: Annotated[str, Field(min_length=1, max_length=2000)]
    content: Annotated[
        str, Field(max_length=MAX_PAGE_CHARS, description="Markdown; link pages as [[slug]].")
    ]
    page_type: Annotated[
        str,
        Field(pattern=r"^[a-z][a-z0-9_-]{0,39}$", description="e.g. entity, concept, summary."),
    ]
    aliases: Annotated[list[Annotated[str, Field(max_length=200)]] | None, Field(max_length=20)] = (
        None
    )
    source_refs: Annotated[
        list[Handle] | None, Field(max_length=50, description="cN/dN the page is based on.")
    ] = None
    knowledge_base_id: Annotated[
        Handle | None, Field(description="bN, when several wiki KBs are in scope.")
    ] = None


class WikiReplaceTextArguments(ToolArguments):
    """``wiki_replace_text``."""

    slug: Slug
    old_text: Annotated[str, Field(min_length=1, max_length=20_000)]
    new_text: Annotated[str, Field(max_length=20_000)]
    source_refs: Annotated[list[Handle] | None, Field(max_length=50)] = None


class WikiRenamePageArguments(ToolArguments):
    """``wiki_rename_page``."""

    slug: Slug
    new_slug: Slug


class WikiDeletePageArguments(ToolArguments):
    """``wiki_delete_page``."""

    slug: Slug


class WikiFlagIssueArguments(ToolArguments):
    """``wiki_flag_issue``."""

    slug: Slug
    issue_type: IssueType
    description: Annotated[str, Field(min_length=1, max_length=4000)]
    suspected_knowledge_ids: Annotated[list[Handle] | None, Field(max_length=20)] = None


class WikiReadIssueArguments(ToolArguments):
    """``wiki_read_issue``: one issue, or a page's pending issues (every page's without
    either)."""

    issue_id: Annotated[Handle | None, Field(description="iN.")] = None
    slug: Slug | None = None


class WikiUpdateIssueArguments(ToolArguments):
    """``wiki_update_issue``."""

    issue_id: Annotated[Handle, Field(description="iN.")]
    status: IssueStatus


def _write(name: str, description: str, arguments: type[ToolArguments]) -> ToolSpec:
    return ToolSpec(
        name=name, description=description, arguments=arguments, read_only=False, risk="write",
        requirement=WIKI,
    )  # fmt: skip


WIKI_SEARCH = ToolSpec(
    name="wiki_search",
    description=(
        "Search the wiki pages (title, slug, aliases, summary, content) of the knowledge "
        "bases in scope; returns slugs with summaries (pages already seen: without). Then "
        "read pages with wiki_read_page."
    ),
    arguments=WikiSearchArguments,
    requirement=WIKI,
)
WIKI_READ_PAGE = ToolSpec(
    name="wiki_read_page",
    description=(
        "Read wiki pages by slug: content, metadata, sources (cN/dN for read_document) and "
        "links in and out. Cite a page as [wN]. Slug 'index': contents by page type."
    ),
    arguments=WikiReadPageArguments,
    requirement=WIKI,
)
WIKI_WRITE_PAGE = _write(
    "wiki_write_page",
    "Create or replace a wiki page (slug normalised; [[slug]] links kept).",
    WikiWritePageArguments,
)
WIKI_REPLACE_TEXT = _write(
    "wiki_replace_text",
    "Replace one exact passage of a wiki page (it must occur once): small revisions.",
    WikiReplaceTextArguments,
)
WIKI_RENAME_PAGE = _write(
    "wiki_rename_page",
    "Rename a wiki page's slug; the pages linking to it are updated.",
    WikiRenamePageArguments,
)
WIKI_DELETE_PAGE = _write(
    "wiki_delete_page",
    "Delete a wiki page; links to it become plain text.",
    WikiDeletePageArguments,
)
WIKI_FLAG_ISSUE = ToolSpec(
    name="wiki_flag_issue",
    description=(
        "Flag a factual error or a confusion of entities on a wiki page "
        "(mixed_entities, contradictory_facts, out_of_date, other)."
    ),
    arguments=WikiFlagIssueArguments,
    read_only=False,
    risk="write",
    requirement=WIKI_AUXILIARY,
)
WIKI_READ_ISSUE = ToolSpec(
    name="wiki_read_issue",
    description="Read one wiki issue (iN), or the pending issues of a page (slug).",
    arguments=WikiReadIssueArguments,
    requirement=WIKI_AUXILIARY,
)
WIKI_UPDATE_ISSUE = _write(
    "wiki_update_issue",
    "Set a wiki issue's status: resolved, ignored or pending.",
    WikiUpdateIssueArguments,
)
WIKI_SPECS: tuple[ToolSpec, ...] = (
    WIKI_SEARCH, WIKI_READ_PAGE, WIKI_WRITE_PAGE, WIKI_REPLACE_TEXT, WIKI_RENAME_PAGE,
    WIKI_DELETE_PAGE, WIKI_FLAG_ISSUE, WIKI_READ_ISSUE, WIKI_UPDATE_ISSUE,
)  # fmt: skip
WIKI_WRITE_TOOLS: frozenset[str] = frozenset(
    s.name for s in WIKI_SPECS if not s.read_only and s.name != "wiki_flag_issue"
)
"""Dropped for read-only and shared agents and without a writable wiki (SPEC A-08 step 1);
flagging an issue stays, as the reference's wiki researcher flags."""
