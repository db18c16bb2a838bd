"""Prompts for each step of the loop, in the seed's line formats.

Structured replies are plain text, not forced tool calls, so every Anthropic-compatible
server works (several lack tool_choice). The system prompt and the question come first and
never change within a session, so the stable prefix can be cached.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from . import tags

SYSTEM = (
    "You are Deep Think, a careful researcher who deliberates over a question for an extended "
    "time. You explore, criticise your own ideas, connect them, and state honestly how "
    "confident you are. You always answer in exactly the format each request asks for, with "
    "no preamble."
)


@dataclass(frozen=True)
class ThoughtLine:
    type: str
    text: str
    confidence: float


def _thought_lines(thoughts: Sequence[ThoughtLine]) -> str:
    if not thoughts:
        return "(none yet)"
    return "\n".join(f"- [{t.type}, {t.confidence:.2f}] {t.text}" for t in thoughts)


def _list(items: Sequence[str], empty: str = "(none yet)") -> str:
    return "\n".join(f"- {item}" for item in items) if items else empty


THOUGHT_LINES = """THOUGHT: [your thought]
TYPE: [exploration/critique/connection/insight]
CONFIDENCE: [0.0-1.0]
---"""


def thought_format(mode: str, custom: Sequence[tags.TagSpec] | None = None) -> str:
    """How the session's format asks for a thought cycle: tags around the seed's lines."""
    skeleton = tags.render_format_instructions(mode, custom)
    has_response = any(
        spec.tag == "response" for spec in tags.iter_specs(tags.mode_spec(mode, custom))
    )
    where = "Inside <response>" if has_response else "After the tags"
    return f"""{skeleton}

{where}, write each thought in this format:
{THOUGHT_LINES}

Set stop_signal to true only when your understanding is already sufficient for a confident
final answer and more thinking would add little; otherwise false."""


def thoughts_prompt(
    *,
    question: str,
    focus: str,
    recent: Sequence[ThoughtLine],
    understanding: str,
    reply_format: str = "",
) -> str:
    return f"""Question: {question}
Current focus: {focus}

Current understanding:
{understanding or "(no synthesis yet)"}

Recent thoughts:
{_thought_lines(recent)}

Generate 3-5 distinct thoughts about the current focus. Do not repeat earlier thoughts;
build on them, challenge them or connect them.

{reply_format or "Format:\n" + THOUGHT_LINES}"""


def questions_prompt(
    *, question: str, recent: Sequence[ThoughtLine], existing: Sequence[str]
) -> str:
    return f"""Original Question: {question}

Recent thoughts:
{_thought_lines(recent)}

Sub-questions already on the list (do not repeat them):
{_list(existing)}

What new questions arise that would help answer the original question? Give at most 3.

Format:
QUESTION: [question text]
PRIORITY: [1-10]
WHY: [explanation]
---"""


def synthesis_prompt(
    *,
    question: str,
    recent: Sequence[ThoughtLine],
    explored: Sequence[tuple[str, str]],
    previous: str,
) -> str:
    explored_lines = _list([f"{q} -> {a}" if a else q for q, a in explored])
    return f"""Original Question: {question}

Previous synthesis:
{previous or "(none yet)"}

Thoughts so far (last {len(recent)}):
{_thought_lines(recent)}

Sub-questions explored:
{explored_lines}

Synthesize your current understanding:

SYNTHESIS: [summary of understanding]
INSIGHTS:
- [key insight 1]
- [key insight 2]
CONFIDENCE: [0.0-1.0]
REMAINING:
- [unanswered question 1]
- [unanswered question 2]"""


def final_prompt(
    *,
    question: str,
    recent: Sequence[ThoughtLine],
    explored: Sequence[tuple[str, str]],
    syntheses: Sequence[str],
) -> str:
    explored_lines = _list([f"{q} -> {a}" if a else q for q, a in explored])
    return f"""Original Question: {question}

Your thinking time is over. Review everything and give your final, comprehensive answer.

Syntheses along the way:
{_list(syntheses)}

Most important recent thoughts:
{_thought_lines(recent)}

Sub-questions explored:
{explored_lines}

Format:
ANSWER: [a comprehensive answer to the original question; paragraphs are fine]
INSIGHTS:
- [key insight]
CONFIDENCE: [0.0-1.0]
REMAINING:
- [what is still uncertain]"""
