"""A page that loses its WebSocket mid-session and reconnects ends with exactly the stored
rows: nothing missed, nothing twice."""

from __future__ import annotations

import asyncio
import re
from html.parser import HTMLParser
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from tests.helpers import communicator, login
from thinking import broadcast
from thinking.models import Status, ThinkingSession
from thinking.worker import Supervisor

pytestmark = pytest.mark.django_db(transaction=True)

THOUGHT_ID = re.compile(r"thought-(\d+)")


class Swaps(HTMLParser):
    """The top-level elements of a frame: their swap instruction and the thoughts inside."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = 0
        self.elements: list[dict[str, Any]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if self.depth == 0:
            self.elements.append(
                {"id": values.get("id"), "swap": values.get("hx-swap-oob"), "thoughts": []}
            )
        elif tag == "li" and THOUGHT_ID.fullmatch(values.get("id") or ""):
            self.elements[-1]["thoughts"].append(int(THOUGHT_ID.fullmatch(values["id"])[1]))
        if tag not in ("br", "img", "input", "meta", "link", "circle", "line", "polyline"):
            self.depth += 1

    def handle_endtag(self, tag: str) -> None:
        if tag not in ("br", "img", "input", "meta", "link", "circle", "line", "polyline"):
            self.depth -= 1


class Page:
    """What a browser shows of the thought stream after applying frames as htmx would."""

    def __init__(self) -> None:
        self.thoughts: list[int] = []
        self.revision = 0

    def apply(self, frame: str) -> None:
        found = re.search(r'data-revision="(\d+)"', frame)
        if found:
            self.revision = int(found[1])
        parser = Swaps()
        parser.feed(frame)
        for element in parser.elements:
            if element["id"] == "thought-list" and element["swap"] == "true":
                self.thoughts = list(element["thoughts"])
            elif element["swap"] == "beforeend:#thought-list":
                for number in element["thoughts"]:
                    assert number not in self.thoughts, f"thought {number} shown twice"
                    self.thoughts.append(number)


async def receive_until(comm: Any, page: Page, done: Any, timeout: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        try:
            frame = await comm.receive_from(timeout=max(0.1, deadline - loop.time()))
        except TimeoutError:
            continue
        page.apply(frame)
        if done(frame):
            return
    raise AssertionError("the awaited frame never came")


async def test_a_page_that_reconnects_ends_with_exactly_the_servers_rows(
    fake_claude: Any, make_session: Any, alice: Any
):
    fake_claude.delay = 0.03
    session = await sync_to_async(make_session)(
        budget_seconds=2.0, synthesis_interval_seconds=0.6, thinking_mode="off"
    )
    cookie = await login(alice)
    page = Page()
    comm = communicator(session.pk, cookie, rev=0)
    assert (await comm.connect())[0]
    supervisor = Supervisor(worker_id="w", publish=broadcast.publish)
    assert await supervisor.start(session.pk)

    await receive_until(comm, page, lambda f: len(page.thoughts) >= 6)
    await comm.disconnect()  # a network blip: updates published now go nowhere
    await asyncio.sleep(0.5)
    assert await session.thoughts.acount() > len(page.thoughts), "the page missed some"

    comm = communicator(session.pk, cookie, rev=page.revision)
    assert (await comm.connect())[0]
    await receive_until(comm, page, lambda f: "status-completed" in f)
    await comm.disconnect()
    await supervisor.wait_idle()

    await session.arefresh_from_db()
    assert session.status == Status.COMPLETED
    stored = [
        n
        async for n in session.thoughts.exclude(type="scratchpad")
        .order_by("sequence")
        .values_list("sequence", flat=True)
    ]
    assert page.thoughts == stored


async def test_an_up_to_date_page_that_reconnects_gets_no_duplicates(make_session: Any, alice: Any):
    session = await sync_to_async(make_session)(status=Status.PAUSED)
    await ThinkingSession.objects.filter(pk=session.pk).aupdate(revision=5)
    comm = communicator(session.pk, await login(alice), rev=5)
    assert (await comm.connect())[0]
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()
