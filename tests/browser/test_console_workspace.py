"""The console's approval cards, deliverables and session files in a real browser (issue 41;
SPEC H-02..H-04 as a person meets them), run by ``make test-browser-full``: a write approved
with edited arguments writes what the person typed, its deliverable appears in the turn and
downloads, and the "Session files" panel lists and downloads it; a denied write writes
nothing; "remember for this session" lets the next write run without a card, and its
deliverable shows while the answer is still being written. Every page must end with no
console error and no CSP violation (conftest), and axe finds no serious violation on a
page with an approval card in dark mode."""

from __future__ import annotations

import asyncio
import re
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
from playwright.async_api import Locator, Page, expect

from tests.browser.conftest import SCREENSHOTS, ConsolePage, OpenConsole
from tests.browser.test_console import serious_violations
from tests.stack_fixtures import ApiKeys, KeyedClient

pytestmark = [pytest.mark.full, pytest.mark.timeout(300)]

LoadScript = Callable[[list[dict[str, object]]], Awaitable[None]]


async def writer_agent(client: KeyedClient) -> str:
    """A sandbox agent of ``client``'s tenant that asks before every write (access level
    ``confirm``); its unique name, as the picker shows it."""
    name = f"Writer {secrets.token_hex(3)}"
    made = await client.http.post("/api/v1/agents", json={
        "name": name, "agent_type": "custom", "allowed_tools": ["write_sandbox_file"],
        "sandbox_enabled": True, "kb_selection_mode": "none", "access_level": "confirm",
        "question_suggestions": {"starters": {"enabled": False}},
    })  # fmt: skip
    assert made.status_code == 201, made.text
    return name


def write_call(marker: str, path: str, content: str) -> dict[str, object]:
    call = {"name": "write_sandbox_file", "arguments": {"path": path, "content": content}}
    return {"match": marker, "tool_calls": [call]}


async def downloaded(page: Page, button: Locator) -> bytes:
    """The bytes the browser saves when ``button`` is clicked."""
    async with page.expect_download() as info:
        await button.click()
    saved = await (await info.value).path()
    return await asyncio.to_thread(Path(saved).read_bytes)


async def open_as_writer(
    open_console: OpenConsole, api_keys: ApiKeys, **opts: str
) -> tuple[ConsolePage, str]:
    client = await api_keys.client(user=f"writer-{secrets.token_hex(3)}")
    agent = await writer_agent(client)
    cp = await open_console(key=client.key, **opts)
    await cp.page.get_by_label("Agent", exact=True).select_option(label=agent)
    return cp, agent


async def test_an_edited_approval_writes_what_the_person_typed(
    open_console: OpenConsole, llm_script: LoadScript, api_keys: ApiKeys
) -> None:
    await llm_script([
        write_call("DRAFT-NOTE", "output/draft.md", "what the model wrote"),
        {"match": "DRAFT-NOTE", "content": "The note is written."},
    ])  # fmt: skip
    cp, _ = await open_as_writer(open_console, api_keys, color_scheme="dark")
    await cp.ask("DRAFT-NOTE please write a note")
    card = cp.page.locator("section.prompt-card")
    await expect(card.get_by_role("heading")).to_have_text(
        "Allow write_sandbox_file?", timeout=60_000
    )
    arguments = card.get_by_label("Arguments (JSON; edit to approve with changes)")
    await expect(arguments).to_have_value(re.compile("what the model wrote"))
    tool = cp.last_turn().locator("li.tool")
    await expect(tool.locator(".tool-status")).to_have_text("waiting for your approval")
    assert await serious_violations(cp.page) == []  # the card, in dark mode
    await cp.page.screenshot(path=str(SCREENSHOTS / "console-approval.png"))
    await arguments.fill('{"path": "output/final.md", "content": "what the person typed"}')
    await card.get_by_role("button", name="Approve").click()
    assert await cp.wait_turn_end() == "completed"
    await expect(card.locator(".prompt-outcome")).to_have_text(
        "Resolved: approved (with your edits)"
    )
    turn = cp.last_turn()
    await expect(turn.locator(".answer")).to_have_text("The note is written.")
    await expect(tool.locator(".tool-status")).to_contain_text("done in")
    # The deliverable is the edited path, and it downloads what the person typed.
    link = turn.get_by_role("button", name="Download output/final.md")
    await expect(turn.locator(".deliverables li")).to_have_count(1)
    assert await downloaded(cp.page, link) == b"what the person typed"

    # The session's files panel lists it (the model's path was never written) and downloads it.
    await cp.page.get_by_text("Session files").click()
    files = cp.page.get_by_role("list", name="Files of this conversation")
    await expect(files.locator("li")).to_have_count(1)
    listed = files.get_by_role("button", name="Download output/final.md")
    assert await downloaded(cp.page, listed) == b"what the person typed"
    assert await serious_violations(cp.page) == []  # the panel open, in dark mode


async def test_deny_writes_nothing_and_remember_skips_the_next_card(
    open_console: OpenConsole, llm_script: LoadScript, api_keys: ApiKeys
) -> None:
    await llm_script([
        write_call("FIRST-WRITE", "output/one.md", "one"),
        {"match": "FIRST-WRITE", "content": "I left it unwritten."},
        write_call("SECOND-WRITE", "output/two.md", "two"),
        {"match": "SECOND-WRITE", "content": "Written two."},
        write_call("THIRD-WRITE", "output/three.md", "three"),
        # the answer stalls after its first words: the turn is still running below
        {"match": "THIRD-WRITE", "content": ["Still ", "writing ", "the ", "answer"],
         "stall_after_chunks": 3},
        # a stop after tool results ends with a closing answer (SPEC E-20's rescue)
        {"content": "Stopped after writing three."},
    ])  # fmt: skip
    cp, _ = await open_as_writer(open_console, api_keys)
    page = cp.page
    await page.get_by_text("Session files").click()
    files = page.get_by_role("list", name="Files of this conversation")

    # Deny, with a reason: the card says so, nothing is written, the agent goes on.
    await cp.ask("FIRST-WRITE a file")
    card = cp.last_turn().locator("section.prompt-card")
    await expect(card).to_be_visible(timeout=60_000)
    await card.get_by_label("Reason (optional)").fill("not today")
    await card.get_by_role("button", name="Deny").click()
    assert await cp.wait_turn_end() == "completed"
    await expect(card.locator(".prompt-outcome")).to_have_text("Resolved: denied")
    await expect(card.get_by_role("button", name="Approve")).to_be_disabled()
    await expect(cp.last_turn().locator(".answer")).to_have_text("I left it unwritten.")
    await expect(cp.last_turn().locator(".deliverables li")).to_have_count(0)
    await page.get_by_role("button", name="Refresh").click()
    await expect(files).to_have_text("No files yet.")

    # Approve and remember for this session.
    await cp.ask("SECOND-WRITE a file")
    card = cp.last_turn().locator("section.prompt-card")
    await expect(card).to_be_visible(timeout=60_000)
    await card.get_by_label("Remember this decision").select_option(label="for this session")
    await card.get_by_role("button", name="Approve").click()
    assert await cp.wait_turn_end() == "completed"
    await expect(card.locator(".prompt-outcome")).to_have_text(
        "Resolved: approved (remembered for this session)"
    )
    # the deliverable refreshed the open panel
    await expect(files.locator("li")).to_have_text(["Download output/two.md (3 bytes)"])

    # The same tool again in this session: no card; the file shows while the answer is
    # still being written (the model's stream is stalled), then Stop ends the turn.
    await cp.ask("THIRD-WRITE a file")
    turn = cp.last_turn()
    link = turn.get_by_role("button", name="Download output/three.md")
    await expect(link).to_be_visible(timeout=60_000)
    await expect(turn.locator(".answer")).to_contain_text("Still", timeout=60_000)
    assert await turn.get_attribute("data-status") is None, "the turn was not running"
    assert await turn.locator("section.prompt-card").count() == 0
    assert await downloaded(page, link) == b"three"
    await expect(files.get_by_role("button", name="Download output/three.md")).to_be_visible()
    await expect(files.get_by_role("button")).to_have_count(2)
    await page.get_by_role("button", name="Stop", exact=True).click()
    status = await cp.wait_turn_end()
    await expect(turn.locator(".answer")).to_have_text("Stopped after writing three.")
    assert status == "completed", status
