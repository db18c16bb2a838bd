"""Headless Chromium against the app served by daphne, with the fake Claude and Exa servers.

Debian's Chromium, not Playwright's download (which cannot be fetched here): `.ci/run`
installs it when missing, and without it these tests skip and say so.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.app_server import PASSWORD, ROOT, USERNAME, AppServer, serve
from tests.helpers import DESKTOP

CHROMIUM = Path(os.environ.get("DEEPTHINK_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
SCREENSHOTS = ROOT / "test-output" / "screenshots"


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip(
            f"needs Debian's Chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)"
        )
    sync_api = pytest.importorskip("playwright.sync_api")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture(scope="module")
def app(chromium: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[AppServer]:
    with serve(tmp_path_factory.mktemp("browser-app"), model_delay=0.2) as server:
        yield server
        # Shown with a failing test's output: what the server said last.
        print(f"--- the end of {server.log}:", *server.log.read_text().splitlines()[-40:], sep="\n")


@pytest.fixture(scope="module")
def login_state(chromium: Any, app: AppServer) -> dict:
    """Log in once through the real form; each test's browser context starts logged in."""
    context = chromium.new_context(base_url=app.url)
    page = context.new_page()
    page.goto("/")
    assert "/accounts/login/" in page.url, "the start page asks for a login"
    page.fill("#id_username", USERNAME)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/$"))
    state = context.storage_state()
    context.close()
    return state


@pytest.fixture
def page(chromium: Any, app: AppServer, login_state: dict) -> Iterator[Any]:
    """A logged-in tab. A JavaScript error on any page fails the test.

    Playwright's waits evaluate strings in the page, which our Content-Security-Policy
    forbids, so these tabs bypass it; test_content_security_policy runs the page under it.
    """
    context = chromium.new_context(
        base_url=app.url, viewport=DESKTOP, storage_state=login_state, bypass_csp=True
    )
    context.set_default_timeout(20_000)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    yield tab
    context.close()
    assert not errors, f"JavaScript errors: {errors}"


@pytest.fixture
def screenshot() -> Any:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)

    def take(page: Any, name: str, *, full_page: bool = False) -> Path:
        path = SCREENSHOTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=full_page, animations="disabled")
        return path

    return take
