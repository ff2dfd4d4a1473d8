"""COUNT(DISTINCT <privacy unit column>): the number of privacy units, on tables that keep one row per unit.

With ``privacy_unit = { column = "u", max_rows = 1 }`` the scan drops rows whose unit is NULL and
keeps one row per unit, so the rows every aggregate reads hold each unit at most once and
COUNT(DISTINCT u) is exactly COUNT(*) of those rows, under the same WHERE and GROUP BY: an exact
rewrite to the cell counts (same queries, same data vector, same sensitivity k = 1 and cost).

With max_rows = k > 1 a unit's k rows may fall in one group, where it counts once, or in k
groups; the count of units is then not a sum of cell counts (the unit's rows would have to be
deduplicated per group before measuring, a data vector per statement of sensitivity k) and is
refused. Any other column's distinct values are not bounded by one unit's rows and are refused.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql import schema as sch
from dpsql.errors import UnsupportedQueryError
from dpsql.sql import ir
from dpsql.sql.predicates import parse_column
from dpsql.sql.source import Scope, unsupported

__all__ = ["check_units", "is_count_distinct", "parse_count_distinct"]

_SUPPORTED = "COUNT(DISTINCT col) is supported for the table's privacy unit column: the number of units."


def is_count_distinct(node: exp.Expr) -> bool:
    """Whether ``node`` is the DISTINCT of a COUNT(DISTINCT ...) (allowed there only)."""
    return isinstance(node, exp.Distinct) and isinstance(node.parent, exp.Count)


def parse_count_distinct(node: exp.Expr, alias: str | None, span: ir.Span, scope: Scope) -> ir.Aggregate | None:
    """COUNT(DISTINCT column) as a distinct COUNT aggregate (None for anything else)."""
    if not (isinstance(node, exp.Count) and isinstance(node.this, exp.Distinct)):
        return None
    columns = node.this.expressions
    if len(columns) != 1:
        raise unsupported(f"COUNT(DISTINCT) of {len(columns)} expressions", node, scope, _SUPPORTED)
    column = parse_column(columns[0], scope, "in COUNT(DISTINCT)", _SUPPORTED)
    return ir.Aggregate(function="count", column=column, alias=alias or f"count_distinct_{column.name}", span=span,
                        distinct=True)


def check_units(aggregate: ir.Aggregate, table: sch.Table) -> None:
    """Refuse COUNT(DISTINCT col) unless col is the privacy unit and each unit keeps one row."""
    assert aggregate.column is not None
    unit = table.privacy_unit
    name = aggregate.column.name
    if unit.column is None or unit.column.lower() != name.lower():
        declared = f"its privacy unit is '{unit.column}'" if unit.column else "it declares no privacy unit"
        raise UnsupportedQueryError(
            f"COUNT(DISTINCT {name}) ({aggregate.span.describe()}) is not supported: only the privacy unit column's "
            f"distinct values are bounded by one unit, and {declared} in table {table.name}. "
            "Use COUNT(*) or COUNT(col) for rows.")
    if unit.max_rows != 1:
        raise UnsupportedQueryError(
            f"COUNT(DISTINCT {name}) ({aggregate.span.describe()}) is supported when each unit keeps one row "
            f"(max_rows = 1); {table.name} keeps up to {unit.max_rows}, and a unit's rows may fall in one group or "
            "several. Count the units in the table that has one row per unit.")
