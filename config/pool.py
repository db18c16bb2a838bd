"""The PostgreSQL pool's health check: one broken connection means the rest are suspect.

psycopg's pool checks a connection before lending it (with its `check` callback, which
Django sets to `ConnectionPool.check_connection` under CONN_HEALTH_CHECKS) and, when one
fails, throws it away and tries the next idle one, sleeping 0, 1, 2, 4, ... seconds between
failed checks. After a PostgreSQL restart (or `pg_terminate_backend`) every idle connection
is dead, so a hop drawing them one by one waited 1 + 2 + 4 = 7 s behind four of them, and
the pool's 30 s timeout behind six. Here the first failed check sweeps the whole pool at
once (`ConnectionPool.check`: each idle connection is tried and the dead ones are replaced in
the background), so the hop's next draw is a working or a new connection.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from psycopg_pool import ConnectionPool


def health_check(alias: str) -> Callable[[Any], None]:
    """The pool's `check` callback for the database `alias` (settings' OPTIONS["pool"])."""

    def check(conn: Any) -> None:
        try:
            ConnectionPool.check_connection(conn)
        except Exception:
            from django.db import connections

            pool = getattr(connections[alias], "pool", None)  # PostgreSQL's wrapper has it
            if pool is not None:
                pool.check()
            raise

    return check
