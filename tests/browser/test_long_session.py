"""A long session, compressed with a fast fake model, watched under `make run`'s daphne
configuration: one page open from start to finish and one opened late. Both end showing the
completed session and the same stored thoughts, without an htmx error, in messages that do
not grow with the session."""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.browser.app_server import PASSWORD, USERNAME, AppServer
from tests.browser.test_session_page import SESSION_URL
from tests.helpers import stored_thoughts

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]

expect: Any = pytest.importorskip("playwright.sync_api").expect

STREAM = "#thought-list > li.thought"

# Errors htmx reports as events (an out-of-band swap without a target, a bad swap...).
WATCH_HTMX = """
window.__htmxErrors = [];
for (const name of ["htmx:oobErrorNoTarget", "htmx:swapError", "htmx:targetError",
                    "htmx:onLoadError", "htmx:wsError"]) {
  document.addEventListener(name, (event) => window.__htmxErrors.push(name));
}
"""


class Frames:
    """Sizes of the WebSocket messages a page receives."""

    def __init__(self, page: Any) -> None:
        self.sizes: list[int] = []
        self.closes: list[Any] = []
        page.on("websocket", self._socket)

    def _socket(self, ws: Any) -> None:
        ws.on("framereceived", lambda payload: self.sizes.append(len(str(payload).encode())))
        ws.on("close", lambda *_: self.closes.append(ws.url))


def shown(page: Any) -> list[int]:
    ids = page.eval_on_selector_all(STREAM, "items => items.map(item => item.id)")
    return [int(i.removeprefix("thought-")) for i in ids]


def test_a_long_session_stays_live_on_a_page_open_throughout_and_one_opened_late(
    page: Any, app: AppServer, chromium: Any, login_state: dict, screenshot: Any
):
    delay = app.claude.delay
    app.claude.delay = 0.005  # a fast model: hundreds of thoughts in a couple of minutes
    try:
        page.add_init_script(WATCH_HTMX)
        early = Frames(page)
        page.goto("/")
        page.fill("#id_question", "How did the printing press change European science?")
        page.fill("#id_minutes", "1.5")
        page.fill("#id_synthesis_minutes", "0.1")
        page.get_by_role("button", name="Start thinking").click()
        page.wait_for_url(SESSION_URL)
        session_id = re.search(r"/sessions/([0-9a-f-]{36})/", page.url)[1]
        expect(page.locator("#connection")).to_have_attribute("data-state", "live")
        page.evaluate("window.__sameDocument = true")

        # Late: a second page opens once the session is well under way.
        count = page.locator("#session-header .stats dd").first
        expect(count).to_have_text(re.compile(r"^([2-9]\d\d|\d{4,})$"), timeout=240_000)
        context = chromium.new_context(base_url=app.url, storage_state=login_state, bypass_csp=True)
        late = context.new_page()
        late.add_init_script(WATCH_HTMX)
        late_frames = Frames(late)
        late.goto(page.url)
        expect(late.locator("#connection")).to_have_attribute("data-state", "live")
        served = late.request.get(page.url).text()
        stream = served.split('id="thought-list"', 1)[1].split("</ol>", 1)[0]
        assert len(re.findall(r'<li id="thought-\d+"', stream)) == 50, "a late page starts light"
        expect(late.locator("#thought-earlier button")).to_be_visible()

        for each in (page, late):
            expect(each.locator("#session-header")).to_have_attribute(
                "data-status", "completed", timeout=240_000
            )
            expect(each.locator("#answer")).to_be_visible()
            expect(each.locator("#connection")).to_have_text("Finished")
        screenshot(page, "long-session-open-throughout")
        screenshot(late, "long-session-opened-late")
    finally:
        app.claude.delay = delay

    stored = stored_thoughts(page, session_id)
    assert len(stored) >= 200, f"a long session: {len(stored)} thoughts"
    for each in (page, late):
        ids = shown(each)
        # The newest stored thoughts, in order, none twice, none missing between them.
        assert ids and ids == stored[-len(ids) :], (ids[:5], ids[-5:], stored[-5:])
        assert each.evaluate("window.__htmxErrors") == []
        # The DOM stays bounded whatever the session's length.
        assert each.locator("#thought-list > li").count() <= 200
    assert page.evaluate("window.__sameDocument") is True, "the first page never reloaded"
    # The scratchpad keeps the newest notes, as its summary says, however they arrived.
    notes = stored_thoughts(page, session_id, notes=True)
    assert len(notes) > 50, f"{len(notes)} notes"
    for each in (page, late):
        kept = each.eval_on_selector_all(
            "#scratchpad-list > li", "items => items.map(item => +item.id.slice(8))"
        )
        assert kept == notes[-50:], (kept[:3], notes[-50:][:3], len(kept))
        summary = each.locator("#scratchpad-summary")
        expect(summary).to_contain_text(f"({len(notes)} notes")
        expect(summary).to_contain_text("the newest 50 shown")
    # Sources and sub-questions: each page shows a bounded part of what the server stored,
    # none twice, and knows of the newest (the rest are under "All sources" and "All
    # sub-questions", one request away).
    stored_sources = [
        s["number"] for s in page.request.get(f"/api/sessions/{session_id}/sources").json()
    ]
    for each in (page, late):
        numbers = each.eval_on_selector_all(
            "#source-list > li", "items => items.map(item => +item.id.slice(7))"
        )
        assert numbers and len(set(numbers)) == len(numbers) <= 60, numbers
        assert set(numbers) <= set(stored_sources)
        top = each.locator("#source-list").get_attribute("data-top")
        assert int(top) == max(stored_sources)
    for each in (page, late):
        questions = each.eval_on_selector_all(
            "li.subq[id^=subq-]", "items => items.map(item => +item.id.slice(5))"
        )
        assert questions and len(set(questions)) == len(questions) <= 150
        assert int(each.locator("#subq-tree").get_attribute("data-top")) >= max(questions)
    tops = {each.locator("#subq-tree").get_attribute("data-top") for each in (page, late)}
    assert len(tops) == 1, "both pages know of the same newest sub-question"

    # Earlier thoughts load on demand on the late page, from the keyboard too: focus stays
    # on "Show earlier", so Enter again loads the page before.
    before = len(shown(late))
    late.locator("#thought-earlier button").focus()
    late.keyboard.press("Enter")
    expect(late.locator(STREAM)).to_have_count(before + 50)
    expect(late.locator("#thought-earlier button")).to_be_focused()
    late.keyboard.press("Enter")
    expect(late.locator(STREAM)).to_have_count(before + 100)
    ids = shown(late)
    assert ids == stored[-len(ids) :]

    # Messages stay small: no live message or catch-up part grows with the session.
    largest = max(early.sizes + late_frames.sizes)
    print(
        f"\nthoughts={len(stored)} messages={len(early.sizes)} largest={largest} B "
        f"late page messages={len(late_frames.sizes)}"
    )
    assert largest <= 40 * 1024
    context.close()


def test_after_logging_out_elsewhere_the_page_says_so(chromium: Any, app: AppServer):
    # Its own login: logging out must not end the one the other tests share.
    context = chromium.new_context(base_url=app.url, bypass_csp=True)
    context.set_default_timeout(20_000)
    page = context.new_page()
    page.goto("/")
    page.fill("#id_username", USERNAME)
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    page.wait_for_url(re.compile(r"/$"))
    page.fill("#id_question", "Is a page told when its login ends?")
    page.fill("#id_minutes", "2")
    page.get_by_role("button", name="Start thinking").click()
    page.wait_for_url(SESSION_URL)
    expect(page.locator("#connection")).to_have_attribute("data-state", "live")
    # The same login ends in another tab (the cookie is shared).
    other = context.new_page()
    other.goto("/")
    other.locator("form[action='/accounts/logout/'] button").click()
    # The next live message (a heartbeat's header at the latest) finds the login gone.
    expect(page.locator("#connection")).to_contain_text("Signed out", timeout=40_000)
    expect(page.locator("#reload")).to_be_visible()
    context.close()
