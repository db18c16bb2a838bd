"""The step's UPDATE without the ORM's per-query work (thinking/row_writes.py, issue 17): every
stored step ends with it, so it must store exactly what the ORM's `update` stores, on SQLite
and on PostgreSQL, and fail as it fails."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import FieldDoesNotExist, FieldError, ValidationError
from django.db import IntegrityError, connection, connections, transaction
from django.db.models import F
from django.db.models.sql.compiler import SQLUpdateCompiler
from django.test.utils import CaptureQueriesContext

from accounts.models import Team
from thinking.models import SubQuestion, ThinkingSession
from thinking.row_reads import compiled_on
from thinking.row_writes import update_by_pk

pytestmark = pytest.mark.django_db

WHEN = datetime.datetime(2026, 11, 25, 10, 0, 0, 123456, tzinfo=datetime.UTC)


def fields_of(session: ThinkingSession) -> dict[str, Any]:
    own = ("id", "created_at", "updated_at")
    fields = ThinkingSession._meta.concrete_fields
    return {f.attname: getattr(session, f.attname) for f in fields if f.attname not in own}


def a_step(n: int) -> dict[str, Any]:
    """A step's changes, as `_open_step` gives them: counters, times, JSON, text, nulls."""
    return {
        "revision": F("revision") + 1,
        "active_seconds": F("active_seconds") + 0.25 * n,
        "input_tokens": F("input_tokens") + 2**40,
        "heartbeat_at": WHEN + datetime.timedelta(seconds=n),
        "running_since": None if n % 2 else WHEN,
        "format_errors": [{"cycle": n, "route": "prose", "errors": ["ü «x»"]}] * 3,
        "progress": {"stage": "analysis", "label": None, "confidence": 0.5},
        "plan": {"steps": ["a", "b"], "current": n % 2},
        "format_spec": None,  # SQL NULL, as the ORM stores None in a JSONField
        "focus": f"focus {n} — «ü»",
        "stop_requested": bool(n % 2),
        "max_cost_usd": Decimal("1.5") * n,
        "final_confidence": None,
    }


def check_same_as_the_orm(make_session: Any) -> None:
    ours, theirs = make_session(), make_session()
    for n in (1, 2, 3):
        assert update_by_pk(ThinkingSession, ours.pk, **a_step(n)) == 1
        assert ThinkingSession.objects.filter(pk=theirs.pk).update(**a_step(n)) == 1
        ours.refresh_from_db()
        theirs.refresh_from_db()
        assert fields_of(ours) == fields_of(theirs)
    assert (ours.revision, ours.active_seconds, ours.input_tokens) == (3, 1.5, 3 * 2**40)
    assert ours.format_errors[0]["errors"] == ["ü «x»"] and ours.progress["label"] is None
    assert ThinkingSession.objects.filter(pk=ours.pk, format_spec__isnull=True).exists()
    assert (ours.focus, ours.stop_requested, ours.running_since) == ("focus 3 — «ü»", True, None)
    # An integer column plus a fraction: the database adds the fraction, as with the ORM,
    # also after the same field was added a whole number to.
    for addend in (1, 1.5):
        assert update_by_pk(ThinkingSession, ours.pk, cycles=F("cycles") + addend) == 1
        ThinkingSession.objects.filter(pk=theirs.pk).update(cycles=F("cycles") + addend)
    ours_cycles, theirs_cycles = (
        ThinkingSession.objects.get(pk=s.pk).cycles for s in (ours, theirs)
    )
    assert ours_cycles == theirs_cycles


def test_an_update_stores_what_the_orm_stores(make_session: Any):
    check_same_as_the_orm(make_session)


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_an_update_stores_what_the_orm_stores_on_postgresql(make_session: Any):
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (DATABASE_URL)")
    check_same_as_the_orm(make_session)


def test_an_update_is_compiled_once_per_shape_and_counts_the_rows(make_session: Any):
    session = make_session()
    update_by_pk(ThinkingSession, session.pk, cycles=F("cycles") + 1, focus="a")
    with CaptureQueriesContext(connection) as queries:
        assert update_by_pk(ThinkingSession, session.pk, cycles=F("cycles") + 2, focus="b") == 1
        # Another shape: a value where the first added, so its own statement.
        assert update_by_pk(ThinkingSession, session.pk, cycles=7, focus="c") == 1
    first, second = (query["sql"] for query in queries)
    assert '"cycles" + ' in first and '"cycles" + ' not in second
    session.refresh_from_db()
    assert (session.cycles, session.focus) == (7, "c")
    assert update_by_pk(ThinkingSession, session.pk, cycles=F("cycles") + 1, focus="d") == 1
    session.refresh_from_db()
    assert (session.cycles, session.focus) == (8, "d")  # the first shape again, new values
    other = SubQuestion.objects.create(session=session, text="Why?", priority=2)
    assert update_by_pk(SubQuestion, other.pk, explored=True, answer="Because.") == 1
    assert update_by_pk(SubQuestion, other.pk + 1000, explored=True, answer="No.") == 0
    other.refresh_from_db()
    assert (other.explored, other.answer) == (True, "Because.")


def test_changes_it_does_not_compile_go_through_the_orm(make_session: Any, alice: Any):
    session = make_session(cycles=3, input_tokens=5)
    team = Team.objects.create(name="Lab")
    assert update_by_pk(ThinkingSession, session.pk, cycles=F("cycles") * 2) == 1
    assert update_by_pk(ThinkingSession, session.pk, input_tokens=F("cycles") + 1) == 1
    assert update_by_pk(ThinkingSession, session.pk, team=team, focus="shared") == 1
    session.refresh_from_db()
    assert (session.cycles, session.team, session.input_tokens) == (6, team, 7)
    with pytest.raises(FieldDoesNotExist, match="no field named 'no_such_field'"):
        update_by_pk(ThinkingSession, session.pk, no_such_field=1)  # as the ORM says
    with pytest.raises(FieldError, match="only concrete fields are permitted"):
        update_by_pk(ThinkingSession, session.pk, thoughts=1)  # a reverse relation
    with pytest.raises(TypeError, match="Tried to update field"):  # as the ORM refuses it
        update_by_pk(ThinkingSession, session.pk, focus=team)  # a model in a text field


def test_each_shape_is_compiled_once_and_only_the_orms_changes_each_time(
    make_session: Any, monkeypatch: pytest.MonkeyPatch
):
    """The promise of the module: the ORM's compiler runs once per shape of change (which
    fields, set or added to, and the addend's kind), not once per write."""
    compiled: list[str] = []
    as_sql = SQLUpdateCompiler.as_sql

    def counted(compiler: SQLUpdateCompiler) -> Any:
        compiled.append(compiler.query.model.__name__)
        return as_sql(compiler)

    monkeypatch.setattr(SQLUpdateCompiler, "as_sql", counted)
    compiled_on(connections["default"]).clear()  # what earlier tests compiled here
    session = make_session()
    question = SubQuestion.objects.create(session=session, text="Why?", priority=2)
    for n in range(3):
        update_by_pk(ThinkingSession, session.pk, **a_step(n))
        update_by_pk(SubQuestion, question.pk, explored=True, answer=f"answer {n}")
    assert compiled == ["ThinkingSession", "SubQuestion"]
    for addend in (1, 2, 0.5, 1.5):  # a whole number, then a fraction: two shapes
        update_by_pk(ThinkingSession, session.pk, active_seconds=F("active_seconds") + addend)
    assert len(compiled) == 4
    for _ in range(2):  # the ORM's own: compiled each time
        update_by_pk(ThinkingSession, session.pk, cycles=F("cycles") * 2)
    assert len(compiled) == 6
    session.refresh_from_db()
    assert session.active_seconds == 0.75 + 5.0 and session.revision == 3


@pytest.mark.django_db(transaction=True)
def test_a_failed_update_leaves_its_transaction_to_be_rolled_back(make_session: Any):
    """As the ORM's update: the error surfaces, and nothing else commits in that block."""
    session = make_session(focus="kept")
    with transaction.atomic():
        update_by_pk(ThinkingSession, session.pk, focus="lost")
        with pytest.raises(IntegrityError):
            update_by_pk(ThinkingSession, session.pk, question=None)
        assert connection.needs_rollback
    session.refresh_from_db()
    assert session.focus == "kept"
    with transaction.atomic():  # a value the field refuses, before any SQL runs
        with pytest.raises(ValidationError):
            update_by_pk(ThinkingSession, session.pk, stop_requested="perhaps")
        assert connection.needs_rollback
