from __future__ import annotations

from django.urls import path

from .consumers import SessionConsumer
from .presenters import WS_SESSIONS
from .worker import CHANNEL, ThinkingWorkerConsumer

websocket_urlpatterns = [
    path(f"{WS_SESSIONS}<uuid:session_id>/", SessionConsumer.as_asgi(), name="ws-session"),
]

worker_channels = {CHANNEL: ThinkingWorkerConsumer.as_asgi()}
