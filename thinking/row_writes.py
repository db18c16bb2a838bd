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
from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.db import DEFAULT_DB_ALIAS, connections, models, transaction
from django.db.models import F
from django.db.models.expressions import Value
from django.db.models.fields import NOT_PROVIDED
from django.db.models.sql import UpdateQuery
from django.utils import timezone

from .row_reads import Param, Slot, compiled_on, filled, run_statement

_UNSET = object()  # a stored Param's value: each write gives its own


def _row_count(cursor: Any) -> int:
    return cursor.rowcount


def _done(cursor: Any) -> None:
    return None


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
    """How the UPDATE sets `name`: ("=", value, field) stores a value, ("+", n, n's field)
    adds n to the stored one (`F(name) + n`); None for a change it leaves to the ORM. The
    field prepares the value, as the ORM's would (n's own, for `F(name) + n`: an integer
    field plus 1.5 adds 1.5 there)."""
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
    return None if added is None else ("+", added.value, added.output_field)


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


def _insert_sql(
    model: type[models.Model], fields: list[models.Field], count: int, connection: Any
) -> str:
    """The INSERT of `count` rows of `fields`, as the backend's operations write it."""
    ops = connection.ops
    rows = [["%s"] * len(fields)] * count
    names = ", ".join(ops.quote_name(f.column) for f in fields)
    table = ops.quote_name(model._meta.db_table)
    return f"{ops.insert_statement()} {table} ({names}) {ops.bulk_insert_sql(fields, rows)}"


def insert_rows(model: type[models.Model], rows: Sequence[Mapping[str, Any]]) -> int:
    """`model.objects.bulk_create([model(**row) for row in rows])` at a fraction of the CPU,
    for rows that give their fields by attname (`session_id`, not `session`): the number of
    rows. The same columns get the same values, prepared by their fields; the rows' times
    are one reading of the clock. No instances come back, so the keys the database gives
    are not read. Rows that do not all give the same fields, values that are expressions,
    and fields it does not handle (`_insert_plan`) go through the ORM."""
    if not rows:
        return 0
    connection = connections[DEFAULT_DB_ALIAS]
    # Worked out once per shape, kept with the connection's compiled statements (so a test
    # that forgets them builds them anew: row_reads.forget_compiled).
    statements = compiled_on(connection)
    names = frozenset(rows[0])
    plan = statements.get(("insert plan", model, names), _UNSET)
    if plan is _UNSET:
        plan = statements[("insert plan", model, names)] = _insert_plan(model, names)
    expressions = any(hasattr(v, "resolve_expression") for row in rows for v in row.values())
    if plan is None or expressions or any(row.keys() != names for row in rows):
        model._default_manager.bulk_create([model(**row) for row in rows])
        return len(rows)
    fields = [field for field, _ in plan]
    columns = tuple(field.name for field in fields)
    width = len(columns)
    batch = max(1, connection.ops.bulk_batch_size(fields, rows))
    now = timezone.now()
    # As the ORM's bulk_create: an error here (a value a field refuses, a failed INSERT)
    # inside a transaction leaves it to be rolled back.
    with transaction.mark_for_rollback_on_error(connection.alias):
        params = [
            field.get_db_prep_save(
                now
                if source is _NOW
                else field.get_default()
                if source is _DEFAULT
                else row[source],
                connection,
            )
            for row in rows
            for field, source in plan
        ]
        for start in range(0, len(rows), batch):
            count = min(batch, len(rows) - start)
            sql = statements.get(("insert", model, columns, count))
            if sql is None:
                sql = statements[("insert", model, columns, count)] = _insert_sql(
                    model, fields, count, connection
                )
            run_statement(connection, sql, params[start * width : (start + count) * width], _done)
    return len(rows)
