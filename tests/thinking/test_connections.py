"""The worker's pooled PostgreSQL connections: a broken one is replaced, not reused."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from django.db import connection, connections

from tests.helpers import own_connection
from thinking.models import Status, ThinkingSession

from .test_processes import assert_intact, redis_layer, start_worker, stop, wait_for

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

__all__ = ["redis_layer"]  # the fixture, used by name below


def _terminate_others(keep: int) -> int:
    """pg_terminate_backend on every other connection to the test database (the worker's
    pool), as a PostgreSQL restart or an administrator would; returns how many."""
    with own_connection(autocommit=True) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid <> %s",
            [keep],
        ).fetchall()
    return sum(1 for (done,) in rows if done)


def test_terminated_backends_are_replaced_and_the_session_completes(
    fake_claude: Any, make_session: Any, redis_layer: str
):
    from thinking.deliberation.worker import request_start

    fake_claude.delay = 0.05
    session = make_session(budget_seconds=6, synthesis_interval_seconds=1.5)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        test_pid = cursor.fetchone()[0]
    terminated: list[int] = []
    calls = 0
    lock = threading.Lock()

    def terminating(body: dict) -> Any:
        # On the 3rd and 7th model calls, while the worker waits for this reply, its pooled
        # connections (idle between hops) are terminated under it.
        nonlocal calls
        with lock:
            calls += 1
            now = calls
        if now in (3, 7):
            # Once the previous step's render (published beside this call) is done: a hop in
            # flight when its connection dies fails, which is not what this test is about.
            time.sleep(0.4)
            terminated.append(_terminate_others(test_pid))
            time.sleep(0.2)
        return fake_claude.scripted_mind(body)

    fake_claude.responder = terminating
    # Heartbeats far apart, so none is in flight at the moment of the termination.
    worker = start_worker(
        fake_claude.base_url,
        redis_layer,
        DEEPTHINK_HEARTBEAT_SECONDS="20",
        DEEPTHINK_LEASE_SECONDS="60",
        DEEPTHINK_SWEEP_SECONDS="30",
    )
    try:
        request_start(session.pk)
        done = wait_for(
            lambda: (
                ThinkingSession.objects.get(pk=session.pk).status
                in (Status.COMPLETED, Status.FAILED)
            ),
            timeout=60,
        )
    finally:
        log = stop(worker)
    assert done, log
    session.refresh_from_db()
    assert len(terminated) == 2 and all(terminated), (terminated, session.status, calls, log)
    assert session.status == Status.COMPLETED, (session.error_message, log)
    assert_intact(session)
    assert session.thoughts.count() >= 6
    assert "Traceback" not in log


def test_after_a_restart_a_query_does_not_wait_behind_each_dead_connection():
    # psycopg's pool, left to itself, tries the dead idle connections one at a time and
    # sleeps 0, 1, 2, 4, 8 s between them: behind five dead, the first query after a
    # PostgreSQL restart waited 15 s (behind six, the pool's 30 s timeout). One failed check now
    # sweeps the pool, so the query runs on a new connection at once.
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (its connection pool); .ci/run sets DATABASE_URL")
    pool = connection.pool
    assert pool is not None, "the PostgreSQL settings pool their connections"
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        test_pid = cursor.fetchone()[0]
    holding = threading.Barrier(5)

    def borrow() -> None:
        # Five threads hold a connection at once, so the pool keeps five idle after.
        connections["default"].ensure_connection()
        holding.wait(timeout=10)
        connections["default"].close()

    threads = [threading.Thread(target=borrow) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert pool.get_stats()["pool_available"] >= 5
    assert _terminate_others(test_pid) >= 5

    answer: list[Any] = []

    def query() -> None:
        started = time.monotonic()
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT 1")
            answer.append(cursor.fetchone()[0])
        answer.append(time.monotonic() - started)
        connections["default"].close()

    thread = threading.Thread(target=query)
    thread.start()
    thread.join(timeout=60)
    assert answer[0] == 1
    # The pool's first back-off alone is 0.9-1.1 s; a sweep replaces them in milliseconds.
    assert answer[1] < 0.8, f"the query waited {answer[1]:.1f} s behind dead connections"


def test_the_check_refuses_a_connection_the_server_ended_and_sweeps_the_pool(
    monkeypatch: pytest.MonkeyPatch,
):
    from psycopg_pool import ConnectionPool

    from config.pool import health_check

    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (its connection pool); .ci/run sets DATABASE_URL")
    swept: list[Any] = []
    sweep = ConnectionPool.check

    def counted(pool: Any) -> None:
        swept.append(pool)
        sweep(pool)

    monkeypatch.setattr(ConnectionPool, "check", counted)
    check = health_check("default")
    with own_connection() as alive, own_connection() as ended:
        check(alive)  # a live connection is lent, and nothing is swept
        assert swept == []
        # Through a connection of its own: the pool's may be ones an earlier test ended.
        with own_connection(autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s, 5000)", [ended.info.backend_pid])
        with pytest.raises(psycopg.OperationalError):
            check(ended)
        assert swept == [connection.pool]  # the other idle ones are suspect too
        assert alive.execute("SELECT 1").fetchone() == (1,)
