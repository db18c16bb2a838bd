"""A long session stored in bulk: thousands of thoughts, sub-questions and sources, with no
model, as issue 67's 15-minute session on a fast model left them. The one builder the
benchmarks (`admin`, `tab`) and the tests of the page, the admin, the live stream and the
exports are tried against.

    .venv/bin/python manage.py shell -c "from bench.long_session import main; main('alice', 5000)"

prints the new session's id (with the server's settings: SQLITE_PATH or DATABASE_URL). Import
this module only after Django is set up: it reads the models through `bench.app`."""

from __future__ import annotations

import random
from typing import Any

from django.db import transaction

WORDS = [
    "evidence",
    "suggests",
    "the",
    "printing",
    "press",
    "lowered",
    "the",
    "cost",
    "of",
    "copying",
    "texts",
    "which",
    "let",
    "scholars",
    "compare",
    "observations",
    "across",
    "cities",
    "and",
    "correct",
    "errors",
    "faster",
    "than",
    "before",
]
TYPES = ["exploration", "connection", "critique", "insight"]
# A model call's thinking block carries the API's signature: never shown, in no admin page.
SIGNATURE = "SIGNATURE-" + "x" * 80


def _text(rng: random.Random, words: int, cite_top: int = 0) -> str:
    text = " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."
    if cite_top:
        text += f" [{rng.randint(1, cite_top)}]"
    return text


def _about(rng: random.Random, questions: list[Any], sequence: int) -> Any:
    """The sub-question a thought is on: the first one (the question the model keeps
    coming back to) for one thought in ten, those ending in 3; any other for the rest."""
    if sequence % 10 == 3 or len(questions) == 1:
        return questions[0]
    return questions[rng.randrange(1, len(questions))]


def build(
    owner: Any,
    *,
    thoughts: int = 5000,
    sub_questions: int | None = None,
    sources: int | None = None,
    syntheses: int | None = None,
    stages: int = 0,
    model_calls: int = 0,
    status: str = "completed",
    seed: int = 67,
    **fields: Any,
) -> Any:
    """A session of `owner` with that many thoughts (4 a cycle, the cycle's first with its
    parts and reasoning, every tenth a scratchpad note, every tenth on the first
    sub-question, the others on any other), and by default two sub-questions and two
    sources for every five thoughts, a synthesis every 50 with five citation checks;
    `stages` stage entries and `model_calls` model calls (each with a signed thinking
    block, as the API returns them). `fields`: the session's own, over the defaults."""
    from . import app

    rng = random.Random(seed)
    sub_questions = thoughts * 2 // 5 if sub_questions is None else sub_questions
    sources = thoughts * 2 // 5 if sources is None else sources
    syntheses = max(1, thoughts // 50) if syntheses is None else syntheses
    finished = status == "completed"
    with transaction.atomic():
        session = app.ThinkingSession.objects.create(
            **{
                "owner": owner,
                "question": "How did the printing press change European science?",
                "budget_seconds": 900,
                "synthesis_interval_seconds": 60,
                "model_id": "claude-test",
                "status": status,
                "final_answer": _text(rng, 120, sources) if finished else "",
                "final_confidence": 0.8 if finished else None,
                "stage_count": stages,
                **fields,
            }
        )
        app.Source.objects.bulk_create(
            (
                app.Source(
                    session=session,
                    number=n,
                    kind="web" if n % 4 else "memory",
                    title=f"Source {n}: " + _text(rng, 8),
                    url=f"https://example.org/{n}",
                    snippet=_text(rng, 40),
                    query=_text(rng, 5),
                    key=f"https://example.org/{n}",
                )
                for n in range(1, sources + 1)
            ),
            batch_size=1000,
        )
        made = app.SubQuestion.objects.bulk_create(
            (
                app.SubQuestion(
                    session=session,
                    text=f"Sub-question {n}: " + _text(rng, 14),
                    why=_text(rng, 20),
                    priority=rng.randint(1, 10),
                    explored=n < sub_questions * 0.7,
                    answer=_text(rng, 30) if n < sub_questions * 0.7 else "",
                )
                for n in range(sub_questions)
            ),
            batch_size=1000,
        )
        # Follow-ups: most questions after the first few were asked about an earlier one.
        for index, question in enumerate(made[10:], start=10):
            question.parent_id = made[rng.randrange(index)].pk
        app.SubQuestion.objects.bulk_update(made[10:], ["parent"], batch_size=500)
        per_cycle = 4
        rows = []
        for sequence in range(thoughts):
            first = sequence % per_cycle == 0
            note = sequence % 10 == 9
            rows.append(
                app.Thought(
                    session=session,
                    sequence=sequence,
                    cycle=sequence // per_cycle,
                    type="scratchpad" if note else TYPES[sequence % 4],
                    text=_text(rng, 60, sources),
                    parts={"analysis": _text(rng, 40), "plan": _text(rng, 20)} if first else {},
                    reasoning=_text(rng, 120) if first else "",
                    confidence=rng.random(),
                    time_offset_seconds=sequence * 900 / thoughts,
                    sub_question=_about(rng, made, sequence) if made and not note else None,
                )
            )
        app.Thought.objects.bulk_create(rows, batch_size=1000)
        made_syntheses = app.Synthesis.objects.bulk_create(
            app.Synthesis(
                session=session,
                sequence=n,
                text=_text(rng, 150, sources),
                key_insights=[_text(rng, 12) for _ in range(3)],
                confidence=min(0.95, 0.3 + n / (syntheses + 1)),
                time_offset_seconds=(n + 1) * 900 / (syntheses + 1),
                is_final=finished and n == syntheses - 1,
            )
            for n in range(syntheses)
        )
        app.CitationCheck.objects.bulk_create(
            app.CitationCheck(
                synthesis=synthesis,
                number=min(sources, 1 + int(rng.paretovariate(1.2))) if sources else 1,
                claim=_text(rng, 12),
                verdict=rng.choice(app.Verdict.values),
            )
            for synthesis in made_syntheses
            for _ in range(5)
        )
        app.Stage.objects.bulk_create(
            (
                app.Stage(
                    session=session,
                    sequence=n + 1,
                    entry={
                        "stage": "analysis",
                        "label": "Analysis",
                        "message": f"Cycle {n}",
                        "at": "1:00",
                    },
                )
                for n in range(stages)
            ),
            batch_size=1000,
        )
        app.ModelCall.objects.bulk_create(
            (
                app.ModelCall(
                    session=session,
                    purpose="thoughts",
                    model=session.model_id,
                    input_tokens=1000 + n,
                    output_tokens=200,
                    cost_usd=0.0123,
                    content=[
                        {"type": "thinking", "thinking": _text(rng, 30), "signature": SIGNATURE}
                    ],
                )
                for n in range(model_calls)
            ),
            batch_size=1000,
        )
        session.refresh_from_db()
    return session


def main(username: str, thoughts: int = 5000, status: str = "completed") -> None:
    from django.contrib.auth import get_user_model

    owner = get_user_model().objects.get(username=username)
    print(build(owner, thoughts=thoughts, status=status).pk)
