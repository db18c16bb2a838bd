"""When the loop does what, on a frozen clock: the predicates alone, one step alone, and the
provider wait, none of them sleeping."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async

from fakes.anthropic_server import HttpError, Reply
from tests.helpers import FrozenClock
from thinking.deliberation import evidence, loop, steps
from thinking.deliberation.run import Meter, Run
from thinking.events import SessionEvent
from thinking.models import CompletionReason, Status, ThinkingSession
from thinking.provider.llm import LLM

WORKER = "worker-schedule"


def session(**fields: Any) -> ThinkingSession:
    """An unsaved session: the predicates read only its fields."""
    fields.setdefault("budget_seconds", 60.0)
    fields.setdefault("synthesis_interval_seconds", 15.0)
    fields.setdefault("next_synthesis_at", 15.0)
    return ThinkingSession(question="Why?", model_id="claude-test", **fields)


@pytest.fixture
def frozen() -> FrozenClock:
    return FrozenClock()


def test_the_budget_ends_the_session_once_the_stored_active_time_reaches_it():
    s = session(active_seconds=59.9)
    assert loop.ending_reason(s) == ""
    s.active_seconds = 60.0
    assert loop.ending_reason(s) == CompletionReason.BUDGET


def test_a_stop_signal_comes_before_the_token_ceiling_and_the_budget():
    s = session(active_seconds=60.0, token_ceiling=100, input_tokens=100)
    assert loop.ending_reason(s) == CompletionReason.TOKEN_CEILING
    s.stop_requested = True
    assert loop.ending_reason(s) == CompletionReason.STOP_SIGNAL


def test_a_synthesis_is_due_once_the_interval_of_active_time_has_passed():
    s = session(active_seconds=14.9)
    assert not loop.synthesis_due(s)
    s.active_seconds = 15.0
    assert loop.synthesis_due(s)


def test_no_periodic_synthesis_once_the_budget_is_used():
    s = session(active_seconds=55.0, next_synthesis_at=30.0)
    assert loop.synthesis_due(s)
    s.active_seconds = 60.0
    assert not loop.synthesis_due(s), "the final synthesis comes instead"


def test_a_lap_hands_out_each_second_once(frozen: FrozenClock):
    meter = Meter(frozen.clock)
    frozen.advance(3.0)
    assert meter.lap() == 3.0
    assert meter.lap() == 0.0
    frozen.advance(2.0)
    assert meter.pending() == 2.0 and meter.lap() == 2.0


def test_questions_are_due_every_n_thoughts(settings: Any):
    settings.DEEPTHINK_QUESTIONS_EVERY = 5
    s = session(thoughts_at_last_questions=10)
    s.thought_count = 14  # as the cycle's store counted them
    assert not loop.questions_due(s)
    s.thought_count = 15
    assert loop.questions_due(s)
    s.thought_count = None  # a row read any other way has not counted them
    with pytest.raises(
        ValueError, match=r"^questions_due needs the session as the cycle's store returned it$"
    ):
        loop.questions_due(s)


def test_a_high_priority_focus_is_researched_a_few_times_per_session(settings: Any):
    settings.DEEPTHINK_REPLANS = 2
    settings.DEEPTHINK_REPLAN_PRIORITY = 8
    s = session(plan={"steps": ["x"], "researched": [1]})
    assert not loop.replan_due(s, loop.Focus("the question"))
    assert not loop.replan_due(s, loop.Focus("low", sub_question_id=2, priority=7))
    assert not loop.replan_due(s, loop.Focus("again", sub_question_id=1, priority=9))
    assert loop.replan_due(s, loop.Focus("new", sub_question_id=2, priority=9))
    s.plan["researched"] = [1, 3]
    assert not loop.replan_due(s, loop.Focus("new", sub_question_id=2, priority=9))


# --- a step alone, on a frozen clock ------------------------------------------------------


async def begun(make_session: Any, **fields: Any) -> ThinkingSession:
    s = await sync_to_async(make_session)(**fields)
    assert await sync_to_async(ThinkingSession.claim)(s.pk, worker_id=WORKER, lease_seconds=30)
    began = await sync_to_async(steps.begin_sync)(s.pk, worker_id=WORKER)
    assert began is not None
    return began


def frozen_run(session: ThinkingSession, frozen: FrozenClock, events: list) -> Run:
    async def publish(event: SessionEvent) -> None:
        events.append(event)

    return Run(
        llm=LLM.from_settings(),
        research=evidence.Research(owner_ids=[session.owner_id], scope="test"),
        publish=publish,
        worker_id=WORKER,
        meter=Meter(frozen.clock),
        clock=frozen.clock,
    )


@pytest.mark.django_db(transaction=True)
async def test_a_synthesis_step_counts_exactly_the_time_the_call_took(
    fake_claude: Any, make_session: Any, frozen: FrozenClock
):
    s = await begun(make_session, synthesis_interval_seconds=15.0)
    events: list[SessionEvent] = []
    run = frozen_run(s, frozen, events)

    def seven_seconds(body: dict) -> Reply:
        frozen.advance(7.0)
        return Reply(text="SYNTHESIS: So far, so good.\nCONFIDENCE: 0.6")

    fake_claude.responder = seven_seconds
    try:
        s = await loop.synthesise(session=s, run=run)
    finally:
        await run.llm.close()
    event = next(e for e in events if e.synthesis is not None)

    assert s.active_seconds == 7.0
    assert s.next_synthesis_at == 15.0, "the next one is an interval after this one began"
    assert not loop.synthesis_due(s) and loop.ending_reason(s) == ""
    assert event.synthesis == 0 and not event.finished
    live = next(e.live for e in events if e.live is not None)  # after the stage it entered
    assert live.started_at == frozen.wall() - 7.0


@pytest.mark.django_db(transaction=True)
async def test_a_long_outage_gives_up_after_the_limit_without_sleeping(
    fake_claude: Any, make_session: Any, frozen: FrozenClock, settings: Any
):
    settings.DEEPTHINK_PROVIDER_GIVE_UP_SECONDS = 900.0  # fifteen minutes, on the frozen clock
    settings.DEEPTHINK_PROVIDER_BACKOFF_SECONDS = 200.0
    settings.DEEPTHINK_PROVIDER_MAX_BACKOFF_SECONDS = 400.0
    s = await begun(make_session)
    run = frozen_run(s, frozen, [])
    fake_claude.responder = lambda body: HttpError(status=529, type="overloaded_error")

    with pytest.raises(loop.LLMError, match="stayed unavailable for 15 minutes"):
        try:
            await loop.ask(session=s, run=run, purpose="thoughts", messages=[USER])
        finally:
            await run.llm.close()

    assert frozen.now - 1000.0 == 200.0 + 400.0 + 400.0, "waits of 200, 400, 400 s"
    await s.arefresh_from_db()
    assert s.status == Status.THINKING and "overloaded" in s.waiting_reason
    assert s.active_seconds == 0.0, "waiting is not thinking"


USER = {"role": "user", "content": "Why?"}
