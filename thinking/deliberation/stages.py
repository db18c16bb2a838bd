"""Seed 003's stages, reported by the loop itself as it enters them, and enriched by the
model's `progress` tool.

The loop records `planning` (the plan), `research` (each search wave), `analysis` (a thought
cycle), `synthesis` (periodic and final syntheses) and `reflection` (re-ranking, the final
review); the model adds `note`s and richer updates of its own (label, message, plan step,
total steps, confidence, metadata). So a session whose model never calls `progress` still
shows truthful stages. Every entry is a `Stage` row (the newest MAX_STAGES are served; the
older ones are deleted PRUNE_EVERY at a time) and the latest is also
`ThinkingSession.progress`, the line the page shows.
"""

from __future__ import annotations

import uuid
from typing import Any, cast

from django.utils import timezone

from config.hops import db_hop
from thinking.events import Publish, SessionEvent
from thinking.models import Stage, ThinkingSession
from thinking.page.live import publish_safely
from thinking.state import StageEntry

STAGES = ("planning", "research", "analysis", "synthesis", "reflection", "note")
MAX_STAGES = 300  # history kept per session; the oldest entries go first
PRUNE_EVERY = 25  # entries past MAX_STAGES are deleted this many at a time, not one per entry
MAX_METADATA_KEYS = 12

LABELS = {
    "planning": "Planning",
    "research": "Research",
    "analysis": "Analysis",
    "synthesis": "Synthesis",
    "reflection": "Reflection",
    "note": "Note",
}


def clip_text(value: object, limit: int) -> str:
    """Untrusted model text (or a number) on one line, at most `limit` characters; anything
    else is empty."""
    return " ".join(str(value).split())[:limit] if isinstance(value, str | int | float) else ""


def clean_metadata(raw: object) -> dict[str, str]:
    """The model's metadata, untrusted: a few short string keys and scalar values."""
    if not isinstance(raw, dict):
        return {}
    cleaned: dict[str, str] = {}
    for key, value in list(raw.items())[:MAX_METADATA_KEYS]:
        name, text = clip_text(key, 40), clip_text(value, 200)
        if name and text:
            cleaned[name] = text
    return cleaned


def entry(
    stage: object,
    message: object,
    *,
    label: object = "",
    by: str = "loop",
    plan_step: int | None = None,
    total_steps: int | None = None,
    confidence: object = "",
    metadata: dict[str, str] | None = None,
) -> StageEntry:
    """One stage entry, as stored and served: {stage, label, message, at} and the extras.
    The texts may be the model's own values: each is clipped, anything but text or a number
    is empty, and an unknown stage is a note."""
    stage = stage if isinstance(stage, str) and stage in STAGES else "note"
    item: StageEntry = {
        "stage": stage,
        "label": clip_text(label, 80) or LABELS[stage],
        "message": clip_text(message, 300),
        "at": timezone.now().isoformat(),
        "by": by,
    }
    if plan_step:
        item["plan_step"] = plan_step
    if total_steps:
        item["total_steps"] = total_steps
    if confidence := clip_text(confidence, 40):
        item["confidence"] = confidence
    if metadata:
        item["metadata"] = metadata
    return item


def record(session: ThinkingSession, *items: StageEntry) -> dict[str, Any]:
    """Record `items` (one entry, or a few the loop enters at once) on a locked session
    row: their history rows (the oldest past MAX_STAGES deleted), and the field changes for
    the row: the count, the current progress line (the last item) and, for a step the model
    reported, the plan checklist."""
    first = session.stage_count + 1
    last = first + len(items) - 1
    Stage.objects.bulk_create(
        Stage(session_id=session.pk, sequence=first + n, entry=item) for n, item in enumerate(items)
    )
    # Pruned whenever the count passes a multiple of PRUNE_EVERY.
    if last > MAX_STAGES and last // PRUNE_EVERY != (first - 1) // PRUNE_EVERY:
        kept_from = last - MAX_STAGES + 1
        Stage.objects.filter(session_id=session.pk, sequence__lt=kept_from).delete()
    changes: dict[str, Any] = {"stage_count": last, "progress": items[-1]}
    steps = session.plan.get("steps") if isinstance(session.plan, dict) else None
    reported = [item["plan_step"] for item in items if item.get("plan_step")]
    if reported and steps:
        # The checklist moves only on a step somebody reported, never on elapsed time.
        current = min(len(steps) - 1, reported[-1] - 1)
        changes["plan"] = {**session.plan, "current": current, "step_reported": True}
    return changes


# What `record` reads of the session (the step reads only these).
RECORD_READS = ("stage_count", "plan")


class _Finished(Exception):
    """The session already ended: nothing is stored (rolls the step back)."""


def record_sync(session_id: uuid.UUID, *items: StageEntry, worker_id: str | None = None) -> bool:
    """Store `items` through the session's step, in one transaction. With `worker_id`, only
    while that worker holds the lease (LeaseLost otherwise; Stopped once cancelled, as every
    writer). Never on a finished session: False then, True if stored."""
    try:
        with ThinkingSession.step(session_id, worker_id=worker_id, only=RECORD_READS) as step:
            if step.session.is_finished:
                raise _Finished
            step.update(**record(step.session, *items))
    except _Finished:
        return False
    return True


_record = db_hop(record_sync)


async def enter(
    session_id: uuid.UUID,
    stage: str,
    message: str,
    *,
    worker_id: str,
    publish: Publish,
    **extras: Any,
) -> None:
    """The loop enters a stage: store it (through the session's step, so only while this
    worker holds the lease), then show it."""
    if await _record(session_id, entry(stage, message, **extras), worker_id=worker_id):
        await show(session_id, publish)


async def show(session_id: uuid.UUID, publish: Publish) -> None:
    """Show a stage just stored: the plan region shows progress; the header's counts, tokens
    and state are as the last step left them."""
    await publish_safely(publish, SessionEvent(session_id, plan=True, header=False))


def served(session: ThinkingSession) -> list[StageEntry]:
    """The history for JSON, the API and exports: {stage, label, message, at} plus extras,
    oldest first (the newest MAX_STAGES)."""
    rows = session.stage_entries.order_by("-sequence").values_list("entry", flat=True)
    # Every stored entry was built by `entry` (the JSON keeps its shape).
    return [cast(StageEntry, item) for item in list(rows[:MAX_STAGES])[::-1]]


def planning_message(focus: Any = None) -> str:
    if focus is not None and getattr(focus, "sub_question_id", None):
        return f"Planning research for the sub-question: {focus.text}"
    return "Planning the research: steps, key terms and queries"


def research_message(plan: Any, *, web: bool) -> str:
    web_count = len(plan.web_queries) if web else 0
    memory_count = len(plan.memory_queries)
    if not web_count and not memory_count:
        return "No searches in this plan"
    parts = []
    if web_count:
        parts.append(f"{web_count} web quer{'y' if web_count == 1 else 'ies'}")
    if memory_count:
        parts.append(f"{memory_count} knowledge-base quer{'y' if memory_count == 1 else 'ies'}")
    return "Searching: " + " and ".join(parts)
