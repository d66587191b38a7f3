"""The rest of the console's flows in a real browser (issue 41), run by
``make test-browser-full`` (``WEFT_BROWSER_FULL=1``; part of ``make test-full``): stop, steer
(the superseded round is replaced, not appended), an approval card approved, a follow-up
chip clicked, a knowledge-base upload watched to "ready", session search, and a refused key.
Like the reduced set, every page must end with no console error and no CSP violation."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable

import pytest
from playwright.async_api import expect

from tests.browser.conftest import OpenConsole
from tests.stack_fixtures import ApiKeys

pytestmark = [pytest.mark.full, pytest.mark.timeout(240)]

LoadScript = Callable[[list[dict[str, object]]], Awaitable[None]]
SLOW = [f"w{n:02d} " for n in range(60)]


async def test_stop_keeps_the_partial_answer(
    open_console: OpenConsole, llm_script: LoadScript
) -> None:
    await llm_script([{"match": "stop", "content": SLOW, "chunk_delay_ms": 150}])
    cp = await open_console()
    await cp.ask("Please stop me")
    answer = cp.last_turn().locator(".answer")
    await expect(answer).to_contain_text("w03", timeout=60_000)
    await cp.page.get_by_role("button", name="Stop", exact=True).click()
    assert await cp.wait_turn_end() == "cancelled"
    words = (await answer.inner_text()).split()
    assert words and words == [w.strip() for w in SLOW[: len(words)]]
    assert len(words) < len(SLOW)
    await expect(cp.page.get_by_role("button", name="Send", exact=True)).to_be_visible()


async def test_steer_replaces_the_superseded_round(
    open_console: OpenConsole, llm_script: LoadScript
) -> None:
    await llm_script([
        {"match": "steer", "content": SLOW[:30], "chunk_delay_ms": 120},
        {"content": "Steered answer."},
    ])  # fmt: skip
    cp = await open_console()
    await cp.ask("Try to steer this")
    answer = cp.last_turn().locator(".answer")
    await expect(answer).to_contain_text("w02", timeout=60_000)
    await cp.page.get_by_label("Message").fill("Go another way")
    await cp.page.get_by_role("button", name="Steer", exact=True).click()
    assert await cp.wait_turn_end() == "completed"
    await expect(answer).to_have_text("Steered answer.")


async def test_approval_card_then_follow_up_chip(
    open_console: OpenConsole, llm_script: LoadScript, api_keys: ApiKeys
) -> None:
    client = await api_keys.client(user=f"approver-{secrets.token_hex(3)}")
    agent = {
        "name": "Careful helper",
        "agent_type": "rag-qa",
        "always_ask_tools": ["search_knowledge"],
        "question_suggestions": {
            "follow_ups": {
                "enabled": True,
                "mode": "curated",
                "curated": ["What about monthly plans?"],
            }
        },
    }
    created = await client.http.post("/api/v1/agents", json=agent)
    assert created.status_code == 201, created.text
    await llm_script([
        {"match": "approve", "tool_calls": [
            {"name": "search_knowledge", "arguments": {"query": "refund"}}]},
        {"match": "approve", "content": "Searched after your approval."},
        {"match": "monthly", "content": "Monthly plans renew each month."},
    ])  # fmt: skip
    cp = await open_console(key=client.key)
    await cp.page.get_by_label("Agent", exact=True).select_option(label="Careful helper")
    await cp.ask("Search only if I approve")
    card = cp.page.locator("section.prompt-card")
    await expect(card).to_be_visible(timeout=60_000)
    await expect(card.get_by_role("heading")).to_have_text("Allow search_knowledge?")
    await card.get_by_role("button", name="Approve").click()
    assert await cp.wait_turn_end() == "completed"
    await expect(card.locator(".prompt-outcome")).to_have_text("Resolved: approved")
    await expect(cp.last_turn().locator(".answer")).to_have_text("Searched after your approval.")
    chip = cp.last_turn().get_by_role("button", name="What about monthly plans?")
    await expect(chip).to_be_visible(timeout=60_000)
    await chip.click()
    await expect(cp.page.locator("article.turn")).to_have_count(2)
    assert await cp.wait_turn_end() == "completed"
    await expect(cp.last_turn().locator(".question")).to_have_text("What about monthly plans?")
    await expect(cp.last_turn().locator(".answer")).to_have_text("Monthly plans renew each month.")


async def test_knowledge_upload_reaches_ready(open_console: OpenConsole) -> None:
    cp = await open_console()
    await cp.page.get_by_role("button", name="Knowledge").click()
    name = f"Uploads {secrets.token_hex(3)}"
    await cp.page.get_by_label("Name of a new knowledge base").fill(name)
    await cp.page.get_by_role("button", name="Create").click()
    kb = cp.page.locator("li.kb", has_text=name)
    await kb.get_by_label("Upload a file").set_input_files(
        {"name": "notes.md", "mimeType": "text/markdown",
         "buffer": b"# Notes\n\nThe console uploads files.\n\n" * 20}
    )  # fmt: skip
    row = kb.locator("li.upload", has_text="notes.md")
    await expect(row).to_have_attribute("data-state", "ready", timeout=90_000)
    assert await row.locator("progress").get_attribute("value") == "100"


async def test_session_search_in_the_list(
    open_console: OpenConsole, llm_script: LoadScript
) -> None:
    # matched steps: "New conversation" asks for the default agent's starters, which the
    # scripted model may be asked to write
    await llm_script([
        {"match": "Remember the", "content": "Noted."},
        {"match": "Something else", "content": "Noted again."},
    ])  # fmt: skip
    cp = await open_console()
    word = f"kiwi{secrets.token_hex(3)}"
    await cp.ask(f"Remember the {word} 100% please")
    assert await cp.wait_turn_end() == "completed"
    await cp.page.get_by_role("button", name="New conversation").click()
    await expect(cp.page.locator("article.turn")).to_have_count(0)
    await cp.ask("Something else entirely")
    assert await cp.wait_turn_end() == "completed"
    sessions = cp.page.locator("button.session")
    await expect(sessions).to_have_count(2)
    await cp.page.get_by_label("Search", exact=True).fill(f"{word} 100%")
    await expect(sessions).to_have_count(1)
    await expect(sessions.first).to_contain_text(word)
    await cp.page.get_by_label("Search", exact=True).fill("no such text at all %_%")
    await expect(cp.page.locator("ul.sessions")).to_contain_text("No conversation matches.")


async def test_a_refused_key_is_said_plainly(open_console: OpenConsole) -> None:
    cp = await open_console(sign_in=False, key="not-a-real-key")
    cp.allowed = ["401", "status of 401"]
    await cp.page.get_by_label("API key").fill(cp.key)
    await cp.page.get_by_role("button", name="Sign in").click()
    await expect(cp.page.get_by_role("alert")).to_have_text("That key was refused.")


async def test_a_dropped_connection_resumes_after_the_last_event(
    open_console: OpenConsole, llm_script: LoadScript
) -> None:
    await llm_script([{"match": "drop", "content": SLOW[:40], "chunk_delay_ms": 120}])
    cp = await open_console()
    # While offline, the reconnect attempts fail; those are the errors this test provokes.
    cp.allowed = ["ERR_INTERNET_DISCONNECTED", "ERR_NETWORK_CHANGED"]
    resumed: list[str] = []
    cp.page.on(
        "request",
        lambda r: (
            resumed.append(r.headers.get("last-event-id", ""))
            if r.url.endswith("/stream")
            else None
        ),
    )
    await cp.ask("Survive a drop")
    answer = cp.last_turn().locator(".answer")
    await expect(answer).to_contain_text("w03", timeout=60_000)
    await cp.page.context.set_offline(True)
    await cp.page.wait_for_timeout(1500)
    await cp.page.context.set_offline(False)
    assert await cp.wait_turn_end() == "completed"
    assert (await answer.inner_text()).split() == [w.strip() for w in SLOW[:40]]
    assert resumed and all(resumed[:1]), f"no resume with Last-Event-ID: {resumed}"
