"""The step's UPDATE and its rows' INSERTs without the ORM's per-query work
(thinking/row_writes.py, issue 17): every stored step runs them, so they must store exactly
what the ORM's `update` and `bulk_create` store, on SQLite and on PostgreSQL, and fail as
they fail."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pytest
import time_machine
from django.core.exceptions import FieldDoesNotExist, FieldError, ValidationError
from django.db import IntegrityError, connection, connections, transaction
from django.db.models import F
from django.db.models.functions import Now
from django.db.models.sql.compiler import SQLUpdateCompiler
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from accounts.models import Team
from tests.helpers import needs_postgresql
from thinking import row_writes
from thinking.models import ModelCall, Source, Stage, SubQuestion, ThinkingSession, Thought
from thinking.row_reads import compiled_on
from thinking.row_writes import insert_rows, inserted_rows, update_by_pk

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
    needs_postgresql()
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
    fields, set or added to), not once per write: a whole number or a fraction added is one
    shape (its type is the parameter's, not the SQL's)."""
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
    for addend in (1, 2, 0.5, 1.5):  # whole numbers, then fractions: one shape
        update_by_pk(ThinkingSession, session.pk, active_seconds=F("active_seconds") + addend)
    assert len(compiled) == 3
    for _ in range(2):  # the ORM's own: compiled each time
        update_by_pk(ThinkingSession, session.pk, cycles=F("cycles") * 2)
    assert len(compiled) == 5
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


# --- INSERTs (insert_rows) --------------------------------------------------------------


def columns_of(row: Any, *skip: str) -> dict[str, Any]:
    own = ("id", "session_id", "created_at", *skip)
    fields = type(row)._meta.concrete_fields
    return {f.attname: getattr(row, f.attname) for f in fields if f.attname not in own}


def some_rows(session: ThinkingSession, question: SubQuestion) -> list[tuple[Any, list[dict]]]:
    """A step's rows of each kind, as the loop stores them: text beyond ASCII, JSON, floats,
    nulls, fields left to their defaults, and a time given where the clock's goes."""
    return [
        (
            Thought,
            [
                {
                    "session_id": session.pk,
                    "sequence": n,
                    "cycle": 3,
                    "text": f"Thought {n} — «ü» [1]",
                    "type": "analysis",
                    "confidence": 0.125 * n,
                    "parts": {"thoughts": [{"type": "analysis"}], "route": "tags"},
                    "reasoning": "" if n else "why ✓",
                    "truncated": bool(n % 2),
                    "time_offset_seconds": 12.34,
                    "sub_question_id": question.pk if n % 2 else None,
                    "created_at": WHEN,  # auto_now_add: the clock's time wins, as on a save
                }
                # More parameters than psycopg parses once: one array per column there.
                for n in range(6)
            ],
        ),
        (
            ModelCall,
            [
                {
                    "session_id": session.pk,
                    "purpose": "thoughts",
                    "model": "claude-test",
                    "stop_reason": "end_turn",
                    "input_tokens": 2**31 - 1,
                    "content": [{"type": "thinking", "thinking": "ü", "signature": "c2ln"}],
                }
            ],
        ),
        (
            SubQuestion,
            [
                {
                    "session_id": session.pk,
                    "text": f"Why {n}?",
                    "priority": n + 1,
                    "why": "",
                    "parent_id": question.pk if n else None,
                }
                for n in range(3)
            ],
        ),
        (Stage, [{"session_id": session.pk, "sequence": 7, "entry": {"stage": "analysis"}}]),
    ]


def check_inserts_like_bulk_create(make_session: Any) -> None:
    ours, theirs = make_session(), make_session()
    asked = {
        s.pk: SubQuestion.objects.create(session=s, text="Root?", priority=5)
        for s in (ours, theirs)
    }
    started = timezone.now()
    for (model, rows), (_, same) in zip(
        some_rows(ours, asked[ours.pk]), some_rows(theirs, asked[theirs.pk]), strict=True
    ):
        with CaptureQueriesContext(connection) as queries:
            assert insert_rows(model, rows) == len(rows)
        assert len(queries) == 1  # one statement for the step's rows of a kind
        model.objects.bulk_create([model(**row) for row in same])
        mine, stored = (
            model.objects.filter(session=s).exclude(
                pk=asked[s.pk].pk if model is SubQuestion else None
            )
            for s in (ours, theirs)
        )
        mine, stored = mine.order_by("pk"), stored.order_by("pk")
        parent = ("parent_id", "sub_question_id")  # each session's own root question
        assert [columns_of(r, *parent) for r in mine] == [columns_of(r, *parent) for r in stored]
        assert len(mine) == len(rows)
        if hasattr(model, "created_at"):
            times = {r.created_at for r in mine}
            assert len(times) == 1 and started <= times.pop() <= timezone.now()
    thoughts = Thought.objects.filter(session=ours).order_by("sequence")
    assert [t.sub_question_id for t in thoughts] == [None, asked[ours.pk].pk] * 3
    assert thoughts[0].parts["route"] == "tags" and thoughts[0].reasoning == "why ✓"
    call = ModelCall.objects.get(session=ours)
    assert (call.thinking_mode, call.duration_ms, call.content[0]["thinking"]) == ("off", 0, "ü")
    assert (
        SubQuestion.objects.filter(session=ours, priority_changes=[], explored=False).count() == 4
    )


def test_inserted_rows_are_what_bulk_create_stores(make_session: Any):
    check_inserts_like_bulk_create(make_session)


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_inserted_rows_are_what_bulk_create_stores_on_postgresql(make_session: Any):
    needs_postgresql()
    check_inserts_like_bulk_create(make_session)


def a_source(session: ThinkingSession, number: int) -> dict[str, Any]:
    """A source row as a plan's research stores it (`found_by` left to its default)."""
    return {
        "session_id": session.pk,
        "number": number,
        "kind": "web" if number % 2 else "memory",
        "title": f"Page {number} — «ü»",
        "url": f"https://example.com/{number}",
        "snippet": "A passage ✓ " * 40,
        "score": 0.125 * number,
        "query": "tides",
        "key": f"https://example.com/{number}",
    }


def check_inserted_rows_come_back_as_bulk_create_gives_them(make_session: Any) -> None:
    ours, theirs = make_session(), make_session()
    width = len(row_writes._insert_plan(Source, frozenset(a_source(ours, 1))) or ())
    for first, count in ((1, 1), (2, 3), (5, 12)):
        numbers = range(first, first + count)
        started = timezone.now()
        with CaptureQueriesContext(connection) as queries:
            mine = inserted_rows(Source, [a_source(ours, n) for n in numbers])
        assert len(queries) == 1  # the keys come back with the INSERT
        # On PostgreSQL, more than psycopg parses once go as one array per column.
        arrays = connection.vendor == "postgresql" and count * width > 50
        assert ("UNNEST" in queries[0]["sql"]) == arrays, queries[0]["sql"]
        made = [Source(**a_source(theirs, n)) for n in numbers]
        Source.objects.bulk_create(made)
        stored = Source.objects.in_bulk([source.pk for source in mine])
        assert [source.number for source in mine] == list(numbers)  # in the rows' order
        for source, same in zip(mine, made, strict=True):
            assert source.pk is not None and not source._state.adding
            assert source._state.db == same._state.db == "default"
            assert columns_of(source) == columns_of(same) == columns_of(stored[source.pk])
            assert source.session_id == ours.pk and source.found_by == "plan"
            assert started <= source.created_at == stored[source.pk].created_at
    assert Source.objects.filter(session=ours).count() == 16


def test_inserted_rows_come_back_as_bulk_create_gives_them(make_session: Any):
    check_inserted_rows_come_back_as_bulk_create_gives_them(make_session)


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_inserted_rows_come_back_as_bulk_create_gives_them_on_postgresql(make_session: Any):
    needs_postgresql()
    check_inserted_rows_come_back_as_bulk_create_gives_them(make_session)


def test_rows_whose_keys_it_cannot_read_back_go_through_the_orm(
    make_session: Any, monkeypatch: pytest.MonkeyPatch
):
    session = make_session()
    monkeypatch.setattr(
        type(connection.features), "can_return_rows_from_bulk_insert", False, raising=False
    )
    monkeypatch.setitem(connection.features.__dict__, "can_return_rows_from_bulk_insert", False)
    compiled_on(connections["default"]).clear()
    made: list[int] = []
    bulk_create = Source.objects.bulk_create

    def counted(objs: Any, *args: Any, **kwargs: Any) -> Any:
        made.append(len(objs))
        return bulk_create(objs, *args, **kwargs)

    monkeypatch.setattr(Source.objects, "bulk_create", counted)
    mine = inserted_rows(Source, [a_source(session, n) for n in (1, 2)])
    # As bulk_create gives them there: without the keys it cannot read back.
    assert made == [2] and [s.number for s in mine] == [1, 2]
    # A key given, or an expression: the ORM's too.
    given = inserted_rows(Source, [{**a_source(session, 3), "id": 4242}])
    assert made == [2, 1] and given[0].pk == 4242
    monkeypatch.undo()
    timed = inserted_rows(Source, [{**a_source(session, 4), "created_at": Now()}])
    assert timed[0].pk is not None
    assert list(Source.objects.filter(session=session).values_list("number", flat=True)) == [
        1,
        2,
        3,
        4,
    ]


def postgresql_offline() -> Any:
    """A PostgreSQL connection that never connects: its backend's words for a statement,
    on any machine."""
    from django.db.backends.postgresql.base import DatabaseWrapper

    settings = {**connection.settings_dict, "ENGINE": "django.db.backends.postgresql"}
    return DatabaseWrapper({**settings, "OPTIONS": {}}, alias="postgresql-offline")


@pytest.mark.parametrize(("count", "limit"), [(1, 50), (4, 50), (4, 44), (4, 43), (12, 50)])
def test_on_postgresql_many_rows_go_as_the_orm_writes_them_there(
    count: int, limit: int, make_session: Any, monkeypatch: pytest.MonkeyPatch
):
    """Rows of more than 50 parameters (psycopg parses those anew each time) go as the
    ORM's bulk_create writes them on PostgreSQL, one array per column; fewer, one value per
    field. The keys come back in the rows' order."""
    from django.db.models.sql import InsertQuery

    session, pg = make_session(), postgresql_offline()
    ran: list[tuple[str, list[Any]]] = []

    def run(on: Any, sql: str, params: list[Any], take: Any) -> list[int]:
        assert on is pg
        ran.append((sql, params))
        return list(range(101, 101 + count))

    monkeypatch.setattr(row_writes, "connections", {"default": pg})
    monkeypatch.setattr(row_writes, "run_statement", run)
    monkeypatch.setattr(row_writes, "PARSED_ONCE_PARAMS", limit)  # 4 sources: 44 parameters
    rows = [a_source(session, n) for n in range(1, count + 1)]
    with time_machine.travel(WHEN, tick=False):
        made = inserted_rows(Source, rows)
        query = InsertQuery(Source)
        fields = [f for f in Source._meta.concrete_fields if not f.primary_key]
        query.insert_values(fields, [Source(**row) for row in rows])
        compiler = query.get_compiler(connection=pg)
        compiler.returning_fields = [Source._meta.pk]
        ((orm_sql, orm_params),) = compiler.as_sql()
    ((sql, params),) = ran
    if count * len(fields) > limit or count == 1:
        assert (sql, params) == (orm_sql, list(orm_params))
    else:  # the ORM's arrays, one value per field instead
        assert "UNNEST" in orm_sql and "UNNEST" not in sql and "VALUES" in sql
        assert params == [value for row in zip(*orm_params, strict=True) for value in row]
    assert [source.pk for source in made] == list(range(101, 101 + count))
    assert [columns_of(source) for source in made] == [columns_of(Source(**r)) for r in rows]
    assert {source.created_at for source in made} == {WHEN}


def limit_parameters(monkeypatch: pytest.MonkeyPatch, limit: int) -> None:
    """The backend's limit on a statement's parameters, as SQLite's is (PostgreSQL keeps
    its own, None, once read)."""
    features = connection.features
    monkeypatch.setattr(type(features), "max_query_params", limit)
    monkeypatch.setitem(features.__dict__, "max_query_params", limit)


def test_rows_beyond_the_databases_parameter_limit_go_in_batches(
    make_session: Any, monkeypatch: pytest.MonkeyPatch
):
    session = make_session()
    rows = [{"session_id": session.pk, "sequence": n, "entry": {"n": n}} for n in range(7)]
    limit_parameters(monkeypatch, 6)  # two rows of three columns a statement
    with CaptureQueriesContext(connection) as queries:
        assert insert_rows(Stage, rows) == 7
    assert len(queries) == 4
    limit_parameters(monkeypatch, 2)  # not even one row's: one a statement all the same
    more = [{"session_id": session.pk, "sequence": n, "entry": {"n": n}} for n in range(7, 10)]
    with CaptureQueriesContext(connection) as queries:
        assert insert_rows(Stage, more) == 3
    assert len(queries) == 3
    # With the keys read back, batch by batch, every row's.
    rows = [{"session_id": session.pk, "sequence": n, "entry": {"n": n}} for n in range(10, 15)]
    limit_parameters(monkeypatch, 6)
    with CaptureQueriesContext(connection) as queries:
        made = inserted_rows(Stage, rows)
    assert len(queries) == 3
    assert [(stage.pk, stage.sequence) for stage in made] == list(
        Stage.objects.filter(sequence__gte=10).order_by("pk").values_list("pk", "sequence")
    )
    stored = Stage.objects.filter(session=session).order_by("sequence")
    assert [s.entry["n"] for s in stored] == list(range(15))
    with CaptureQueriesContext(connection) as queries:
        assert insert_rows(Stage, []) == 0
    assert not queries


def test_an_insert_is_built_once_per_shape(make_session: Any, monkeypatch: pytest.MonkeyPatch):
    """Which columns and where their values come from, and the statement for so many rows,
    are each worked out once per connection, not on every step."""
    built: list[int] = []
    planned: list[str] = []
    bulk_insert_sql = type(connection.ops).bulk_insert_sql
    plan = row_writes._insert_plan

    def counted(ops: Any, fields: Any, placeholder_rows: Any) -> str:
        built.append(len(placeholder_rows))
        return bulk_insert_sql(ops, fields, placeholder_rows)

    def counted_plan(model: Any, names: Any) -> Any:
        planned.append(model.__name__)
        return plan(model, names)

    session = make_session()
    monkeypatch.setattr(type(connection.ops), "bulk_insert_sql", counted)
    monkeypatch.setattr(row_writes, "_insert_plan", counted_plan)
    compiled_on(connections["default"]).clear()
    for first in (0, 10, 20):
        rows = [{"session_id": session.pk, "sequence": first + n, "entry": {}} for n in range(2)]
        insert_rows(Stage, rows)
    insert_rows(Stage, [{"session_id": session.pk, "sequence": 30, "entry": {}}])
    assert built == [2, 1]  # two rows, then one: two statements
    insert_rows(Stage, [{"sequence": 31, "session_id": session.pk, "entry": {}}])
    assert planned == ["Stage"] and built == [2, 1]  # the same fields in another order
    insert_rows(Stage, [{"id": 4242, "session_id": session.pk, "sequence": 32, "entry": {}}])
    assert built == [2, 1, 1]  # other fields, as many rows: a statement of its own
    assert Stage.objects.filter(session=session).count() == 9


def test_a_given_key_is_stored(make_session: Any):
    session = make_session()
    insert_rows(Stage, [{"id": 4242, "session_id": session.pk, "sequence": 1, "entry": {}}])
    assert Stage.objects.get(session=session).pk == 4242


def test_rows_it_does_not_build_go_through_the_orm(make_session: Any):
    session = make_session()
    # A value that is an expression: the ORM's bulk_create stores it.
    asked = {"session_id": session.pk, "text": "When?", "priority": 1}
    insert_rows(SubQuestion, [{**asked, "explored_at": Now()}, {**asked, "explored_at": None}])
    # Rows that give different fields: each gets the defaults of those it does not give.
    insert_rows(
        SubQuestion,
        [
            {"session_id": session.pk, "text": "Where?", "priority": 2, "why": "Maps."},
            {"session_id": session.pk, "text": "Who?", "priority": 3},
        ],
    )
    rows = SubQuestion.objects.filter(session=session).order_by("priority", "pk")
    assert [(q.text, q.explored_at is not None, q.why) for q in rows] == [
        ("When?", True, ""),
        ("When?", False, ""),
        ("Where?", False, "Maps."),
        ("Who?", False, ""),
    ]
    with pytest.raises(TypeError, match="has no column 'session'"):  # attnames only
        insert_rows(Stage, [{"session": session, "sequence": 1, "entry": {}}])


@pytest.mark.django_db(transaction=True)
def test_a_failed_insert_leaves_its_transaction_to_be_rolled_back(make_session: Any):
    session = make_session(focus="kept")
    with transaction.atomic():
        insert_rows(Stage, [{"session_id": session.pk, "sequence": 1, "entry": {}}])
        with pytest.raises(IntegrityError):  # the same (session, sequence) again
            insert_rows(Stage, [{"session_id": session.pk, "sequence": 1, "entry": {}}])
        assert connection.needs_rollback
    assert not Stage.objects.filter(session=session).exists()
    with transaction.atomic():  # a value the field refuses, before any SQL runs
        with pytest.raises(ValidationError):
            insert_rows(
                SubQuestion,
                [{"session_id": session.pk, "text": "?", "priority": 1, "explored": "perhaps"}],
            )
        assert connection.needs_rollback


def test_a_counters_step_is_sent_as_postgresql_reads_the_one_the_orm_writes():
    """`F(name) + n` on PostgreSQL: a whole n as a bigint (as an integer, Django's type for a
    plain int, four bytes would refuse 2**40), a fraction as numeric (an integer column plus
    1.5 then rounds 2.5 up, as with the ORM's SQL). Elsewhere, and for any other value, n as
    it is. (Database wrappers that never connect: only their vendor and operations count.)"""
    from django.db.backends.postgresql.base import DatabaseWrapper as PostgreSQL
    from django.db.backends.sqlite3.base import DatabaseWrapper as SQLite
    from psycopg.types.numeric import Int8

    from thinking.row_writes import _ADDEND

    postgresql = PostgreSQL({**connection.settings_dict, "OPTIONS": {}}, alias="elsewhere")
    whole = _ADDEND.get_db_prep_save(2**40, postgresql)
    assert type(whole) is Int8 and whole == 2**40
    for fraction, exact in ((1.5, "1.5"), (0.1, "0.1"), (-2.25, "-2.25")):
        assert _ADDEND.get_db_prep_save(fraction, postgresql) == Decimal(exact)
    for other in (True, Decimal("2.5"), None):
        assert _ADDEND.get_db_prep_save(other, postgresql) is other
    sqlite = SQLite({**connection.settings_dict, "OPTIONS": {}}, alias="elsewhere")
    assert type(_ADDEND.get_db_prep_save(0.1, sqlite)) is float
    assert type(_ADDEND.get_db_prep_save(2**40, sqlite)) is int
