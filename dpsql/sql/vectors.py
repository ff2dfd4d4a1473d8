"""The data vectors a batch measures: cell counts, non-NULL counts of a column, clamped sums of a column.

Every block of a compiled statement group answers from one of these vectors (``Block.data``); the
engine measures each vector a group needs once. A :class:`DataVector` is a named pair, so it sorts
and hashes like ``(kind, column)``.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

VectorKind = Literal["count", "nonnull", "sum"]


class DataVector(NamedTuple):
    """One measured vector over a group's cells: ``count`` (rows per cell, no column), ``nonnull``
    (rows per cell whose ``column`` is not NULL) or ``sum`` (per cell, Σ of ``column`` clamped to its
    declared bounds, in integer quanta)."""

    kind: VectorKind
    column: str | None = None

    @property
    def is_sum(self) -> bool:
        return self.kind == "sum"

    @property
    def summed(self) -> str:
        """The column a ``sum`` vector adds up (ValueError for the other kinds)."""
        if self.kind != "sum" or self.column is None:
            raise ValueError(f"{self.label} is not a sum of a column")
        return self.column

    @property
    def label(self) -> str:
        """'count', 'sum(income)', 'nonnull(age)'."""
        return self.kind if self.column is None else f"{self.kind}({self.column})"


#: The vector of row counts per cell (COUNT(*), and every value-cell aggregate).
COUNTS = DataVector("count")
