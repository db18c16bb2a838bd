from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

from fakes.anthropic_server import FakeAnthropic
from fakes.exa_server import FakeExa
from fakes.searxng_server import FakeSearxng
from fakes.tavily_server import FakeTavily


def pytest_make_parametrize_id(config: pytest.Config, val: object, argname: str) -> str | None:
    """Under mutation testing (mutation/run.py sets DEEPTHINK_MUTATION), string parameters
    get plain ids: mutmut re-runs tests by node id, and ids with quotes, escapes or brackets
    do not resolve back to their test (pytest answers "not found"). Elsewhere, the default."""
    if os.environ.get("DEEPTHINK_MUTATION") and isinstance(val, str):
        return re.sub(r"[^A-Za-z0-9_.-]", "_", val)[:40] or "empty"
    return None


@pytest.fixture(autouse=True)
def _isolated_settings(settings: Any) -> None:
    # Never reach a real provider by accident; tests opt in to the fake server.
    settings.ANTHROPIC_API_KEY = ""
    settings.ANTHROPIC_BASE_URL = ""
    settings.EXA_API_KEY = ""
    settings.EXA_BASE_URL = ""
    settings.SEARXNG_URL = ""
    settings.TAVILY_API_KEY = ""
    settings.TAVILY_BASE_URL = ""
    settings.DEEPTHINK_WEB_SEARCH = []
    # The default hasher is slow on purpose; test users need no protection.
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
    settings.DEEPTHINK_RETRY_BASE_SECONDS = 0.01
    # A broken fake server must fail a test quickly, not wait out a 15-minute outage.
    settings.DEEPTHINK_PROVIDER_BACKOFF_SECONDS = 0.05
    settings.DEEPTHINK_PROVIDER_MAX_BACKOFF_SECONDS = 0.2
    settings.DEEPTHINK_PROVIDER_GIVE_UP_SECONDS = 3.0
    settings.DEEPTHINK_INPROCESS_WORKER = False
    # Tests load the ASGI app partway through a run: a freeze there would keep the earlier
    # tests' garbage, and hide from the teardown below the connections it finds by the
    # collector (tests/test_asgi.py checks the freeze in a process of its own).
    settings.DEEPTHINK_GC_FREEZE = False
    from django.core.cache import cache

    cache.clear()  # login throttling counts must not leak between tests
    # A fresh channel layer per test (the in-memory one is bound to an event loop).
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels.layers.InMemoryChannelLayer"},
    }


@pytest.fixture
def fake_claude(settings: Any) -> Iterator[FakeAnthropic]:
    """A local Anthropic Messages API; the real SDK is pointed at it."""
    server = FakeAnthropic().start()
    settings.ANTHROPIC_BASE_URL = server.base_url
    settings.ANTHROPIC_API_KEY = "test-key"
    yield server
    server.stop()


@pytest.fixture
def fake_exa(settings: Any) -> Iterator[FakeExa]:
    """A local Exa API; the real exa-py client is pointed at it through settings."""
    server = FakeExa().start()
    settings.EXA_API_KEY = server.api_key
    settings.EXA_BASE_URL = server.base_url
    yield server
    server.stop()


@pytest.fixture
def fake_searxng(settings: Any) -> Iterator[FakeSearxng]:
    """A local SearxNG instance, the deployment's only web search."""
    server = FakeSearxng().start()
    settings.SEARXNG_URL = server.base_url
    yield server
    server.stop()


@pytest.fixture
def fake_tavily(settings: Any) -> Iterator[FakeTavily]:
    """A local Tavily API; the real tavily-python client is pointed at it through settings."""
    server = FakeTavily().start()
    settings.TAVILY_API_KEY = server.api_key
    settings.TAVILY_BASE_URL = server.base_url
    yield server
    server.stop()


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: Any) -> Iterator[None]:
    """pytest-django's, and before its test databases are dropped, the connections other
    threads still hold are closed (with the PostgreSQL pool, the pooled ones they had
    checked out): Django closes its pool, but not connections other threads keep, and
    PostgreSQL refuses to drop a database while sessions are open on it (the services run
    warned of it at its end)."""
    yield
    import gc
    import threading

    from asgiref.sync import SyncToAsync
    from django.db import connections
    from django.db.backends.base.base import BaseDatabaseWrapper

    from config.hops import EXECUTOR

    SyncToAsync.single_thread_executor.submit(connections.close_all).result()
    EXECUTOR.shutdown(wait=True)  # the hop threads end; the next use would make new ones
    # Connections whose thread has ended (a hop thread, an executor of a test's event loop
    # gone with it) can only be closed from here.
    alive = {thread.ident for thread in threading.enumerate()}
    for wrapper in gc.get_objects():
        # By its type, not isinstance: that reads __class__, which loads a lazy object (a
        # request's user never read), and the database is closed to such a load here.
        if issubclass(type(wrapper), BaseDatabaseWrapper) and wrapper._thread_ident not in alive:
            wrapper.inc_thread_sharing()
            try:
                wrapper.close()
            finally:
                wrapper.dec_thread_sharing()


@pytest.fixture
def alice(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("alice", password="alice-pass-123")


@pytest.fixture
def bob(django_user_model: Any) -> Any:
    return django_user_model.objects.create_user("bob", password="bob-pass-123")


@pytest.fixture
def make_session(alice: Any) -> Callable[..., Any]:
    from thinking.models import ThinkingSession

    def make(**fields: Any) -> ThinkingSession:
        fields.setdefault("owner", alice)
        fields.setdefault("question", "What is consciousness?")
        fields.setdefault("budget_seconds", 60.0)
        fields.setdefault("synthesis_interval_seconds", 15.0)
        fields.setdefault("model_id", "claude-test")
        # Planned already, so tests of later steps script those steps; planning tests pass
        # plan={} to exercise it.
        fields.setdefault("plan", {"steps": ["Think it through"], "current": 0})
        return ThinkingSession.objects.create(**fields)

    return make


@pytest.fixture
def renders_here(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The events this process renders for the live stream (`broadcast.render_event`), in
    order."""
    from thinking.page import broadcast

    rendered: list[Any] = []
    render = broadcast.render_event

    def counted(event: Any) -> Any:
        rendered.append(event)
        return render(event)

    monkeypatch.setattr(broadcast, "render_event", counted)
    return rendered


@pytest.fixture
async def closed_supervisors(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[None]:
    """The shared model and web clients of every supervisor a test makes are closed at its
    end, as a stopping worker closes them, rather than left to the garbage collector (which
    warns of each unclosed connection pool)."""
    from thinking.deliberation.worker import Supervisor

    made: list[Supervisor] = []
    init = Supervisor.__init__

    def tracked(self: Supervisor, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(Supervisor, "__init__", tracked)
    yield
    for supervisor in made:
        await supervisor.aclose()


@pytest.fixture
async def background_tasks() -> Any:
    """Stops the tasks a test left running (in-process worker, supervisor) and closes the
    database connections they used, so test databases can be dropped afterwards."""
    import asyncio

    from channels.db import database_sync_to_async
    from django.db import connections

    yield
    current = asyncio.current_task()
    leftovers = [task for task in asyncio.all_tasks() if task is not current]
    for task in leftovers:
        task.cancel()
    await asyncio.gather(*leftovers, return_exceptions=True)
    await database_sync_to_async(connections.close_all)()


@pytest.fixture
def rang(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The sessions whose start doorbell was rung (the worker is not started)."""
    calls: list[Any] = []
    monkeypatch.setattr("thinking.people.actions.request_start", calls.append)
    return calls
