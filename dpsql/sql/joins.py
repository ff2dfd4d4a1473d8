"""JOIN clauses after FROM, read into :class:`~dpsql.sql.ir.Join` (the syntax only).

dpsql answers one kind of join between private tables: a table with many rows per privacy unit
joined to its *unit table* (one row per unit) on the declared unit key, ``[INNER | LEFT [OUTER]] JOIN
t [[AS] a] USING (key)`` or ``ON x.key = y.key``. Whether the tables and the key are the declared
ones is decided against the schema in :mod:`dpsql.sql.relations`; here every other join is refused
with the reason it cannot be answered: each of them lets one person's rows be matched to an
unbounded number of rows (a cross product, a non-key or non-equality condition, a self-join), or
keeps rows that no privacy unit bounds (RIGHT and FULL joins keep unit-table rows without a fact row).
"""

from __future__ import annotations

from dataclasses import replace

from sqlglot import exp

from dpsql.sql import ir
from dpsql.sql.predicates import parse_column
from dpsql.sql.source import Scope, is_empty, node_span, unsupported

__all__ = ["is_join_clause", "parse_joins"]

JOIN_SUPPORTED = (
    "dpsql joins a table to its privacy unit's table on the declared key: FROM visits v [LEFT] JOIN people p "
    "USING (person_id) (or ON v.person_id = p.person_id), declared by tables.visits.privacy_unit.table = \"people\"."
)
_UNBOUNDED = ("one person's rows could be matched to any number of rows, so no contribution bound (and no "
              "sensitivity) holds. ")
_TABLE_PARTS = {"db": "a schema-qualified table name", "catalog": "a catalog-qualified table name"}


def is_join_clause(node: exp.Expr, select: exp.Select) -> bool:
    """Whether ``node`` is one of ``select``'s JOIN clauses (read by :func:`parse_joins`, not refused wholesale)."""
    return isinstance(node, exp.Join) and any(node is join for join in select.args.get("joins") or ())


def parse_joins(select: exp.Select, scope: Scope) -> Scope:
    """The scope with the statement's JOIN clauses (``scope.joined``); at most one, an INNER or LEFT
    equi-join of two columns (ON) or one USING column. Anything else raises UnsupportedQueryError."""
    clauses = list(select.args.get("joins") or ())
    if not clauses:
        return scope
    if len(clauses) > 1:
        raise unsupported("a second JOIN", clauses[1], scope,
                          "A private table joins its privacy unit's table only, once. " + JOIN_SUPPORTED)
    node = clauses[0]
    kind = _kind(node, scope)
    table, alias = _joined_table(node, scope)
    join = ir.Join(table=table.name, alias=alias, kind=kind, using=(), on=(), span=node_span(node, scope),
                   table_span=node_span(table, scope))
    scope = replace(scope, joined=(join,))
    return replace(scope, joined=(_condition(node, join, scope),))


def _kind(node: exp.Join, scope: Scope) -> ir.JoinKind:
    """INNER (JOIN, INNER JOIN) or LEFT (LEFT [OUTER] JOIN); every other kind is refused with its reason."""
    method, side, kind = (str(node.args.get(key) or "").upper() for key in ("method", "side", "kind"))
    if method:
        raise unsupported(f"{method} JOIN", node, scope, _reason(method) + JOIN_SUPPORTED)
    if kind in ("CROSS", "SEMI", "ANTI"):
        raise unsupported(f"{kind} JOIN", node, scope, _reason(kind) + JOIN_SUPPORTED)
    if side in ("RIGHT", "FULL"):
        raise unsupported(f"{side} JOIN", node, scope,
                          f"A {side} JOIN keeps unit-table rows without a row of the other table. Put the table with "
                          "many rows per unit first and use JOIN or LEFT JOIN. " + JOIN_SUPPORTED)
    if node.args.get("on") is None and not node.args.get("using"):
        first = scope.source.index(node_span(node, scope).start)
        name = "multiple tables in FROM" if scope.source.word(first - 1) == "," else "a JOIN without ON or USING"
        raise unsupported(name, node, scope, "That is a cross product: " + _UNBOUNDED + JOIN_SUPPORTED)
    return "left" if side == "LEFT" else "inner"


def _reason(word: str) -> str:
    """Why a join method or kind is refused."""
    if word in ("CROSS", "POSITIONAL"):
        return f"A {word} JOIN pairs rows regardless of their privacy unit: " + _UNBOUNDED
    if word == "NATURAL":
        return "A NATURAL JOIN matches on every column the tables share, not on the declared key alone. "
    return f"A {word} JOIN does not extend each row with its unit's row. "


def _joined_table(node: exp.Join, scope: Scope) -> tuple[exp.Table, str | None]:
    """The joined table (a plain name) and its alias."""
    table = node.this
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier):
        raise unsupported("a JOIN of something other than a declared table", table, scope, JOIN_SUPPORTED)
    for key, value in table.args.items():
        if key not in {"this", "alias"} and not is_empty(value):
            raise unsupported(_TABLE_PARTS.get(key, f"table {key.upper().strip('_')}"), table, scope, JOIN_SUPPORTED)
    alias = table.args.get("alias")
    if alias is not None and alias.columns:
        raise unsupported("column aliases on a table", alias, scope, JOIN_SUPPORTED)
    return table, (alias.name if alias is not None else None)


def _condition(node: exp.Join, join: ir.Join, scope: Scope) -> ir.Join:
    """USING (one column) or ON one equality of two columns; anything else is a join on non-key columns."""
    using = node.args.get("using") or []
    if using:
        if len(using) != 1 or not all(isinstance(name, exp.Identifier) for name in using):
            raise unsupported("USING with several columns", node, scope,
                              "With other columns than the key " + _UNBOUNDED + JOIN_SUPPORTED)
        return replace(join, using=(using[0].name,))
    condition = node.args["on"]
    while isinstance(condition, exp.Paren):
        condition = condition.this
    if not isinstance(condition, exp.EQ) or not all(isinstance(side, exp.Column) for side in condition.args.values()):
        raise unsupported("a JOIN condition other than key = key", condition, scope,
                          "With any other condition " + _UNBOUNDED + JOIN_SUPPORTED)
    columns = tuple(parse_column(side, scope, "in JOIN ... ON", JOIN_SUPPORTED)
                    for side in (condition.this, condition.expression))
    return replace(join, on=columns)
