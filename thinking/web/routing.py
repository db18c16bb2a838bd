from __future__ import annotations

from django.urls import path, re_path

from thinking.deliberation.worker import CHANNEL, ThinkingWorkerConsumer
from thinking.page.presenters import WS_SESSIONS
from thinking.web.consumers import RefusingConsumer, SessionConsumer

websocket_urlpatterns = [
    path(f"{WS_SESSIONS}<uuid:session_id>/", SessionConsumer.as_asgi(), name="ws-session"),
    # Last: an unknown path is refused cleanly instead of raising in the router.
    re_path(r"", RefusingConsumer.as_asgi()),
]

worker_channels = {CHANNEL: ThinkingWorkerConsumer.as_asgi()}
