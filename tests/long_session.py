"""A long session stored in bulk: thousands of thoughts, sub-questions and sources, with no
model. What the page, its partials and their measurements are tried against (#67).

    .venv/bin/python manage.py shell -c "from tests.long_session import main; main('alice', 5000)"

prints the new session's id (with the server's settings: SQLITE_PATH or DATABASE_URL)."""

from __future__ import annotations

import random
from typing import Any

from django.db import transaction

from thinking.models import (
    CitationCheck,
    Source,
    SourceKind,
    Status,
    SubQuestion,
    Synthesis,
    ThinkingSession,
    Thought,
    ThoughtType,
    Verdict,
)

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
TYPES = [ThoughtType.EXPLORATION, ThoughtType.CONNECTION, ThoughtType.CRITIQUE, ThoughtType.INSIGHT]


def _text(rng: random.Random, words: int, cite_top: int = 0) -> str:
    text = " ".join(rng.choice(WORDS) for _ in range(words)).capitalize() + "."
    if cite_top:
        text += f" [{rng.randint(1, cite_top)}]"
    return text


def _about(rng: random.Random, questions: list[SubQuestion], sequence: int) -> SubQuestion:
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
    status: str = Status.COMPLETED,
    seed: int = 67,
) -> ThinkingSession:
    """A session of `owner` with that many thoughts (4 a cycle, the cycle's first with its
    parts and reasoning, every tenth a scratchpad note, every tenth on the first
    sub-question, the others on any other), and by default two
    sub-questions and two sources for every five thoughts and a synthesis every 50, as a
    fast model writes them over a long session."""
    rng = random.Random(seed)
    sub_questions = thoughts * 2 // 5 if sub_questions is None else sub_questions
    sources = thoughts * 2 // 5 if sources is None else sources
    syntheses = max(1, thoughts // 50) if syntheses is None else syntheses
    with transaction.atomic():
        session = ThinkingSession.objects.create(
            owner=owner,
            question="How did the printing press change European science?",
            budget_seconds=900,
            synthesis_interval_seconds=60,
            status=status,
            final_answer=_text(rng, 120, sources) if status == Status.COMPLETED else "",
            final_confidence=0.8 if status == Status.COMPLETED else None,
        )
        Source.objects.bulk_create(
            Source(
                session=session,
                number=n,
                kind=SourceKind.WEB if n % 4 else SourceKind.MEMORY,
                title=f"Source {n}: " + _text(rng, 8),
                url=f"https://example.org/{n}",
                snippet=_text(rng, 40),
                query=_text(rng, 5),
                key=f"https://example.org/{n}",
            )
            for n in range(1, sources + 1)
        )
        made = SubQuestion.objects.bulk_create(
            SubQuestion(
                session=session,
                text=f"Sub-question {n}: " + _text(rng, 14),
                why=_text(rng, 20),
                priority=rng.randint(1, 10),
                explored=n < sub_questions * 0.7,
                answer=_text(rng, 30) if n < sub_questions * 0.7 else "",
            )
            for n in range(sub_questions)
        )
        # Follow-ups: most questions after the first few were asked about an earlier one.
        for index, question in enumerate(made[10:], start=10):
            question.parent_id = made[rng.randrange(index)].pk
        SubQuestion.objects.bulk_update(made[10:], ["parent"], batch_size=500)
        per_cycle = 4
        rows = []
        for sequence in range(thoughts):
            cycle = sequence // per_cycle
            first = sequence % per_cycle == 0
            note = sequence % 10 == 9
            rows.append(
                Thought(
                    session=session,
                    sequence=sequence,
                    cycle=cycle,
                    type=ThoughtType.SCRATCHPAD if note else TYPES[sequence % 4],
                    text=_text(rng, 60, sources),
                    parts={"analysis": _text(rng, 40), "plan": _text(rng, 20)} if first else {},
                    reasoning=_text(rng, 120) if first else "",
                    confidence=rng.random(),
                    time_offset_seconds=sequence * 900 / thoughts,
                    sub_question=_about(rng, made, sequence) if made and not note else None,
                )
            )
        Thought.objects.bulk_create(rows, batch_size=1000)
        made_syntheses = Synthesis.objects.bulk_create(
            Synthesis(
                session=session,
                sequence=n,
                text=_text(rng, 150, sources),
                key_insights=[_text(rng, 12) for _ in range(3)],
                confidence=min(0.95, 0.3 + n / (syntheses + 1)),
                time_offset_seconds=(n + 1) * 900 / (syntheses + 1),
                is_final=status == Status.COMPLETED and n == syntheses - 1,
            )
            for n in range(syntheses)
        )
        verdicts = list(Verdict.values)
        CitationCheck.objects.bulk_create(
            CitationCheck(
                synthesis=synthesis,
                number=min(sources, 1 + int(rng.paretovariate(1.2))) if sources else 1,
                claim=_text(rng, 12),
                verdict=rng.choice(verdicts),
            )
            for synthesis in made_syntheses
            for _ in range(5)
        )
        session.refresh_from_db()
    return session


def main(username: str, thoughts: int = 5000, status: str = Status.COMPLETED) -> None:
    from django.contrib.auth import get_user_model

    owner = get_user_model().objects.get(username=username)
    print(build(owner, thoughts=thoughts, status=status).pk)
