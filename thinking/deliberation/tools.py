"""The tools the model may use while it thinks (Anthropic tool use): web_search,
memory_search, think (a scratchpad) and progress (a status line for the page).

Tool inputs come from the model and are untrusted: every field is checked and clipped here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.conf import settings

from config.hops import db_hop
from thinking.deliberation import evidence, stages
from thinking.deliberation.asking import ask
from thinking.deliberation.prompts import Prompt
from thinking.deliberation.run import Run
from thinking.deliberation.stages import clip_text
from thinking.events import SessionEvent
from thinking.models import Source, SourceKind, ThinkingSession
from thinking.page.live import publish_safely
from thinking.provider.llm import Reply, prompt_message
from thinking.state import StageEntry

STAGES = stages.STAGES

WEB_SEARCH = {
    "name": "web_search",
    "description": "Search the web. Returns numbered sources you can cite as [n].",
    "input_schema": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to search for."},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 10},
        },
        "required": ["query"],
    },
}
MEMORY_SEARCH = {
    "name": "memory_search",
    "description": (
        "Search the team's knowledge base: its notes, documents and earlier Deep Think "
        "answers. Returns numbered sources you can cite as [n]."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What to look for (3+ characters)."},
            "max_results": {"type": "integer", "minimum": 1, "maximum": 40},
        },
        "required": ["query"],
    },
}
# From Anthropic's think-tool post; its usage guidance goes in the prompt, not here.
THINK = {
    "name": "think",
    "description": (
        "Use the tool to think about something. It will not obtain new information or change "
        "the database, but just append the thought to the log. Use it when complex reasoning "
        "or some cache memory is needed."
    ),
    "input_schema": {
        "type": "object",
        "properties": {"thought": {"type": "string", "description": "A thought to think about."}},
        "required": ["thought"],
    },
}
PROGRESS = {
    "name": "progress",
    "description": "Tell the person watching what you are doing now, in one short sentence.",
    "input_schema": {
        "type": "object",
        "properties": {
            "stage": {"type": "string", "enum": list(STAGES)},
            "label": {"type": "string"},
            "message": {"type": "string"},
            "plan_step": {"type": "integer", "minimum": 1},
            "total_steps": {"type": "integer", "minimum": 1},
            "confidence": {"type": "string"},
            "metadata": {"type": "object", "description": "A few short key/value facts."},
        },
        "required": ["stage", "message"],
    },
}

THINK_TOOL_GUIDANCE = """## Using the think tool
After you receive tool results, and before you write your thoughts, use the think tool as a
scratchpad to: check which results actually bear on the focus, note contradictions between
sources, and decide what is still missing."""


def definitions(
    *, web: bool, think: bool, search: bool = True, progress: bool = True
) -> list[dict[str, Any]]:
    """The tools offered to the model; the same list for a whole session. Without `search`
    (research off, or not chosen) there are no research tools at all."""
    tools = [WEB_SEARCH] if web and search else []
    if search:
        tools.append(MEMORY_SEARCH)
    if progress:
        tools.append(PROGRESS)
    if think:
        tools.append(THINK)
    return tools


# The tools a person may choose per session (the start form, the API, the CLI).
CHOICES = ("search", "think", "progress")


def available() -> tuple[str, ...]:
    """The tools this deployment offers at all (DEEPTHINK_TOOLS, DEEPTHINK_THINK_TOOL)."""
    if not settings.DEEPTHINK_TOOLS:
        return ()
    return CHOICES if settings.DEEPTHINK_THINK_TOOL else ("search", "progress")


def chosen(session: ThinkingSession) -> list[str]:
    """The tools a session was set to offer, by name."""
    if not session.tools_enabled:
        return []
    flags = (session.search_tool, session.think_tool, session.progress_tool)
    return [name for name, on in zip(CHOICES, flags, strict=True) if on]


@dataclass(frozen=True)
class ToolOutcome:
    content: str  # the tool_result text the model reads
    is_error: bool = False
    scratchpad: str = ""  # a think-tool thought to store
    sources: tuple[Source, ...] = ()
    progress: StageEntry | None = None


def _count(value: object, default: int, maximum: int) -> int:
    return max(1, min(maximum, value)) if isinstance(value, int) else default


def _step(value: object) -> int | None:
    """A plan step (or step count) the model reported: 1 to 50, larger ones clamped; else
    none (0, negative, not a whole number)."""
    return min(value, 50) if isinstance(value, int) and value > 0 else None


def format_sources(sources: list[Source], *, found_again: Sequence[int] = ()) -> str:
    again = ", ".join(f"[{n}]" for n in found_again)
    if not sources:
        if found_again:
            return (
                f"No new sources. Found again, already numbered: {again}. "
                "Cite them by those numbers."
            )
        return "No sources found."
    # The same delimited data blocks as the evidence pack: search results are data.
    if found_again:
        return f"{evidence.evidence_pack(sources)}\n\nAlso found again, already numbered: {again}."
    return evidence.evidence_pack(sources)


async def run_tool(
    name: str,
    arguments: object,
    *,
    session_id: uuid.UUID,
    research: evidence.Research,
    worker_id: str,
) -> ToolOutcome:
    """Execute one tool call. Never raises: a bad call is an error result the model reads."""
    args = arguments if isinstance(arguments, dict) else {}
    if name in ("web_search", "memory_search"):
        query = clip_text(args.get("query"), 400)
        if len(query) < 3:
            return ToolOutcome("The query must be at least 3 characters.", is_error=True)
        kind = SourceKind.WEB if name == "web_search" else SourceKind.MEMORY
        if kind == SourceKind.WEB and research.web is None:
            return ToolOutcome("Web search is not available here.", is_error=True)
        limit = _count(args.get("max_results"), 5, 10 if kind == SourceKind.WEB else 40)
        again: list[int] = []
        sources = await evidence.search_one(
            session_id=session_id,
            research=research,
            kind=kind,
            query=query,
            limit=limit,
            worker_id=worker_id,
            found_by=name,
            again=again,
        )
        return ToolOutcome(format_sources(sources, found_again=again), sources=tuple(sources))
    if name == "think":
        # An empty thought is accepted: the tool only appends to the log.
        return ToolOutcome("Noted.", scratchpad=clip_text(args.get("thought"), 8000))
    if name == "progress":
        # stages.entry clips each text and makes an unknown stage a note.
        progress = stages.entry(
            args.get("stage"),
            args.get("message"),
            label=args.get("label"),
            by="model",
            plan_step=_step(args.get("plan_step")),
            total_steps=_step(args.get("total_steps")),
            confidence=args.get("confidence"),
            metadata=stages.clean_metadata(args.get("metadata")),
        )
        await save_progress(session_id, progress, worker_id=worker_id)
        return ToolOutcome("Shown.", progress=progress)
    return ToolOutcome(f"There is no tool named {clip_text(name, 60)!r}.", is_error=True)


def _save_progress(session_id: uuid.UUID, progress: StageEntry, *, worker_id: str) -> None:
    """The model's update joins the session's stage history (thinking.deliberation.stages), through
    the session's step: refused without the lease."""
    stages.record_sync(session_id, progress, worker_id=worker_id)


save_progress = db_hop(_save_progress)


ToolRunner = Callable[[str, object], Awaitable[ToolOutcome]]


def offered(session: ThinkingSession, research: evidence.Research) -> list[dict]:
    """The tools a session's thought cycles offer the model: those it was set to offer
    (none when tools are off), search only while it researches."""
    if not (settings.DEEPTHINK_TOOLS and session.tools_enabled):
        return []
    think = settings.DEEPTHINK_THINK_TOOL and session.think_tool
    return definitions(
        web=research.web is not None,
        think=think,
        search=session.research_enabled and session.search_tool,
        progress=session.progress_tool,
    )


async def ask_with_tools(
    session: ThinkingSession, prompt: Prompt, offered: list[dict], *, run: Run
) -> tuple[list[Reply], list[str]]:
    """A thought cycle's calls: the model may search and use its scratchpad for up to
    DEEPTHINK_MAX_TOOL_ROUNDS rounds, each round's results sent back with its turn, before it
    writes its thoughts. Returns every reply (the last holds the thoughts) and the
    scratchpad notes."""
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
                run_tool(
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
        outcomes = [r for r in results if isinstance(r, ToolOutcome)]
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
    return replies, scratch
