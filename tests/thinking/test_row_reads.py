"""The session row read without the ORM's per-query work (thinking/row_reads.py, issue 17):
every stored step and every live update reads it, so it must be the row the ORM would give,
field for field, on SQLite and on PostgreSQL."""

from __future__ import annotations

import datetime
import gc
import threading
import uuid
import weakref
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import FieldDoesNotExist, ValidationError
from django.db import (
    DatabaseError,
    IntegrityError,
    connection,
    connections,
    models,
    transaction,
)
from django.db.models import F
from django.db.transaction import TransactionManagementError
from django.test.utils import CaptureQueriesContext, override_settings

from tests.helpers import needs_postgresql
from thinking import parsing
from thinking.models import Source, SourceKind, SubQuestion, ThinkingSession, Thought
from thinking.row_reads import (
    Param,
    _Instances,
    compiled_rows,
    compiled_values,
    forget_compiled,
    read_by_pk,
    rows_by_pks,
    values_among,
    values_by,
)
from thinking.row_writes import update_by_pk

pytestmark = pytest.mark.django_db


def a_busy_session(make_session: Any) -> ThinkingSession:
    """A row with every kind of column set: JSON, a decimal, times, a null foreign key."""
    session = make_session(
        question="Ünïcode «question» — and a long one " * 20,
        max_cost_usd=Decimal("1.2345"),
        token_ceiling=10**12,
    )
    ThinkingSession.objects.filter(pk=session.pk).update(
        format_errors=[{"cycle": 1, "route": "prose", "errors": ["ü"]}] * 30,
        plan={"steps": ["a", "b"], "current": 1, "source": "model"},
        parse_routes={"tags": 3, "prose": 1},
        confidence_evolution=[0.2, 0.5, 0.75],
        started_at=datetime.datetime(2026, 11, 25, 10, 0, 0, 123456, tzinfo=datetime.UTC),
        active_seconds=12.5,
        final_confidence=0.8,
        input_tokens=2**40,
    )
    return session


def fields_of(session: ThinkingSession) -> dict[str, Any]:
    return {f.attname: getattr(session, f.attname) for f in ThinkingSession._meta.concrete_fields}


def check_same_row_as_the_orm(session: ThinkingSession) -> None:
    expected = ThinkingSession.objects.get(pk=session.pk)
    read = read_by_pk(ThinkingSession, session.pk)
    assert fields_of(read) == fields_of(expected)
    assert read.format_errors[0]["errors"] == ["ü"] and read.max_cost_usd == Decimal("1.2345")
    assert read.started_at.microsecond == 123456 and read.input_tokens == 2**40
    # A model instance like the ORM's: saved, from this database, related rows reachable.
    assert (read._state.adding, read._state.db) == (False, "default")
    assert read.owner == expected.owner and read.team is None
    # Read again after a change: nothing is kept between reads but the compiled query.
    ThinkingSession.objects.filter(pk=session.pk).update(cycles=41, focus="moved on")
    again = read_by_pk(ThinkingSession, str(session.pk))  # a key as the URL gives it
    assert (again.cycles, again.focus) == (41, "moved on")


def check_same_values_as_the_orm(session: ThinkingSession, other: ThinkingSession) -> None:
    root = SubQuestion.objects.create(session=session, text="Root", priority=3)
    SubQuestion.objects.create(
        session=session, text="Child", parent=root, explored=True, priority=1
    )
    SubQuestion.objects.create(session=other, text="Another session's", priority=9)
    for number in (1, 2, 5):
        Source.objects.create(
            session=session, number=number, kind=SourceKind.WEB, key=f"k{number}", title="t"
        )
    columns = ("pk", "parent_id", "explored", "priority")
    expected = SubQuestion.objects.filter(session=session).values_list(*columns)
    read = values_by(SubQuestion, "session_id", str(session.pk), *columns)
    assert sorted(read) == sorted(expected) and len(read) == 2
    assert {explored for _, _, explored, _ in read} == {True, False}  # booleans, not 0 / 1
    assert {parent for _, parent, _, _ in read} == {None, root.pk}
    assert sorted(values_by(Source, "session_id", session.pk, "number")) == [(1,), (2,), (5,)]
    assert values_by(Source, "session_id", other.pk, "number") == []


def test_the_row_is_the_one_the_orm_reads(make_session: Any):
    check_same_row_as_the_orm(a_busy_session(make_session))


def test_column_values_are_the_ones_the_orm_reads(make_session: Any):
    check_same_values_as_the_orm(make_session(), make_session())


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_the_row_and_column_values_are_the_ones_the_orm_reads_on_postgresql(make_session: Any):
    needs_postgresql()
    check_same_row_as_the_orm(a_busy_session(make_session))
    check_same_values_as_the_orm(make_session(), make_session())


def check_rows_by_keys_as_the_orm(session: ThinkingSession) -> None:
    made = [
        SubQuestion.objects.create(session=session, text=f"Q{n} «ü»", priority=n, explored=n % 2)
        for n in range(12)
    ]
    pks = [q.pk for q in made]
    gone = SubQuestion.objects.create(session=session, text="deleted", priority=1)
    gone_pk = gone.pk
    gone.delete()
    for keys in ([], pks[:1], pks[2:5], [pks[3], pks[3], str(pks[1]), gone_pk], pks[:9], pks):
        expected = SubQuestion.objects.in_bulk(keys)
        read = rows_by_pks(SubQuestion, keys)
        assert read.keys() == expected.keys()
        fields = SubQuestion._meta.concrete_fields
        for pk, row in read.items():
            assert isinstance(row, SubQuestion)
            assert (row._state.adding, row._state.db) == (False, "default")  # as the ORM's
            assert [getattr(row, f.attname) for f in fields] == [
                getattr(expected[pk], f.attname) for f in fields
            ]
    # The same count of other keys: the same compiled statement, the rows asked for.
    assert set(rows_by_pks(SubQuestion, pks[5:8])) == set(pks[5:8])


def test_rows_by_their_keys_are_the_ones_the_orm_reads(make_session: Any):
    check_rows_by_keys_as_the_orm(make_session())


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_rows_by_their_keys_are_the_ones_the_orm_reads_on_postgresql(make_session: Any):
    needs_postgresql()
    check_rows_by_keys_as_the_orm(make_session())


def test_an_unknown_or_malformed_key_fails_as_the_orm_does(make_session: Any):
    make_session()
    with pytest.raises(
        ThinkingSession.DoesNotExist, match=r"^ThinkingSession matching query does not exist\.$"
    ):
        read_by_pk(ThinkingSession, uuid.uuid4())
    with pytest.raises(ValidationError):
        read_by_pk(ThinkingSession, "not-a-session-id")


@pytest.mark.django_db(transaction=True)  # outside the test's own transaction
def test_a_locking_read_needs_a_transaction_and_sees_the_row_in_it(make_session: Any):
    session = make_session()
    with pytest.raises(
        TransactionManagementError,
        match=r"^select_for_update cannot be used outside of a transaction\.$",
    ):
        read_by_pk(ThinkingSession, session.pk, for_update=True)
    with transaction.atomic():
        ThinkingSession.objects.filter(pk=session.pk).update(revision=7)
        locked = read_by_pk(ThinkingSession, session.pk, for_update=True)
        assert compiled_values("test:locked", _locked_revision, session=session.pk) == [(7,)]
    assert locked.revision == 7
    # Compiled now, and still refused outside a transaction (the ORM checks when it compiles).
    for read in (
        lambda: read_by_pk(ThinkingSession, session.pk, for_update=True),
        lambda: compiled_values("test:locked", _locked_revision, session=session.pk),
    ):
        with pytest.raises(
            TransactionManagementError,
            match=r"^select_for_update cannot be used outside of a transaction\.$",
        ):
            read()


def _locked_revision() -> models.QuerySet:
    rows = ThinkingSession.objects.select_for_update().filter(pk=SESSION)
    return rows.values_list("revision")


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_a_locking_read_takes_the_row_lock_on_postgresql(make_session: Any):
    """The same connection reads the row both ways: each read keeps its own statement."""
    needs_postgresql()
    session = make_session()
    with CaptureQueriesContext(connection) as queries:
        read_by_pk(ThinkingSession, session.pk)
        with transaction.atomic():
            read_by_pk(ThinkingSession, session.pk, for_update=True)
        read_by_pk(ThinkingSession, session.pk)
    reads = [query["sql"] for query in queries if query["sql"].startswith("SELECT")]
    assert ["FOR UPDATE" in sql for sql in reads] == [False, True, False]


def test_a_read_by_a_field_takes_joined_columns_and_refuses_a_lookup(make_session: Any):
    """A joined column is converted as the ORM converts it; the key must be one of the
    model's fields (a lookup would compile to another number of placeholders)."""
    session = make_session()
    Source.objects.create(session=session, number=3, kind=SourceKind.WEB, key="k", title="t")
    assert values_by(Source, "session_id", session.pk, "number", "session__question") == [
        (3, session.question)
    ]
    with pytest.raises(FieldDoesNotExist):
        values_by(Source, "number__range", (1, 5), "number")


def check_values_among_as_the_orm(make_session: Any) -> None:
    """The rows of one session whose field is among the values given, as the ORM reads them,
    for every count of values: compiled up to KEYS_COMPILED, through the ORM past it."""
    session, other = make_session(), make_session()
    for owner in (session, other):
        for n in range(12):
            SubQuestion.objects.create(session=owner, text=f"Question {n}?", priority=n % 9 + 1)
    keys = [parsing.question_digest(f"Question {n}?") for n in range(12)]
    for wanted in ([], keys[:1], [keys[2], keys[2], "absent"], keys[3:11], keys[:9], keys):
        expected = SubQuestion.objects.filter(session=session, text_key__in=wanted).order_by()
        read = values_among(SubQuestion, "session_id", session.pk, "text_key", wanted, "pk", "text")
        assert sorted(read) == sorted(expected.values_list("pk", "text"))
        assert all(isinstance(row, tuple) for row in read)
    assert values_among(SubQuestion, "session_id", uuid.uuid4(), "text_key", keys, "pk") == []


def test_values_among_some_are_the_ones_the_orm_reads(make_session: Any):
    check_values_among_as_the_orm(make_session)


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_values_among_some_are_the_ones_the_orm_reads_on_postgresql(make_session: Any):
    needs_postgresql()
    check_values_among_as_the_orm(make_session)


# --- reads with named parameters ----------------------------------------------------------

SESSION = Param("session", ThinkingSession._meta.pk)
FROM = Param("from", models.IntegerField())
LOG_COLUMNS = ("cycle", "type", "confidence", "parts", "created_at", "sub_question__text")


def epoch_thoughts() -> models.QuerySet:
    """A read of the session log's shape: two parameters, constants, a join, an order."""
    return (
        Thought.objects.filter(session_id=SESSION, type__in=("insight", "critique"))
        .filter(cycle__gte=FROM)
        .order_by("sequence")
        .values_list(*LOG_COLUMNS)
    )


def newest_sources() -> models.QuerySet:
    return Source.objects.filter(session_id=SESSION).order_by("-number")[:2]


def a_session_with_thoughts(make_session: Any) -> tuple[ThinkingSession, ThinkingSession]:
    session, other = make_session(), make_session()
    focus = SubQuestion.objects.create(session=session, text="Why «tides»?", priority=3)
    for sequence, (cycle, kind) in enumerate(
        [(0, "insight"), (1, "critique"), (1, "scratchpad"), (2, "insight"), (3, "hint")]
    ):
        Thought.objects.create(
            session=session, sequence=sequence, cycle=cycle, type=kind, text=f"t{sequence}",
            confidence=0.25 * cycle, time_offset_seconds=1.5, parts={"why": "ü"},
            sub_question=focus if cycle == 1 else None,
        )  # fmt: skip
    Thought.objects.create(
        session=other, sequence=0, cycle=2, type="insight", text="x", confidence=0.5,
        time_offset_seconds=0,
    )  # fmt: skip
    for number in (1, 2, 5):
        Source.objects.create(
            session=session, number=number, kind=SourceKind.WEB, key=f"k{number}", title="t"
        )
    return session, other


def check_compiled_reads_as_the_orm(session: ThinkingSession, other: ThinkingSession) -> None:
    for epoch in (0, 1, 2, 9):
        expected = list(
            Thought.objects.filter(session=session, type__in=("insight", "critique"))
            .filter(cycle__gte=epoch)
            .order_by("sequence")
            .values_list(*LOG_COLUMNS)
        )
        read = compiled_values(
            "test:epoch", epoch_thoughts, session=str(session.pk), **{"from": epoch}
        )
        assert read == [tuple(row) for row in expected]
    everything = compiled_values("test:epoch", epoch_thoughts, session=session.pk, **{"from": 0})
    assert [row[0] for row in everything] == [0, 1, 2]  # the scratchpad note and hint left out
    assert everything[1][3] == {"why": "ü"} and everything[1][5] == "Why «tides»?"
    assert everything[0][5] is None and everything[0][4].tzinfo is not None
    other_rows = compiled_values("test:epoch", epoch_thoughts, session=other.pk, **{"from": 0})
    assert [row[0] for row in other_rows] == [2]

    rows = compiled_rows("test:sources", newest_sources, session=session.pk)
    expected_rows = list(Source.objects.filter(session=session).order_by("-number")[:2])
    assert [r.number for r in rows] == [5, 2]  # the LIMIT and the order compiled in
    assert [vars(r) | {"_state": None} for r in rows] == [
        vars(r) | {"_state": None} for r in expected_rows
    ]
    assert rows[0]._state.db == "default" and not rows[0]._state.adding

    def numbers_only() -> models.QuerySet:
        return Source.objects.filter(session_id=SESSION).only("number").order_by("number")

    slim = compiled_rows("test:slim sources", numbers_only, session=session.pk)
    assert [(r.number, r.get_deferred_fields() >= {"title", "key"}) for r in slim] == [
        (1, True), (2, True), (5, True)
    ]  # fmt: skip
    assert slim[0].title == "t"  # loaded on first use, as a deferred field is
    assert compiled_rows("test:sources", newest_sources, session=uuid.uuid4()) == []

    # Two shapes of a thought's read, each with an annotation after its columns: with the row
    # each selects related (a LEFT JOIN: none for most), and with a deferred column (as many
    # values as the model has fields: each must still be the right one).
    shapes: dict[str, Callable[[models.QuerySet], models.QuerySet]] = {
        "joined": lambda rows: rows.select_related("sub_question"),
        "deferred": lambda rows: rows.defer("text"),
    }
    read: dict[str, list[Thought]] = {}
    for name, shape in shapes.items():

        def build(shape: Callable = shape, owner: Any = SESSION) -> models.QuerySet:
            rows = shape(Thought.objects.filter(session_id=owner))
            return rows.annotate(doubled=F("cycle") * 2).order_by("sequence")

        read[name] = compiled_rows(f"test:{name}", build, session=session.pk)
        # Its columns and the annotation's value as the ORM's (the focus: below).
        assert [vars(t) | {"_state": None} for t in read[name]] == [
            vars(t) | {"_state": None} for t in build(owner=session.pk)
        ]
        assert [t.doubled for t in read[name]] == [0, 2, 2, 4, 6]
    assert all(t.get_deferred_fields() == {"text"} for t in read["deferred"])
    with CaptureQueriesContext(connection) as more:
        focuses = [t.sub_question for t in read["joined"]]
    assert len(more) == 0  # set, as select_related sets it: no query when read
    assert [f and (f.text, f.priority, f._state.adding, f._state.db) for f in focuses] == [
        None, ("Why «tides»?", 3, False, "default"), ("Why «tides»?", 3, False, "default"),
        None, None,
    ]  # fmt: skip
    assert vars(focuses[1]) | {"_state": None} == vars(
        SubQuestion.objects.get(pk=focuses[1].pk)
    ) | {"_state": None}


def test_a_read_with_named_parameters_gives_what_the_orm_gives(make_session: Any):
    check_compiled_reads_as_the_orm(*a_session_with_thoughts(make_session))


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_a_read_with_named_parameters_gives_what_the_orm_gives_on_postgresql(
    make_session: Any,
):
    needs_postgresql()
    check_compiled_reads_as_the_orm(*a_session_with_thoughts(make_session))


def test_a_read_with_named_parameters_is_compiled_once_and_refuses_wrong_values(
    make_session: Any,
):
    session, _ = a_session_with_thoughts(make_session)
    compiled_values("test:once", epoch_thoughts, session=session.pk, **{"from": 0})
    with CaptureQueriesContext(connection) as reads:
        compiled_values("test:once", epoch_thoughts, session=session.pk, **{"from": 1})
    assert len(reads) == 1 and "LIMIT" not in reads[0]["sql"]
    with pytest.raises(
        ValueError, match=r"^this read takes \['from', 'session'\], not \['session'\]$"
    ):
        compiled_values("test:once", epoch_thoughts, session=session.pk)
    with pytest.raises(ValidationError):  # as the ORM prepares a malformed key
        compiled_values("test:once", epoch_thoughts, session="not a key", **{"from": 0})
    with pytest.raises(ValueError, match=r"^not a read of Thought rows: SELECT"):
        compiled_rows("test:values as rows", epoch_thoughts, session=session.pk, **{"from": 0})


def test_a_name_given_to_another_query_or_a_read_it_cannot_give_is_refused(make_session: Any):
    """A compiled read runs the SQL its name was first compiled with, so a name is one
    query's, and a query whose rows the ORM would change after the SELECT is refused."""
    session, _ = a_session_with_thoughts(make_session)
    compiled_rows("test:named", newest_sources, session=session.pk)
    with pytest.raises(ValueError, match=r"^'test:named' names another query already$"):
        compiled_rows("test:named", lambda: newest_sources(), session=session.pk)

    def flat() -> models.QuerySet:
        return Source.objects.filter(session_id=SESSION).values_list("number", flat=True)

    def distinct() -> models.QuerySet:
        return Source.objects.filter(session_id=SESSION).distinct().values_list("kind")

    def prefetching() -> models.QuerySet:
        return Thought.objects.filter(session_id=SESSION).prefetch_related("sub_question")

    def known() -> models.QuerySet:
        # A related manager's rows: the ORM sets the session it knows on each.
        return session.thoughts.all()

    with pytest.raises(ValueError, match=r"^not a values_list read of Source: SELECT"):
        compiled_values("test:flat", flat, session=session.pk)
    for kind, build in (
        ("test:distinct", distinct),
        ("test:prefetching", prefetching),
        ("test:known", known),
    ):
        with pytest.raises(ValueError, match=r"^not a read compiled reads can give as the ORM"):
            compiled_values(kind, build, session=session.pk)


def test_a_related_row_of_a_parent_model_is_refused_not_built_in_the_wrong_order():
    """select_related down to a child model (multi-table inheritance, none here) selects its
    parent's columns in another order than its own: a compiled read refuses it rather than
    build the instance from misplaced values."""
    compiler = Thought.objects.select_related("sub_question").query.get_compiler("default")
    compiler.as_sql()
    select = [column for column, _, _ in compiler.select]
    assert _Instances.of(compiler.klass_info, select, {}).related[0].rows.model is SubQuestion
    compiler.klass_info["related_klass_infos"][0]["from_parent"] = True
    with pytest.raises(ValueError, match=r"^not a read compiled reads can give as the ORM"):
        _Instances.of(compiler.klass_info, select, {})


def test_forgotten_statements_are_compiled_anew_from_their_query(make_session: Any):
    """The tests forget every compiled statement before each test (tests/conftest.py), so a
    changed query (a mutant's) is compiled, not the SQL an earlier run compiled."""
    session, _ = a_session_with_thoughts(make_session)
    assert [
        s.number for s in compiled_rows("test:renamed", newest_sources, session=session.pk)
    ] == [
        5,
        2,
    ]
    forget_compiled()

    def oldest() -> models.QuerySet:
        return Source.objects.filter(session_id=SESSION).order_by("number")[:2]

    assert [s.number for s in compiled_rows("test:renamed", oldest, session=session.pk)] == [1, 2]


@pytest.mark.django_db(transaction=True)  # the thread's own connection sees the rows
def test_a_threads_compiled_reads_go_with_its_connection(make_session: Any):
    """Each thread has its own connection object, and its compiled reads are kept on it: a
    thread that ends leaves no connection (an open SQLite file) behind. The ORM's converters
    refer back to the connection, so a map keyed by it would keep it forever."""
    session, _ = a_session_with_thoughts(make_session)
    left: list[weakref.ref] = []

    def read_in_a_thread() -> None:
        rows = compiled_values("test:epoch", epoch_thoughts, session=session.pk, **{"from": 0})
        assert [row[0] for row in rows] == [0, 1, 2]
        read_by_pk(ThinkingSession, session.pk)  # converters for its times and JSON
        left.append(weakref.ref(connections["default"]))  # this thread's own object
        connection.close()

    worker = threading.Thread(target=read_in_a_thread)
    worker.start()
    worker.join()
    gc.collect()
    assert len(left) == 1 and left[0]() is None


# --- one cursor per connection (run_statement) ---------------------------------------------


def counting_cursors(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The driver cursors this thread's connection makes, as they are made."""
    made: list[object] = []
    create = connection.create_cursor

    def counted(*args: Any, **kwargs: Any) -> Any:
        made.append(create(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(connection, "create_cursor", counted)
    return made


def test_statements_share_one_cursor_per_connection(
    make_session: Any, monkeypatch: pytest.MonkeyPatch
):
    """A compiled statement costs a new cursor no more: reads and writes of one connection
    run on one (a connection replaced under it gets its own: the next test)."""
    session = a_busy_session(make_session)
    connections["default"].__dict__.pop("_deepthink_runner", None)  # as on a new connection
    made = counting_cursors(monkeypatch)
    for _ in range(3):
        assert read_by_pk(ThinkingSession, session.pk).max_cost_usd == Decimal("1.2345")
    assert update_by_pk(ThinkingSession, session.pk, focus="kept") == 1
    assert read_by_pk(ThinkingSession, session.pk).focus == "kept"
    assert len(made) == 1


@pytest.mark.django_db(transaction=True)
def test_a_connection_cut_under_a_kept_cursor_fails_once_then_reads_on_a_new_one(
    make_session: Any,
):
    """The server ends the connection (a restart, `pg_terminate_backend`): the read fails
    with Django's error and marks the connection, which the hop's end replaces; the next
    read runs on a new connection with a cursor of its own."""
    needs_postgresql()
    from django.db import Error, close_old_connections

    from tests.helpers import own_connection

    session = make_session(focus="kept")
    assert read_by_pk(ThinkingSession, session.pk).focus == "kept"
    with own_connection(autocommit=True) as admin:
        ended = connection.connection.info.backend_pid
        admin.execute("SELECT pg_terminate_backend(%s, 5000)", [ended])
    with pytest.raises(Error):
        read_by_pk(ThinkingSession, session.pk)
    assert connection.errors_occurred
    close_old_connections()  # what every hop does after its work
    assert read_by_pk(ThinkingSession, session.pk).focus == "kept"


def test_a_statement_in_a_transaction_that_must_roll_back_is_refused(make_session: Any):
    """As with Django's own cursor: after an error inside `atomic`, nothing else runs there."""
    session = make_session()
    with transaction.atomic():
        with pytest.raises(IntegrityError), transaction.atomic(savepoint=False):
            update_by_pk(ThinkingSession, session.pk, question=None)
        with pytest.raises(TransactionManagementError):
            read_by_pk(ThinkingSession, session.pk)
    assert read_by_pk(ThinkingSession, session.pk).question == session.question


def test_statements_are_seen_while_they_are_logged_or_wrapped(make_session: Any):
    """A test counting statements, or a tool wrapping them, sees each compiled one."""
    session = make_session()
    seen: list[str] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        read_by_pk(ThinkingSession, session.pk)
    with CaptureQueriesContext(connection) as logged:
        read_by_pk(ThinkingSession, session.pk)
    assert len(seen) == 1 and len(logged.captured_queries) == 1
    assert '"thinking_thinkingsession"."id" =' in logged.captured_queries[0]["sql"]


def test_a_change_of_time_zone_reads_times_as_the_orm_does(make_session: Any):
    """A driver cursor may carry the time zone its connection had when it was made: after
    the setting changes, times still read as the ORM reads them."""
    session = a_busy_session(make_session)
    assert read_by_pk(ThinkingSession, session.pk).started_at.tzinfo is not None
    with override_settings(USE_TZ=False):
        orm = ThinkingSession.objects.get(pk=session.pk).started_at
        assert read_by_pk(ThinkingSession, session.pk).started_at == orm and orm.tzinfo is None
    assert read_by_pk(ThinkingSession, session.pk).started_at == session_started(session)


def session_started(session: ThinkingSession) -> datetime.datetime:
    return ThinkingSession.objects.get(pk=session.pk).started_at


def prepared_here() -> list[str]:
    """The statements this connection has prepared on the server, as PostgreSQL lists them."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [statement for (statement,) in cursor.fetchall()]


def session_reads(statements: list[str]) -> list[str]:
    return [s for s in statements if 'FROM "thinking_thinkingsession"' in s and "$1" in s]


@pytest.fixture
def new_kept_runner() -> Any:
    """The compiled statements' runner (and its cursor) made anew, as on a new connection,
    and dropped after (it may have been made under other settings)."""
    connections["default"].__dict__.pop("_deepthink_runner", None)
    yield
    connections["default"].__dict__.pop("_deepthink_runner", None)


@pytest.mark.services
def test_statements_are_prepared_once_on_postgresql_and_read_what_is_stored(
    make_session: Any, new_kept_runner: None
):
    """PostgreSQL parses and plans a compiled statement once per connection, not on every
    step: it is prepared on its first run and reused, and it still reads each change. The
    ORM's own statements are not prepared (Django binds their values into the SQL)."""
    needs_postgresql()
    session = a_busy_session(make_session)
    before = set(prepared_here())
    for n in range(3):
        ThinkingSession.objects.filter(pk=session.pk).update(focus=f"step {n}")
        assert read_by_pk(ThinkingSession, session.pk).focus == f"step {n}"
        assert ThinkingSession.objects.get(pk=session.pk).focus == f"step {n}"
        # From the first run on, one statement, whether or not an earlier test prepared it
        # (the whole row's: other reads of the session take a few of its columns).
        [read] = [
            s
            for s in session_reads(prepared_here())
            if '"format_errors"' in s and "FOR UPDATE" not in s
        ]
    check_same_row_as_the_orm(session)
    # Nothing else was prepared: not the ORM's reads and updates.
    assert set(prepared_here()) - before <= {read}
    # Between runs the connection's threshold is off, as Django leaves it: the driver
    # keeps no count of the ORM's statements (their values written into their SQL). A
    # threshold a deployment set itself is left as it was.
    raw = connection.connection
    assert raw.prepare_threshold is None
    raw.prepare_threshold = 7
    try:
        assert read_by_pk(ThinkingSession, session.pk).focus == "moved on"  # as checked
        assert raw.prepare_threshold == 7
    finally:
        raw.prepare_threshold = None


@pytest.mark.services
def test_with_prepared_statements_off_nothing_is_prepared_on_postgresql(
    make_session: Any, new_kept_runner: None
):
    """DATABASE_PREPARED_STATEMENTS=0 (for a pooler that cannot keep them): the compiled
    statements bind on the client, as the ORM's do."""
    needs_postgresql()
    session = a_busy_session(make_session)
    with override_settings(DATABASE_PREPARED_STATEMENTS=False):
        before = prepared_here()
        check_same_row_as_the_orm(session)
        assert values_by(Source, "session_id", session.pk, "number") == []
        assert prepared_here() == before


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_a_rolled_back_transaction_leaves_statements_that_still_run_on_postgresql(
    make_session: Any, new_kept_runner: None
):
    """A rollback makes the driver forget what it prepared and deallocate it on the server:
    the next run prepares the statement again, rather than naming one that is gone."""
    needs_postgresql()
    session = make_session(focus="kept")
    assert read_by_pk(ThinkingSession, session.pk).focus == "kept"
    with pytest.raises(IntegrityError), transaction.atomic():
        read_by_pk(ThinkingSession, session.pk, for_update=True)
        assert [s for s in session_reads(prepared_here()) if "FOR UPDATE" in s]
        update_by_pk(ThinkingSession, session.pk, question=None)
    assert prepared_here() == []
    update_by_pk(ThinkingSession, session.pk, focus="moved")
    assert read_by_pk(ThinkingSession, session.pk).focus == "moved"
    # Only what ran since the rollback is prepared: the update and the plain read, once.
    assert [s for s in session_reads(prepared_here()) if "FOR UPDATE" in s] == []
    assert len(session_reads(prepared_here())) == 1 and len(prepared_here()) == 2


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_a_failure_inside_a_transaction_leaves_it_failed_as_the_orms_does_on_postgresql(
    make_session: Any, new_kept_runner: None
):
    """A statement that fails, the first of its transaction too, leaves the transaction
    failed until it rolls back, as the ORM's statements do: nothing after it runs there."""
    needs_postgresql()
    session = make_session(focus="kept")
    for compiled in (False, True):
        with transaction.atomic():
            with pytest.raises(IntegrityError):
                if compiled:
                    update_by_pk(ThinkingSession, session.pk, question=None)
                else:
                    ThinkingSession.objects.filter(pk=session.pk).update(question=None)
            with pytest.raises(DatabaseError, match="current transaction"):
                update_by_pk(ThinkingSession, session.pk, focus="after")
            transaction.set_rollback(True)
    assert read_by_pk(ThinkingSession, session.pk).focus == "kept"


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_a_failed_write_outside_a_transaction_leaves_nothing_prepared_on_postgresql(
    make_session: Any, new_kept_runner: None
):
    """Outside a transaction no rollback follows a failure: a statement refused on its first
    run would stay prepared on the server, one more on every attempt, had the failure not
    deallocated them (the driver forgets a failed one's name, not the server)."""
    needs_postgresql()
    session = make_session(focus="kept")
    assert read_by_pk(ThinkingSession, session.pk).focus == "kept"
    for _ in range(3):
        with pytest.raises(IntegrityError):
            update_by_pk(ThinkingSession, session.pk, question=None)
        assert [s for s in prepared_here() if s.startswith("UPDATE") and '"question"' in s] == []
    # Those deallocated with it are prepared again on their next run.
    assert read_by_pk(ThinkingSession, session.pk).focus == "kept"
    assert update_by_pk(ThinkingSession, session.pk, focus="moved") == 1
    assert read_by_pk(ThinkingSession, session.pk).focus == "moved"
    assert [s for s in session_reads(prepared_here()) if "FOR UPDATE" not in s]
    assert [s for s in prepared_here() if s.startswith("UPDATE") and '"focus"' in s]


@pytest.fixture
def focus_as() -> Any:
    """Calling it with a type alters the session table's `focus` column to it from another
    connection, as a migration run while workers think would; put back after."""
    from tests.helpers import own_connection

    needs_postgresql()
    table = ThinkingSession._meta.db_table

    def alter(to: str) -> None:
        with own_connection(autocommit=True) as admin:
            admin.execute("SET lock_timeout = '10s'")  # a lock left behind fails, not hangs
            admin.execute(f'ALTER TABLE "{table}" ALTER COLUMN "focus" TYPE {to}')

    yield alter
    alter("text")
    # Had the test stopped midway, what it prepared under the other type would be stale:
    # the next test starts on a new connection.
    if connection.connection is not None:
        connection.connection.close()
    connection.close()


@pytest.mark.services
@pytest.mark.django_db(transaction=True)
def test_a_statement_whose_columns_a_migration_changed_is_prepared_again_on_postgresql(
    make_session: Any, new_kept_runner: None, focus_as: Callable[[str], None]
):
    """A column's type changed under a prepared statement (PostgreSQL: "cached plan must not
    change result type"), or its statement dropped from the server, as a migration or a
    pooler would: the statement is prepared anew and gives the row, outside a transaction
    and as the first statement of one (a step's locked read). After other statements in a
    transaction it cannot run again: that transaction fails, once. Without this every
    compiled statement of the connection failed until it closed."""
    needs_postgresql()

    def deallocate_all() -> None:  # where the driver does not see it
        with connection.cursor() as cursor:
            cursor.execute("DEALLOCATE ALL")

    def locked_step(focus: str) -> None:
        with transaction.atomic():
            read_by_pk(ThinkingSession, session.pk, for_update=True)
            assert update_by_pk(ThinkingSession, session.pk, focus=focus) == 1

    session = make_session(focus="kept")
    assert read_by_pk(ThinkingSession, session.pk).focus == "kept"
    locked_step("moved")
    focus_as("varchar(10000)")
    assert read_by_pk(ThinkingSession, session.pk).focus == "moved"
    assert read_by_pk(ThinkingSession, session.pk).focus == "moved"
    assert update_by_pk(ThinkingSession, session.pk, focus="again") == 1
    deallocate_all()
    assert read_by_pk(ThinkingSession, session.pk).focus == "again"
    # The locked read opens its step's transaction: run again in a new one.
    locked_step("locked")  # prepared while the column was varchar
    focus_as("text")
    locked_step("stale")
    deallocate_all()
    locked_step("dropped")
    assert read_by_pk(ThinkingSession, session.pk).focus == "dropped"
    deallocate_all()
    with pytest.raises(DatabaseError), transaction.atomic():
        ThinkingSession.objects.filter(pk=session.pk).update(focus="lost")
        read_by_pk(ThinkingSession, session.pk, for_update=True)
    assert read_by_pk(ThinkingSession, session.pk).focus == "dropped"  # nothing of it stored
    locked_step("last")
    assert read_by_pk(ThinkingSession, session.pk).focus == "last"


@pytest.mark.services
def test_a_value_out_of_its_columns_range_fails_as_the_orm_fails_on_postgresql(
    make_session: Any, new_kept_runner: None
):
    """Sent to a prepared statement, a number too big for its column is refused, as when the
    ORM writes it into the SQL: never stored wrapped around (70,000 in two bytes is 4,464)."""
    needs_postgresql()
    from django.db import DataError

    question = SubQuestion.objects.create(session=make_session(), text="Why?", priority=2)
    for _ in range(2):  # each run fails, the ORM's as well as the compiled statement's
        with pytest.raises(DataError), transaction.atomic():
            SubQuestion.objects.filter(pk=question.pk).update(priority=70_000)
        with pytest.raises(DataError), transaction.atomic():
            update_by_pk(SubQuestion, question.pk, priority=70_000)
    assert update_by_pk(SubQuestion, question.pk, priority=7) == 1
    question.refresh_from_db()
    assert question.priority == 7
    with pytest.raises(DataError), transaction.atomic():  # the prepared statement's run
        update_by_pk(SubQuestion, question.pk, priority=70_000)
    question.refresh_from_db()
    assert question.priority == 7


def test_parameters_go_to_a_prepared_statement_as_text_and_percent_signs_stay():
    """What the server-binding cursor is sent: each placeholder as text (checked by the
    server against its type), a literal percent sign as it was, nothing else touched."""
    from thinking.row_reads import _text_placeholders

    sql = "SELECT a FROM t WHERE x = %s AND y LIKE 'p%%s' AND z IN (%s, %s) -- 100%%"
    assert _text_placeholders(sql) == (
        "SELECT a FROM t WHERE x = %t AND y LIKE 'p%%s' AND z IN (%t, %t) -- 100%%"
    )
    assert _text_placeholders("SELECT 1") == "SELECT 1"


def test_a_one_to_one_row_selected_with_its_owner_is_set_at_both_ends_as_the_orm_sets_it():
    """A row read with the row its one-to-one key points to (or the row pointing to it) has
    both ends set, as select_related sets them: no query to read either, and a missing one
    is said to be missing without a query."""
    from django.contrib.auth import get_user_model

    from accounts.models import NotificationPreference

    users = get_user_model()
    alice, _ = (users.objects.create_user(name) for name in ("alice", "bob"))
    NotificationPreference.objects.create(user=alice, mail="never")

    def preferences() -> models.QuerySet:
        key = Param("user", users._meta.pk)  # type: ignore[arg-type]
        return NotificationPreference.objects.filter(user_id=key).select_related("user")

    def people() -> models.QuerySet:
        rows = users.objects.filter(username__in=("alice", "bob"))
        return rows.select_related("notification_preference").order_by("username")

    (preference,) = compiled_rows("test:one-to-one", preferences, user=alice.pk)
    with_theirs, without = compiled_rows("test:reverse one-to-one", people)
    with CaptureQueriesContext(connection) as more:
        assert preference.user.username == "alice"
        assert preference.user.notification_preference is preference
        assert with_theirs.notification_preference.mail == "never"
        assert with_theirs.notification_preference.user is with_theirs
        with pytest.raises(NotificationPreference.DoesNotExist):
            without.notification_preference  # noqa: B018 (read for its error)
    assert len(more) == 0
