"""Prompts for each step of the loop, in the seed's line formats (and the session's tag
format for thought cycles).

Structured replies are plain text, not forced tool calls, so every Anthropic-compatible
server works (several lack tool_choice). Each prompt is laid out for the prompt cache:

    stable   the same on every call of its kind in a session (question, instructions, format)
    log      the session so far (thinking/deliberation/transcript.py): append-only blocks, so each
             call repeats the previous call's blocks exactly and adds new ones at the end
    variable the moving part, last and short (the focus, people's hints, the task)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from thinking.provider import tags

SYSTEM = (
    "You are Deep Think, a careful researcher who deliberates over a question for an extended "
    "time. You explore, criticise your own ideas, connect them, and state honestly how "
    "confident you are. You always answer in exactly the format each request asks for, with "
    "no preamble."
)


LABELS_KEPT = (
    "keep the format's labels and tags (THOUGHT:, TYPE:, QUESTION:, SYNTHESIS:, ANSWER:, "
    "<think>, …) exactly as given, in English"
)


def language_instruction(language: str = "") -> str:
    """The language a session writes in: the one it set, else the question's."""
    if language:
        return (
            f"Write in {language}: your thoughts, questions, syntheses and answer, whatever "
            f"the language of the question or the sources; {LABELS_KEPT}."
        )
    return (
        "Write in the language of the question: your thoughts, questions, syntheses and "
        f"answer, whatever the language of the sources; {LABELS_KEPT}."
    )


def system(language: str = "") -> str:
    """The system prompt of a session's calls (the same on every call, so it stays cached)."""
    return f"{SYSTEM}\n\n{language_instruction(language)}"


@dataclass(frozen=True)
class ThoughtLine:
    type: str
    text: str
    confidence: float


@dataclass(frozen=True)
class Prompt:
    stable: str
    variable: str
    log: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return "\n\n".join([self.stable, *self.log, self.variable])


LOG_INTRO = "The session so far, oldest first:"


THOUGHT_LINES = """THOUGHT: [your thought]
TYPE: [exploration/critique/connection/insight]
CONFIDENCE: [0.0-1.0]
---"""


def thought_format(mode: str, custom: Sequence[tags.TagSpec] | None = None) -> str:
    """How the session's format asks for a thought cycle: tags around the seed's lines."""
    skeleton = tags.render_format_instructions(mode, custom)
    specs = tags.iter_specs(tags.mode_spec(mode, custom))
    where = "Inside <response>" if any(s.tag == "response" for s in specs) else "After the tags"
    return f"""{skeleton}

{where}, write each thought in this format:
{THOUGHT_LINES}

Set stop_signal to true only when your understanding is already sufficient for a confident
final answer and more thinking would add little; otherwise false."""


def background_block(background: str) -> str:
    """A follow-up's parent (answer, last synthesis): first in the stable, cached prefix."""
    if not background:
        return ""
    return f"<earlier_session>\n{background}\n</earlier_session>\n\n"


def _hints(hints: Sequence[str]) -> str:
    if not hints:
        return ""
    # The person watching steers the session; their words guide, they do not replace it.
    lines = "\n".join(f"- {hint}" for hint in hints)
    return f"\n\nGuidance from the person watching (take it into account):\n{lines}"


def _blocks(log: Sequence[str]) -> tuple[str, ...]:
    return tuple(log) or ("(nothing yet)",)


def thoughts_prompt(
    *,
    question: str,
    focus: str,
    log: Sequence[str],
    reply_format: str = "",
    tool_guidance: str = "",
    known_sources: int = 0,
    hints: Sequence[str] = (),
    background: str = "",
) -> Prompt:
    """A thought cycle. The log carries the sources, earlier cycles and syntheses."""
    guidance = f"\n\n{tool_guidance}" if tool_guidance else ""
    stable = f"""{background_block(background)}Question: {question}

Each turn you get a current focus. Generate 3-5 distinct thoughts about it. Do not repeat
earlier thoughts; build on them, challenge them or connect them. Where a thought rests on a
source, cite it as [n].{guidance}

{reply_format or "Format:\n" + THOUGHT_LINES}

{LOG_INTRO}"""
    sources_line = f"\nSources found so far: {known_sources}." if known_sources else ""
    variable = f"""Current focus: {focus}{sources_line}{_hints(hints)}

Now write your thoughts about the current focus."""
    return Prompt(stable, variable, _blocks(log))


def questions_prompt(*, question: str, log: Sequence[str], background: str = "") -> Prompt:
    """New sub-questions; the log lists the ones already added."""
    stable = f"""{background_block(background)}Original Question: {question}

From the session so far, find new questions that would help answer the original question.
Give at most 3, none that is already among the sub-questions added.

Format:
QUESTION: [question text]
PRIORITY: [1-10]
WHY: [explanation]
---

{LOG_INTRO}"""
    variable = "Now give the new questions, judged by the latest thoughts above."
    return Prompt(stable, variable, _blocks(log))


def _consolidation_header(question: str, background: str = "") -> str:
    """Shared by syntheses and the final answer, so the final answer reads the syntheses'
    cached prefix; the task at the end says which one is wanted."""
    return f"""{background_block(background)}Original Question: {question}

From time to time you consolidate the session so far: a synthesis of your current
understanding, and at the end your final answer. Support claims with the sources, cited as
[n]; cite only numbers that exist. Format (the task at the end gives the LABEL):

LABEL: [the synthesis or the answer]
INSIGHTS:
- [key insight 1]
- [key insight 2]
CONFIDENCE: [0.0-1.0]
REMAINING:
- [unanswered question 1]
- [unanswered question 2]

{LOG_INTRO}"""


def synthesis_prompt(*, question: str, log: Sequence[str], background: str = "") -> Prompt:
    variable = """Now synthesize your current understanding of everything above, in the
format given, with LABEL = SYNTHESIS (the reply begins with "SYNTHESIS:")."""
    return Prompt(_consolidation_header(question, background), variable, _blocks(log))


def final_prompt(*, question: str, log: Sequence[str], background: str = "") -> Prompt:
    """The final answer's header and task; thinking.deliberation.final_review puts its review
    between."""
    variable = """Your thinking time is over. Review everything above and give your final,
comprehensive answer to the original question (paragraphs are fine), in the format given,
with LABEL = ANSWER (the reply begins with "ANSWER:")."""
    return Prompt(_consolidation_header(question, background), variable, _blocks(log))
