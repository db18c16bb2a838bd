"""What the model is asked, word for word.

A prompt's wording is the product's contract with the model: the line formats the parsers
read back, the citation rule the citation check relies on, where a person's guidance goes.
These tests pin each prompt's text so that a change to it is made on purpose (and this file
changed with it), and check the layout the prompt cache depends on: the stable part first
and the same on every call of its kind, the session log next, the short moving part last.
"""

from __future__ import annotations

from thinking.deliberation import prompts
from thinking.models import FormatMode
from thinking.provider import tags

THOUGHT_LINES = """THOUGHT: [your thought]
TYPE: [exploration/critique/connection/insight]
CONFIDENCE: [0.0-1.0]
---"""

CONSOLIDATION = """Original Question: Why is the sky blue?

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

The session so far, oldest first:"""


def test_a_thought_cycle_asks_for_the_seeds_lines_after_the_log():
    prompt = prompts.thoughts_prompt(
        question="Why is the sky blue?", focus="Rayleigh scattering", log=("LOG-1", "LOG-2")
    )

    assert prompt.stable == (
        "Question: Why is the sky blue?\n\n"
        "Each turn you get a current focus. Generate 3-5 distinct thoughts about it. Do not "
        "repeat\nearlier thoughts; build on them, challenge them or connect them. Where a "
        "thought rests on a\nsource, cite it as [n].\n\n"
        f"Format:\n{THOUGHT_LINES}\n\n"
        "The session so far, oldest first:"
    )
    assert prompt.log == ("LOG-1", "LOG-2")
    assert prompt.variable == (
        "Current focus: Rayleigh scattering\n\nNow write your thoughts about the current focus."
    )
    assert prompt.text == "\n\n".join([prompt.stable, "LOG-1", "LOG-2", prompt.variable])


def test_guidance_sources_and_an_earlier_session_go_where_the_cache_wants_them():
    prompt = prompts.thoughts_prompt(
        question="Why is the sky blue?",
        focus="Rayleigh scattering",
        log=("LOG-1",),
        reply_format="REPLY FORMAT",
        tool_guidance="USE THE THINK TOOL",
        known_sources=3,
        hints=["look at sunsets", "mind the ocean"],
        background="EARLIER ANSWER",
    )

    # The earlier session and the tool guidance are stable (cached); the person's words move.
    assert prompt.stable == (
        "<earlier_session>\nEARLIER ANSWER\n</earlier_session>\n\n"
        "Question: Why is the sky blue?\n\n"
        "Each turn you get a current focus. Generate 3-5 distinct thoughts about it. Do not "
        "repeat\nearlier thoughts; build on them, challenge them or connect them. Where a "
        "thought rests on a\nsource, cite it as [n].\n\n"
        "USE THE THINK TOOL\n\n"
        "REPLY FORMAT\n\n"
        "The session so far, oldest first:"
    )
    assert prompt.variable == (
        "Current focus: Rayleigh scattering\n"
        "Sources found so far: 3.\n\n"
        "Guidance from the person watching (take it into account):\n"
        "- look at sunsets\n"
        "- mind the ocean\n\n"
        "Now write your thoughts about the current focus."
    )


def test_the_stable_part_does_not_move_between_cycles():
    """The prompt cache reads the stable prefix again only if it is byte for byte the same."""
    first = prompts.thoughts_prompt(question="Q?", focus="A", log=("L1",), known_sources=0)
    later = prompts.thoughts_prompt(
        question="Q?", focus="B", log=("L1", "L2"), known_sources=9, hints=["h"]
    )
    assert first.stable == later.stable
    assert later.text.startswith(first.stable + "\n\nL1\n\n")


def test_an_empty_session_log_still_says_so():
    for prompt in (
        prompts.thoughts_prompt(question="Q?", focus="Q?", log=()),
        prompts.questions_prompt(question="Q?", log=()),
        prompts.synthesis_prompt(question="Q?", log=[]),
        prompts.final_prompt(question="Q?", log=()),
    ):
        assert prompt.log == ("(nothing yet)",)


def test_new_questions_are_asked_for_in_the_seeds_lines():
    prompt = prompts.questions_prompt(
        question="Why is the sky blue?", log=("LOG",), background="EARLIER"
    )
    assert prompt.stable == (
        "<earlier_session>\nEARLIER\n</earlier_session>\n\n"
        "Original Question: Why is the sky blue?\n\n"
        "From the session so far, find new questions that would help answer the original "
        "question.\nGive at most 3, none that is already among the sub-questions added.\n\n"
        "Format:\nQUESTION: [question text]\nPRIORITY: [1-10]\nWHY: [explanation]\n---\n\n"
        "The session so far, oldest first:"
    )
    assert prompt.log == ("LOG",)
    assert prompt.variable == "Now give the new questions, judged by the latest thoughts above."


def test_a_synthesis_and_the_final_answer_share_one_cached_prefix():
    synthesis = prompts.synthesis_prompt(question="Why is the sky blue?", log=("LOG",))
    final = prompts.final_prompt(question="Why is the sky blue?", log=("LOG",))

    assert synthesis.stable == final.stable == CONSOLIDATION
    assert synthesis.log == final.log == ("LOG",)
    assert synthesis.variable == (
        "Now synthesize your current understanding of everything above, in the\n"
        'format given, with LABEL = SYNTHESIS (the reply begins with "SYNTHESIS:").'
    )
    assert final.variable == (
        "Your thinking time is over. Review everything above and give your final,\n"
        "comprehensive answer to the original question (paragraphs are fine), in the format "
        'given,\nwith LABEL = ANSWER (the reply begins with "ANSWER:").'
    )


def test_a_follow_up_puts_its_earlier_session_first_in_every_consolidation():
    synthesis = prompts.synthesis_prompt(question="Why is the sky blue?", log=(), background="B")
    final = prompts.final_prompt(question="Why is the sky blue?", log=(), background="B")
    earlier = "<earlier_session>\nB\n</earlier_session>\n\n"
    assert synthesis.stable == final.stable == earlier + CONSOLIDATION


def test_no_earlier_session_adds_nothing():
    assert prompts.background_block("") == ""
    assert prompts.background_block("X") == "<earlier_session>\nX\n</earlier_session>\n\n"


def test_the_thought_format_puts_the_lines_inside_the_response_tag():
    text = prompts.thought_format(FormatMode.ENHANCED)

    assert "<response>What the user should read</response>" in text
    assert text.endswith(
        "\n\nInside <response>, write each thought in this format:\n"
        f"{THOUGHT_LINES}\n\n"
        "Set stop_signal to true only when your understanding is already sufficient for a "
        "confident\nfinal answer and more thinking would add little; otherwise false."
    )


def test_a_format_without_a_response_tag_asks_for_the_lines_after_the_tags():
    custom = (tags.TagSpec("notes"),)
    text = prompts.thought_format(FormatMode.CUSTOM, custom)
    assert "\n\nAfter the tags, write each thought in this format:\n" in text
    assert "Inside <response>" not in text


def test_the_system_prompt_asks_for_the_format_and_no_preamble():
    assert prompts.SYSTEM == (
        "You are Deep Think, a careful researcher who deliberates over a question for an "
        "extended time. You explore, criticise your own ideas, connect them, and state honestly "
        "how confident you are. You always answer in exactly the format each request asks for, "
        "with no preamble."
    )
