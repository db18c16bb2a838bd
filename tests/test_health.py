"""`GET /healthz` (config/health.py): 200 when the database answers, the channel layer
round-trips and a worker beat within the lease; 503 naming the part that fails."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from channels.testing import HttpCommunicator
from django.db import OperationalError
from django.test import AsyncClient
from django.utils import timezone

from config import health
from tests.browser.app_server import free_port
from tests.helpers import on_statements
from thinking.deliberation.worker import Supervisor
from thinking.models import WorkerHeartbeat

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _nothing_reported_yet() -> Iterator[None]:
    health.FAILING.clear()  # what an earlier test's probes left in this process
    yield
    health.FAILING.clear()


async def probe() -> tuple[int, dict[str, Any]]:
    response = await AsyncClient().get("/healthz")  # nobody logged in
    return response.status_code, response.json()


async def beat(seconds_ago: float = 0.0, worker_id: str = "worker-a") -> None:
    seen = timezone.now() - timedelta(seconds=seconds_ago)
    await WorkerHeartbeat.objects.acreate(worker_id=worker_id, seen_at=seen)


async def until_status(wanted: int, ask: Any = None, timeout: float = 20) -> bool:
    async def status() -> int:
        return (await probe())[0] if ask is None else await ask()

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await status() == wanted:
            return True
        await asyncio.sleep(0.1)
    return False


async def test_healthy_when_the_database_the_channel_layer_and_a_worker_answer():
    await beat(seconds_ago=5)
    status, body = await probe()
    assert status == 200
    assert body == {
        "status": "ok",
        "failing": [],
        "database": "ok",
        "channel_layer": "ok",
        "worker": "ok",
    }


async def test_no_worker_running_is_unhealthy():
    status, body = await probe()
    assert status == 503
    assert body["failing"] == ["worker"]
    assert body["worker"].startswith("failing: no worker is running")
    assert body["database"] == body["channel_layer"] == "ok"


async def test_a_worker_silent_for_longer_than_the_lease_is_gone(settings: Any):
    settings.DEEPTHINK_LEASE_SECONDS = 30
    await beat(seconds_ago=45)
    status, body = await probe()
    assert status == 503 and body["failing"] == ["worker"]
    assert "last seen 45 s ago" in body["worker"]


async def test_a_database_that_refuses_is_named(monkeypatch: pytest.MonkeyPatch):
    await beat()

    def refuse(sql: str) -> None:
        if "thinking_workerheartbeat" in sql:
            raise OperationalError("connection to server failed: secret-host:5432")

    on_statements(monkeypatch, refuse)
    status, body = await probe()
    assert status == 503 and body["failing"] == ["database"]
    assert body["database"] == "failing: error (OperationalError)"
    assert "secret-host" not in str(body), "the cause goes to the log, not to anyone asking"
    assert body["worker"].startswith("unknown")


async def test_a_database_that_does_not_answer_in_time_is_named(
    monkeypatch: pytest.MonkeyPatch, settings: Any
):
    settings.DEEPTHINK_HEALTHZ_TIMEOUT_SECONDS = 0.2
    await beat()

    def hang(sql: str) -> None:
        if "thinking_workerheartbeat" in sql:
            time.sleep(1)

    on_statements(monkeypatch, hang)
    status, body = await probe()
    assert status == 503 and body["failing"] == ["database"]
    assert body["database"] == "failing: no answer within 0.2 s"
    await asyncio.sleep(1)  # the hop finishes before the test's database goes


async def test_a_channel_layer_that_is_down_is_named(settings: Any):
    await beat()
    # Room for the database's answer on a loaded machine; the layer fails whatever the time.
    settings.DEEPTHINK_HEALTHZ_TIMEOUT_SECONDS = 3
    nobody = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    settings.CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [nobody]},
        }
    }
    status, body = await probe()
    assert status == 503 and body["failing"] == ["channel_layer"]
    assert body["channel_layer"].startswith("failing: ")
    assert body["database"] == body["worker"] == "ok"


async def test_a_failure_is_logged_once_with_its_cause_and_so_is_the_recovery(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
):
    await beat()
    refusing = True

    def refuse(sql: str) -> None:
        if refusing and "thinking_workerheartbeat" in sql:
            raise OperationalError("connection to server at db.internal failed")

    on_statements(monkeypatch, refuse)
    with caplog.at_level(logging.INFO, logger="config.health"):
        for _ in range(3):  # a load balancer probing every few seconds
            assert (await probe())[0] == 503
        refusing = False
        for _ in range(2):
            assert (await probe())[0] == 200
    lines = [record.getMessage() for record in caplog.records if record.name == "config.health"]
    assert len(lines) == 2, lines
    assert "database failing: error (OperationalError)" in lines[0]
    assert "db.internal" in lines[0], "the log has the cause"
    assert lines[1] == "Health: database recovered"


async def test_a_running_worker_keeps_it_healthy_until_it_stops(settings: Any):
    settings.DEEPTHINK_HEARTBEAT_SECONDS = 0.1
    settings.DEEPTHINK_SWEEP_SECONDS = 0.1
    supervisor = Supervisor(worker_id="worker-running")
    supervisor.ensure_background()
    try:
        assert await until_status(200), "its first tick beats"
        assert await WorkerHeartbeat.objects.filter(worker_id="worker-running").aexists()
    finally:
        await supervisor.shutdown()
    # Stopped, it takes its heartbeat with it: unhealthy at once, not a lease later.
    status, body = await probe()
    assert status == 503 and body["worker"].startswith("failing: no worker is running")


async def test_the_one_process_mode_reports_its_own_worker(settings: Any, background_tasks: Any):
    """`make run`: the web process is the worker too (embedded defaults)."""
    from config.asgi import application

    settings.DEEPTHINK_INPROCESS_WORKER = True
    settings.DEEPTHINK_HEARTBEAT_SECONDS = 0.1
    settings.DEEPTHINK_SWEEP_SECONDS = 0.1

    async def asgi_probe() -> int:
        host = [(b"host", b"localhost")]
        response = await HttpCommunicator(
            application, "GET", "/healthz", headers=host
        ).get_response()
        return response["status"]

    # The first request starts the in-process worker, whose first tick beats.
    assert await until_status(200, asgi_probe)


async def test_it_answers_over_plain_http_where_pages_redirect_to_https(settings: Any):
    """A load balancer or monitor may ask the web process itself, without TLS."""
    settings.SECURE_SSL_REDIRECT = True
    await beat()
    assert (await AsyncClient().get("/accounts/login/")).status_code == 301
    assert (await probe())[0] == 200


@pytest.mark.parametrize("verb", ["post", "put", "delete"])
async def test_only_get_is_answered(verb: str):
    response = await getattr(AsyncClient(), verb)("/healthz")
    assert response.status_code == 405


def test_a_worker_row_is_pruned_a_day_after_its_worker_died():
    WorkerHeartbeat.objects.create(worker_id="killed", seen_at=timezone.now() - timedelta(days=2))
    WorkerHeartbeat.objects.create(worker_id="recent", seen_at=timezone.now() - timedelta(hours=1))
    WorkerHeartbeat.beat("starting")
    assert set(WorkerHeartbeat.objects.values_list("worker_id", flat=True)) == {
        "recent",
        "starting",
    }
