"""The model provider goes away: sessions wait, say so, resume, or fail with the reason."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from fakes.anthropic_server import HttpError, Reply
from tests.helpers import run
from thinking.events import SessionEvent
from thinking.models import CompletionReason, Status, ThinkingSession

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def quick_backoff(settings: Any) -> None:
    settings.DEEPTHINK_PROVIDER_BACKOFF_SECONDS = 0.05
    settings.DEEPTHINK_PROVIDER_MAX_BACKOFF_SECONDS = 0.1


async def new_session(make_session: Any, **fields: Any) -> ThinkingSession:
    fields.setdefault("budget_seconds", 0.3)
    fields.setdefault("synthesis_interval_seconds", 60)
    return await sync_to_async(make_session)(**fields)


@pytest.mark.parametrize(
    "outage",
    [
        HttpError(status=529, type="overloaded_error"),
        HttpError(status=429, type="rate_limit_error"),
        HttpError(status=500, type="api_error"),
    ],
)
async def test_a_passing_outage_is_waited_out(fake_claude: Any, make_session: Any, outage: Any):
    session = await new_session(make_session)
    # The SDK retries twice itself; nine failures mean three waits of ours.
    fake_claude.enqueue(Reply(text="THOUGHT: before\nTYPE: insight"), *[outage] * 9)
    events: list[SessionEvent] = []

    status = await run(session, events)

    await session.arefresh_from_db()
    assert status == Status.COMPLETED and session.completion_reason == CompletionReason.BUDGET
    assert session.waiting_since is None and session.waiting_reason == ""
    texts = [t async for t in session.thoughts.order_by("sequence").values_list("text", flat=True)]
    assert texts[0] == "before" and len(texts) > 1


async def test_waiting_is_shown_live_while_it_lasts(fake_claude: Any, make_session: Any):
    session = await new_session(make_session)
    seen_waiting: list[str] = []

    def outage_then_recovery(body: dict) -> Reply | HttpError:
        row = ThinkingSession.objects.get(pk=session.pk)
        if row.waiting_reason:
            seen_waiting.append(row.waiting_reason)
        if len(fake_claude.requests) <= 6:
            return HttpError(status=529, type="overloaded_error")
        return fake_claude.scripted_mind(body)

    fake_claude.responder = outage_then_recovery
    await run(session)
    assert seen_waiting and "overloaded" in seen_waiting[0]


async def test_waiting_time_is_not_thinking_time(
    fake_claude: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_PROVIDER_BACKOFF_SECONDS = 0.4
    settings.DEEPTHINK_PROVIDER_MAX_BACKOFF_SECONDS = 0.4
    session = await new_session(make_session, budget_seconds=0.2)
    fake_claude.enqueue(*[HttpError(status=529, type="overloaded_error")] * 6)  # two waits

    await run(session)

    await session.arefresh_from_db()
    assert session.status == Status.COMPLETED
    assert session.active_seconds < 0.2 + 0.5, "0.8 s of waiting was not counted"


async def test_a_permanent_outage_fails_with_the_reason_and_keeps_everything(
    fake_claude: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_PROVIDER_GIVE_UP_SECONDS = 0.3
    session = await new_session(make_session, budget_seconds=30)
    fake_claude.enqueue(Reply(text="THOUGHT: kept\nTYPE: insight"))
    fake_claude.responder = lambda body: HttpError(status=529, type="overloaded_error")

    status = await run(session)

    await session.arefresh_from_db()
    assert status == Status.FAILED and session.completion_reason == CompletionReason.ERROR
    assert "overloaded" in session.error_message and "stayed unavailable" in session.error_message
    assert [t async for t in session.thoughts.values_list("text", flat=True)] == ["kept"]


async def test_a_pause_while_waiting_stops_the_wait(fake_claude: Any, make_session: Any):
    session = await new_session(make_session, budget_seconds=30)

    def pause_during_outage(body: dict) -> HttpError:
        ThinkingSession.objects.filter(pk=session.pk).update(status=Status.PAUSED)
        return HttpError(status=529, type="overloaded_error")

    fake_claude.responder = pause_during_outage
    status = await run(session)

    await session.arefresh_from_db()
    assert status == Status.PAUSED and session.waiting_since is None and session.worker_id == ""


async def test_a_bad_key_is_not_waited_for(fake_claude: Any, make_session: Any):
    session = await new_session(make_session, budget_seconds=30)
    fake_claude.responder = lambda body: HttpError(status=401, type="authentication_error")
    assert await run(session) == Status.FAILED
    assert len(fake_claude.requests) == 1
