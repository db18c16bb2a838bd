"""WebSocket consumer for a session page: access check, catch-up, then live updates."""

from __future__ import annotations

import logging
import time
from typing import Any
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings
from django.contrib.auth import SESSION_KEY, get_user_model
from django.contrib.sessions.backends.db import SessionStore

from .access import find_session_for
from .broadcast import group_name, render_snapshot
from .models import ThinkingSession

logger = logging.getLogger(__name__)

CLOSE_NOT_FOUND = 4404
CLOSE_TOO_BIG = 1009
CLOSE_GONE = 4403  # logged out, or no longer allowed to see the session


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


class SessionConsumer(AsyncWebsocketConsumer):
    """One per open session page. Clients only listen; anything they send is ignored."""

    group: str | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Sequences the page already shows. A set, not a high-water mark: a person's
        # steering thought and the worker's thoughts can be published out of order.
        self.seen: dict[str, set[int]] = {"thought": set(), "synthesis": set()}

    async def connect(self) -> None:
        user = self.scope.get("user")
        session_id = self.scope["url_route"]["kwargs"]["session_id"]
        session = await database_sync_to_async(find_session_for)(user, session_id)
        if session is None:
            # Refuse before joining any group: the handshake fails, nothing is revealed.
            await self.close(code=CLOSE_NOT_FOUND)
            return
        self.group = group_name(session.pk)
        self.session_id = session.pk
        self.session_key = getattr(self.scope.get("session"), "session_key", None)
        self.checked_at = time.monotonic()
        # Join first, then read: an update committed in between arrives as a live message
        # and is dropped below by sequence, so nothing is missed and nothing doubles.
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        await self._catch_up(session, self._client_revision())

    def _client_revision(self) -> int | None:
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        try:
            return int(query.get("rev", [""])[0])
        except ValueError:
            return None

    async def _catch_up(self, session: ThinkingSession, client_revision: int | None) -> None:
        html, thoughts, syntheses = await database_sync_to_async(render_snapshot)(session.pk)
        self.seen = {"thought": thoughts, "synthesis": syntheses}
        current = await database_sync_to_async(
            lambda: ThinkingSession.objects.values_list("revision", flat=True).get(pk=session.pk)
        )()
        if client_revision != current:
            await self.send(text_data=html)

    async def disconnect(self, code: int) -> None:
        if self.group:
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        # Pages only listen; a large frame is abuse, and ends the connection.
        size = len(text_data.encode()) if text_data else len(bytes_data or b"")
        if size > settings.DEEPTHINK_WS_MAX_FRAME_BYTES:
            await self.close(code=CLOSE_TOO_BIG)

    async def session_update(self, message: dict[str, Any]) -> None:
        if time.monotonic() - self.checked_at >= settings.DEEPTHINK_WS_RECHECK_SECONDS:
            self.checked_at = time.monotonic()
            allowed = await database_sync_to_async(still_allowed)(
                self.scope.get("user"), self.session_key, self.session_id
            )
            if not allowed:
                await self.close(code=CLOSE_GONE)
                return
        html = []
        for part in message["parts"]:
            seen = self.seen.get(part["kind"])
            if seen is not None:
                if part["seq"] in seen:
                    continue
                seen.add(part["seq"])
            html.append(part["html"])
        if html:
            await self.send(text_data="".join(html))
