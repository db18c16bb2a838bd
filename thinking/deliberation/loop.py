"""The deliberation loop of the extended-thinking seed: orchestration only.

    focus -> thoughts -> [questions every N thoughts] -> [re-rank] -> [synthesis every
    interval] -> ... until the time budget is used (or the model's stop signal, after a
    synthesis) -> final answer

Every step opens what its prompt needs in one database hop (entering its stage), asks the
model outside any transaction (`asking.ask`), stores the reply in one transaction through
`ThinkingSession.step` (`steps.py`, only while this worker holds the lease) and publishes
after the commit. What comes next is decided here, from the session the store returned.
Everything outside the database (model, research, live stream, time) comes in one `Run`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings

from config.hops import db_hop
from research.web import WebSearch
from thinking.deliberation import (
    citations,
    evidence,
    final_review,
    interrupt,
    planner,
    prompts,
    rerank,
    signals,
    stages,
    steps,
    tools,
    transcript,
)
from thinking.deliberation.asking import ask
from thinking.deliberation.run import Clock, Meter, Run
from thinking.deliberation.steps import Focus
from thinking.events import Publish, SessionEvent
from thinking.models import (
    CompletionReason,
    LeaseLost,
    Status,
    Stopped,
    ThinkingSession,
)
from thinking.page.live import publish_safely
from thinking.people import budget
from thinking.provider import parsing
from thinking.provider.llm import LLM, LLMError, Reply

__all__ = ["Focus", "LeaseLost", "Meter", "Run", "Stopped", "deliberate", "run_session"]

logger = logging.getLogger(__name__)

# A person paused or cancelled: the loop stops at the cycle's start.
STOPPING = (Status.PAUSED, Status.CANCELLED)


# --- what the steps read -------------------------------------------------------------------


# Changed outside the loop's stores: a person's pause, cancel or conclude; a takeover.
CHANGED_BY_OTHERS = ("status", "conclude_requested", "worker_id", "revision")


def _open_cycle(session: ThinkingSession, *, worker_id: str) -> tuple[ThinkingSession, Focus]:
    """A cycle's start: the session as its last store left it, with what others may have
    changed read again (LeaseLost if another worker holds it), and the focus it would
    think about."""
    session.refresh_from_db(fields=CHANGED_BY_OTHERS)
    if session.worker_id != worker_id:
        raise LeaseLost(session.pk)
    return session, steps.select_focus(session)


open_cycle = db_hop(_open_cycle)


@dataclass(frozen=True)
class CycleContext:
    """What a thought cycle's prompt shows besides the question and focus."""

    entered: bool  # its stage was stored (and is to be shown)
    known_sources: int
    hints: list[str]  # newest first
    log: tuple[str, ...]


def _open_thoughts(session: ThinkingSession, focus: Focus, *, worker_id: str) -> CycleContext:
    """A thought cycle's stage entered and its prompt's reads: the sources known, the
    newest hints and the session log."""
    entered = stages.record_sync(
        session.pk,
        stages.entry("analysis", f"Thinking about: {focus.text}"),
        worker_id=worker_id,
    )
    return CycleContext(
        entered=entered,
        known_sources=session.sources.count(),
        hints=transcript.recent_hints(session.pk),
        log=transcript.session_log(session),
    )


open_thoughts = db_hop(_open_thoughts)


def _open_log(
    session: ThinkingSession, *, stage: str = "", worker_id: str
) -> tuple[bool, tuple[str, ...]]:
    """A step's stage entered (when it has one) and the session log its prompt shows."""
    entered = bool(stage) and stages.record_sync(
        session.pk, stages.entry("synthesis", stage), worker_id=worker_id
    )
    return entered, transcript.session_log(session)


open_log = db_hop(_open_log)


def _open_final(
    session: ThinkingSession, *, worker_id: str
) -> tuple[tuple[str, ...], final_review.Material]:
    """The final answer's reads: its review's material (the whole session), with the
    review's and the answer's stages entered, and the session log."""
    material = final_review.gather(session)
    answering = stages.entry("synthesis", "Writing the final answer")
    stages.record_sync(session.pk, final_review.reviewing(material), answering, worker_id=worker_id)
    return transcript.session_log(session), material


open_final = db_hop(_open_final)


# --- the steps -------------------------------------------------------------------------


async def generate_thoughts(*, session: ThinkingSession, focus: Focus, run: Run) -> ThinkingSession:
    """A thought cycle: the model may search and use its scratchpad (a bounded tool loop),
    then writes 3-5 thoughts about the focus. Returns the session as stored, its thoughts
    counted (`thought_count`)."""
    context = await open_thoughts(session, focus, worker_id=run.worker_id)
    if context.entered:
        await stages.show(session.pk, run.publish)
    known_sources, hints, log = context.known_sources, context.hints, context.log
    mode, spec = signals.reading_mode(session)
    offered = tools.offered(session, run.research)
    prompt = prompts.thoughts_prompt(
        question=session.question,
        focus=focus.text,
        background=session.parent_context,
        reply_format=prompts.thought_format(mode, spec),
        tool_guidance=tools.THINK_TOOL_GUIDANCE
        if any(t["name"] == "think" for t in offered)
        else "",
        known_sources=known_sources,
        hints=list(reversed(hints)),
        log=log,
    )
    replies, scratch = await tools.ask_with_tools(session, prompt, offered, run=run)
    reading = signals.read(replies[-1].text, mode=mode, custom=spec)  # typed values used
    session, event = await steps.store_thoughts(
        session.pk, focus, reading, replies, scratch, worker_id=run.worker_id, meter=run.meter
    )
    await publish_safely(run.publish, event)
    return session


async def generate_questions(
    *, session: ThinkingSession, focus: Focus, run: Run
) -> ThinkingSession:
    """New sub-questions from the session log."""
    _, log = await open_log(session, worker_id=run.worker_id)
    prompt = prompts.questions_prompt(
        question=session.question, log=log, background=session.parent_context
    )
    reply = await ask(session=session, prompt=prompt, purpose="questions", run=run)
    parsed = parsing.parse_questions(reply.text)
    session, event = await steps.store_questions(
        session.pk, focus, parsed, reply, worker_id=run.worker_id, meter=run.meter
    )
    await publish_safely(run.publish, event)
    return session


async def synthesise(
    *,
    session: ThinkingSession,
    run: Run,
    final: bool = False,
    reason: str = CompletionReason.BUDGET,
) -> ThinkingSession:
    """A periodic synthesis, or with `final=True` the final answer that completes the
    session; then its citation check. Returns the session as stored."""
    if final:
        log, material = await open_final(session, worker_id=run.worker_id)
        await stages.show(session.pk, run.publish)
        # The final answer reviews the whole session, after the log.
        prompt = final_review.final_prompt(session, log=log, material=material)
    else:
        stage = "Consolidating the understanding so far"
        entered, log = await open_log(session, stage=stage, worker_id=run.worker_id)
        if entered:
            await stages.show(session.pk, run.publish)
        prompt = prompts.synthesis_prompt(
            question=session.question, log=log, background=session.parent_context
        )
    purpose = "final" if final else "synthesis"
    reply = await ask(session=session, prompt=prompt, purpose=purpose, run=run)
    parsed = parsing.parse_synthesis(reply.text)
    session, event = await steps.store_synthesis(
        session.pk,
        parsed,
        reply,
        worker_id=run.worker_id,
        meter=run.meter,
        final=final,
        reason=reason,
    )
    await publish_safely(run.publish, event)
    return await citations.check_synthesis_citations(
        session, event.synthesis, run.llm, run.publish, worker_id=run.worker_id
    )


async def plan_research(
    *,
    session: ThinkingSession,
    run: Run,
    focus: Focus | None = None,
) -> ThinkingSession:
    """Plan (the model, else a heuristic), then search memory and the web in parallel.
    Returns the session as the plan's store left it. (The session's first plan's stage is
    stored with its start and shown with it; a sub-question's research enters its own.)"""
    subject = focus.text if focus else session.question
    if focus is not None:
        await stages.enter(
            session.pk,
            "planning",
            stages.planning_message(focus),
            worker_id=run.worker_id,
            publish=run.publish,
        )
    stable, variable = planner.plan_prompt(
        session.question, focus=focus.text if focus and focus.sub_question_id else ""
    )
    replies: list[Reply] = []
    try:
        reply = await ask(
            session=session, prompt=prompts.Prompt(stable, variable), purpose="plan", run=run
        )
        replies.append(reply)
        plan = planner.parse_plan(reply.text) or planner.heuristic_plan(subject)
    except LLMError as error:
        if error.kind in ("auth", "not_configured"):
            raise  # no point thinking without a model
        plan = planner.heuristic_plan(
            subject, reason=f"Planning with the model failed ({error}); a simple plan was used."
        )
    # The research stage is entered with the plan, in its store's transaction.
    message = stages.research_message(plan, web=run.research.web is not None)
    session = await steps.save_plan(
        session.pk,
        plan,
        replies,
        worker_id=run.worker_id,
        meter=run.meter,
        focus_id=focus.sub_question_id if focus else None,
        entering=stages.entry("research", message),
    )
    await stages.show(session.pk, run.publish)

    async def show(sources: list) -> None:
        await publish_safely(run.publish, SessionEvent(session.pk, sources=True))

    await evidence.gather(
        session_id=session.pk,
        research=run.research,
        worker_id=run.worker_id,
        web_queries=plan.web_queries,
        memory_queries=plan.memory_queries,
        on_sources=show,
    )
    # No event of its own: the sources were shown as their queries finished, and the research
    # notes (a failed search) show with the stage the loop enters next.
    return session


# --- when to do what -------------------------------------------------------------------


def ending_reason(session: ThinkingSession) -> str:
    """Why the session should go to its final synthesis now; empty while it should go on.

    A ceiling counts what the next step and the answer will cost (`budget.ceiling_reached`);
    time is the active time checkpointed at each stored step."""
    if session.conclude_requested:  # a person asked for the answer now
        return CompletionReason.CONCLUDED
    if session.stop_requested:
        return CompletionReason.STOP_SIGNAL
    if reached := budget.ceiling_reached(session):
        return reached
    if session.budget_exhausted:
        return CompletionReason.BUDGET
    return ""


def synthesis_due(session: ThinkingSession) -> bool:
    """A periodic synthesis once an interval of active time has passed (not when the budget
    is used: then the final one comes instead)."""
    return session.active_seconds >= session.next_synthesis_at and not session.budget_exhausted


def questions_due(session: ThinkingSession) -> bool:
    """After a cycle's thoughts are stored (they were counted then: `thought_count`)."""
    count = session.thought_count
    if count is None:
        raise ValueError("questions_due needs the session as the cycle's store returned it")
    return count - session.thoughts_at_last_questions >= settings.DEEPTHINK_QUESTIONS_EVERY


def replan_due(session: ThinkingSession, focus: Focus) -> bool:
    """A high-priority sub-question that becomes the focus gets its own research, a few times
    per session."""
    if focus.sub_question_id is None or not session.research_enabled:
        return False
    researched = session.plan.get("researched", [])
    return (
        len(researched) < settings.DEEPTHINK_REPLANS
        and focus.sub_question_id not in researched
        and focus.priority >= settings.DEEPTHINK_REPLAN_PRIORITY
    )


# --- the loop --------------------------------------------------------------------------


async def deliberate(session: ThinkingSession, run: Run) -> str:
    """plan -> research -> [focus -> (research) -> thoughts -> questions? -> re-rank? ->
    synthesis?]* -> final. Returns the status the session stopped in."""
    if steps.plans_first(session):  # research off: no plan, no searches
        session = await plan_research(session=session, run=run)
    while True:
        session, focus = await open_cycle(session, worker_id=run.worker_id)
        if session.status in STOPPING:
            session = await steps.stop_running(session.pk, worker_id=run.worker_id, meter=run.meter)
            await publish_safely(
                run.publish, SessionEvent(session.pk, finished=session.is_finished)
            )
            return session.status
        if ending_reason(session):
            break
        try:
            if replan_due(session, focus):
                session = await plan_research(session=session, run=run, focus=focus)
            session = await generate_thoughts(session=session, focus=focus, run=run)
            if questions_due(session):
                session = await generate_questions(session=session, focus=focus, run=run)
            session = await rerank.maybe_rerank(session=session, run=run)
            if not ending_reason(session) and synthesis_due(session):
                session = await synthesise(session=session, run=run)
        except interrupt.Concluding:  # the step in flight is dropped: on to the answer
            continue
    session = await synthesise(session=session, run=run, final=True, reason=ending_reason(session))
    return session.status


def _start(
    session_id: uuid.UUID, *, worker_id: str, web_search: Callable[[], WebSearch] | None
) -> tuple[ThinkingSession, evidence.Research] | None:
    """A claimed session's start, in one hop: begun (`steps.begin_sync`, with its first
    plan's stage when it plans first) and what it may search. None if it is not runnable or
    another worker claimed it since."""
    planning = stages.entry("planning", stages.planning_message())
    session = steps.begin_sync(session_id, worker_id=worker_id, planning=planning)
    if session is None:
        return None
    return session, evidence.Research.for_session(session, web_search=web_search)


start = db_hop(_start)


async def run_session(
    session_id: uuid.UUID,
    *,
    llm: LLM,
    publish: Publish,
    worker_id: str,
    clock: Clock | None = None,
    web_search: Callable[[], WebSearch] | None = None,
) -> str | None:
    """Run a claimed session until it completes, pauses, is cancelled or fails.

    Returns the status it stopped in, or None if it was not runnable or the lease was lost.
    Everything stored before an error stays stored. The caller closes `llm`; the session's
    web search (from `web_search`, e.g. a worker's shared pool; by default a client of its
    own) is closed here.
    """
    clock = clock or Clock()
    meter = Meter(clock)
    started = await start(session_id, worker_id=worker_id, web_search=web_search)
    if started is None:
        return None
    session, research = started
    # The header, and the plan region with the first plan's stage when there is one.
    await publish_safely(publish, SessionEvent(session.pk, plan=steps.plans_first(session)))
    run = Run(
        llm=llm, research=research, publish=publish, worker_id=worker_id, meter=meter, clock=clock
    )
    try:
        return await deliberate(session, run)
    except asyncio.CancelledError:
        # The worker is shutting down: the step in flight is dropped (its rows were not
        # committed) and the lease released, so another worker continues at once from the
        # last stored step.
        await asyncio.shield(steps.release_lease(session_id, worker_id=worker_id))
        raise
    except LeaseLost:
        logger.warning("Session %s was taken over by another worker; stopping", session_id)
        return None
    except (Stopped, interrupt.Interrupted):
        try:
            session = await steps.stop_running(session_id, worker_id=worker_id, meter=meter)
        except LeaseLost:
            return None
        await publish_safely(publish, SessionEvent(session.pk, finished=True))
        return session.status
    except LLMError as error:
        failed = await steps.fail(session_id, worker_id=worker_id, meter=meter, message=str(error))
    except Exception:
        logger.exception("Session %s failed", session_id)
        failed = await steps.fail(
            session_id,
            worker_id=worker_id,
            meter=meter,
            message="Deep Think hit an internal error; the details are in the server log.",
        )
    finally:
        await research.close()
    if failed is None:
        return None
    await publish_safely(publish, SessionEvent(failed.pk, finished=True))
    return failed.status
