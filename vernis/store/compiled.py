"""Statements compiled once for a dialect and run through the driver: their SQL, and how a row of
named values becomes the positional arguments the driver takes (`vernis.store.transactions`'s
direct paths, on SQLite and PostgreSQL)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from cachetools import LRUCache

__all__ = ["Compiled", "Statements"]


@dataclass(frozen=True, slots=True)
class Compiled:
    """A statement as the driver takes it: its SQL, and how to turn named parameters into its
    positional arguments (SQLAlchemy's bind processors: ids, times and JSON as the column stores them)."""

    statement: sa.Executable  # held: while it is cached, its id names it alone
    sql: str
    compiled: sa.engine.Compiled
    names: tuple[str, ...]
    processors: tuple[Callable[[Any], Any] | None, ...]
    # The keys of the columns returned, and what turns the driver's value of each into its type.
    keys: tuple[str, ...]
    results: tuple[Callable[[Any], Any] | None, ...]
    # Where each positional argument comes from, when every one is a value of the row or a fixed
    # value of the statement (a literal in it): (its key in the row, the fixed value or `_ROW`).
    # None: through SQLAlchemy's `construct_params` (a computed default, an expanding list).
    sources: tuple[tuple[str, Any], ...] | None

    @property
    def first(self) -> Callable[[Any], Any] | None:
        return self.results[0] if self.results else None

    def mappings(self, rows: list[tuple[Any, ...]]) -> list[dict[str, Any]]:
        """The driver's rows as the columns' keys and their values, each of its column's type."""
        keys, results = self.keys, self.results
        return [
            {
                key: value if process is None or value is None else process(value)
                for key, process, value in zip(keys, results, row, strict=True)
            }
            for row in rows
        ]

    def arguments(self, row: Mapping[str, Any]) -> list[Any]:
        """The driver's positional arguments for `row`, through the bind processors."""
        return [
            value if process is None else process(value)
            for process, value in zip(self.processors, self._values(row), strict=True)
        ]

    def _values(self, row: Mapping[str, Any]) -> list[Any]:
        if self.sources is not None:
            try:
                return [row[key] if fixed is _ROW or key in row else fixed for key, fixed in self.sources]
            except KeyError:
                pass  # a value the statement requires is missing: SQLAlchemy's error says which
        constructed = self.compiled.construct_params(row)
        assert constructed is not None
        return [constructed[name] for name in self.names]


# A positional argument that the row must give.
_ROW: Any = object()


def _sources(compiled: sa.engine.Compiled, names: tuple[str, ...]) -> tuple[tuple[str, Any], ...] | None:
    """`Compiled.sources`, as `construct_params` would find them (a parameter by its key; else,
    when not required, the bind's own value)."""
    binds = {name: bind for bind, name in compiled.bind_names.items()}  # type: ignore[attr-defined]
    if getattr(compiled, "escaped_bind_names", None):
        return None
    sources = []
    for name in names:
        bind = binds.get(name)
        if bind is None or bind.callable is not None or bind.expanding:
            return None
        if bind.key != name and not bind.key.startswith("%("):  # an anonymous bind's key: "%(...)s"
            return None  # a parameter found by either of two keys
        sources.append((name, _ROW if bind.required else bind.value))
    return tuple(sources)


class Statements:
    """Statements compiled once for a dialect (the hot ones are built once; any other is compiled
    again when it comes back)."""

    def __init__(self, dialect: sa.Dialect) -> None:
        self._dialect = dialect
        self._compiled: LRUCache[tuple[int, tuple[str, ...]], Compiled] = LRUCache(maxsize=64)

    def compile(self, statement: sa.Executable, keys: tuple[str, ...]) -> Compiled:
        key = (id(statement), keys)
        found = self._compiled.get(key)
        if found is None or found.statement is not statement:
            compiled = statement.compile(dialect=self._dialect, column_keys=list(keys))  # type: ignore[attr-defined]
            names = tuple(compiled.positiontup or ())
            processors = compiled._bind_processors
            columns = compiled._result_columns
            found = self._compiled[key] = Compiled(
                statement,
                compiled.string,
                compiled,
                names,
                tuple(processors.get(name) for name in names),
                tuple(column.keyname for column in columns),
                tuple(
                    column.type.dialect_impl(self._dialect).result_processor(self._dialect, None)
                    for column in columns
                ),
                _sources(compiled, names),
            )
        return found
