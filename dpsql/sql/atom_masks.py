"""Where one atom of a WHERE clause is TRUE, over a column's declared base cells.

An atom is a comparison, BETWEEN, IN list, IS NULL or LIKE on one column. On a categorical column it
is the declared values it names (ordering comparisons are refused); on an ordered one the cells
wholly inside the values it accepts, and a cell it splits is refused (answers are exact only on
whole declared cells). IS NULL and LIKE are :mod:`dpsql.sql.filters`'. O(base cells) per atom; an
``=`` or IN value finds its cells by bisection.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpsql import schema as sch
from dpsql.errors import SchemaError, UnsupportedQueryError
from dpsql.sql import filters, ir, timestamps
from dpsql.sql.filters import Atom

BoolArray = npt.NDArray[np.bool_]


def base_mask(column: sch.Column, atom: Atom) -> BoolArray:
    """The base cells (outside excluded) where ``atom`` is TRUE."""
    if isinstance(atom, (ir.IsNull, ir.Like)):
        return filters.base_mask(column, atom)
    domain = column.domain
    if isinstance(domain, sch.Categorical):
        return _categorical_mask(column, domain, atom)
    if isinstance(atom, ir.Comparison):
        if atom.operator == "<>":
            return ~_ordered_interval(column, domain, "=", atom.value)
        return _ordered_interval(column, domain, atom.operator, atom.value)
    if isinstance(atom, ir.Between):
        inside = _ordered_interval(column, domain, ">=", atom.low) & _ordered_interval(column, domain, "<=", atom.high)
        return ~inside if atom.negated else inside
    cells = _CellValues.of(domain)
    member = np.zeros(domain.size, dtype=bool)
    for value in atom.values:  # each value's cells found by bisection: O(log n) per value, not O(n)
        window, inside = cells.classify(column, domain, "=", value)
        member[window] |= inside
    return ~member if atom.negated else member


def _categorical_mask(column: sch.Column, domain: sch.Categorical,
                      atom: ir.Comparison | ir.Between | ir.InList) -> BoolArray:
    if isinstance(atom, ir.Between) or (isinstance(atom, ir.Comparison) and atom.operator not in ("=", "<>")):
        raise UnsupportedQueryError(
            f"ordering comparison on the categorical column '{column.name}' is not supported ({atom.span.describe()}). "
            "Use =, <>, IN or NOT IN with its declared values."
        )
    literals = atom.values if isinstance(atom, ir.InList) else (atom.value,)
    member = np.zeros(domain.size, dtype=bool)
    for literal in literals:
        if literal.value not in domain.values:
            raise SchemaError(
                f"{literal.value!r} is not a declared value of {column.key} ({literal.span.describe()}); "
                f"declared values: {', '.join(map(str, domain.values))}. Compare with one of them, or declare the "
                "value in the schema (the values are public, so adding one costs nothing)."
            )
        member[domain.values.index(literal.value)] = True
    negated = atom.negated if isinstance(atom, ir.InList) else atom.operator == "<>"
    return ~member if negated else member


def _ordered_interval(column: sch.Column, domain: sch.Ordered, operator: str, literal: ir.Literal) -> BoolArray:
    """Base cells where ``column <operator> literal`` is TRUE; refuses a cell the predicate splits
    (:meth:`_CellValues.classify`)."""
    window, inside = _CellValues.of(domain).classify(column, domain, operator, literal)
    mask = np.zeros(domain.size, dtype=bool)
    mask[window] = inside
    return mask


@dataclass(frozen=True, slots=True)
class _CellValues:
    """An ordered domain's base cells as arrays, built once per atom (an IN list reads them for
    every value): boundaries, each cell's lowest and highest value, and whether the highest is in it."""

    edges: npt.NDArray[np.float64]
    left: npt.NDArray[np.float64]
    right: npt.NDArray[np.float64]
    closed_right: BoolArray

    @staticmethod
    def of(domain: sch.Ordered) -> _CellValues:
        left, right = domain.value_bounds()  # whole values: cell k holds left..right; numbers: [left, right)
        closed_right = np.full(domain.size, domain.discrete)
        closed_right[-1] = closed_right[-1] or domain.closed_top
        return _CellValues(np.asarray(domain.boundaries, dtype=np.float64), left, right, closed_right)

    def classify(self, column: sch.Column, domain: sch.Ordered, operator: str,
                 literal: ir.Literal) -> tuple[slice, BoolArray]:
        """(window, inside): the cells where ``column <operator> literal`` is TRUE are those of
        ``window`` marked ``inside``; refuses a cell the predicate splits.

        Each base cell is a value range [b_k, b_{k+1}) (the last one closed when ``closed_top``;
        integers and dates count whole values). A cell wholly inside the TRUE set is in the mask, one
        wholly outside is not, and a cell partly in both cannot be answered from cell counts. For
        ``=`` the window is the cells whose values reach the literal (found by bisection: every other
        cell lies wholly before or after it); otherwise every cell.
        """
        literal = timestamps.date_literal(domain, literal, column.name)
        try:
            number = domain.to_number(literal.value)
        except (ValueError, TypeError) as err:
            raise SchemaError(f"{literal.value!r} is not a valid {domain.kind} for {column.key} "
                              f"({literal.span.describe()}).") from err
        index = domain.boundary_index(number, self.edges)  # a literal within rounding of a boundary is that boundary
        number = float(self.edges[index]) if index is not None else number
        low, low_closed, high, high_closed = _true_interval(operator, number)
        window = slice(int(np.searchsorted(self.right, number, side="left")),
                       int(np.searchsorted(self.left, number, side="right"))) if operator == "=" else slice(None)
        left, right, closed_right = self.left[window], self.right[window], self.closed_right[window]
        starts_in = (left > low) | ((left == low) & low_closed)
        ends_in = np.where(closed_right, (right < high) | ((right == high) & high_closed), right <= high)
        inside = starts_in & ends_in
        after = (left > high) | ((left == high) & ~np.bool_(high_closed))
        before = np.where(closed_right, (right < low) | ((right == low) & ~np.bool_(low_closed)), right <= low)
        split = ~(inside | after | before)
        if split.any():
            k = int(np.flatnonzero(split)[0]) + (window.start or 0)
            lo_value, hi_value = domain.to_value(domain.boundaries[k]), domain.to_value(domain.boundaries[k + 1])
            close = "]" if k == domain.size - 1 and domain.closed_top else ")"
            hint = ("numeric cells are half-open [low, high), so write < or >= at a cell boundary"
                    if not domain.discrete else f"use {lo_value} or {hi_value}, or declare a finer resolution for "
                    f"{column.key}")
            raise UnsupportedQueryError(
                f"the range endpoint {literal.value} on '{column.name}' ({literal.span.describe()}) splits the cell "
                f"[{lo_value}, {hi_value}{close}; {hint}. Answers are exact only on whole declared cells."
            )
        return window, inside


def _true_interval(operator: str, c: float) -> tuple[float, bool, float, bool]:
    """(low, low_closed, high, high_closed) of the values where ``x <operator> c`` holds."""
    return {
        "<": (-np.inf, False, c, False),
        "<=": (-np.inf, False, c, True),
        ">": (c, False, np.inf, False),
        ">=": (c, True, np.inf, False),
        "=": (c, True, c, True),
    }[operator]
