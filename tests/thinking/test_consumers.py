from __future__ import annotations

import asyncio
import re
import time
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient
from django.urls import reverse

from bench.long_session import build
from tests.helpers import add_thought, collect, count_hops, services_available
from tests.live_page import Page, communicator, drain, login
from thinking.events import LiveStep, SessionEvent
from thinking.models import Status, ThinkingSession, Thought

pytestmark = pytest.mark.django_db(transaction=True)


async def test_anonymous_is_refused(make_session: Any):
    session = await sync_to_async(make_session)()
    connected, _ = await communicator(session.pk, None).connect()
    assert not connected


async def test_another_user_is_refused(make_session: Any, bob: Any):
    session = await sync_to_async(make_session)()
    connected, _ = await communicator(session.pk, await login(bob)).connect()
    assert not connected


async def test_an_unknown_session_is_refused(alice: Any):
    connected, _ = await communicator(
        "7d3f0b0e-0000-4000-8000-000000000000", await login(alice)
    ).connect()
    assert not connected


async def test_a_foreign_origin_is_refused(make_session: Any, alice: Any):
    session = await sync_to_async(make_session)()
    comm = communicator(session.pk, await login(alice), origin="http://evil.example")
    connected, _ = await comm.connect()
    assert not connected


async def test_an_up_to_date_page_gets_no_catch_up(make_session: Any, alice: Any):
    session = await sync_to_async(make_session)(revision=3)
    comm = communicator(session.pk, await login(alice), rev=3)
    connected, _ = await comm.connect()
    assert connected
    assert await comm.receive_nothing(timeout=0.2)
    await comm.disconnect()


async def test_a_page_that_missed_updates_gets_them_once(make_session: Any, alice: Any):
    from thinking.page.broadcast import publish

    session = await sync_to_async(make_session)(status=Status.THINKING)
    await add_thought(session, 0, "seen by the page")
    await add_thought(session, 1, "missed while away")
    comm = communicator(session.pk, await login(alice), rev=1, marks={"t": 0})
    assert (await comm.connect())[0]
    page = Page()
    page.thoughts = [0]
    await drain(comm, page, until=lambda page: page.revision == 2)
    assert page.thoughts == [0, 1] and page.errors == [] and page.revision == 2

    # A late live message about a thought the catch-up already showed is not repeated...
    await publish(SessionEvent(session.pk, thoughts=(1,)))
    repeat = await comm.receive_from()
    assert "missed while away" not in repeat and 'id="session-header"' in repeat
    # ...and a new one is appended.
    await add_thought(session, 2, "brand new")
    await publish(SessionEvent(session.pk, thoughts=(2,)))
    live = await comm.receive_from()
    assert "brand new" in live and 'hx-swap-oob="beforeend:#thought-list"' in live
    await comm.disconnect()


async def test_model_text_arrives_escaped(make_session: Any, alice: Any):
    from thinking.page.broadcast import publish

    session = await sync_to_async(make_session)(status=Status.THINKING)
    comm = communicator(session.pk, await login(alice), rev=0)
    assert (await comm.connect())[0]
    assert await comm.receive_nothing(timeout=0.3)  # up to date: no catch-up
    await add_thought(session, 0, '<script>alert("x")</script>')
    await publish(SessionEvent(session.pk, thoughts=(0,)))
    html = await comm.receive_from()
    assert "<script>" not in html and "&lt;script&gt;" in html
    await comm.disconnect()


async def test_frames_from_the_client_are_ignored(make_session: Any, alice: Any):
    session = await sync_to_async(make_session)(revision=0)
    comm = communicator(session.pk, await login(alice), rev=0)
    assert (await comm.connect())[0]
    await comm.send_to(text_data='{"type": "session.update", "parts": []}')
    assert await comm.receive_nothing(timeout=0.2)
    await comm.disconnect()


def first_index(frames: list[str], needle: str) -> int:
    return next(i for i, frame in enumerate(frames) if needle in frame)


async def watch_a_session_from_the_browser(alice: Any, settings: Any) -> None:
    """Start a session over HTTP, let the worker run it, watch it over the WebSocket."""
    settings.DEEPTHINK_INPROCESS_WORKER = True
    settings.DEEPTHINK_SWEEP_SECONDS = 0.2
    settings.DEEPTHINK_HEARTBEAT_SECONDS = 0.1
    client = AsyncClient()
    await client.aforce_login(alice)
    response = await client.post(
        reverse("session-create"),
        {"question": "Why do we dream?", "minutes": "0.05", "synthesis_minutes": "0.01"},
    )
    session = await ThinkingSession.objects.aget()
    assert response.status_code == 302 and response.url == session.get_absolute_url()
    page = await client.get(response.url)
    rev = re.search(r'data-revision="(\d+)"', page.content.decode()).group(1)

    # The first connection also starts the in-process worker (embedded defaults).
    comm = communicator(session.pk, client.cookies["sessionid"].value, rev=rev)
    assert (await comm.connect())[0]
    frames = await collect(comm, lambda f: "confident</span>" in f and 'id="answer"' in f)
    await comm.disconnect()

    header = first_index(frames, "status-thinking")
    thought = first_index(frames, 'id="thought-0"')
    question = first_index(frames, 'id="subq-')
    synthesis = first_index(frames, 'id="synthesis-0"')
    assert header <= thought < question, "thinking status, then thoughts, then sub-questions"
    assert thought < synthesis < len(frames) - 1, "syntheses come before the final answer"
    assert "status-completed" in frames[-1]
    assert "<script" not in "".join(frames)

    await session.arefresh_from_db()
    assert session.status == Status.COMPLETED
    assert await session.thoughts.acount() >= 3
    assert await session.sub_questions.aexists()
    assert await session.syntheses.filter(is_final=False).aexists()
    assert session.final_answer and session.final_confidence is not None
    streamed = {int(n) for n in re.findall(r'id="thought-(\d+)"', "".join(frames))}
    stored = {s async for s in session.thoughts.values_list("sequence", flat=True)}
    assert streamed == stored, "every stored thought was streamed, none twice"


async def test_a_session_started_in_the_browser_streams_to_the_end(
    alice: Any, fake_claude: Any, settings: Any, background_tasks: None
):
    fake_claude.delay = 0.02
    await watch_a_session_from_the_browser(alice, settings)


@pytest.mark.services
async def test_the_same_through_redis_and_postgresql(
    alice: Any, fake_claude: Any, settings: Any, background_tasks: None
):
    ok, reason = services_available()
    if not ok:
        pytest.skip(reason)
    import os

    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [{"address": os.environ["REDIS_URL"], "socket_timeout": None}],
                "prefix": f"test-{os.getpid()}",
            },
        }
    }
    from django.db import connection

    assert connection.vendor == "postgresql"
    fake_claude.delay = 0.02
    await watch_a_session_from_the_browser(alice, settings)


@pytest.mark.services
async def test_an_idle_live_page_stays_connected_over_redis(
    make_session: Any, alice: Any, settings: Any
):
    ok, reason = services_available()
    if not ok:
        pytest.skip(reason)
    import os

    from thinking.page.broadcast import publish

    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {
                "hosts": [{"address": os.environ["REDIS_URL"], "socket_timeout": None}],
                "prefix": f"idle-{os.getpid()}",
            },
        }
    }
    session = await sync_to_async(make_session)(status=Status.THINKING)
    comm = communicator(session.pk, await login(alice), rev=0)
    assert (await comm.connect())[0]
    await asyncio.sleep(7)  # longer than redis-py 8's default 5 s socket timeout
    await add_thought(session, 0, "still listening")
    await publish(SessionEvent(session.pk, thoughts=(0,)))
    assert "still listening" in await comm.receive_from(timeout=5)
    await comm.disconnect()


async def test_an_unknown_websocket_path_is_refused_cleanly(alice: Any):
    comm = communicator(None, await login(alice), path="/ws/nothing-here/")
    connected, code = await comm.connect()
    assert not connected and code == 4404


async def test_a_client_frame_over_the_limit_closes_with_a_4xxx_code(
    make_session: Any, alice: Any, settings: Any
):
    settings.DEEPTHINK_WS_MAX_FRAME_BYTES = 1024
    session = await sync_to_async(make_session)(revision=0)
    comm = communicator(session.pk, await login(alice), rev=0)
    assert (await comm.connect())[0]
    await comm.send_to(text_data="x" * 1000)  # under the limit: ignored
    assert await comm.receive_nothing(timeout=0.2)
    await comm.send_to(text_data="x" * 1025)
    output = await comm.receive_output(timeout=2)
    assert output == {"type": "websocket.close", "code": 4413}


def team_with(owner: Any, member: Any) -> Any:
    from django.utils import timezone

    from accounts.models import Membership, Role, Team

    team = Team.objects.create(name="Lab")
    Membership.objects.create(team=team, user=owner, role=Role.OWNER, accepted_at=timezone.now())
    Membership.objects.create(team=team, user=member, role=Role.MEMBER, accepted_at=timezone.now())
    return team


async def test_live_headers_offer_cancel_to_the_owner_only(make_session: Any, alice: Any, bob: Any):
    from thinking.page.broadcast import publish

    team = await sync_to_async(team_with)(alice, bob)
    session = await sync_to_async(make_session)(status=Status.THINKING, team=team)
    pages = {}
    for name, user in (("owner", alice), ("teammate", bob)):
        pages[name] = communicator(session.pk, await login(user), rev=0)
        assert (await pages[name].connect())[0]
        assert await pages[name].receive_nothing(timeout=0.2)
    await add_thought(session, 0, "a thought for both")
    await publish(SessionEvent(session.pk, thoughts=(0,)))
    owner, teammate = [await pages[n].receive_from() for n in ("owner", "teammate")]
    assert "a thought for both" in owner and "a thought for both" in teammate
    assert ">Cancel</button>" in owner and "Pause" in owner
    assert ">Cancel</button>" not in teammate and "Pause" in teammate
    for comm in pages.values():
        await comm.disconnect()


async def live_message_after_a_step(session: ThinkingSession, alice: Any) -> None:
    """One step on a session: a thought on a sub-question that it explored, a new source."""
    from thinking.models import Source, SubQuestion
    from thinking.page.broadcast import publish

    comm = communicator(session.pk, await login(alice), rev=session.revision)
    assert (await comm.connect())[0]
    assert await comm.receive_nothing(timeout=0.3)
    question = await SubQuestion.objects.filter(session=session, explored=False).afirst()
    sequence = await session.thoughts.acount()
    number = await session.sources.acount() + 1
    await Thought.objects.acreate(
        session=session,
        sequence=sequence,
        text="The newest thought [1].",
        type="insight",
        confidence=0.8,
        time_offset_seconds=5,
        sub_question=question,
    )
    await SubQuestion.objects.filter(pk=question.pk).aupdate(explored=True, answer="Found.")
    await Source.objects.acreate(
        session=session, number=number, kind="web", title="The newest source", key=f"k{number}"
    )
    await publish(SessionEvent(session.pk, thoughts=(sequence,), questions=True, sources=True))
    page = Page()
    page.ids |= {f"subq-row-{question.pk}"}
    await drain(comm, page)
    await comm.disconnect()
    assert page.errors == [] and page.frames == 1
    assert page.thoughts == [sequence] and page.sources == [number] and page.questions == []


async def test_a_live_message_carries_only_what_changed_whatever_the_sessions_length(
    alice: Any, monkeypatch: Any
):
    from thinking.web import consumers

    sizes = []
    sent: list[str] = []
    original = consumers.SessionConsumer.send

    async def record(self: Any, text_data: str | None = None, **kwargs: Any) -> None:
        sent.append(text_data or "")
        await original(self, text_data=text_data, **kwargs)

    monkeypatch.setattr(consumers.SessionConsumer, "send", record)
    for thoughts, sources, questions in ((20, 10, 6), (900, 400, 240)):
        session = await sync_to_async(build)(
            alice,
            thoughts=thoughts,
            sources=sources,
            sub_questions=questions,
            status=Status.THINKING,
            revision=thoughts,
        )
        sent.clear()
        await live_message_after_a_step(session, alice)
        assert len(sent) == 1
        sizes.append(len(sent[0].encode()))
    small, large = sizes
    assert large <= 32 * 1024
    # The same step, 45 times the session: the message is the same size, give or take the
    # digits of the counts and ids in it.
    assert large < small * 1.1, sizes


def store_step(session: ThinkingSession, numbers: range, *, explore: Any = None) -> None:
    """What a step leaves for the pages: new sources; with `explore`, a thought on that
    sub-question, which it explored and which got a follow-up."""
    from thinking.models import Source, SubQuestion

    for number in numbers:
        Source.objects.create(
            session=session, number=number, kind="web", title=f"Source {number}", key=f"k{number}"
        )
    if explore is not None:
        Thought.objects.create(
            session=session,
            sequence=session.thoughts.count(),
            text="On the sub-question [1].",
            type="insight",
            confidence=0.8,
            time_offset_seconds=5,
            sub_question=explore,
        )
        SubQuestion.objects.filter(pk=explore.pk).update(explored=True, answer="Found.")
        SubQuestion.objects.create(session=session, text="A follow-up", priority=3, parent=explore)


async def open_pages(session: ThinkingSession, cookie: str, count: int) -> list[Any]:
    """Pages opened now, each caught up from nothing."""
    pages = []
    for _ in range(count):
        page = Page()
        comm = communicator(session.pk, cookie, marks=page.marks())  # no revision: all of it
        assert (await comm.connect())[0]
        await drain(comm, page, quiet=0.2)
        assert page.errors == []
        pages.append((comm, page))
    return pages


async def test_every_open_page_gets_each_new_source_once_and_in_order(
    make_session: Any, alice: Any
):
    from thinking.models import SubQuestion
    from thinking.page.broadcast import publish

    session = await sync_to_async(make_session)(status=Status.THINKING)
    question = await SubQuestion.objects.acreate(session=session, text="Why?", priority=5)
    cookie = await login(alice)
    [early] = await open_pages(session, cookie, 1)
    # Sources stored by a worker that stopped before publishing them: the early page never
    # hears of them, pages opened now have them from their catch-up.
    await sync_to_async(store_step)(session, range(1, 4))
    late = await open_pages(session, cookie, 5)
    await publish(SessionEvent(session.pk, plan=True))  # the next worker's first event
    await sync_to_async(store_step)(session, range(4, 7), explore=question)
    thought = await session.thoughts.acount() - 1
    await publish(SessionEvent(session.pk, thoughts=(thought,), sources=True, questions=True))

    questions = sorted([pk async for pk in session.sub_questions.values_list("pk", flat=True)])
    for comm, page in [early, *late]:
        await drain(comm, page)
        await comm.disconnect()
        assert page.errors == []
        assert page.sources == [1, 2, 3, 4, 5, 6]
        assert sorted(page.questions) == questions and page.thoughts == [thought]


async def test_a_page_that_caught_up_past_a_message_shows_each_sub_question_once(
    make_session: Any, alice: Any
):
    """A message rendered before a page opened reaches it after its catch-up, which already
    read newer rows: the page shows each sub-question once, then and at the next message."""
    from channels.layers import get_channel_layer

    from thinking.models import SubQuestion
    from thinking.page.broadcast import group_name, publish, render_event

    session = await sync_to_async(make_session)(status=Status.THINKING)
    root = await SubQuestion.objects.acreate(session=session, text="Why?", priority=5)
    await sync_to_async(render_event)(SessionEvent(session.pk, questions=True))
    await sync_to_async(store_step)(session, range(1, 2), explore=root)
    thought = await session.thoughts.acount() - 1
    earlier = await sync_to_async(render_event)(
        SessionEvent(session.pk, thoughts=(thought,), questions=True)
    )
    late = await SubQuestion.objects.acreate(session=session, text="Late?", priority=4, parent=root)
    [(comm, page)] = await open_pages(session, await login(alice), 1)

    await get_channel_layer().group_send(group_name(session.pk), earlier)
    await drain(comm, page)
    follow_up = await SubQuestion.objects.exclude(pk__in=[root.pk, late.pk]).aget(parent=root)
    await sync_to_async(store_step)(session, range(2, 3), explore=follow_up)
    thought = await session.thoughts.acount() - 1
    await publish(SessionEvent(session.pk, thoughts=(thought,), questions=True))
    await drain(comm, page)
    await comm.disconnect()

    questions = sorted([pk async for pk in session.sub_questions.values_list("pk", flat=True)])
    assert page.errors == [] and sorted(page.questions) == questions and len(questions) == 4


async def test_steps_nobody_watches_are_not_rendered_and_a_page_opened_later_has_them(
    make_session: Any, alice: Any, renders_here: list[SessionEvent]
):
    """With no page open, a step's render is skipped (half of its CPU); a page opened later
    catches up from the database, and from then on gets each step live, once."""
    from thinking.models import SubQuestion
    from thinking.page import broadcast

    session = await sync_to_async(make_session)(status=Status.THINKING)
    root = await SubQuestion.objects.acreate(session=session, text="Why?", priority=5)
    cookie = await login(alice)
    [(first, _)] = await open_pages(session, cookie, 1)
    await broadcast.publish(SessionEvent(session.pk, plan=True))
    assert len(renders_here) == 1
    await first.disconnect()

    # Nobody watches: two steps stored and published (sources, explored sub-questions,
    # follow-ups, a live panel), nothing rendered.
    await sync_to_async(store_step)(session, range(1, 4), explore=root)
    follow_up = await SubQuestion.objects.aget(parent=root)
    await broadcast.publish(SessionEvent(session.pk, thoughts=(0,), sources=True, questions=True))
    await broadcast.publish(SessionEvent(session.pk, live=LiveStep("thoughts", 0.0, "Hm")))
    await sync_to_async(store_step)(session, range(4, 6), explore=follow_up)
    await broadcast.publish(SessionEvent(session.pk, thoughts=(1,), sources=True, questions=True))
    assert len(renders_here) == 1

    [(comm, page)] = await open_pages(session, cookie, 1)
    assert page.sources == [1, 2, 3, 4, 5] and page.thoughts == [0, 1]
    last = await SubQuestion.objects.aget(parent=follow_up)
    await sync_to_async(store_step)(session, range(6, 8), explore=last)
    await broadcast.publish(SessionEvent(session.pk, thoughts=(2,), sources=True, questions=True))
    frame = await comm.receive_from()
    page.apply(frame)
    await drain(comm, page)
    await comm.disconnect()
    assert len(renders_here) == 2
    questions = sorted([pk async for pk in session.sub_questions.values_list("pk", flat=True)])
    assert page.errors == [] and page.sources == [1, 2, 3, 4, 5, 6, 7]
    assert page.thoughts == [0, 1, 2] and sorted(page.questions) == questions
    # The sub-question the step explored is redrawn as explored.
    row = re.search(f'id="subq-row-{last.pk}".*?</p>', frame, re.S)
    assert row and "Explored" in row[0]


async def test_the_reasoning_streams_to_a_page_while_the_database_is_stalled(
    make_session: Any, alice: Any, settings: Any
):
    """A step in flight reads nothing, so its live panel reaches the page even while every
    one of the worker's database hops waits (slow statements, connections being replaced):
    the person watching sees the model's reasoning go on."""
    import threading

    from config.hops import EXECUTOR, db_hop
    from thinking.page import broadcast

    session = await sync_to_async(make_session)(status=Status.THINKING)
    cookie = await login(alice)
    [(comm, page)] = await open_pages(session, cookie, 1)
    # The worker's hop threads (as on PostgreSQL), all of them waiting; the page's consumer
    # runs its own hops on channels' thread, as in the web process it runs in.
    settings.DEEPTHINK_DB_THREADS = 2
    EXECUTOR.shutdown()
    gate, waiting = threading.Event(), threading.Semaphore(0)

    def stall() -> None:
        waiting.release()
        gate.wait()

    stalled = [asyncio.create_task(db_hop(stall)()) for _ in range(2)]
    try:
        for _ in range(2):  # both threads taken before the update is published
            assert await asyncio.to_thread(waiting.acquire, timeout=5)
        live = SessionEvent(session.pk, live=LiveStep("thoughts", 0.0, "Weighing <b>both</b>"))
        await asyncio.wait_for(broadcast.publish(live), 5)
        frame = await comm.receive_from(timeout=5)
    finally:
        gate.set()
        await asyncio.gather(*stalled)
        EXECUTOR.shutdown()  # the next use makes threads of the restored size
    page.apply(frame)
    assert page.errors == []
    assert 'id="live-reasoning"' in frame and "Weighing &lt;b&gt;both&lt;/b&gt;" in frame
    await comm.disconnect()


def test_a_new_sub_question_joins_its_parents_list_live_as_on_a_reload(
    make_session: Any, alice: Any, client: Any
):
    from thinking.models import SubQuestion
    from thinking.page.broadcast import render_event

    session = make_session(status=Status.THINKING)
    root = SubQuestion.objects.create(session=session, text="Why?", priority=5)
    render_event(SessionEvent(session.pk, questions=True))  # what pages have: the root
    store_step(session, range(1, 2), explore=root)  # a thought on it, and a follow-up
    follow_up = SubQuestion.objects.get(parent=root)
    thought = session.thoughts.count() - 1
    message = render_event(SessionEvent(session.pk, thoughts=(thought,), questions=True))
    rows = {row["seq"]: row for row in message["questions"]["rows"]}
    assert rows[follow_up.pk]["kind"] == "question"
    assert f'hx-swap-oob="beforeend:#subq-children-{root.pk}"' in rows[follow_up.pk]["html"]
    assert rows[root.pk]["kind"] == "subq"  # explored now: its row is redrawn in place
    client.force_login(alice)
    page = client.get(session.get_absolute_url()).content.decode()
    assert re.search(f'id="subq-children-{root.pk}".*?id="subq-{follow_up.pk}"', page, re.S)


def test_each_message_starts_from_the_sub_questions_the_last_one_left_pages_with(
    make_session: Any,
):
    """A page applies a message's rows only if it shows what they move from: after one
    message, that is the states the message left pages with, so the next starts from them."""
    from thinking.models import SubQuestion
    from thinking.page.broadcast import render_event, sub_questions_now

    session = make_session(status=Status.THINKING)
    first, second = (
        SubQuestion.objects.create(session=session, text=text, priority=5) for text in "AB"
    )
    render_event(SessionEvent(session.pk, questions=True))
    deltas = []
    for number, question in enumerate((first, second), start=1):
        store_step(session, range(number, number + 1), explore=question)
        thought = session.thoughts.count() - 1
        message = render_event(SessionEvent(session.pk, thoughts=(thought,), questions=True))
        deltas.append(message["questions"])
        assert dict(message["questions"]["states"]) == sub_questions_now(session.pk)[0]
    left = dict(deltas[0]["states"])
    rows = {row["seq"]: row for row in deltas[1]["rows"]}
    assert rows[second.pk]["kind"] == "subq" and rows[second.pk]["before"] == left[second.pk]
    [follow_up] = [pk for pk, row in rows.items() if row["kind"] == "question"]
    assert follow_up not in left and first.pk not in rows  # unchanged since: not drawn again


def test_sub_question_states_are_each_rows_explored_and_priority(make_session: Any):
    """The states a live update compares: each row once, with its own explored flag and
    priority (two digits too), nothing from another session, and none for a session without
    sub-questions."""
    from thinking.models import SubQuestion
    from thinking.page.broadcast import sub_questions_now

    session, other = make_session(), make_session()
    assert sub_questions_now(session.pk) == ({}, {})
    rows = [
        SubQuestion.objects.create(session=session, text=f"Q{n}", priority=priority)
        for n, priority in enumerate((10, 1, 7))
    ]
    SubQuestion.objects.filter(pk=rows[1].pk).update(explored=True)
    SubQuestion.objects.create(session=other, text="elsewhere", priority=3)

    assert sub_questions_now(session.pk)[0] == {
        rows[0].pk: "0:10",
        rows[1].pk: "1:1",
        rows[2].pk: "0:7",
    }


def test_an_update_on_a_sub_question_already_explored_sends_no_rows(make_session: Any):
    """A thought on a sub-question explored before changes no row: the update draws none.
    Re-ranked since, the row is drawn again, from the state pages show."""
    from thinking.models import SubQuestion
    from thinking.page.broadcast import render_event

    session = make_session(status=Status.THINKING)
    question = SubQuestion.objects.create(session=session, text="Why?", priority=5)
    store_step(session, range(1, 2), explore=question)
    render_event(SessionEvent(session.pk, questions=True))  # what pages have: it explored

    def cycle_on_it() -> Any:
        thought = session.thoughts.count()
        Thought.objects.create(
            session=session, sequence=thought, text="More on it.", type="insight",
            confidence=0.8, time_offset_seconds=9, sub_question=question,
        )  # fmt: skip
        return render_event(SessionEvent(session.pk, thoughts=(thought,)))["questions"]

    assert cycle_on_it()["rows"] == []
    SubQuestion.objects.filter(pk=question.pk).update(priority=9)
    moved = cycle_on_it()
    assert [(row["seq"], row["before"]) for row in moved["rows"]] == [(question.pk, "1:5")]
    assert dict(moved["states"])[question.pk] == "1:9"


# What rendering one thought cycle's live update may cost, in statements: the session's row,
# one statement of counts (the header's thoughts, sub-questions, syntheses and citation
# verdicts by kind, and the sources' tally), the cycle's thoughts with their sub-questions,
# and the sub-questions' states. Not one more per thought, per source or per sub-question: a
# query added to a cycle's update fails this.
LIVE_UPDATE_QUERIES = 4


def test_a_thought_cycles_live_update_costs_a_fixed_number_of_queries(
    alice: Any, django_assert_max_num_queries: Any
):
    """Rendering a cycle's update reads a bounded number of statements, however long the
    session and however many thoughts the update carries, and shows what the rows say."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext
    from django.utils.text import Truncator

    from thinking.models import SubQuestion
    from thinking.page.broadcast import render_event

    session = build(
        alice, thoughts=300, sources=120, sub_questions=60, status=Status.THINKING, revision=300
    )
    render_event(SessionEvent(session.pk, questions=True, sources=True))  # what pages have
    question = SubQuestion.objects.filter(session=session, explored=True).first()
    first = session.thoughts.count()
    for sequence in range(first, first + 6):  # merged cycles, each on the sub-question
        Thought.objects.create(
            session=session, sequence=sequence, cycle=sequence, text=f"More on it [3] {sequence}.",
            type="insight", confidence=0.8, time_offset_seconds=9, sub_question=question,
        )  # fmt: skip

    with django_assert_max_num_queries(LIVE_UPDATE_QUERIES):
        one = render_event(SessionEvent(session.pk, thoughts=(first,)))
    with CaptureQueriesContext(connection) as many:
        message = render_event(SessionEvent(session.pk, thoughts=tuple(range(first, first + 6))))

    assert len(many.captured_queries) <= LIVE_UPDATE_QUERIES
    header, shown = message["parts"][0]["html"], message["parts"][1]["html"]
    stats = dict(re.findall(r"<dt>([\w -]+)</dt><dd>(\d+)</dd>", header))
    assert stats == {"Thoughts": str(first + 6), "Sub-questions": "60", "Syntheses": "6"}
    assert "More on it" in shown and 'href="#source-3"' in shown  # [3] is a known source
    # Its focus, read with it (the button shows the start of a long sub-question).
    assert f">on: {Truncator(question.text).chars(70)}</button>" in shown
    assert one["questions"]["rows"] == [] == message["questions"]["rows"]  # nothing moved
    # A cycle on the question itself moves no sub-question: their states are not read.
    Thought.objects.create(
        session=session, sequence=first + 6, text="On the question.", type="insight",
        confidence=0.8, time_offset_seconds=10,
    )  # fmt: skip
    with django_assert_max_num_queries(LIVE_UPDATE_QUERIES - 1):
        message = render_event(SessionEvent(session.pk, thoughts=(first + 6,)))
    assert "questions" not in message and ">on: " not in message["parts"][1]["html"]


def test_a_pages_marks_stay_within_the_databases_integers():
    """A forged mark far out of range is compared in SQL as the largest (or no) row, not
    sent to the database as a number it refuses."""
    from thinking.web.consumers import MAX_MARK, page_marks

    revision, marks = page_marks(b"rev=99999999999&s=3000000000&t=-5000000000&q=7&y=x")
    assert revision == MAX_MARK and marks.source == MAX_MARK and marks.thought == -1
    assert marks.question == 7 and marks.synthesis == -1


def test_a_page_behind_reads_its_own_changes_in_two_statements(make_session: Any):
    """A page that missed a message reads its own changes: a row it lacks is placed under
    its parent, a row it has that moved is redrawn in place; the states with the tree's
    links in one statement, the rows drawn in another."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from thinking.models import SubQuestion
    from thinking.page.broadcast import sub_question_changes, sub_questions_now

    session = make_session(status=Status.THINKING)
    root = SubQuestion.objects.create(session=session, text="Why?", priority=5)
    known, _ = sub_questions_now(session.pk)
    child = SubQuestion.objects.create(session=session, text="And then?", priority=4, parent=root)
    SubQuestion.objects.filter(pk=root.pk).update(explored=True)

    with CaptureQueriesContext(connection) as first:
        pieces, states = sub_question_changes(session.pk, known)

    assert states == sub_questions_now(session.pk)[0] and set(states) == {root.pk, child.pk}
    assert f'hx-swap-oob="beforeend:#subq-children-{root.pk}"' in pieces[0]
    assert f'id="subq-{child.pk}"' in pieces[0] and f'id="subq-row-{root.pk}"' in pieces[1]
    SubQuestion.objects.filter(pk=child.pk).update(priority=9)
    with CaptureQueriesContext(connection) as queries:
        moved, states = sub_question_changes(session.pk, states)
    assert len(moved) == 1 and f'id="subq-row-{child.pk}"' in moved[0] and states[child.pk] == "0:9"
    assert len(first.captured_queries) == 2 and len(queries.captured_queries) == 2


async def test_one_step_costs_no_database_reads_per_open_page(
    make_session: Any, alice: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
):
    """The step's new sources and sub-questions are rendered once for the group: pages that
    are up to date only keep what they lack, so 50 pages cost what one does: no query and no
    hop to a thread (channels' per-message connection check was one hop a page, queued on
    the thread the worker's database work waits for)."""
    from channels.layers import get_channel_layer
    from django.db import connections
    from django.test.utils import CaptureQueriesContext

    from config.hops import db_hop
    from thinking.models import SubQuestion
    from thinking.page.broadcast import group_name, publish, render_event

    settings.DEEPTHINK_WS_RECHECK_SECONDS = 3600  # no page is due its access recheck
    session = await sync_to_async(make_session)(status=Status.THINKING)
    question = await SubQuestion.objects.acreate(session=session, text="Why?", priority=5)
    await sync_to_async(store_step)(session, range(1, 3))
    pages = await open_pages(session, await login(alice), 5)
    await publish(SessionEvent(session.pk, plan=True))
    for comm, page in pages:
        await drain(comm, page, quiet=0.2)

    await sync_to_async(store_step)(session, range(3, 5), explore=question)
    thought = await session.thoughts.acount() - 1
    event = SessionEvent(session.pk, thoughts=(thought,), sources=True, questions=True)
    message = await db_hop(render_event)(event)
    # The consumers' database work runs on this thread (SQLite: asgiref's one thread).
    capture = await sync_to_async(lambda: CaptureQueriesContext(connections["default"]))()
    await sync_to_async(capture.__enter__)()
    with monkeypatch.context() as patched:
        hops = count_hops(patched)
        await get_channel_layer().group_send(group_name(session.pk), message)
        for comm, page in pages:
            await drain(comm, page)
    for comm, _ in pages:
        await comm.disconnect()
    await sync_to_async(capture.__exit__)(None, None, None)

    for _, page in pages:
        assert page.errors == [] and page.sources == [1, 2, 3, 4]
        assert len(page.questions) == 2 and page.thoughts == [thought]
    assert [q["sql"] for q in capture.captured_queries] == [] and hops == []


async def test_two_cycles_sent_as_one_message_show_their_parts_as_a_reload_does(
    make_session: Any, client: Any, alice: Any
):
    """Steps that waited together behind a slow send go out as one message (publishing.py):
    each cycle's parts still show under its own first thought."""
    from thinking.page.broadcast import render_event

    session = await sync_to_async(make_session)(status=Status.THINKING)
    for sequence, cycle in ((1, 1), (2, 1), (3, 2), (4, 2)):
        await add_thought(
            session, sequence, f"Thought {sequence}", cycle=cycle, parts={"reasoning": "Why"}
        )
    message = await sync_to_async(render_event)(SessionEvent(session.pk, thoughts=(1, 2, 3, 4)))
    live = "".join(part["html"] for part in message["parts"] if part.get("kind") == "thought")
    await sync_to_async(client.force_login)(alice)
    page = (await sync_to_async(client.get)(f"/sessions/{session.pk}/")).content.decode()
    opened = re.compile(r'id="parts-(\d+)"')
    assert opened.findall(live) == ["1", "3"]
    assert opened.findall(page) == opened.findall(live)


async def test_a_stage_entered_sends_the_plan_region_as_a_reload_shows_it(
    make_session: Any, client: Any, alice: Any
):
    """Half of a cycle's updates are a stage entered: those carry the plan region alone (the
    header's counts and state are as the last step left them, and it re-renders then)."""
    from thinking.deliberation import stages
    from thinking.page.broadcast import render_event

    session = await sync_to_async(make_session)(status=Status.THINKING)
    await sync_to_async(render_event)(SessionEvent(session.pk))  # what open pages have
    await sync_to_async(stages.record_sync)(
        session.pk, stages.entry("analysis", "Thinking about: <b>tides</b>")
    )

    def rendered() -> tuple[Any, int]:
        from django.db import connection
        from django.test.utils import CaptureQueriesContext

        with CaptureQueriesContext(connection) as queries:
            return render_event(SessionEvent(session.pk, plan=True, header=False)), len(queries)

    message, statements = await sync_to_async(rendered)()

    assert statements == 2  # the session's row, its newest stages
    [part] = message["parts"]
    assert part["kind"] == "replace" and 'id="plan"' in part["html"]
    assert "Thinking about: &lt;b&gt;tides&lt;/b&gt;" in part["html"]
    await sync_to_async(client.force_login)(alice)
    page = (await sync_to_async(client.get)(f"/sessions/{session.pk}/")).content.decode()
    region = re.compile(r'<div id="plan".*?</div>\n', re.DOTALL)
    assert region.search(part["html"].replace('hx-swap-oob="true"', "")).group() == (
        region.search(page).group()
    )
    # A page new to this process, or a session that ended, gets the header all the same.
    finished = await sync_to_async(render_event)(
        SessionEvent(session.pk, plan=True, header=False, finished=True)
    )
    assert finished["parts"][0]["kind"] == "header"


def test_a_stage_entered_on_a_session_finished_since_redraws_its_end(make_session: Any):
    """A stage's event that arrives after the session ended (the worker's last steps, a
    publisher behind) is drawn as the end is: the header with the final state, the answer
    and the steering form, not the plan region alone."""
    from thinking.page.broadcast import render_event

    session = make_session(status=Status.THINKING)
    render_event(SessionEvent(session.pk))  # what open pages have
    ThinkingSession.objects.filter(pk=session.pk).update(
        status=Status.COMPLETED, final_answer="Tides follow the moon."
    )

    message = render_event(SessionEvent(session.pk, plan=True, header=False))

    parts = message["parts"]
    assert parts[0]["kind"] == "header" and 'data-status="completed"' in parts[0]["html"]
    assert any("Tides follow the moon." in part["html"] for part in parts)
    assert len(parts) > 1 and any('id="plan"' in part["html"] for part in parts)


async def test_a_long_stage_history_shows_its_newest_twenty_live_as_on_a_reload(
    make_session: Any, client: Any, alice: Any
):
    """The plan region carries the newest 20 stages, newest first, and says how many there
    are; the model's extras show on its own reports. Live and reloaded, the same region."""
    from thinking.deliberation import stages
    from thinking.page.broadcast import render_event

    session = await sync_to_async(make_session)(status=Status.THINKING)
    await sync_to_async(render_event)(SessionEvent(session.pk))  # what open pages have
    for n in range(24):
        await sync_to_async(stages.record_sync)(
            session.pk, stages.entry("analysis", f"Entry {n:02d} of the loop")
        )
    report = stages.entry(
        "research", "Reading studies", by="model", plan_step=2, total_steps=3,
        confidence="medium", metadata={"studies": "2"},
    )  # fmt: skip
    await sync_to_async(stages.record_sync)(session.pk, report)

    message = await sync_to_async(render_event)(SessionEvent(session.pk, plan=True, header=False))

    [part] = message["parts"]
    html = part["html"]
    assert "Stages so far (25; the latest 20 here, all of them in the JSON export)" in html
    assert "{#" not in html and "#}" not in html, "no template comment shows as text"
    history = html[html.index('class="stage-history"') :]
    shown = re.findall(r"Entry (\d\d) of the loop", history)
    assert shown == [f"{n:02d}" for n in range(23, 4, -1)]  # 19 of the loop's, newest first
    assert history.index("Reading studies") < history.index("Entry 23")  # the report is newest
    assert "step 2 of 3" in history and "confidence: medium" in history
    assert "studies: 2" in history and history.count("reported by the model") == 1
    # The line above the history is the latest stage, extras included.
    latest = html[: html.index('class="stage-history"')]
    assert "Reading studies" in latest and "step 2 of 3" in latest
    await sync_to_async(client.force_login)(alice)
    page = (await sync_to_async(client.get)(f"/sessions/{session.pk}/")).content.decode()
    region = re.compile(r'<div id="plan".*?</div>\n', re.DOTALL)
    assert region.search(html.replace('hx-swap-oob="true"', "")).group() == (
        region.search(page).group()
    )


async def test_a_cycle_with_scratchpad_notes_updates_the_summary_as_a_reload_shows_it(
    make_session: Any, client: Any, alice: Any
):
    """A cycle that wrote to the scratchpad sends the summary line with it: the count of all
    notes, and how many of the newest the page shows, the same line a reload draws."""
    from thinking.page.broadcast import render_event
    from thinking.page.presenters import NOTE_PAGE

    session = await sync_to_async(make_session)(status=Status.THINKING)
    notes = NOTE_PAGE + 2
    for sequence in range(1, notes + 1):
        await add_thought(session, sequence, f"Note {sequence}", type="scratchpad", cycle=0)
    await add_thought(session, notes + 1, "Tides follow the moon.", cycle=0)

    message = await sync_to_async(render_event)(
        SessionEvent(session.pk, thoughts=(notes, notes + 1))
    )

    summary = re.compile(r'<summary id="scratchpad-summary"[^>]*>(.*?)</summary>')
    [live] = [m for part in message["parts"] if (m := summary.search(part["html"]))]
    assert live.group(1) == (
        f"Scratchpad ({notes} notes the model wrote to itself; the newest {NOTE_PAGE} shown)"
    )
    await sync_to_async(client.force_login)(alice)
    page = (await sync_to_async(client.get)(f"/sessions/{session.pk}/")).content.decode()
    assert summary.search(page).group(1) == live.group(1)


async def test_a_live_thought_shows_its_sub_question_as_a_reload_does(
    make_session: Any, client: Any, alice: Any
):
    """A cycle's thoughts go out with the sub-question they were on (the "on: …" button the
    stream filter uses), drawn as a reload draws them; the thoughts named, no others."""
    from thinking.models import SubQuestion
    from thinking.page.broadcast import render_event

    session = await sync_to_async(make_session)(status=Status.THINKING)
    focus = await sync_to_async(SubQuestion.objects.create)(
        session=session, text="Why do <tides> lag the moon?", priority=5
    )
    await add_thought(session, 1, "Before: on the question itself.", cycle=0)
    await add_thought(session, 2, "A person's hint.", type="hint", cycle=0)
    for sequence in (3, 4):
        await add_thought(session, sequence, f"On the lag {sequence}.", cycle=1, sub_question=focus)

    message = await sync_to_async(render_event)(SessionEvent(session.pk, thoughts=(1, 3, 4)))

    live = {part["seq"]: part["html"] for part in message["parts"] if part["kind"] == "thought"}
    assert list(live) == [1, 3, 4]
    assert "on: Why do &lt;tides&gt; lag the moon?" in live[3] and "on: " not in live[1]
    await sync_to_async(client.force_login)(alice)
    page = (await sync_to_async(client.get)(f"/sessions/{session.pk}/")).content.decode()
    item = re.compile(r'<li id="thought-(\d+)".*?</li>', re.DOTALL)
    reloaded = {int(m.group(1)): m.group() for m in item.finditer(page)}
    for sequence, html in live.items():
        assert item.search(html).group() == reloaded[sequence]


async def test_new_and_moved_sub_questions_reach_the_page_a_few_or_many_at_once(
    make_session: Any,
):
    """A cycle's few sub-questions and a re-ranking's many are sent alike: a row for each
    new one, a patch for each one that moved, from the state pages showed."""
    from thinking.models import SubQuestion
    from thinking.page import broadcast

    async def ask(n: int) -> SubQuestion:
        return await SubQuestion.objects.acreate(session=session, text=f"Why {n}?", priority=n)

    session = await sync_to_async(make_session)(status=Status.THINKING)
    render = sync_to_async(broadcast.render_event)
    await render(SessionEvent(session.pk))  # what open pages have
    few = [await ask(n) for n in range(1, 4)]

    rows = (await render(SessionEvent(session.pk, questions=True)))["questions"]["rows"]
    assert [(row["kind"], row["seq"]) for row in rows] == [("question", q.pk) for q in few]
    assert ["Why 1?" in rows[0]["html"], "Why 3?" in rows[2]["html"]] == [True, True]

    many = [await ask(n) for n in range(4, 10)]
    await SubQuestion.objects.filter(pk__in=[q.pk for q in few]).aupdate(explored=True)
    delta = (await render(SessionEvent(session.pk, questions=True)))["questions"]
    rows, states = delta["rows"], dict(delta["states"])
    assert [(row["kind"], row["seq"]) for row in rows] == [
        *[("question", q.pk) for q in many],
        *[("subq", q.pk) for q in few],
    ]
    assert [(row["before"], states[row["seq"]]) for row in rows[-3:]] == [
        ("0:1", "1:1"),
        ("0:2", "1:2"),
        ("0:3", "1:3"),
    ]
    assert "Why 9?" in rows[5]["html"]


async def test_a_big_cycle_reaches_the_page_in_messages_within_the_budget(
    make_session: Any, alice: Any
):
    """A cycle of many long thoughts and many new sources is more than one WebSocket message
    may carry: the page gets it split into several, each within the budget, every row once."""
    from thinking.models import Source
    from thinking.page.broadcast import MESSAGE_BUDGET, publish

    session = await sync_to_async(make_session)(status=Status.THINKING)
    comm = communicator(session.pk, await login(alice), rev=session.revision)
    assert (await comm.connect())[0]
    assert await comm.receive_nothing(timeout=0.3)  # up to date: no catch-up
    await Source.objects.abulk_create(
        Source(
            session=session, number=n, kind="web", title=f"Source {n}: " + "a long title " * 8,
            url=f"https://example.org/{n}", snippet="What the page says. " * 14, key=f"k{n}",
        )
        for n in range(1, 81)
    )  # fmt: skip
    await Thought.objects.abulk_create(
        Thought(
            session=session, sequence=n, cycle=0, type="insight", confidence=0.7,
            time_offset_seconds=5, text=f"Thought {n} cites [{n + 1}]. " + "More reasoning. " * 150,
        )
        for n in range(40)
    )  # fmt: skip

    await publish(SessionEvent(session.pk, thoughts=tuple(range(40)), sources=True))

    page = Page()
    await drain(comm, page)
    await comm.disconnect()
    assert page.errors == []
    assert page.frames > 3 and page.largest <= MESSAGE_BUDGET
    assert page.thoughts == list(range(40)) and page.sources == list(range(1, 81))


async def test_the_models_reasoning_reaches_an_open_page_escaped(make_session: Any, alice: Any):
    """The live panel: what the model is thinking right now reaches the page (its newest
    part, when long), as text."""
    from thinking.page.broadcast import LIVE_TEXT_CHARS, publish

    session = await sync_to_async(make_session)(status=Status.THINKING)
    comm = communicator(session.pk, await login(alice), rev=session.revision)
    assert (await comm.connect())[0]
    assert await comm.receive_nothing(timeout=0.3)  # up to date: no catch-up

    reasoning = "Early musing. " * 400 + "Now weighing <b>tides</b> & the moon's pull"
    assert len(reasoning) > LIVE_TEXT_CHARS
    await publish(SessionEvent(session.pk, live=LiveStep("synthesis", 1.0, reasoning)))
    frame = await comm.receive_from()
    await comm.disconnect()

    page = Page()
    page.apply(frame)
    assert page.errors == [] and page.replaced == ["live-reasoning"]
    assert "Now weighing &lt;b&gt;tides&lt;/b&gt; &amp; the moon&#x27;s pull" in frame
    assert "<b>tides" not in frame and "a synthesis" in frame
    assert frame.count("Early musing.") < reasoning.count("Early musing.")  # the newest part


# --- open pages per person, and clients that have gone (issue 73) -----------------------------


async def test_a_person_has_at_most_so_many_live_pages_open(
    make_session: Any, alice: Any, bob: Any, settings: Any
):
    settings.DEEPTHINK_WS_MAX_PER_USER = 2
    session = await sync_to_async(make_session)(revision=0)
    pages = [communicator(session.pk, await login(alice), rev=0) for _ in range(2)]
    for page in pages:
        assert (await page.connect())[0]

    one_more = communicator(session.pk, await login(alice), rev=0)  # another browser, too
    connected, _ = await one_more.connect()
    assert connected, "accepted, so the page can read why it is closed"
    assert await one_more.receive_output(timeout=2) == {"type": "websocket.close", "code": 4429}

    # Someone else's pages are their own.
    bobs = await sync_to_async(make_session)(owner=bob, revision=0)
    bobs_page = communicator(bobs.pk, await login(bob), rev=0)
    assert (await bobs_page.connect())[0] and await bobs_page.receive_nothing(timeout=0.2)

    # A page closed frees its place.
    await pages[0].disconnect()
    again = communicator(session.pk, await login(alice), rev=0)
    assert (await again.connect())[0] and await again.receive_nothing(timeout=0.2)
    for page in (pages[1], bobs_page, again):
        await page.disconnect()


def test_the_page_says_why_it_was_closed_for_too_many_pages():
    from pathlib import Path

    app_js = (Path(__file__).resolve().parents[2] / "static/thinking/app.js").read_text()
    assert "code === 4429" in app_js and "Too many live pages open" in app_js


async def test_places_held_by_a_process_that_died_run_out(
    make_session: Any, alice: Any, settings: Any
):
    import time_machine

    from thinking.web import sockets

    # The process's own memory (embedded defaults), where the test can move the clock.
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    settings.DEEPTHINK_WS_MAX_PER_USER = 1
    session = await sync_to_async(make_session)(revision=0)
    assert sockets.take_slot(alice.pk, "gone.process!page") is not None  # then kill -9
    refused = communicator(session.pk, await login(alice), rev=0)
    await refused.connect()
    assert (await refused.receive_output(timeout=2))["code"] == 4429

    with time_machine.travel(time.time() + sockets.LEASE_SECONDS + 1):
        page = communicator(session.pk, await login(alice), rev=0)
        assert (await page.connect())[0] and await page.receive_nothing(timeout=0.2)
        await page.disconnect()


def test_an_open_page_keeps_its_place_by_renewing_it(alice: Any, settings: Any):
    import time_machine

    from thinking.web import sockets

    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    settings.DEEPTHINK_WS_MAX_PER_USER = 1
    slot = sockets.take_slot(alice.pk, "open.page")
    assert slot is not None
    start = time.time()
    for minutes in range(1, 4):  # renewed every RENEW_SECONDS, it never runs out
        with time_machine.travel(start + minutes * sockets.RENEW_SECONDS * 2):
            assert sockets.renew(slot, "open.page")
            assert sockets.take_slot(alice.pk, "another.page") is None
    sockets.release(slot, "open.page")
    assert sockets.take_slot(alice.pk, "another.page") is not None


async def test_an_update_racing_the_clients_close_is_not_written_and_raises_nothing(
    make_session: Any, alice: Any
):
    """The client's close frame has reached the server, which has not yet told the consumer:
    an update sent then is what daphne refuses with "Attempt to send on a closed protocol".
    The consumer drops it, writes nothing more, and ends cleanly at the disconnect."""
    from autobahn.exception import Disconnected

    from config.asgi import application
    from thinking.page.broadcast import publish
    from thinking.page.presenters import session_ws_path

    session = await sync_to_async(make_session)(status=Status.THINKING, revision=0)
    cookie = await login(alice)
    inbound: asyncio.Queue[dict] = asyncio.Queue()
    sent: list[dict] = []
    closed_by_client = asyncio.Event()
    refused_after_close: list[dict] = []

    async def send(message: dict) -> None:
        # As daphne does: the close frame is in, the protocol refuses to send.
        if closed_by_client.is_set() and message["type"] == "websocket.send":
            refused_after_close.append(message)
            raise Disconnected("Attempt to send on a closed protocol")
        sent.append(message)

    scope = {
        "type": "websocket",
        "path": session_ws_path(session.pk),
        "query_string": b"rev=0",
        "headers": [(b"origin", b"http://testserver"), (b"host", b"testserver"),
                    (b"cookie", f"sessionid={cookie}".encode())],
        "subprotocols": [],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }  # fmt: skip
    app = asyncio.create_task(application(scope, inbound.get, send))
    await inbound.put({"type": "websocket.connect"})
    for _ in range(100):
        if any(m["type"] == "websocket.accept" for m in sent):
            break
        await asyncio.sleep(0.02)
    assert any(m["type"] == "websocket.accept" for m in sent)

    closed_by_client.set()
    for sequence in range(2):
        await add_thought(session, sequence, f"racing the close {sequence}")
        await publish(SessionEvent(session.pk, thoughts=(sequence,)))
    for _ in range(100):
        if refused_after_close or app.done():
            break
        await asyncio.sleep(0.02)
    await asyncio.sleep(0.1)  # the second update is handled too
    await inbound.put({"type": "websocket.disconnect", "code": 1001})
    await asyncio.wait_for(app, timeout=5)  # ends cleanly: no traceback
    assert len(refused_after_close) == 1, "after the first refusal, nothing more is written"
