"""The deliberation loop of the extended-thinking seed: orchestration only.

    focus -> thoughts -> [questions every N thoughts] -> [synthesis every interval] -> ...
    until the time budget is used (or the model's stop signal, after a synthesis) -> final

Each step calls the model (`asking.ask`) outside any transaction, then stores its rows with
the loop's checkpoint through one `ThinkingSession.step` (`steps.py`), and only then
publishes. A step is stored only while this worker still holds the session's lease, so a
session taken over by another worker is never written twice. Everything the loop reaches
outside the database (the model, research, the live stream, time) comes in one `Run`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Literal

from django.conf import settings
from django.db import models
from django.db.models import F

from config.hops import db_hop
from research.web import WebSearch

from . import (
    budget,
    citations,
    evidence,
    final_review,
    interrupt,
    parsing,
    planner,
    prompts,
    rerank,
    signals,
    stages,
    steps,
    tags,
    tools,
)
from .asking import ask
from .events import Publish, SessionEvent
from .live import publish_safely
from .llm import LLM, LLMError, Reply, prompt_message
from .models import (
    SESSION_KEY,
    CompletionReason,
    FormatMode,
    LeaseLost,
    Status,
    Stopped,
    SubQuestion,
    ThinkingSession,
)
from .row_reads import compiled_values
from .run import Clock, Meter, Run
from .state import StageEntry
from .steps import Focus

__all__ = ["Focus", "LeaseLost", "Meter", "Run", "Stopped", "deliberate", "run_session"]

logger = logging.getLogger(__name__)

# --- reading ---------------------------------------------------------------------------


# A person paused or cancelled: the loop stops at the cycle's start.
STOPPING = (Status.PAUSED, Status.CANCELLED)


def _next_open_question() -> models.QuerySet:
    # A person's question first (they asked for it now), then by priority, oldest first.
    rows = SubQuestion.objects.filter(session_id=SESSION_KEY, explored=False)
    ordered = rows.order_by(F("added_by").desc(nulls_last=True), "-priority", "created_at")
    return ordered.values_list("pk", "text", "priority")[:1]


def select_focus(*, session: ThinkingSession) -> Focus:
    """The highest-priority unexplored sub-question, else the original question."""
    found = compiled_values("loop:focus", _next_open_question, session=session.pk)
    if not found:
        return Focus(text=session.question)
    ((pk, text, priority),) = found
    return Focus(text=text, sub_question_id=pk, priority=priority)


Analysis = tuple[bool, int, list[str], tuple[str, ...]]
# A cycle's first hop: the status, the focus, the thoughts' reads (`Analysis`) when the
# cycle goes straight to them, and whether it stored the planning stage when the focus gets
# its own research first (False when it does not). Each flag says a stage was stored that
# is yet to be shown: False when the step that stored it showed it too (`_cycle_reads`).
Opened = tuple[str, Focus, Analysis | None, bool]


def _open_cycle(*, session: ThinkingSession, run: Run) -> Opened:
    """A thought cycle's reads before its model call, in one hop: the status a person may
    have changed (LeaseLost if the lease went elsewhere), the focus and, when the cycle
    goes straight to its thoughts, their stage and prompt's reads (`_analysis_reads`); when
    it researches the focus first, that research's planning stage. The status is read by
    the step that stores the stage, and nothing is stored when it stops or ends: each
    decides from what this hop read and the session as last stored, so the loop decides
    the same."""
    focus = select_focus(session=session)
    if ending_reason(session):
        return steps.lease_status(session.pk, worker_id=run.worker_id), focus, None, False
    entry, planning = _cycle_entry(session, focus)
    status, entered = stages.record_unless(
        session.pk, entry, worker_id=run.worker_id, stopping=STOPPING
    )
    return _opened(session, status, focus, planning=planning, entered=entered, run=run)


open_cycle = db_hop(_open_cycle)


def _cycle_entry(session: ThinkingSession, focus: Focus) -> tuple[StageEntry, bool]:
    """The stage a cycle on `focus` enters, and whether it is its research's planning."""
    if replan_due(session, focus):
        return stages.entry("planning", stages.planning_message(focus)), True
    return _analysis_entry(focus), False


def _opened(
    session: ThinkingSession, status: str, focus: Focus, *, planning: bool, entered: bool, run: Run
) -> Opened:
    """A cycle's first hop's result once its stage is stored or refused (`entered`: stored,
    and yet to be shown): the thoughts' reads when it goes straight to them."""
    if status in STOPPING or planning:
        return status, focus, None, entered
    return status, focus, _analysis_reads(session, entered, run=run), False


@dataclasses.dataclass
class _Ahead:
    """What the step that stored a cycle, its sub-questions, a re-ranking or a synthesis's
    verdicts read and entered for the step after it (`_enter_next`), in its own
    transaction."""

    counts: tuple[int, int] | None = None  # the re-ranking's (open questions, sources)
    rerank: dict[str, Any] | None = None  # a re-ranking's material, its stage entered
    focus: Focus | None = None  # the next cycle's, its stage entered
    planning: bool = False  # that stage is the focus's research's planning
    cycle: Opened | None = None  # that cycle's reads, once made (`_reads_ahead`)
    synthesis: bool = False  # a periodic synthesis is due: its stage entered
    written: Written | None = None  # that synthesis's reads, once made (`_reads_ahead`)


def _enter_next(
    ahead: _Ahead, *, after: Literal["thoughts", "questions", "rerank", "check"]
) -> Callable[[ThinkingSession], dict[str, Any]]:
    """`Step.then`'s hook for the store of a cycle's thoughts, its sub-questions, a
    re-ranking or a periodic synthesis's citation check (`after`): what comes next is
    decided in the same transaction, in the order the loop decides it after the commit, and
    its stage is entered there. Nothing when the session is paused, cancelled or ending,
    nor when sub-questions are due (after thoughts): the loop goes on as before. Else, after
    thoughts or sub-questions, a re-ranking when one is due (its material read); else,
    except after a check (a synthesis is followed by a cycle), a periodic synthesis when
    one is due (its stage, as its own first hop would enter it: `_open_written`); else the
    next cycle (its focus read, as its own first hop would: `_open_cycle`). Each spares a
    hop, a row lock and a commit. The reads run under the session's row lock. Fills
    `ahead`."""

    def hook(session: ThinkingSession) -> dict[str, Any]:
        if session.status in STOPPING or ending_reason(session):
            return {}
        if after == "thoughts" and questions_due(session):
            return {}
        if after in ("thoughts", "questions"):
            ahead.counts = rerank.read_counts(session)
            ahead.rerank = rerank.due_material(session, ahead.counts)
            if ahead.rerank is not None:
                return stages.record(session, rerank.stage_entry(ahead.rerank))
        if after != "check" and synthesis_due(session):
            ahead.synthesis = True
            return stages.record(session, _synthesis_entry())
        ahead.focus = select_focus(session=session)
        entry, ahead.planning = _cycle_entry(session, ahead.focus)
        return stages.record(session, entry)

    return hook


@dataclasses.dataclass(frozen=True)
class After:
    """What a store's hop read for the step after it (`_after_store`, `_store_reranked`)."""

    log: tuple[str, ...] | None = None  # sub-questions are due: the log for their prompt
    reranking: rerank.Opened | None = None  # a re-ranking's reads (its material None: none due)
    cycle: Opened | None = None  # the next cycle's first hop's result, its stage entered
    written: Written | None = None  # a periodic synthesis's reads, its stage entered


# A synthesis's first hop: whether its stage was stored and is yet to be shown, the session
# log and, for the final answer, its review's material (`_open_written`).
Written = tuple[bool, tuple[str, ...], final_review.Material | None]


def _synthesis_entry() -> StageEntry:
    return stages.entry("synthesis", "Consolidating the understanding so far")


def _analysis_entry(focus: Focus) -> StageEntry:
    return stages.entry("analysis", f"Thinking about: {focus.text}")


def _open_analysis(session: ThinkingSession, focus: Focus, *, run: Run) -> Analysis:
    """A thought cycle's stage and its prompt's reads, in one hop, after the focus's own
    research (`_analysis_reads`)."""
    entered = stages.record_sync(session.pk, _analysis_entry(focus), worker_id=run.worker_id)
    return _analysis_reads(session, entered, run=run)


def _analysis_reads(session: ThinkingSession, entered: bool, *, run: Run) -> Analysis:
    """A thought cycle's prompt's reads once its stage is stored or not (`entered`; not once
    the session ended): the sources known, the newest hints (newest first; the log's read
    says whether they changed) and the session log. The log carries the sources, earlier
    cycles and syntheses: nothing else is read (its read counts the sources)."""
    log = run.log.read(session)
    return entered, run.log.source_count, run.log.hints(session.pk), log


open_analysis = db_hop(_open_analysis)


# --- steps -----------------------------------------------------------------------------


def custom_spec(session: ThinkingSession) -> tuple[tags.TagSpec, ...] | None:
    """The session's custom tag spec; it was validated when the session was created."""
    if session.format_mode != FormatMode.CUSTOM or not session.format_spec:
        return None
    try:
        return tags.spec_from_json(session.format_spec)
    except tags.SpecError:
        logger.warning("Session %s has an invalid custom spec; reading lines", session.pk)
        return None


def _reading_mode(session: ThinkingSession) -> tuple[str, tuple[tags.TagSpec, ...] | None]:
    spec = custom_spec(session)
    if session.format_mode == FormatMode.CUSTOM and spec is None:
        return FormatMode.ENHANCED, None
    return session.format_mode, spec


async def generate_thoughts(
    *,
    session: ThinkingSession,
    focus: Focus,
    run: Run,
    opened: Analysis | None = None,
) -> tuple[ThinkingSession, SessionEvent, After]:
    """A thought cycle: the model may search and use its scratchpad (a bounded tool loop),
    then writes 3-5 thoughts about the focus. `opened`: its reads, when the cycle's first
    hop made them. Returns the session as stored, the update to publish and what its
    store's hop read for the step after it (`_store_cycle`)."""
    if opened is None:  # the focus was researched first: its sources go in the prompt
        opened = await open_analysis(session, focus, run=run)
    entered, known_sources, hints, log = opened
    if entered:
        await stages.show(session.pk, run.publish)
    mode, spec = _reading_mode(session)
    offered = _tools_for(session, run.research)
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
    messages = [prompt_message(prompt)]
    replies: list[Reply] = []
    scratch: list[str] = []
    findings: list[str] = []
    for _round in range(settings.DEEPTHINK_MAX_TOOL_ROUNDS):
        reply = await ask(
            session=session,
            messages=messages,
            tools=offered or None,
            purpose="thoughts",
            run=run,
        )
        replies.append(reply)
        uses = reply.tool_uses
        if not uses or not offered:
            break
        results = await asyncio.gather(
            *(
                tools.run_tool(
                    use.get("name", ""),
                    use.get("input"),
                    session_id=session.pk,
                    research=run.research,
                    worker_id=run.worker_id,
                )
                for use in uses
            ),
            return_exceptions=True,
        )
        # Every call finishes (each write is refused on its own if the lease went), then the
        # first failure ends the step.
        for result in results:
            if isinstance(result, BaseException):
                raise result
        outcomes = [r for r in results if isinstance(r, tools.ToolOutcome)]
        for outcome in outcomes:
            if outcome.sources or outcome.progress:
                await publish_safely(
                    run.publish,
                    SessionEvent(
                        session.pk, sources=bool(outcome.sources), plan=bool(outcome.progress)
                    ),
                )
            if outcome.scratchpad:
                scratch.append(outcome.scratchpad)
            if outcome.sources:
                findings.append(outcome.content)
        # The assistant turn goes back exactly as streamed (thinking blocks and signatures
        # included), followed by one result per tool call.
        messages = [
            *messages,
            {"role": "assistant", "content": reply.content},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": use.get("id", ""),
                        "content": outcome.content,
                        **({"is_error": True} if outcome.is_error else {}),
                    }
                    for use, outcome in zip(uses, outcomes, strict=True)
                ],
            },
        ]
    if offered and not replies[-1].text.strip():
        # The tool loop ended without thoughts: one pass without tools writes them.
        extra = "\n\n".join(findings)[-6000:] or "(no new sources)"
        retry = dataclasses.replace(
            prompt, variable=f"{prompt.variable}\n\nWhat your searches found this cycle:\n{extra}"
        )
        replies.append(
            await ask(
                session=session,
                prompt=retry,
                purpose="thoughts",
                run=run,
            )
        )
    reading = signals.read(replies[-1].text, mode=mode, custom=spec)  # typed values used
    return await store_cycle(session.pk, focus, reading, replies, scratch, run=run)


def _after_store(
    session: ThinkingSession, event: SessionEvent, ahead: _Ahead, *, run: Run
) -> tuple[ThinkingSession, SessionEvent, After]:
    """In a store's hop, after its commit, what its step entered (`_enter_next`): the next
    cycle's reads, or a re-ranking's (whether one is due, and if so its material; read here
    when the step did not decide: `rerank.open_reranking`) with, when its step entered a
    periodic synthesis, that synthesis's reads. A stage entered is shown with the store's
    own update (its plan region), not in one of its own."""
    if ahead.focus is not None:
        return (
            session,
            dataclasses.replace(event, plan=True),
            After(cycle=_cycle_reads(session, ahead, run=run)),
        )
    if ahead.counts is not None:  # the step decided
        opened: rerank.Opened = (ahead.counts[1], ahead.rerank)
    else:
        opened = rerank.open_reranking(session, worker_id=run.worker_id)
    written = _written_reads(session, ahead, run=run)
    if opened[1] is not None or written is not None:
        event = dataclasses.replace(event, plan=True)
    return session, event, After(reranking=opened, written=written)


def _cycle_reads(session: ThinkingSession, ahead: _Ahead, *, run: Run) -> Opened:
    """The first hop's result of a cycle whose stage the store before it entered and shows."""
    assert ahead.focus is not None
    return _opened(
        session, session.status, ahead.focus, planning=ahead.planning, entered=False, run=run
    )


def _written_reads(session: ThinkingSession, ahead: _Ahead, *, run: Run) -> Written | None:
    """The first hop's result of a periodic synthesis whose stage the store before it
    entered and shows (`_open_written`'s, with the stage shown already); None: none due."""
    return (False, run.log.read(session), None) if ahead.synthesis else None


def _reads_ahead(session: ThinkingSession, ahead: _Ahead, *, run: Run) -> None:
    """After a re-ranking's or a synthesis's verdicts' commit, in the same hop: the reads of
    the step their step entered (into `ahead.cycle`, or `ahead.written`), if any."""
    if ahead.focus is not None:
        ahead.cycle = _cycle_reads(session, ahead, run=run)
    ahead.written = _written_reads(session, ahead, run=run)


def _store_reranked(
    session_id: uuid.UUID,
    rankings: Sequence[parsing.ParsedRanking],
    reply: Reply | None,
    source_count: int,
    *,
    worker_id: str,
    meter: Meter,
    run: Run,
    ahead: _Ahead,
) -> ThinkingSession | None:
    """A re-ranking stored (`rerank._store`) with the next cycle entered in its step when
    nothing else is due (`_enter_next`), and that cycle's reads made in the same hop (into
    `ahead.cycle`), or a periodic synthesis's stage entered and its reads made
    (`ahead.written`)."""
    stored = rerank._store(
        session_id,
        rankings,
        reply,
        source_count,
        worker_id=worker_id,
        meter=meter,
        then=_enter_next(ahead, after="rerank"),
    )
    if stored is not None:
        _reads_ahead(stored, ahead, run=run)
    return stored


store_reranked = db_hop(_store_reranked)


def _store_checked(
    session_id: uuid.UUID,
    synthesis_id: int,
    claims: list[citations.Claim],
    judged: citations.CheckRun,
    worker_id: str,
    *,
    run: Run,
    ahead: _Ahead,
) -> tuple[ThinkingSession, bool]:
    """A periodic synthesis's verdicts stored (`citations._store`) with the next cycle
    entered in their step when the session goes on (`_enter_next`), and that cycle's reads
    made in the same hop (`_reads_ahead`, into `ahead.cycle`: a check enters no synthesis);
    whether its stage was entered (shown with the verdicts)."""
    stored = citations._store(
        session_id,
        synthesis_id,
        claims,
        judged,
        worker_id,
        then=_enter_next(ahead, after="check"),
    )
    _reads_ahead(stored, ahead, run=run)
    return stored, ahead.focus is not None


store_checked = db_hop(_store_checked)


def _store_cycle(
    session_id: uuid.UUID,
    focus: Focus,
    reading: parsing.ThoughtReply,
    replies: list[Reply],
    scratch: list[str],
    *,
    run: Run,
) -> tuple[ThinkingSession, SessionEvent, After]:
    """A cycle's thoughts stored (`steps.store_thoughts`), then, in the same hop, what the
    loop needs next: the session log when sub-questions are due (their prompt), else the
    next cycle's reads or a re-ranking's (`_after_store`). Each would otherwise be a hop of
    its own."""
    ahead = _Ahead()
    session, event = steps._store_thoughts(
        session_id,
        focus,
        reading,
        replies,
        scratch,
        worker_id=run.worker_id,
        meter=run.meter,
        then=_enter_next(ahead, after="thoughts"),
    )
    # Sub-questions due (the step found them due, or did not decide: a pause, the end).
    if ahead.counts is None and questions_due(session):
        return session, event, After(log=run.log.read(session))
    return _after_store(session, event, ahead, run=run)


store_cycle = db_hop(_store_cycle)


def _store_asked(
    session_id: uuid.UUID,
    focus: Focus,
    parsed: list[parsing.ParsedQuestion],
    reply: Reply,
    *,
    run: Run,
) -> tuple[ThinkingSession, SessionEvent, After]:
    """New sub-questions stored (`steps.store_questions`), then the next cycle's reads or a
    re-ranking's, in the same hop (`_after_store`)."""
    ahead = _Ahead()
    session, event = steps._store_questions(
        session_id,
        focus,
        parsed,
        reply,
        worker_id=run.worker_id,
        meter=run.meter,
        then=_enter_next(ahead, after="questions"),
    )
    return _after_store(session, event, ahead, run=run)


store_asked = db_hop(_store_asked)


def _tools_for(session: ThinkingSession, research: evidence.Research) -> list[dict]:
    if not (settings.DEEPTHINK_TOOLS and session.tools_enabled):
        return []
    think = settings.DEEPTHINK_THINK_TOOL and session.think_tool
    web = research.web is not None
    return tools.definitions(web=web, think=think, search=session.research_enabled)


async def generate_questions(
    *,
    session: ThinkingSession,
    focus: Focus,
    run: Run,
    log: tuple[str, ...],
) -> tuple[ThinkingSession, SessionEvent, After]:
    """New sub-questions from the session log (read by the hop that stored the cycle).
    Returns the session as stored, the update to publish and what its store's hop read for
    the step after it (`_store_asked`)."""
    prompt = prompts.questions_prompt(
        question=session.question, log=log, background=session.parent_context
    )
    reply = await ask(
        session=session,
        prompt=prompt,
        purpose="questions",
        run=run,
    )
    parsed = parsing.parse_questions(reply.text)
    return await store_asked(session.pk, focus, parsed, reply, run=run)


async def synthesise(
    *,
    session: ThinkingSession,
    run: Run,
    final: bool = False,
    reason: str = CompletionReason.BUDGET,
    opened: Written | None = None,
) -> tuple[ThinkingSession, SessionEvent, citations.Loaded | None]:
    """A periodic synthesis, or with `final=True` the final answer that completes the session;
    with what its citation check reads (None when checks are off). `opened`: its first
    hop's result, when the store before it made it (`_written_reads`)."""
    if opened is None:
        opened = await open_written(session, run=run, final=final)
    entered, log, material = opened
    if entered:
        await stages.show(session.pk, run.publish)
    if material is not None:  # the final answer reviews the whole session, after the log
        prompt = final_review.final_prompt(session, log=log, material=material)
    else:
        prompt = prompts.synthesis_prompt(
            question=session.question, log=log, background=session.parent_context
        )
    purpose = "final" if final else "synthesis"
    reply = await ask(
        session=session,
        prompt=prompt,
        purpose=purpose,
        run=run,
    )
    parsed = parsing.parse_synthesis(reply.text)
    return await store_written(session.pk, parsed, reply, run=run, final=final, reason=reason)


def _open_written(session: ThinkingSession, *, run: Run, final: bool) -> Written:
    """A synthesis's stage and its prompt's reads, in one hop: whether the stage was stored
    and the session log; for the final answer, its review's material first
    (`final_review.gather`) and the review's stage entered with the answer's."""
    material = final_review.gather(session) if final else None
    if material is None:
        entries: tuple[StageEntry, ...] = (_synthesis_entry(),)
    else:
        answering = stages.entry("synthesis", "Writing the final answer")
        entries = (final_review.reviewing(material), answering)
    entered = stages.record_sync(session.pk, *entries, worker_id=run.worker_id)
    return entered, run.log.read(session), material


open_written = db_hop(_open_written)


def _store_written(
    session_id: uuid.UUID,
    parsed: parsing.ParsedSynthesis,
    reply: Reply,
    *,
    run: Run,
    final: bool,
    reason: str,
) -> tuple[ThinkingSession, SessionEvent, citations.Loaded | None]:
    """A synthesis (or the final answer) stored (`steps.store_synthesis`) with, when checks
    are on, what its citation check reads, from the same step: the check needs no read of
    its own."""
    return steps._store_synthesis(
        session_id,
        parsed,
        reply,
        worker_id=run.worker_id,
        meter=run.meter,
        final=final,
        reason=reason,
        check=settings.DEEPTHINK_CITATION_CHECK,
    )


store_written = db_hop(_store_written)


async def plan_research(
    *,
    session: ThinkingSession,
    run: Run,
    focus: Focus | None = None,
    planning: bool = False,
) -> ThinkingSession:
    """Plan (the model, else a heuristic), then search memory and the web in parallel.
    `planning`: whether the cycle's first hop stored the planning stage of its focus's
    research, to be shown here (the session's first plan's is stored with its start and
    shown with it). Returns the session as the plan's store left it."""
    subject = focus.text if focus else session.question
    if planning:
        await stages.show(session.pk, run.publish)
    stable, variable = planner.plan_prompt(
        session.question, focus=focus.text if focus and focus.sub_question_id else ""
    )
    replies: list[Reply] = []
    try:
        reply = await ask(
            session=session,
            prompt=prompts.Prompt(stable, variable),
            purpose="plan",
            run=run,
        )
        replies.append(reply)
        plan = planner.parse_plan(reply.text) or planner.heuristic_plan(subject)
    except LLMError as error:
        if error.kind in ("auth", "not_configured"):
            raise  # no point thinking without a model
        plan = planner.heuristic_plan(
            subject, reason=f"Planning with the model failed ({error}); a simple plan was used."
        )
    # The research stage is entered with the plan, in its store's transaction; showing it
    # publishes the plan region, the new plan in it.
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
    # notes (a failed search) show with the stage the loop enters next, thoughts or the end.
    # The session as the plan's store left it: the searches' stores change only its sources
    # and notes, which nothing the loop decides before its next store reads (the next
    # cycle's first hop, or the store that enters the cycle after it, reads the status
    # afresh, and each store returns the row).
    return session


# --- when to do what -------------------------------------------------------------------


def ending_reason(session: ThinkingSession) -> str:
    """Why the session should go to its final synthesis now; empty while it should go on.

    Time is the checkpointed active time (the Run's meter, lapped at each stored step), so
    research after a plan is counted with the next step: a short session still gets its
    first thought cycle."""
    if session.stop_requested:
        return CompletionReason.STOP_SIGNAL
    if session.over_token_ceiling:
        return CompletionReason.TOKEN_CEILING
    if budget.over_cost_ceiling(session):
        return CompletionReason.COST_CEILING
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
    """plan -> research -> [focus -> (research) -> thoughts -> questions? -> synthesis?]* ->
    final. Returns the status the session stopped in."""
    if steps.plans_first(session):  # research off: no plan, no searches
        session = await plan_research(session=session, run=run)
    after = After()  # what the step before read for the next (a cycle, when it entered one)
    while True:
        status, focus, opened, planning = after.cycle or await open_cycle(session=session, run=run)
        if status in STOPPING:
            session = await steps.stop_running(session.pk, worker_id=run.worker_id, meter=run.meter)
            finished = SessionEvent(session.pk, finished=session.is_finished)
            await publish_safely(run.publish, finished)
            return session.status
        if ending_reason(session):
            break
        if replan_due(session, focus):
            session = await plan_research(session=session, run=run, focus=focus, planning=planning)
        session, event, after = await generate_thoughts(
            session=session, focus=focus, run=run, opened=opened
        )
        await publish_safely(run.publish, event)
        if after.log is not None:  # sub-questions are due: the store read the log for them
            session, event, after = await generate_questions(
                session=session, focus=focus, run=run, log=after.log
            )
            await publish_safely(run.publish, event)
        if after.cycle is not None:  # the store found nothing due before the next cycle
            continue
        ahead = _Ahead()  # a re-ranking's store may enter the next cycle, or a synthesis
        session = await rerank.maybe_rerank(
            session=session,
            run=run,
            opened=after.reranking,
            stored_by=functools.partial(store_reranked, run=run, ahead=ahead),
        )  # when due (rerank.py)
        # A synthesis's stage entered by the store of the cycle, its questions or this
        # re-ranking (a re-ranking due is entered instead of it: then only by its store).
        written = ahead.written or after.written
        after = After(cycle=ahead.cycle)
        if after.cycle is not None:
            continue
        if ending_reason(session):
            break
        if written is not None or synthesis_due(session):
            session, event, loaded = await synthesise(session=session, run=run, opened=written)
            await publish_safely(run.publish, event)
            ahead = _Ahead()  # the verdicts' store may enter the next cycle
            session = await citations.check_synthesis_citations(
                session,
                event.synthesis,
                run.llm,
                run.publish,
                worker_id=run.worker_id,
                loaded=loaded,
                stored_by=functools.partial(store_checked, run=run, ahead=ahead),
            )
            after = After(cycle=ahead.cycle)
    reason = ending_reason(session)
    session, event, loaded = await synthesise(session=session, run=run, final=True, reason=reason)
    await publish_safely(run.publish, event)
    session = await citations.check_synthesis_citations(
        session, event.synthesis, run.llm, run.publish, worker_id=run.worker_id, loaded=loaded
    )
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
