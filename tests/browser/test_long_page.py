"""A long session's page in Chromium (#67): 5,000 thoughts, 2,000 sub-questions and 2,000
sources stored in bulk (no model), opened finished and while it runs. The page's size and
DOM stay bounded, everything else is one request away, and a live page stays bounded after
"Show earlier". Timings and memory are figures (printed, and written to
test-output/long-page.json), not assertions."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.browser.app_server import ROOT, USERNAME, AppServer
from tests.helpers import DESKTOP, PHONE, stored_thoughts

pytestmark = [pytest.mark.browser, pytest.mark.timeout(420)]

expect: Any = pytest.importorskip("playwright.sync_api").expect

STREAM = "#thought-list > li.thought"
PAGE_BYTES = 300 * 1024
DOM_NODES = 6000
# app.js keeps at most this many thoughts in the list while someone reads earlier ones
# (MAX_THOUGHTS, in docs/architecture.md).
MAX_THOUGHTS = 300
FIGURES = ROOT / "test-output" / "long-page.json"


def build_session(app: AppServer, thoughts: int, status: str = "completed") -> str:
    """A session of the test login stored in bulk in the server's database; its id."""
    assert app.daphne is not None
    code = f"from bench.long_session import main; main({USERNAME!r}, {thoughts}, {status!r})"
    python = str(Path(sys.executable).parent / "python")
    done = subprocess.run(
        [python, str(ROOT / "manage.py"), "shell", "-v0", "-c", code],
        env=app.daphne.env, cwd=ROOT, check=True, capture_output=True, text=True,
    )  # fmt: skip
    return done.stdout.split()[-1]


def timed_get(page: Any, url: str) -> tuple[int, float]:
    """The response's size in bytes and the time to it, in ms (the best of three)."""
    best, size = float("inf"), 0
    for _ in range(3):
        start = time.perf_counter()
        response = page.request.get(url)
        best = min(best, (time.perf_counter() - start) * 1000)
        assert response.ok, response.status
        size = len(response.body())
    return size, round(best)


def tab_figures(page: Any) -> dict[str, int]:
    """DOM nodes, and the tab's JavaScript heap in MB (Chromium's own metrics)."""
    cdp = page.context.new_cdp_session(page)
    cdp.send("Performance.enable")
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    return {
        "dom_nodes": page.evaluate("document.getElementsByTagName('*').length"),
        "js_heap_mb": round(metrics["JSHeapUsedSize"] / 2**20),
    }


def record(name: str, figures: dict[str, Any]) -> None:
    print(f"\n{name}: {figures}")
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    kept = json.loads(FIGURES.read_text()) if FIGURES.exists() else {}
    FIGURES.write_text(json.dumps({**kept, name: figures}, indent=2))


@pytest.mark.parametrize("thoughts", [500, 5000])
def test_a_long_finished_session_page_stays_small_with_everything_one_request_away(
    page: Any, app: AppServer, thoughts: int, screenshot: Any
):
    session_id = build_session(app, thoughts)
    url = f"/sessions/{session_id}/"
    page.goto(url)
    page_bytes, page_ms = timed_get(page, url)
    figures: dict[str, Any] = {"page_bytes": page_bytes, "page_ms": page_ms, **tab_figures(page)}
    assert page_bytes <= PAGE_BYTES
    assert figures["dom_nodes"] <= DOM_NODES
    expect(page.locator(STREAM)).to_have_count(50)
    assert page.locator("#source-list > li").count() == 20, "the most cited sources"
    assert page.locator("#subq-tree li.subq").count() == 40, "the first sub-questions"
    assert page.locator("#synthesis-list > li.synthesis").count() == 10, "the newest syntheses"

    # "Show earlier", near the end and deep in the session.
    page.locator("#thought-earlier button").click()
    expect(page.locator(STREAM)).to_have_count(100)
    before = page.locator(STREAM).first.get_attribute("id").removeprefix("thought-")
    figures["earlier_ms"] = timed_get(page, f"{url}thoughts/?before={before}")[1]
    figures["earlier_deep_ms"] = timed_get(page, f"{url}thoughts/?before={thoughts // 10}")[1]

    # The filter: the newest page of the thoughts on one sub-question (a tenth of the
    # session's, those numbered ...3), from the server, and its own "Show earlier".
    chosen = page.locator(f"#thought-{thoughts - 7} button.on")
    focus = chosen.get_attribute("data-filter-focus")
    chosen.click()
    focused = page.locator("#focus-list > li.thought")
    expect(page.locator("#focus-list")).to_be_visible()
    on_it = thoughts // 10
    expect(page.locator("#stream-filter [data-role=count]")).to_have_text(f"({on_it} thoughts)")
    expect(focused).to_have_count(min(on_it, 50))
    if on_it > 50:
        page.locator("#focus-list li.focus-earlier button").click()
        expect(focused).to_have_count(100)
        expect(page.locator("#stream-filter [data-role=count]")).to_have_text(f"({on_it} thoughts)")
        seqs = focused.evaluate_all("ts => ts.map(t => +t.dataset.seq)")
        assert seqs == list(range(thoughts - 997, thoughts, 10))
    figures["filter_ms"] = timed_get(page, f"{url}thoughts/?focus={focus}")[1]
    deep = f"{url}thoughts/?focus={focus}&before={thoughts // 10}"
    figures["filter_deep_ms"] = timed_get(page, deep)[1]
    page.locator("#stream-filter [data-role=show-all]").click()

    # Every source and sub-question, a page at a time, by number and in the order asked.
    page.locator("#source-all-box summary").click()
    expect(page.locator("#source-all > li[data-number]")).to_have_count(100)
    page.locator("#source-all li.more button").click()
    expect(page.locator("#source-all > li[data-number]")).to_have_count(200)
    numbers = page.eval_on_selector_all(
        "#source-all > li[data-number]", "rows => rows.map(row => +row.dataset.number)"
    )
    assert numbers == list(range(1, 201))
    figures["sources_deep_ms"] = timed_get(page, f"{url}sources/?after={thoughts * 2 // 5 - 50}")[1]
    page.locator("#subq-all-box summary").click()
    expect(page.locator("#subq-all > li[data-subq]")).to_have_count(100)
    if thoughts // 50 > 10:
        page.locator("#synthesis-list li.synthesis-earlier button").click()
        expect(page.locator("#synthesis-list > li.synthesis")).to_have_count(20)
    figures.update({f"after_{k}": v for k, v in tab_figures(page).items()})
    record(f"finished-{thoughts}", figures)

    # On a phone: the answer, then the controls, then the stream.
    page.set_viewport_size(PHONE)
    tops = [
        page.locator(selector).bounding_box()["y"]
        for selector in ("#answer", "#session-header", "#followups", ".stream-card")
    ]
    assert tops == sorted(tops), tops
    screenshot(page, f"long-session-{thoughts}-phone")
    page.set_viewport_size(DESKTOP)


def read_back_to_the_cap(page: Any, app: AppServer) -> str:
    """A paused 5,000-thought session's page, live, read back with "Show earlier" until the
    list holds its cap; the session's id."""
    session_id = build_session(app, 5000, status="paused")
    page.goto(f"/sessions/{session_id}/")
    expect(page.locator("#connection")).to_have_attribute("data-state", "live")
    for shown in range(100, MAX_THOUGHTS + 1, 50):
        page.locator("#thought-earlier button").click()
        expect(page.locator(STREAM)).to_have_count(shown)
    return session_id


def test_a_live_page_stays_bounded_after_show_earlier(page: Any, app: AppServer):
    # Paused: live (its page listens to the session's group) with no model needed; a hint
    # sent from the page arrives live like a thought.
    read_back_to_the_cap(page, app)
    # One more page: the newest, far below what is being read, make way.
    first = page.locator(STREAM).first.get_attribute("id")
    page.locator("#thought-earlier button").click()
    expect(page.locator("#thought-later")).to_be_visible()
    expect(page.locator(STREAM)).to_have_count(300)
    assert page.locator(STREAM).nth(50).get_attribute("id") == first
    hidden = int(page.locator("#thought-later").get_attribute("data-count"))
    assert hidden == 50

    # A live thought waits behind "Show the newest thoughts": the list does not grow.
    page.locator("#steer textarea").fill("Look at the Royal Society's correspondence.")
    page.get_by_role("button", name="Send").click()
    expect(page.locator("#thought-later")).to_have_attribute("data-count", str(hidden + 1))
    expect(page.locator(STREAM)).to_have_count(300)
    figures = tab_figures(page)
    assert figures["dom_nodes"] <= DOM_NODES
    record("live-after-show-earlier", figures)

    # One request brings the newest page back, the hint at its end.
    page.locator("#thought-later button").click()
    expect(page.locator(STREAM)).to_have_count(50)
    expect(page.locator(STREAM).last).to_contain_text("Royal Society")
    expect(page.locator("#thought-later")).to_have_count(0)


def test_a_thinking_session_stays_bounded_after_show_earlier_with_the_newest_one_click_away(
    page: Any, app: AppServer
):
    """The 5,000-thought session resumed on the fake model: it thinks on, live, while the
    person reads earlier thoughts; the list never holds more than its cap and what arrived
    waits behind "Show the newest thoughts"."""
    session_id = read_back_to_the_cap(page, app)
    first = page.locator(STREAM).first.get_attribute("id")

    delay = app.claude.delay
    app.claude.delay = 0.02  # a fast model: a cycle's thoughts every second or so
    try:
        page.get_by_role("button", name="Resume").click()
        expect(page.locator("#session-header")).to_have_attribute("data-status", "thinking")
        later = page.locator("#thought-later")
        # Live thoughts arrive behind "Show the newest thoughts": the list does not grow.
        expect(later).to_be_visible(timeout=60_000)
        page.wait_for_function(
            "document.querySelector('#thought-later').dataset.count >= 20", timeout=120_000
        )
        counts = page.eval_on_selector_all(STREAM, "items => items.length")
        assert counts <= MAX_THOUGHTS, counts
        assert page.locator(STREAM).first.get_attribute("id") == first, "what is read stays"
        figures = tab_figures(page)
        assert figures["dom_nodes"] <= DOM_NODES
        record("thinking-after-show-earlier", figures)

        # The header is redrawn with every live update: a click, not a wait for it to settle.
        page.get_by_role("button", name="Pause").dispatch_event("click")
        expect(page.locator("#session-header")).to_have_attribute("data-status", "paused")
    finally:
        app.claude.delay = delay
    assert page.eval_on_selector_all(STREAM, "items => items.length") <= MAX_THOUGHTS

    # One request brings the newest page: it ends at the newest thought stored.
    later.locator("button").click()
    expect(later).to_have_count(0)
    expect(page.locator(STREAM)).to_have_count(50)
    stored = stored_thoughts(page, session_id)
    assert stored[-1] > 4999, "it thought on"
    expect(page.locator(STREAM).last).to_have_id(f"thought-{stored[-1]}")
    ids = page.eval_on_selector_all(STREAM, "items => items.map(item => +item.id.slice(8))")
    assert ids == stored[-50:]


def test_a_cancelled_session_offers_neither_more_time_nor_a_follow_up(page: Any, app: AppServer):
    session_id = build_session(app, 200, status="paused")
    page.goto(f"/sessions/{session_id}/")
    expect(page.locator("#connection")).to_have_attribute("data-state", "live")
    expect(page.locator("#notify-offer")).to_have_count(1)
    page.once("dialog", lambda dialog: dialog.accept())
    # The follow-up card asks for itself again once the page sees the session end.
    with page.expect_response(lambda response: "/followups/" in response.url):
        page.get_by_role("button", name="Cancel").click()
    expect(page.locator("#session-header")).to_have_attribute("data-status", "cancelled")
    expect(page.locator("#notify-offer")).to_have_count(0)
    assert page.get_by_role("button", name="Think longer").count() == 0
    assert page.locator(".follow-up").count() == 0
    expect(page.locator("#live-reasoning")).to_be_hidden()
    assert "Writing" not in page.locator("#live").inner_text()
