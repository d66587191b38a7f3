"""Fixtures of the console's browser tests: Debian's chromium driven by Playwright's async API
(``executable_path``: Playwright cannot download its own browser here) against the shared
e2e stack, whose gateway serves the built console (``WEFT_CONSOLE_DIR``).

Every page records what must never happen: a console error, an uncaught exception or a
Content-Security-Policy violation; ``ConsolePage.assert_clean`` fails the test on any.
``make test`` runs the reduced set; the tests marked ``full`` run with ``WEFT_BROWSER_FULL=1``
(``make test-browser-full``, part of ``make test-full``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from playwright.async_api import Browser, Locator, Page, async_playwright
from playwright.async_api import TimeoutError as PlaywrightTimeout
from weft_testkit import LocalStack

from tests.stack_fixtures import REPO, ApiKeys

DESKTOP = {"width": 1280, "height": 860}
PHONE = {"width": 390, "height": 844}
SCREENSHOTS = REPO / "docs" / "images"
WATCH_CSP = """
window.__cspViolations = [];
document.addEventListener('securitypolicyviolation', (e) => {
  window.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`);
});
"""


def chromium_path() -> str:
    """The system chromium's binary (Debian's /usr/bin/chromium is a shell wrapper)."""
    for candidate in ("/usr/lib/chromium/chromium", shutil.which("chromium") or ""):
        if candidate and Path(candidate).is_file():
            return candidate
    pytest.fail("chromium is not installed: run deploy/local/ensure-console.sh --browser")


def chromium_version() -> str:
    """``Chromium 156.0...`` (recorded in the report with Playwright's version)."""
    out = subprocess.run(
        [chromium_path(), "--version"], capture_output=True, text=True, check=False
    )
    return out.stdout.strip()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without ``WEFT_BROWSER_FULL=1`` the ``full`` tests are deselected (not skipped)."""
    if os.environ.get("WEFT_BROWSER_FULL") == "1":
        return
    keep = [i for i in items if "tests/browser" not in i.nodeid or not i.get_closest_marker("full")]
    dropped = [i for i in items if i not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "full: browser test of the full run only (make test-browser-full)"
    )


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(
            executable_path=chromium_path(), chromium_sandbox=False,
            args=["--disable-dev-shm-usage", "--disable-gpu"],
        )  # fmt: skip
        yield launched
        await launched.close()


@dataclass
class ConsolePage:
    """One browser tab on the console, signed in with ``key``."""

    page: Page
    key: str
    problems: list[str] = field(default_factory=list)
    allowed: list[str] = field(default_factory=list)
    """Substrings of console errors a test provokes on purpose (a refused key's 401)."""

    async def sign_in(self) -> None:
        await self.page.get_by_label("API key").fill(self.key)
        await self.page.get_by_role("button", name="Sign in").click()
        await self.page.get_by_role("banner").wait_for()

    async def ask(self, question: str) -> None:
        await self.page.get_by_label("Message").fill(question)
        await self.page.get_by_role("button", name="Send", exact=True).click()

    def last_turn(self) -> Locator:
        return self.page.locator("article.turn").last

    async def wait_turn_end(self, timeout_ms: float = 90_000) -> str:
        """The last turn's final status (completed, cancelled, failed)."""
        turn = self.last_turn()
        try:
            await turn.and_(self.page.locator("[data-status]")).wait_for(timeout=timeout_ms)
        except PlaywrightTimeout:
            status = await self.page.locator("#status").text_content()
            shown = await self.page.locator("main").inner_text()
            picker = await self.page.locator("#agent-picker").evaluate("e => e.outerHTML")
            pytest.fail(
                f"no turn ended; status bar {status!r}; page {shown[:1500]!r}; "
                f"agents {picker}; {self.problems}"
            )
        return str(await turn.get_attribute("data-status"))

    async def assert_clean(self) -> None:
        violations = await self.page.evaluate("window.__cspViolations || []")
        problems = [p for p in self.problems if not any(a in p for a in self.allowed)]
        assert not violations, f"CSP violations: {violations}"
        assert not problems, f"console errors: {problems}"


OpenConsole = Callable[..., Awaitable[ConsolePage]]


@pytest.fixture
async def open_console(
    browser: Browser, stack: LocalStack, api_keys: ApiKeys
) -> AsyncIterator[OpenConsole]:
    """Opens the console in a fresh context as a new user of the stack's tenant (an empty
    session list), signed in; every page is checked clean when the test ends."""
    pages: list[ConsolePage] = []

    async def opener(
        viewport: dict[str, int] = DESKTOP,
        *,
        sign_in: bool = True,
        key: str | None = None,
        color_scheme: str = "light",
    ) -> ConsolePage:
        if key is None:
            key = (await api_keys.client(user=f"console-{len(pages)}-{os.urandom(3).hex()}")).key
        context = await browser.new_context(
            base_url=stack.gateway_url,
            viewport=viewport,  # type: ignore[arg-type]
            color_scheme=color_scheme,  # type: ignore[arg-type]
        )
        page = await context.new_page()
        await page.add_init_script(WATCH_CSP)
        cp = ConsolePage(page, key)
        page.on("console", lambda m: cp.problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: cp.problems.append(f"uncaught: {e}"))
        page.on(
            "response",
            lambda r: (
                cp.problems.append(f"{r.status} {r.request.method} {r.url}")
                if r.status >= 400
                else None
            ),
        )
        await page.goto("/")
        if sign_in:
            await cp.sign_in()
        pages.append(cp)
        return cp

    yield opener
    try:
        for cp in pages:
            await cp.assert_clean()
    finally:
        for cp in pages:
            await cp.page.context.close()


@pytest.fixture
async def llm_script(
    stack: LocalStack,
) -> AsyncIterator[Callable[[list[dict[str, object]]], Awaitable[None]]]:
    """Loads a script into the stack's scripted LLM; back to the demo policy afterwards."""
    import httpx

    async with httpx.AsyncClient(base_url=stack.llm_url, timeout=30) as c:
        await c.post("/_reset")

        async def load(steps: list[dict[str, object]]) -> None:
            resp = await c.post("/_script", json={"steps": steps})
            assert resp.status_code < 300, resp.text

        yield load
        await c.post("/_reset")


@pytest.fixture
def stack_gateway(stack: LocalStack) -> str:
    """The stack gateway's base URL."""
    return stack.gateway_url
