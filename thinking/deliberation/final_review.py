"""The final answer reviews the whole session (seed 000: "review all thoughts, questions,
syntheses"), within a measured prompt budget.

The review carries every synthesis, the remaining-question lists, the explored sub-questions
with what was found and the unexplored ones, and the thoughts that matter most from the whole
session: the most confident and the most recent, taken in turn, until the budget is used.
Tokens are estimated at four characters each (close for English with Claude's tokenizer,
and cheap: no extra API call per final answer).

With the session log (thinking.deliberation.transcript) the final prompt keeps the cache-friendly
layout of every other call: the consolidation header and the log it shares with the syntheses come
first (read from the cache), and the review is the variable tail after them, ending with the
task. The tail gets what the budget leaves after that prefix (at least a quarter of it), and
its thoughts are those the log no longer carries (earlier epochs): the log has the rest
verbatim.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from django.conf import settings

from thinking.deliberation import prompts, stages, transcript
from thinking.deliberation.prompts import Prompt
from thinking.formatting import counted
from thinking.models import ThinkingSession
from thinking.provider import parsing
from thinking.state import StageEntry

CHARS_PER_TOKEN = 4
MIN_SYNTHESIS_CHARS = 300  # each synthesis keeps at least this much, however tight the budget
MIN_TAIL_SHARE = 4  # after the cached log, the review keeps at least 1/4 of the budget


def estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


@dataclass(frozen=True)
class SynthesisItem:
    sequence: int
    text: str
    confidence: float
    remaining: tuple[str, ...] = ()


@dataclass(frozen=True)
class ThoughtItem:
    sequence: int
    type: str
    text: str
    confidence: float
    cycle: int = 0


@dataclass(frozen=True)
class SubQuestionItem:
    text: str
    priority: int
    explored: bool
    answer: str = ""


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"


def _thought_order(thoughts: Sequence[ThoughtItem]) -> list[ThoughtItem]:
    """Most confident and most recent in turn, each thought once."""
    confident = sorted(thoughts, key=lambda t: (-t.confidence, -t.sequence))
    recent = sorted(thoughts, key=lambda t: -t.sequence)
    order: list[ThoughtItem] = []
    seen: set[int] = set()
    for pair in zip(confident, recent, strict=True):
        for thought in pair:
            if thought.sequence not in seen:
                seen.add(thought.sequence)
                order.append(thought)
    return order


def review_prompt(
    *,
    question: str,
    syntheses: Sequence[SynthesisItem],
    thoughts: Sequence[ThoughtItem],
    sub_questions: Sequence[SubQuestionItem],
    budget_tokens: int,
    log: Sequence[str],
    logged_from_cycle: int | None = None,
    background: str = "",
) -> Prompt:
    """The final prompt, at most `budget_tokens` (estimated). Every synthesis is in it (the
    longest clipped first if they would not fit); then the remaining questions, the
    sub-questions and as many of the best thoughts as fit.

    The prompt is the shared consolidation header and the session `log` (the cached prefix,
    with the sources), then the review and the task as the variable tail; thoughts from
    `logged_from_cycle` on are in the log already and are not repeated."""
    base = prompts.final_prompt(question=question, log=log, background=background)
    stable, task, prefix = base.stable, base.variable, base.log
    used = len(stable) + sum(len(block) + 2 for block in prefix) + len(task) + 2
    budget = max(
        budget_tokens * CHARS_PER_TOKEN - used,
        budget_tokens * CHARS_PER_TOKEN // MIN_TAIL_SHARE,
    )
    budget -= 400  # headings and separators
    if logged_from_cycle is not None:
        thoughts = [t for t in thoughts if t.cycle < logged_from_cycle]
    sections: list[str] = []

    # Every synthesis, in order; when they would not fit, each gets an equal share.
    lines = [f"- #{s.sequence + 1} (confidence {s.confidence:.2f}): {s.text}" for s in syntheses]
    if sum(len(line) + 1 for line in lines) > budget // 2 and lines:
        share = max(MIN_SYNTHESIS_CHARS, (budget // 2) // len(lines))
        lines = [_clip(line, share) for line in lines]
    sections.append("Syntheses along the way:\n" + ("\n".join(lines) or "(none)"))
    budget -= sum(len(line) + 1 for line in lines)

    def fill(title: str, candidates: Sequence[str], empty: str = "(none)") -> None:
        nonlocal budget
        taken: list[str] = []
        for line in candidates:
            if len(line) + 1 > budget:
                break
            taken.append(line)
            budget -= len(line) + 1
        sections.append(f"{title}:\n" + ("\n".join(taken) or empty))

    remaining: list[str] = []
    seen: set[str] = set()
    for s in reversed(syntheses):  # the latest lists first: they are the most current
        for item in s.remaining:
            key = parsing.question_key(item)
            if key and key not in seen:
                seen.add(key)
                remaining.append(f"- {_clip(item, 400)}")
    fill("Questions the syntheses left open", remaining)
    explored = [
        f"- {_clip(q.text, 300)} -> {_clip(q.answer, 500)}" if q.answer else f"- {q.text}"
        for q in sub_questions
        if q.explored
    ]
    fill("Sub-questions explored", explored)
    unexplored = sorted((q for q in sub_questions if not q.explored), key=lambda q: -q.priority)
    fill(
        "Sub-questions not explored (by priority)",
        [f"- [{q.priority}] {_clip(q.text, 300)}" for q in unexplored],
    )

    chosen: list[ThoughtItem] = []
    for thought in _thought_order(thoughts):
        line = _thought_line(thought)
        if len(line) + 1 > budget:
            continue  # a shorter one may still fit
        chosen.append(thought)
        budget -= len(line) + 1
    chosen.sort(key=lambda t: t.sequence)
    title = (
        f"Earlier thoughts that mattered most, no longer in the log above ({len(chosen)} "
        f"of {len(thoughts)}: the most confident and the most recent, in order)"
    )
    empty = "(none: every thought is in the log above)"
    sections.append(f"{title}:\n" + ("\n".join(_thought_line(t) for t in chosen) or empty))
    sections.append(task)
    return Prompt(stable, "\n\n".join(sections), tuple(prefix))


def _thought_line(t: ThoughtItem) -> str:
    return f"- #{t.sequence} [{t.type}, {t.confidence:.2f}] {_clip(t.text, 1200)}"


# What `gather` reads: "syntheses", "thoughts" and "sub_questions", each a list of items.
Material = dict[str, list]


def gather(session: ThinkingSession) -> Material:
    """Every synthesis, thought and sub-question of the session, as plain items. Read as
    tuples, not model instances: a long session's review reads thousands of thoughts once,
    and instances held its memory peak up (the benchmark diary, `git show
    1a29a6f^:bench/README.md`, "Memory over a long session"; `make bench`'s `memory`)."""
    syntheses = session.syntheses.filter(is_final=False).order_by("sequence")
    thoughts = session.thoughts.filter(type__in=transcript.MODEL_TYPES).order_by("sequence")
    return {
        "syntheses": [
            SynthesisItem(sequence, text, confidence, tuple(remaining or ()))
            for sequence, text, confidence, remaining in syntheses.values_list(
                "sequence", "text", "confidence", "remaining_questions"
            )
        ],
        "thoughts": [
            ThoughtItem(*row)
            for row in thoughts.values_list("sequence", "type", "text", "confidence", "cycle")
        ],
        "sub_questions": [
            SubQuestionItem(*row)
            for row in session.sub_questions.order_by("id").values_list(
                "text", "priority", "explored", "answer"
            )
        ],
    }


def reviewing(material: Material) -> StageEntry:
    """The review's stage entry: what it reads."""
    message = (
        "Reviewing the whole session: "
        f"{counted(len(material['syntheses']), 'synthesis', 'syntheses')}, "
        f"{counted(len(material['thoughts']), 'thought')}, "
        f"{counted(len(material['sub_questions']), 'sub-question')}"
    )
    return stages.entry("reflection", message)


def final_prompt(session: ThinkingSession, *, log: Sequence[str], material: Material) -> Prompt:
    """The final prompt for `session`: its cached `log`, then the review of `material`
    (`gather`)."""
    cycles = [t.cycle for t in material["thoughts"]]
    return review_prompt(
        question=session.question,
        budget_tokens=settings.DEEPTHINK_FINAL_PROMPT_TOKENS,
        log=log,
        logged_from_cycle=transcript.epoch_start_for(max(cycles, default=0)),
        background=session.parent_context,
        **material,
    )
