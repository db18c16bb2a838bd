"""Live message and catch-up sizes against session length (issue #20).

    .venv/bin/python -m bench.live_messages [--lengths 100,500,2000]

For each length, a session with that many stored thoughts (and sources, sub-questions and
syntheses in proportion, as a long run leaves them) on a throwaway SQLite file. Through the
real consumer (channels' WebsocketCommunicator, the app's ASGI application):

- **live**: one step (a thought on a sub-question it explores, a new source) published with
  `broadcast.publish` to a page that is up to date: the message that page receives;
- **catch-up**: a page that shows nothing connects (a late page): every message it receives;
- **step render**: the CPU to draw that step's message once for every page
  (`broadcast.render_event`, what the publisher runs after each step);
- **whole lists**: what the old live message re-rendered on every step (the full sub-question
  and source lists), for comparison;
- **page**: the session page's HTML, and how long the page, the list and the export take.

Prints a table; sizes in bytes, times in milliseconds. No targets are asserted here: the
tests assert the bounds (tests/thinking/test_consumers.py, test_reconnect.py).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import tempfile
import time
from pathlib import Path
from typing import Any


def _environment(directory: str) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "config.settings"
    os.environ.setdefault("DEBUG", "0")
    os.environ.setdefault("SECRET_KEY", "bench-" + secrets.token_hex(24))
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("ALLOWED_HOSTS", "127.0.0.1,localhost,testserver")
    os.environ["STATIC_ROOT"] = str(Path(directory) / "static")
    os.environ["DEEPTHINK_INPROCESS_WORKER"] = "0"
    os.environ["SQLITE_PATH"] = str(Path(directory) / "bench.sqlite3")
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)


def build(owner: Any, thoughts: int) -> Any:
    """A session as a long run leaves it: per 100 thoughts ~40 sources, ~12 sub-questions
    (follow-ups nested under earlier ones), ~2 syntheses, and a scratchpad note in 7."""
    from thinking.models import Source, Status, SubQuestion, Synthesis, ThinkingSession, Thought

    session = ThinkingSession.objects.create(
        owner=owner,
        question="How did the printing press change European science?",
        budget_seconds=7200,
        synthesis_interval_seconds=120,
        model_id="claude-bench",
        status=Status.THINKING,
        plan={"steps": ["Frame it", "Gather evidence", "Weigh it", "Answer"], "current": 2},
        revision=thoughts,
    )
    questions: list[SubQuestion] = []
    for n in range(max(3, thoughts * 12 // 100)):
        questions.append(
            SubQuestion.objects.create(
                session=session,
                text=f"Sub-question {n}: how did this detail shape what scholars could check?",
                priority=1 + n % 9,
                why="The answer turns on it.",
                parent=questions[n // 3] if n >= 3 else None,
                explored=n % 2 == 0,
                answer="What exploring it found, in a sentence or two." if n % 2 == 0 else "",
            )
        )
    Source.objects.bulk_create(
        Source(
            session=session,
            number=n + 1,
            kind="web",
            title=f"Source {n + 1}: a history of print and the scientific revolution",
            url=f"https://example.org/history/{n + 1}",
            snippet="An excerpt of the page that bears on the question at hand. " * 4,
            query="printing press science",
            key=f"https://example.org/history/{n + 1}",
        )
        for n in range(thoughts * 40 // 100)
    )
    Thought.objects.bulk_create(
        Thought(
            session=session,
            sequence=n,
            cycle=n // 3,
            text=f"Thought {n}: reasoning over the evidence so far, citing [1] and [2]. " * 4,
            type="scratchpad" if n % 7 == 6 else "insight",
            confidence=0.6,
            time_offset_seconds=n * 3,
            sub_question=questions[n % len(questions)],
            parts={"analysis": "Looking again at the sources."} if n % 3 == 0 else {},
        )
        for n in range(thoughts)
    )
    Synthesis.objects.bulk_create(
        Synthesis(
            session=session,
            sequence=n,
            text="What we know so far, with citations [1] [2] [3]. " * 25,
            key_insights=["One insight", "Another insight"],
            confidence=0.5 + n / 200,
            time_offset_seconds=120 * (n + 1),
        )
        for n in range(max(1, thoughts // 50))
    )
    return session


async def measure(owner: Any, cookie: str, thoughts: int) -> dict[str, Any]:
    from asgiref.sync import sync_to_async
    from channels.testing import WebsocketCommunicator
    from django.template.loader import render_to_string

    from config.asgi import application
    from thinking import broadcast
    from thinking.events import SessionEvent
    from thinking.models import Source, SubQuestion, Thought
    from thinking.presenters import session_ws_path, sources_context

    session = await sync_to_async(build)(owner, thoughts)
    headers = [(b"origin", b"http://localhost"), (b"cookie", f"sessionid={cookie}".encode())]

    async def frames(comm: Any, quiet: float = 1.0) -> list[str]:
        received = []
        while not await comm.receive_nothing(timeout=quiet):
            received.append(await comm.receive_from())
        return received

    # A late page: shows nothing, so it gets everything the catch-up sends.
    late = WebsocketCommunicator(application, session_ws_path(session.pk) + "?rev=0", headers)
    assert (await late.connect())[0]
    began = time.perf_counter()
    catch_up = await frames(late)
    catch_up_ms = (time.perf_counter() - began) * 1000 - 1000  # minus the quiet wait
    await late.disconnect()

    # A page that is up to date, then one step.
    path = session_ws_path(session.pk) + f"?rev={session.revision}"
    current = WebsocketCommunicator(application, path, headers)
    assert (await current.connect())[0]
    assert await current.receive_nothing(timeout=0.5)

    def step() -> int:
        question = SubQuestion.objects.filter(session=session, explored=False).first()
        Thought.objects.create(
            session=session,
            sequence=thoughts,
            cycle=thoughts // 3 + 1,
            text="The newest thought, citing [1]. " * 6,
            type="insight",
            confidence=0.7,
            time_offset_seconds=thoughts * 3,
            sub_question=question,
        )
        SubQuestion.objects.filter(pk=question.pk).update(explored=True, answer="Found.")
        number = Source.objects.filter(session=session).count() + 1
        Source.objects.create(
            session=session, number=number, kind="web", title="A new source", key=f"n{number}"
        )
        return thoughts

    sequence = await sync_to_async(step)()
    await broadcast.publish(
        SessionEvent(session.pk, thoughts=(sequence,), questions=True, sources=True)
    )
    live = await frames(current, quiet=0.5)
    await current.disconnect()

    def whole_lists() -> int:
        context = {
            "session": session,
            "sub_questions": list(session.sub_questions.all()),
            **sources_context(session),
            "oob": True,
        }
        return len(render_to_string("thinking/_sub_questions.html", context).encode()) + len(
            render_to_string("thinking/_sources.html", context).encode()
        )

    def render_cpu() -> float:
        """CPU to draw the step's message once for all pages (`render_event`, what the
        publisher runs per step): its thought and the sub-question it explored (the new
        source went out above), median of 31, each from the same state the pages are in."""
        event = SessionEvent(session.pk, thoughts=(sequence,), questions=True)
        broadcast.render_event(event)
        kept = broadcast._last_sent(session.pk)
        times = []
        for _ in range(31):
            broadcast._remember(session.pk, kept)
            began = time.thread_time()
            broadcast.render_event(event)
            times.append(time.thread_time() - began)
        return round(1000 * sorted(times)[len(times) // 2], 2)

    old_live = await sync_to_async(whole_lists)()
    render_ms = await sync_to_async(render_cpu)()
    timings = await sync_to_async(_timings)(owner, session)
    sizes = [len(f.encode()) for f in catch_up]
    return {
        "thoughts": thoughts,
        "live": max(len(f.encode()) for f in live),
        "live_messages": len(live),
        "render_ms": render_ms,
        "old_live": old_live,
        "catch_up_total": sum(sizes),
        "catch_up_messages": len(sizes),
        "catch_up_largest": max(sizes),
        "catch_up_ms": round(catch_up_ms),
        **timings,
    }


def _timings(owner: Any, session: Any) -> dict[str, Any]:
    from django.test import Client
    from django.urls import reverse

    client = Client()
    client.force_login(owner)

    def timed(url: str) -> tuple[float, int]:
        client.get(url, secure=True)  # warm
        began = time.perf_counter()
        response = client.get(url, secure=True)
        assert response.status_code == 200, (url, response.status_code)
        return (time.perf_counter() - began) * 1000, len(response.content)

    page_ms, page_bytes = timed(session.get_absolute_url())
    list_ms, _ = timed(reverse("session-list"))
    export_md, _ = timed(f"/api/sessions/{session.pk}/export?format=md")
    export_json, _ = timed(f"/api/sessions/{session.pk}/export?format=json")
    return {
        "page_bytes": page_bytes,
        "page_ms": round(page_ms),
        "list_ms": round(list_ms),
        "export_md_ms": round(export_md),
        "export_json_ms": round(export_json),
    }


COLUMNS = [
    ("thoughts", "thoughts"),
    ("live", "live msg"),
    ("old_live", "old: whole lists"),
    ("render_ms", "step render ms"),
    ("catch_up_total", "catch-up total"),
    ("catch_up_messages", "parts"),
    ("catch_up_largest", "largest part"),
    ("catch_up_ms", "catch-up ms"),
    ("page_bytes", "page HTML"),
    ("page_ms", "page ms"),
    ("list_ms", "list ms"),
    ("export_md_ms", "export md ms"),
    ("export_json_ms", "export json ms"),
]


async def main(lengths: list[int]) -> None:
    from asgiref.sync import sync_to_async
    from django.contrib.auth import get_user_model
    from django.test import AsyncClient

    owner = await sync_to_async(get_user_model().objects.create_user)("bench")
    client = AsyncClient()
    await client.aforce_login(owner)
    cookie = client.cookies["sessionid"].value
    rows = [await measure(owner, cookie, n) for n in lengths]
    print(" | ".join(label for _, label in COLUMNS))
    for row in rows:
        print(" | ".join(str(row[key]) for key, _ in COLUMNS))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="100,500,2000")
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="deepthink-live-bench-") as directory:
        _environment(directory)
        import django
        from django.core.management import call_command

        django.setup()
        call_command("migrate", interactive=False, verbosity=0)
        call_command("collectstatic", interactive=False, verbosity=0)
        asyncio.run(main([int(n) for n in arguments.lengths.split(",")]))
