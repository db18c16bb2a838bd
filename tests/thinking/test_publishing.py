"""Publishing off the critical path: the loop never waits for a render, the page sees every
stored step in order."""

from __future__ import annotations

import asyncio
import uuid

from thinking.events import LiveStep, SessionEvent
from thinking.page.publishing import SessionPublisher, merge

SESSION = uuid.uuid4()


def stored(n: int) -> SessionEvent:
    return SessionEvent(SESSION, thoughts=(n,))


def live(text: str) -> SessionEvent:
    return SessionEvent(SESSION, live=LiveStep("thoughts", 0.0, text))


async def test_a_slow_render_does_not_hold_up_the_loop_and_order_is_kept():
    sent: list[SessionEvent] = []
    gate = asyncio.Event()

    async def slow_publish(event: SessionEvent) -> None:
        await gate.wait()  # the render and group send take as long as they take
        sent.append(event)

    publish = SessionPublisher(slow_publish)
    for n in range(5):
        await asyncio.wait_for(publish(stored(n)), timeout=1)  # returns at once
        await asyncio.sleep(0)
    assert sent == []
    gate.set()
    await publish.aclose()
    # The steps that waited behind the slow send go out together, in order.
    assert [e.thoughts for e in sent] == [(0,), (1, 2, 3, 4)]


async def test_a_failed_publish_does_not_stop_later_ones():
    sent: list[SessionEvent] = []

    async def flaky(event: SessionEvent) -> None:
        if event.thoughts == (1,):
            raise ConnectionError("the channel layer is down")
        sent.append(event)

    publish = SessionPublisher(flaky)
    for n in range(3):
        await publish(stored(n))
        await asyncio.sleep(0)  # each is sent before the next comes
    await publish.aclose()
    assert [e.thoughts for e in sent] == [(0,), (2,)]


async def test_a_live_update_followed_by_another_is_skipped_stored_steps_never_are():
    sent: list[SessionEvent] = []
    gate = asyncio.Event()

    async def slow_publish(event: SessionEvent) -> None:
        await gate.wait()
        sent.append(event)

    publish = SessionPublisher(slow_publish)
    await publish(stored(0))  # being sent while the rest queue up
    await asyncio.sleep(0)
    for event in (live("a"), live("ab"), stored(1), live("abc"), live("abcd"), stored(2)):
        await publish(event)
    gate.set()
    await publish.aclose()
    shown = [e.live.reasoning if e.live else e.thoughts for e in sent]
    assert shown == [(0,), "ab", (1,), "abcd", (2,)]


async def test_the_queue_is_bounded_the_caller_waits_for_room():
    gate = asyncio.Event()
    sent: list[SessionEvent] = []

    async def slow_publish(event: SessionEvent) -> None:
        await gate.wait()
        sent.append(event)

    def synthesis(n: int) -> SessionEvent:
        return SessionEvent(SESSION, synthesis=n)  # two never go out as one

    publish = SessionPublisher(slow_publish, limit=3)
    await publish(synthesis(0))
    await asyncio.sleep(0)  # being sent
    for n in range(1, 4):  # three waiting
        await publish(synthesis(n))
    blocked = asyncio.create_task(publish(synthesis(4)))
    await asyncio.sleep(0.05)
    assert not blocked.done()
    assert publish.pending == 3
    gate.set()
    await asyncio.wait_for(blocked, timeout=1)
    await publish.aclose()
    assert [e.synthesis for e in sent] == [0, 1, 2, 3, 4]


async def test_a_burst_of_search_results_is_one_send_stored_steps_never_are_skipped():
    """A research wave whose searches finish together: the events that wait behind a send
    become one (each sources event shows all new sources since the last send)."""
    sent: list[SessionEvent] = []
    gate = asyncio.Event()

    async def slow_publish(event: SessionEvent) -> None:
        await gate.wait()
        sent.append(event)

    publish = SessionPublisher(slow_publish)
    await publish(stored(0))  # being sent while the searches finish
    await asyncio.sleep(0)
    searches = [SessionEvent(SESSION, sources=True) for _ in range(5)]
    for event in (*searches[:3], stored(1), *searches[3:]):
        await publish(event)
    await publish(SessionEvent(SESSION, plan=True, sources=True))  # after the wave
    gate.set()
    await publish.aclose()
    assert sent == [stored(0), SessionEvent(SESSION, thoughts=(1,), plan=True, sources=True)]


def test_what_waits_together_is_sent_as_one_unless_it_cannot_be():
    synthesis = SessionEvent(SESSION, synthesis=4, questions=True)
    checked = SessionEvent(SESSION, checked=3)
    assert merge(stored(1), stored(2)) == SessionEvent(SESSION, thoughts=(1, 2))
    assert merge(synthesis, checked) == SessionEvent(
        SESSION, synthesis=4, questions=True, checked=3
    )
    assert merge(checked, SessionEvent(SESSION, thoughts=(5,), finished=True)) == SessionEvent(
        SESSION, thoughts=(5,), checked=3, finished=True
    )
    assert merge(checked, SessionEvent(SESSION, checked=3)) == checked
    # A stage entered leaves the header alone; merged with a step, the header comes along.
    stage = SessionEvent(SESSION, plan=True, header=False)
    assert merge(stage, stage) == stage
    assert merge(stage, stored(1)) == SessionEvent(SESSION, thoughts=(1,), plan=True)
    # A message carries one new synthesis and one citation check.
    assert merge(synthesis, SessionEvent(SESSION, synthesis=5)) is None
    assert merge(checked, SessionEvent(SESSION, checked=4)) is None
    # Live reasoning is replaced by more of it, and never merged with a stored step.
    assert merge(live("a"), live("ab")) == live("ab")
    assert merge(live("a"), stored(1)) is None
    assert merge(stored(1), live("a")) is None
