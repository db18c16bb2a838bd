"""A step reads its row once and writes it once: what it hands back is what was stored."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import FieldDoesNotExist
from django.db import connection
from django.db.models import F
from django.db.models.functions import Now
from django.test.utils import CaptureQueriesContext

from accounts.models import Team
from thinking.deliberation import steps
from thinking.models import Status, ThinkingSession
from thinking.provider import parsing
from thinking.provider.llm import Reply

pytestmark = pytest.mark.django_db


class FixedLap:
    def lap(self) -> float:
        return 1.25


def stored_fields(session: ThinkingSession) -> dict[str, Any]:
    return {f.attname: getattr(session, f.attname) for f in session._meta.concrete_fields}


def test_the_session_a_step_returns_matches_the_stored_row(make_session: Any):
    session = make_session(status=Status.THINKING, worker_id="w1", active_seconds=2.5)
    with (
        CaptureQueriesContext(connection) as queries,
        ThinkingSession.step(session.pk, worker_id="w1", meter=FixedLap()) as step,
    ):
        step.add_usage(input_tokens=100, output_tokens=7, cache_read_tokens=3, cache_write_tokens=0)
        step.add(cycles=1)
        step.update(focus="Why?", parse_routes={"tags": 1})
    statements = [q["sql"].split()[0].upper() for q in queries.captured_queries]
    assert statements.count("UPDATE") == 1, statements  # every change in one statement
    assert statements.count("SELECT") == 1, statements  # the locked read; nothing read back

    returned = stored_fields(step.session)
    fresh = stored_fields(ThinkingSession.objects.get(pk=session.pk))
    assert returned == fresh
    assert fresh["revision"] == session.revision + 1
    assert fresh["active_seconds"] == pytest.approx(3.75)
    assert (fresh["input_tokens"], fresh["output_tokens"]) == (100, 7)
    assert (fresh["cycles"], fresh["focus"]) == (1, "Why?")
    # The worker's step renews its lease and restarts the clock's stretch at the commit.
    assert fresh["heartbeat_at"] == fresh["running_since"]
    assert fresh["heartbeat_at"] > session.created_at


def test_an_expression_it_cannot_work_out_is_read_back(make_session: Any):
    session = make_session(status=Status.THINKING, worker_id="w1", cycles=4)
    with ThinkingSession.step(session.pk, worker_id="w1") as step:
        step.update(cycles=F("cycles") * 3)
    assert step.session.cycles == 12
    assert stored_fields(step.session) == stored_fields(ThinkingSession.objects.get(pk=session.pk))


@pytest.mark.parametrize(
    "change",
    [
        lambda team: {"team_id": team.pk},  # a column by its own name
        lambda team: {"team": team},  # a relation
        lambda team: {"heartbeat_at": Now()},  # a database function
        lambda team: {"output_tokens": F("cycles")},  # another column's value
        lambda team: {"cycles": F("cycles") + 2, "focus": "Why?"},  # worked out locally
    ],
    ids=["column", "relation", "function", "other-column", "local"],
)
def test_whatever_a_step_writes_the_session_it_returns_shows(make_session: Any, change: Any):
    session = make_session(status=Status.THINKING, worker_id="w1", cycles=4)
    team = Team.objects.create(name="Readers")
    with ThinkingSession.step(session.pk, worker_id="w1") as step:
        step.update(**change(team))
    assert stored_fields(step.session) == stored_fields(ThinkingSession.objects.get(pk=session.pk))


def test_a_step_that_writes_no_such_field_stores_nothing(make_session: Any):
    session = make_session(status=Status.THINKING, worker_id="w1", cycles=4)
    with (
        pytest.raises(FieldDoesNotExist),
        ThinkingSession.step(session.pk, worker_id="w1") as step,
    ):
        step.update(cycles=F("cycles") + 1, not_a_field=1)
    assert stored_fields(ThinkingSession.objects.get(pk=session.pk)) == stored_fields(session)


# --- what a stored step says in words ----------------------------------------------------


@pytest.mark.parametrize(
    ("thinking", "redacted", "shown"),
    [
        ("Weighing both.", 0, "Weighing both."),
        ("", 0, ""),
        ("", 1, "[1 reasoning block redacted by the provider]"),
        ("", 2, "[2 reasoning blocks redacted by the provider]"),
        ("Weighing both.", 3, "Weighing both.\n\n[3 reasoning blocks redacted by the provider]"),
    ],
)
def test_a_thoughts_reasoning_shows_the_thinking_and_what_the_provider_redacted(
    thinking: str, redacted: int, shown: str
):
    reply = Reply(text="", thinking=thinking, redacted_blocks=redacted)
    assert steps.reasoning_text(reply) == shown


EARLY = (
    "Stopped early after 42s of 600s: the model signalled that its understanding was sufficient."
)


@pytest.mark.parametrize(
    ("parts", "thoughts", "note"),
    [
        ({"reasoning": "R", "analysis": "A"}, ["First"], f"{EARLY} Its reasoning: R"),
        ({"analysis": "A"}, ["First"], f"{EARLY} Its reasoning: A"),
        ({}, ["First", "Second"], f"{EARLY} Its reasoning: First"),
        ({}, [], EARLY),
        ({"reasoning": "x" * 700}, [], f"{EARLY} Its reasoning: {'x' * 600}"),
    ],
)
def test_an_early_stop_says_when_and_why_in_the_models_words(
    parts: dict[str, str], thoughts: list[str], note: str
):
    # The completion note a person reads: the reasoning part, else the analysis, else the
    # first thought, clipped at 600 characters.
    session = ThinkingSession(budget_seconds=600, active_seconds=42.4)
    reading = parsing.ThoughtReply(
        thoughts=[parsing.ParsedThought(text) for text in thoughts], parts=parts
    )
    assert steps._stop_note(session, reading) == note
