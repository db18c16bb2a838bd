"""In Chromium (#19): an open tab that allowed notifications shows one when its session ends;
the finished page then offers "Think longer", which runs to a second answer."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.test_session_page import start_session

pytestmark = pytest.mark.browser

expect: Any = pytest.importorskip("playwright.sync_api").expect

# Headless Chromium cannot show a notification: the page's Notification is replaced by one
# that records what it was asked to show (permission is granted to the context for real).
RECORD_NOTIFICATIONS = """
window.__shown = [];
class RecordedNotification {
  constructor(title, options) { window.__shown.push({title, body: (options || {}).body}); }
  close() {}
  static get permission() { return "granted"; }
  static requestPermission() { return Promise.resolve("granted"); }
}
window.Notification = RecordedNotification;
"""


def test_an_open_tab_notifies_when_the_session_ends_and_can_think_longer(page: Any, app: Any):
    page.context.grant_permissions(["notifications"], origin=app.url)
    page.add_init_script(RECORD_NOTIFICATIONS)
    start_session(page, "Do bees dream about flowers?", minutes=0.1)

    page.wait_for_function("window.__shown.length > 0", timeout=40_000)
    shown = page.evaluate("window.__shown")
    assert shown == [{"title": "Deep Think completed", "body": "Do bees dream about flowers?"}]

    # Without a reload: the finished page offers more time and a follow-up, and no longer
    # offers to notify.
    expect(page.get_by_role("button", name="Think longer")).to_be_visible()
    expect(page.locator(".follow-up summary")).to_have_text("Ask a follow-up")
    expect(page.locator("#notify-offer")).to_have_count(0)
    page.get_by_label("More minutes").fill("0.05")
    page.get_by_role("button", name="Think longer").click()
    expect(page.locator("#session-header")).to_have_attribute(
        "data-status", "completed", timeout=40_000
    )
    page.reload()
    expect(page.locator(".answer-versions summary")).to_contain_text("2 versions")
    assert len(page.evaluate("window.__shown")) == 0, "a reload starts afresh"
