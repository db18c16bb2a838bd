"""The one door for writes: every writer of a session row goes through `ThinkingSession.step`,
which checks the lease and cancel before anything is stored."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from fakes.anthropic_server import Reply
from research.knowledge import add_item
from research.web import WebResult
from tests.helpers import WORKER, claim, run
from thinking.deliberation import evidence, steps, tools
from thinking.deliberation.run import Clock, Meter
from thinking.models import CompletionReason, LeaseLost, Status, Stopped, ThinkingSession
from thinking.provider import parsing

pytestmark = pytest.mark.django_db(transaction=True)

SEARCH_AND_REPORT = Reply(
    text="THOUGHT: mine\nTYPE: insight\nCONFIDENCE: 0.6",
    tool_uses=[
        {"name": "web_search", "input": {"query": "octopus sleep"}},
        {"name": "memory_search", "input": {"query": "dreams memory"}},
        {"name": "progress", "input": {"stage": "research", "message": "Searching."}},
        {"name": "think", "input": {"thought": "A note to self."}},
    ],
)


def snapshot(session: ThinkingSession) -> dict[str, Any]:
    session.refresh_from_db()
    return {
        "revision": session.revision,
        "progress": session.progress,
        "research_notes": session.research_notes,
        "thoughts": session.thoughts.count(),
        "sources": session.sources.count(),
        "calls": session.model_calls.count(),
        "active_seconds": session.active_seconds,
    }


@pytest.fixture
def knowledge(alice: Any) -> None:
    add_item(owner=alice, title="Dreams and memory", body="REM sleep dreams replay memory.")


async def test_a_worker_whose_lease_was_taken_writes_nothing_and_stops(
    fake_claude: Any, fake_exa: Any, make_session: Any, knowledge: None
):
    session = await sync_to_async(make_session)(budget_seconds=30, synthesis_interval_seconds=60)
    fake_exa.fail_next(503, count=100)  # the web search fails, which would add a note
    before: dict[str, Any] = {}

    def taken_over(body: dict) -> Reply:
        ThinkingSession.objects.filter(pk=session.pk).update(worker_id="someone-else")
        before.update(snapshot(ThinkingSession.objects.get(pk=session.pk)))
        return SEARCH_AND_REPORT

    fake_claude.responder = taken_over
    status = await run(session)

    assert status is None
    assert len(fake_claude.requests) == 1, "it stopped instead of thinking on"
    after = await sync_to_async(snapshot)(session)
    # No thoughts, sources, progress line, research note or usage; not even the revision.
    assert after == before
    assert after["thoughts"] == after["sources"] == 0
    # The progress line is the loop's own stage from before the call, not the model's report.
    assert after["progress"]["by"] == "loop" and after["progress"]["stage"] == "analysis"
    assert session.status == Status.THINKING and session.worker_id == "someone-else"


async def test_a_cancel_during_a_step_stores_none_of_its_searches(
    fake_claude: Any, fake_exa: Any, make_session: Any, knowledge: None
):
    session = await sync_to_async(make_session)(budget_seconds=30, synthesis_interval_seconds=60)

    def cancel_now(body: dict) -> Reply:
        ThinkingSession.objects.get(pk=session.pk).cancel()
        return SEARCH_AND_REPORT

    fake_claude.responder = cancel_now
    status = await run(session)

    assert status == Status.CANCELLED
    await session.arefresh_from_db()
    assert not await session.sources.aexists() and not await session.thoughts.aexists()
    assert session.progress["by"] == "loop", "the model's progress report was not stored"
    assert session.worker_id == ""


@pytest.fixture
def lost(make_session: Any) -> ThinkingSession:
    """A session another worker runs now; this test's worker once held it."""
    return make_session(status=Status.THINKING, worker_id="someone-else")


def writers(session: ThinkingSession) -> dict[str, Any]:
    """Each writer of the session's rows, called as the worker that lost the lease."""
    reading = parsing.read_thought_reply("THOUGHT: mine\nTYPE: insight", mode="standard")
    web = [
        WebResult(
            url="https://example.org/a",
            title="A",
            snippet="a",
            summary="",
            score=0.9,
            published_date=None,
            query="a query",
        )
    ]
    return {
        "thoughts": lambda: steps.store_thoughts(
            session.pk, steps.Focus("q"), reading, [], ["note"], worker_id=WORKER, meter=Meter()
        ),
        "sources": lambda: evidence.store_found(
            session.pk, [evidence.Found("web", "a query", web)], worker_id=WORKER
        ),
        "note": lambda: evidence.store_found(
            session.pk, [], worker_id=WORKER, notes=["A search failed."]
        ),
        "progress": lambda: tools.save_progress(
            session.pk, {"stage": "note", "message": "Hi"}, worker_id=WORKER
        ),
        "waiting": lambda: steps.set_waiting(session.pk, WORKER, "Overloaded."),
    }


@pytest.mark.parametrize("writer", ["thoughts", "sources", "note", "progress", "waiting"])
async def test_every_writer_refuses_without_the_lease(lost: ThinkingSession, writer: str):
    before = await sync_to_async(snapshot)(lost)

    with pytest.raises(LeaseLost):
        await writers(lost)[writer]()

    assert await sync_to_async(snapshot)(lost) == before


@pytest.mark.parametrize("writer", ["thoughts", "sources", "note", "progress"])
async def test_a_cancelled_session_takes_no_more_writes(make_session: Any, writer: str):
    session = await sync_to_async(make_session)(status=Status.CANCELLED, worker_id=WORKER)
    before = await sync_to_async(snapshot)(session)

    with pytest.raises(Stopped):
        await writers(session)[writer]()

    assert await sync_to_async(snapshot)(session) == before


async def test_a_step_bumps_the_revision_and_counts_active_time_once(make_session: Any):
    session = await sync_to_async(make_session)(status=Status.THINKING, revision=3)
    await claim(session)
    ticks = iter([100.0, 102.5])
    meter = Meter(Clock(monotonic=lambda: next(ticks)))

    await tools.save_progress(session.pk, {"stage": "note", "message": "Hi"}, worker_id=WORKER)
    await steps.stop_running(session.pk, worker_id=WORKER, meter=meter)

    await session.arefresh_from_db()
    assert session.revision == 5
    assert session.active_seconds == pytest.approx(2.5)
    assert session.progress["message"] == "Hi"
    assert session.worker_id == "" and session.running_since is None


async def test_a_failure_is_stored_in_words_capped_at_2000_characters(make_session: Any):
    session = await sync_to_async(make_session)(status=Status.THINKING)
    await claim(session)

    failed = await steps.fail(
        session.pk, worker_id=WORKER, meter=Meter(), message="e" * 2000 + " and the rest"
    )

    assert failed is not None
    await session.arefresh_from_db()
    assert (session.status, session.completion_reason) == (Status.FAILED, CompletionReason.ERROR)
    assert session.error_message == "e" * 2000
    assert session.finished_at is not None and session.worker_id == ""
