from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from fakes.anthropic_server import HttpError, Reply, StreamCut, StreamError
from tests.helpers import (
    WORKER,
    FrozenClock,
    SetAfterThoughts,
    TakenOverWhen,
    claim,
    each_call_takes,
    logged_error,
    prompt_of,
    run,
    set_fields,
    stage_history,
    take_over,
    without_tools,
)
from thinking.deliberation import loop
from thinking.events import SessionEvent, publish_nothing
from thinking.models import (
    CitationCheck,
    CompletionReason,
    Source,
    Status,
    SubQuestion,
    Synthesis,
    ThinkingSession,
)
from thinking.provider.llm import LLM

pytestmark = pytest.mark.django_db(transaction=True)


async def test_a_session_thinks_asks_synthesises_and_answers(
    fake_claude: Any, make_session: Any, caplog: Any
):
    fake_claude.delay = 0.02
    session = await make_session_async(make_session, budget_seconds=1.5, interval=0.4)
    events: list[SessionEvent] = []

    with caplog.at_level(logging.WARNING, logger="thinking"):
        status = await run(session, events)
    assert caplog.records == [], "a session that goes well logs no warning or error"

    await session.arefresh_from_db()
    assert status == Status.COMPLETED
    assert session.completion_reason == CompletionReason.BUDGET
    thoughts = [t async for t in session.thoughts.order_by("sequence")]
    assert len(thoughts) >= 6
    assert [t.sequence for t in thoughts] == list(range(len(thoughts)))
    kinds = {t.type for t in thoughts}
    assert kinds <= {"exploration", "critique", "connection", "insight", "scratchpad"}
    assert "scratchpad" in kinds, "the scripted model used the think tool in a tool loop"
    assert await session.sub_questions.acount() >= 2
    syntheses = [s async for s in session.syntheses.order_by("sequence")]
    assert len(syntheses) >= 2 and syntheses[-1].is_final
    assert [s.sequence for s in syntheses] == list(range(len(syntheses)))  # #1, #2, ... no gaps
    # Each cycle is a stage in the history, named by its focus (the question, at first).
    history = await stage_history(session)
    analysis = [s["message"] for s in history if s["stage"] == "analysis"]
    assert analysis[0] == "Thinking about: What is consciousness?"
    # Each periodic synthesis is a stage in the history; the final answer's come with its review.
    consolidating = [s["message"] for s in history if s["stage"] == "synthesis"]
    assert consolidating == ["Consolidating the understanding so far"] * (len(syntheses) - 1) + [
        "Writing the final answer"
    ]
    assert not any(s.is_final for s in syntheses[:-1])
    # While the model writes, the page says what it is writing (its label comes from this).
    writing = [p for p, _ in itertools.groupby(e.live.purpose for e in events if e.live)]
    assert {"thoughts", "questions", "synthesis", "final"} <= set(writing)
    assert set(writing) <= {"plan", "thoughts", "questions", "synthesis", "final"}
    assert [p for p in writing if p in ("synthesis", "final")] == ["synthesis"] * (
        len(syntheses) - 1
    ) + ["final"]
    assert session.final_answer == syntheses[-1].text and session.final_answer
    assert session.final_confidence == pytest.approx(0.78)
    assert session.confidence_evolution == [s.confidence for s in syntheses]
    assert session.input_tokens > 0 and session.output_tokens > 0
    assert session.active_seconds >= 1.5
    assert session.worker_id == "" and session.running_since is None
    assert events[-1].finished


async def make_session_async(factory: Any, *, budget_seconds: float, interval: float) -> Any:

    return await sync_to_async(factory)(
        budget_seconds=budget_seconds, synthesis_interval_seconds=interval
    )


async def test_explored_sub_question_becomes_focus_and_gets_an_insight(
    fake_claude: Any, make_session: Any
):
    session = await make_session_async(make_session, budget_seconds=0.6, interval=60)
    high = await SubQuestion.objects.acreate(session=session, text="Is it layered?", priority=9)
    await SubQuestion.objects.acreate(session=session, text="Minor point?", priority=2)

    await run(session)

    await high.arefresh_from_db()
    assert high.explored and high.answer
    prompts = [prompt_of(r) for r in fake_claude.requests]
    first_thoughts = next(p for p in prompts if "Current focus:" in p)
    assert "Current focus: Is it layered?" in first_thoughts
    assert await session.thoughts.filter(sub_question=high).aexists()


async def test_duplicate_sub_questions_are_not_added_again(fake_claude: Any, make_session: Any):
    session = await make_session_async(make_session, budget_seconds=0.3, interval=60)
    await SubQuestion.objects.acreate(session=session, text="Can it exist alone?", priority=5)
    thoughts = "THOUGHT: a\nTYPE: insight\nCONFIDENCE: 0.7\n---\n" * 5
    questions = (
        "QUESTION: can it EXIST alone\nPRIORITY: 8\nWHY: dup of existing\n---\n"
        "QUESTION: What is consciousness\nPRIORITY: 8\nWHY: the original question\n---\n"
        "QUESTION: Where does it come from?\nPRIORITY: 7\nWHY: new\n---\n"
        "QUESTION: where does it come from\nPRIORITY: 3\nWHY: dup within the batch"
    )
    fake_claude.enqueue(Reply(text=thoughts), Reply(text=questions))
    fake_claude.responder = lambda body: Reply(text="THOUGHT: more\nTYPE: insight")

    await run(session)

    texts = [q async for q in session.sub_questions.values_list("text", flat=True)]
    assert sorted(texts) == ["Can it exist alone?", "Where does it come from?"]


async def test_malformed_replies_degrade_instead_of_crashing(fake_claude: Any, make_session: Any):
    session = await make_session_async(make_session, budget_seconds=0.2, interval=60)
    replies = iter(
        [
            Reply(text="I refuse to use your format, but here is an idea about minds."),
            Reply(text="THOUGHT: \nTYPE: ???\nCONFIDENCE: banana\n---\nTHOUGHT: ok\nCONFIDENCE: 7"),
        ]
    )
    frozen = FrozenClock()

    def each_call_takes_a_tenth(body: dict) -> Reply:
        # Two thought cycles use the budget however slow the machine is; then the final.
        frozen.advance(0.1)
        return next(replies, Reply(text=""))  # then nothing at all

    fake_claude.responder = each_call_takes_a_tenth
    status = await run(session, clock=frozen.clock)

    assert status == Status.COMPLETED
    thoughts = [t async for t in session.thoughts.order_by("sequence")]
    assert thoughts[0].text.startswith("I refuse") and thoughts[0].type == "exploration"
    assert thoughts[0].confidence == 0.5
    assert thoughts[1].text == "ok" and thoughts[1].confidence == 0.7
    await session.arefresh_from_db()
    assert session.final_confidence == 0.5  # an empty final reply still completes


async def test_a_dead_provider_fails_the_session_and_keeps_what_was_stored(
    fake_claude: Any, make_session: Any
):
    session = await make_session_async(make_session, budget_seconds=30, interval=60)
    fake_claude.enqueue(Reply(text="THOUGHT: first\nTYPE: insight\nCONFIDENCE: 0.9"))
    fake_claude.responder = lambda body: HttpError(status=401, type="authentication_error")
    frozen = FrozenClock()
    each_call_takes(fake_claude, frozen, 1.0)
    events: list[SessionEvent] = []

    status = await run(session, events, clock=frozen.clock)

    await session.arefresh_from_db()
    assert status == Status.FAILED
    assert session.completion_reason == CompletionReason.ERROR
    assert "refused the API key" in session.error_message
    assert [t async for t in session.thoughts.values_list("text", flat=True)] == ["first"]
    assert session.worker_id == ""
    assert events[-1] == SessionEvent(session.pk, finished=True)  # pages show it ended
    assert (
        session.active_seconds == 1.0
    )  # the refused call's second counts (the queued reply took none)


async def test_a_refused_call_after_another_worker_took_the_session_fails_nothing(
    fake_claude: Any, make_session: Any
):
    session = await make_session_async(make_session, budget_seconds=30, interval=60)

    def taken_over_then_refused(body: dict) -> HttpError:
        take_over(session.pk)
        return HttpError(status=401, type="authentication_error")

    fake_claude.responder = taken_over_then_refused
    status = await run(session)

    await session.arefresh_from_db()
    assert status is None
    assert session.status == Status.THINKING and session.error_message == ""
    assert session.worker_id == "another-worker"


class BreaksOnCall(LLM):
    """The configured model, with a bug of ours that surfaces on the n-th model call."""

    n, calls = 3, 0
    frozen: FrozenClock | None = None
    taken_over: Any = None  # a session another worker claims just before the bug surfaces

    async def stream(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        if self.calls == self.n:
            if self.frozen is not None:
                self.frozen.advance(0.5)  # it surfaces half a second into the call
            if self.taken_over is not None:
                await sync_to_async(take_over)(self.taken_over)
            raise RuntimeError("boom")
        return await super().stream(*args, **kwargs)


async def test_an_unexpected_error_fails_the_session_in_words_and_keeps_what_was_stored(
    fake_claude: Any, make_session: Any, settings: Any, caplog: Any
):
    settings.DEEPTHINK_TOOLS = False
    session = await make_session_async(make_session, budget_seconds=30, interval=60)
    fake_claude.responder = lambda body: Reply(text="THOUGHT: first\nTYPE: insight")
    frozen = FrozenClock()
    each_call_takes(fake_claude, frozen, 1.0)
    llm = BreaksOnCall.from_settings()  # the third call: after two thought cycles
    llm.frozen = frozen
    events: list[SessionEvent] = []

    with caplog.at_level(logging.ERROR, logger="thinking"):
        status = await run(session, events, clock=frozen.clock, llm=llm)

    await session.arefresh_from_db()
    assert status == Status.FAILED and session.completion_reason == CompletionReason.ERROR
    # The page says what happened without the traceback; the log has it, naming the session.
    assert session.error_message == (
        "Deep Think hit an internal error; the details are in the server log."
    )
    assert logged_error(caplog) == f"Session {session.pk} failed"
    assert "boom" in caplog.text
    assert await session.thoughts.acount() == 2  # the two cycles before it stay
    assert session.worker_id == "" and session.running_since is None
    assert events[-1] == SessionEvent(session.pk, finished=True)
    assert session.active_seconds == 2.5  # up to the moment it broke


async def test_an_unexpected_error_after_another_worker_took_the_session_fails_nothing(
    fake_claude: Any, make_session: Any, settings: Any, caplog: Any
):
    settings.DEEPTHINK_TOOLS = False
    session = await make_session_async(make_session, budget_seconds=30, interval=60)
    fake_claude.responder = lambda body: Reply(text="THOUGHT: first\nTYPE: insight")
    llm = BreaksOnCall.from_settings()
    llm.taken_over = session.pk

    with caplog.at_level(logging.ERROR, logger="thinking"):
        status = await run(session, clock=FrozenClock().clock, llm=llm)

    await session.arefresh_from_db()
    assert status is None
    assert logged_error(caplog) == f"Session {session.pk} failed"  # the bug is logged
    # ...but the session goes on with the worker that holds it now.
    assert session.status == Status.THINKING and session.error_message == ""
    assert session.worker_id == "another-worker"


async def test_a_worker_shutting_down_mid_call_lets_go_of_the_session_at_once(
    fake_claude: Any, make_session: Any
):
    session = await make_session_async(make_session, budget_seconds=30, interval=60)
    asked = threading.Event()

    def slow(body: dict) -> Reply:
        asked.set()
        return Reply(text="THOUGHT: never stored\nTYPE: insight", delay=30)

    fake_claude.responder = slow
    task = asyncio.ensure_future(run(session))
    await asyncio.to_thread(asked.wait, 30)
    task.cancel()  # what a worker's SIGTERM does to its sessions' tasks

    with pytest.raises(asyncio.CancelledError):
        await task

    await session.arefresh_from_db()
    # Another worker may claim it right away and continue from the last stored step.
    assert session.worker_id == "" and session.running_since is None
    assert session.status == Status.THINKING
    assert not await session.thoughts.aexists()


async def test_a_worker_shutting_down_leaves_a_session_another_worker_took_to_it(
    fake_claude: Any, make_session: Any
):
    session = await make_session_async(make_session, budget_seconds=30, interval=60)
    asked = threading.Event()

    def taken_over_while_asked(body: dict) -> Reply:
        take_over(session.pk)
        asked.set()
        return Reply(text="THOUGHT: never stored\nTYPE: insight", delay=30)

    fake_claude.responder = taken_over_while_asked
    task = asyncio.ensure_future(run(session))
    await asyncio.to_thread(asked.wait, 30)
    task.cancel()

    with pytest.raises(asyncio.CancelledError):
        await task

    await session.arefresh_from_db()
    assert session.worker_id == "another-worker" and session.running_since is not None


async def test_an_error_inside_a_stream_is_retried(fake_claude: Any, make_session: Any):
    session = await make_session_async(make_session, budget_seconds=0.2, interval=60)
    fake_claude.enqueue(StreamError(), StreamError(type="api_error"))

    status = await run(session)

    assert status == Status.COMPLETED
    assert await session.thoughts.aexists()


async def test_a_connection_lost_mid_reply_is_retried(fake_claude: Any, make_session: Any):
    session = await make_session_async(make_session, budget_seconds=0.2, interval=60)
    fake_claude.enqueue(StreamCut(), StreamCut())
    events: list[SessionEvent] = []

    status = await run(session, events)

    assert status == Status.COMPLETED
    assert await session.thoughts.aexists()
    # The first thought cycle's call broke off twice after it began writing: each time the
    # page's live panel starts over (nothing written) before the call is made again.
    first = [e.live.writing for e in events if e.live and e.live.purpose == "thoughts"]
    assert first[:6] == [False, True, False, True, False, True]


async def test_pause_at_a_step_boundary_keeps_time_and_releases_the_lease(
    fake_claude: Any, make_session: Any
):
    session = await make_session_async(make_session, budget_seconds=30, interval=60)

    def pause_after_first_step(body: dict) -> Reply:
        ThinkingSession.objects.filter(pk=session.pk).update(status=Status.PAUSED)
        return Reply(text="THOUGHT: paused soon\nTYPE: insight\nCONFIDENCE: 0.6")

    fake_claude.responder = pause_after_first_step
    events: list[SessionEvent] = []
    status = await run(session, events)

    await session.arefresh_from_db()
    assert status == Status.PAUSED
    assert events[-1] == SessionEvent(session.pk)  # the pages show it paused, not finished
    assert await session.thoughts.acount() == 1  # the step in flight was kept
    assert session.worker_id == "" and session.running_since is None
    assert 0 < session.active_seconds < 30
    # The cycle the pause stopped entered no stage (its first hop saw the pause).
    entered = [s["stage"] for s in await stage_history(session)]
    assert entered.count("analysis") == 1, entered


async def test_a_pause_right_after_a_cycles_store_stops_before_another_call(
    fake_claude: Any, make_session: Any, settings: Any
):
    """A pause that lands right after a cycle's thoughts are stored (the call answered
    before its watch looked) is seen at the next cycle's start: the thoughts are kept, no
    other call is made, and the session stops with its time kept and its lease let go."""
    settings.DEEPTHINK_QUESTIONS_EVERY = 1000  # no sub-questions round after the cycle
    fake_claude.responder = without_tools(fake_claude)
    session = await make_session_async(make_session, budget_seconds=30, interval=60)
    events = SetAfterThoughts(session.pk, fake_claude, Status.PAUSED)
    status = await run(session, events)

    await session.arefresh_from_db()
    assert status == Status.PAUSED and events.taken
    assert len(fake_claude.requests) == events.asked  # nothing asked after the pause
    cycles = {cycle async for cycle in session.thoughts.values_list("cycle", flat=True)}
    assert cycles == {0}, cycles
    entered = [s["stage"] for s in await stage_history(session)]
    assert entered.count("analysis") == 1, entered
    assert session.worker_id == "" and session.running_since is None
    assert 0 < session.active_seconds < 30


async def test_cancel_during_a_step_discards_it(fake_claude: Any, make_session: Any):
    session = await make_session_async(make_session, budget_seconds=30, interval=60)

    def cancel_now(body: dict) -> Reply:
        ThinkingSession.objects.filter(pk=session.pk).update(status=Status.CANCELLED)
        return Reply(text="THOUGHT: too late\nTYPE: insight\nCONFIDENCE: 0.6")

    fake_claude.responder = cancel_now
    frozen = FrozenClock()
    each_call_takes(fake_claude, frozen, 1.0)
    events: list[SessionEvent] = []
    status = await run(session, events, clock=frozen.clock)

    await session.arefresh_from_db()
    assert status == Status.CANCELLED
    assert not await session.thoughts.aexists()
    assert events[-1] == SessionEvent(session.pk, finished=True)  # pages show it ended
    assert session.active_seconds == 1.0  # the call it cancelled ran on the budget
    assert session.worker_id == ""


async def test_a_cancel_after_another_worker_took_the_session_is_left_to_that_worker(
    fake_claude: Any, make_session: Any, settings: Any
):
    settings.DEEPTHINK_INTERRUPT_POLL_SECONDS = 0.02
    session = await make_session_async(make_session, budget_seconds=30, interval=60)

    def cancelled_and_taken_over(body: dict) -> Reply:
        # Seen by the watch on the call in flight, which stops the call.
        set_fields(status=Status.CANCELLED, worker_id="another-worker")(session.pk)
        return Reply(text="THOUGHT: too late\nTYPE: insight\nCONFIDENCE: 0.6", delay=10)

    fake_claude.responder = cancelled_and_taken_over
    events: list[SessionEvent] = []
    status = await run(session, events)

    await session.arefresh_from_db()
    assert status is None and not any(e.finished for e in events)
    assert session.worker_id == "another-worker" and session.active_seconds == 0


async def test_a_call_in_flight_when_another_worker_takes_the_session_is_stopped(
    fake_claude: Any, make_session: Any, settings: Any
):
    """Issue 17: the watch on a call in flight stops it once another worker holds the
    session (its reply would be refused at its store): the worker lets go at once rather
    than waiting out a long call, and writes nothing."""
    settings.DEEPTHINK_INTERRUPT_POLL_SECONDS = 0.02
    session = await make_session_async(make_session, budget_seconds=30, interval=60)

    def taken_over(body: dict) -> Reply:
        set_fields(worker_id="another-worker")(session.pk)
        return Reply(text="THOUGHT: too late\nTYPE: insight\nCONFIDENCE: 0.6", delay=60)

    fake_claude.responder = taken_over
    events: list[SessionEvent] = []
    status = await asyncio.wait_for(run(session, events), timeout=20)  # not the call's 60 s

    await session.arefresh_from_db()
    assert status is None and not any(e.finished for e in events)
    assert session.worker_id == "another-worker" and session.active_seconds == 0
    assert not await session.thoughts.aexists()


async def test_a_worker_that_lost_its_lease_writes_nothing(
    fake_claude: Any, make_session: Any, caplog: Any
):
    session = await make_session_async(make_session, budget_seconds=30, interval=60)

    def taken_over(body: dict) -> Reply:
        ThinkingSession.objects.filter(pk=session.pk).update(worker_id="someone-else")
        return Reply(text="THOUGHT: mine\nTYPE: insight\nCONFIDENCE: 0.6")

    fake_claude.responder = taken_over
    with caplog.at_level(logging.WARNING, logger="thinking"):
        status = await run(session)

    assert status is None
    # Operators see why the session stopped here, and which one.
    assert [r.getMessage() for r in caplog.records] == [
        f"Session {session.pk} was taken over by another worker; stopping"
    ]
    assert not await session.thoughts.aexists()
    await session.arefresh_from_db()
    assert session.status == Status.THINKING and session.worker_id == "someone-else"


async def test_a_worker_that_lost_its_lease_while_writing_a_synthesis_stores_nothing(
    fake_claude: Any, make_session: Any
):
    session = await sync_to_async(planned_with_a_source)(make_session)

    def taken_while_written(body: dict) -> Reply:
        reply = fake_claude.scripted_mind(body)
        if "SYNTHESIS:" in reply.text:
            take_over(session.pk)
        return reply

    fake_claude.responder = taken_while_written
    frozen = FrozenClock()
    each_call_takes(fake_claude, frozen, 1.0)

    assert await run(session, clock=frozen.clock) is None
    assert not await Synthesis.objects.filter(session=session).aexists()
    await session.arefresh_from_db()
    assert session.worker_id == "another-worker" and session.confidence_evolution == []


def planned_with_a_source(make_session: Any) -> ThinkingSession:
    """A session with a source to cite: it goes straight to thinking, and its syntheses cite
    the source, so each is checked. A synthesis about every other cycle."""
    session = make_session(budget_seconds=30, synthesis_interval_seconds=2)
    Source.objects.create(
        session=session, number=1, kind="web", title="Reef", snippet="Coral bleaches.", key="r"
    )
    return session


async def test_a_worker_that_lost_its_lease_while_checking_a_synthesis_stores_no_verdicts(
    fake_claude: Any, make_session: Any
):
    # A session with sources goes straight to thinking; its first synthesis cites them, and
    # another worker takes the session while the checker is being asked about that synthesis.
    session = await sync_to_async(planned_with_a_source)(make_session)
    checks: list[dict] = []

    def taken_while_checked(body: dict) -> Reply:
        reply = fake_claude.scripted_mind(body)
        if "VERDICT:" in reply.text:
            checks.append(body)
            take_over(session.pk)
        return reply

    fake_claude.responder = taken_while_checked
    frozen = FrozenClock()
    each_call_takes(fake_claude, frozen, 1.0)
    status = await run(session, clock=frozen.clock)

    assert status is None
    assert len(checks) == 1, "the worker stopped at the check that found the lease gone"
    synthesis = await Synthesis.objects.aget(session=session)
    assert not synthesis.is_final
    assert not await CitationCheck.objects.filter(synthesis__session=session).aexists()
    await session.arefresh_from_db()
    assert session.worker_id == "another-worker"


async def test_a_session_taken_over_before_it_starts_stops_without_a_call_or_a_write(
    fake_claude: Any, make_session: Any
):
    session = await sync_to_async(make_session)(plan={})  # it plans first
    await claim(session)
    await sync_to_async(take_over)(session.pk)  # between this worker's claim and its start
    llm = LLM.from_settings()
    try:
        status = await loop.run_session(
            session.pk, llm=llm, publish=publish_nothing, worker_id=WORKER
        )
    finally:
        await llm.close()

    assert status is None
    assert fake_claude.requests == []  # not even the plan
    await session.arefresh_from_db()
    assert await stage_history(session) == [] and session.status == Status.CREATED
    assert session.worker_id == "another-worker"


async def test_a_session_taken_over_once_started_stores_no_plan(
    fake_claude: Any, make_session: Any
):
    session = await sync_to_async(make_session)(plan={})  # it plans first

    # Another worker claims the session as soon as this one has started it.
    status = await run(session, TakenOverWhen(session.pk, lambda event: True))

    assert status is None
    assert len(fake_claude.requests) <= 1  # the plan's call at most: its reply is dropped
    await session.arefresh_from_db()
    assert session.plan == {} and not await session.sources.aexists()
    # Only what its start stored, before the other worker claimed it: its planning stage.
    history = [(s["stage"], s["message"]) for s in await stage_history(session)]
    assert history == [("planning", "Planning the research: steps, key terms and queries")]
    assert session.worker_id == "another-worker"


async def test_a_session_shows_its_first_plans_stage_once_with_its_start(
    fake_claude: Any, make_session: Any
):
    """The start stores the first plan's planning stage, and its first live update shows it
    with the header: the page shows the stage at once, and not a second time before the
    plan's call. A session that has its plan already (resumed) shows the header alone."""
    events: list[SessionEvent] = []
    asked_at: list[int] = []  # how many updates were out when each call was made

    def answered(body: dict) -> Reply:
        asked_at.append(len(events))
        return fake_claude.scripted_mind(body)

    fake_claude.responder = answered
    planning = await sync_to_async(make_session)(plan={}, budget_seconds=0.5)
    await run(planning, events)
    shown = [(e.plan, e.header) for e in events[: asked_at[0]] if e.live is None]
    assert shown == [(True, True)]  # besides the call's own live line

    events.clear()
    asked_at.clear()
    planned = await sync_to_async(make_session)(budget_seconds=0.5)
    await run(planned, events)
    assert [(bool(e.plan), e.header) for e in events[:1]] == [(False, True)]
