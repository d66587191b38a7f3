"""Starters and the keyboard in a real browser (issue 41), run by ``make test-browser-full``:
a new conversation with an agent shows the agent's starters (at phone width, where the
picker is behind the menu button), a starter clicked is asked and names the conversation,
and an empty conversation is reused rather than multiplied; and a whole turn done with the
keyboard alone: sign in, pick the agent, send, approve, with the focus visible at every
step. axe finds no serious violation on the starters page."""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable

import pytest
from playwright.async_api import Page, expect

from tests.browser.conftest import PHONE, OpenConsole
from tests.browser.test_console import serious_violations
from tests.stack_fixtures import ApiKeys, KeyedClient

pytestmark = [pytest.mark.full, pytest.mark.timeout(240)]

LoadScript = Callable[[list[dict[str, object]]], Awaitable[None]]
STARTERS = ["What plans exist?", "Is there a discount for students?"]


async def new_agent(client: KeyedClient, prefix: str, **fields: object) -> str:
    """A rag-qa agent of ``client``'s tenant with curated starters (no model makes them);
    its unique name, as the picker shows it."""
    name = f"{prefix}-{secrets.token_hex(3)}"
    body = {
        "name": name, "agent_type": "rag-qa",
        "question_suggestions": {"starters": {"mode": "curated", "curated": STARTERS}},
        **fields,
    }  # fmt: skip
    made = await client.http.post("/api/v1/agents", json=body)
    assert made.status_code == 201, made.text
    return name


async def test_a_new_conversation_shows_the_agents_starters(
    open_console: OpenConsole, llm_script: LoadScript, api_keys: ApiKeys
) -> None:
    await llm_script([{"match": "discount for students", "content": "Students get 30% off."}])
    client = await api_keys.client(user=f"starters-{secrets.token_hex(3)}")
    agent = await new_agent(client, "Pricing")
    cp = await open_console(PHONE, key=client.key)
    page = cp.page
    menu = page.get_by_role("button", name="Show conversations")
    await expect(menu).to_have_attribute("aria-expanded", "false")
    await menu.click()
    await expect(menu).to_have_attribute("aria-expanded", "true")
    await page.get_by_label("Agent", exact=True).select_option(label=agent)
    starters = page.get_by_role("group", name="Suggested questions").get_by_role("button")
    await expect(starters).to_have_text(STARTERS, timeout=30_000)
    assert await serious_violations(page) == []
    # "New conversation" on a conversation still empty keeps it: no empty sessions pile up.
    await page.get_by_role("button", name="New conversation").click()  # closes the menu
    await expect(menu).to_have_attribute("aria-expanded", "false")
    await expect(starters).to_have_text(STARTERS)
    await menu.click()
    await expect(page.locator("button.session")).to_have_text(["Untitled conversation"])
    await menu.click()

    await starters.filter(has_text="discount").click()
    assert await cp.wait_turn_end() == "completed"
    await expect(cp.last_turn().locator(".question")).to_have_text(STARTERS[1])
    await expect(cp.last_turn().locator(".answer")).to_have_text("Students get 30% off.")
    await expect(starters).to_have_count(0)
    await menu.click()
    await expect(page.locator("button.session")).to_have_text([STARTERS[1]])

    # A conversation under way: "New conversation" makes a new one, with the starters again.
    await page.get_by_role("button", name="New conversation").click()
    await expect(starters).to_have_text(STARTERS)
    await menu.click()
    await expect(page.locator("button.session")).to_have_count(2)


async def press_until(page: Page, key: str, selector: str, limit: int = 60) -> None:
    """Press ``key`` until the focused element matches ``selector``; fails after ``limit``."""
    for _ in range(limit):
        if await page.evaluate("s => document.activeElement?.matches(s) ?? false", selector):
            return
        await page.keyboard.press(key)
    shown = await page.evaluate("document.activeElement?.outerHTML.slice(0, 200)")
    pytest.fail(f"{key} x{limit} never reached {selector}; focus on {shown}")


async def focus_is_visible(page: Page) -> bool:
    return bool(
        await page.evaluate(
            "(() => { const s = getComputedStyle(document.activeElement);"
            " return s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2; })()"
        )
    )


async def test_a_turn_with_the_keyboard_alone(
    open_console: OpenConsole, llm_script: LoadScript, api_keys: ApiKeys
) -> None:
    client = await api_keys.client(user=f"keyboard-{secrets.token_hex(3)}")
    agent = await new_agent(client, "Keyboard", always_ask_tools=["search_knowledge"])
    await llm_script([
        {"match": "KEYBOARD-ONLY", "tool_calls": [
            {"name": "search_knowledge", "arguments": {"query": "plans"}}]},
        {"match": "KEYBOARD-ONLY", "content": "Answered without a mouse."},
    ])  # fmt: skip
    cp = await open_console(sign_in=False, key=client.key)
    page = cp.page
    keys = page.keyboard

    # Sign in: the key field has the focus; Enter submits.
    await expect(page.get_by_label("API key")).to_be_focused()
    await keys.type(client.key)
    await keys.press("Enter")
    await page.get_by_role("banner").wait_for()
    # The composer has the focus after signing in.
    await expect(page.get_by_label("Message")).to_be_focused()

    # Pick the agent: Tab to the picker and type its name (the select's type-ahead).
    await press_until(page, "Tab", "#agent-picker")
    assert await focus_is_visible(page)
    await keys.type(agent)
    picker = page.locator("#agent-picker")
    shown = "s => s.selectedOptions[0]?.text"
    # type-ahead forgets after a second without a key: on a stalled machine, walk the list
    if await picker.evaluate(shown) != agent:
        await keys.press("Home")
        for _ in range(await picker.locator("option").count()):
            if await picker.evaluate(shown) == agent:
                break
            await keys.press("ArrowDown")
    assert await picker.evaluate(shown) == agent
    starters = page.get_by_role("group", name="Suggested questions").get_by_role("button")
    await expect(starters).to_have_count(len(STARTERS), timeout=30_000)

    # Send: Tab to the composer, type, Enter.
    await press_until(page, "Tab", "#composer")
    await keys.type("KEYBOARD-ONLY which plans are there?")
    await keys.press("Enter")

    # Approve: the card comes before the composer, so Shift+Tab reaches its buttons.
    card = page.locator("section.prompt-card")
    await expect(card).to_be_visible(timeout=60_000)
    await expect(page.locator("#status")).to_contain_text("asks to run search_knowledge")
    await press_until(page, "Shift+Tab", "section.prompt-card button.primary")
    assert await focus_is_visible(page)
    await keys.press("Enter")
    assert await cp.wait_turn_end() == "completed"
    await expect(card.locator(".prompt-outcome")).to_have_text("Resolved: approved")
    # The focus stays on the card (its buttons are disabled now), not lost to the page.
    await expect(card.locator(".prompt-outcome")).to_be_focused()
    await expect(cp.last_turn().locator(".answer")).to_have_text("Answered without a mouse.")
    await press_until(page, "Tab", "#composer")
