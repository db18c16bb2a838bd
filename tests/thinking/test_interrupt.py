"""The model calls in flight on one event loop are watched together
(thinking/deliberation/interrupt.py): one read of the statuses a poll, however many calls, and a
pause stops only its own."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from thinking.deliberation import interrupt
from thinking.models import Status, ThinkingSession

pytestmark = pytest.mark.django_db(transaction=True)


async def test_calls_in_flight_are_watched_with_one_read_a_poll_and_a_pause_stops_its_own(
    make_session: Any, settings: Any, monkeypatch: pytest.MonkeyPatch
):
    settings.DEEPTHINK_INTERRUPT_POLL_SECONDS = 0.05
    sessions = [await sync_to_async(make_session)() for _ in range(3)]
    reads: list[int] = []
    read = interrupt.statuses

    async def counted(session_ids: list[Any]) -> dict[Any, tuple[str, str]]:
        reads.append(len(session_ids))
        return await read(session_ids)

    monkeypatch.setattr(interrupt, "statuses", counted)
    finished = asyncio.Event()

    async def call() -> str:
        await finished.wait()
        return "reply"

    def watch(session: Any) -> asyncio.Future[str]:
        return asyncio.ensure_future(interrupt.watched(call(), session_id=session.pk))

    # The second session has two calls in flight (a tool round's, say).
    calls = [watch(s) for s in (*sessions, sessions[1])]
    await asyncio.sleep(0.2)
    assert reads and set(reads) == {3}  # each poll read all three sessions, in one statement

    await ThinkingSession.objects.filter(pk=sessions[1].pk).aupdate(status=Status.PAUSED)
    for paused in (calls[1], calls[3]):
        with pytest.raises(interrupt.Interrupted) as stopped:
            await asyncio.wait_for(paused, timeout=2)
        assert stopped.value.status == Status.PAUSED
    assert not calls[0].done() and not calls[2].done()  # the others go on

    await ThinkingSession.objects.filter(pk=sessions[2].pk).adelete()
    with pytest.raises(interrupt.Interrupted, match="deleted"):
        await asyncio.wait_for(calls[2], timeout=2)
    await asyncio.sleep(0.1)
    assert reads[-1] == 1  # the one still in flight

    finished.set()
    assert await calls[0] == "reply"
    await asyncio.sleep(0.1)
    done = len(reads)
    await asyncio.sleep(0.15)
    assert len(reads) == done  # no call in flight: no more reads

    # A call after the watcher stopped is watched again.
    finished.clear()
    again = watch(sessions[1])
    with pytest.raises(interrupt.Interrupted):
        await asyncio.wait_for(again, timeout=2)
    assert len(reads) > done


async def test_a_failed_read_is_made_again_and_the_call_goes_on(
    make_session: Any, settings: Any, monkeypatch: pytest.MonkeyPatch, caplog: Any
):
    """A status read that fails (the database blinked) does not fail the calls in flight:
    it is logged and made again at the next poll, which still sees a pause."""
    settings.DEEPTHINK_INTERRUPT_POLL_SECONDS = 0.05
    session = await sync_to_async(make_session)()
    read = interrupt.statuses
    failures = [RuntimeError("the database went away")] * 2

    async def blinking(session_ids: list[Any]) -> dict[Any, tuple[str, str]]:
        if failures:
            raise failures.pop()
        return await read(session_ids)

    monkeypatch.setattr(interrupt, "statuses", blinking)
    call = asyncio.ensure_future(interrupt.watched(asyncio.sleep(5), session_id=session.pk))
    await asyncio.sleep(0.25)
    assert not failures and not call.done()
    assert "Could not read the statuses of calls in flight" in caplog.text

    await ThinkingSession.objects.filter(pk=session.pk).aupdate(status=Status.CANCELLED)
    with pytest.raises(interrupt.Interrupted) as stopped:
        await asyncio.wait_for(call, timeout=2)
    assert stopped.value.status == Status.CANCELLED


async def test_a_call_whose_session_another_worker_took_stops_with_the_lease_lost(
    make_session: Any, settings: Any
):
    """Issue 17: a step's store enters the next step, so a takeover right after it is first
    seen by the watch of the next call: that call stops within a poll, as a cancel does
    (its reply would be refused at its store), and says the lease is lost. A call watched
    for no worker in particular goes on; one of the worker that holds the session too."""
    from thinking.models import LeaseLost

    settings.DEEPTHINK_INTERRUPT_POLL_SECONDS = 0.05
    session = await sync_to_async(make_session)()
    await ThinkingSession.objects.filter(pk=session.pk).aupdate(worker_id="this-worker")
    finished = asyncio.Event()

    async def call() -> str:
        await finished.wait()
        return "reply"

    def watch(worker_id: str | None) -> asyncio.Future[str]:
        watched = interrupt.watched(call(), session_id=session.pk, worker_id=worker_id)
        return asyncio.ensure_future(watched)

    ours, anyone, theirs = watch("this-worker"), watch(None), watch("another-worker")
    await asyncio.sleep(0.2)
    assert not ours.done() and not anyone.done()  # this worker holds it
    with pytest.raises(LeaseLost):
        await asyncio.wait_for(theirs, timeout=2)  # a worker that does not hold it: stopped

    await ThinkingSession.objects.filter(pk=session.pk).aupdate(worker_id="another-worker")
    with pytest.raises(LeaseLost):
        await asyncio.wait_for(ours, timeout=2)
    await asyncio.sleep(0.15)
    assert not anyone.done()
    finished.set()
    assert await anyone == "reply"
