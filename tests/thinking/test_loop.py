from __future__ import annotations

import asyncio
import itertools
import logging
import threading
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from tests.fakes.anthropic_server import HttpError, Reply, StreamCut, StreamError
from tests.helpers import (
    WORKER,
    FrozenClock,
    SetAfterThoughts,
    TakenOverWhen,
    claim,
    each_call_takes,
    logged_error,
    on_statements,
    prompt_of,
    run,
    set_fields,
    stage_history,
    take_over,
    without_tools,
)
from thinking import interrupt, loop
from thinking.events import SessionEvent, publish_nothing
from thinking.llm import LLM
from thinking.models import (
    CitationCheck,
    CompletionReason,
    Source,
    Status,
    SubQuestion,
    Synthesis,
    ThinkingSession,
)

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


async def test_a_pause_right_after_a_store_that_entered_the_next_cycle_stops_after_it(
    fake_claude: Any, make_session: Any, settings: Any
):
    """Issue 17: the store of a cycle enters the next one in its transaction, so a pause
    that lands right after it is seen by that cycle's call or its store. Here the call
    answers at once, before its watch looks (a longer one is stopped by it): the cycle's
    thoughts are kept (a store keeps a paused session's step, as for a pause during a call),
    and the session stops before another begins, its time kept, its lease let go."""
    settings.DEEPTHINK_QUESTIONS_EVERY = 1000  # no sub-questions round after the cycle
    fake_claude.responder = without_tools(fake_claude)
    session = await make_session_async(make_session, budget_seconds=30, interval=60)
    events = SetAfterThoughts(session.pk, fake_claude, Status.PAUSED)
    status = await run(session, events)

    await session.arefresh_from_db()
    assert status == Status.PAUSED and events.taken
    assert len(fake_claude.requests) == events.asked + 1  # the entered cycle's call only
    cycles = {cycle async for cycle in session.thoughts.values_list("cycle", flat=True)}
    assert cycles == {0, 1}, cycles
    entered = [s["stage"] for s in await stage_history(session)]
    assert entered.count("analysis") == 2, entered
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


async def test_a_failure_of_the_hop_that_stores_a_checks_verdicts_fails_the_session(
    fake_claude: Any, make_session: Any, monkeypatch: Any
):
    """Issue 17: the hop that stores a periodic synthesis's verdicts also enters the next
    cycle; a failure there (after its commit, maybe) is that step's, as any store's: the
    session fails in words and keeps what was stored, rather than the check's failure being
    logged and the next cycle entered a second time."""
    session = await sync_to_async(planned_with_a_source)(make_session)

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(loop, "store_checked", broken)
    frozen = FrozenClock()
    each_call_takes(fake_claude, frozen, 1.0)
    status = await run(session, clock=frozen.clock)

    await session.arefresh_from_db()
    assert status == Status.FAILED
    assert (
        session.error_message
        == "Deep Think hit an internal error; the details are in the server log."
    )
    assert await session.syntheses.acount() == 1  # the synthesis checked, kept
    assert await session.thoughts.aexists()


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


def hops_and_calls(monkeypatch: Any) -> list[str]:
    """The loop's database hops (by function name) and model calls ("ask:<purpose>"), in
    the order they start. The interrupt watch's reads run beside the calls in flight,
    on a clock of their own, not on the loop's path: they are left out."""
    from asgiref.sync import SyncToAsync

    order: list[str] = []
    hop, ask = SyncToAsync.__call__, loop.ask

    async def hop_seen(self: Any, *args: Any, **kwargs: Any) -> Any:
        if self.func is not interrupt._statuses:
            order.append(getattr(self.func, "__name__", "?"))
        return await hop(self, *args, **kwargs)

    async def ask_seen(**kwargs: Any) -> Any:
        order.append(f"ask:{kwargs['purpose']}")
        return await ask(**kwargs)

    monkeypatch.setattr(SyncToAsync, "__call__", hop_seen)
    monkeypatch.setattr(loop, "ask", ask_seen)
    return order


class Shown(list):
    """Published events, each also named in `order` (`hops_and_calls`): "show:plan" for a
    stage alone, "show:thoughts+plan" for stored thoughts with the plan region, "show"."""

    def __init__(self, order: list[str], session_id: Any) -> None:
        super().__init__()
        self.order, self.session_id = order, session_id

    def append(self, event: SessionEvent) -> None:
        ours = event.session_id == self.session_id
        stage = event.plan and not event.header and ours
        both = event.plan and event.thoughts and ours
        self.order.append("show:plan" if stage else "show:thoughts+plan" if both else "show")
        super().append(event)


@pytest.mark.parametrize(
    ("questions_every", "rerank_every", "after_thoughts"),
    [
        (1000, 1000, []),  # cycles that only think
        (1, 1000, ["ask:questions", "_store_asked"]),  # sub-questions after every cycle
        # A re-ranking after every cycle: its call, then its store, whose hop makes the next
        # cycle's reads.
        (1000, 1, ["_store_reranked"]),
    ],
)
async def test_a_thought_cycle_is_one_hop_before_each_model_call_and_one_after(
    fake_claude: Any,
    make_session: Any,
    monkeypatch: Any,
    settings: Any,
    questions_every: int,
    rerank_every: int,
    after_thoughts: list[str],
):
    """Issue 17: the status, the focus, the stage entered and the prompt's reads in one
    database hop, then the model, then the thoughts stored with what comes next read in one
    more (the session log when sub-questions are due, else a re-ranking's reads: whether
    one is due, and its material); sub-questions and a re-ranking likewise. When nothing
    else is due, the store that ends a cycle (its thoughts, its sub-questions or its
    re-ranking) enters the next cycle and makes its reads: no hop of its own. Each hop is a
    thread hand-off on the path between two model calls."""
    settings.DEEPTHINK_QUESTIONS_EVERY = questions_every
    settings.DEEPTHINK_RERANK_EVERY = rerank_every
    order = hops_and_calls(monkeypatch)
    session = await sync_to_async(make_session)(
        budget_seconds=1.0, synthesis_interval_seconds=60, research_enabled=False
    )
    sub = await SubQuestion.objects.acreate(session=session, text="Is it layered?", priority=9)
    for n in range(12):  # open questions enough to re-rank after every cycle
        await SubQuestion.objects.acreate(session=session, text=f"Later {n}?", priority=1)

    events: list[SessionEvent] = []
    assert await run(session, events) == Status.COMPLETED

    cycles = [i for i, name in enumerate(order) if name == "ask:thoughts"]
    assert len(cycles) >= 2, order
    if questions_every == rerank_every == 1000:
        # Each store that entered the next cycle showed its stage with the thoughts: one
        # update, no stage-only one between (the last cycle's store entered none).
        stored = [e for e in events if e.thoughts]
        assert [e.plan for e in stored] == [True] * (len(stored) - 1) + [False], stored
        first, last = events.index(stored[0]), events.index(stored[-1])
        assert not [e for e in events[first:last] if e.plan and not e.header]
    reranked = await session.model_calls.filter(purpose="rerank").acount()
    if rerank_every == 1:
        # Each cycle re-ranks while two open questions are left (one is explored a cycle).
        assert reranked >= 2
    else:
        assert reranked == 0
    assert order[cycles[0] - 1] == "_open_cycle"
    for n, (at, after) in enumerate(itertools.pairwise(cycles)):
        assert order[at + 1] == "_store_cycle"
        expected = after_thoughts if rerank_every != 1 or n < reranked else []
        # Then nothing else before the next cycle's call.
        assert order[at + 2 : after] == expected, order[at - 1 : after + 1]
    # Each cycle's stage names the focus its thoughts were on, the first read with the
    # status and the others by the store before them: one stage per cycle, in order.
    entered = [s["message"] for s in await stage_history(session) if s["stage"] == "analysis"]
    texts = {q.pk: q.text async for q in session.sub_questions.all()}
    by_cycle = {
        cycle: texts.get(on, session.question)
        async for cycle, on in session.thoughts.order_by("sequence").values_list(
            "cycle", "sub_question_id"
        )
    }
    foci = list(by_cycle.values())
    assert len(foci) == len(cycles) and foci[0] == sub.text, foci
    assert entered == [f"Thinking about: {text}" for text in foci], (entered, foci)
    prompt = prompt_of(fake_claude.requests[0])
    assert "Is it layered?" in prompt


async def test_a_plan_is_stored_with_its_research_stage_and_a_synthesis_opened_in_one_hop(
    fake_claude: Any, make_session: Any, monkeypatch: Any, settings: Any
):
    """Issue 17: the session's start enters its first plan's stage and sets up its research
    in one hop (three before), the plan's store enters the research stage in the same
    transaction (a hop of its own before). A periodic synthesis's stage is entered by the
    store of the cycle before it, in its transaction, and its log read in the same hop: no
    hop between that store and the synthesis's call, and one update shows the thoughts and
    the stage. The final answer's two stages (after its review's material) and its prompt's
    reads are one hop between the step before and its call (up to four hops before)."""
    settings.DEEPTHINK_QUESTIONS_EVERY = 1000
    settings.DEEPTHINK_RERANK_EVERY = 1000
    settings.DEEPTHINK_CITATION_CHECK = False
    seen = hops_and_calls(monkeypatch)
    session = await sync_to_async(make_session)(
        plan={}, budget_seconds=8, synthesis_interval_seconds=3
    )
    frozen = FrozenClock()
    each_call_takes(fake_claude, frozen, 1.0)

    assert await run(session, Shown(seen, session.pk), clock=frozen.clock) == Status.COMPLETED

    order = [name for name in seen if not name.startswith("show")]  # hops and calls
    planned = order.index("ask:plan")
    # The session's start, its first plan's stage and its research set up in one hop.
    assert order[planned - 1] == "_start" and order.count("_start") == 1, order[:planned]
    assert order[planned + 1] == "_save_plan"
    thinking = order.index("ask:thoughts")
    # Then only the searches and their stores, and the first cycle's one hop: no stage
    # entry of its own, no re-read of the session.
    after_plan = order[planned + 2 : thinking]
    assert after_plan[-1] == "_open_cycle", after_plan
    assert set(after_plan[:-1]) <= {"search_memory", "_store_found"}, after_plan
    written = [i for i, name in enumerate(order) if name in ("ask:synthesis", "ask:final")]
    assert len(written) >= 2 and order[written[-1]] == "ask:final", order
    periodic = [i for i, name in enumerate(seen) if name == "ask:synthesis"]
    assert len(periodic) == len(written) - 1 >= 1, seen
    for at in periodic:
        # A periodic synthesis: the cycle's store entered its stage and read its log, its
        # update showed the stage with the thoughts, and nothing else ran before its call.
        before = max(i for i in range(at) if seen[i].startswith("ask:"))
        assert seen[before] == "ask:thoughts", seen[before : at + 1]
        hops = [i for i in range(before + 1, at) if not seen[i].startswith("show")]
        assert [seen[i] for i in hops] == ["_store_cycle"], seen[before : at + 1]
        assert seen[hops[0] :][:3] == ["_store_cycle", "show:thoughts+plan", "ask:synthesis"]
    # The final answer: the step before stored, the next cycle's first hop maybe (it decided
    # to end), then the answer's one (its review's material, its stages, the log).
    at = written[-1]
    before = max(i for i in range(at) if order[i].startswith("ask:"))
    hops = [name for name in order[before + 1 : at] if not name.startswith("show")]
    assert hops[0] in ("_store_cycle", "_store_written"), order[before:at]
    assert hops[1:] in (["_open_written"], ["_open_cycle", "_open_written"]), order[before:at]
    history = [(s["stage"], s["message"]) for s in await stage_history(session)]
    assert history[:2] == [
        ("planning", "Planning the research: steps, key terms and queries"),
        ("research", "Searching: 1 knowledge-base query"),
    ]
    await session.arefresh_from_db()  # the plan stored with its stage is the one it counted
    assert session.plan["steps"] and len(session.plan["memory_queries"]) == 1
    syntheses = await session.syntheses.acount()
    thoughts = await session.thoughts.exclude(type="scratchpad").acount()
    assert history[-2:] == [
        (
            "reflection",
            f"Reviewing the whole session: {syntheses - 1} syntheses, {thoughts} thoughts, "
            "0 sub-questions",
        ),
        ("synthesis", "Writing the final answer"),
    ]
    consolidating = [m for stage, m in history if stage == "synthesis"]
    assert consolidating == ["Consolidating the understanding so far"] * (syntheses - 1) + [
        "Writing the final answer"
    ]


@pytest.mark.parametrize(
    ("questions_every", "rerank_every", "store"),
    [
        (1, 1000, "_store_asked"),  # sub-questions after every cycle, then the synthesis
        (1000, 1, "_store_reranked"),  # a re-ranking after every cycle, then the synthesis
    ],
)
async def test_the_store_of_sub_questions_or_a_re_ranking_enters_a_synthesis_due_after_it(
    fake_claude: Any,
    make_session: Any,
    monkeypatch: Any,
    settings: Any,
    questions_every: int,
    rerank_every: int,
    store: str,
):
    """Issue 17: a synthesis due after a cycle's sub-questions or its re-ranking has its
    stage entered by that step's store and its log read in the same hop: no hop of its own
    between that store and the synthesis's call. The page is shown the stage once, with
    the store's update, and the stage history is the one the loop always wrote."""
    settings.DEEPTHINK_QUESTIONS_EVERY = questions_every
    settings.DEEPTHINK_RERANK_EVERY = rerank_every
    settings.DEEPTHINK_CITATION_CHECK = False
    seen = hops_and_calls(monkeypatch)
    session = await sync_to_async(make_session)(
        budget_seconds=12, synthesis_interval_seconds=3, research_enabled=False
    )
    for n in range(12):  # open questions enough to re-rank after every cycle
        await SubQuestion.objects.acreate(session=session, text=f"Later {n}?", priority=1)
    frozen = FrozenClock()
    each_call_takes(fake_claude, frozen, 1.0)
    shown = Shown(seen, session.pk)

    assert await run(session, shown, clock=frozen.clock) == Status.COMPLETED

    published = [i for i, name in enumerate(seen) if name.startswith("show")]
    periodic = [i for i, name in enumerate(seen) if name == "ask:synthesis"]
    assert periodic, seen
    for at in periodic:
        last = max(i for i in range(at) if not seen[i].startswith(("show", "ask:")))
        assert seen[last] == store, seen[last - 3 : at + 1]
        # One update between the store and the call: the store's, with the plan region.
        between = [i for i in published if last < i < at]
        assert len(between) == 1, seen[last : at + 1]
        assert shown[published.index(between[0])].plan, seen[last : at + 1]
    history = [(s["stage"], s["message"]) for s in await stage_history(session)]
    consolidating = [m for stage, m in history if stage == "synthesis"]
    assert consolidating[:-1] == ["Consolidating the understanding so far"] * len(periodic)
    syntheses = await session.syntheses.filter(is_final=False).acount()
    assert syntheses == len(periodic)


async def test_a_sub_questions_research_enters_its_planning_stage_in_the_cycles_first_hop(
    fake_claude: Any, make_session: Any, monkeypatch: Any, settings: Any
):
    """Issue 17: the cycle's first hop, which finds the focus due its own research, stores
    that research's planning stage (a hop of its own before); the stage is shown, then the
    plan is asked for."""
    settings.DEEPTHINK_QUESTIONS_EVERY = 1000
    settings.DEEPTHINK_RERANK_EVERY = 1000
    settings.DEEPTHINK_CITATION_CHECK = False
    order = hops_and_calls(monkeypatch)

    session = await sync_to_async(make_session)(
        plan={"steps": ["Read"], "current": 0}, budget_seconds=1.0, synthesis_interval_seconds=60
    )

    sub = await SubQuestion.objects.acreate(session=session, text="Is it layered?", priority=9)

    assert await run(session, Shown(order, session.pk)) == Status.COMPLETED

    planned = order.index("ask:plan")
    opened = order.index("_open_cycle")
    assert order[opened : planned + 1] == ["_open_cycle", "show:plan", "ask:plan"]
    assert next(n for n in order[planned + 1 :] if not n.startswith("show")) == "_save_plan"
    history = [(s["stage"], s["message"]) for s in await stage_history(session)]
    assert history[:3] == [
        ("planning", "Planning research for the sub-question: Is it layered?"),
        ("research", "Searching: 1 knowledge-base query"),
        ("analysis", "Thinking about: Is it layered?"),
    ]
    await session.arefresh_from_db()
    assert session.plan["researched"] == [sub.pk]


async def test_the_store_before_a_cycle_due_its_own_research_enters_that_researchs_planning(
    fake_claude: Any, make_session: Any, monkeypatch: Any, settings: Any
):
    """Issue 17: a cycle's store that finds the next focus due its own research enters
    that research's planning stage in its transaction, and its update shows the stage with
    the thoughts (one update, not two); then the plan is asked for, with no hop between
    (the next cycle's first hop is the store's)."""
    settings.DEEPTHINK_QUESTIONS_EVERY = 1000
    settings.DEEPTHINK_RERANK_EVERY = 1000
    settings.DEEPTHINK_CITATION_CHECK = False
    settings.DEEPTHINK_REPLANS = 2
    order = hops_and_calls(monkeypatch)
    session = await sync_to_async(make_session)(
        plan={"steps": ["Read"], "current": 0}, budget_seconds=1.0, synthesis_interval_seconds=60
    )

    first = await SubQuestion.objects.acreate(session=session, text="Is it layered?", priority=9)
    second = await SubQuestion.objects.acreate(session=session, text="Is it old?", priority=8)

    assert await run(session, Shown(order, session.pk)) == Status.COMPLETED

    plans = [i for i, name in enumerate(order) if name == "ask:plan"]
    assert len(plans) == 2, order
    stored = max(i for i in range(plans[1]) if order[i] == "_store_cycle")
    assert order[stored : plans[1] + 1] == ["_store_cycle", "show:thoughts+plan", "ask:plan"]
    history = [(s["stage"], s["message"]) for s in await stage_history(session)]
    at = history.index(("planning", "Planning research for the sub-question: Is it old?"))
    assert ("analysis", "Thinking about: Is it layered?") in history[:at], history
    assert history[at : at + 3] == [
        ("planning", "Planning research for the sub-question: Is it old?"),
        ("research", "Searching: 1 knowledge-base query"),
        ("analysis", "Thinking about: Is it old?"),
    ]
    await session.arefresh_from_db()
    assert session.plan["researched"] == [first.pk, second.pk]


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


async def test_a_synthesis_is_stored_and_checked_with_one_hop_before_the_check_and_one_after(
    fake_claude: Any, make_session: Any, monkeypatch: Any
):
    """Issue 17: the hop that stores a synthesis also gives what its check needs (the
    synthesis, its session's model and the sources: three hops of their own before, then a
    read after the store's commit), then the checker is asked, and the verdicts are stored
    in one more hop, which enters the next cycle and makes its reads (its own first hop
    before)."""
    from asgiref.sync import SyncToAsync

    def others() -> None:  # another session's syntheses share this one's sequence numbers
        other = make_session(question="Another question?")
        for sequence in range(4):
            Synthesis.objects.create(
                session=other,
                sequence=sequence,
                text="Elsewhere [1].",
                confidence=0.5,
                time_offset_seconds=0,
            )

    await sync_to_async(others)()
    session = await sync_to_async(planned_with_a_source)(make_session)
    order: list[str] = []
    hop = SyncToAsync.__call__

    async def hop_seen(self: Any, *args: Any, **kwargs: Any) -> Any:
        # The interrupt watch's reads run beside the calls in flight, on a clock of their
        # own (a slow call spans a poll): not on the loop's path.
        if self.func is not interrupt._statuses:
            order.append(getattr(self.func, "__name__", "?"))
        return await hop(self, *args, **kwargs)

    def answered(body: dict) -> Reply:
        reply = fake_claude.scripted_mind(body)
        kind = next(
            (k for m, k in (("VERDICT:", "check"), ("SYNTHESIS:", "synthesis")) if m in reply.text),
            "other",
        )
        order.append(f"call:{kind}")
        return reply

    read_back: list[str] = []

    def reads_the_synthesis_back(sql: str) -> None:
        # A check's own read (`citations.load`, through the ORM, which this hook sees): the
        # synthesis joined to its session's model.
        if sql.startswith("SELECT") and '"thinking_synthesis"."text"' in sql and "model_id" in sql:
            read_back.append(sql)

    monkeypatch.setattr(SyncToAsync, "__call__", hop_seen)
    on_statements(monkeypatch, reads_the_synthesis_back)
    fake_claude.responder = answered
    frozen = FrozenClock()
    each_call_takes(fake_claude, frozen, 1.0)

    assert await run(session, clock=frozen.clock) == Status.COMPLETED

    assert read_back == []  # the store gave the check the text it stored
    checks = [i for i, name in enumerate(order) if name == "call:check"]
    assert len(checks) >= 2, order  # a periodic synthesis's and the answer's
    for at in checks:
        # The call before the check wrote the synthesis (or the final answer).
        written = max(i for i in range(at) if order[i].startswith("call:"))
        assert order[written + 1 : at] == ["_store_written"], order[written:at]
    # A periodic synthesis's verdicts are stored by the loop's hop, whose step enters the
    # next cycle and which makes that cycle's reads: its call follows with no hop between
    # (unless the session ends there: then the next cycle's first hop finds it so).
    *periodic, answered = checks
    assert [order[at + 1] for at in periodic] == ["_store_checked"] * len(periodic), order
    assert order[answered + 1] == "_store_alone"  # the final answer's: it enters nothing
    followed = [order[at + 2] for at in periodic]
    assert set(followed) <= {"call:other", "_open_cycle"}, order
    assert "call:other" in followed, order
    verdicts = await CitationCheck.objects.filter(synthesis__session=session).acount()
    assert verdicts >= len(checks)
    # Each check judged its own session's synthesis, not another's with the same number.
    assert await CitationCheck.objects.acount() == verdicts
    # Every call up to the final answer took a second of active time, the answer's own
    # included (its store ends the clock); the answer's check comes after.
    calls = [i for i, name in enumerate(order) if name.startswith("call:")]
    answer = max(i for i in calls if i < checks[-1] and order[i] != "call:check")
    await session.arefresh_from_db()
    assert session.active_seconds == sum(
        1 for name in order[: answer + 1] if name.startswith("call:")
    )
