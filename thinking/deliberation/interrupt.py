"""A pause or cancel that takes effect now: a model call in flight is watched, and stopped
within about a second when a person pauses or cancels the session, or when another worker
has taken the session over. A person's "conclude now" stops a thinking call the same way
(`watched(..., concludes=True)`), but the session goes on to its final answer: the call
raises `Concluding`, which the loop catches to go there.

The watcher polls the session's status and lease holder (the database is the truth,
whichever process the person's request reached) while the call streams: one read for all
the calls in flight on the event loop (`_Watcher`). On a pause or cancel it cancels the
stream, which closes the HTTP response, and the step raises `Stopped`: the unfinished
step stores nothing, and the time it ran is dropped from the thinking time. On a takeover
it raises `LeaseLost`: the call's reply would be refused at its store anyway (issue 17: a
step's store enters the next one, so a takeover right after it is first seen here).
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable
from typing import Any

from django.conf import settings

from config.hops import db_hop
from thinking.deliberation.run import PerLoop
from thinking.models import Lap, LeaseLost, Status, ThinkingSession

logger = logging.getLogger(__name__)

STOPPING = (Status.PAUSED, Status.CANCELLED)


class Concluding(Exception):
    """A person asked for the answer now while a thinking call was in flight; the call was
    stopped and its step stores nothing."""

    def __init__(self, session_id: uuid.UUID) -> None:
        super().__init__(f"Session {session_id} was told to conclude during a model call.")
        self.session_id = session_id


class Interrupted(Exception):
    """A person paused or cancelled the session while a model call was in flight."""

    def __init__(self, session_id: uuid.UUID, status: str) -> None:
        super().__init__(f"Session {session_id} was {status} during a model call.")
        self.session_id = session_id
        self.status = status


def _statuses(session_ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[str, str, bool]]:
    """The status, lease holder and conclude request of each session of `session_ids`
    still there, in one statement."""
    rows = ThinkingSession.objects.filter(pk__in=session_ids)
    found = rows.values_list(*_WATCHED)
    return {pk: (status, holder, conclude) for pk, status, holder, conclude in found}


_WATCHED = ("pk", "status", "worker_id", "conclude_requested")
TAKEN = "taken over"  # a watched call's end when another worker holds its session
CONCLUDING = "concluding"  # ... when a person asked for the answer now


statuses = db_hop(_statuses)


class _Watcher:
    """The model calls in flight on one event loop, watched together: every
    DEEPTHINK_INTERRUPT_POLL_SECONDS one read gives the status of every session with a call
    in flight, where each call used to read its own session's (at 100 sessions at once, a
    hop per call). Runs while any call is watched. A call ends as soon as a read that began
    after it was watched finds its session paused, cancelled or deleted, or held by a
    worker other than the one that watches it, or (for a call watched with `concludes`)
    told to conclude (its future's result: the status, None when deleted, TAKEN,
    CONCLUDING). A read that fails is logged and made again at
    the next poll: the calls go on, and their steps' stores meet the database themselves."""

    def __init__(self) -> None:
        # Per session, each call's future, the worker that holds its lease (None: any) and
        # whether a conclude request stops it.
        self._calls: dict[uuid.UUID, dict[asyncio.Future[str | None], tuple[str | None, bool]]] = {}
        self._task: asyncio.Task[None] | None = None

    def watch(
        self, session_id: uuid.UUID, worker_id: str | None = None, *, concludes: bool = False
    ) -> asyncio.Future[str | None]:
        stopped: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._calls.setdefault(session_id, {})[stopped] = (worker_id, concludes)
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._run(), name="interrupt-watcher")
        return stopped

    def unwatch(self, session_id: uuid.UUID, stopped: asyncio.Future[str | None]) -> None:
        calls = self._calls.get(session_id, {})
        calls.pop(stopped, None)
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
        reading = {key: dict(calls) for key, calls in self._calls.items()}
        try:
            found = await statuses(list(reading))
        except Exception:
            logger.warning("Could not read the statuses of calls in flight", exc_info=True)
            return
        for key, calls in reading.items():
            status, holder, conclude = found.get(key, (None, None, False))
            for stopped, (worker_id, concludes) in calls.items():
                if stopped.done():
                    continue
                if status is None or status in STOPPING:
                    stopped.set_result(status)
                elif worker_id is not None and holder != worker_id:
                    stopped.set_result(TAKEN)
                elif concludes and conclude:
                    stopped.set_result(CONCLUDING)


_watchers = PerLoop(_Watcher)


async def watched[T](
    call: Awaitable[T],
    *,
    session_id: uuid.UUID,
    meter: Lap | None = None,
    worker_id: str | None = None,
    concludes: bool = False,
) -> T:
    """Await `call` (a model call) while its session's status is watched (`_Watcher`,
    every DEEPTHINK_INTERRUPT_POLL_SECONDS). Raises `Interrupted` as soon as the session is
    paused, cancelled or deleted, after cancelling the call and dropping its time from
    `meter`. Raises `LeaseLost` once a worker other than `worker_id` (when given) holds it,
    after cancelling the call (its time is no longer this worker's to count). With
    `concludes` (a thinking call, not the answer or its check), raises `Concluding` the same
    way once a person has asked for the answer now."""
    task = asyncio.ensure_future(call)
    watcher = _watchers.get()
    stopped = watcher.watch(session_id, worker_id, concludes=concludes)
    try:
        either: set[asyncio.Future[Any]] = {task, stopped}
        await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            return task.result()
        status = stopped.result()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        if status == TAKEN:
            raise LeaseLost(session_id)
        if meter is not None:
            meter.lap()  # the unfinished step is not thinking time
        if status == CONCLUDING:
            raise Concluding(session_id)
        raise Interrupted(session_id, status or "deleted")
    finally:
        watcher.unwatch(session_id, stopped)
        if not task.done():  # our own caller was cancelled (worker shutdown)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
