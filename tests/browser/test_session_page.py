"""The whole journey in headless Chromium: start, watch live, steer, pause, reload, filter.

Each test drives its own session on the shared app (fake Claude at 0.2 s a reply), so the
tests stay independent; screenshots land in test-output/screenshots/ for a person to look at.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from fakes.anthropic_server import Reply
from tests.browser.app_server import AppServer
from tests.helpers import DESKTOP, PHONE, stored_thoughts

pytestmark = pytest.mark.browser

expect: Any = pytest.importorskip("playwright.sync_api").expect

THOUGHTS = "#thought-list > li"
SESSION_URL = re.compile(r"/sessions/[0-9a-f-]{36}/$")


def start_session(
    page: Any, question: str, *, minutes: float, synthesis: float = 0.05, screenshot: Any = None
) -> str:
    page.goto("/")
    page.fill("#id_question", question)
    page.fill("#id_minutes", str(minutes))
    page.fill("#id_synthesis_minutes", str(synthesis))
    if screenshot:
        screenshot(page, "start-page")
    page.get_by_role("button", name="Start thinking").click()
    page.wait_for_url(SESSION_URL)
    expect(page.locator("#connection")).to_have_attribute("data-state", "live")
    return page.url


def thought_ids(page: Any) -> list[str]:
    return page.eval_on_selector_all(THOUGHTS, "items => items.map(item => item.id)")


def wait_for_thoughts(page: Any, count: int, timeout: float = 20_000) -> None:
    page.wait_for_function(
        f"document.querySelectorAll('{THOUGHTS}').length >= {count}", timeout=timeout
    )


def cancel(page: Any) -> None:
    page.once("dialog", lambda dialog: dialog.accept())  # hx-confirm asks first
    page.locator("#session-header").get_by_role("button", name="Cancel").click()
    expect(page.locator("#session-header")).to_have_attribute("data-status", "cancelled")


def sequences(ids: list[str]) -> list[int]:
    return [int(i.removeprefix("thought-")) for i in ids]


def test_a_session_is_watched_live_from_question_to_answer(page: Any, screenshot: Any):
    page.goto("/")
    presets = page.get_by_role("group", name="Budget presets")
    presets.get_by_role("button", name="30 min").click()
    expect(page.locator("#id_minutes")).to_have_value("30")
    expect(presets.get_by_role("button", name="30 min")).to_have_attribute("aria-pressed", "true")

    start_session(
        page,
        "Why do we dream, and does dreaming help us remember?",
        minutes=0.3,
        screenshot=screenshot,
    )
    page.evaluate("window.__sameDocument = true")  # gone if anything reloads the page

    wait_for_thoughts(page, 6)
    expect(page.locator("#sub-questions .subq").first).to_be_visible()
    expect(page.locator("#sources ol.sources > li").first).to_be_visible()
    expect(page.locator("#confidence svg.chart circle").first).to_be_attached()
    expect(page.locator("#session-header")).to_have_attribute("data-status", "thinking")
    screenshot(page, "session-running")

    expect(page.locator("#answer")).to_be_visible(timeout=60_000)
    expect(page.locator("#session-header")).to_have_attribute("data-status", "completed")
    expect(page.locator("#answer .prose")).to_contain_text("the evidence gathered so far")
    expect(page.locator("#answer a.cite").first).to_have_attribute(
        "href", re.compile(r"#source-\d+")
    )
    assert page.locator("#confidence svg.chart circle").count() >= 2
    expect(page.locator("#connection")).to_have_text("Finished")
    expect(page.locator("#steer")).to_contain_text("This session has ended")
    assert page.evaluate("window.__sameDocument") is True, "everything arrived without a reload"

    ids = thought_ids(page)
    assert len(ids) == len(set(ids)) and sequences(ids) == sorted(sequences(ids))
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(page, "session-completed")
    screenshot(page, "session-completed-full", full_page=True)
    page.set_viewport_size(PHONE)
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(page, "session-completed-phone")
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, "nothing is wider than a phone screen"

    page.set_viewport_size(DESKTOP)
    page.goto("/sessions/?q=dreaming")
    row = page.locator("#session-rows tr", has_text="Why do we dream")
    expect(row).to_contain_text("Completed")
    expect(row).to_contain_text("78%")
    expect(row.locator("svg.sparkline polyline")).to_be_attached()


def test_pause_resume_reconnect_and_reload_keep_the_same_state(page: Any, app: AppServer):
    # Every WebSocket goes through here, so the test can drop one as a network would.
    sockets: list[Any] = []

    def route(ws: Any) -> None:
        ws.connect_to_server()
        sockets.append(ws)

    page.route_web_socket(re.compile(r"/ws/sessions/"), route)
    page.add_init_script(
        """
        window.__connectionStates = [];
        new MutationObserver(() => {
          const el = document.getElementById("connection");
          if (el) window.__connectionStates.push(el.dataset.state);
        }).observe(document, {subtree: true, attributes: true, attributeFilter: ["data-state"]});
        """
    )
    start_session(page, "Is mathematics discovered or invented?", minutes=1, synthesis=0.1)
    wait_for_thoughts(page, 3)

    header = page.locator("#session-header")
    header.get_by_role("button", name="Pause").click()
    expect(header).to_have_attribute("data-status", "paused")
    expect(header.get_by_role("button", name="Resume")).to_be_visible()
    # A step that was in flight may still land; then the page stands still.
    before = settled_thought_ids(page)
    remaining = header.locator("[data-role=remaining]").text_content()
    page.wait_for_timeout(1200)
    assert header.locator("[data-role=remaining]").text_content() == remaining, "clock stopped"

    page.reload()
    expect(page.locator("#connection")).to_have_attribute("data-state", "live")
    expect(header).to_have_attribute("data-status", "paused")
    assert thought_ids(page) == before, "the same thoughts, in order, no duplicates"

    header.get_by_role("button", name="Resume").click()
    expect(header).to_have_attribute("data-status", "thinking")
    wait_for_thoughts(page, len(before) + 3)

    # A dropped connection: the page says so, reconnects, and catches up what it missed.
    page.evaluate("window.__connectionStates = []")
    sockets[-1].close(code=1012, reason="service restart")
    expect(page.locator("#connection")).to_have_attribute("data-state", "live", timeout=15_000)
    states = page.evaluate("window.__connectionStates")
    assert "reconnecting" in states and "catching-up" in states, states
    wait_for_thoughts(page, len(thought_ids(page)) + 3)

    shown = thought_ids(page)
    assert len(shown) == len(set(shown)), "no thought shown twice after the catch-up"
    page.reload()
    wait_for_thoughts(page, len(shown))
    after = thought_ids(page)
    assert after[: len(shown)] == shown, "a reload shows what the live page showed, in order"
    assert len(after) == len(set(after))
    assert sequences(after) == sorted(sequences(after))
    cancel(page)


def settled_thought_ids(page: Any, quiet_ms: int = 1000) -> list[str]:
    """The thought ids once nothing new has arrived for `quiet_ms`."""
    ids = thought_ids(page)
    for _ in range(20):
        page.wait_for_timeout(quiet_ms)
        now = thought_ids(page)
        if now == ids:
            return ids
        ids = now
    raise AssertionError("the paused page kept changing")


XSS = (
    '<script>window.__xss=1</script> <img src=x onerror="window.__xss=1"> '
    "[click](javascript:window.__xss=1)"
)


def xss_responder(app: AppServer) -> Any:
    """The scripted fake model, with the payloads in thoughts, sub-questions and answers."""

    def respond(body: dict) -> Reply:
        reply = app.claude.scripted_mind(body)
        for marker in ("THOUGHT: ", "QUESTION: ", "SYNTHESIS: ", "ANSWER: "):
            reply.text = reply.text.replace(marker, f"{marker}{XSS} ", 1)
        return reply

    return respond


def test_markup_from_the_model_and_the_web_stays_inert(page: Any, app: AppServer, screenshot: Any):
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    app.exa.enqueue(
        {
            "results": [
                {
                    "id": "evil",
                    "url": "javascript:window.__xss=1",
                    "title": '<img src=x onerror="window.__xss=1"> Evil <b>source</b>',
                    "text": "<script>window.__xss=1</script>",
                    "highlights": ['<svg onload="window.__xss=1">'],
                    "summary": "<script>window.__xss=1</script>",
                }
            ]
        }
    )
    app.claude.responder = xss_responder(app)
    try:
        start_session(page, "Is <b>this</b> safe? <script>window.__xss=1</script>", minutes=0.1)
        expect(page.locator("#answer")).to_be_visible(timeout=60_000)
    finally:
        app.claude.responder = app.claude.scripted_mind

    def assert_inert() -> None:
        assert page.evaluate("typeof window.__xss") == "undefined"
        assert page.locator("img[src='x'], svg[onload]").count() == 0
        assert page.locator("a[href^='javascript:' i]").count() == 0
        scripts = page.eval_on_selector_all("script", "s => s.map(x => x.textContent).join()")
        assert "__xss" not in scripts
        # Shown as the text it is.
        expect(page.locator("#answer .prose")).to_contain_text("<script>window.__xss=1</script>")
        expect(page.locator("#answer .prose")).to_contain_text("[click](javascript:window.__xss=1)")
        expect(
            page.locator(THOUGHTS, has_text='<img src=x onerror="window.__xss=1">').first
        ).to_be_visible()
        expect(page.locator("h1.question")).to_have_text(
            "Is <b>this</b> safe? <script>window.__xss=1</script>"
        )

    assert_inert()  # as it arrived over the WebSocket
    page.reload()
    assert_inert()  # as the server renders the page
    assert not dialogs
    screenshot(page, "session-xss-inert")


def test_steering_adds_a_sub_question_and_a_hint(page: Any):
    start_session(page, "How should a city prepare for heat waves?", minutes=1)
    wait_for_thoughts(page, 1)
    steer = page.locator("#steer")

    steer.get_by_role("radio", name="Sub-question").check()
    steer.get_by_label("Your hint or sub-question").fill("What about trees on every street?")
    steer.get_by_role("button", name="Send").click()
    expect(steer.locator(".notice")).to_have_text("Added: it will be explored next.")
    mine = page.locator(f"{THOUGHTS}.type-question", has_text="What about trees on every street?")
    expect(mine).to_be_visible()
    expect(mine).to_contain_text("from the person watching")
    node = page.locator("#sub-questions .subq", has_text="What about trees on every street?")
    expect(node).to_contain_text("asked by a person")
    expect(node.locator(".priority").first).to_have_text(re.compile(r"10"))
    # Explored next: the model's thoughts on it follow, tagged with its focus.
    expect(node.locator(".state").first).to_have_text("✓ Explored", timeout=45_000)
    focus = node.first.get_attribute("id").removeprefix("subq-")
    expect(
        page.locator(f'{THOUGHTS}[data-focus="{focus}"]:not(.type-question)').first
    ).to_be_attached()

    steer.get_by_role("radio", name="Hint").check()
    steer.get_by_label("Your hint or sub-question").fill("Think about <b>older</b> people first")
    steer.get_by_role("button", name="Send").click()
    expect(steer.locator(".notice")).to_have_text("Noted: the next prompts include your hint.")
    hint = page.locator(f"{THOUGHTS}.type-hint")
    expect(hint).to_contain_text("Think about <b>older</b> people first")
    cancel(page)


def test_selecting_a_sub_question_filters_the_stream_as_thoughts_arrive(page: Any, screenshot: Any):
    start_session(page, "What makes a programming language easy to learn?", minutes=0.3)
    page.wait_for_function(
        f"""[...document.querySelectorAll('{THOUGHTS}')].some(t => t.dataset.focus)
            && document.querySelectorAll('#sub-questions .subq').length >= 3""",
        timeout=30_000,
    )
    focus = page.eval_on_selector(
        f"{THOUGHTS}[data-focus]:not([data-focus=''])", "t => t.dataset.focus"
    )
    button = page.locator(f'.subq-text[data-filter-focus="{focus}"]')

    # With the keyboard: a sub-question is a button.
    button.focus()
    page.keyboard.press("Enter")
    expect(button).to_have_attribute("aria-pressed", "true")
    banner = page.locator("#stream-filter")
    expect(banner).to_be_visible()
    expect(banner.locator("[data-role=focus-text]")).to_have_text(button.text_content().strip())

    def visible_focuses() -> list[str]:
        # The filtered list (every thought on it, from the server) replaces the stream.
        return page.eval_on_selector_all(
            "#thought-list > li.thought, #focus-list > li.thought",
            "ts => ts.filter(t => t.checkVisibility()).map(t => t.dataset.focus)",
        )

    expect(page.locator("#focus-list > li").first).to_be_visible()
    expect(page.locator("#thought-list")).to_be_hidden()
    assert visible_focuses() and set(visible_focuses()) == {focus}
    total = len(thought_ids(page))
    wait_for_thoughts(page, total + 3)  # new thoughts arrive live and are filtered too
    assert set(visible_focuses()) == {focus}
    screenshot(page, "session-running-filtered")
    page.set_viewport_size(PHONE)
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(page, "session-running-phone")
    page.set_viewport_size(DESKTOP)

    banner.get_by_role("button", name="Show all thoughts").click()
    expect(banner).to_be_hidden()
    expect(button).to_have_attribute("aria-pressed", "false")
    # Counted in one evaluation: a live message with a cycle's thoughts can land between two.
    shown, held = page.eval_on_selector_all(
        "#thought-list > li.thought, #focus-list > li.thought",
        """ts => [ts.filter(t => t.checkVisibility()).length,
                  ts.filter(t => t.closest('#thought-list')).length]""",
    )
    assert shown == held > total

    # A thought's "on: …" link filters too; "Show all" brings the person back to that
    # thought in the stream (not to the sub-question list), and Escape clears the filter.
    page.locator(f'{THOUGHTS} button.on[data-filter-focus="{focus}"]').last.evaluate(
        "b => b.dataset.opener = '1'"
    )
    on = page.locator(f'{THOUGHTS} button.on[data-opener="1"]')  # the same one, as more arrive
    on.click()
    expect(banner).to_be_visible()
    banner.get_by_role("button", name="Show all thoughts").click()
    expect(banner).to_be_hidden()
    assert page.evaluate("document.activeElement.dataset.opener") == "1"
    on.click()
    expect(banner).to_be_visible()
    page.keyboard.press("Escape")
    expect(banner).to_be_hidden()
    cancel(page)


def test_a_filter_holds_through_a_catch_up_that_starts_the_stream_over(page: Any, app: AppServer):
    """A page away for more than a page of thoughts gets the stream's newest page in a new list;
    under a sub-question filter that list stays hidden and the filtered list is complete."""
    holding: list[Any] = []  # while set, a reconnecting page gets a socket that says nothing
    sockets: list[Any] = []

    def route(ws: Any) -> None:
        if holding:
            holding.append(ws)
            return
        ws.connect_to_server()
        sockets.append(ws)

    page.route_web_socket(re.compile(r"/ws/sessions/"), route)
    delay = app.claude.delay
    app.claude.delay = 0.005  # a fast model: a page of thoughts in seconds
    try:
        url = start_session(page, "Why did the Bronze Age collapse?", minutes=5)
        session_id = url.rstrip("/").rsplit("/", 1)[1]
        page.wait_for_function(
            f"[...document.querySelectorAll('{THOUGHTS}')].some(t => t.dataset.focus)",
            timeout=30_000,
        )
        focus = page.eval_on_selector(
            f"{THOUGHTS}[data-focus]:not([data-focus=''])", "t => t.dataset.focus"
        )
        # The list moves as fast as the model re-ranks it: chosen with the keyboard.
        page.locator(f'.subq-text[data-filter-focus="{focus}"]').focus()
        page.keyboard.press("Enter")
        focused = page.locator("#focus-list > li")
        expect(focused.first).to_be_visible()
        seen = set(focused.evaluate_all("ts => ts.map(t => +t.dataset.seq)"))

        holding.append(None)
        last = max(sequences(thought_ids(page)))
        sockets[-1].close(code=1012, reason="service restart")
        missed = 0
        for _ in range(180):  # until the server stored more than a page since the page's last
            missed = sum(1 for n in stored_thoughts(page, session_id) if n > last)
            if missed > 60:
                break
            page.wait_for_timeout(500)
        assert missed > 60, missed
        held = [ws for ws in holding if ws is not None]
        holding.clear()
        held[-1].close(code=1012, reason="service restart")

        # The catch-up started the stream over (its newest page, earlier ones on demand).
        expect(page.locator("#thought-list > #thought-earlier")).to_be_attached(timeout=20_000)
        expect(page.locator("#focus-list")).not_to_have_attribute("aria-busy", "true")
        expect(page.locator("#thought-list")).to_be_hidden()
        expect(page.locator("#stream-filter")).to_be_visible()
        # Read in one evaluation: thoughts keep arriving.
        shown, on_page = page.evaluate(
            """focus => {
              const all = [...document.querySelectorAll(
                "#thought-list > li.thought, #focus-list > li.thought")];
              return [
                all.filter(t => t.checkVisibility()).map(t => [t.dataset.focus, +t.dataset.seq]),
                all.filter(t => t.id && t.dataset.focus === focus).map(t => +t.id.slice(8)),
              ];
            }""",
            focus,
        )
        assert {f for f, _ in shown} == {focus}
        seqs = [n for _, n in shown]
        assert seqs == sorted(set(seqs)), "in order, none twice"
        assert seen | set(on_page) <= set(seqs), "nothing on the sub-question left out"
        # The scratchpad too holds a run of the newest notes, with no hole where it was away.
        kept = page.eval_on_selector_all(
            "#scratchpad-list > li", "items => items.map(item => +item.id.slice(8))"
        )
        notes = stored_thoughts(page, session_id, notes=True)
        assert kept and len(kept) <= 50
        start = notes.index(kept[0])
        assert kept == notes[start : start + len(kept)], "no note missing between others"
    finally:
        app.claude.delay = delay
    cancel(page)


def test_the_sessions_list_searches_and_filters_in_place(page: Any, screenshot: Any):
    start_session(page, "Why are flamingos pink?", minutes=1)
    cancel(page)
    page.goto("/sessions/")
    page.evaluate("window.__sameDocument = true")
    rows = page.locator("#session-rows tr")

    page.get_by_label("Search questions").fill("flamingos")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("Why are flamingos pink?")
    expect(rows.first).to_contain_text("Cancelled")
    expect(page).to_have_url(re.compile(r"[?&]q=flamingos"))  # reload and back keep it
    page.get_by_label("Status").select_option("completed")
    expect(page.locator("#session-rows")).to_contain_text("No sessions match.")
    assert page.evaluate("window.__sameDocument") is True, "filtered in place"

    page.get_by_label("Search questions").fill("")
    page.get_by_label("Status").select_option("")
    expect(rows.filter(has_text="Why are flamingos pink?")).to_have_count(1)
    screenshot(page, "sessions-list")
    page.set_viewport_size(PHONE)
    screenshot(page, "sessions-list-phone")
    overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, "the list fits a phone screen"


def test_content_security_policy(chromium: Any, app: AppServer, login_state: dict):
    """The live page works under its real Content-Security-Policy: no violations while a
    session streams, the stream filter (its one nonce'd style) included."""
    context = chromium.new_context(base_url=app.url, viewport=DESKTOP, storage_state=login_state)
    context.set_default_timeout(20_000)
    tab = context.new_page()
    violations: list[str] = []
    tab.on(
        "console",
        lambda message: (
            "Content Security Policy" in message.text and violations.append(message.text)
        ),
    )
    response = tab.goto("/")
    policy = response.headers.get("content-security-policy", "")
    assert "script-src 'self'" in policy and "object-src 'none'" in policy
    assert "unsafe-eval" not in policy and "script-src 'self' 'unsafe-inline'" not in policy
    start_session(tab, "Why is the sea salty?", minutes=0.15)
    expect(tab.locator(THOUGHTS).first).to_be_visible()
    expect(tab.locator("#sub-questions .subq-text").first).to_be_visible(timeout=30_000)
    tab.locator("#sub-questions .subq-text").first.click()
    expect(tab.locator("#stream-filter")).to_be_visible()
    expect(tab.locator("#answer h2")).to_be_visible(timeout=60_000)
    context.close()
    assert not violations, violations


def test_the_estimate_follows_the_form_and_conclude_now_writes_the_answer(page: Any):
    page.goto("/")
    estimate = page.locator("#estimate")
    expect(estimate).to_contain_text("Estimated cost: $")
    page.get_by_role("group", name="Budget presets").get_by_role("button", name="2 h").click()
    expect(estimate).to_contain_text("120 minutes on")
    page.fill("#id_minutes", "1")
    page.locator("#id_minutes").dispatch_event("change")
    expect(estimate).to_contain_text("1 minute on")

    start_session(page, "Is light a wave or a particle?", minutes=5, synthesis=0.05)
    wait_for_thoughts(page, 3)
    header = page.locator("#session-header")
    page.once("dialog", lambda dialog: dialog.accept())  # hx-confirm asks first
    header.get_by_role("button", name="Conclude now").click()
    expect(header).to_have_attribute("data-status", "completed", timeout=30_000)
    expect(header).to_contain_text("Concluded on request")
    expect(page.locator("#answer .prose")).to_contain_text("the evidence gathered so far")
