"""Database hops of the thinking worker: sync ORM work run from async code, side by side.

Channels' `database_sync_to_async` is thread-sensitive: outside a request every call of a
process runs on asgiref's one executor thread, so one session's hop waits behind all the
others'. A hop here runs on a bounded pool of threads instead (`DEEPTHINK_DB_THREADS`,
sized to the connection pool), so different sessions' hops run at once.

Each hop is a whole unit on one thread and one connection: it opens its transactions and
commits or rolls them back before it returns (`ThinkingSession.step` is one `atomic`), and,
as with channels, stale or broken connections are closed before and after it (with the
PostgreSQL pool, closing returns the connection to the pool). Nothing holds a transaction
open across hops, so which thread runs the next hop does not matter.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, TypeVar

from channels.db import DatabaseSyncToAsync
from django.conf import settings

T = TypeVar("T")


class HopExecutor(Executor):
    """A ThreadPoolExecutor made on first use, so the size comes from settings at run time
    (and tests may change them), not at import."""

    def __init__(self) -> None:
        self._pool: ThreadPoolExecutor | None = None
        self._lock = threading.Lock()

    def _get(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(
                    max_workers=settings.DEEPTHINK_DB_THREADS, thread_name_prefix="db-hop"
                )
            return self._pool

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return self._get().submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=wait, cancel_futures=cancel_futures)


EXECUTOR = HopExecutor()


def db_hop[R](fn: Callable[..., R]) -> Callable[..., Awaitable[R]]:
    """`fn` as an awaitable database hop on the worker's hop threads. The thinking modules
    keep the plain function beside it (`fail = db_hop(_fail)`): another hop's synchronous
    code and the tests call it directly. With one hop thread (SQLite's default) hops stay on
    asgiref's thread-sensitive thread, as channels runs them: SQLite's shared in-memory test
    database refuses a second connection's write while another reads."""
    parallel = DatabaseSyncToAsync(fn, thread_sensitive=False, executor=EXECUTOR)
    serial = DatabaseSyncToAsync(fn)

    @functools.wraps(fn)
    async def hop(*args: Any, **kwargs: Any) -> R:
        run = parallel if settings.DEEPTHINK_DB_THREADS > 1 else serial
        return await run(*args, **kwargs)

    return hop
