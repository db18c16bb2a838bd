"""The UPDATE every stored step ends with, without the ORM's per-query work.

Each step applies its changes and checkpoint to the session row in one UPDATE (`_open_step`
in models.py), about two per model call. Through the ORM each one builds, resolves and
compiles its query anew: 1.5 to 1.8 ms of CPU on PostgreSQL, where running it costs about half
(bench/README.md, "The step's UPDATE, compiled once"). An UPDATE's SQL depends only on which
fields it sets and how (a value, or `F(name) + n`), so each such shape is compiled once per
database connection, by the ORM, with a placeholder for every value; a write then prepares
its values as the ORM prepares saved values and runs the statement. A change of any other
kind (another expression, a related object) goes through the ORM as usual.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import FieldDoesNotExist
from django.db import DEFAULT_DB_ALIAS, connections, models, transaction
from django.db.models import F
from django.db.models.expressions import Value
from django.db.models.sql import UpdateQuery

from .row_reads import Param, Slot, compiled_on, filled

_UNSET = object()  # a stored Param's value: each write gives its own


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
        with connection.cursor() as cursor:
            cursor.execute(sql, filled(params, values, connection))
            return cursor.rowcount
