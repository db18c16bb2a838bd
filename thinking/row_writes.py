"""The UPDATE every stored step ends with, and the INSERTs of its rows, without the ORM's
per-query work.

Each step applies its changes and checkpoint to the session row in one UPDATE (`_open_step`
in models.py), about two per model call. Through the ORM each one builds, resolves and
compiles its query anew: 1.5 to 1.8 ms of CPU on PostgreSQL, where running it costs about half
(bench/README.md, "The step's UPDATE, compiled once"). An UPDATE's SQL depends only on which
fields it sets and how (a value, or `F(name) + n`), so each such shape is compiled once per
database connection, by the ORM, with a placeholder for every value; a write then prepares
its values as the ORM prepares saved values and runs the statement. A change of any other
kind (another expression, a related object) goes through the ORM as usual.

A step's new rows (its thoughts, its model calls, a stage, sub-questions, sources) went
through `bulk_create`: a model instance per row, then the ORM's insert compiler, ~1.5 ms of
CPU for four thoughts on PostgreSQL where the statement costs a fifth of that (bench/
README.md, "A step's rows inserted without the ORM"). `insert_rows` writes the same columns
with the same values from plain dicts, its SQL built once per shape by the backend's own
operations.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.db import DEFAULT_DB_ALIAS, connections, models, transaction
from django.db.backends.postgresql.compiler import InsertUnnest
from django.db.models import F
from django.db.models.expressions import Value
from django.db.models.fields import NOT_PROVIDED
from django.db.models.sql import InsertQuery, UpdateQuery
from django.utils import timezone

from .row_reads import Param, Slot, compiled_on, filled, run_statement

_UNSET = object()  # a stored Param's value: each write gives its own


def _row_count(cursor: Any) -> int:
    return cursor.rowcount


def _done(cursor: Any) -> None:
    return None


def _keys(cursor: Any) -> list[Any]:
    return [key for (key,) in cursor.fetchall()]


class _Stored(Param):
    """A value the UPDATE stores: prepared as the ORM prepares a saved value."""

    def __init__(self, name: str, output_field: models.Field) -> None:
        super().__init__(name, output_field)
        # Not None: the ORM would read `Value(None)` of a JSONField as "store SQL NULL" and
        # drop the placeholder (JSONField.get_db_prep_save).
        self.value = _UNSET

    def as_sql(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        return "%s", (Slot(self.name, self.output_field, saved=True),)


def addend(name: str, value: Any) -> Value | None:
    """n (as the Value the ORM wraps it in) if `value` is `F(name) + n` for a plain number n:
    a counter bumped in the UPDATE itself. None for any other value or expression."""
    lhs, rhs = getattr(value, "lhs", None), getattr(value, "rhs", None)
    if (
        getattr(value, "connector", None) == "+"
        and type(lhs) is F  # not OuterRef, F's subclass
        and lhs.name == name  # type: ignore[attr-defined]  # F keeps its name; the stubs omit it
        and type(rhs) is Value  # `F(name) + n` wraps a plain n in Value
        and isinstance(rhs.value, int | float)
    ):
        return rhs
    return None


def _assignment(
    model: type[models.Model], name: str, value: Any
) -> tuple[str, Any, models.Field] | None:
    """How the UPDATE sets `name`: ("=", value, field) stores a value, ("+", n, `_ADDEND`)
    adds n to the stored one (`F(name) + n`); None for a change it leaves to the ORM. The
    field prepares the value, as the ORM's would (for `F(name) + n`, as the database reads
    the n the ORM writes into its SQL: an integer field plus 1.5 adds 1.5 there)."""
    try:
        field = model._meta.get_field(name)
    except FieldDoesNotExist:
        return None  # the ORM says why
    # The ORM's to do: a related object (stored by its key), a field that compiles its own
    # placeholder, a generated one, a parent model's (its own UPDATE), and a model instance
    # given to a plain field (refused).
    if (
        not isinstance(field, models.Field)
        or not field.concrete
        or field.is_relation
        or hasattr(field, "get_placeholder_sql")
        or field.generated
        or field.model is not model
        or hasattr(value, "prepare_database_save")
    ):
        return None
    if not hasattr(value, "resolve_expression"):
        return ("=", value, field)
    added = addend(name, value)
    return None if added is None else ("+", added.value, _ADDEND)


class _Addend(models.Field):
    """The n of `F(name) + n`, sent as PostgreSQL reads the n the ORM writes into the SQL: a
    whole number as a bigint (Django's IntegerField would send any int as a four-byte one,
    refused past 2**31 by a prepared statement: row_reads._text_placeholders), a fraction
    as numeric, not a double (an integer column plus 1.5 then rounds 2.5 up, as the ORM's
    does; a double rounds it to even). Other databases take the number as it is."""

    def get_db_prep_save(self, value: Any, connection: Any) -> Any:
        if connection.vendor != "postgresql" or type(value) not in (int, float):
            return value
        if type(value) is int:
            return connection.ops.adapt_integerfield_value(value, "BigIntegerField")
        return Decimal(repr(value))


_ADDEND = _Addend()


def update_by_pk(model: type[models.Model], pk: Any, /, **changes: Any) -> int:
    """`model.objects.filter(pk=pk).update(**changes)` at a fraction of the CPU: the number of
    rows updated (0 or 1)."""
    connection = connections[DEFAULT_DB_ALIAS]
    shape: list[tuple[str, str, type]] = []
    fields: dict[str, models.Field] = {}
    values: dict[str, Any] = {"pk": pk}
    for name, value in changes.items():
        assigned = _assignment(model, name, value)
        if assigned is None:
            return model._default_manager.filter(pk=pk).update(**changes)
        how, values[name], fields[name] = assigned
        shape.append((name, how, type(fields[name])))
    if not shape:
        return model._default_manager.filter(pk=pk).update()  # nothing to set: the ORM's way
    # As the ORM's update: an error here (a value the field refuses, a failed UPDATE) inside
    # a transaction leaves it to be rolled back.
    with transaction.mark_for_rollback_on_error(connection.alias):
        statements = compiled_on(connection)
        kind = ("update", model, tuple(shape))
        compiled = statements.get(kind)
        if compiled is None:
            query = UpdateQuery(model)
            query.add_update_values(
                {
                    name: F(name) + _Stored(name, fields[name])
                    if how == "+"
                    else _Stored(name, fields[name])
                    for name, how, _ in shape
                }
            )
            query.add_filter("pk", Param("pk", model._meta.pk))  # type: ignore[arg-type]
            compiled = statements[kind] = query.get_compiler(connection=connection).as_sql()
        sql, params = compiled
        return run_statement(connection, sql, filled(params, values, connection), _row_count)


# --- INSERTs ---------------------------------------------------------------------------

_NOW, _DEFAULT = object(), object()  # a column not taken from the row: the time, the default


def _insert_plan(
    model: type[models.Model], names: frozenset[str]
) -> tuple[tuple[models.Field, Any], ...] | None:
    """The columns `bulk_create` writes for rows that give the fields `names` (by attname),
    each with where its value comes from: the row (the attname), the time (`_NOW`: an
    `auto_now`/`auto_now_add` time, which overrides a given one, as on a save), or the
    field's default (`_DEFAULT`). A primary key the database numbers is left out unless
    given. None where the ORM must do it: a field with its own placeholder or `pre_save`, a
    database default, an inherited model."""
    opts = model._meta
    fields = [f for f in opts.concrete_fields if not f.generated]
    unknown = names - {f.attname for f in fields}
    if unknown:
        raise TypeError(f"{model.__name__} has no column {min(unknown)!r}")
    if opts.parents:
        return None
    plan: list[tuple[models.Field, Any]] = []
    for field in fields:
        given = field.attname in names
        if field.primary_key and field.db_returning and not given:
            continue  # numbered by the database
        if isinstance(field, models.DateField) and (field.auto_now or field.auto_now_add):
            if not isinstance(field, models.DateTimeField):
                return None  # a date's own pre_save
            plan.append((field, _NOW))
        elif (
            hasattr(field, "get_placeholder")
            or hasattr(field, "get_placeholder_sql")
            or (
                not isinstance(field, models.DateField)
                and type(field).pre_save is not models.Field.pre_save
            )
        ):
            return None
        elif given:
            plan.append((field, field.attname))
        elif field.db_default is not NOT_PROVIDED:
            return None
        else:
            plan.append((field, _DEFAULT))
    return tuple(plan) or None


# psycopg parses a statement once and keeps it only up to this many parameters.
PARSED_ONCE_PARAMS = 50


def _placeholders(
    model: type[models.Model], fields: list[models.Field], count: int, connection: Any
) -> Sequence[Sequence[str]] | InsertUnnest:
    """The placeholders of `count` rows of `fields`: one value per field, or where that
    would take more than PARSED_ONCE_PARAMS parameters, whatever the backend's own insert
    compiler makes of such rows (`assemble_as_sql`). On PostgreSQL that is one array per
    column (`InsertUnnest`: `INSERT … SELECT * FROM UNNEST(…)`, as its bulk_create writes
    them, unless a column's type forbids it), which psycopg parses once, where a statement of
    more parameters it would parse anew each time (a plan's two dozen sources: 1.7 → 1.4 ms of
    CPU); building the arrays costs more for a few rows (a cycle's four thoughts: 0.23 →
    0.34 ms)."""
    if count * len(fields) <= PARSED_ONCE_PARAMS:
        return [["%s"] * len(fields)] * count
    compiler = InsertQuery(model).get_compiler(connection=connection)
    placeholders, _ = compiler.assemble_as_sql(fields, [[None] * len(fields)] * count)
    return placeholders


def _insert_sql(
    model: type[models.Model],
    fields: list[models.Field],
    count: int,
    connection: Any,
    keys: bool,
) -> tuple[str, bool]:
    """The INSERT of `count` rows of `fields`, as the backend's operations write it, and
    whether it takes one array per column (`_placeholders`) rather than one value per field; with
    `keys`, returning the primary key of each row, in the rows' order (as bulk_create reads
    them)."""
    ops = connection.ops
    placeholders = _placeholders(model, fields, count, connection)
    names = ", ".join(ops.quote_name(f.column) for f in fields)
    table = ops.quote_name(model._meta.db_table)
    values = ops.bulk_insert_sql(fields, placeholders)  # the backend's own words for it
    sql = f"{ops.insert_statement()} {table} ({names}) {values}"
    if keys:
        # No parameters on PostgreSQL and SQLite, the backends this app runs on.
        returning, _ = ops.returning_columns([model._meta.pk])
        sql = f"{sql} {returning}"
    return sql, isinstance(placeholders, InsertUnnest)


def insert_rows(model: type[models.Model], rows: Sequence[Mapping[str, Any]]) -> int:
    """`model.objects.bulk_create([model(**row) for row in rows])` at a fraction of the CPU,
    for rows that give their fields by attname (`session_id`, not `session`): the number of
    rows. The same columns get the same values, prepared by their fields; the rows' times
    are one reading of the clock. No instances come back, so the keys the database gives
    are not read. Rows that do not all give the same fields, values that are expressions,
    and fields it does not handle (`_insert_plan`) go through the ORM."""
    return len(_insert(model, rows, instances=False))


def inserted_rows[M: models.Model](model: type[M], rows: Sequence[Mapping[str, Any]]) -> list[M]:
    """As `insert_rows`, and the rows come back as `bulk_create` returns them: instances
    with the values stored, the keys the database gave included (read with the INSERT,
    where the backend can; else the ORM inserts them)."""
    return _insert(model, rows, instances=True)


def _insert(
    model: type[models.Model], rows: Sequence[Mapping[str, Any]], *, instances: bool
) -> list[Any]:
    """The rows inserted: as instances if asked (see `inserted_rows`), else the rows given."""
    if not rows:
        return []
    connection = connections[DEFAULT_DB_ALIAS]
    # Worked out once per shape, kept with the connection's compiled statements (so a test
    # that forgets them builds them anew: row_reads.forget_compiled).
    statements = compiled_on(connection)
    names = frozenset(rows[0])
    plan = statements.get(("insert plan", model, names), _UNSET)
    if plan is _UNSET:
        plan = statements[("insert plan", model, names)] = _insert_plan(model, names)
    expressions = any(hasattr(v, "resolve_expression") for row in rows for v in row.values())
    pk = model._meta.pk
    # Instances are built from the values written and the keys read back: every column
    # but the key written (none generated), a key the database numbers and gives as is.
    keyed = not instances or (
        connection.features.can_return_rows_from_bulk_insert
        and plan is not None
        and len(plan) == len(model._meta.concrete_fields) - 1
        and pk is not None
        and pk.db_returning
        and not pk.get_db_converters(connection)
    )
    if plan is None or expressions or not keyed or any(row.keys() != names for row in rows):
        made = [model(**row) for row in rows]
        model._default_manager.bulk_create(made)
        return made
    fields = [field for field, _ in plan]
    columns = tuple(field.name for field in fields)
    batch = max(1, connection.ops.bulk_batch_size(fields, rows))
    now = timezone.now()
    values = [
        [
            now if source is _NOW else field.get_default() if source is _DEFAULT else row[source]
            for field, source in plan
        ]
        for row in rows
    ]
    keys: list[Any] = []
    # As the ORM's bulk_create: an error here (a value a field refuses, a failed INSERT)
    # inside a transaction leaves it to be rolled back.
    with transaction.mark_for_rollback_on_error(connection.alias):
        prepared = [
            [
                field.get_db_prep_save(value, connection)
                for field, value in zip(fields, row_values, strict=True)
            ]
            for row_values in values
        ]
        for start in range(0, len(rows), batch):
            count = min(batch, len(rows) - start)
            kind = ("insert", model, columns, count, instances)
            compiled = statements.get(kind)
            if compiled is None:
                compiled = statements[kind] = _insert_sql(
                    model, fields, count, connection, instances
                )
            sql, by_column = compiled
            chunk = prepared[start : start + count]
            params = (
                [list(column) for column in zip(*chunk, strict=True)]
                if by_column
                else [value for row_params in chunk for value in row_params]
            )
            if instances:
                keys += run_statement(connection, sql, params, _keys)
            else:
                run_statement(connection, sql, params, _done)
    if not instances:
        return list(rows)
    # Whole rows in the model's column order, as `from_db` takes them: the written columns
    # keep that order (`_insert_plan`), the key goes where the model has it.
    attnames = [field.attname for field in model._meta.concrete_fields]
    at = attnames.index(pk.attname)
    return [
        model.from_db(connection.alias, attnames, [*written[:at], key, *written[at:]])
        for key, written in zip(keys, values, strict=True)
    ]
