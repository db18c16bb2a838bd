"""A pause or cancel that takes effect now: a model call in flight is watched, and stopped
within about a second when a person pauses or cancels the session.

The watcher polls the session's status (the database is the truth, whichever process the
person's request reached) while the call streams. On a pause or cancel it cancels the
stream, which closes the HTTP response, and the step raises `Stopped`: the unfinished
step stores nothing, and the time it ran is dropped from the thinking time.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable

from django.conf import settings

from config.hops import db_hop

from .models import Lap, Status, ThinkingSession

STOPPING = (Status.PAUSED, Status.CANCELLED)


class Interrupted(Exception):
    """A person paused or cancelled the session while a model call was in flight."""

    def __init__(self, session_id: uuid.UUID, status: str) -> None:
        super().__init__(f"Session {session_id} was {status} during a model call.")
        self.session_id = session_id
        self.status = status


@db_hop
def _status(session_id: uuid.UUID) -> str | None:
    return ThinkingSession.objects.filter(pk=session_id).values_list("status", flat=True).first()


async def watched[T](
    call: Awaitable[T],
    *,
    session_id: uuid.UUID,
    meter: Lap | None = None,
    interval: float | None = None,
) -> T:
    """Await `call` (a model call) while watching the session's status every `interval`
    seconds (DEEPTHINK_INTERRUPT_POLL_SECONDS). Raises `Interrupted` as soon as the session
    is paused or cancelled, after cancelling the call and dropping its time from `meter`."""
    interval = settings.DEEPTHINK_INTERRUPT_POLL_SECONDS if interval is None else interval
    task = asyncio.ensure_future(call)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=interval)
            if done:
                return task.result()
            status = await _status(session_id)
            if status in STOPPING or status is None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
                if meter is not None:
                    meter.lap()  # the unfinished step is not thinking time
                raise Interrupted(session_id, status or "deleted")
    finally:
        if not task.done():  # our own caller was cancelled (worker shutdown)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
