"""Real processes: `manage.py runworker thinking` over Redis and PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connection

from tests.conftest import services_available
from thinking.models import Status, ThinkingSession

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.services, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def redis_layer(settings: Any) -> str:
    ok, reason = services_available()
    if not ok:
        pytest.skip(reason)
    prefix = f"proc-{os.getpid()}-{time.monotonic_ns()}"
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [os.environ["REDIS_URL"]], "prefix": prefix},
        }
    }
    return prefix


def start_worker(fake_url: str, prefix: str) -> subprocess.Popen[str]:
    db = connection.settings_dict  # the test database this test writes to
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "CHANNELS_PREFIX": prefix,
        "ANTHROPIC_BASE_URL": fake_url,
        "ANTHROPIC_API_KEY": "test-key",
        "DEEPTHINK_SWEEP_SECONDS": "0.5",
        "DEEPTHINK_HEARTBEAT_SECONDS": "0.5",
    }
    return subprocess.Popen(
        [sys.executable, "manage.py", "runworker", "thinking"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_for(predicate: Any, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def stop(worker: subprocess.Popen[str]) -> str:
    worker.send_signal(signal.SIGINT)
    try:
        out, _ = worker.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        worker.kill()
        out, _ = worker.communicate()
    return out


def test_two_worker_processes_share_sessions_over_redis(
    fake_claude: Any, make_session: Any, redis_layer: str
):
    from thinking.worker import request_start

    fake_claude.delay = 0.05
    sessions = [
        make_session(question=f"Question {n}?", budget_seconds=1.0, synthesis_interval_seconds=0.4)
        for n in range(4)
    ]
    workers = [start_worker(fake_claude.base_url, redis_layer) for _ in range(2)]
    try:
        for session in sessions:
            request_start(session.pk)

        def all_done() -> bool:
            statuses = set(ThinkingSession.objects.values_list("status", flat=True))
            return statuses == {Status.COMPLETED}

        finished = wait_for(all_done)
    finally:
        logs = [stop(worker) for worker in workers]
    assert finished, logs
    for session in sessions:
        session.refresh_from_db()
        sequences = list(session.thoughts.values_list("sequence", flat=True))
        assert sequences == list(range(len(sequences))), "no gaps, no duplicates"
        assert session.syntheses.filter(is_final=True).count() == 1
    assert "Traceback" not in "".join(logs)


def test_a_doorbell_sent_while_no_worker_runs_is_not_lost(
    fake_claude: Any, make_session: Any, redis_layer: str
):
    session = make_session(budget_seconds=0.5, synthesis_interval_seconds=60)
    # Nobody listens yet; the sweeper of a worker that starts later still finds the row.
    from channels.layers import get_channel_layer

    async_to_sync(get_channel_layer().flush)()
    worker = start_worker(fake_claude.base_url, redis_layer)
    try:
        finished = wait_for(
            lambda: ThinkingSession.objects.get(pk=session.pk).status == Status.COMPLETED
        )
    finally:
        log = stop(worker)
    assert finished, log
