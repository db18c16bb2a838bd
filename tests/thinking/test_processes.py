"""Real processes: `manage.py runworker thinking` over Redis and PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.db import connection

from tests.helpers import services_available
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
            "CONFIG": {
                "hosts": [{"address": os.environ["REDIS_URL"], "socket_timeout": None}],
                "prefix": prefix,
            },
        }
    }
    return prefix


def start_worker(fake_url: str, prefix: str, **extra: str) -> subprocess.Popen[str]:
    db = connection.settings_dict  # the test database this test writes to
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "CHANNELS_PREFIX": prefix,
        "ANTHROPIC_BASE_URL": fake_url,
        "ANTHROPIC_API_KEY": "test-key",
        "DEEPTHINK_SWEEP_SECONDS": "0.5",
        "DEEPTHINK_HEARTBEAT_SECONDS": "0.5",
        "DEEPTHINK_PROVIDER_GIVE_UP_SECONDS": "10",
        "LOG_LEVEL": "INFO",  # wait_listening reads the worker's INFO line
        **extra,
    }
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "runworker", "thinking"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    # Read the log as it comes, so a test can wait for "listening" and still get it all.
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(worker.stdout or ()), daemon=True)
    reader.start()
    worker.lines, worker.reader = lines, reader  # type: ignore[attr-defined]
    return worker


def wait_listening(*workers: subprocess.Popen[str], timeout: float = 60) -> None:
    """Until each worker is past its start-up (Django's checks can take seconds on a busy
    machine) and takes doorbells: else one worker may run every session, or a stop may
    interrupt the start-up."""
    for worker in workers:
        listening = wait_for(
            lambda w=worker: w.poll() is not None or "listening on" in "".join(w.lines),
            timeout=timeout,
        )
        if not (listening and worker.poll() is None):
            pytest.fail(f"a worker did not start listening:\n{stop(worker)}")


def wait_for(predicate: Any, timeout: float = 60) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def output(worker: subprocess.Popen[str]) -> str:
    """The whole log of a worker, once it has exited (killed if it has not within 10 s)."""
    try:
        worker.wait(timeout=10)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()
    worker.reader.join(timeout=10)  # type: ignore[attr-defined]
    if worker.stdout is not None:
        worker.stdout.close()
    return "".join(worker.lines)  # type: ignore[attr-defined]


def stop(worker: subprocess.Popen[str]) -> str:
    worker.send_signal(signal.SIGINT)
    return output(worker)


def test_two_worker_processes_share_sessions_over_redis(
    fake_claude: Any, make_session: Any, redis_layer: str
):
    from thinking.deliberation.worker import request_start

    fake_claude.delay = 0.05
    sessions = [
        make_session(question=f"Question {n}?", budget_seconds=1.0, synthesis_interval_seconds=0.4)
        for n in range(4)
    ]
    workers = [start_worker(fake_claude.base_url, redis_layer) for _ in range(2)]
    try:
        wait_listening(*workers)
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


def assert_intact(session: ThinkingSession) -> None:
    """No gaps, no duplicates, one final answer: nothing lost or stored twice."""
    thoughts = list(session.thoughts.values_list("sequence", flat=True))
    assert thoughts == list(range(len(thoughts)))
    syntheses = list(session.syntheses.values_list("sequence", flat=True))
    assert syntheses == list(range(len(syntheses)))
    assert session.syntheses.filter(is_final=True).count() == 1
    assert session.model_calls.filter(purpose="final").count() == 1


@pytest.mark.parametrize("kill_point", ["between steps", "inside a synthesis"])
def test_a_killed_worker_is_replaced_and_the_session_completes(
    fake_claude: Any, make_session: Any, redis_layer: str, kill_point: str
):
    fake_claude.delay = 0.05
    session = make_session(budget_seconds=2.5, synthesis_interval_seconds=1.0)
    synthesising = threading.Event()
    held_once = threading.Event()

    def slow_first_synthesis(body: dict) -> Any:
        reply = fake_claude.scripted_mind(body)
        if "SYNTHESIS:" in str(body["messages"]) and not held_once.is_set():
            held_once.set()
            synthesising.set()
            time.sleep(3)  # the worker is killed while it waits for this reply
        return reply

    fake_claude.responder = slow_first_synthesis
    lease = {"DEEPTHINK_LEASE_SECONDS": "2"}
    first = start_worker(fake_claude.base_url, redis_layer, **lease)
    began = time.monotonic()
    try:
        if kill_point == "between steps":
            assert wait_for(lambda: session.thoughts.count() >= 6, timeout=30)
        else:
            assert wait_for(synthesising.is_set, timeout=30)
        first.kill()  # SIGKILL: no cleanup, the lease just stops being renewed
        first.wait(timeout=10)
        killed_at = time.monotonic()
        stored_before = session.thoughts.count()
        second = start_worker(fake_claude.base_url, redis_layer, **lease)
        try:
            done = wait_for(
                lambda: ThinkingSession.objects.get(pk=session.pk).status == Status.COMPLETED,
                timeout=60,
            )
            taken_over_after = time.monotonic() - killed_at
        finally:
            log = stop(second)
    finally:
        if first.poll() is None:
            first.kill()
    assert done, log
    session.refresh_from_db()
    assert_intact(session)
    assert session.thoughts.count() >= stored_before
    wall = time.monotonic() - began
    # The dead time (lease going stale + a new worker starting) is not thinking time.
    assert session.active_seconds < wall - min(taken_over_after, 2.0) + 0.5


def test_sigterm_hands_sessions_over_at_once(fake_claude: Any, make_session: Any, redis_layer: str):
    from thinking.deliberation.worker import request_start

    fake_claude.delay = 0.05
    session = make_session(budget_seconds=8, synthesis_interval_seconds=60)
    # A long lease: a takeover within seconds can only come from the handover, not staleness.
    lease = {"DEEPTHINK_LEASE_SECONDS": "60", "DEEPTHINK_SWEEP_SECONDS": "30"}
    workers = [start_worker(fake_claude.base_url, redis_layer, **lease) for _ in range(2)]
    try:
        wait_listening(*workers)
        request_start(session.pk)
        assert wait_for(lambda: session.thoughts.count() >= 3, timeout=30)
        owner = ThinkingSession.objects.get(pk=session.pk).worker_id
        running = next(w for w in workers if f"-{w.pid}-" in owner)
        other = next(w for w in workers if w is not running)
        running.send_signal(signal.SIGTERM)
        assert running.wait(timeout=15) == 0, "the worker exits cleanly after handing over"
        handed_over = wait_for(
            lambda: (
                ThinkingSession.objects.get(pk=session.pk).worker_id.endswith("")
                and f"-{other.pid}-" in ThinkingSession.objects.get(pk=session.pk).worker_id
            ),
            timeout=10,
        )
        done = wait_for(
            lambda: ThinkingSession.objects.get(pk=session.pk).status == Status.COMPLETED,
            timeout=60,
        )
    finally:
        logs = [stop(w) if w.poll() is None else output(w) for w in workers]
    assert handed_over and done, logs
    session.refresh_from_db()
    assert_intact(session)


def test_an_idle_worker_stays_up(fake_claude: Any, redis_layer: str):
    """redis-py 8's default socket timeout used to kill idle workers after ~5 s."""
    worker = start_worker(fake_claude.base_url, redis_layer)
    try:
        time.sleep(8)
        assert worker.poll() is None, "the idle worker is still running"
    finally:
        log = stop(worker)
    assert "TimeoutError" not in log
