"""The model calls in flight on one event loop are watched together (thinking/interrupt.py):
one read of the statuses a poll, however many calls, and a pause stops only its own."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from thinking import interrupt
from thinking.models import Status, ThinkingSession

pytestmark = pytest.mark.django_db(transaction=True)


async def test_calls_in_flight_are_watched_with_one_read_a_poll_and_a_pause_stops_its_own(
    make_session: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
):
    settings.DEEPTHINK_INTERRUPT_POLL_SECONDS = 0.05
    sessions = [await sync_to_async(make_session)() for _ in range(3)]
    reads: list[int] = []
    read = interrupt.statuses

    async def counted(session_ids: list[Any]) -> dict[Any, str]:
        reads.append(len(session_ids))
        return await read(session_ids)

    monkeypatch.setattr(interrupt, "statuses", counted)
    finished = asyncio.Event()

    async def call() -> str:
        await finished.wait()
        return "reply"

    calls = [
        asyncio.ensure_future(interrupt.watched(call(), session_id=s.pk)) for s in sessions
    ]
    await asyncio.sleep(0.2)
    assert reads and set(reads) == {3}  # each poll read all three, in one statement
    polls = len(reads)

    await ThinkingSession.objects.filter(pk=sessions[1].pk).aupdate(status=Status.PAUSED)
    with pytest.raises(interrupt.Interrupted) as paused:
        await asyncio.wait_for(calls[1], timeout=2)
    assert paused.value.status == Status.PAUSED
    assert not calls[0].done() and not calls[2].done()  # the others go on

    await ThinkingSession.objects.filter(pk=sessions[2].pk).adelete()
    with pytest.raises(interrupt.Interrupted, match="deleted"):
        await asyncio.wait_for(calls[2], timeout=2)
    await asyncio.sleep(0.1)
    assert reads[-1] == 1  # the one still in flight

    finished.set()
    assert await calls[0] == "reply"
    await asyncio.sleep(0.15)
    done = len(reads)
    await asyncio.sleep(0.15)
    assert len(reads) == done > polls  # no call in flight: no more reads


async def test_a_failed_read_fails_the_calls_it_watched(
    make_session: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
):
    settings.DEEPTHINK_INTERRUPT_POLL_SECONDS = 0.05
    session = await sync_to_async(make_session)()

    async def unreadable(session_ids: list[Any]) -> dict[Any, str]:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(interrupt, "statuses", unreadable)
    with pytest.raises(RuntimeError, match="went away"):
        await asyncio.wait_for(
            interrupt.watched(asyncio.sleep(5), session_id=session.pk), timeout=2
        )
