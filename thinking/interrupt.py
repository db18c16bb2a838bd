"""A pause or cancel that takes effect now: a model call in flight is watched, and stopped
within about a second when a person pauses or cancels the session.

The watcher polls the session's status (the database is the truth, whichever process the
person's request reached) while the call streams: one read for all the calls in flight on
the event loop (`_Watcher`). On a pause or cancel it cancels the
stream, which closes the HTTP response, and the step raises `Stopped`: the unfinished
step stores nothing, and the time it ran is dropped from the thinking time.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable
from typing import Any

from django.conf import settings

from config.hops import db_hop

from .models import Lap, Status, ThinkingSession
from .per_loop import PerLoop

logger = logging.getLogger(__name__)

STOPPING = (Status.PAUSED, Status.CANCELLED)


class Interrupted(Exception):
    """A person paused or cancelled the session while a model call was in flight."""

    def __init__(self, session_id: uuid.UUID, status: str) -> None:
        super().__init__(f"Session {session_id} was {status} during a model call.")
        self.session_id = session_id
        self.status = status


def _statuses(session_ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
    """The status of each session of `session_ids` still there, in one statement."""
    rows = ThinkingSession.objects.filter(pk__in=session_ids).values_list("pk", "status")
    return dict(rows)


statuses = db_hop(_statuses)


class _Watcher:
    """The model calls in flight on one event loop, watched together: every
    DEEPTHINK_INTERRUPT_POLL_SECONDS one read gives the status of every session with a call
    in flight, where each call used to read its own session's (at 100 sessions at once, a
    hop per call). Runs while any call is watched. A call ends as soon as a read that began
    after it was watched finds its session paused, cancelled or deleted (its future's
    result: the status, None when deleted). A read that fails is logged and made again at
    the next poll: the calls go on, and their steps' stores meet the database themselves."""

    def __init__(self) -> None:
        self._calls: dict[uuid.UUID, set[asyncio.Future[str | None]]] = {}
        self._task: asyncio.Task[None] | None = None

    def watch(self, session_id: uuid.UUID) -> asyncio.Future[str | None]:
        stopped: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._calls.setdefault(session_id, set()).add(stopped)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="interrupt-watcher")
        return stopped

    def unwatch(self, session_id: uuid.UUID, stopped: asyncio.Future[str | None]) -> None:
        calls = self._calls.get(session_id, set())
        calls.discard(stopped)
        if not calls:
            self._calls.pop(session_id, None)

    async def _run(self) -> None:
        # Never cancelled from outside while a call is watched (a read cut short would
        # leave its statement running in its hop thread): it ends at the first poll with
        # no call in flight, and lets go of its task (which holds the loop) as it ends.
        try:
            while True:
                await asyncio.sleep(settings.DEEPTHINK_INTERRUPT_POLL_SECONDS)
                if not self._calls:
                    return
                await self._read()
        finally:
            if self._task is asyncio.current_task():
                self._task = None

    async def _read(self) -> None:
        # The calls watched when the read begins: one watched later is not answered by it
        # (its session may have been resumed since its status was read).
        reading = {key: set(calls) for key, calls in self._calls.items()}
        try:
            found = await statuses(list(reading))
        except Exception:
            logger.warning("Could not read the statuses of calls in flight", exc_info=True)
            return
        for key, calls in reading.items():
            status = found.get(key)
            if status not in STOPPING and status is not None:
                continue
            for stopped in calls:
                if not stopped.done():
                    stopped.set_result(status)


_watchers = PerLoop(_Watcher)


async def watched[T](
    call: Awaitable[T],
    *,
    session_id: uuid.UUID,
    meter: Lap | None = None,
) -> T:
    """Await `call` (a model call) while its session's status is watched (`_Watcher`,
    every DEEPTHINK_INTERRUPT_POLL_SECONDS). Raises `Interrupted` as soon as the session is
    paused, cancelled or deleted, after cancelling the call and dropping its time from
    `meter`."""
    task = asyncio.ensure_future(call)
    watcher = _watchers.get()
    stopped = watcher.watch(session_id)
    try:
        either: set[asyncio.Future[Any]] = {task, stopped}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        status = stopped.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if meter is not None:
            meter.lap()  # the unfinished step is not thinking time
        raise Interrupted(session_id, status or "deleted")
    finally:
        watcher.unwatch(session_id, stopped)
        if not task.done():  # our own caller was cancelled (worker shutdown)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
