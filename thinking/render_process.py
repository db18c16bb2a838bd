"""A worker's live updates rendered in processes of their own.

A worker's sessions share one interpreter lock. With pages open, rendering their stored
steps (the templates and the reads behind them) is about a third of the worker's CPU, and
every render holds the lock that the sessions' next model calls and stores wait for
(bench/README.md, issue 17). With `DEEPTHINK_RENDER_PROCESSES` above 0, `broadcast.publish`
has a child process render each stored step, from what the worker last sent the session's
pages (`broadcast.Sent`, handed over and back with each render), and sends the message
itself. A child reads the database on connections of its own; it never writes, sends
nothing and keeps no state a render depends on.

The worker renders an update itself whenever no child can: while its child starts (about
three seconds, on the first update a page watches: it compiles the live partials and loads
the URLs before it takes one), after one died (the update it was given too), and for
`REST_SECONDS` after any failure, so a child that cannot start is not started again for
every update. A child ignores the signals that stop its worker (the worker stops it once
its sessions are handed over) and exits when its worker is gone, killed outright included.

A child is spawned, not forked, so it starts from the environment and settings module,
not from what a running process changed: a test's `settings` fixture does not reach it.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from django.conf import settings

logger = logging.getLogger(__name__)

REST_SECONDS = 60.0  # after a child failed: the worker renders this long before trying again


@dataclass
class _Child:
    pool: ProcessPoolExecutor  # of one process: a session's renders go to one child
    started: Future[int]  # the child's process id, once it has started


_children: dict[int, _Child] = {}
_lock = threading.Lock()
_resting_until = 0.0


def enabled() -> bool:
    return settings.DEEPTHINK_RENDER_PROCESSES > 0


def _start_child(database_name: str) -> None:
    """Django set up as in the worker, on the database of the name the worker uses (a test
    run renames it after start), with a pool for one render at a time."""
    # Ctrl-C and a SIGTERM reach a whole process group: the worker handles them, hands its
    # sessions over (their last updates rendered here) and then stops this child.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    threading.Thread(target=_exit_with_worker, name="render-watch", daemon=True).start()
    import django

    database = settings.DATABASES["default"]
    database["NAME"] = database_name
    pool = database.get("OPTIONS", {}).get("pool")
    if isinstance(pool, dict):
        pool.update(min_size=1, max_size=2)
    django.setup()
    # Ready before it says it started (`run` renders in the worker until then), so a page's
    # first updates do not wait on the template engine's and the URLs' first use. Only a
    # head start: a child that could not warm up still starts, and a partial that does not
    # compile fails the renders that use it, as it would in the worker.
    from config.startup import freeze_start_up

    from . import broadcast

    try:
        broadcast.warm()
    except Exception:
        logger.exception("A render process could not compile the live partials")
    freeze_start_up()


def _exit_with_worker() -> None:
    """A worker killed outright (kill -9, out of memory) never stops its child, and the
    child's work queue stays open (it holds both ends): it leaves when the worker is gone."""
    worker = multiprocessing.parent_process()
    if worker is not None:
        multiprocessing.connection.wait([worker.sentinel])
        os._exit(0)


def _in_child[T](fn: Callable[..., T], *args: Any) -> T:
    from django.db import close_old_connections

    # As around a worker's hop: a connection broken meanwhile is replaced, and given back.
    close_old_connections()
    try:
        return fn(*args)
    finally:
        close_old_connections()


def _child(index: int) -> _Child:
    with _lock:
        child = _children.get(index)
        if child is None:
            pool = ProcessPoolExecutor(
                max_workers=1,
                # Spawned, not forked: the worker's threads, locks and connections stay there.
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_start_child,
                initargs=(str(settings.DATABASES["default"]["NAME"]),),
            )
            child = _children[index] = _Child(pool, pool.submit(os.getpid))
        return child


def _rest(index: int, child: _Child | None, error: BaseException) -> None:
    global _resting_until
    logger.warning(
        "A render process failed (%r): live updates are rendered in the worker for %.0f s",
        error,
        REST_SECONDS,
    )
    _resting_until = time.monotonic() + REST_SECONDS
    with _lock:
        if child is not None and _children.get(index) is child:
            del _children[index]
    if child is not None:
        child.pool.shutdown(wait=False, cancel_futures=True)


async def run[T](session_id: uuid.UUID, fn: Callable[..., T], *args: Any) -> T | None:
    """`fn(*args)` in the session's render process; None when no child can run it now (the
    caller renders itself). What `fn` raises is raised here."""
    if not enabled() or time.monotonic() < _resting_until:
        return None
    index = session_id.int % settings.DEEPTHINK_RENDER_PROCESSES
    child = None
    try:
        child = _child(index)
        if not child.started.done():
            return None  # starting: this update is rendered in the worker
        child.started.result()  # a child that could not start raises here
        future = child.pool.submit(_in_child, fn, *args)
    except Exception as error:  # no child to run it (a pool refused, or could not start)
        _rest(index, child, error)
        return None
    try:
        return await asyncio.wrap_future(future)
    except BrokenProcessPool as error:  # the child died
        _rest(index, child, error)
        return None


def start() -> list[int]:
    """Start every child now and wait until each has, rather than on the first update a page
    watches (the benchmarks, before their clock starts); the ids of those that did."""
    started = []
    for index in range(settings.DEEPTHINK_RENDER_PROCESSES):
        child = None
        try:
            child = _child(index)
            started.append(child.started.result(timeout=120))
        except Exception as error:
            _rest(index, child, error)
    return started


def pids() -> list[int]:
    """The process ids of the children that have started (the benchmarks' memory figures,
    an operator's `ps`)."""
    with _lock:
        started = [child.started for child in _children.values()]
    return [f.result() for f in started if f.done() and f.exception() is None]


def stop() -> None:
    """Stop the children, once what they were given is rendered (a worker stopping, after
    its sessions are handed over)."""
    with _lock:
        children = list(_children.values())
        _children.clear()
    for child in children:
        child.pool.shutdown(wait=True)
