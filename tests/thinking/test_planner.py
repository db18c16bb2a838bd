"""The research plan a person sees before the thinking starts: what the model is asked, how
its reply is read (however it dresses the sections up), and the plan made from the question
itself when the model's is unusable."""

from __future__ import annotations

from thinking.deliberation import planner

PLAN_REPLY = """PLAN:
1. Define the terms
2. Compare the mechanisms
TERMS: Rayleigh scattering, wavelength; atmosphere
WEB QUERIES:
- why is the sky blue
- "rayleigh scattering wavelength"
MEMORY QUERIES:
- sky colour notes
"""


def test_the_planning_request_word_for_word():
    stable, variable = planner.plan_prompt("Why is the sky blue?")
    assert stable == (
        "Before thinking, plan the research. Search queries go to a web search engine and\n"
        "to the team's own knowledge base (notes and earlier answers).\n\n"
        "Format:\nPLAN:\n1. [step]\n2. [step]\n"
        "TERMS: [important term], [important term]\n"
        "WEB QUERIES:\n- [a web search query]\n"
        "MEMORY QUERIES:\n- [a knowledge-base search query]"
    )
    assert variable == "Question: Why is the sky blue?"


def test_a_focused_plan_names_the_sub_question_after_the_question():
    stable, variable = planner.plan_prompt("Why is the sky blue?", focus="What about sunsets?")
    assert stable == planner.plan_prompt("Other?")[0], "the stable part is cached"
    assert (
        variable
        == "Question: Why is the sky blue?\nFocus on this sub-question now: What about sunsets?"
    )


def test_a_plan_reply_is_read_section_by_section():
    plan = planner.parse_plan(PLAN_REPLY)

    assert plan is not None
    assert plan.steps == ["Define the terms", "Compare the mechanisms"]
    assert plan.terms == ["Rayleigh scattering", "wavelength", "atmosphere"]
    assert plan.web_queries == ["why is the sky blue", "rayleigh scattering wavelength"]
    assert plan.memory_queries == ["sky colour notes"]
    assert (plan.source, plan.note) == ("model", "")


def test_dressed_up_sections_are_read_too():
    reply = """## **Plan**:\t
* Look it up
2) Think it over
**Terms:** [light], [air]
### Web_Queries:
• blue sky physics
memory_queries: notes on light
"""
    plan = planner.parse_plan(reply)

    assert plan is not None
    assert plan.steps == ["Look it up", "Think it over"]
    assert plan.terms == ["light", "air"]
    assert plan.web_queries == ["blue sky physics"]
    assert plan.memory_queries == ["notes on light"], "an item on the heading's own line"


def test_placeholders_and_overlong_items_are_left_out():
    reply = (
        "PLAN:\n1. [step]\n2. Real step\nWEB QUERIES:\n- [a web search query]\n- "
        + ("q" * 301)
        + "\n- "
        + "w" * 300
    )
    plan = planner.parse_plan(reply)

    assert plan is not None
    assert plan.steps == ["Real step"]
    assert plan.web_queries == ["w" * 300]


def test_a_plan_keeps_at_most_eight_steps_four_queries_each_and_eight_terms():
    steps = "\n".join(f"{n}. step {n}" for n in range(1, 12))
    queries = "\n".join(f"- query {n}" for n in range(1, 7))
    terms = ", ".join(f"term{n}" for n in range(1, 12))
    reply = f"PLAN:\n{steps}\nTERMS: {terms}\nWEB QUERIES:\n{queries}\nMEMORY QUERIES:\n{queries}"
    plan = planner.parse_plan(reply)

    assert plan is not None
    assert plan.steps == [f"step {n}" for n in range(1, 9)]
    assert plan.terms == [f"term{n}" for n in range(1, 9)]
    assert plan.web_queries == plan.memory_queries == [f"query {n}" for n in range(1, 5)]


def test_the_first_of_two_sections_with_one_name_counts():
    reply = "PLAN:\n1. first\nWEB QUERIES:\n- a\nPLAN:\n1. second\nWEB QUERIES:\n- b"
    plan = planner.parse_plan(reply)
    assert plan is not None
    assert (plan.steps, plan.web_queries) == (["first"], ["a"])


def test_a_plan_with_only_knowledge_base_queries_is_usable():
    plan = planner.parse_plan("PLAN:\n1. Read our notes\nMEMORY QUERIES:\n- our notes")
    assert plan is not None
    assert (plan.web_queries, plan.memory_queries) == ([], ["our notes"])


def test_a_plan_without_steps_or_without_queries_is_unusable():
    assert planner.parse_plan("WEB QUERIES:\n- sky") is None
    assert planner.parse_plan("PLAN:\n1. Think hard\nTERMS: sky") is None
    assert planner.parse_plan("") is None
    assert planner.parse_plan(None) is None  # type: ignore[arg-type]


def test_key_terms_are_content_words_in_order_without_repeats():
    terms = planner.key_terms("Why does the Sky look blue, and why is the sky's BLUE deeper?")
    assert terms == ["sky", "look", "blue", "sky's", "deeper"]


def test_no_common_word_is_ever_a_key_term():
    assert planner.key_terms(" ".join(sorted(planner.STOPWORDS))) == []
    # Two-letter words never are, even when punctuation is stripped from them.
    assert planner.key_terms("up-- no'' ox-") == []


def test_key_terms_stop_at_the_limit():
    text = "alpha bravo charlie delta echo foxtrot golf hotel"
    assert planner.key_terms(text) == ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot"]
    assert planner.key_terms(text, limit=2) == ["alpha", "bravo"]


def test_the_fallback_plan_searches_the_question_and_its_terms():
    plan = planner.heuristic_plan("  Why is   the sky blue at noon?  ")

    assert plan.steps == [
        "Understand the question and its key terms",
        "Search the knowledge base and the web",
        "Explore the most important sub-questions",
        "Weigh the evidence and synthesise an answer",
    ]
    assert plan.terms == ["sky", "blue", "noon"]
    assert plan.web_queries == ["Why is the sky blue at noon?", "sky blue noon"]
    assert plan.memory_queries == ["sky blue noon"]
    assert plan.source == "heuristic"
    assert plan.note == (
        "The model's plan was unusable, so a simple plan was made from the question's terms."
    )


def test_the_fallback_plan_says_why_it_was_needed():
    plan = planner.heuristic_plan("Sky?", reason="Planning with the model failed (down).")
    assert plan.note == "Planning with the model failed (down)."


def test_a_question_with_one_key_term_is_searched_as_asked():
    plan = planner.heuristic_plan("Why sky?")
    assert plan.web_queries == ["Why sky?"]
    assert plan.memory_queries == ["sky"]


def test_a_question_without_key_terms_is_searched_as_asked_everywhere():
    question = "Is it so? " + "x" * 300
    plan = planner.heuristic_plan("Is it so?")
    assert (plan.terms, plan.web_queries, plan.memory_queries) == (
        [],
        ["Is it so?"],
        ["Is it so?"],
    )
    long = planner.heuristic_plan(question)
    assert long.web_queries[0] == question[:200], "a long question is cut to 200 characters"


def test_a_plan_is_stored_from_its_first_step():
    plan = planner.Plan(
        steps=["a", "b"], terms=["t"], web_queries=["w"], memory_queries=["m"], note="n"
    )
    assert plan.to_json() == {
        "steps": ["a", "b"],
        "terms": ["t"],
        "web_queries": ["w"],
        "memory_queries": ["m"],
        "source": "model",
        "note": "n",
        "current": 0,
    }


def test_the_fallback_searches_the_first_four_key_terms_once_there_are_two():
    two = planner.heuristic_plan("Why sky blue?")
    assert two.web_queries == ["Why sky blue?", "sky blue"]
    many = planner.heuristic_plan("alpha bravo charlie delta echo foxtrot golf")
    assert many.web_queries[1] == "alpha bravo charlie delta"
    assert many.memory_queries == ["alpha bravo charlie delta echo foxtrot"]


def test_terms_and_queries_keep_their_own_letters_and_empty_terms_are_dropped():
    reply = 'PLAN:\n1. Image it\nTERMS: X, [], MAX-X, [X-ray]\nWEB QUERIES:\n- "X-ray imaging MAX"'
    plan = planner.parse_plan(reply)

    assert plan is not None
    assert plan.terms == ["X", "MAX-X", "X-ray"]
    assert plan.web_queries == ["X-ray imaging MAX"]


def test_a_plan_without_terms_has_none():
    plan = planner.parse_plan("PLAN:\n1. Look\nWEB QUERIES:\n- sky")
    assert plan is not None
    assert plan.terms == []
