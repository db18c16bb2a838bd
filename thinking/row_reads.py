"""Reads of a live update and a stored step without the ORM's per-query work.

Every stored step reads the session row under its lock, and every full live update reads it
again, with the numbers of the session's sources and the states of its sub-questions.
Through the ORM each read clones, builds and compiles its query anew: ~1 ms of CPU for the
~50-column session row on this machine, where running the SELECT and building the instance
cost about a third of that (bench/README.md, "The session row, compiled once"). Here each
kind of read is compiled once per database connection, and a read runs it and builds its
result the way the ORM's own iterators do: each column through its converters, then
`Model.from_db` for an instance. Anything else goes through the ORM as usual.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models.expressions import Col
from django.db.transaction import TransactionManagementError


@dataclass(frozen=True)
class _Read:
    sql: str
    key: models.Field  # the field the one parameter is compared with
    columns: list[str]  # the model's attribute names, in the SELECT's order
    converters: list[tuple[int, list[Any], Any]]  # (position, converters, expression)

    def run(self, connection: BaseDatabaseWrapper, value: Any) -> list[list[Any]]:
        # As the ORM prepares a lookup's value: a malformed key fails here (ValidationError).
        key = self.key.get_db_prep_value(value, connection)
        with connection.cursor() as cursor:
            cursor.execute(self.sql, [key])
            rows = [list(row) for row in cursor.fetchall()]
        for row in rows:
            for position, convs, expression in self.converters:
                value = row[position]
                for convert in convs:
                    value = convert(value, expression, connection)
                row[position] = value
        return rows


# Per connection object: converters are bound to the connection's backend, and each thread
# has its own connection object (its reads are forgotten with it).
_compiled: weakref.WeakKeyDictionary[BaseDatabaseWrapper, dict[tuple[Any, ...], _Read]] = (
    weakref.WeakKeyDictionary()
)


def _compiled_read(
    connection: BaseDatabaseWrapper, kind: tuple[Any, ...], rows: Callable[[], models.QuerySet]
) -> _Read:
    reads = _compiled.get(connection)
    if reads is None:
        reads = _compiled[connection] = {}
    read = reads.get(kind)
    if read is None:
        query = rows()
        compiler = query.query.get_compiler(connection=connection)
        sql, params = compiler.as_sql()
        select = [column for column, _, _ in compiler.select]
        # The key is the query's one parameter (any key compiles to the same SQL), and every
        # column is the model's own, so the rows can be built without the ORM's iterators.
        if len(params) != 1 or not all(
            isinstance(column, Col) and column.target.model is query.model for column in select
        ):
            raise ValueError(f"not a plain read of {query.model.__name__} rows by one key: {sql}")
        filters: list[Any] = query.query.where.children
        (lookup,) = filters  # the one filter, on the key's column: its field prepares a key
        converters = compiler.get_converters(select)
        read = reads[kind] = _Read(
            sql=sql,
            key=lookup.lhs.target,
            columns=[column.target.attname for column in select],
            converters=[(i, convs, expression) for i, (convs, expression) in converters.items()],
        )
    return read


def read_by_pk[M: models.Model](
    model: type[M], pk: Any, *, for_update: bool = False, defer: Sequence[str] = ()
) -> M:
    """`model.objects.get(pk=pk)`, with `select_for_update()` or `defer(*defer)` if asked, at a
    fraction of the CPU. Raises `model.DoesNotExist` as `get` does; a locking read must run
    inside a transaction, as with the ORM."""
    connection = connections[DEFAULT_DB_ALIAS]
    if for_update and connection.get_autocommit():
        raise TransactionManagementError(
            "select_for_update cannot be used outside of a transaction."
        )

    def rows() -> models.QuerySet:
        query = model._default_manager.using(connection.alias).filter(pk=pk).order_by()
        query = query.select_for_update() if for_update else query
        return query.defer(*defer) if defer else query

    read = _compiled_read(connection, ("row", model, for_update, tuple(defer)), rows)
    found = read.run(connection, pk)
    if not found:
        raise model.DoesNotExist(f"{model.__name__} matching query does not exist.")  # type: ignore[attr-defined]
    return model.from_db(connection.alias, read.columns, found[0])


def values_by(
    model: type[models.Model], field: str, value: Any, *columns: str
) -> list[tuple[Any, ...]]:
    """`model.objects.filter(**{field: value}).order_by().values_list(*columns)`, at a
    fraction of the CPU: the rows in no particular order."""
    connection = connections[DEFAULT_DB_ALIAS]

    def rows() -> models.QuerySet:
        manager = model._default_manager.using(connection.alias)
        return manager.filter(**{field: value}).order_by().values_list(*columns)

    read = _compiled_read(connection, ("values", model, field, columns), rows)
    return [tuple(row) for row in read.run(connection, value)]
