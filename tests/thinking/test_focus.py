"""Which question the next thought cycle works on (steps.select_focus): a person's own
sub-question first, then the highest priority, then the oldest (issue 16: mutants of the
ordering that no session test noticed)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection

from thinking.deliberation import steps
from thinking.models import SubQuestion

pytestmark = pytest.mark.django_db


def focus_of(session: Any) -> str:
    return steps.select_focus(session=session).text


def check_a_persons_question_comes_first(session: Any, person: Any) -> None:
    SubQuestion.objects.create(session=session, text="The model's urgent one", priority=10)
    SubQuestion.objects.create(
        session=session, text="Asked by a person", priority=2, added_by=person
    )
    SubQuestion.objects.create(session=session, text="The model's other one", priority=9)
    # The person asked for it now: it is explored next, whatever the model's priorities.
    assert focus_of(session) == "Asked by a person"
    SubQuestion.objects.filter(added_by=person).update(explored=True)
    assert focus_of(session) == "The model's urgent one"


def test_a_persons_question_is_explored_before_the_models(make_session: Any, alice: Any):
    check_a_persons_question_comes_first(make_session(), alice)


@pytest.mark.services
def test_a_persons_question_is_explored_before_the_models_on_postgresql(
    make_session: Any, alice: Any
):
    # PostgreSQL sorts NULLs first in a descending order (SQLite last): the model's
    # questions, added by nobody, must still come after a person's.
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (DATABASE_URL)")
    check_a_persons_question_comes_first(make_session(), alice)


def test_of_equal_priority_the_oldest_sub_question_is_explored_first(make_session: Any):
    session = make_session()
    first = SubQuestion.objects.create(session=session, text="Asked later", priority=5)
    second = SubQuestion.objects.create(session=session, text="Asked earlier", priority=5)
    # Row order and age disagree (as after a restore): the age decides.
    SubQuestion.objects.filter(pk=second.pk).update(created_at=first.created_at - timedelta(1))
    assert focus_of(session) == "Asked earlier"


def test_with_every_sub_question_explored_the_session_returns_to_its_question(
    make_session: Any,
):
    session = make_session(question="Why is the sky blue?")
    SubQuestion.objects.create(session=session, text="Done", priority=9, explored=True)
    focus = steps.select_focus(session=session)
    assert (focus.text, focus.sub_question_id) == ("Why is the sky blue?", None)


def test_of_the_models_questions_the_highest_priority_is_explored_first(make_session: Any):
    session = make_session()
    SubQuestion.objects.create(session=session, text="Asked first, minor", priority=3)
    SubQuestion.objects.create(session=session, text="Asked later, pressing", priority=8)
    assert focus_of(session) == "Asked later, pressing"
