"""Signing in to the console through the tenant's identity provider (issue 41): OAuth 2.0
authorization code with PKCE, done by the browser against a local test provider
(``oidc_provider.py``). The provider's access token is a JWT of the tenant's
``identity_provider``, which the gateway verifies like any end-user token; the console keeps
it in memory, the code and state leave the address bar, and a callback this tab did not
start (a forged state) is refused. Full run only (it starts the admin stack's extra
gateway)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
from playwright.async_api import Browser, expect

from tests.browser.conftest import WATCH_CSP, ConsolePage
from tests.browser.oidc_provider import AUDIENCE, CLIENT_ID, LocalProvider
from tests.security.admin_fixtures import AdminStack
from tests.stack_fixtures import REPO

pytestmark = [pytest.mark.full, pytest.mark.timeout(240)]
SUBJECT = "oidc-alice"


@pytest.fixture
def provider() -> Iterator[LocalProvider]:
    running = LocalProvider(SUBJECT)
    running.serve()
    yield running
    running.close()


@pytest.fixture
async def oidc_gateway(admin_stack: AdminStack, provider: LocalProvider) -> AsyncIterator[str]:
    """A tenant whose identity provider is ``provider``, and one more gateway of the admin
    stack whose console offers that provider's sign-in; its base URL."""
    await admin_stack.tenant(
        identity_provider={
            "issuer": provider.url,
            "audience": AUDIENCE,
            "jwks_url": f"{provider.url}/jwks.json",
            "algorithms": ["RS256"],
            "max_token_lifetime_s": 600,
        }
    )
    env = {
        "WEFT_CONSOLE_DIR": str(REPO / "console" / "dist"),
        "WEFT_CONSOLE_OIDC_ISSUER": provider.url,
        "WEFT_CONSOLE_OIDC_CLIENT_ID": CLIENT_ID,
        "WEFT_CONSOLE_OIDC_AUTHORIZE_URL": f"{provider.url}/authorize",
        "WEFT_CONSOLE_OIDC_TOKEN_URL": f"{provider.url}/token",
        "WEFT_CONSOLE_OIDC_LABEL": "Test IdP",
    }
    stack = admin_stack.stack
    stack.config.extra_env.update(env)
    try:
        port = stack.start_extra("gateway", [])
    finally:
        for name in env:
            stack.config.extra_env.pop(name, None)
    base = f"http://127.0.0.1:{port}"
    provider.redirect_uri = f"{base}/"
    yield base


async def test_sign_in_with_the_identity_provider(
    browser: Browser, oidc_gateway: str, provider: LocalProvider
) -> None:
    context = await browser.new_context(base_url=oidc_gateway)
    page = await context.new_page()
    await page.add_init_script(WATCH_CSP)
    cp = ConsolePage(page, key="")
    page.on("console", lambda m: cp.problems.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: cp.problems.append(f"uncaught: {e}"))
    try:
        await page.goto("/")
        await page.get_by_role("button", name="Sign in with Test IdP").click()
        await page.get_by_role("banner").wait_for()
        assert provider.tokens_issued == 1
        assert page.url == f"{oidc_gateway}/"  # the code and state are gone
        await expect(page.locator("ul.sessions")).to_contain_text("No conversations yet.")
        # The token works for the whole API, the stream included: a turn as this end user.
        await cp.ask("Hello from an end user")
        assert await cp.wait_turn_end() == "completed"
        await expect(page.locator("button.session")).to_have_count(1)
        kept = await page.evaluate(
            "JSON.stringify([Object.entries(localStorage), Object.entries(sessionStorage),"
            " document.cookie])"
        )
        assert "eyJ" not in kept  # no JWT kept anywhere the page stores things
        await cp.assert_clean()
    finally:
        await context.close()


async def test_a_callback_this_tab_did_not_start_is_refused(
    browser: Browser, oidc_gateway: str, provider: LocalProvider
) -> None:
    context = await browser.new_context(base_url=oidc_gateway)
    page = await context.new_page()
    await page.add_init_script(WATCH_CSP)
    cp = ConsolePage(page, key="")
    page.on("console", lambda m: cp.problems.append(m.text) if m.type == "error" else None)
    try:
        await page.goto("/?code=stolen-code&state=forged")
        await expect(page.get_by_role("alert")).to_contain_text("state mismatch")
        assert page.url == f"{oidc_gateway}/"
        assert provider.tokens_issued == 0  # the code was never exchanged
        await cp.assert_clean()
    finally:
        await context.close()
