"""A worker's live updates rendered in a child process (thinking/render_process.py).

A child reads only committed rows on connections of its own, so the tests that render in
one commit their rows (`transaction=True`) and run on PostgreSQL (-m services): the
embedded test database lives in this process's memory.
"""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer

from tests.helpers import needs_postgresql
from thinking import broadcast, render_process, watchers
from thinking.events import SessionEvent
from thinking.models import Source, Thought

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def one_child(settings: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Renders go to one child, stopped at the end (its connections with it)."""
    settings.DEEPTHINK_RENDER_PROCESSES = 1
    monkeypatch.setattr(render_process, "_resting_until", 0.0)
    yield
    render_process.stop()


def gone(pid: int) -> bool:
    """Exited: no such process, or one only waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] == "Z"
    except FileNotFoundError:
        return True


def gone_soon(pid: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return gone(pid)


async def page_of(session_id: Any) -> Callable[[], Any]:
    """A page watching the session (a channel that joined its group as a page does): the
    next message it gets."""
    layer = get_channel_layer()
    channel = await layer.new_channel()
    await watchers.join(layer, broadcast.group_name(session_id), channel)
    return lambda: asyncio.wait_for(layer.receive(channel), timeout=30)


def a_session_with_thoughts(make_session: Any) -> Any:
    session = make_session()
    for n in range(2):
        Thought.objects.create(
            session=session,
            sequence=n,
            text=f"<b>thought {n}</b> cites [1]",
            type="insight",
            confidence=0.5,
            time_offset_seconds=n,
        )
    Source.objects.create(session=session, number=1, kind="web", title="T1", key="k1")
    return session


def thoughts_in(message: Any) -> list[int]:
    return [part["seq"] for part in message["parts"] if part["kind"] == "thought"]


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
async def test_a_page_gets_from_the_child_what_the_worker_would_render(
    make_session: Any, one_child: None, renders_here: list[SessionEvent]
):
    needs_postgresql()
    session = await sync_to_async(a_session_with_thoughts)(make_session)
    event = SessionEvent(session.pk, thoughts=(0, 1), sources=True)
    rendered_here = await sync_to_async(broadcast.render_event)(event)
    broadcast._forget(session.pk)
    renders_here.clear()
    assert len(await asyncio.to_thread(render_process.start)) == 1
    received = await page_of(session.pk)
    await broadcast.publish(event)
    sent = await received()
    assert sent == rendered_here and renders_here == []
    shown = "".join(part["html"] for part in sent["parts"])
    assert "&lt;b&gt;thought 1&lt;/b&gt;" in shown and "<b>thought" not in shown
    # The child starts from what the worker last sent: the next message carries the one
    # source found since, and only it.
    await Source.objects.acreate(session=session, number=2, kind="web", title="T2", key="k2")
    await broadcast.publish(SessionEvent(session.pk, sources=True))
    sources = (await received())["sources"]
    assert (sources["after"], [row["seq"] for row in sources["rows"]]) == (1, [2])
    assert renders_here == []


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
async def test_an_update_a_dead_child_was_given_is_rendered_in_the_worker(
    make_session: Any,
    one_child: None,
    renders_here: list[SessionEvent],
    monkeypatch: pytest.MonkeyPatch,
):
    needs_postgresql()
    session = await sync_to_async(a_session_with_thoughts)(make_session)
    (first,) = await asyncio.to_thread(render_process.start)
    received = await page_of(session.pk)
    os.kill(first, signal.SIGKILL)
    assert await asyncio.to_thread(gone_soon, first)
    await broadcast.publish(SessionEvent(session.pk, thoughts=(0,)))
    assert thoughts_in(await received()) == [0]
    assert [event.thoughts for event in renders_here] == [(0,)]
    # After its rest a new child takes over; until it has started, the worker renders.
    monkeypatch.setattr(render_process, "_resting_until", 0.0)
    (second,) = await asyncio.to_thread(render_process.start)
    await broadcast.publish(SessionEvent(session.pk, thoughts=(1,)))
    assert thoughts_in(await received()) == [1]
    assert [event.thoughts for event in renders_here] == [(0,)]
    assert second != first and not gone(second)


def ready() -> tuple[list[str], bool, int, int]:
    """Run in a render process: the templates its engine has compiled, whether the URL
    configuration (which the header's links need) is loaded, and how many objects the
    garbage collector's full passes leave out (start-up's, frozen as a worker's are) and
    walk."""
    import gc

    from django.conf import settings
    from django.template import Engine

    (cached,) = Engine.get_default().template_loaders
    loaded = settings.ROOT_URLCONF in sys.modules
    return list(cached.get_template_cache), loaded, gc.get_freeze_count(), len(gc.get_objects())


async def test_a_child_is_ready_to_render_before_it_takes_a_render(one_child: None):
    """The template engine's first use loads every tag library, and the first link the
    URL configuration with every view (about a second each): a fresh child's first
    updates waited them out (benchmark 4 on its own: its first two 0.13-0.23 s late)."""
    assert len(await asyncio.to_thread(render_process.start)) == 1
    found = await render_process.run(uuid.uuid4(), ready)
    assert found is not None  # run by the child, not refused
    compiled, urls_loaded, frozen, walked = found
    live = {"thinking/_thought.html", "thinking/_header.html", "thinking/_synthesis.html"}
    assert live <= set(compiled) and urls_loaded
    assert walked < frozen / 10


@pytest.mark.django_db(transaction=True)
async def test_a_child_that_cannot_start_is_not_started_again_for_every_update(
    make_session: Any,
    one_child: None,
    renders_here: list[SessionEvent],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
):
    """Its settings refused (a malformed variable): the worker renders every update, and
    tries a child again only after REST_SECONDS."""
    session = await sync_to_async(a_session_with_thoughts)(make_session)
    monkeypatch.setenv("DEEPTHINK_WORKER_CAPACITY", "lots")  # read by the child alone
    with caplog.at_level(logging.WARNING, logger="thinking.render_process"):
        assert await asyncio.to_thread(render_process.start) == []
        received = await page_of(session.pk)
        for n in (0, 1, 0):
            await broadcast.publish(SessionEvent(session.pk, thoughts=(n,)))
            assert thoughts_in(await received()) == [n]
    assert [event.thoughts for event in renders_here] == [(0,), (1,), (0,)]
    failures = [r for r in caplog.records if "render process failed" in r.getMessage()]
    assert len(failures) == 1  # the child's own log says why (its settings refused)
    assert multiprocessing.active_children() == []  # none being started either


def test_a_child_leaves_when_its_worker_is_killed():
    """kill -9 stops no child; the child notices its worker is gone and exits."""
    script = (
        "import time\n"
        "import django\n"
        "django.setup()\n"
        "from thinking import render_process\n"
        "print(*render_process.start(), flush=True)\n"
        "time.sleep(60)\n"
    )
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DEEPTHINK_RENDER_PROCESSES": "1",
    }
    worker = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert worker.stdout is not None
        child = int(worker.stdout.readline())
        assert not gone(child)
        worker.kill()
        worker.wait()
        assert gone_soon(child)
    finally:
        worker.kill()
        worker.wait()
