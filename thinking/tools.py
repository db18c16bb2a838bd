"""The tools the model may use while it thinks (Anthropic tool use): web_search,
memory_search, think (a scratchpad) and progress (a status line for the page).

Tool inputs come from the model and are untrusted: every field is checked and clipped here.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from config.hops import db_hop

from . import evidence, stages
from .models import Source, SourceKind
from .stages import clip_text
from .state import StageEntry

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


def definitions(*, web: bool, think: bool, search: bool = True) -> list[dict[str, Any]]:
    """The tools offered to the model; the same list for a whole session. Without `search`
    (research off) there are no research tools at all."""
    tools = [MEMORY_SEARCH, PROGRESS] if search else [PROGRESS]
    if web and search:
        tools.insert(0, WEB_SEARCH)
    if think:
        tools.append(THINK)
    return tools


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
    """The model's update joins the session's stage history (thinking.stages), through the
    session's step: refused without the lease."""
    stages.record_sync(session_id, progress, worker_id=worker_id)


save_progress = db_hop(_save_progress)


ToolRunner = Callable[[str, object], Awaitable[ToolOutcome]]
