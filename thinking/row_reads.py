"""Reads of a live update and a stored step without the ORM's per-query work.

Every stored step reads the session row under its lock, and every full live update reads it
again, with the numbers of the session's sources and the states of its sub-questions; every
thought cycle reads the session log. Through the ORM each read clones, builds and compiles
its query anew: ~1 ms of CPU for the ~50-column session row on this machine, where running
the SELECT and building the instance cost about a third of that (bench/README.md, "The
session row, compiled once"). Here each kind of read is compiled once per database
connection, and a read runs it and builds its result the way the ORM's own iterators do:
each column through its converters, then `Model.from_db` for an instance. Anything else goes
through the ORM as usual.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F, Func, Subquery
from django.db.models.expressions import Value
from django.db.models.query import ModelIterable, ValuesListIterable
from django.db.transaction import TransactionManagementError


def _fetch(
    connection: BaseDatabaseWrapper,
    sql: str,
    params: list[Any],
    converters: list[tuple[int, list[Any], Any]],
) -> list[list[Any]]:
    """Run a compiled statement; each column of each row through its converters, as the
    ORM's iterators do."""
    rows = [list(row) for row in run_statement(connection, sql, params, _all_rows)]
    for row in rows:
        for position, convs, expression in converters:
            value = row[position]
            for convert in convs:
                value = convert(value, expression, connection)
            row[position] = value
    return rows


def _all_rows(cursor: Any) -> list[Any]:
    return cursor.fetchall()


def run_statement[R](
    connection: BaseDatabaseWrapper, sql: str, params: Sequence[Any], take: Callable[[Any], R]
) -> R:
    """Run one of the compiled statements and return `take(cursor)` (its rows, its row
    count). A new cursor through Django costs about as much CPU as a small statement itself
    (bench/README.md, "One cursor per connection"), and a step runs about eight of these, so
    they share one cursor per database connection, kept beside the connection until it is
    replaced. Django's checks and error handling stay: a broken transaction is refused, and
    a driver error comes out as Django's, marking the connection as Django's own cursor
    does. While statements are logged or wrapped (a test counting them, a debugging tool),
    Django's own cursor runs them, so each is seen."""
    if connection.queries_logged or connection.execute_wrappers:
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            return take(cursor)
    run = _kept_runner(connection)
    connection.validate_no_broken_transaction()
    with connection.wrap_database_errors:
        return take(run(sql, params))


def _kept_runner(connection: BaseDatabaseWrapper) -> Callable[[str, Sequence[Any]], Any]:
    """How this connection runs a compiled statement (returning the driver's cursor it ran
    on), kept for the connection and made anew when the connection under it changed
    (closed, replaced, another of the pool's) or its time zone did (a cursor may carry its
    own time-zone loader). Holding the old connection object keeps its identity from being
    reused by a new one while it is compared."""
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    raw, zone = connection.connection, connection.timezone
    kept = connection.__dict__.get("_deepthink_runner")
    if kept is None or kept[0] is not raw or kept[1] is not zone:
        connection.validate_thread_sharing()
        with connection.wrap_database_errors:
            kept = connection.__dict__["_deepthink_runner"] = (
                raw,
                zone,
                _statement_runner(connection),
            )
    return kept[2]


def _statement_runner(connection: BaseDatabaseWrapper) -> Callable[[str, Sequence[Any]], Any]:
    return connection.create_cursor().execute  # TEMPORARY: this module is being removed


# A prepared statement the server no longer has (26000), or whose columns' types changed
# under it (0A000, "cached plan must not change result type"): it did not run. 0A000 is
# any feature not supported too, whose statement did not run either: run again, it fails
# again, one round trip later.
_STALE_STATEMENT = ("26000", "0A000")


@functools.lru_cache(maxsize=512)
def _text_placeholders(sql: str) -> str:
    """`sql` with its parameters sent as text (`%t`), not in binary: PostgreSQL then checks
    each against its type, as it checks a value Django's client-side binding writes into the
    SQL. In binary the driver packs Django's `Int4` (an IntegerField's value) into four
    bytes even when it does not fit, and the database would store a wrapped-around number
    where Django's own cursor fails with an out-of-range error. `%%` stays a percent sign."""
    return _PLACEHOLDER.sub(lambda found: found[0] if found[0] == "%%" else "%t", sql)


_PLACEHOLDER = re.compile("%%|%s")


_generation = [0]  # bumped by `forget_compiled`: every connection's statements are stale


def forget_compiled() -> None:
    """Make every connection (of every thread) compile its statements anew on next use. For
    tests: a statement compiled by an earlier test, or by the process a mutation run forks
    from, would hide a change to the query it was built from."""
    _generation[0] += 1


def compiled_on(connection: BaseDatabaseWrapper) -> dict[Any, Any]:
    """The compiled statements of one connection object, kept on the object itself: the ORM's
    converters are bound to its backend, and each thread has its own connection object, so
    its reads go with it. (A map keyed by the object held it forever: a converter refers
    back to it.)"""
    kept = connection.__dict__.get("_deepthink_reads")
    if kept is None or kept[0] != _generation[0]:
        kept = connection.__dict__["_deepthink_reads"] = (_generation[0], {})
    return kept[1]


def _compile(query: models.QuerySet, connection: BaseDatabaseWrapper) -> tuple[Any, str, Any, list]:
    """The ORM's own compilation: its compiler, SQL, parameters and selected columns."""
    compiler = query.query.get_compiler(connection=connection)
    sql, params = compiler.as_sql()
    return compiler, sql, params, [column for column, _, _ in compiler.select]


# Each varying value of a read (a session's key, the first cycle of an epoch) is named with a
# `Param`: the ORM compiles it to a placeholder, and each run fills the placeholders from its
# own values. Everything else in the query (constants, the order, a LIMIT) is compiled into
# the statement once.


@dataclass(frozen=True)
class Slot:
    """A placeholder's place in the compiled parameters: filled by name on each run, with the
    value prepared as `field` prepares a lookup's value, or a stored one's (`saved`, for an
    UPDATE's SET: row_writes.py)."""

    name: str
    field: models.Field
    saved: bool = False

    def prepare(self, value: Any, connection: BaseDatabaseWrapper) -> Any:
        if self.saved:
            return self.field.get_db_prep_save(value, connection)
        return self.field.get_db_prep_value(value, connection)


def filled(
    params: Sequence[Any], values: Mapping[str, Any], connection: BaseDatabaseWrapper
) -> list[Any]:
    """A compiled statement's parameters for one run: each `Slot` filled from `values` by its
    name, prepared by its field; constants as compiled."""
    return [p.prepare(values[p.name], connection) if isinstance(p, Slot) else p for p in params]


class Param(Value):
    """A named parameter of a compiled read (`compiled_values`, `compiled_rows`): the ORM
    compiles it to a placeholder; each run's value is prepared as `output_field` prepares
    a lookup's value."""

    def __init__(self, name: str, output_field: models.Field) -> None:
        super().__init__(None, output_field=output_field)
        self.name = name

    def as_sql(self, compiler: Any, connection: Any, **extra_context: Any) -> Any:
        return "%s", (Slot(self.name, self.output_field),)


def aggregate(rows: models.QuerySet, function: str, column: str = "pk") -> Subquery:
    """COUNT, MIN or MAX of one column of `rows` (filtered to the outer row by an `OuterRef`)
    as a subquery, one value per outer row: a plain SQL function, not the ORM's aggregate,
    so no GROUP BY, and 0 (COUNT) or NULL (MIN, MAX) when there are no rows."""
    value = Func(F(column), function=function, output_field=models.BigIntegerField())
    return Subquery(rows.order_by().values(v=value))


@dataclass(frozen=True)
class _Instances:
    """How a row of a query of instances becomes one, as the ORM's `ModelIterable` builds
    it: the model's columns (those selected: `only()` defers the rest), then each row it
    selects with it (`select_related`), then its annotations, set as attributes."""

    model: type[models.Model]
    start: int
    end: int
    columns: list[str]  # the attribute names of row[start:end]
    related: tuple[_Selected, ...]
    annotations: tuple[tuple[str, int], ...]

    @classmethod
    def of(
        cls, info: dict[str, Any], select: list[Any], annotations: Mapping[str, int]
    ) -> _Instances:
        if info.get("from_parent"):  # a parent model's columns, in another order
            raise ValueError(f"not a read compiled reads can give as the ORM would: {info}")
        fields = info["select_fields"]
        start, end = fields[0], fields[-1] + 1
        columns = [column.target.attname for column in select[start:end]]
        return cls(
            model=info["model"],
            start=start,
            end=end,
            columns=columns,
            related=tuple(
                _Selected.of(cls.of(related, select, {}), related)
                for related in info.get("related_klass_infos", ())
            ),
            annotations=tuple(annotations.items()),
        )

    def build(self, alias: str, row: list[Any]) -> Any:
        instance = self.model.from_db(alias, self.columns, row[self.start : self.end])
        for selected in self.related:
            selected.populate(alias, row, instance)
        for name, position in self.annotations:
            setattr(instance, name, row[position])
        return instance


@dataclass(frozen=True)
class _Selected:
    """A row selected with an instance (`select_related`), set on it by the ORM's setters (a
    foreign key's cached value, and its reverse)."""

    rows: _Instances
    key: int  # its primary key's place in the row
    set_on_owner: Callable[[Any, Any], None]
    set_owner: Callable[[Any, Any], None]

    @classmethod
    def of(cls, rows: _Instances, info: dict[str, Any]) -> _Selected:
        # The key's first column (as the ORM's RelatedPopulator: a composite key's too).
        key = rows.start + rows.columns.index(rows.model._meta.pk_fields[0].attname)
        return cls(rows, key, info["local_setter"], info["remote_setter"])

    def populate(self, alias: str, row: list[Any], owner: models.Model) -> None:
        """None when the join found no row (its key is NULL), as the ORM sets it: reading it
        runs no query."""
        found = None if row[self.key] is None else self.rows.build(alias, row)
        self.set_on_owner(owner, found)
        if found is not None:
            self.set_owner(found, owner)


@dataclass(frozen=True)
class _Statement:
    build: Callable[[], models.QuerySet]  # what `kind` names: another is refused
    sql: str
    params: list[Any]  # constants, and a `Slot` for each Param
    names: frozenset[str]
    model: type[models.Model]
    iterable: type  # the ORM's kind of result: instances, values_list rows, ...
    instances: _Instances | None  # how a row becomes an instance (a query of instances)
    converters: list[tuple[int, list[Any], Any]]
    locks: bool  # select_for_update(): the ORM refuses it outside a transaction when it
    # compiles the query, and this one is compiled once, so each run refuses it here

    def run(self, connection: BaseDatabaseWrapper, values: dict[str, Any]) -> list[list[Any]]:
        if values.keys() != self.names:
            raise ValueError(f"this read takes {sorted(self.names)}, not {sorted(values)}")
        if self.locks and connection.get_autocommit():
            raise TransactionManagementError(
                "select_for_update cannot be used outside of a transaction."
            )
        params = filled(self.params, values, connection)
        return _fetch(connection, self.sql, params, self.converters)


def _statement(
    connection: BaseDatabaseWrapper, kind: Hashable, build: Callable[[], models.QuerySet]
) -> _Statement:
    """The statement `kind` names on this connection, compiled from `build()` the first
    time."""
    statements: dict[Hashable, _Statement] = compiled_on(connection)
    statement = statements.get(kind)
    if statement is None:
        query = build()
        compiler, sql, params, select = _compile(query, connection)
        # Rows are taken as the database returns them: nothing the ORM does after the SELECT
        # (prefetching, trimming the columns DISTINCT ordering adds, setting the rows a
        # related manager's query already knows) would be done.
        after = ("_prefetch_related_lookups", "_known_related_objects")
        if query.query.distinct or any(getattr(query, name) for name in after):
            raise ValueError(f"not a read compiled reads can give as the ORM would: {sql}")
        converters = compiler.get_converters(select)
        instances = None
        if query._iterable_class is ModelIterable:
            instances = _Instances.of(compiler.klass_info, select, compiler.annotation_col_map)
        statement = statements[kind] = _Statement(
            build=build,
            sql=sql,
            params=list(params),
            names=frozenset(p.name for p in params if isinstance(p, Slot)),
            model=query.model,
            iterable=query._iterable_class,
            instances=instances,
            converters=[(i, convs, expression) for i, (convs, expression) in converters.items()],
            locks=query.query.select_for_update,
        )
    return statement


def _named(
    connection: BaseDatabaseWrapper, kind: str, build: Callable[[], models.QuerySet]
) -> _Statement:
    statement = _statement(connection, kind, build)
    if statement.build is not build:  # the SQL compiled is another query's
        raise ValueError(f"{kind!r} names another query already")
    return statement


def compiled_values(
    kind: str, build: Callable[[], models.QuerySet], /, **values: Any
) -> list[tuple[Any, ...]]:
    """The rows of `build()` (a `values_list` query whose varying values are `Param`s), as
    the ORM would return them, compiled once per connection under the name `kind`: one
    `kind` always names the same `build` (another is refused), and a value that varies must
    be a `Param` (anything else is compiled in with the first call's value)."""
    connection = connections[DEFAULT_DB_ALIAS]
    statement = _named(connection, kind, build)
    if statement.iterable is not ValuesListIterable:  # flat, named, dicts, instances
        raise ValueError(f"not a values_list read of {statement.model.__name__}: {statement.sql}")
    return [tuple(row) for row in statement.run(connection, values)]


def compiled_rows[M: models.Model](
    kind: str, build: Callable[[], models.QuerySet[M]], /, **values: Any
) -> list[M]:
    """The instances `build()` (a query of its model's instances, varying values as
    `Param`s) would give, with the rows it selects related and its annotations, compiled
    once per connection under the name `kind` (as for `compiled_values`)."""
    connection = connections[DEFAULT_DB_ALIAS]
    statement = _named(connection, kind, build)
    instances = _instances(statement)
    return [instances.build(connection.alias, row) for row in statement.run(connection, values)]


def _instances(statement: _Statement) -> _Instances:
    if statement.instances is None:
        raise ValueError(f"not a read of {statement.model.__name__} rows: {statement.sql}")
    return statement.instances


# --- the reads every step and live update makes -------------------------------------------
# Their kinds are tuples, so they never meet a named read's name; each kind is one query.


def read_by_pk[M: models.Model](model: type[M], pk: Any, *, for_update: bool = False) -> M:
    """`model.objects.get(pk=pk)`, with `select_for_update()` if asked, at a fraction of the
    CPU. Raises `model.DoesNotExist` as `get` does; a locking read must run inside a
    transaction, as with the ORM."""
    connection = connections[DEFAULT_DB_ALIAS]

    def rows() -> models.QuerySet:
        key = Param("pk", model._meta.pk)
        query = model._default_manager.using(connection.alias).filter(pk=key).order_by()
        return query.select_for_update() if for_update else query

    statement = _statement(connection, ("row", model, for_update), rows)
    found = statement.run(connection, {"pk": pk})
    if not found:
        raise model.DoesNotExist(f"{model.__name__} matching query does not exist.")  # type: ignore[attr-defined]
    return _instances(statement).build(connection.alias, found[0])


KEYS_COMPILED = 8  # `rows_by_pks` compiles one statement per count of keys up to this


def rows_by_pks[M: models.Model](model: type[M], pks: Iterable[Any]) -> dict[Any, M]:
    """`model.objects.in_bulk(pks)`: the rows with these keys, by key (a missing one is left
    out). Up to KEYS_COMPILED distinct keys, one compiled statement per count of keys (a
    live update asks for the few sub-questions it redraws); more go through the ORM."""
    wanted = list(dict.fromkeys(pks))
    if not wanted:
        return {}
    if len(wanted) > KEYS_COMPILED:
        return model._default_manager.in_bulk(wanted)
    connection = connections[DEFAULT_DB_ALIAS]
    names = [f"pk{i}" for i in range(len(wanted))]

    def rows() -> models.QuerySet:
        keys = [Param(name, model._meta.pk) for name in names]
        return model._default_manager.using(connection.alias).filter(pk__in=keys).order_by()

    statement = _statement(connection, ("rows", model, len(names)), rows)
    found = statement.run(connection, dict(zip(names, wanted, strict=True)))
    instances = (_instances(statement).build(connection.alias, row) for row in found)
    return {instance.pk: instance for instance in instances}


def values_by(
    model: type[models.Model], field: str, value: Any, *columns: str
) -> list[tuple[Any, ...]]:
    """`model.objects.filter(**{field: value}).order_by().values_list(*columns)` for one of
    the model's own fields, at a fraction of the CPU: the rows in no particular order."""
    connection = connections[DEFAULT_DB_ALIAS]

    def rows() -> models.QuerySet:
        key = Param("key", model._meta.get_field(field))  # type: ignore[arg-type]
        manager = model._default_manager.using(connection.alias)
        return manager.filter(**{field: key}).order_by().values_list(*columns)

    statement = _statement(connection, ("values", model, field, columns), rows)
    return [tuple(row) for row in statement.run(connection, {"key": value})]


def values_among(
    model: type[models.Model],
    field: str,
    value: Any,
    among: str,
    wanted: Iterable[Any],
    *columns: str,
) -> list[tuple[Any, ...]]:
    """`model.objects.filter(**{field: value, f"{among}__in": wanted}).order_by()
    .values_list(*columns)` for two of the model's own fields: the rows in no particular
    order. Up to KEYS_COMPILED distinct values of `among`, one compiled statement per count
    of them (a step looks up the few it is about to add); more go through the ORM."""
    values = list(dict.fromkeys(wanted))
    if not values:
        return []
    manager = model._default_manager
    if len(values) > KEYS_COMPILED:
        query = manager.filter(**{field: value, f"{among}__in": values}).order_by()
        return [tuple(row) for row in query.values_list(*columns)]
    connection = connections[DEFAULT_DB_ALIAS]
    names = [f"among{i}" for i in range(len(values))]

    def rows() -> models.QuerySet:
        key = Param("key", model._meta.get_field(field))  # type: ignore[arg-type]
        target = model._meta.get_field(among)
        keys = [Param(name, target) for name in names]  # type: ignore[arg-type]
        query = manager.using(connection.alias).filter(**{field: key, f"{among}__in": keys})
        return query.order_by().values_list(*columns)

    kind = ("values among", model, field, among, len(names), columns)
    statement = _statement(connection, kind, rows)
    found = statement.run(connection, {"key": value, **dict(zip(names, values, strict=True))})
    return [tuple(row) for row in found]
