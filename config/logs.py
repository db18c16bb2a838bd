"""Log lines that say which session they are about.

A worker runs each session in a task of its own (thinking/deliberation/worker.py) inside
`about_session(id)`; every line logged from that task, and from the database hops and tasks
it starts (they inherit its context), carries ` [session <id>]` after the logger's name.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

CURRENT_SESSION: ContextVar[str] = ContextVar("deepthink_session", default="")


@contextmanager
def about_session(session_id: Any) -> Iterator[None]:
    """Lines logged inside (in this task and what it starts) name the session."""
    token = CURRENT_SESSION.set(str(session_id))
    try:
        yield
    finally:
        CURRENT_SESSION.reset(token)


class SessionFilter(logging.Filter):
    """Gives each record `session`: ` [session <id>]` inside `about_session`, else empty."""

    def filter(self, record: logging.LogRecord) -> bool:
        session = CURRENT_SESSION.get()
        record.session = f" [session {session}]" if session else ""
        return True
