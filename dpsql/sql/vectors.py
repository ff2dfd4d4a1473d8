"""The data vectors a batch measures: cell counts, non-NULL counts of a column, clamped sums of a column
and of its square.

Every block of a compiled statement group answers from one of these vectors (``Block.data``); the
engine measures each vector a group needs once. A :class:`DataVector` is a named pair, so it sorts
and hashes like ``(kind, column)``.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

VectorKind = Literal["count", "nonnull", "sum", "sumsq", "units"]


class DataVector(NamedTuple):
    """One measured vector over a group's cells: ``count`` (rows per cell, no column), ``nonnull``
    (rows per cell whose ``column`` is not NULL), ``sum`` (per cell, Σ of ``column`` clamped to its
    declared bounds [lo, hi], in integer quanta) or ``sumsq`` (per cell, Σ of the clamped value's
    square, in its own quanta: a sum of the derived value x² whose public row bound is max(lo², hi²)) or
    ``units`` (per cell, the number of distinct privacy units, ``column`` the unit column, among the
    kept rows: :mod:`dpsql.sql.units`)."""

    kind: VectorKind
    column: str | None = None

    @property
    def is_sum(self) -> bool:
        """Whether the vector sums a clamped value (``sum``, or its square: ``sumsq``): its row bound
        comes from the column's measure bounds, not 1."""
        return self.kind in ("sum", "sumsq")

    @property
    def squared(self) -> bool:
        """Whether the vector sums the clamped value's square (``sumsq``)."""
        return self.kind == "sumsq"

    @property
    def summed(self) -> str:
        """The column a ``sum`` or ``sumsq`` vector adds up (ValueError for the other kinds)."""
        if not self.is_sum or self.column is None:
            raise ValueError(f"{self.label} is not a sum of a column")
        return self.column

    @property
    def label(self) -> str:
        """'count', 'sum(income)', 'sumsq(income)', 'nonnull(age)', 'units(person)'."""
        return self.kind if self.column is None else f"{self.kind}({self.column})"


#: The vector of row counts per cell (COUNT(*), and every value-cell aggregate).
COUNTS = DataVector("count")

#: VARIANCE, VAR_SAMP, VAR_POP, STDDEV, STDDEV_SAMP and STDDEV_POP: estimated from n, S₁ and S₂.
SPREADS = frozenset({"var_samp", "var_pop", "stddev_samp", "stddev_pop"})


def aggregate_vectors(function: str, column: str | None) -> list[DataVector]:
    """The vectors an aggregate of ``column`` reads, in block order: COUNT(*) the counts, COUNT(col) the
    non-NULL counts, SUM the sums, AVG (sum, non-NULL count), and a variance or standard deviation
    (sum S₁, non-NULL count n, sum of squares S₂)."""
    if column is None:
        return [COUNTS]
    found = {"count": [DataVector("nonnull", column)], "sum": [DataVector("sum", column)],
             "avg": [DataVector("sum", column), DataVector("nonnull", column)]}
    return found.get(function, [DataVector("sum", column), DataVector("nonnull", column), DataVector("sumsq", column)])
