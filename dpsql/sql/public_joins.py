"""Joins with a PUBLIC dimension table: a lookup from a foreign key's declared values to labels.

The schema declares a public table with its rows inline, and a foreign key on the private table
that references it (:mod:`dpsql.public_tables`). Then ``FROM people [INNER | LEFT] JOIN regions [r]
USING (region_id)`` (or ``ON people.region_id = r.region_id``) may group by and filter on the public
table's columns. Each public column is a public function of the key: ``GROUP BY r.name`` is a
re-binning of ``region_id``'s cells (a :class:`~dpsql.sql.ir.LookupKey`), a WHERE atom on ``r.name``
is ``region_id IN (the keys whose row makes it TRUE)``. INNER JOIN also adds ``region_id IN (every
public key)``, a public filter; LEFT JOIN keeps the other key values (and NULL keys) in a NULL group.
The public rows come from the schema and never touch the database: no SQL join is generated, the
private table is scanned exactly as for the rewritten statement.

Privacy: an exact rewrite to the private table's cells (same queries, same sensitivity, same cost).
The public rows are public by declaration and the lookup reads nothing from the private data.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any
from typing import Literal as TypingLiteral

from dpsql import schema as sch
from dpsql.errors import SchemaError, UnsupportedQueryError
from dpsql.public_tables import PublicTable, base_values
from dpsql.sql import filters, ir

_JOIN_SUPPORTED = ("Joins are [INNER | LEFT] JOIN <public table> [alias] USING (key) or ON <table>.key = "
                   "<alias>.key, with a public table the schema declares and a key column that references it.")


# ==================================================================================== parse side
@dataclass(frozen=True, slots=True, kw_only=True)
class PublicJoin:
    """``[INNER | LEFT] JOIN table [alias] USING (key)`` or ``ON from.key = alias.key`` (resolved at compile)."""

    table: str
    alias: str | None
    kind: TypingLiteral["inner", "left"]
    key: ir.Column          # the FROM table's column
    public_column: str      # the joined table's column
    span: ir.Span

    def names(self) -> set[str]:
        return {self.table.lower()} | ({self.alias.lower()} if self.alias else set())


def public_join(join: ir.Join, statement: ir.Statement) -> PublicJoin:
    """A JOIN read by :mod:`dpsql.sql.joins` as a lookup: the FROM table's key column and the public one."""
    if join.using:
        key = ir.Column(name=join.using[0], qualifier=None, span=join.span)
        return PublicJoin(table=join.table, alias=join.alias, kind=join.kind, key=key,
                          public_column=join.using[0].lower(), span=join.span)
    names = {join.table.lower()} | ({join.alias.lower()} if join.alias else set())
    mine = [side for side in join.on if (side.qualifier or "").lower() in names]
    other = [side for side in join.on if side not in mine]
    if len(mine) != 1 or len(other) != 1:
        raise UnsupportedQueryError(f"JOIN {join.table} ({join.span.describe()}): the condition must compare a column "
                                    f"of {statement.table} with one of {join.table}. {_JOIN_SUPPORTED}")
    return PublicJoin(table=join.table, alias=join.alias, kind=join.kind, key=replace(other[0], qualified_table=None),
                      public_column=mine[0].name.lower(), span=join.span)


# ==================================================================================== compile side
def resolve(batch: ir.Batch, schema: sch.Schema) -> ir.Batch:
    """Every statement's joins with public tables rewritten over the private table's own columns (a join
    with a private table stays, for :mod:`dpsql.sql.relations`)."""
    if not any(_is_public(join, schema) for statement in batch.statements for join in statement.joins):
        return batch
    return replace(batch, statements=tuple(_rewrite(s, schema) if any(_is_public(j, schema) for j in s.joins) else s
                                           for s in batch.statements))


def _is_public(join: ir.Join, schema: sch.Schema) -> bool:
    return join.table.lower() in schema.public


@dataclass(frozen=True, slots=True)
class _Lookup:
    join: PublicJoin
    key: sch.Column
    public: PublicTable


def _rewrite(statement: ir.Statement, schema: sch.Schema) -> ir.Statement:
    table = schema.table(statement.table, (statement.table_span or statement.span).describe())
    lookups = [_lookup(public_join(join, statement), table, schema) for join in statement.joins
               if _is_public(join, schema)]
    keys = list(statement.group_keys or [None] * len(statement.group_by))
    group_by = list(statement.group_by)
    for index, column in enumerate(group_by):
        found = _owner(column, lookups, table)
        if found is not None:
            group_by[index], keys[index] = _key_column(found, column), _lookup_key(found, column)
    _check_one_key_per_column(statement.group_by, group_by, table)
    select = tuple(_rewrite_item(item, lookups, table) for item in statement.select)
    where = None if statement.where is None else _rewrite_predicate(statement.where, lookups, table, False)
    for lookup in lookups:
        if lookup.join.kind == "inner":
            where = _and(where, _member(lookup, set(lookup.public.values(lookup.join.public_column)),
                                        lookup.join.span))
    outputs = statement.outputs
    if outputs is not None:  # derived outputs list the group columns again (dpsql.sql.derived)
        outputs = replace(outputs, items=tuple(_rewrite_group(item, lookups, table) if isinstance(item, ir.GroupColumn)
                                               else item for item in outputs.items))
    return replace(statement, select=select, where=where, group_by=tuple(group_by), outputs=outputs,
                   group_keys=tuple(keys) if any(k is not None for k in keys) else (),
                   joins=tuple(join for join in statement.joins if not _is_public(join, schema)))


def _check_one_key_per_column(written: Sequence[ir.Column], keys: Sequence[ir.Column], table: sch.Table) -> None:
    """Two GROUP BY entries read from one foreign key (two public columns, or the key and a public column)
    would need the pairs of their values as groups: refused, with the rewrite."""
    for index, column in enumerate(keys):
        earlier = next((i for i in range(index) if keys[i].name.lower() == column.name.lower()), None)
        if earlier is not None:
            first, second = written[earlier], written[index]
            raise UnsupportedQueryError(
                f"GROUP BY '{first.name}' and '{second.name}' are both read from {table.name}.{column.name} through "
                f"the join ({second.span.describe()}), and one column groups by one key. Group by one of them, "
                f"with a WHERE on the other in one statement per value.")


def _lookup(join: PublicJoin, table: sch.Table, schema: sch.Schema) -> _Lookup:
    public = schema.public.get(join.table.lower())
    if public is None:
        raise UnsupportedQueryError(
            f"JOIN {join.table} ({join.span.describe()}): '{join.table}' is not a public table of the schema. "
            "Declare it with [tables.<name>] public = true, columns and rows, or query one table per statement.")
    if join.public_column not in public.columns:
        raise SchemaError(f"JOIN {join.table} ({join.span.describe()}): the public table '{public.name}' has no column "
                          f"'{join.public_column}'; its columns: {', '.join(public.columns)}.")
    key = table.column(join.key.name, join.key.span.describe())
    if key.references != f"{public.name}.{join.public_column}":
        raise SchemaError(f"JOIN {join.table} ({join.span.describe()}) joins on {table.name}.{key.name}, which does "
                          f'not reference {public.name}.{join.public_column}; declare references = '
                          f'"{public.name}.{join.public_column}" in {key.key}.')
    return _Lookup(join=join, key=key, public=public)


def _owner(column: ir.Column, lookups: list[_Lookup], table: sch.Table) -> _Lookup | None:
    """The join whose public table holds ``column`` (None: the FROM table's own column)."""
    if column.qualifier is not None:
        return next((lookup for lookup in lookups if column.qualifier.lower() in lookup.join.names()), None)
    holders = [lookup for lookup in lookups if column.name.lower() in lookup.public.columns]
    if not holders or column.name.lower() in table.columns:
        return None  # the FROM table's column (a USING key is the same value on every joined row)
    if len(holders) > 1:
        raise UnsupportedQueryError(f"column '{column.name}' ({column.span.describe()}) is in several joined tables; "
                                    "qualify it by the table or its alias.")
    return holders[0]


def _key_column(lookup: _Lookup, column: ir.Column) -> ir.Column:
    return ir.Column(name=lookup.key.name, qualifier=None, span=column.span)


def _labels(lookup: _Lookup, column: ir.Column) -> dict[object, object]:
    """Key value → the public column's value, for the keys of the FROM column's declared domain."""
    name = column.name.lower()
    if name not in lookup.public.columns:
        raise SchemaError(f"column '{column.name}' ({column.span.describe()}) is not in the public table "
                          f"'{lookup.public.name}'; its columns: {', '.join(lookup.public.columns)}.")
    return dict(zip(lookup.public.values(lookup.join.public_column), lookup.public.values(name)))


def _lookup_key(lookup: _Lookup, column: ir.Column) -> ir.LookupKey:
    return ir.LookupKey(column=_key_column(lookup, column), labels=tuple(_labels(lookup, column).items()),
                     keep_missing=lookup.join.kind == "left", span=column.span)


def _rewrite_item(item: ir.SelectItem, lookups: list[_Lookup], table: sch.Table) -> ir.SelectItem:
    if isinstance(item, ir.Aggregate):
        if item.column is not None and _owner(item.column, lookups, table) is not None:
            raise UnsupportedQueryError(f"{item.function.upper()}({item.column.name}) at {item.span.describe()} "
                                        "aggregates a column of a public table; aggregate the FROM table's columns.")
        return item
    found = _owner(item.column, lookups, table) if item.key is None else None
    if found is None:
        return item
    return replace(item, column=_key_column(found, item.column), key=_lookup_key(found, item.column))


def _rewrite_group(item: ir.GroupColumn, lookups: list[_Lookup], table: sch.Table) -> ir.GroupColumn:
    rewritten = _rewrite_item(item, lookups, table)
    assert isinstance(rewritten, ir.GroupColumn)
    return rewritten


def _rewrite_predicate(predicate: ir.Predicate, lookups: list[_Lookup], table: sch.Table,
                       negated: bool) -> ir.Predicate:
    """Atoms on a public column become ``key IN (keys where the atom is TRUE)``."""
    if isinstance(predicate, ir.Not):
        return replace(predicate, operand=_rewrite_predicate(predicate.operand, lookups, table, not negated))
    if isinstance(predicate, (ir.And, ir.Or)):
        return replace(predicate, operands=tuple(_rewrite_predicate(p, lookups, table, negated)
                                                 for p in predicate.operands))
    found = _owner(predicate.column, lookups, table)
    if found is None:
        return predicate
    if negated and found.join.kind == "left":
        raise UnsupportedQueryError(
            f"NOT around a condition on the public column '{predicate.column.name}' of a LEFT JOIN "
            f"({predicate.span.describe()}): keys with no public row make it UNKNOWN, which NOT keeps UNKNOWN. "
            "Write the negation inside the condition (<>, NOT IN, NOT BETWEEN) or use an INNER JOIN.")
    if isinstance(predicate, ir.IsNull) and found.join.kind == "left":
        raise UnsupportedQueryError(
            f"IS NULL on the public column '{predicate.column.name}' of a LEFT JOIN ({predicate.span.describe()}): "
            "keys without a public row would need a cell of their own. Use an INNER JOIN, or GROUP BY the "
            "public column (a LEFT JOIN reports those keys as its NULL group).")
    labels = _labels(found, predicate.column)
    return _member(found, {k for k, v in labels.items() if _holds(predicate, v)}, predicate.span)


def _holds(atom: filters.Atom, value: object) -> bool:
    """SQL truth of ``atom`` on one public value (types as compared by Python; mismatches never hold)."""
    if isinstance(atom, ir.IsNull):
        return (value is None) != atom.negated
    if isinstance(atom, ir.Like):
        pattern = filters.like_regex(str(atom.pattern.value), atom.escape, atom.case_insensitive)
        return value is not None and (pattern.fullmatch(str(value)) is not None) != atom.negated
    try:
        if isinstance(atom, ir.Comparison):
            other: Any = atom.value.value
            return {"=": value == other, "<>": value != other, "<": value < other, "<=": value <= other,
                    ">": value > other, ">=": value >= other}[atom.operator]
        if isinstance(atom, ir.Between):
            inside = atom.low.value <= value <= atom.high.value  # type: ignore[operator]
            return inside != atom.negated
        return (value in [literal.value for literal in atom.values]) != atom.negated
    except TypeError:
        raise UnsupportedQueryError(f"the condition at {atom.span.describe()} compares a public column with a "
                                    "constant of another type.") from None


def _member(lookup: _Lookup, keys: set[object], span: ir.Span) -> ir.InList:
    """``key IN (keys)``, restricted to the key column's declared values (others have no cells)."""
    declared = [value for value in base_values(lookup.key) if value in keys]
    return ir.InList(column=ir.Column(name=lookup.key.name, qualifier=None, span=span),
                     values=tuple(ir.Literal(value=v, span=span) for v in declared),  # type: ignore[arg-type]
                     negated=False, span=span)


def _and(left: ir.Predicate | None, right: ir.Predicate) -> ir.Predicate:
    if left is None:
        return right
    operands = left.operands if isinstance(left, ir.And) else (left,)
    return ir.And(operands=(*operands, right), span=left.span)
