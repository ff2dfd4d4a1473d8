"""COUNT(DISTINCT <privacy unit column>): the number of privacy units.

With ``privacy_unit = { column = "u", max_rows = 1 }`` the scan drops rows whose unit is NULL and
keeps one row per unit, so the rows every aggregate reads hold each unit at most once and
COUNT(DISTINCT u) is exactly COUNT(*) of those rows, under the same WHERE and GROUP BY: an exact
rewrite to the cell counts (same queries, same data vector, same sensitivity k = 1 and cost).

With max_rows = k > 1 a unit's k kept rows may fall in one group, where it counts once, or in k
groups, so the count of units is not a sum of cell counts. It is read from its own data vector,
``units``: per declared cell (one base cell of each column the statement's group reads), the number
of distinct units among the kept rows there, computed by the database from the schema
(``COUNT(DISTINCT unit)`` per cell, :func:`dpsql.backends.cell_sql.build_query`). Sensitivity:
adding or removing a unit changes that vector by 1 in each cell where the unit has a kept row, at
most k cells, and nowhere else: ‖Δx‖₁ ≤ k with Δx ∈ {0, 1}^cells, so the count vector's calibration
with contribution k (k·max_j‖a_j‖ for the strategy's columns a_j, L1 or L2) bounds it, and the
measurement is ε-DP (ρ-zCDP) at that calibration like a count vector's. A statement's answer is exact
only where each of its groups reads one such cell (a unit with rows in two cells of one group would
be counted twice): GROUP BY and WHERE must each select single declared cells (categorical values,
integer or numeric values one resolution step wide), and the statement is never merged into a
group with other columns (:func:`reads_units`). Anything else is refused, naming the rewrite.

Any other column's distinct values are not bounded by one unit's rows and are refused.
"""

from __future__ import annotations

import numpy as np
from sqlglot import exp

from dpsql import schema as sch
from dpsql.errors import UnsupportedQueryError
from dpsql.matrix.workloads import Workload
from dpsql.sql import ir
from dpsql.sql.axes import Axis
from dpsql.sql.predicates import parse_column
from dpsql.sql.source import Scope, unsupported
from dpsql.sql.vectors import COUNTS, DataVector

__all__ = ["check_single_cells", "check_units", "is_count_distinct", "parse_count_distinct", "reads_units"]

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


def check_units(aggregate: ir.Aggregate, table: sch.Table) -> DataVector:
    """The vector COUNT(DISTINCT col) reads: the cell counts when each unit keeps one row, else the
    distinct units per cell; refused unless col is the privacy unit."""
    assert aggregate.column is not None
    unit = table.privacy_unit
    name = aggregate.column.name
    if unit.column is None or unit.column.lower() != name.lower():
        declared = f"its privacy unit is '{unit.column}'" if unit.column else "it declares no privacy unit"
        raise UnsupportedQueryError(
            f"COUNT(DISTINCT {name}) ({aggregate.span.describe()}) is not supported: only the privacy unit column's "
            f"distinct values are bounded by one unit, and {declared} in table {table.name}. "
            "Use COUNT(*) or COUNT(col) for rows.")
    return COUNTS if unit.max_rows == 1 else DataVector("units", unit.column)


def check_single_cells(aggregate: ir.Aggregate, workload: Workload, axes: tuple[Axis, ...], table: sch.Table) -> None:
    """Refuse a distinct-units block unless each of its rows reads at most one declared cell: entries
    are 0/1 over disjoint boxes, so W·m ≤ 1 with m_j ≥ 1 the number of declared (base) cell tuples in
    batch cell j means every row reads at most one batch cell, itself one declared cell."""
    per_axis = [np.bincount(axis.cell_of_base[axis.cell_of_base >= 0], minlength=axis.size) for axis in axes]
    m = np.ones(1)
    for counts in per_axis:
        m = np.asarray(np.kron(m, counts), dtype=np.float64)
    if np.all(workload @ m <= 1 + 1e-9):
        return
    raise UnsupportedQueryError(
        f"COUNT(DISTINCT {aggregate.column.name if aggregate.column else ''}) ({aggregate.span.describe()}) "
        f"is supported on {table.name}, whose privacy unit keeps up to {table.privacy_unit.max_rows} rows, when each "
        "group reads one declared cell: a unit with rows in two cells of a group would be counted twice. Group by "
        "categorical columns or single values (bins one resolution step wide), and filter with = on them, or "
        "count the units in the table with one row per unit.")


def reads_units(statement: ir.Statement, table: sch.Table) -> bool:
    """Whether the statement counts distinct units from the ``units`` vector (never merged with other columns)."""
    return table.privacy_unit.max_rows > 1 and any(a.distinct for a in statement.aggregates)
