"""The worker's pooled PostgreSQL connections: a broken one is replaced, not reused."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg
import pytest
from django.db import connection

from thinking.models import Status, ThinkingSession

from .test_processes import assert_intact, redis_layer, start_worker, stop, wait_for

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]

__all__ = ["redis_layer"]  # the fixture, used by name below


def _terminate_others(keep: int) -> int:
    """pg_terminate_backend on every other connection to the test database (the worker's
    pool), as a PostgreSQL restart or an administrator would; returns how many."""
    db = connection.settings_dict
    with psycopg.connect(
        host=db["HOST"], port=db["PORT"], user=db["USER"], dbname=db["NAME"], autocommit=True
    ) as admin:
        rows = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid() AND pid <> %s",
            [keep],
        ).fetchall()
    return sum(1 for (done,) in rows if done)


def test_terminated_backends_are_replaced_and_the_session_completes(
    fake_claude: Any, make_session: Any, redis_layer: str
):
    from thinking.worker import request_start

    fake_claude.delay = 0.05
    session = make_session(budget_seconds=3, synthesis_interval_seconds=1.0)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        test_pid = cursor.fetchone()[0]
    terminated: list[int] = []
    calls = 0
    lock = threading.Lock()

    def terminating(body: dict) -> Any:
        # On the 3rd and 8th model calls, while the worker waits for this reply, its pooled
        # connections (idle between hops) are terminated under it.
        nonlocal calls
        with lock:
            calls += 1
            now = calls
        if now in (3, 8):
            terminated.append(_terminate_others(test_pid))
            time.sleep(0.2)
        return fake_claude.scripted_mind(body)

    fake_claude.responder = terminating
    worker = start_worker(fake_claude.base_url, redis_layer)
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
    assert len(terminated) == 2 and all(terminated), f"connections terminated: {terminated}"
    session.refresh_from_db()
    assert session.status == Status.COMPLETED, (session.error_message, log)
    assert_intact(session)
    assert session.thoughts.count() >= 6
    assert "Traceback" not in log
