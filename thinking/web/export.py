"""The session as one JSON-ready document (the CLI's --json, the API's export) and as a
Markdown report people can keep.

Fields are only ever added, never renamed. Nothing server-private goes in: not the worker
lease, and never ModelCall.content (it holds thinking signatures).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator
from typing import Any
from urllib.parse import quote, urlsplit

from asgiref.sync import sync_to_async
from django.core.handlers.asgi import ASGIRequest
from django.db.models import Count
from django.http import HttpRequest
from django.utils.translation import ngettext

from thinking.deliberation import stages
from thinking.deliberation.citations import MARKS, check_rows, find_citations, session_counts
from thinking.formatting import counted, duration, percent
from thinking.models import Source, SubQuestion, Synthesis, ThinkingSession, Thought, ThoughtType

CHUNK = 500  # rows read at a time while a long list is written

MODEL_CALL_COLUMNS = (
    "purpose",
    "model",
    "thinking_mode",
    "stop_reason",
    "duration_ms",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cost_usd",
    "created_at",
)


# One row function per kind, shared by the JSON document and the API's incremental reads.


def thought_row(t: Thought) -> dict[str, Any]:
    return {
        "sequence": t.sequence,
        "cycle": t.cycle,
        "type": t.type,
        "text": t.text,
        "confidence": t.confidence,
        "parts": t.parts if isinstance(t.parts, dict) else {},
        "reasoning": t.reasoning or None,
        "time_offset_seconds": t.time_offset_seconds,
        "sub_question": t.sub_question.text if t.sub_question else None,
        "sub_question_id": t.sub_question_id,
        "created_at": t.created_at.isoformat(),
    }


def sub_question_row(q: SubQuestion) -> dict[str, Any]:
    return {
        "text": q.text,
        "priority": q.priority,
        "initial_priority": q.initial_priority if q.initial_priority is not None else q.priority,
        "priority_changes": list(q.priority_changes),
        "why": q.why,
        "explored": q.explored,
        "answer": q.answer or None,
        "parent": q.parent.text if q.parent else None,
        "id": q.pk,
        "parent_id": q.parent_id,
        "explored_at": q.explored_at.isoformat() if q.explored_at else None,
        "created_at": q.created_at.isoformat(),
    }


def synthesis_row(s: Synthesis) -> dict[str, Any]:
    return {
        "sequence": s.sequence,
        "text": s.text,
        "key_insights": s.key_insights,
        "confidence": s.confidence,
        "remaining_questions": s.remaining_questions,
        "time_offset_seconds": s.time_offset_seconds,
        "is_final": s.is_final,
        "reasoning": s.reasoning or None,
        "created_at": s.created_at.isoformat(),
        # Each cited claim judged against the cited source's passage
        # (thinking/deliberation/citations.py).
        "citation_checks": check_rows(s),
    }


def source_row(s: Source) -> dict[str, Any]:
    return {
        "number": s.number,
        "kind": s.kind,
        "title": s.title,
        "url": s.url or None,
        "snippet": s.snippet,
        "score": s.score,
        "query": s.query,
        "found_by": s.found_by or "plan",
        "created_at": s.created_at.isoformat(),
    }


TOOLS = (
    ("plan", "Plan searches"),
    ("web_search", "The model's web_search"),
    ("memory_search", "The model's memory_search"),
)


def reference_summary(session: ThinkingSession) -> list[dict[str, Any]]:
    """Per search tool: searches run, new sources found, known sources found again."""
    tally = session.search_tally if isinstance(session.search_tally, dict) else {}
    rows = []
    for tool, label in TOOLS:
        row = tally.get(tool) or {}
        if row:
            rows.append(
                {
                    "tool": tool,
                    "label": label,
                    "searches": int(row.get("searches", 0)),
                    "new": int(row.get("new", 0)),
                    "known": int(row.get("known", 0)),
                }
            )
    return rows


def model_usage(session: ThinkingSession) -> list[dict[str, Any]]:
    """Calls, tokens and cost (each call at its model's list price) per model."""
    return [
        {
            "model": model,
            "calls": spent.calls,
            "input_tokens": spent.input,
            "output_tokens": spent.output,
            "cache_read_tokens": spent.cache_read,
            "cache_write_tokens": spent.cache_write,
            "total_tokens": spent.tokens,
            "cost_usd": spent.cost,
        }
        for model, spent in session.model_usage
    ]


class Rows:
    """A list of the document read row by row when it is written (`document_chunks`), so a
    long session's export never holds all its rows at once."""

    def __init__(self, rows: Callable[[], Iterable[dict[str, Any]]]) -> None:
        self.rows = rows

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.rows())


def _document(session: ThinkingSession) -> dict[str, Any]:
    """The document, its long lists as `Rows`."""
    return {
        "id": str(session.pk),
        "status": session.status,
        "completion_reason": session.completion_reason or None,
        "error": session.error_message or None,
        "question": session.question,
        "model": session.model_id,
        "thinking": {
            "mode": session.thinking_mode,
            "budget_tokens": session.thinking_budget,
            "effort": session.effort or None,
            "max_tokens": session.max_tokens,
            "token_ceiling": session.token_ceiling,
        },
        "format_mode": session.format_mode,
        "completion_note": session.completion_note or None,
        "parse_routes": session.parse_routes,
        "format_errors": list(session.format_errors),
        "stages": stages.served(session),
        "research": session.research_enabled,
        "web": session.web_enabled,
        "web_search": list(session.web_search),
        "include_domains": list(session.include_domains),
        "exclude_domains": list(session.exclude_domains),
        "search_recency": session.search_recency,
        "language": session.language,
        "budget_seconds": session.budget_seconds,
        "active_seconds": round(session.active_seconds, 3),
        "created_at": session.created_at.isoformat(),
        "started_at": session.started_at.isoformat() if session.started_at else None,
        "finished_at": session.finished_at.isoformat() if session.finished_at else None,
        "thoughts": Rows(
            lambda: (
                thought_row(t)
                for t in session.thoughts.select_related("sub_question").iterator(CHUNK)
            )
        ),
        "sub_questions": Rows(
            lambda: (
                sub_question_row(q)
                for q in session.sub_questions.select_related("parent").iterator(CHUNK)
            )
        ),
        "syntheses": Rows(
            lambda: (
                synthesis_row(s)
                for s in session.syntheses.prefetch_related("citation_checks").iterator(100)
            )
        ),
        # Think longer (#19): every final answer, oldest first; the last is the current one.
        "answer_versions": [
            synthesis_row(s) for s in session.syntheses.filter(is_final=True).order_by("sequence")
        ],
        "parent": str(session.parent_id) if session.parent_id else None,
        "children": [str(pk) for pk in session.children.values_list("pk", flat=True)],
        "final_answer": session.final_answer or None,
        "final_confidence": session.final_confidence,
        "confidence_evolution": session.confidence_evolution,
        "usage": {
            "input_tokens": session.input_tokens,
            "output_tokens": session.output_tokens,
            "cache_read_tokens": session.cache_read_tokens,
            "cache_write_tokens": session.cache_write_tokens,
            "estimated_cost_usd": session.estimated_cost,
            "by_model": model_usage(session),
        },
        "synthesis_interval_seconds": session.synthesis_interval_seconds,
        "format_spec": session.format_spec,
        "cycles": session.cycles,
        "plan": session.plan,
        "research_notes": session.research_notes,
        "unknown_citations": session.unknown_citations,
        "reference_summary": reference_summary(session),
        "citation_check_counts": session_counts(session),
        "sources": Rows(lambda: (source_row(s) for s in session.sources.iterator(CHUNK))),
        # Usage per call, for accounting. Only these columns: `content` stays on the server.
        "model_calls": Rows(
            lambda: (
                {
                    "purpose": c["purpose"],
                    "model": c["model"],
                    "thinking_mode": c["thinking_mode"],
                    "stop_reason": c["stop_reason"],
                    "duration_ms": c["duration_ms"],
                    "input_tokens": c["input_tokens"],
                    "output_tokens": c["output_tokens"],
                    "cache_read_tokens": c["cache_read_tokens"],
                    "cache_write_tokens": c["cache_write_tokens"],
                    "cost_usd": None if c["cost_usd"] is None else float(c["cost_usd"]),
                    "created_at": c["created_at"].isoformat(),
                }
                for c in session.model_calls.values(*MODEL_CALL_COLUMNS).iterator(CHUNK)
            )
        ),
    }


def session_document(session: ThinkingSession) -> dict[str, Any]:
    """The whole document in memory (the CLI's --json, tests); a download streams
    `document_chunks` instead."""
    return {
        key: list(value) if isinstance(value, Rows) else value
        for key, value in _document(session).items()
    }


def document_chunks(session: ThinkingSession) -> Iterator[str]:
    """The JSON document as text, a row at a time: the same JSON as `session_document`."""
    yield "{"
    for number, (key, value) in enumerate(_document(session).items()):
        yield f"{', ' if number else ''}{json.dumps(key)}: "
        if isinstance(value, Rows):
            yield "["
            for index, row in enumerate(value):
                yield f"{', ' if index else ''}{json.dumps(row)}"
            yield "]"
        else:
            yield json.dumps(value)
    yield "}"


def streamed(request: HttpRequest, chunks: Generator[str]) -> Iterator[str] | AsyncIterator[str]:
    """The chunks for a StreamingHttpResponse. Under ASGI, an async iterator that reads each
    chunk in the request's thread (given a plain iterator, Django's ASGI handler would read it
    whole before sending a byte); under WSGI, the chunks themselves."""
    if isinstance(request, ASGIRequest):
        return _read_in_thread(chunks)
    return chunks


async def _read_in_thread(chunks: Generator[str]) -> AsyncIterator[str]:
    def read() -> str | None:
        return next(chunks, None)

    try:
        while (chunk := await sync_to_async(read)()) is not None:
            yield chunk
    finally:
        await sync_to_async(chunks.close)()  # its open cursor, if the client went away


def batched_text(chunks: Iterable[str], size: int = 64 * 1024) -> Generator[str]:
    """Small pieces of text joined into pieces of about `size` characters, for a stream."""
    pending: list[str] = []
    length = 0
    for chunk in chunks:
        pending.append(chunk)
        length += len(chunk)
        if length >= size:
            yield "".join(pending)
            pending, length = [], 0
    if pending:
        yield "".join(pending)


# --- Markdown report ------------------------------------------------------------------
# Model and web text is untrusted, and a report is often rendered (GitHub, a wiki, an
# editor's preview). So untrusted text gets no raw HTML (`<` becomes `&lt;`) and no links or
# images of its own (brackets are escaped); the only links are the ones written here, to the
# session's own http(s) sources.

_URL_SAFE = "!#$%&'()*+,-./:;=?@[]_~"


def _inert(text: str) -> str:
    """Untrusted text that renders as itself: no HTML, no links, no images."""
    # Backslashes first, so text cannot un-escape the brackets escaped after it.
    return text.replace("\\", "\\\\").replace("<", "&lt;").replace("[", "\\[").replace("]", "\\]")


def _one_line(text: str) -> str:
    """For list items and headings, where a newline would end the construct."""
    return " ".join(_inert(text).split())


def _cited(text: str, numbers: set[int]) -> str:
    """Inert text whose citations (every form: thinking/deliberation/citations.py) of known sources
    become [n], linked by the definitions at the end of the report; unknown numbers stay text."""
    out: list[str] = []
    pos = 0
    for citation in find_citations(text):
        before = _inert(text[pos : citation.start])
        if before.endswith("!"):  # "![1]" would be an image of the source's page
            before = before[:-1] + "\\!"
        out.append(before)
        out.append(", ".join(f"[{n}]" if n in numbers else f"\\[{n}\\]" for n in citation.numbers))
        if text[citation.end : citation.end + 1] == "[":
            out.append(" ")  # "[1][4]" would be one reference link
        pos = citation.end
    out.append(_inert(text[pos:]))
    return "".join(out)


def _checks(synthesis: Synthesis, numbers: set[int]) -> list[str]:
    rows = check_rows(synthesis)
    if not rows:
        return []
    lines = ["Citation checks:", ""]
    for row in rows:
        why = f" ({_one_line(str(row['why']))})" if row["why"] else ""
        lines.append(
            f"- {MARKS.get(str(row['verdict']), '')} {row['verdict']}: "
            f"{_one_line(str(row['claim']))} {_cited(f'[{row["number"]}]', numbers)}{why}"
        )
    return [*lines, ""]


def _safe_url(url: str) -> str | None:
    """An http(s) URL, percent-encoded so it cannot break out of `<...>`; else None."""
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
        return None
    return quote(url.strip(), safe=_URL_SAFE)


def session_markdown(session: ThinkingSession) -> str:
    """The whole report in memory; a download streams `markdown_chunks` instead."""
    return "".join(markdown_chunks(session))


def markdown_chunks(session: ThinkingSession) -> Iterator[str]:
    """The session as a Markdown report, a line at a time: answer with citations and
    references, the research plan and notes, the synthesis timeline, the sub-question tree,
    thinking stats, the stages and the thought stream. Long lists are read in chunks."""
    for line in _report_lines(session):
        yield line + "\n"


def _report_lines(session: ThinkingSession) -> Iterator[str]:
    numbers = set(session.sources.values_list("number", flat=True))
    finals = list(session.syntheses.filter(is_final=True).order_by("sequence"))

    yield from [f"# {_one_line(session.question)}", ""]
    status = session.get_status_display()
    if session.completion_reason:
        status += f" ({session.get_completion_reason_display()})"
    yield from [
        f"Deep Think report · session `{session.pk}` · {status} · "
        f"created {session.created_at:%Y-%m-%d %H:%M} UTC",
        "",
    ]
    if "\n" in session.question.strip():  # the heading holds one line; show all of it
        yield from [_inert(session.question), ""]

    yield from _answer(session, finals, numbers)
    yield from _references(session)
    yield from _research(session)
    yield from _timeline(session, numbers)
    questions = list(
        session.sub_questions.order_by("-priority", "created_at", "id").only(
            "text", "priority", "explored", "answer", "parent_id"
        )
    )
    yield from _tree(questions)
    yield from _stats(session, questions)
    yield from _stages(session)

    yield from ["## Thoughts", ""]
    shown = 0
    thoughts = session.thoughts.only(
        "sequence", "type", "confidence", "time_offset_seconds", "text"
    )
    for t in thoughts.iterator(CHUNK):
        shown += 1
        yield from [
            f"### #{t.sequence + 1} · {t.get_type_display().lower()} · "
            f"{percent(t.confidence)} · {duration(t.time_offset_seconds)}",
            "",
            _cited(t.text, numbers),
            "",
        ]
    if not shown:
        yield from ["*No thoughts.*", ""]

    # Link definitions last: they make the [n] citations above link to their sources.
    links = session.sources.values_list("number", "url").iterator(CHUNK)
    definitions = [f"[{n}]: <{url}>" for n, raw in links if (url := _safe_url(raw)) is not None]
    if definitions:
        yield from [*definitions, ""]


def _answer(session: ThinkingSession, finals: list[Synthesis], numbers: set[int]) -> list[str]:
    lines = ["## Answer", ""]
    if session.final_answer:
        lines += [
            f"**Confidence: {percent(session.final_confidence)}**",
            "",
            _cited(session.final_answer, numbers),
            "",
        ]
        checked = check_rows(finals[-1]) if finals else []
        doubtful = [row for row in checked if row["verdict"] in ("unsupported", "partial")]
        if doubtful:
            lines += ["**Claims the sources do not back:**", ""]
            for row in doubtful:
                why = f" ({_one_line(str(row['why']))})" if row["why"] else ""
                lines.append(
                    f"- {row['verdict']}: {_one_line(str(row['claim']))} "
                    f"{_cited(f'[{row["number"]}]', numbers)}{why}"
                )
            lines.append("")
    else:
        lines += [f"*No final answer ({session.get_status_display().lower()}).*", ""]
    earlier = finals[:-1] if session.final_answer else finals
    if earlier:  # given more time (#19): the answers it gave before, kept as versions
        lines += ["### Earlier answers", ""]
        for number, version in enumerate(earlier, start=1):
            lines += [
                f"**Version {number}, confidence {percent(version.confidence)}**",
                "",
                _cited(version.text, numbers),
                "",
            ]
    return lines


def _references(session: ThinkingSession) -> Iterator[str]:
    yield from ["## References", ""]
    for tool in reference_summary(session):
        searches, new = tool["searches"], tool["new"]
        yield (
            f"- {tool['label']}: {counted(searches, 'search', 'searches')}, "
            f"{new} new {ngettext('source', 'sources', new)}, "
            f"{tool['known']} already known found again"
        )
    if session.search_tally:
        yield ""
    listed = 0
    for source in session.sources.only("number", "title", "url", "kind").iterator(CHUNK):
        listed += 1
        url = _safe_url(source.url)
        title = _one_line(source.title) or "Untitled"
        entry = f"[{title}](<{url}>)" if url else title
        yield f"- \\[{source.number}\\] {entry} ({source.get_kind_display().lower()})"
    yield from [""] if listed else ["*No sources.*", ""]


def _research(session: ThinkingSession) -> list[str]:
    """The research plan (its steps, the current one marked, its terms and queries) and the
    research notes, as the JSON's `plan` and `research_notes` carry them."""
    plan = session.plan if isinstance(session.plan, dict) else {}
    steps = [str(step) for step in plan.get("steps") or []]
    lines = ["## Research plan", ""]
    if not session.research_enabled:
        lines += ["*Research was off: no plan, no searches.*", ""]
    elif not steps:
        lines += ["*No plan was made.*", ""]
    else:
        current = plan.get("current")
        for number, step in enumerate(steps):
            mark = " *(current)*" if number == current and not session.is_finished else ""
            lines.append(f"{number + 1}. {_one_line(step)}{mark}")
        lines.append("")
        for key, label in (
            ("terms", "Key terms"),
            ("web_queries", "Web queries"),
            ("memory_queries", "Knowledge-base queries"),
        ):
            if plan.get(key):
                values = "; ".join(_one_line(str(value)) for value in plan[key])
                lines += [f"{label}: {values}", ""]
        if plan.get("source") == "heuristic":
            lines += ["A simple plan made from the question's key terms.", ""]
    notes = session.research_notes if isinstance(session.research_notes, list) else []
    if notes:
        lines += ["Research notes:", ""]
        lines += [f"- {_one_line(str(note))}" for note in notes]
        lines.append("")
    return lines


def _stages(session: ThinkingSession) -> list[str]:
    """The stage history, as the JSON's `stages` (the newest stages.MAX_STAGES)."""
    history = stages.served(session)
    lines = ["## Stages", ""]
    if session.stage_count > len(history):
        lines += [f"The latest {len(history)} of {session.stage_count}.", ""]
    for item in history:
        at = f"{_one_line(str(item.get('at', '')))} · " if item.get("at") else ""
        label = _one_line(str(item.get("label") or item.get("stage", "")))
        lines.append(f"- {at}**{label}**: {_one_line(str(item.get('message', '')))}")
    lines += [""] if history else ["*No stages.*", ""]
    return lines


def _timeline(session: ThinkingSession, numbers: set[int]) -> Iterator[str]:
    yield from ["## Synthesis timeline", ""]
    if session.confidence_evolution:
        evolution = " → ".join(percent(v) for v in session.confidence_evolution)
        yield from [f"Confidence: {evolution}", ""]
    shown = 0
    for s in session.syntheses.prefetch_related("citation_checks").iterator(100):
        shown += 1
        label = "Final synthesis" if s.is_final else "Synthesis"
        yield from [
            f"### {s.sequence + 1}. {label} at {duration(s.time_offset_seconds)} · "
            f"confidence {percent(s.confidence)}",
            "",
            _cited(s.text, numbers),
            "",
        ]
        yield from _checks(s, numbers)
        for heading, items in (
            ("Key insights", s.key_insights),
            ("Remaining questions", s.remaining_questions),
        ):
            if items:
                yield from [f"{heading}:", ""]
                yield from [f"- {_one_line(str(item))}" for item in items]
                yield ""
    if not shown:
        yield from ["*No syntheses.*", ""]


def _tree(questions: list[SubQuestion]) -> list[str]:
    """Sub-questions nested under their parents, highest priority first."""
    lines = ["## Sub-questions", ""]
    known = {q.pk for q in questions}
    children: dict[int | None, list[SubQuestion]] = {}
    for q in questions:
        parent = q.parent_id if q.parent_id in known else None
        children.setdefault(parent, []).append(q)
    shown: set[int] = set()

    def walk(parent: int | None, depth: int) -> None:
        for q in children.get(parent, []):
            if q.pk in shown:  # a cycle in hand-edited data must not loop forever
                continue
            shown.add(q.pk)
            indent = "  " * depth
            mark = " · explored" if q.explored else ""
            lines.append(f"{indent}- **P{q.priority}** {_one_line(q.text)}{mark}")
            if q.answer:
                lines.append(f"{indent}  - *Answer:* {_one_line(q.answer)}")
            walk(q.pk, depth + 1)

    walk(None, 0)
    lines += [""] if questions else ["*No sub-questions.*", ""]
    return lines


def _stats(session: ThinkingSession, questions: list[SubQuestion]) -> list[str]:
    by_type = dict(session.thoughts.values_list("type").annotate(n=Count("id")).order_by())
    kinds = ", ".join(
        f"{label.lower()} {by_type[value]}"
        for value, label in ThoughtType.choices
        if by_type.get(value)
    )
    cost = session.estimated_cost
    completion = session.get_completion_reason_display() or session.get_status_display()
    if session.completion_note:
        completion += f". {_one_line(session.completion_note)}"
    explored = sum(1 for q in questions if q.explored)
    lines = [
        "## Thinking stats",
        "",
        f"- Thoughts: {sum(by_type.values())}" + (f" ({kinds})" if kinds else ""),
        f"- Sub-questions: {len(questions)} ({explored} explored)",
        f"- Syntheses: {session.syntheses.count()}",
        f"- Sources: {session.sources.count()}",
        f"- Active thinking time: {duration(session.active_seconds)} of "
        f"{duration(session.budget_seconds)}",
        f"- Cycles: {session.cycles}",
        f"- Tokens: {session.total_tokens} (input {session.input_tokens}, output "
        f"{session.output_tokens}, cache read {session.cache_read_tokens}, cache write "
        f"{session.cache_write_tokens})",
        f"- Estimated cost: {f'${cost:.4f}' if cost is not None else 'n/a'}",
        *(
            f"  - {_one_line(model)}: {counted(spent.calls, 'call')}, "
            f"{counted(spent.tokens, 'token')}, {spent.shown_cost}"
            for model, spent in session.model_usage
        ),
        f"- Model: {_one_line(session.model_id)}",
        f"- Completion: {completion}",
        "",
    ]
    return lines
