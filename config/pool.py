"""The PostgreSQL pool's health check: a connection the server ended is never lent, and one
broken connection means the rest are suspect.

psycopg's pool checks a connection before lending it (with its `check` callback; Django's
default under CONN_HEALTH_CHECKS is `ConnectionPool.check_connection`, an empty query) and,
when one fails, throws it away and tries the next idle one, sleeping 0, 1, 2, 4, ... seconds
between failed checks.

The empty query was one network round trip per database hop, a third of a one-query hop's
CPU (bench/README, "Idle connections checked with one poll"). An idle
connection is sent nothing unasked (nothing here LISTENs), and when the server ends one
(`pg_terminate_backend`, a restart, a crashed backend) it sends an error and closes the
socket: so a socket with nothing to read is alive as far as anything can tell without
asking, and one with something to read gets the empty query, which either reads a harmless
message (a parameter's new value after a reload) or fails. A host that vanished without a
word fails the hop's first query instead of the check, as it could have failed right after
a check anyway.

After a restart every idle connection is dead, so a hop drawing them one by one waited
1 + 2 + 4 = 7 s behind four of them, and the pool's 30 s timeout behind six. Here the first
failed check sweeps the whole pool at once (`ConnectionPool.check`: each idle connection is
tried and the dead ones are replaced in the background), so the hop's next draw is a
working or a new connection.
"""

from __future__ import annotations

import select
from collections.abc import Callable
from typing import Any

from psycopg import pq
from psycopg_pool import ConnectionPool


def quiet(conn: Any) -> bool:
    """Whether the idle connection `conn` is open with nothing waiting to be read."""
    if conn.closed or conn.pgconn.status != pq.ConnStatus.OK:
        return False
    poller = select.poll()  # not select.select: a descriptor past 1024 is fine here
    poller.register(conn.pgconn.socket, select.POLLIN | select.POLLPRI)
    return not poller.poll(0)


def health_check(alias: str) -> Callable[[Any], None]:
    """The pool's `check` callback for the database `alias` (settings' OPTIONS["pool"])."""

    def check(conn: Any) -> None:
        if quiet(conn):
            return
        try:
            ConnectionPool.check_connection(conn)
        except Exception:
            from django.db import connections

            pool = getattr(connections[alias], "pool", None)  # PostgreSQL's wrapper has it
            if pool is not None:
                pool.check()
            raise

    return check
