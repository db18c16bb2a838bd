"""Helpers shared by the tests (fixtures live in conftest.py): import from here, never from
another test module."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import AsyncClient, Client

from thinking.deliberation.run import Clock
from thinking.events import SessionEvent

# Viewports of the browser tests.
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}

WORKER = "worker-test"


def own_connection(**options: Any) -> Any:
    """A psycopg connection of the test's own to the test database, outside Django's pool
    (to end the pool's connections as a PostgreSQL restart or an administrator would)."""
    import psycopg
    from django.db import connection

    db = connection.settings_dict
    params = {"host": db["HOST"], "port": db["PORT"], "user": db["USER"], "dbname": db["NAME"]}
    return psycopg.connect(**params, **options)


def on_statements(monkeypatch: Any, hook: Callable[[str], None]) -> None:
    """Call `hook` with the SQL of every statement the database is sent, on any thread (the
    hops'), before it is sent: to count statements, or to play a database that refuses or
    is slow to answer one (the hook raises, or waits)."""
    from django.db.backends.utils import CursorWrapper

    execute = CursorWrapper._execute

    def seen(self: Any, sql: str, *args: Any) -> Any:
        hook(sql)
        return execute(self, sql, *args)

    monkeypatch.setattr(CursorWrapper, "_execute", seen)


def count_hops(monkeypatch: Any) -> list[Callable[..., Any]]:
    """The function of every sync_to_async hop (channels' and ours) from now on, in order."""
    from asgiref.sync import SyncToAsync

    hops: list[Callable[..., Any]] = []
    hop = SyncToAsync.__call__

    async def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        hops.append(self.func)
        return await hop(self, *args, **kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", counted)
    return hops


def cache_reads(monkeypatch: Any) -> list[str]:
    """The statements that read the web-search cache from now on."""
    reads: list[str] = []

    def seen(sql: str) -> None:
        if sql.startswith("SELECT") and '"research_searchcache"' in sql:
            reads.append(sql)

    on_statements(monkeypatch, seen)
    return reads


def needs_postgresql() -> None:
    """Skip the test unless the database is PostgreSQL (the services run)."""
    import pytest
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL: run with -m services")


def services_available() -> tuple[bool, str]:
    missing = [name for name in ("DATABASE_URL", "REDIS_URL") if not os.environ.get(name)]
    if missing:
        return False, f"needs {' and '.join(missing)} (PostgreSQL/Redis); .ci/run sets them"
    return True, ""


async def stage_history(session: Any) -> list[dict]:
    """The session's stage history as the API serves it, oldest first."""
    from thinking.deliberation import stages

    return await sync_to_async(stages.served)(session)


def prompt_of(request: dict) -> str:
    """The text of the last user message of a request the fake Claude server recorded."""
    content = request["body"]["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "\n\n".join(block.get("text", "") for block in content if isinstance(block, dict))


# --- the JSON API -----------------------------------------------------------------------------


def bearer(token: str) -> Client:
    """A client that sends this API token."""
    return Client(headers={"Authorization": f"Bearer {token}"})


def post(client: Client, url: str, data: Any = None) -> Any:
    return client.post(url, data if data is not None else {}, content_type="application/json")


# --- running a session in the test's event loop ---------------------------------------------


async def claim(session: Any, worker_id: str = WORKER) -> None:
    """Take the session's lease as the test's worker."""
    from thinking.models import ThinkingSession

    assert await sync_to_async(ThinkingSession.claim)(
        session.pk, worker_id=worker_id, lease_seconds=30
    )


def take_over(session_id: Any, worker_id: str = "another-worker") -> None:
    """Another worker claims the session, from a thread of the test's own (a fake server's
    responder, or a thread started for it): its connection is closed afterwards."""
    from django.db import connection

    from thinking.models import ThinkingSession

    try:
        ThinkingSession.objects.filter(pk=session_id).update(worker_id=worker_id)
    finally:
        connection.close()


class ChangedWhen(list):
    """Published events, a list; `change(session_id)` runs as soon as one matching `when` is
    published (the step before it is stored, the next one not begun): a person or another
    worker acting between two steps of a running session."""

    def __init__(
        self,
        session_id: Any,
        when: Callable[[SessionEvent], bool],
        change: Callable[[Any], None],
    ) -> None:
        super().__init__()
        self.session_id, self.when, self.change, self.taken = session_id, when, change, False

    def append(self, event: SessionEvent) -> None:
        super().append(event)
        if not self.taken and self.when(event):
            self.taken = True
            # From a thread: the test's event loop may not touch the database itself.
            thread = threading.Thread(target=self.change, args=(self.session_id,))
            thread.start()
            thread.join()


class SetAfterThoughts(ChangedWhen):
    """A person sets the session's `status` as soon as a step's thoughts are published;
    `asked` is how many model calls the fake `fake` had had by then."""

    def __init__(self, session_id: Any, fake: Any, status: str) -> None:
        super().__init__(session_id, lambda event: bool(event.thoughts), self._set)
        self.fake, self.status, self.asked = fake, status, -1

    def _set(self, session_id: Any) -> None:
        self.asked = len(self.fake.requests)
        set_fields(status=self.status)(session_id)


class TakenOverWhen(ChangedWhen):
    """Another worker claims the session as soon as an event matching `when` is published."""

    def __init__(self, session_id: Any, when: Callable[[SessionEvent], bool]) -> None:
        super().__init__(session_id, when, take_over)


def set_fields(**fields: Any) -> Callable[[Any], None]:
    """A change for ChangedWhen or a fake's responder: a person's write to the session row
    (from a thread of the test's own; its connection is closed afterwards)."""

    def change(session_id: Any) -> None:
        from django.db import connection

        from thinking.models import ThinkingSession

        try:
            ThinkingSession.objects.filter(pk=session_id).update(**fields)
        finally:
            connection.close()

    return change


async def run(
    session: Any,
    events: list[SessionEvent] | None = None,
    *,
    clock: Clock | None = None,
    llm: Any = None,
) -> str | None:
    """Claim and run a session to its end with `llm` (by default the LLM of the settings: a
    fake server); the LLM is closed afterwards."""
    from thinking.deliberation import loop
    from thinking.provider.llm import LLM

    await claim(session)
    llm = llm or LLM.from_settings()
    sink = events if events is not None else []

    async def publish(event: SessionEvent) -> None:
        sink.append(event)

    try:
        return await loop.run_session(
            session.pk, llm=llm, publish=publish, worker_id=WORKER, clock=clock
        )
    finally:
        await llm.close()


# --- the live page over a WebSocket ------------------------------------------------------------


async def login(user: Any) -> str:
    """A session cookie for this user."""
    client = AsyncClient()
    await client.aforce_login(user)
    return client.cookies["sessionid"].value


def communicator(
    session_id: Any,
    cookie: str | None,
    *,
    rev: Any = None,
    marks: dict[str, int] | None = None,
    origin: str = "",
    path: str | None = None,
) -> Any:
    """A WebSocket client for the session's live page, as the cookie's user; `marks` are
    what the page already shows (its last thought, source, ... : the catch-up protocol)."""
    from urllib.parse import urlencode

    from config.asgi import application
    from thinking.page.presenters import session_ws_path

    query = dict(marks or {})
    if rev is not None:
        query["rev"] = rev
    path = (path or session_ws_path(session_id)) + (f"?{urlencode(query)}" if query else "")
    headers = [(b"origin", (origin or "http://testserver").encode())]
    if cookie:
        headers.append((b"cookie", f"sessionid={cookie}".encode()))
    return WebsocketCommunicator(application, path, headers=headers)


async def collect(comm: Any, until: Any, timeout: float = 30) -> list[str]:
    """Frames from the WebSocket until one matches `until`."""
    frames: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            frame = await comm.receive_from(timeout=max(0.1, deadline - time.monotonic()))
        except TimeoutError:
            break
        frames.append(frame)
        if until(frame):
            return frames
    raise AssertionError(f"gave up after {len(frames)} frames")


async def add_thought(session: Any, sequence: int, text: str, **fields: Any) -> None:
    """A thought stored as the worker would: with its revision bump, in one transaction
    (`fields` set the cycle, parts and so on)."""
    from django.db import transaction

    from thinking.models import ThinkingSession, Thought

    @sync_to_async
    def store() -> None:
        with transaction.atomic():
            Thought.objects.create(
                session=session,
                sequence=sequence,
                text=text,
                **{"type": "insight", "confidence": 0.7, "time_offset_seconds": 1, **fields},
            )
            ThinkingSession.objects.filter(pk=session.pk).update(revision=sequence + 1)

    await store()


# --- time ----------------------------------------------------------------------------------


class FrozenClock:
    """Time that moves only when a test (or a fake server, or a sleep) moves it."""

    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def monotonic(self) -> float:
        return self.now

    def wall(self) -> float:
        return 1_700_000_000.0 + self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    async def sleep(self, seconds: float) -> None:
        # A sleep passes at once: the time moves on, other tasks get their turn.
        self.now += seconds
        await asyncio.sleep(0)

    @property
    def clock(self) -> Clock:
        return Clock(monotonic=self.monotonic, wall=self.wall, sleep=self.sleep)


def each_call_takes(fake: Any, frozen: FrozenClock, seconds: float) -> None:
    """Every model call the fake answers through its responder moves the frozen clock on, so
    a session's budget buys the same number of steps on any machine, in any test order."""
    respond = fake.responder

    def timed(body: dict) -> Any:
        frozen.advance(seconds)
        return respond(body)

    fake.responder = timed


def logged_error(caplog: Any) -> str:
    """The one error logged (with its traceback): its message."""
    [record] = caplog.records
    assert record.exc_info is not None, "logged with the traceback"
    return record.getMessage()


def without_tools(fake: Any) -> Any:
    """The scripted model that never calls a tool, so a test's own tool calls stand alone."""
    return lambda body: fake.scripted_mind({**body, "tools": []})


ROOT = Path(__file__).resolve().parents[1]


def in_fresh_python(
    code: str,
    *,
    leave_out: tuple[str, ...] = ("DEEPTHINK_", "DATABASE_"),
    timeout: float = 60,
    **env: str,
) -> subprocess.CompletedProcess[str]:
    """`code` in a new interpreter at the project's root on config.settings, with this
    process's environment less the variables starting with `leave_out` (so settings take
    their defaults), plus `env`."""
    kept = {k: v for k, v in os.environ.items() if not k.startswith(leave_out)}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**kept, **env, "DJANGO_SETTINGS_MODULE": "config.settings"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def stored_thoughts(page: Any, session_id: str, *, notes: bool = False) -> list[int]:
    """Every stored, visible thought (or scratchpad note), from the API (the page's login
    works for GETs)."""
    sequences: list[int] = []
    after = -1
    while True:
        response = page.request.get(
            f"/api/sessions/{session_id}/thoughts", params={"after": after, "limit": 1000}
        )
        assert response.ok
        rows = response.json()
        if not rows:
            return sequences
        sequences += [r["sequence"] for r in rows if (r["type"] == "scratchpad") == notes]
        after = rows[-1]["sequence"]


# --- usage --------------------------------------------------------------------------------


def record_call(session: Any, *, model: str, purpose: str = "thoughts", **tokens: int) -> None:
    """A model call stored as the loop stores it (`Step.record_calls`): its row, priced by
    `model`, and the session's tokens, cost and usage per model (`tokens`: input_tokens,
    output_tokens, cache_read_tokens, cache_write_tokens)."""
    from thinking.models import ThinkingSession
    from thinking.provider.llm import Reply, Usage

    reply = Reply(text="", model=model, usage=Usage(**tokens))
    with ThinkingSession.step(session.pk, stop_on_cancel=False) as step:
        step.record_calls(purpose, [reply])
    session.refresh_from_db()


async def stopped_mid_stream(
    session: Any, fake: Any, stop: Callable[[], Any], *, after: float, timeout: float
) -> tuple[str | None, list[SessionEvent]]:
    """Run `session` (claimed here) while its first reply streams slowly (40 s: 2 s per
    20-character chunk); `after` seconds into that stream, a person's `stop` (a synchronous
    action) is made. The session must then end within `timeout`: its final status and what
    it published."""
    from fakes.anthropic_server import Reply as Scripted
    from thinking.deliberation import loop
    from thinking.provider.llm import LLM

    fake.enqueue(Scripted(text="THOUGHT: " + "slow " * 80, chunk_delay=2.0))
    await claim(session)
    llm = LLM.from_settings()
    events: list[SessionEvent] = []

    async def publish(event: SessionEvent) -> None:
        events.append(event)

    task = asyncio.create_task(
        loop.run_session(session.pk, llm=llm, publish=publish, worker_id=WORKER)
    )
    try:
        for _ in range(200):  # until the slow stream has started
            if fake.requests:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(after)
        await sync_to_async(stop)()
        return await asyncio.wait_for(task, timeout=timeout), events
    finally:
        task.cancel()
        await llm.close()
