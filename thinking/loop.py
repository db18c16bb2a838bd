"""The deliberation loop of the extended-thinking seed, as small testable steps.

    focus -> thoughts -> [questions every N thoughts] -> [synthesis every interval] -> ...
    until the time budget is used (or the model's stop signal, after a synthesis) -> final

Each step calls the model outside any transaction, then stores its rows together with the
loop's checkpoint (counters, schedule, active time, usage) in one transaction, and only then
publishes. A step is stored only while this worker still holds the session's lease, so a
session taken over by another worker is never written twice.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from channels.db import database_sync_to_async
from django.conf import settings
from django.db import transaction
from django.db.models import F
from django.utils import timezone

from research import knowledge
from research.models import Source as KnowledgeSource

from . import evidence, notify, parsing, planner, prompts, tags, tools
from .events import LiveStep, Publish, SessionEvent
from .llm import LLM, LLMError, Reply, Usage, user_message
from .models import (
    CompletionReason,
    FormatMode,
    ModelCall,
    Status,
    SubQuestion,
    Synthesis,
    ThinkingSession,
    Thought,
    ThoughtType,
)

logger = logging.getLogger(__name__)

RECENT_THOUGHTS = 8
SYNTHESIS_THOUGHTS = 20
MAX_ANSWER_CHARS = 500


class LeaseLost(Exception):
    """Another worker took the session over; this one must stop without writing."""


class Stopped(Exception):
    """The session was cancelled while a step was in flight."""


class Meter:
    """Active time from a monotonic clock, handed out in laps as steps are stored."""

    def __init__(self) -> None:
        self._mark = time.monotonic()

    def lap(self) -> float:
        now = time.monotonic()
        elapsed, self._mark = now - self._mark, now
        return elapsed


@dataclass(frozen=True)
class Focus:
    text: str
    sub_question_id: int | None = None
    priority: int = 0


# --- storing ---------------------------------------------------------------------------


def _locked(session_id: uuid.UUID, worker_id: str) -> ThinkingSession:
    session = ThinkingSession.objects.select_for_update().get(pk=session_id)
    if session.worker_id != worker_id:
        raise LeaseLost(session_id)
    return session


def reasoning_text(reply: Reply) -> str:
    """The model's thinking as shown to people: redacted blocks become a placeholder."""
    parts = [reply.thinking] if reply.thinking else []
    if reply.redacted_blocks:
        n = reply.redacted_blocks
        parts.append(f"[{n} reasoning block{'s' if n > 1 else ''} redacted by the provider]")
    return "\n\n".join(parts)


def _record_calls(session: ThinkingSession, purpose: str, replies: Sequence[Reply]) -> None:
    ModelCall.objects.bulk_create(
        ModelCall(
            session=session,
            purpose=purpose,
            model=reply.model or session.model_id,
            thinking_mode=reply.thinking_mode,
            stop_reason=reply.stop_reason or "",
            duration_ms=reply.duration_ms,
            input_tokens=reply.usage.input_tokens,
            output_tokens=reply.usage.output_tokens,
            cache_read_tokens=reply.usage.cache_read_tokens,
            cache_write_tokens=reply.usage.cache_write_tokens,
            content=reply.content,
        )
        for reply in replies
    )


def _checkpoint(session: ThinkingSession, *, meter: Meter, replies: Sequence[Reply] = ()) -> dict:
    """The fields every stored step updates alongside its rows."""
    now = timezone.now()
    changes: dict = {
        "active_seconds": F("active_seconds") + meter.lap(),
        "running_since": now,
        "heartbeat_at": now,
        "revision": F("revision") + 1,
    }
    if replies:
        usage = sum((reply.usage for reply in replies), Usage())
        changes.update(
            input_tokens=F("input_tokens") + usage.input_tokens,
            output_tokens=F("output_tokens") + usage.output_tokens,
            cache_read_tokens=F("cache_read_tokens") + usage.cache_read_tokens,
            cache_write_tokens=F("cache_write_tokens") + usage.cache_write_tokens,
        )
    return changes


def _save(session: ThinkingSession, changes: dict) -> ThinkingSession:
    ThinkingSession.objects.filter(pk=session.pk).update(**changes)
    session.refresh_from_db()
    return session


@database_sync_to_async
def begin(session_id: uuid.UUID, *, worker_id: str) -> ThinkingSession | None:
    """Move a claimed session to `thinking` and start its clock. None if it is not runnable."""
    with transaction.atomic():
        session = _locked(session_id, worker_id)
        if session.status not in (Status.CREATED, Status.THINKING):
            return None
        now = timezone.now()
        changes: dict = {
            "status": Status.THINKING,
            "running_since": now,
            "revision": F("revision") + 1,
        }
        if session.started_at is None:
            changes["started_at"] = now
        if session.next_synthesis_at <= 0:
            changes["next_synthesis_at"] = session.synthesis_interval_seconds
        return _save(session, changes)


@database_sync_to_async
def current_status(session_id: uuid.UUID, *, worker_id: str) -> str:
    status, owner = ThinkingSession.objects.filter(pk=session_id).values_list(
        "status", "worker_id"
    )[0]
    if owner != worker_id:
        raise LeaseLost(session_id)
    return status


@database_sync_to_async
def stop_running(session_id: uuid.UUID, *, worker_id: str, meter: Meter) -> ThinkingSession:
    """Pause or cancel seen at a step boundary: keep the time spent, stop the clock."""
    with transaction.atomic():
        session = _locked(session_id, worker_id)
        changes = _checkpoint(session, meter=meter)
        changes.update(
            running_since=None,
            worker_id="",
            heartbeat_at=None,
            waiting_since=None,
            waiting_reason="",
        )
        return _save(session, changes)


@database_sync_to_async
def release_lease(session_id: uuid.UUID, *, worker_id: str) -> None:
    ThinkingSession.objects.filter(pk=session_id, worker_id=worker_id).update(
        worker_id="",
        heartbeat_at=None,
        running_since=None,
        revision=F("revision") + 1,
    )


@database_sync_to_async
def fail(
    session_id: uuid.UUID, *, worker_id: str, meter: Meter, message: str
) -> ThinkingSession | None:
    """Record the error in words and keep everything already stored."""
    with transaction.atomic():
        try:
            session = _locked(session_id, worker_id)
        except LeaseLost:
            return None
        if session.is_finished:
            return session
        changes = _checkpoint(session, meter=meter)
        changes.update(
            status=Status.FAILED,
            completion_reason=CompletionReason.ERROR,
            error_message=message[:2000],
            finished_at=timezone.now(),
            running_since=None,
            waiting_since=None,
            waiting_reason="",
            worker_id="",
            heartbeat_at=None,
        )
        notify.schedule(session.pk)  # mail and webhook once committed (#19)
        return _save(session, changes)


# --- reading ---------------------------------------------------------------------------


MODEL_TYPES = ("exploration", "critique", "connection", "insight")
RECENT_HINTS = 5


def _recent(session: ThinkingSession, count: int) -> list[prompts.ThoughtLine]:
    rows = list(session.thoughts.filter(type__in=MODEL_TYPES).order_by("-sequence")[:count])
    return [prompts.ThoughtLine(t.type, t.text, t.confidence) for t in reversed(rows)]


def _explored(session: ThinkingSession) -> list[tuple[str, str]]:
    return [(q.text, q.answer) for q in session.sub_questions.filter(explored=True).order_by("id")]


def _latest_synthesis_text(session: ThinkingSession) -> str:
    latest = session.syntheses.order_by("-sequence").first()
    return latest.text if latest else ""


@database_sync_to_async
def select_focus(*, session: ThinkingSession) -> Focus:
    """The highest-priority unexplored sub-question, else the original question."""
    # A person's question first (they asked for it now), then by priority, oldest first.
    candidate = (
        session.sub_questions.filter(explored=False)
        .order_by(F("added_by").desc(nulls_last=True), "-priority", "created_at")
        .first()
    )
    if candidate is None:
        return Focus(text=session.question)
    return Focus(text=candidate.text, sub_question_id=candidate.pk, priority=candidate.priority)


# --- steps -----------------------------------------------------------------------------


@dataclass
class LiveReasoning:
    """Streams a call's thinking to the page, at most once per `interval` seconds."""

    session_id: uuid.UUID
    purpose: str
    publish: Publish
    interval: float
    started_at: float = field(default_factory=time.time)
    text: str = ""
    writing: bool = False
    _last: float = 0.0

    def event(self) -> SessionEvent:
        live = LiveStep(self.purpose, self.started_at, self.text, self.writing)
        return SessionEvent(self.session_id, live=live)

    async def start(self) -> None:
        self._last = time.monotonic()
        await _publish(self.publish, self.event())

    async def on_thinking(self, delta: str) -> None:
        self.text += delta
        await self._maybe_publish()

    async def on_text(self, delta: str) -> None:
        if not self.writing:
            self.writing = True
            self._last = 0.0  # show the switch from thinking to writing at once
        await self._maybe_publish()

    async def _maybe_publish(self) -> None:
        now = time.monotonic()
        if now - self._last >= self.interval:
            self._last = now
            await _publish(self.publish, self.event())


@database_sync_to_async
def _set_waiting(session_id: uuid.UUID, worker_id: str, reason: str) -> str:
    """Mark (or, with no reason, unmark) the session as waiting for the provider; returns
    its status, so a person's pause or cancel is noticed while it waits."""
    with transaction.atomic():
        session = _locked(session_id, worker_id)
        changes: dict = {"revision": F("revision") + 1, "heartbeat_at": timezone.now()}
        if reason:
            changes["waiting_reason"] = reason[:300]
            if session.waiting_since is None:
                changes["waiting_since"] = timezone.now()
        else:
            changes.update(waiting_since=None, waiting_reason="")
        _save(session, changes)
        return session.status


async def ask(
    *,
    session: ThinkingSession,
    prompt: prompts.Prompt | None = None,
    messages: list[dict] | None = None,
    tools: list[dict] | None = None,
    purpose: str,
    llm: LLM,
    publish: Publish,
    meter: Meter,
    worker_id: str,
) -> Reply:
    """One model call for a step, with the session's thinking settings, its stable prefix
    cached, and its reasoning streamed live to the page.

    While the provider is unavailable (overloaded, rate limited, unreachable) the session
    waits with backoff and says so on the page; the time waited does not count as thinking.
    After DEEPTHINK_PROVIDER_GIVE_UP_SECONDS it gives up with the provider's error.
    """
    waited_since: float | None = None
    delay = settings.DEEPTHINK_PROVIDER_BACKOFF_SECONDS
    while True:
        live = LiveReasoning(
            session.pk, purpose, publish, interval=settings.DEEPTHINK_LIVE_INTERVAL
        )
        await live.start()
        try:
            reply = await llm.stream(
                messages or [user_message(prompt.stable, prompt.variable)],  # type: ignore[union-attr]
                system=prompts.SYSTEM,
                tools=tools,
                model=session.model_id,
                thinking=session.thinking_settings,
                on_thinking=live.on_thinking,
                on_text=live.on_text,
            )
        except LLMError as error:
            if not error.retryable:
                raise
            now = time.monotonic()
            waited_since = waited_since or now
            if now - waited_since >= settings.DEEPTHINK_PROVIDER_GIVE_UP_SECONDS:
                minutes = settings.DEEPTHINK_PROVIDER_GIVE_UP_SECONDS / 60
                raise LLMError(
                    f"{error} It stayed unavailable for {minutes:g} minutes, so the session "
                    "stopped; everything it stored is kept.",
                    kind=error.kind,
                ) from error
            status = await _set_waiting(session.pk, worker_id, str(error))
            await _publish(publish, SessionEvent(session.pk))
            if status in (Status.PAUSED, Status.CANCELLED):
                raise Stopped(session.pk) from error
            logger.warning("Session %s: %s Trying again in %.0fs", session.pk, error, delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, settings.DEEPTHINK_PROVIDER_MAX_BACKOFF_SECONDS)
            meter.lap()  # waiting for the provider is not thinking time
            continue
        if waited_since is not None:
            await _set_waiting(session.pk, worker_id, "")
        return reply


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
    llm: LLM,
    meter: Meter,
    worker_id: str,
    publish: Publish,
    research: evidence.Research,
) -> tuple[ThinkingSession, SessionEvent]:
    """A thought cycle: the model may search and use its scratchpad (a bounded tool loop),
    then writes 3-5 thoughts about the focus."""
    recent, understanding, sources, hints = await database_sync_to_async(
        lambda: (
            _recent(session, RECENT_THOUGHTS),
            _latest_synthesis_text(session),
            list(session.sources.order_by("number")),
            list(
                session.thoughts.filter(type=ThoughtType.HINT)
                .order_by("-sequence")
                .values_list("text", flat=True)[:RECENT_HINTS]
            ),
        )
    )()
    pack = await evidence.best_sources(session.pk, settings.DEEPTHINK_EVIDENCE_SOURCES)
    mode, spec = _reading_mode(session)
    offered = _tools_for(session, research)
    prompt = prompts.thoughts_prompt(
        question=session.question,
        focus=focus.text,
        background=session.parent_context,
        recent=recent,
        understanding=understanding,
        reply_format=prompts.thought_format(mode, spec),
        evidence=evidence.evidence_pack(pack),
        tool_guidance=tools.THINK_TOOL_GUIDANCE
        if any(t["name"] == "think" for t in offered)
        else "",
        known_sources=len(sources),
        hints=list(reversed(hints)),
    )
    messages = [user_message(prompt.stable, prompt.variable)]
    replies: list[Reply] = []
    scratch: list[str] = []
    findings: list[str] = []
    for _round in range(settings.DEEPTHINK_MAX_TOOL_ROUNDS):
        reply = await ask(
            session=session,
            messages=messages,
            tools=offered or None,
            purpose="thoughts",
            llm=llm,
            publish=publish,
            meter=meter,
            worker_id=worker_id,
        )
        replies.append(reply)
        uses = reply.tool_uses
        if not uses or not offered:
            break
        outcomes = await asyncio.gather(
            *(
                tools.run_tool(
                    use.get("name", ""), use.get("input"), session_id=session.pk, research=research
                )
                for use in uses
            )
        )
        for outcome in outcomes:
            if outcome.sources or outcome.progress:
                await _publish(
                    publish,
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
        retry = prompts.Prompt(
            prompt.stable, f"{prompt.variable}\n\nWhat your searches found this cycle:\n{extra}"
        )
        replies.append(
            await ask(
                session=session,
                prompt=retry,
                purpose="thoughts",
                llm=llm,
                publish=publish,
                meter=meter,
                worker_id=worker_id,
            )
        )
    reading = parsing.read_thought_reply(replies[-1].text, mode=mode, custom=spec)
    return await _store_thoughts(session, focus, reading, replies, scratch, meter, worker_id)


def _tools_for(session: ThinkingSession, research: evidence.Research) -> list[dict]:
    if not (settings.DEEPTHINK_TOOLS and session.tools_enabled):
        return []
    think = settings.DEEPTHINK_THINK_TOOL and session.think_tool
    return tools.definitions(web=research.web is not None, think=think)


def _stop_note(session: ThinkingSession, reading: parsing.ThoughtReply) -> str:
    why = reading.parts.get("reasoning") or reading.parts.get("analysis") or ""
    why = why or (reading.thoughts[0].text if reading.thoughts else "")
    note = (
        f"Stopped early after {session.active_seconds:.0f}s of "
        f"{session.budget_seconds:.0f}s: the model signalled that its understanding "
        "was sufficient."
    )
    return f"{note} Its reasoning: {why[:600]}" if why else note


@database_sync_to_async
def _store_thoughts(
    session: ThinkingSession,
    focus: Focus,
    reading: parsing.ThoughtReply,
    replies: list[Reply],
    scratch: list[str],
    meter: Meter,
    worker_id: str,
) -> tuple[ThinkingSession, SessionEvent]:
    with transaction.atomic():
        session = _locked(session.pk, worker_id)
        if session.status == Status.CANCELLED:
            raise Stopped(session.pk)
        changes = _checkpoint(session, meter=meter, replies=replies)
        offset = session.active_seconds
        start = session.next_thought_sequence()
        reasoning = "\n\n".join(filter(None, (reasoning_text(r) for r in replies)))
        notes = Thought.objects.bulk_create(
            Thought(
                session=session,
                sequence=start + index,
                cycle=session.cycles,
                text=text,
                type=ThoughtType.SCRATCHPAD,
                confidence=0.0,
                time_offset_seconds=round(offset, 2),
                sub_question_id=focus.sub_question_id,
            )
            for index, text in enumerate(t for t in scratch if t)
        )
        start += len(notes)
        rows = Thought.objects.bulk_create(
            Thought(
                session=session,
                sequence=start + index,
                cycle=session.cycles,
                text=thought.text,
                type=thought.type,
                confidence=thought.confidence,
                parts=reading.parts,
                reasoning=reasoning if index == 0 else "",
                time_offset_seconds=round(offset, 2),
                sub_question_id=focus.sub_question_id,
            )
            for index, thought in enumerate(reading.thoughts)
        )
        _record_calls(session, "thoughts", replies)
        routes = dict(session.parse_routes)
        routes[reading.route] = routes.get(reading.route, 0) + 1
        changes["parse_routes"] = routes
        # A stop signal counts only once the session has consolidated at least once.
        if reading.stop_signal and session.syntheses.filter(is_final=False).exists():
            changes.update(stop_requested=True, completion_note=_stop_note(session, reading))
        parsed = reading.thoughts
        questions_changed = False
        if focus.sub_question_id is not None:
            best = max(parsed, key=lambda t: t.confidence, default=None)
            SubQuestion.objects.filter(pk=focus.sub_question_id).update(
                explored=True,
                explored_at=timezone.now(),
                answer=best.text[:MAX_ANSWER_CHARS] if best else "",
            )
            questions_changed = True
        changes.update(cycles=F("cycles") + 1, focus=focus.text)
        session = _save(session, changes)
    event = SessionEvent(
        session.pk,
        thoughts=tuple(r.sequence for r in [*notes, *rows]),
        questions=questions_changed,
    )
    return session, event


def questions_due(session: ThinkingSession, thought_count: int) -> bool:
    return thought_count - session.thoughts_at_last_questions >= settings.DEEPTHINK_QUESTIONS_EVERY


async def generate_questions(
    *,
    session: ThinkingSession,
    focus: Focus,
    llm: LLM,
    meter: Meter,
    worker_id: str,
    publish: Publish,
) -> tuple[ThinkingSession, SessionEvent]:
    recent, existing = await database_sync_to_async(
        lambda: (
            _recent(session, RECENT_THOUGHTS),
            list(session.sub_questions.values_list("text", flat=True)),
        )
    )()
    prompt = prompts.questions_prompt(
        question=session.question,
        recent=recent,
        existing=existing,
        background=session.parent_context,
    )
    reply = await ask(
        session=session,
        prompt=prompt,
        purpose="questions",
        llm=llm,
        publish=publish,
        meter=meter,
        worker_id=worker_id,
    )
    parsed = parsing.parse_questions(reply.text)
    return await _store_questions(session, focus, parsed, reply, meter, worker_id)


@database_sync_to_async
def _store_questions(
    session: ThinkingSession,
    focus: Focus,
    parsed: list[parsing.ParsedQuestion],
    reply: Reply,
    meter: Meter,
    worker_id: str,
) -> tuple[ThinkingSession, SessionEvent]:
    with transaction.atomic():
        session = _locked(session.pk, worker_id)
        if session.status == Status.CANCELLED:
            raise Stopped(session.pk)
        seen = {parsing.question_key(session.question)}
        seen.update(
            parsing.question_key(text)
            for text in session.sub_questions.values_list("text", flat=True)
        )
        new = []
        for question in parsed:
            key = parsing.question_key(question.text)
            if not key or key in seen:
                continue
            seen.add(key)
            new.append(
                SubQuestion(
                    session=session,
                    text=question.text,
                    priority=question.priority,
                    why=question.why,
                    parent_id=focus.sub_question_id,
                )
            )
        SubQuestion.objects.bulk_create(new)
        _record_calls(session, "questions", [reply])
        changes = _checkpoint(session, meter=meter, replies=[reply])
        changes["thoughts_at_last_questions"] = session.thoughts.count()
        session = _save(session, changes)
    return session, SessionEvent(session.pk, questions=bool(new))


def synthesis_due(session: ThinkingSession) -> bool:
    return session.active_seconds >= session.next_synthesis_at and not session.budget_exhausted


async def synthesise(
    *,
    session: ThinkingSession,
    llm: LLM,
    meter: Meter,
    worker_id: str,
    publish: Publish,
    final: bool = False,
    reason: str = CompletionReason.BUDGET,
) -> tuple[ThinkingSession, SessionEvent]:
    """A periodic synthesis, or with `final=True` the final answer that completes the session."""

    def gather() -> tuple[list, list, str, list[str]]:
        return (
            _recent(session, SYNTHESIS_THOUGHTS),
            _explored(session),
            _latest_synthesis_text(session),
            list(session.syntheses.order_by("sequence").values_list("text", flat=True)),
        )

    recent, explored, previous, all_syntheses = await database_sync_to_async(gather)()
    pack = evidence.evidence_pack(
        await evidence.best_sources(session.pk, settings.DEEPTHINK_EVIDENCE_SOURCES)
    )
    if final:
        prompt = prompts.final_prompt(
            question=session.question,
            background=session.parent_context,
            recent=recent,
            explored=explored,
            syntheses=all_syntheses,
            evidence=pack,
        )
    else:
        prompt = prompts.synthesis_prompt(
            question=session.question,
            background=session.parent_context,
            recent=recent,
            explored=explored,
            previous=previous,
            evidence=pack,
        )
    purpose = "final" if final else "synthesis"
    reply = await ask(
        session=session,
        prompt=prompt,
        purpose=purpose,
        llm=llm,
        publish=publish,
        meter=meter,
        worker_id=worker_id,
    )
    parsed = parsing.parse_synthesis(reply.text)
    return await _store_synthesis(session, parsed, reply, meter, worker_id, final, reason)


@database_sync_to_async
def _store_synthesis(
    session: ThinkingSession,
    parsed: parsing.ParsedSynthesis,
    reply: Reply,
    meter: Meter,
    worker_id: str,
    final: bool,
    reason: str,
) -> tuple[ThinkingSession, SessionEvent]:
    with transaction.atomic():
        session = _locked(session.pk, worker_id)
        if session.status == Status.CANCELLED:
            raise Stopped(session.pk)
        changes = _checkpoint(session, meter=meter, replies=[reply])
        synthesis = Synthesis.objects.create(
            session=session,
            sequence=session.next_synthesis_sequence(),
            text=parsed.text,
            key_insights=parsed.key_insights,
            confidence=parsed.confidence,
            remaining_questions=parsed.remaining_questions,
            time_offset_seconds=round(session.active_seconds, 2),
            is_final=final,
            reasoning=reasoning_text(reply),
        )
        _record_calls(session, "final" if final else "synthesis", [reply])
        changes["confidence_evolution"] = [*session.confidence_evolution, parsed.confidence]
        numbers = set(session.sources.values_list("number", flat=True))
        unknown = [n for n in evidence.cited_numbers(parsed.text) if n not in numbers]
        if unknown:
            changes["unknown_citations"] = F("unknown_citations") + len(unknown)
        if final:
            # Later sessions learn from this one: the answer joins the owner's knowledge base.
            knowledge.add_item(
                owner=session.owner,
                title=f"Deep Think: {session.question}"[:200],
                body=parsed.text,
                source=KnowledgeSource.SESSION,
                origin=f"session:{session.pk}",
                team=session.team,  # a shared session teaches the whole team
            )
            changes.update(
                status=Status.COMPLETED,
                completion_reason=reason,
                final_answer=parsed.text,
                final_confidence=parsed.confidence,
                finished_at=timezone.now(),
                running_since=None,
                worker_id="",
                heartbeat_at=None,
            )
            notify.schedule(session.pk)  # mail and webhook once committed (#19)
        else:
            changes["next_synthesis_at"] = (
                session.active_seconds + session.synthesis_interval_seconds
            )
        session = _save(session, changes)
    return session, SessionEvent(session.pk, synthesis=synthesis.sequence, finished=final)


# --- research ---------------------------------------------------------------------------


@database_sync_to_async
def _save_plan(
    session_id: uuid.UUID, worker_id: str, plan: planner.Plan, replies: Sequence[Reply],
    meter: Meter, *, focus_id: int | None = None,
) -> ThinkingSession:  # fmt: skip
    with transaction.atomic():
        session = _locked(session_id, worker_id)
        changes = _checkpoint(session, meter=meter, replies=replies)
        if focus_id is None:
            changes["plan"] = plan.to_json()
        else:
            # A fresh plan for a high-priority sub-question keeps the session's main plan.
            researched = [*session.plan.get("researched", []), focus_id]
            changes["plan"] = {**session.plan, "researched": researched}
        if plan.note and plan.note not in session.research_notes:
            changes["research_notes"] = [*session.research_notes, plan.note][-20:]
        _record_calls(session, "plan", replies)
        return _save(session, changes)


async def plan_research(
    *,
    session: ThinkingSession,
    llm: LLM,
    meter: Meter,
    worker_id: str,
    publish: Publish,
    research: evidence.Research,
    focus: Focus | None = None,
) -> ThinkingSession:
    """Plan (the model, else a heuristic), then search memory and the web in parallel."""
    subject = focus.text if focus else session.question
    stable, variable = planner.plan_prompt(
        session.question, focus=focus.text if focus and focus.sub_question_id else ""
    )
    replies: list[Reply] = []
    try:
        reply = await ask(
            session=session,
            prompt=prompts.Prompt(stable, variable),
            purpose="plan",
            llm=llm,
            publish=publish,
            meter=meter,
            worker_id=worker_id,
        )
        replies.append(reply)
        plan = planner.parse_plan(reply.text) or planner.heuristic_plan(subject)
    except LLMError as error:
        if error.kind in ("auth", "not_configured"):
            raise  # no point thinking without a model
        plan = planner.heuristic_plan(
            subject, reason=f"Planning with the model failed ({error}); a simple plan was used."
        )
    session = await _save_plan(
        session.pk,
        worker_id,
        plan,
        replies,
        meter,
        focus_id=focus.sub_question_id if focus else None,
    )
    await _publish(publish, SessionEvent(session.pk, plan=True))

    async def show(sources: list) -> None:
        await _publish(publish, SessionEvent(session.pk, sources=True))

    await evidence.gather(
        session_id=session.pk,
        research=research,
        web_queries=plan.web_queries,
        memory_queries=plan.memory_queries,
        on_sources=show,
    )
    await _publish(publish, SessionEvent(session.pk, plan=True, sources=True))
    return await database_sync_to_async(lambda: ThinkingSession.objects.get(pk=session.pk))()


def replan_due(session: ThinkingSession, focus: Focus) -> bool:
    """A high-priority sub-question that becomes the focus gets its own research, a few times
    per session."""
    if focus.sub_question_id is None:
        return False
    researched = session.plan.get("researched", [])
    return (
        len(researched) < settings.DEEPTHINK_REPLANS
        and focus.sub_question_id not in researched
        and focus.priority >= settings.DEEPTHINK_REPLAN_PRIORITY
    )


# --- the loop --------------------------------------------------------------------------


def ending_reason(session: ThinkingSession) -> str:
    """Why the session should go to its final synthesis now; empty while it should go on."""
    if session.stop_requested:
        return CompletionReason.STOP_SIGNAL
    if session.over_token_ceiling:
        return CompletionReason.TOKEN_CEILING
    if session.budget_exhausted:
        return CompletionReason.BUDGET
    return ""


async def _publish(publish: Publish, event: SessionEvent) -> None:
    # A lost live update is recovered from the database on reconnect; it must never
    # stop the thinking.
    try:
        await publish(event)
    except Exception:
        logger.exception("Could not publish an update for session %s", event.session_id)


async def deliberate(
    session: ThinkingSession,
    *,
    llm: LLM,
    publish: Publish,
    worker_id: str,
    meter: Meter,
    research: evidence.Research,
) -> str:
    """plan -> research -> [focus -> (research) -> thoughts -> questions? -> synthesis?]* ->
    final. Returns the status the session stopped in."""
    steps = {"llm": llm, "meter": meter, "worker_id": worker_id, "publish": publish}
    if not session.plan:
        session = await plan_research(session=session, research=research, **steps)
    while True:
        status = await current_status(session.pk, worker_id=worker_id)
        if status in (Status.PAUSED, Status.CANCELLED):
            session = await stop_running(session.pk, worker_id=worker_id, meter=meter)
            await _publish(publish, SessionEvent(session.pk, finished=session.is_finished))
            return session.status
        if ending_reason(session):
            break
        focus = await select_focus(session=session)
        if replan_due(session, focus):
            session = await plan_research(session=session, research=research, focus=focus, **steps)
        session, event = await generate_thoughts(
            session=session, focus=focus, research=research, **steps
        )
        await _publish(publish, event)
        thought_count = await database_sync_to_async(session.thoughts.count)()
        if questions_due(session, thought_count):
            session, event = await generate_questions(session=session, focus=focus, **steps)
            await _publish(publish, event)
        if ending_reason(session):
            break
        if synthesis_due(session):
            session, event = await synthesise(session=session, **steps)
            await _publish(publish, event)
    session, event = await synthesise(
        session=session, final=True, reason=ending_reason(session), **steps
    )
    await _publish(publish, event)
    return session.status


async def run_session(
    session_id: uuid.UUID, *, llm: LLM, publish: Publish, worker_id: str
) -> str | None:
    """Run a claimed session until it completes, pauses, is cancelled or fails.

    Returns the status it stopped in, or None if it was not runnable or the lease was lost.
    Everything stored before an error stays stored.
    """
    meter = Meter()
    session = await begin(session_id, worker_id=worker_id)
    if session is None:
        return None
    await _publish(publish, SessionEvent(session.pk))
    research = await database_sync_to_async(evidence.Research.for_session)(session)
    try:
        return await deliberate(
            session,
            llm=llm,
            publish=publish,
            worker_id=worker_id,
            meter=meter,
            research=research,
        )
    except asyncio.CancelledError:
        # The worker is shutting down: the step in flight is dropped (its rows were not
        # committed) and the lease released, so another worker continues at once from the
        # last stored step.
        await asyncio.shield(release_lease(session_id, worker_id=worker_id))
        raise
    except LeaseLost:
        logger.warning("Session %s was taken over by another worker; stopping", session_id)
        return None
    except Stopped:
        session = await stop_running(session_id, worker_id=worker_id, meter=meter)
        await _publish(publish, SessionEvent(session.pk, finished=True))
        return session.status
    except LLMError as error:
        failed = await fail(session_id, worker_id=worker_id, meter=meter, message=str(error))
    except Exception:
        logger.exception("Session %s failed", session_id)
        failed = await fail(
            session_id,
            worker_id=worker_id,
            meter=meter,
            message="Deep Think hit an internal error; the details are in the server log.",
        )
    finally:
        await research.close()
    if failed is None:
        return None
    await _publish(publish, SessionEvent(failed.pk, finished=True))
    return failed.status
