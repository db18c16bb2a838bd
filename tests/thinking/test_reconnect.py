"""A page that loses its WebSocket mid-session, or opens late on a long one, ends with exactly
the stored rows: nothing missed, nothing twice, in messages that stay small."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from bench.long_session import build
from tests.live_page import Page, communicator, drain, login, receive_until
from thinking.deliberation.worker import Supervisor
from thinking.models import Status, ThinkingSession
from thinking.page import broadcast
from thinking.page.presenters import THOUGHT_PAGE

pytestmark = pytest.mark.django_db(transaction=True)


async def stored(session: ThinkingSession) -> dict[str, list[int]]:
    def read() -> dict[str, list[int]]:
        thoughts = session.thoughts.order_by("sequence")
        return {
            "thoughts": list(
                thoughts.exclude(type="scratchpad").values_list("sequence", flat=True)
            ),
            "sources": list(session.sources.order_by("number").values_list("number", flat=True)),
            "questions": sorted(session.sub_questions.values_list("pk", flat=True)),
            "syntheses": list(
                session.syntheses.order_by("sequence").values_list("sequence", flat=True)
            ),
        }

    return await sync_to_async(read)()


def shown(page: Page) -> dict[str, list[int]]:
    return {
        "thoughts": page.thoughts,
        "sources": page.sources,
        "questions": sorted(page.questions),
        "syntheses": page.syntheses,
    }


async def test_a_page_that_reconnects_ends_with_exactly_the_servers_rows(
    fake_claude: Any, make_session: Any, alice: Any, closed_supervisors: Any
):
    fake_claude.delay = 0.03
    session = await sync_to_async(make_session)(
        budget_seconds=3.0, synthesis_interval_seconds=0.6, thinking_mode="off", plan={}
    )
    cookie = await login(alice)
    page = Page()
    comm = communicator(session.pk, cookie, rev=0, marks=page.marks())
    assert (await comm.connect())[0]
    supervisor = Supervisor(worker_id="w", publish=broadcast.publish)
    assert await supervisor.start(session.pk)

    await receive_until(comm, page, lambda f: len(page.thoughts) >= 4)
    await comm.disconnect()  # a network blip: updates published now go nowhere
    await asyncio.sleep(0.5)
    assert await session.thoughts.acount() > len(page.thoughts), "the page missed some"

    comm = communicator(session.pk, cookie, rev=page.revision, marks=page.marks())
    assert (await comm.connect())[0]
    await receive_until(comm, page, lambda f: 'data-status="completed"' in f)
    await drain(comm, page)
    await comm.disconnect()
    await supervisor.wait_idle()

    await session.arefresh_from_db()
    assert session.status == Status.COMPLETED
    assert page.errors == []
    rows = await stored(session)
    assert rows["questions"] and rows["syntheses"]
    assert shown(page) == rows


async def test_an_up_to_date_page_that_reconnects_gets_no_duplicates(make_session: Any, alice: Any):
    session = await sync_to_async(make_session)(status=Status.PAUSED)
    await ThinkingSession.objects.filter(pk=session.pk).aupdate(revision=5)
    comm = communicator(session.pk, await login(alice), rev=5)
    assert (await comm.connect())[0]
    assert await comm.receive_nothing(timeout=0.3)
    await comm.disconnect()


async def test_a_page_opened_late_on_a_long_session_catches_up_in_bounded_parts(alice: Any):
    session = await sync_to_async(build)(
        alice, thoughts=600, sources=200, sub_questions=120, status=Status.THINKING, revision=600
    )
    page = Page()  # a page that shows nothing yet
    comm = communicator(session.pk, await login(alice), rev=0, marks=page.marks())
    assert (await comm.connect())[0]
    await drain(comm, page)
    await comm.disconnect()

    assert page.errors == []
    assert page.frames > 5, "in parts"
    assert page.largest <= broadcast.MESSAGE_BUDGET
    rows = await stored(session)
    # The stream shows the newest page of thoughts; every other list is complete.
    assert page.thoughts == rows["thoughts"][-THOUGHT_PAGE:]
    assert page.sources == rows["sources"]
    assert sorted(page.questions) == rows["questions"]
    assert page.syntheses == rows["syntheses"]
    assert "thought-earlier" in page.ids, "older thoughts are offered on demand"


async def test_a_page_that_missed_a_few_rows_gets_only_those(alice: Any):
    session = await sync_to_async(build)(
        alice, thoughts=300, sources=100, sub_questions=40, status=Status.THINKING, revision=300
    )
    rows = await stored(session)
    page = Page()
    # The page shows all but the last 5 thoughts, 3 sources and 2 sub-questions.
    page.thoughts = rows["thoughts"][-THOUGHT_PAGE:-5]
    page.sources = rows["sources"][:-3]
    page.questions = rows["questions"][:-2]
    page.syntheses = rows["syntheses"]
    page.ids |= {f"subq-children-{pk}" for pk in page.questions} | {"thought-earlier"}
    page.ids |= {f"subq-row-{pk}" for pk in page.questions}
    comm = communicator(session.pk, await login(alice), rev=1, marks=page.marks())
    assert (await comm.connect())[0]
    await drain(comm, page)
    await comm.disconnect()

    assert page.errors == []
    assert page.thoughts == rows["thoughts"][-THOUGHT_PAGE:]
    assert page.sources == rows["sources"] and sorted(page.questions) == rows["questions"]


@pytest.mark.parametrize("status", [Status.THINKING, Status.PAUSED, Status.COMPLETED])
async def test_a_catch_up_leaves_the_steering_form_alone_while_it_can_be_used(
    make_session: Any, alice: Any, status: str
):
    """A reconnect keeps what the person was typing in the steering box (and its focus): the
    card is sent again only once the session has ended, to say so."""
    session = await sync_to_async(make_session)(status=status)
    await ThinkingSession.objects.filter(pk=session.pk).aupdate(revision=5)
    page = Page()
    comm = communicator(session.pk, await login(alice), rev=1, marks=page.marks())
    assert (await comm.connect())[0]
    await drain(comm, page)
    await comm.disconnect()

    assert page.errors == [] and "session-header" in page.replaced  # it did catch up
    assert ("steer" in page.replaced) == (status == Status.COMPLETED)


async def test_a_catch_up_that_fails_is_logged_once_and_tells_the_page_to_reload(
    make_session: Any, alice: Any, monkeypatch: Any, caplog: Any
):
    from thinking.web import consumers

    session = await sync_to_async(make_session)(status=Status.THINKING, revision=3)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the template broke")

    monkeypatch.setattr(consumers, "catch_up", broken)
    comm = communicator(session.pk, await login(alice), rev=1)
    with caplog.at_level(logging.ERROR, logger="thinking.web.consumers"):
        assert (await comm.connect())[0]
        output = await comm.receive_output(timeout=2)
    # A 4xxx close: the browser does not reconnect into the same failure, it offers a reload.
    assert output["type"] == "websocket.close" and output["code"] == 4500
    assert len([r for r in caplog.records if "Catch-up" in r.getMessage()]) == 1
