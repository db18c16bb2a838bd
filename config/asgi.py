"""ASGI entry point: HTTP, the session WebSockets, and the `thinking` worker channel."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Initialise Django (apps, models) before importing anything that touches the ORM.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ChannelNameRouter, ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from config.startup import freeze_start_up  # noqa: E402
from thinking.deliberation.worker import with_inprocess_worker  # noqa: E402
from thinking.web.origins import SameOriginValidator  # noqa: E402
from thinking.web.routing import websocket_urlpatterns, worker_channels  # noqa: E402

router = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": SameOriginValidator(
            AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))
        ),
        "channel": ChannelNameRouter(worker_channels),
    }
)

# On embedded defaults the web process is also the thinking worker, from its start.
application = with_inprocess_worker(router)
application.start_with_server()
freeze_start_up()
