from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.utils import timezone

from tests.helpers import on_statements, prompt_of
from thinking.deliberation.worker import CHANNEL, Supervisor, ThinkingWorker, get_supervisor
from thinking.models import Status, ThinkingSession

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("closed_supervisors"),
]


async def _ignore(event: object) -> None:
    return None


async def new_session(make_session: Any, **fields: Any) -> ThinkingSession:
    fields.setdefault("budget_seconds", 0.2)
    fields.setdefault("synthesis_interval_seconds", 60)
    return await sync_to_async(make_session)(**fields)


async def _wait_until(condition: Any) -> bool:
    """Poll a condition another thread makes true (the fakes' handler threads)."""
    for _ in range(200):
        if condition():
            return True
        await asyncio.sleep(0.02)
    return condition()


async def test_the_sweeper_starts_a_session_whose_start_message_was_lost(
    fake_claude: Any, make_session: Any
):
    session = await new_session(make_session)  # no doorbell was ever sent
    supervisor = Supervisor(worker_id="w1", publish=_ignore)

    assert await supervisor.sweep() == 1
    await supervisor.wait_idle()

    await session.arefresh_from_db()
    assert session.status == Status.COMPLETED


async def test_a_stale_lease_is_taken_over_and_the_session_continues(
    fake_claude: Any, make_session: Any
):
    long_ago = timezone.now() - timedelta(minutes=5)
    session = await new_session(
        make_session,
        status=Status.THINKING,
        worker_id="dead-worker",
        heartbeat_at=long_ago,
        active_seconds=0.1,
        next_synthesis_at=60,
    )
    supervisor = Supervisor(worker_id="w2", publish=_ignore)

    assert await supervisor.sweep() == 1
    await supervisor.wait_idle()

    await session.arefresh_from_db()
    assert session.status == Status.COMPLETED
    assert session.started_at is not None


async def test_a_live_lease_is_left_alone(fake_claude: Any, make_session: Any):
    await new_session(
        make_session, status=Status.THINKING, worker_id="alive", heartbeat_at=timezone.now()
    )
    assert await Supervisor(worker_id="w3", publish=_ignore).sweep() == 0


async def test_a_full_worker_leaves_sessions_for_later(fake_claude: Any, make_session: Any):
    fake_claude.delay = 0.3
    sessions = [await new_session(make_session) for _ in range(3)]
    supervisor = Supervisor(worker_id="w4", capacity=2, publish=_ignore)

    assert await supervisor.sweep() == 2
    assert not await supervisor.start(sessions[2].pk)
    await sessions[2].arefresh_from_db()
    assert sessions[2].status == Status.CREATED and sessions[2].worker_id == ""

    await supervisor.wait_idle()
    assert await supervisor.sweep() == 1
    await supervisor.wait_idle()
    statuses = {s async for s in ThinkingSession.objects.values_list("status", flat=True)}
    assert statuses == {Status.COMPLETED}


async def test_heartbeats_renew_the_leases_of_running_sessions(fake_claude: Any, make_session: Any):
    fake_claude.delay = 0.3
    session = await new_session(make_session, budget_seconds=0.1)
    supervisor = Supervisor(worker_id="w5", publish=_ignore)
    assert await supervisor.start(session.pk)
    await session.arefresh_from_db()
    first = session.heartbeat_at

    await asyncio.sleep(0.05)
    assert await supervisor.heartbeat() == 1
    await session.arefresh_from_db()
    assert session.heartbeat_at > first
    await supervisor.wait_idle()


async def test_a_missing_provider_fails_the_session_in_words(make_session: Any):
    session = await new_session(make_session)
    supervisor = Supervisor(worker_id="w6", publish=_ignore)
    supervisor.open_clients()  # nothing to build, and no error: the session reports it
    assert supervisor.model_client._clients == {} and supervisor.web_client._clients == {}

    assert await supervisor.start(session.pk)
    await supervisor.wait_idle()

    await session.arefresh_from_db()
    assert session.status == Status.FAILED
    assert "No model provider is configured" in session.error_message


async def test_several_sessions_run_concurrently_in_one_worker(fake_claude: Any, make_session: Any):
    fake_claude.delay = 0.2
    questions = [f"Question number {n}?" for n in range(4)]
    sessions = [await new_session(make_session, question=q, budget_seconds=0.3) for q in questions]
    supervisor = Supervisor(worker_id="w7", publish=_ignore)
    for session in sessions:
        assert await supervisor.start(session.pk)
    assert len(supervisor.running) == 4

    await supervisor.wait_idle()

    # Each session's first model call went out before any session got its first reply back:
    # the four first requests come from four different sessions.
    def asked(request: dict) -> str:
        prompt = prompt_of(request)
        return next(q for q in questions if q in prompt)

    assert {asked(r) for r in fake_claude.requests[:4]} == set(questions)
    statuses = {s async for s in ThinkingSession.objects.values_list("status", flat=True)}
    assert statuses == {Status.COMPLETED}


async def test_the_worker_channel_runs_a_started_session(
    fake_claude: Any, make_session: Any, background_tasks: None
):
    from config.asgi import router

    session = await new_session(make_session)
    worker = ThinkingWorker(
        application=router, channels=[CHANNEL], channel_layer=get_channel_layer()
    )
    task = asyncio.create_task(worker.handle())
    await get_channel_layer().send(CHANNEL, {"type": "session.start", "id": str(session.pk)})
    await get_channel_layer().send(CHANNEL, {"type": "session.start", "id": "not-a-uuid"})

    for _ in range(100):
        await session.arefresh_from_db()
        if session.status == Status.COMPLETED:
            break
        await asyncio.sleep(0.05)
    assert session.status == Status.COMPLETED
    assert not task.done(), "a bad message does not kill the worker"


async def test_a_stopping_worker_leaves_its_sessions_doorbell_for_another_worker(
    fake_claude: Any, make_session: Any, background_tasks: None
):
    """On SIGTERM the worker stops listening before it hands its sessions over: a listener
    left running (channels' own handle() leaves them when cancelled) took the doorbell this
    process rang for another worker, and claimed the session back as the process exited,
    so nobody ran it until its lease went stale."""
    from config.asgi import router

    fake_claude.delay = 0.05
    session = await new_session(make_session, budget_seconds=60)
    layer = get_channel_layer()
    worker = ThinkingWorker(application=router, channels=[CHANNEL], channel_layer=layer)
    task = asyncio.create_task(worker.handle())
    await layer.send(CHANNEL, {"type": "session.start", "id": str(session.pk)})
    assert await _wait_until(lambda: len(fake_claude.requests) >= 2), "the session is running"

    worker.stop()
    await asyncio.wait_for(task, timeout=30)

    listening = [t for t in asyncio.all_tasks() if "Worker.listener" in repr(t.get_coro())]
    assert listening == [], "nothing of the stopped worker takes doorbells"
    await session.arefresh_from_db()
    assert (session.status, session.worker_id) == (Status.THINKING, ""), "released"
    doorbell = await asyncio.wait_for(layer.receive(CHANNEL), timeout=5)
    assert doorbell == {"type": "session.start", "id": str(session.pk)}


def claims_held(monkeypatch: pytest.MonkeyPatch) -> tuple[threading.Event, threading.Event]:
    """The database slow to answer a claim: the first claim's UPDATE waits on its hop thread
    until `go_on` is set, once `claiming` says it has begun."""
    claiming, go_on = threading.Event(), threading.Event()

    def held(sql: str) -> None:
        if not claiming.is_set() and 'SET "worker_id" = %s, "heartbeat_at" = %s WHERE' in sql:
            claiming.set()
            go_on.wait(10)

    on_statements(monkeypatch, held)
    return claiming, go_on


async def test_a_sweep_stopped_mid_claim_hands_the_session_over(
    make_session: Any, monkeypatch: pytest.MonkeyPatch
):
    """A shutdown cancels the sweep while its claim runs on its hop thread, where the claim
    commits all the same: the worker lets go of it and hands it over with its running
    sessions, rather than holding a lease nobody uses until it goes stale."""
    session = await new_session(make_session)
    claiming, go_on = claims_held(monkeypatch)
    supervisor = Supervisor(worker_id="w1", publish=_ignore)
    supervisor.ensure_background()  # it sweeps at once
    assert await _wait_until(claiming.is_set), "the sweep is claiming"

    stopping = asyncio.create_task(supervisor.shutdown())
    await asyncio.sleep(0.1)
    assert not stopping.done(), "the shutdown waits for the claim"
    go_on.set()
    handed_over = await asyncio.wait_for(stopping, timeout=10)

    assert handed_over == [session.pk] and supervisor.running == {}
    await session.arefresh_from_db()
    assert (session.status, session.worker_id) == (Status.CREATED, "")


async def test_a_start_whose_claim_ends_after_the_shutdown_began_hands_it_over(
    make_session: Any, monkeypatch: pytest.MonkeyPatch
):
    session = await new_session(make_session)
    claiming, go_on = claims_held(monkeypatch)
    supervisor = Supervisor(worker_id="w1", publish=_ignore, sweeping=False)
    starting = asyncio.create_task(supervisor.start(session.pk))  # a doorbell's
    assert await _wait_until(claiming.is_set)

    stopping = asyncio.create_task(supervisor.shutdown())
    await asyncio.sleep(0.1)
    go_on.set()
    handed_over = await asyncio.wait_for(stopping, timeout=10)

    assert await starting is False and handed_over == [session.pk]
    await session.arefresh_from_db()
    assert session.worker_id == "" and supervisor.running == {}


async def test_the_terminal_thinks_a_session_here_unless_a_worker_has_it(
    fake_claude: Any, make_session: Any
):
    from thinking.people import actions

    here = await new_session(make_session)
    assert await actions.think_here(here, publish=_ignore) is True
    await here.arefresh_from_db()
    assert here.status == Status.COMPLETED and here.worker_id == ""
    assert await _wait_until(lambda: fake_claude.open_connections == 0), "its client closed"

    taken = await new_session(make_session)
    assert await sync_to_async(ThinkingSession.claim)(taken.pk, worker_id="w1", lease_seconds=30)
    assert await actions.think_here(taken, publish=_ignore) is False
    await taken.arefresh_from_db()
    assert (taken.status, taken.worker_id) == (Status.CREATED, "w1"), "left to its worker"


async def test_a_workers_sessions_share_its_connections_which_it_closes_when_it_stops(
    fake_claude: Any, fake_exa: Any, make_session: Any
):
    questions = [f"Question number {n}?" for n in range(4)]
    sessions = [await new_session(make_session, question=q, plan={}) for q in questions]
    supervisor = Supervisor(worker_id="w8", publish=_ignore)
    # One after another: each session finds the connections the one before left open.
    for session in sessions:
        assert await supervisor.start(session.pk)
        await supervisor.wait_idle()

    statuses = {s async for s in ThinkingSession.objects.values_list("status", flat=True)}
    assert statuses == {Status.COMPLETED}
    assert len(fake_claude.requests) > len(sessions) and len(fake_exa.searches) >= len(sessions)
    # A client per session opened one connection per session at least.
    assert fake_claude.connections_opened < len(sessions)
    assert fake_exa.connections_opened < len(sessions)
    assert fake_claude.open_connections > 0, "kept open for the next session"

    await supervisor.shutdown()
    assert await _wait_until(lambda: fake_claude.open_connections == 0)
    assert await _wait_until(lambda: fake_exa.open_connections == 0)


async def test_a_worker_builds_its_clients_before_its_first_session_which_uses_them(
    fake_claude: Any, fake_exa: Any, make_session: Any
):
    """Building the model client and the web client's pool costs ~30 ms of CPU each, once
    in a worker's life: a worker builds them as it starts (the supervisor of its event
    loop), not in its first session's time, and its sessions' calls and searches go through
    those same clients."""
    session = await new_session(make_session, plan={})
    supervisor = get_supervisor()
    try:
        (model,) = supervisor.model_client._clients.values()
        (web,) = supervisor.web_client._clients.values()
        http = web.pool.http
        assert http is not None, "the web client's pool is built before any search"
        assert get_supervisor() is supervisor

        assert await supervisor.start(session.pk)
        await supervisor.wait_idle()

        await session.arefresh_from_db()
        assert session.status == Status.COMPLETED
        assert fake_claude.requests and fake_exa.searches
        assert list(supervisor.model_client._clients.values()) == [model]
        assert list(supervisor.web_client._clients.values()) == [web] and web.pool.http is http
    finally:
        await supervisor.shutdown()
