"""The front ends: pages, the JSON API, the WebSocket consumer, forms, exports, who may see
a session, URL and WebSocket routing.
"""

from __future__ import annotations
