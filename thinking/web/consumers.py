"""WebSocket consumer for a session page: access check, catch-up, then live updates."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Coroutine
from typing import Any, cast
from urllib.parse import parse_qs

from asgiref.sync import sync_to_async
from autobahn.exception import Disconnected
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.contrib.auth import SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore

from config.hops import db_hop
from thinking.models import ThinkingSession
from thinking.page import watchers
from thinking.page.broadcast import (
    PageMarks,
    catch_up,
    chunks,
    group_name,
    header_for,
    sources_after,
    sub_question_changes,
)
from thinking.state import QuestionRows, SourceRows, UpdateMessage
from thinking.web import sockets
from thinking.web.access import find_session_for

logger = logging.getLogger(__name__)

# Close codes the page understands (app.js): 4xxx never make the browser reconnect.
CLOSE_NOT_FOUND = 4404  # no such session, or not this person's; also unknown paths
CLOSE_GONE = 4403  # logged out, or no longer allowed to see the session
CLOSE_TOO_BIG = 4413  # a client frame over DEEPTHINK_WS_MAX_FRAME_BYTES
CLOSE_TOO_MANY = 4429  # this person has DEEPTHINK_WS_MAX_PER_USER live pages open already
CLOSE_CATCH_UP_FAILED = 4500  # the catch-up could not be sent: reloading is the way out

# What sending to a client that has just closed raises, before the server tells the consumer
# it is gone: daphne's autobahn raises Disconnected ("send on a closed protocol"), a server
# that follows the ASGI spec an OSError.
CLIENT_GONE = (OSError, Disconnected)


def _off_loop[**P, R](fn: Callable[P, R]) -> Callable[P, Coroutine[Any, Any, R]]:
    """A cache call (thinking.web.sockets) on a thread of its own: with Redis it waits on the
    network, and it touches no database."""
    return sync_to_async(fn, thread_sensitive=False)


def still_allowed(user: Any, session_key: str | None, session_id: Any) -> bool:
    """Channels fixes the user at connect: a later logout or lost access must still end the
    stream. The login's session row must exist and still name this user."""
    if not session_key or not getattr(user, "is_authenticated", False):
        return False
    stored = SessionStore(session_key=session_key).load()
    if str(stored.get(SESSION_KEY)) != str(user.pk):
        return False
    # The scope's user is the one loaded at connect: a deactivated account must end too.
    if not get_user_model().objects.filter(pk=user.pk, is_active=True).exists():
        return False
    return find_session_for(user, session_id) is not None


MAX_MARK = 2**31 - 1


SHOWN_QUESTIONS = 400  # ids a page may name (it keeps at most 150 sub-questions)


def shown_ids(value: str | None) -> frozenset[int] | None:
    """The sub-questions a page shows ("1,5,9"), or None when it did not say (an older
    page): then every row it may have is redrawn. Anything but ids is ignored."""
    if value is None:
        return None
    parts = value.split(",")[:SHOWN_QUESTIONS]
    return frozenset(int(p) for p in parts if p.isdigit() and len(p) <= 10)


def page_marks(query_string: bytes) -> tuple[int | None, PageMarks]:
    """The revision and the last row of each list the page shows, from the socket's URL."""
    query = parse_qs(query_string.decode("latin-1"))

    def number(name: str, default: int) -> int:
        try:
            value = int(query.get(name, [""])[0])
        except ValueError:
            return default
        # Within the database's integers: a page's marks are compared in SQL, where a value
        # out of range is an error, not "nothing above it".
        return max(-1, min(value, MAX_MARK))

    revision = number("rev", -1)
    marks = PageMarks(
        thought=number("t", -1),
        synthesis=number("y", -1),
        source=number("s", 0),
        question=number("q", 0),
        shown_questions=shown_ids(query.get("qs", [None])[0]),
    )
    return (revision if revision >= 0 else None), marks


class SessionConsumer(AsyncWebsocketConsumer):
    """One per open session page. Clients only listen; anything they send is ignored."""

    group: str | None = None
    joined = 0.0  # when watchers.join counted this page

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Sequences the page already shows. A set, not a high-water mark: a person's
        # steering thought and the worker's thoughts can be published out of order.
        self.seen: dict[str, set[int]] = {"thought": set(), "synthesis": set()}
        self.source = 0  # highest source number the page has
        # Sub-question id -> its row's state (explored, priority), as the page shows it.
        self.questions: dict[int, str] = {}
        self.owner = False
        self.closed = False  # by us, or the client went while an update was on its way
        self.slot: str | None = None  # the lease on one of its user's slots (thinking.web.sockets)
        self.holding: asyncio.Task[None] | None = None

    async def connect(self) -> None:
        user = self.scope.get("user")
        session_id = self.scope["url_route"]["kwargs"]["session_id"]
        session = await database_sync_to_async(find_session_for)(user, session_id)
        if session is None:
            # Refuse before joining any group: the handshake fails, nothing is revealed.
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.slot = await _off_loop(sockets.take_slot)(user.pk, self.channel_name)
        if self.slot is None:
            # Accepted first, so the page can read the code: a refused handshake is only 1006.
            await self.accept()
            await self.close(code=CLOSE_TOO_MANY)
            return
        self.holding = asyncio.create_task(self._hold_slot(user.pk))
        self.session_id = session.pk
        self.owner = session.is_owned_by(user)
        self.session_key = getattr(self.scope.get("session"), "session_key", None)
        # Pages opened together (a team following one link) would recheck together, a burst
        # of database hops in front of an update: each page's first recheck comes at its own
        # point in the second half of the interval, so never later than the interval.
        recheck = settings.DEEPTHINK_WS_RECHECK_SECONDS
        self.checked_at = time.monotonic() - random.uniform(0, recheck / 2)
        # Join first, then read: an update committed in between arrives as a live message
        # and is dropped below by sequence, so nothing is missed and nothing doubles. The
        # join counts this page as watching (a session nobody watches is not rendered).
        group = group_name(session.pk)
        self.joined = await watchers.join(self.channel_layer, group, self.channel_name)
        self.group = group
        await self.accept()
        await self._catch_up(session)

    async def _catch_up(self, session: ThinkingSession) -> None:
        revision, marks = page_marks(self.scope.get("query_string", b""))
        try:
            plan = await database_sync_to_async(catch_up)(
                session.pk, revision, marks, owner=self.owner
            )
            for section in plan.sections:
                pieces = await database_sync_to_async(section)()
                for message in chunks(pieces):
                    await self.send(text_data=message)
        except Exception:
            # Logged once, and the page is told to reload: reconnecting would only render
            # the same catch-up again.
            logger.exception("Catch-up for session %s failed", session.pk)
            await self.close(code=CLOSE_CATCH_UP_FAILED)
            return
        self.seen = {"thought": plan.thoughts, "synthesis": plan.syntheses}
        self.source = plan.source
        self.questions = plan.questions

    async def _hold_slot(self, user_id: int) -> None:
        """Renew this socket's slot while it is open; if it was lost (the loop stalled past
        the lease and another socket took it), take another or close."""
        while True:
            await asyncio.sleep(sockets.RENEW_SECONDS)
            try:
                if self.slot is not None and await _off_loop(sockets.renew)(
                    self.slot, self.channel_name
                ):
                    continue
                self.slot = await _off_loop(sockets.take_slot)(user_id, self.channel_name)
            except Exception:
                logger.exception("Could not renew a live page's slot")
                continue
            if self.slot is None:
                await self.close(code=CLOSE_TOO_MANY)
                return

    async def disconnect(self, code: int) -> None:
        self.closed = True
        if self.holding is not None:
            self.holding.cancel()
        if self.slot is not None:
            await _off_loop(sockets.release)(self.slot, self.channel_name)
        if self.group:
            await watchers.leave(self.channel_layer, self.group, self.channel_name, self.joined)

    async def send(
        self, text_data: str | None = None, bytes_data: bytes | None = None, close: bool = False
    ) -> None:
        """Nothing is written to a client that has gone. An update can race a client's close:
        the server has the close frame, the consumer hears of it a moment later; writing in
        between raised "send on a closed protocol". Such a send is dropped, and so is every
        one after it: the disconnect follows."""
        if self.closed:
            return
        try:
            await super().send(text_data=text_data, bytes_data=bytes_data, close=close)
        except CLIENT_GONE:
            self.closed = True

    async def close(self, code: int | bool | None = None, reason: str | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(*CLIENT_GONE):  # already gone: nothing to close
            await super().close(code=code, reason=reason)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        # Pages only listen; a large frame is abuse, and ends the connection.
        size = len(text_data.encode()) if text_data else len(bytes_data or b"")
        if size > settings.DEEPTHINK_WS_MAX_FRAME_BYTES:
            await self.close(code=CLOSE_TOO_BIG)

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Channels closes stale database connections before every handler, as a hop onto
        the one thread-sensitive thread: with 50 pages open, one update queued 50 hops there,
        ahead of the worker's own. An update needs no connection of this thread: the reads
        it may make are `db_hop`s, which close stale connections on their own thread."""
        if message["type"] == "session.update":
            await self.session_update(cast("UpdateMessage", message))
        else:
            await super().dispatch(message)

    async def session_update(self, message: UpdateMessage) -> None:
        if time.monotonic() - self.checked_at >= settings.DEEPTHINK_WS_RECHECK_SECONDS:
            self.checked_at = time.monotonic()
            allowed = await db_hop(still_allowed)(
                self.scope.get("user"), self.session_key, self.session_id
            )
            if not allowed:
                await self.close(code=CLOSE_GONE)
                return
        pieces = []
        header = None
        for part in message["parts"]:
            if part["kind"] == "header":
                header = header_for(part, self.owner)  # last, after what it counts
                continue
            seen = self.seen.get(part["kind"])
            if seen is not None:
                if part["seq"] in seen:
                    continue
                seen.add(part["seq"])
            pieces.append(part["html"])
        if "sources" in message:
            pieces += await self._new_sources(message["sources"])
        if "questions" in message:
            pieces += await self._changed_questions(message["questions"])
        if header is not None:
            pieces.append(header)
        for chunk in chunks(pieces):
            await self.send(text_data=chunk)

    async def _new_sources(self, rows: SourceRows) -> list[str]:
        """The rows the page lacks, from the message (rendered once for all pages); a page
        behind where they start (it missed a message) reads its own."""
        if self.source < rows["after"]:
            found, self.source = await db_hop(sources_after)(self.session_id, self.source)
            return found
        pieces = [row["html"] for row in rows["rows"] if row["seq"] > self.source]
        if pieces:
            self.source = rows["rows"][-1]["seq"]
            pieces.append(rows["summary"])
        return pieces

    async def _changed_questions(self, rows: QuestionRows) -> list[str]:
        """The message's rows for what the page lacks, if each starts from what the page
        shows and the page shows no row the message does not know of; else (it missed a
        message, or its catch-up read newer rows) the page reads its own changes."""
        known = self.questions
        now = dict(rows["states"])
        lacking = {pk for pk, state in now.items() if known.get(pk) != state}
        drawn = [row for row in rows["rows"] if row["seq"] in lacking]
        if (
            known.keys() <= now.keys()
            and len(drawn) == len(lacking)
            and all(row.get("before") == known.get(row["seq"]) for row in drawn)
        ):
            self.questions = now
            return [row["html"] for row in drawn]
        changed, self.questions = await db_hop(sub_question_changes)(self.session_id, known)
        return changed


class RefusingConsumer(AsyncWebsocketConsumer):
    """Any other WebSocket path: refused at the handshake, without a traceback."""

    async def connect(self) -> None:
        await self.close(code=CLOSE_NOT_FOUND)
