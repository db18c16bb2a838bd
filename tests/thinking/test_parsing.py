from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from thinking.provider.parsing import (
    clamp_confidence,
    clamp_priority,
    normalize_type,
    parse_questions,
    parse_synthesis,
    parse_thoughts,
    question_digest,
    question_key,
    read_thought_reply,
)
from thinking.provider.tags import spec_from_json

# The example replies of the extended-thinking seed, verbatim.
SEED_THOUGHTS = """THOUGHT: Consciousness might be best understood as layered awareness
TYPE: exploration
CONFIDENCE: 0.6
---
THOUGHT: Self-reflection requires metacognitive awareness
TYPE: connection
CONFIDENCE: 0.75
---
THOUGHT: But this circular definition doesn't explain origins
TYPE: critique
CONFIDENCE: 0.8"""

SEED_QUESTIONS = """QUESTION: How do different layers of awareness interact?
PRIORITY: 8
WHY: Understanding interaction could explain emergence
---
QUESTION: Can consciousness exist without self-reflection?
PRIORITY: 9
WHY: Tests whether self-reflection is necessary or optional"""

SEED_SYNTHESIS_FORMAT = """SYNTHESIS: [summary of understanding]
INSIGHTS:
- [key insight 1]
- [key insight 2]
CONFIDENCE: [0.0-1.0]
REMAINING:
- [unanswered question 1]
- [unanswered question 2]"""


def test_seed_thoughts_parse_to_the_stored_values():
    thoughts = parse_thoughts(SEED_THOUGHTS)
    assert [(t.text, t.type, t.confidence) for t in thoughts] == [
        ("Consciousness might be best understood as layered awareness", "exploration", 0.6),
        ("Self-reflection requires metacognitive awareness", "connection", 0.75),
        ("But this circular definition doesn't explain origins", "critique", 0.8),
    ]


def test_seed_questions_parse_with_priority_and_why():
    questions = parse_questions(SEED_QUESTIONS)
    assert [(q.text, q.priority, q.why) for q in questions] == [
        (
            "How do different layers of awareness interact?",
            8,
            "Understanding interaction could explain emergence",
        ),
        (
            "Can consciousness exist without self-reflection?",
            9,
            "Tests whether self-reflection is necessary or optional",
        ),
    ]


def test_seed_synthesis_parses_insights_confidence_and_remaining():
    reply = """SYNTHESIS: Current understanding: Consciousness appears to be layered.
INSIGHTS:
- Layered structure
- Requires feedback loops
CONFIDENCE: 0.65
REMAINING:
- Origins still unclear
- Hard problem unresolved"""
    synthesis = parse_synthesis(reply)
    assert synthesis.text == "Current understanding: Consciousness appears to be layered."
    assert synthesis.key_insights == ["Layered structure", "Requires feedback loops"]
    assert synthesis.confidence == 0.65
    assert synthesis.remaining_questions == ["Origins still unclear", "Hard problem unresolved"]


def test_the_seed_format_template_itself_degrades_to_defaults():
    synthesis = parse_synthesis(SEED_SYNTHESIS_FORMAT)
    assert synthesis.text == "[summary of understanding]"
    assert synthesis.confidence == 0.5  # the range "[0.0-1.0]" is not a value
    assert synthesis.key_insights == ["[key insight 1]", "[key insight 2]"]


def test_final_answer_label_is_read_like_a_synthesis():
    reply = "ANSWER: Because of Rayleigh scattering.\n\nMore detail.\nCONFIDENCE: 90%"
    synthesis = parse_synthesis(reply)
    assert synthesis.text == "Because of Rayleigh scattering.\n\nMore detail."
    assert synthesis.confidence == 0.9


def test_markdown_decoration_and_case_are_tolerated():
    reply = (
        "**Thought:** bold idea\n**Type:** *Critique*\n**Confidence:** 0.7\n\n---\n## THOUGHT: two"
    )
    thoughts = parse_thoughts(reply)
    assert [(t.text, t.type, t.confidence) for t in thoughts] == [
        ("bold idea", "critique", 0.7),
        ("two", "exploration", 0.5),
    ]


def test_blocks_without_separators_are_split_on_each_label():
    reply = "THOUGHT: one\nTYPE: insight\nTHOUGHT: two\nTYPE: connection"
    assert [t.text for t in parse_thoughts(reply)] == ["one", "two"]


def test_prose_without_labels_is_one_exploration_thought():
    thoughts = parse_thoughts("Minds might be processes, not things.")
    assert [(t.text, t.type, t.confidence) for t in thoughts] == [
        ("Minds might be processes, not things.", "exploration", 0.5)
    ]


def test_more_than_five_thoughts_are_capped():
    reply = "\n---\n".join(f"THOUGHT: t{i}" for i in range(9))
    assert len(parse_thoughts(reply)) == 5


def test_prose_is_not_a_question_and_questions_are_capped():
    assert parse_questions("I have no questions.") == []
    reply = "\n---\n".join(f"QUESTION: q{i}?\nPRIORITY: {i}" for i in range(6))
    assert len(parse_questions(reply)) == 3


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("0.7", 0.7),
        ("70%", 0.7),
        ("7/10", 0.7),
        ("7", 0.7),
        ("70", 0.7),
        ("1.5e3", 1.0),
        ("-0.4", 0.0),
        ("banana", 0.5),
        ("0,8", 0.8),
        ("nan", 0.5),
        (None, 0.5),
        ("0.85 (fairly sure)", 0.85),
    ],
)
def test_confidence_is_clamped_to_zero_one(raw: str | None, expected: float):
    assert clamp_confidence(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("8", 8), ("11", 10), ("0", 1), ("-3", 1), ("high", 5), ("7.6", 8), (None, 5)],
)
def test_priority_is_clamped_to_one_ten(raw: str | None, expected: int):
    assert clamp_priority(raw) == expected


def test_question_key_ignores_case_punctuation_and_accents():
    assert question_key("Can  consciousness exist?") == question_key("can CONSCIOUSNESS exist")
    assert question_key("Café, really?") == question_key("cafe really")
    assert question_key("Is it A?") != question_key("Is it B?")


@given(st.text())
def test_no_reply_crashes_any_parser(text: str):
    for thought in parse_thoughts(text):
        assert thought.text and 0 <= thought.confidence <= 1
    for question in parse_questions(text):
        assert 1 <= question.priority <= 10
    assert 0 <= parse_synthesis(text).confidence <= 1


LINES = "THOUGHT: Minds are layered\nTYPE: insight\nCONFIDENCE: 0.8"


def test_a_tagged_reply_keeps_its_parts_and_its_stop_signal():
    reply = (
        "<think>\n<analysis>What we know.</analysis>\n<plan></plan>\n"
        "<reasoning>Why it matters.</reasoning>\n</think>\n<interactive>\n<response>\n"
        f"{LINES}\n</response>\n"
        '<stop_signal type="boolean">true</stop_signal>\n</interactive>'
    )
    read = read_thought_reply(reply, mode="enhanced")
    assert read.route == "tags" and read.errors == []
    assert [(t.text, t.type, t.confidence) for t in read.thoughts] == [
        ("Minds are layered", "insight", 0.8)
    ]
    # Empty parts are left out, so the page shows no empty sections.
    assert read.parts == {"analysis": "What we know.", "reasoning": "Why it matters."}
    assert read.stop_signal is True


def test_tags_without_a_response_still_yield_the_thoughts_around_them():
    reply = (
        '<think>Weighing it.</think><interactive><stop_signal type="boolean">false'
        f"</stop_signal></interactive>\n{LINES}"
    )
    read = read_thought_reply(reply, mode="standard")
    assert read.route == "tags"
    assert [t.text for t in read.thoughts] == ["Minds are layered"]
    assert read.stop_signal is False
    assert read.errors, "the missing response is reported"


@pytest.mark.parametrize(
    ("text", "route", "thoughts"),
    [
        (LINES, "lines", ["Minds are layered"]),
        ("Just prose about minds.", "prose", ["Just prose about minds."]),
        ("", "empty", []),
        ("THOUGHT:\nTYPE: insight", "empty", []),
    ],
)
def test_untagged_replies_are_read_as_lines_then_prose(text: str, route: str, thoughts: list):
    read = read_thought_reply(text, mode="standard")
    assert read.route == route
    assert [t.text for t in read.thoughts] == thoughts
    assert read.parts == {} and read.stop_signal is None


@pytest.mark.parametrize("mode", ["no-such-mode", "custom"])
def test_an_unreadable_mode_falls_back_to_lines_and_still_finds_the_stop_signal(mode: str):
    read = read_thought_reply(f"{LINES}\n<stop_signal>true</stop_signal>", mode=mode)
    assert read.route == "lines"
    assert [t.text for t in read.thoughts] == ["Minds are layered"]
    assert read.stop_signal is True


def test_a_custom_format_is_read_with_its_own_parts():
    spec = spec_from_json(
        [
            {"tag": "think", "children": [{"tag": "doubts"}, {"tag": "hunch"}]},
            {"tag": "interactive", "children": [{"tag": "response"}]},
        ]
    )
    reply = (
        "<think><doubts>Maybe not.</doubts><hunch>Probably yes.</hunch></think>"
        "<interactive><response>THOUGHT: custom one</response></interactive>"
    )
    read = read_thought_reply(reply, mode="custom", custom=spec)
    assert read.route == "tags"
    assert read.parts == {"doubts": "Maybe not.", "hunch": "Probably yes."}
    assert [t.text for t in read.thoughts] == ["custom one"]


def test_only_the_response_of_a_tagged_reply_becomes_thoughts():
    reply = (
        "<think>THOUGHT: a draft I threw away</think><interactive><response>"
        f"{LINES}</response></interactive>"
    )
    read = read_thought_reply(reply, mode="standard")
    assert [t.text for t in read.thoughts] == ["Minds are layered"]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("[insight]", "insight"),
        ("**Critique**", "critique"),
        ("critic", "critique"),
        ("connective", "connection"),
        ("Explore", "exploration"),
        ("musing", "exploration"),
        (None, "exploration"),
    ],
)
def test_thought_types_are_read_leniently(raw: str | None, expected: str):
    assert normalize_type(raw) == expected


@pytest.mark.parametrize(("raw", "expected"), [(7, 7), (0, 1), (12, 10), ("7,6", 8)])
def test_priorities_as_numbers_or_with_a_decimal_comma(raw: int | str, expected: int):
    assert clamp_priority(raw) == expected


def test_a_block_without_a_question_does_not_hide_the_next_one():
    reply = "PRIORITY: 5\nWHY: orphaned\n---\nQUESTION: Is it real?\nPRIORITY: 7"
    questions = parse_questions(reply)
    assert [(q.text, q.priority, q.why) for q in questions] == [("Is it real?", 7, "")]


def test_none_and_na_are_not_insights_or_remaining_questions():
    synthesis = parse_synthesis(
        "SYNTHESIS: Done.\nINSIGHTS:\n- None\n- n/a\n- Real one\nREMAINING:\n- NONE"
    )
    assert synthesis.key_insights == ["Real one"]
    assert synthesis.remaining_questions == []


def test_question_key_is_the_words_in_lower_case():
    assert question_key("  What IS  it, really?! ") == "what is it really"


def test_a_questions_digest_is_pinned_as_its_stored_rows_keep_it():
    """Sub-question rows keep this digest (`SubQuestion.text_key`, keyed by migration 0015):
    should it change, older rows would stop matching and duplicates of them slip through."""
    assert question_digest("  What IS  it, really?! ") == "2d8debc115171dfe82251b98fc661311"
    assert question_digest("?! …") == ""  # no words: no key


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (7, 0.7),
        ("5%", 0.05),
        ("5 %", 0.05),
        ("3/4", 0.75),
        ("3/ 4", 0.75),
        ("3/4,0", 0.75),
        ("2/0.5", 0.4),
        ("7/0", 0.7),
        ("1", 1.0),
        ("1.5", 0.15),
        ("10.5", 0.105),
        ("0.123456", 0.1235),
    ],
)
def test_confidence_scales_and_fractions(raw: str | int, expected: float):
    assert clamp_confidence(raw) == expected


def test_labels_keep_their_text_but_lose_markdown_emphasis():
    thoughts = parse_thoughts("THOUGHT: **Xenon is inert**\n---\nTHOUGHT: _X marks it_")
    assert [t.text for t in thoughts] == ["Xenon is inert", "X marks it"]


def test_an_empty_thought_block_does_not_hide_the_next_one():
    assert [t.text for t in parse_thoughts("THOUGHT:\n---\nTHOUGHT: real")] == ["real"]


def test_synthesis_without_labels_or_with_prose_first():
    assert parse_synthesis("").text == ""
    plain = parse_synthesis("Just prose.")
    assert plain.text == "Just prose." and plain.key_insights == []
    assert plain.remaining_questions == []
    assert parse_synthesis("Prose first.\nINSIGHTS:\n- a").text == "Prose first."
    only = parse_synthesis("INSIGHTS:\n- a")
    assert only.text == "INSIGHTS:\n- a" and only.key_insights == ["a"]


def test_bullets_are_clipped_and_capped():
    long = "x" * 1500
    bullets = "\n".join(f"- point {n}" for n in range(25))
    synthesis = parse_synthesis(f"SYNTHESIS: s\nINSIGHTS:\n- {long}\n- -\n{bullets}")
    assert synthesis.key_insights[0] == "x" * 1000
    assert len(synthesis.key_insights) == 20 and "-" not in synthesis.key_insights
