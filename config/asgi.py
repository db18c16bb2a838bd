"""ASGI entry point: HTTP, the session WebSockets, and the `thinking` worker channel."""

from __future__ import annotations

import gc
import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
# Initialise Django (apps, models) before importing anything that touches the ORM.
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ChannelNameRouter, ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from thinking.origins import SameOriginValidator  # noqa: E402
from thinking.routing import websocket_urlpatterns, worker_channels  # noqa: E402
from thinking.worker import with_inprocess_worker  # noqa: E402

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

# What start-up made (modules, classes, the SDKs' types: ~350,000 objects in a worker)
# lives as long as the process. Frozen, it is left out of the garbage collector's full
# passes, each of which walked it all while every session of the process stood still
# (~0.25 s, a few times in a two-hour session; bench/README).
gc.freeze()
