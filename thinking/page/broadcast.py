"""Render partials for the live stream and send them to the session's group.

The only module that turns loop events into HTML. A live message carries what changed (the
new thoughts, the sub-questions that moved, the new sources), appended or patched in place
by id, so its size never grows with the session. A page that missed updates catches up in
bounded chunks (`catch_up`), by region and by sequence range. Each part is tagged with the
row it shows, so a consumer drops what its page already has and never shows a row twice.
"""

from __future__ import annotations

import collections
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.contrib.auth.models import AnonymousUser
from django.template.loader import render_to_string

from config.hops import db_hop
from thinking.events import SessionEvent
from thinking.models import Source, SubQuestion, ThinkingSession, Thought, ThoughtType
from thinking.page.presenters import (
    NOTE_PAGE,
    THOUGHT_PAGE,
    Tally,
    chart_context,
    header_context,
    notes_summary_context,
    plan_context,
    source_numbers,
    sources_summary_context,
    steer_context,
    sub_question_slot,
    tally,
    thought_page,
    thought_rows,
)
from thinking.page.watchers import has_members
from thinking.state import QuestionRows, SourceRows, UpdateMessage, UpdatePart

# What one WebSocket message may carry. Rows are never split: a single row bigger than this
# (a very long answer) goes alone, so a message is at most max(budget, one row).
MESSAGE_BUDGET = 32 * 1024


def group_name(session_id: uuid.UUID | str) -> str:
    return f"session-{session_id}"


def _render(template: str, context: dict[str, Any]) -> str:
    return render_to_string(f"thinking/{template}", context)


LIVE_LABELS = {
    "plan": "the research plan",
    "rerank": "re-ranking the sub-questions",
    "thoughts": "new thoughts",
    "questions": "new sub-questions",
    "synthesis": "a synthesis",
    "final": "the final answer",
}
LIVE_TEXT_CHARS = 4000  # the tail of the reasoning so far: enough to follow, small to send


def render_live(event: SessionEvent) -> UpdateMessage:
    """A step in flight: only the live panel changes."""
    live = event.live
    assert live is not None
    shown = replace(live, reasoning=live.reasoning[-LIVE_TEXT_CHARS:])
    context = {"live": shown, "live_label": LIVE_LABELS.get(live.purpose, ""), "oob": True}
    html = _render("_live.html", context)
    return {"type": "session.update", "parts": [{"kind": "replace", "html": html}]}


def _owner_of(session: ThinkingSession) -> Any:
    """Stands in for the owner when rendering their variant: only `pk` is read."""
    owner = AnonymousUser()
    owner.pk = owner.id = session.owner_id  # type: ignore[assignment]
    return owner


# The owner's controls in _header.html, between these marks.
OWNER_ONLY = re.compile(r"<!--owner-only-->.*?<!--/owner-only-->", re.DOTALL)


def render_header(session: ThinkingSession, counts: Tally | None = None) -> UpdatePart:
    """The header for each role: the owner's has Cancel, a teammate's does not. Rendered once
    (the header is the costliest partial of a step: counts and a dozen fields), and the
    teammate's is the owner's without the owner-only controls."""
    context = header_context(session, _owner_of(session), counts)
    html = _render("_header.html", {**context, "oob": True})
    return {"kind": "header", "html": html, "html_member": OWNER_ONLY.sub("", html)}


def header_for(part: UpdatePart, owner: bool) -> str:
    return part["html"] if owner else part["html_member"]


def _thought_part(
    thought: Thought, numbers: AbstractSet[int], *, show_parts: bool, session: ThinkingSession
) -> UpdatePart:
    if thought.type == ThoughtType.SCRATCHPAD:
        html = _render("_note.html", {"thought": thought, "append_to": "scratchpad-list"})
    else:
        context = {
            "session": session,
            "thought": thought,
            "append_to": "thought-list",
            "show_parts": show_parts,
            "source_numbers": numbers,
        }
        html = _render("_thought.html", context)
    return {"kind": "thought", "seq": thought.sequence, "html": html}


def _regions(
    session: ThinkingSession, numbers: AbstractSet[int], *, plan: bool, finished: bool = False
) -> list[UpdatePart]:
    base = {"session": session, "oob": True, "source_numbers": numbers}
    parts: list[UpdatePart] = []
    if plan:
        html = _render("_plan.html", {**base, **plan_context(session)})
        parts.append({"kind": "replace", "html": html})
    if finished:
        parts.append({"kind": "replace", "html": _render("_answer.html", base)})
        parts.append({"kind": "replace", "html": _render("_live.html", base)})
        parts.append({"kind": "replace", "html": _render("_steer.html", steer_context(session))})
    return parts


# --- what this process last sent a session's group -------------------------------------


@dataclass
class Sent:
    """The newest source and the sub-question states the last message of a session took its
    pages to, so the next one renders only what changed since, once for all of them."""

    source: int
    questions: dict[int, str]


SENT_SESSIONS = 1024  # sessions remembered per process; a forgotten one starts over
_sent: collections.OrderedDict[uuid.UUID, Sent] = collections.OrderedDict()
_sent_lock = threading.Lock()


def _last_sent(session_id: uuid.UUID) -> Sent | None:
    with _sent_lock:
        sent = _sent.get(session_id)
        if sent is not None:
            _sent.move_to_end(session_id)
        return sent


def _remember(session_id: uuid.UUID, sent: Sent) -> None:
    with _sent_lock:
        _sent[session_id] = sent
        _sent.move_to_end(session_id)
        while len(_sent) > SENT_SESSIONS:
            _sent.popitem(last=False)


def _forget(session_id: uuid.UUID) -> None:
    with _sent_lock:
        _sent.pop(session_id, None)


# What the plan region (_plan.html, `plan_context`) reads of the session.
PLAN_FIELDS = ("status", "plan", "progress", "stage_count", "research_enabled", "research_notes")


def render_event(event: SessionEvent) -> UpdateMessage:
    """The group message for one event: what changed, never whole lists.

    New sources and changed sub-questions are rendered once here for every page, from what
    this process last sent the group (`Sent`), and say what they start from; each consumer
    keeps what its page lacks. A page behind that (it missed a message, or another process
    sent one) reads its own (`sources_after`, `sub_question_changes`), so nothing is missed.
    """
    if event.live is not None:
        return render_live(event)
    sent = _last_sent(event.session_id)
    if not (event.header or event.finished or sent is None):
        # A stage entered: the plan region is all that changed (half of a cycle's events),
        # drawn from the few fields it shows.
        session = ThinkingSession.objects.only(*PLAN_FIELDS).get(pk=event.session_id)
        if not session.is_finished:
            return {"type": "session.update", "parts": _regions(session, set(), plan=True)}
    session = ThinkingSession.objects.get(pk=event.session_id)
    thoughts = _event_thoughts(session, event.thoughts)
    visible = [t for t in thoughts if t.type != ThoughtType.SCRATCHPAD]
    # The sub-questions these thoughts were on may just have been explored.
    moves = event.questions or any(t.sub_question_id is not None for t in visible)
    finished = event.finished or session.is_finished
    counts = tally(session.pk)
    numbers = source_numbers(session, counts)
    states, parents = sub_questions_now(session.pk) if moves or sent is None else ({}, {})
    if sent is None:
        # New to this process: what pages have now is the base.
        sent = Sent(numbers.top, states)
    parts: list[UpdatePart] = [render_header(session, counts)]
    # A cycle's parts show once, under its first thought (as on a reload); an event may carry
    # several cycles when the publisher sent steps that waited together as one.
    opens = {row["thought"].pk for row in thought_rows(visible) if row["show_parts"]}
    for thought in thoughts:
        parts.append(
            _thought_part(thought, numbers, show_parts=thought.pk in opens, session=session)
        )
    if len(visible) < len(thoughts):
        summary = {**notes_summary_context(session), "oob": True}
        parts.append({"kind": "replace", "html": _render("_scratchpad_summary.html", summary)})
    if event.synthesis is not None:
        synthesis = session.syntheses.get(sequence=event.synthesis)
        context = {"synthesis": synthesis, "append_to": "synthesis-list", "source_numbers": numbers}
        html = _render("_synthesis.html", context)
        parts.append({"kind": "synthesis", "seq": synthesis.sequence, "html": html})
        chart = {"oob": True, **chart_context(session)}
        parts.append({"kind": "replace", "html": _render("_confidence.html", chart)})
    if event.checked is not None:
        # Citation verdicts arrived: the synthesis is re-rendered in place with its marks,
        # and the answer (its unsupported claims) if the session is done.
        synthesis = session.syntheses.get(sequence=event.checked)
        context = {"synthesis": synthesis, "replace_row": True, "source_numbers": numbers}
        parts.append({"kind": "replace", "html": _render("_synthesis.html", context)})
    draws_plan = event.plan or event.sources or finished
    parts += _regions(session, numbers, plan=draws_plan, finished=finished)
    message: UpdateMessage = {"type": "session.update", "parts": parts}
    if event.sources or event.synthesis is not None or finished:
        message["sources"] = _source_rows(session, sent.source, numbers.top)
        sent = replace(sent, source=numbers.top)
    if moves:
        message["questions"] = _question_rows(sent.questions, states, parents)
        sent = replace(sent, questions=states)
    _remember(session.pk, sent)
    return message


def _event_thoughts(session: ThinkingSession, sequences: Iterable[int]) -> list[Thought]:
    """The thoughts an event names, in order, each with the sub-question it was on. Most
    full updates carry none (a synthesis, its check, sources, sub-questions): no query."""
    wanted = set(sequences)
    if not wanted:
        return []
    rows = session.thoughts.filter(sequence__in=wanted).select_related("sub_question")
    return list(rows.order_by("sequence"))


# A live message carries at most this many new sources (a research wave finds ~30); a page
# further behind reads its own, as after a gap.
LIVE_SOURCE_ROWS = 100


def _source_rows(session: ThinkingSession, after: int, top: int) -> SourceRows:
    """Every source numbered above `after` (at most LIVE_SOURCE_ROWS, the newest: a page
    further behind reads its own), and the summary line if there are any."""
    after = max(min(after, top), top - LIVE_SOURCE_ROWS)
    rows, summary = _sources_above(session, after)
    return {
        "after": after,
        "rows": [{"kind": "source", "seq": s.number, "html": _source_html(s)} for s in rows],
        "summary": summary,
    }


def _question_rows(
    known: dict[int, str], states: dict[int, str], parents: dict[int, int | None]
) -> QuestionRows:
    """The sub-questions new or moved since the states `known` (what the last message left
    pages with), each with the state it moves from, and every row's state now."""
    new = sorted(pk for pk in states if pk not in known)
    moved = sorted(pk for pk in states if pk in known and known[pk] != states[pk])
    wanted = SubQuestion.objects.in_bulk([*new, *moved]) if new or moved else {}
    rows: list[UpdatePart] = [
        {"kind": "question", "seq": pk, "html": _new_question_html(wanted[pk], parents)}
        for pk in new
        if pk in wanted
    ]
    rows += [
        {"kind": "subq", "seq": pk, "before": known[pk], "html": _question_row_html(wanted[pk])}
        for pk in moved
        if pk in wanted
    ]
    return {"states": list(states.items()), "rows": rows}


# --- per-page deltas: new sources, moved sub-questions ----------------------------------


def _source_html(source: Source) -> str:
    return _render("_source.html", {"s": source, "append_to": "source-list"})


def _new_question_html(question: SubQuestion, parents: Mapping[int, int | None]) -> str:
    context: dict[str, object] = {"node": {"question": question, "children": []}}
    context["append_to"] = sub_question_slot(question, parents)
    return _render("_sub_question.html", context)


def _question_row_html(question: SubQuestion) -> str:
    return _render("_sub_question_row.html", {"q": question, "oob": True})


def sources_after(session_id: uuid.UUID, number: int) -> tuple[list[str], int]:
    """Sources numbered above `number`, one appendable row each, and the summary line.
    Returns the HTML pieces and the highest number sent."""
    rows, summary = _sources_above(ThinkingSession.objects.get(pk=session_id), number)
    pieces = [_source_html(s) for s in rows] + ([summary] if rows else [])
    return pieces, max([number, *(s.number for s in rows)])


def _sources_above(session: ThinkingSession, number: int) -> tuple[list[Source], str]:
    """The session's sources numbered above `number`, in order, and the summary line ("" when
    there are none): what both the group's rows and a page's own gap read send."""
    rows = list(session.sources.filter(number__gt=number).order_by("number"))
    if not rows:
        return rows, ""
    context = {**sources_summary_context(session), "oob": True}
    return rows, _render("_sources_summary.html", context)


def sub_questions_now(session_id: uuid.UUID) -> tuple[dict[int, str], dict[int, int | None]]:
    """Each sub-question's state, "explored:priority" (explored 0 or 1): what its row shows
    that can change; and its parent, which places a new row in the tree. One read."""
    rows = SubQuestion.objects.filter(session_id=session_id).order_by()
    states: dict[int, str] = {}
    parents: dict[int, int | None] = {}
    for pk, explored, priority, parent in rows.values_list(
        "pk", "explored", "priority", "parent_id"
    ):
        states[pk] = f"{int(explored)}:{priority}"
        parents[pk] = parent
    return states, parents


def sub_question_changes(
    session_id: uuid.UUID,
    known: dict[int, str],
    *,
    all_new_above: int | None = None,
    shown: AbstractSet[int] | None = None,
) -> tuple[list[str], dict[int, str]]:
    """Rows for sub-questions the page lacks (appended where the tree puts them, oldest
    first so a parent is always there before its follow-ups) and rows whose state moved
    (patched in place; in a catch-up, only of those `shown`, when the page said). Returns
    the HTML pieces and the states the page now has."""
    states, parents = sub_questions_now(session_id)
    if all_new_above is not None:  # a catch-up: the page has ids up to this, maybe stale
        new = [pk for pk in states if pk > all_new_above]
        # Rows the page may show stale: explored, or re-ranked since they were added.
        rows = SubQuestion.objects.filter(session_id=session_id, pk__lte=all_new_above)
        if shown is not None:
            rows = rows.filter(pk__in=shown)
        moved = sorted(
            pk
            for pk, explored, priority, initial in rows.order_by().values_list(
                "pk", "explored", "priority", "initial_priority"
            )
            if explored or (initial is not None and priority != initial)
        )
    else:
        new = [pk for pk in states if pk not in known]
        moved = [pk for pk in states if pk in known and known[pk] != states[pk]]
    wanted = SubQuestion.objects.in_bulk([*new, *moved]) if new or moved else {}
    pieces = [_new_question_html(wanted[pk], parents) for pk in sorted(new) if pk in wanted]
    pieces += [_question_row_html(wanted[pk]) for pk in sorted(moved) if pk in wanted]
    return pieces, states


# --- catch-up ------------------------------------------------------------------------------


@dataclass
class PageMarks:
    """What a page already shows: the highest id of each list (from its DOM)."""

    thought: int = -1
    synthesis: int = -1
    source: int = 0
    question: int = 0
    # The sub-questions it shows (a long session's page shows the first ones only): the
    # catch-up redraws those, not every row that ever moved. None: not said, all of them.
    shown_questions: frozenset[int] | None = None


@dataclass
class CatchUp:
    """What the page will have once caught up, and the sections that bring it there."""

    thoughts: set[int] = field(default_factory=set)
    syntheses: set[int] = field(default_factory=set)
    source: int = 0
    questions: dict[int, str] = field(default_factory=dict)
    sections: list[Callable[[], list[str]]] = field(default_factory=list)


def chunks(pieces: Iterable[str], budget: int = MESSAGE_BUDGET) -> Iterator[str]:
    """Pieces joined into messages of at most `budget` bytes (a bigger piece goes alone)."""
    batch: list[str] = []
    size = 0
    for piece in pieces:
        length = len(piece.encode())
        if batch and size + length > budget:
            yield "".join(batch)
            batch, size = [], 0
        batch.append(piece)
        size += length
    if batch:
        yield "".join(batch)


def catch_up(
    session_id: uuid.UUID, revision: int | None, marks: PageMarks, *, owner: bool
) -> CatchUp:
    """What a page missed, as sections rendered one at a time (each a list of pieces the
    consumer sends in bounded messages): the small regions first, then each list from where
    the page's stops, and the header (with the revision) last, so a page that lost the
    connection midway asks again. A page at the current `revision` gets no sections; only
    what it has is recorded."""
    session = ThinkingSession.objects.get(pk=session_id)
    numbers = source_numbers(session)
    result = CatchUp(
        thoughts=set(session.thoughts.values_list("sequence", flat=True)),
        syntheses=set(session.syntheses.values_list("sequence", flat=True)),
        source=numbers.top,
        questions=sub_questions_now(session_id)[0],
    )
    # Read after the rows: if the revision still is the page's, so were the rows (a stored
    # change bumps the revision in its own transaction), and the page has them all.
    current = ThinkingSession.objects.values_list("revision", flat=True).get(pk=session_id)
    if revision == current:
        return result
    base = {"session": session, "oob": True, "source_numbers": numbers}
    visible = session.thoughts.exclude(type=ThoughtType.SCRATCHPAD)

    def regions() -> list[str]:
        # The steering card only once the session has ended: sent while it can be used, it
        # would wipe what the person was typing (the page hides the form on its own when
        # the header says the session ended).
        ended = [_render("_steer.html", steer_context(session))] if session.is_finished else []
        return [
            _render("_live.html", base),
            _render("_plan.html", {**base, **plan_context(session)}),
            _render("_answer.html", base),
            *ended,
            _render("_confidence.html", {"oob": True, **chart_context(session)}),
        ]

    def thoughts() -> list[str]:
        # What came after the page's last thought; if that is more than a page, the list
        # starts over with the newest page (older ones load on demand).
        missed = visible.filter(sequence__gt=marks.thought)
        pieces = []
        if missed.count() > THOUGHT_PAGE:
            page = thought_page(session)
            shell = {**page, "thought_rows": [], "session": session, "oob": True}
            pieces.append(_render("_thought_list.html", shell))
            rows = page["thought_rows"]
        else:
            before = visible.filter(sequence__lte=marks.thought).order_by("-sequence").first()
            rows = thought_rows(list(missed.select_related("sub_question")), before)
        for row in rows:
            part = _thought_part(
                row["thought"], numbers, show_parts=row["show_parts"], session=session
            )
            pieces.append(part["html"])
            result.thoughts.add(part["seq"])  # stored since the state was read: seen now
        return pieces

    def notes() -> list[str]:
        missed = session.thoughts.filter(type=ThoughtType.SCRATCHPAD, sequence__gt=marks.thought)
        shown = list(missed.order_by("-sequence")[:NOTE_PAGE])[::-1]
        result.thoughts.update(note.sequence for note in shown)
        pieces = [
            _thought_part(note, numbers, show_parts=False, session=session)["html"]
            for note in shown
        ]
        summary = {**notes_summary_context(session), "oob": True}
        return [*pieces, _render("_scratchpad_summary.html", summary)]

    # Each section records what it sent beyond the state read above, so a live message
    # about the same rows is not applied twice.
    def sources() -> list[str]:
        pieces, top = sources_after(session_id, marks.source)
        result.source = max(result.source, top)
        return pieces

    def questions() -> list[str]:
        pieces, result.questions = sub_question_changes(
            session_id, {}, all_new_above=marks.question, shown=marks.shown_questions
        )
        return pieces

    def syntheses() -> list[str]:
        after = session.syntheses.filter(sequence__gt=marks.synthesis)
        missed = list(after.prefetch_related("citation_checks"))
        result.syntheses.update(synthesis.sequence for synthesis in missed)
        return [
            _render(
                "_synthesis.html",
                {"synthesis": synthesis, "append_to": "synthesis-list", "source_numbers": numbers},
            )
            for synthesis in missed
        ]

    def header() -> list[str]:
        fresh = ThinkingSession.objects.get(pk=session_id)
        return [header_for(render_header(fresh), owner)]

    result.sections = [regions, thoughts, notes, sources, questions, syntheses, header]
    return result


async def publish(event: SessionEvent) -> None:
    """Render the event and send it to the session's pages, if any page is watching.

    Most of a long session's steps have no page open: rendering them would be half of a
    step's CPU for nobody. A page that opens later catches up from the database. What this
    process last sent is forgotten: the next message takes the session as it is then for
    its base, and a page that opened meanwhile reads what it lacks itself, once.

    A stored step is rendered in a database hop (its reads and templates off the event
    loop). A step in flight reads nothing: it is drawn on the event loop itself, so the
    reasoning streaming in does not wait behind the database (its hops, a stalled
    connection)."""
    layer = get_channel_layer()
    group = group_name(event.session_id)
    if not await has_members(group):
        _forget(event.session_id)
        return
    if event.live is not None:
        message = render_live(event)
    else:
        message = await db_hop(render_event)(event)
    await layer.group_send(group, message)


def publish_sync(event: SessionEvent) -> None:
    """For views: a state change made by a person shows on every open page at once."""
    message = render_event(event)
    async_to_sync(get_channel_layer().group_send)(group_name(event.session_id), message)
