"""Public tables: tables the schema declares with their rows inline, and the foreign keys that reference them.

::

    [tables.regions]
    public = true
    columns = ["region_id", "name"]
    rows = [[1, "North"], [2, "South"], [3, "North"]]

    [tables.people.columns.region_id]
    type = "categorical"            # or integer with one value per base cell (resolution 1)
    values = [1, 2, 3, 4]
    references = "regions.region_id"

A public table is public by declaration and never read from the database; a query joins it by a
lookup from the foreign key's declared values (:mod:`dpsql.sql.public_joins`). Here: loading the
tables and checking every ``references`` against them, for :mod:`dpsql.schema`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from dpsql.domains import Categorical, Domain
from dpsql.errors import SchemaError


class ForeignKey(Protocol):
    """What is read of a declared column (a :class:`dpsql.schema.Column`) that may reference a public table."""

    @property
    def key(self) -> str: ...

    @property
    def domain(self) -> Domain: ...

    @property
    def references(self) -> str | None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class PublicTable:
    """A public table: column names and rows, declared in the schema (never read from the database)."""

    name: str
    columns: tuple[str, ...]
    rows: tuple[tuple[object, ...], ...]

    def values(self, column: str) -> list[object]:
        index = self.columns.index(column)
        return [row[index] for row in self.rows]


def is_public(spec: object) -> bool:
    return isinstance(spec, Mapping) and spec.get("public") is True


def load(tables: Mapping[str, Any]) -> dict[str, PublicTable]:
    """The ``public = true`` tables of ``[tables]``, checked: names, rows of the right width, plain values."""
    return {name.lower(): _load_table(name, spec) for name, spec in tables.items() if is_public(spec)}


def _load_table(name: str, spec: Mapping[str, Any]) -> PublicTable:
    key = f"tables.{name}"
    unknown = sorted(set(spec) - {"public", "columns", "rows"})
    if unknown:
        raise SchemaError(f"{key} has unknown setting(s) {', '.join(unknown)}; a public table has public = true, "
                          "columns = [names] and rows = [[values], ...].")
    columns = spec.get("columns")
    if not isinstance(columns, list) or not columns or not all(isinstance(c, str) for c in columns) or \
            len({c.lower() for c in columns}) != len(columns):
        raise SchemaError(f'{key}.columns must be a list of distinct column names, e.g. ["region_id", "name"].')
    rows = spec.get("rows")
    if not isinstance(rows, list) or not rows:
        raise SchemaError(f"{key}.rows must be a non-empty list of rows, each a list of {len(columns)} values.")
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, list) or len(row) != len(columns) or \
                any(isinstance(v, bool) or not isinstance(v, (str, int, float, dt.date)) for v in row):
            raise SchemaError(f"{key}.rows row {number} must be a list of {len(columns)} strings, numbers or dates.")
    return PublicTable(name=name.lower(), columns=tuple(c.lower() for c in columns),
                       rows=tuple(tuple(row) for row in rows))


def check_references(columns: Iterable[ForeignKey], public: Mapping[str, PublicTable]) -> None:
    """Every ``references = "table.column"`` of the declared ``columns``: a public table and column, a unique
    key of values of the foreign key's type, and a foreign key whose base cells hold one value each."""
    for column in columns:
        if column.references is not None:
            _check_reference(column, public)


def _check_reference(column: ForeignKey, public: Mapping[str, PublicTable]) -> None:
    key = f"{column.key}.references"
    target, _, name = column.references.lower().partition(".") if isinstance(column.references, str) else ("", "", "")
    found = public.get(target)
    if found is None or not name:
        raise SchemaError(f'{key} must name a public table\'s column as "table.column"; got {column.references!r}. '
                          f"Public tables: {', '.join(sorted(public)) or 'none'}.")
    if name not in found.columns:
        raise SchemaError(f"{key}: the public table '{found.name}' has no column '{name}'; its columns: "
                          f"{', '.join(found.columns)}.")
    keys = found.values(name)
    if len(set(keys)) != len(keys):
        raise SchemaError(f"{key}: {found.name}.{name} holds a value twice, so it is no key; list each key once in "
                          f"tables.{found.name}.rows.")
    domain = column.domain
    if isinstance(domain, Categorical):
        wanted: type = str if all(isinstance(v, str) for v in domain.values) else int
    elif domain.kind == "integer" and all(domain.boundaries[k + 1] - domain.boundaries[k] == 1
                                          for k in range(domain.size - (1 if domain.closed_top else 0))):
        wanted = int
    else:
        raise SchemaError(f"{key}: a foreign key must be categorical, or integer with one value per base cell "
                          f"(resolution = 1); {column.key} is not.")
    if any(isinstance(v, bool) or not isinstance(v, wanted) for v in keys):
        kind = "strings" if wanted is str else "integers"
        raise SchemaError(f"{key}: the values of {found.name}.{name} must be {kind}, like the declared values of "
                          f"{column.key}.")


def base_values(column: ForeignKey) -> list[object]:
    """The one value of each base cell of a foreign key (checked by ``check_references``)."""
    if isinstance(column.domain, Categorical):
        return list(column.domain.values)
    return [int(b) for b in column.domain.boundaries[:-1]]
