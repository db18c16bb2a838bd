"""The fake model writes in the language its prompt asks for, as a model would."""

from __future__ import annotations

import pytest

from fakes.anthropic_server import MindState, scripted_mind
from fakes.languages import asked_language, detect
from thinking.deliberation import prompts


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("Pourquoi est-ce que nous rêvons ?", "fr"),
        ("Quel est le rôle des océans dans le climat ?", "fr"),
        ("Why do we dream?", "en"),
        ("What is the role of the oceans in the climate?", "en"),
        ("Café?", "en"),  # an accent alone is not French
        ("Tides", "en"),
    ],
)
def test_the_language_of_a_question_is_recognised(text: str, language: str):
    assert detect(text) == language


def test_the_instruction_decides_and_the_question_only_when_it_says_so():
    french_question = "Pourquoi rêvons-nous la nuit ?"
    assert asked_language(prompts.system(""), french_question) == "fr"
    assert asked_language(prompts.system(""), "Why do we dream?") == "en"
    assert asked_language(prompts.system("French"), "Why do we dream?") == "fr"
    assert asked_language(prompts.system("English"), french_question) == "en"
    assert asked_language("No instruction at all.", french_question) == "en"


def test_a_synthesis_is_written_in_the_language_asked_with_its_labels_in_english():
    body = {
        "system": [{"type": "text", "text": prompts.system("French")}],
        "messages": [
            {
                "role": "user",
                "content": prompts.synthesis_prompt(question="Why do we dream?", log=[]).text,
            }
        ],
    }
    text = scripted_mind(body, MindState()).text
    assert text.startswith("SYNTHESIS: Sur la question “Why do we dream?”")
    assert "\nINSIGHTS:\n- Le facteur décisif" in text and "\nCONFIDENCE: 0.45\n" in text
