"""The cell layout of a local strategy: how a client maps its own record to a cell index u.

A strategy designed for a SQL batch is over the batch's cells (``dpsql.sql.compile``): the product,
over the batch's axes in order, of each column's batch cells, the outside cell last on each axis.
A record (a mapping from column name to value, or a row of a CSV/Parquet file) maps to a cell as
the DuckDB backend bins a row (``dpsql.backends.duckdb``), with the declared domains only:

- categorical: the position of the value among the declared values (compared as text, booleans
  as ``true``/``false``, integral floats as integers); NULL or an undeclared value: outside;
- integer / numeric / date: the base cell [b_k, b_{k+1}) holding the number (dates as days since
  1970-01-01; timestamps count by their date); the last boundary is included for numeric domains
  and explicit integer edges; NULL, NaN or a value outside [lower, upper]: outside, or the first
  or last cell with ``out_of_domain = "clamp"``;

then base cell → batch cell through the axis's ``cell_of_base``, and u is the row-major index
over the axes. Every field is public (declared in the schema), so publishing it reveals nothing.
A value of the wrong type (text for a number column) or a missing column is an error.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from dpsql.errors import DataError, ShapeError
from dpsql.schema import EPOCH, Categorical, Column, Ordered

IntArray = npt.NDArray[np.int64]
Kind = Literal["categorical", "integer", "numeric", "date"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AxisLayout:
    """One column of the layout: its public domain and its base cell → batch cell map."""

    column: str
    kind: Kind
    values: tuple[str | int, ...] = ()          # categorical: the declared values
    boundaries: tuple[float, ...] = ()          # ordered: b_0 < … < b_K
    closed_top: bool = False                    # ordered: the last cell includes b_K
    clamp: bool = False                         # ordered: out-of-range values go to the first/last cell
    cell_of_base: tuple[int, ...] = ()          # base cell (outside = domain size) → batch cell

    @property
    def base_size(self) -> int:
        return len(self.values) if self.kind == "categorical" else len(self.boundaries) - 1

    @property
    def size(self) -> int:
        """Batch cells on this axis (outside cell included)."""
        return max(self.cell_of_base) + 1

    @classmethod
    def of(cls, column: Column, cell_of_base: npt.ArrayLike) -> AxisLayout:
        """The layout of a declared column whose base cells map to batch cells by ``cell_of_base``."""
        mapping = tuple(int(c) for c in np.asarray(cell_of_base).tolist())
        domain = column.domain
        if isinstance(domain, Categorical):
            return cls(column=column.name, kind="categorical", values=tuple(domain.values), cell_of_base=mapping)
        assert isinstance(domain, Ordered)
        return cls(column=column.name, kind=domain.kind, boundaries=tuple(float(b) for b in domain.boundaries),
                   closed_top=domain.closed_top, clamp=domain.clamp, cell_of_base=mapping)

    def base_cells(self, values: Sequence[object]) -> IntArray:
        """The base cell of every value (``base_size`` for the outside cell).

        Raises:
            DataError: a value has the wrong type for the column (the message gives its position).
        """
        if self.kind == "categorical":
            index = {_category_key(v): i for i, v in enumerate(self.values)}
            return np.array([index.get(_category_key(v), self.base_size) if _present(v) else self.base_size
                             for v in values], dtype=np.int64)
        numbers = np.array([self._number(v, row) for row, v in enumerate(values)], dtype=np.float64)
        return self._ordered_cells(numbers)

    def _number(self, value: object, row: int) -> float:
        if not _present(value):
            return math.nan
        if self.kind == "date":
            if isinstance(value, dt.datetime):
                value = value.date()
            if isinstance(value, str):
                try:
                    value = dt.date.fromisoformat(value)
                except ValueError:
                    pass
            if isinstance(value, dt.date):
                return float((value - EPOCH).days)
        elif (isinstance(value, (int, float, Decimal, np.integer, np.floating))
              and not isinstance(value, (bool, np.bool_))):
            return float(value)
        raise DataError(f"column '{self.column}' holds {self.kind} values, but value #{row} has type "
                        f"{type(value).__name__}. Convert the column before randomizing.")

    def _ordered_cells(self, numbers: npt.NDArray[np.float64]) -> IntArray:
        size, bounds = self.base_size, np.asarray(self.boundaries)
        base = np.minimum(np.searchsorted(bounds, numbers, side="right") - 1, size - 1).astype(np.int64)
        below = numbers < bounds[0]
        above = numbers > bounds[-1] if self.closed_top else numbers >= bounds[-1]
        base[below] = 0 if self.clamp else size
        base[above] = size - 1 if self.clamp else size
        base[np.isnan(numbers)] = size
        return base


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """The batch cells of one table: the axes in order; cell u is row-major over them."""

    table: str
    axes: tuple[AxisLayout, ...]

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(axis.size for axis in self.axes)

    @property
    def cells(self) -> int:
        return math.prod(self.sizes)

    def cell_of(self, record: Mapping[str, object]) -> int:
        """The cell index of one record (a mapping from column name to value, names case-insensitive)."""
        return int(self.cells_of({key: [value] for key, value in record.items()})[0])

    def cells_of(self, columns: Mapping[str, Sequence[object]]) -> IntArray:
        """Cell indices of many records given column-wise (column name → values, one per record).

        Raises:
            DataError: a layout column is missing, columns differ in length, or a value has the wrong type.
        """
        named = {str(key).lower(): values for key, values in columns.items()}
        lengths = {len(values) for values in named.values()}
        if len(lengths) > 1:
            raise DataError("every column must hold one value per record; the columns differ in length.")
        records = lengths.pop() if lengths else 1
        missing = [axis.column for axis in self.axes if axis.column not in named]
        if missing:
            raise DataError(f"the records lack column(s) {', '.join(missing)} of table '{self.table}'; the strategy's "
                            f"cells are over {', '.join(a.column for a in self.axes)}.")
        if not self.axes:
            return np.zeros(records, dtype=np.int64)
        batch = [np.asarray(axis.cell_of_base, dtype=np.int64)[axis.base_cells(named[axis.column])]
                 for axis in self.axes]
        return np.ravel_multi_index(tuple(batch), self.sizes).astype(np.int64)

    def to_json(self) -> dict[str, Any]:
        return {"table": self.table, "axes": [{field: getattr(axis, field) for field in AxisLayout.__slots__}
                                              for axis in self.axes]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Layout:
        """The inverse of ``to_json``.

        Raises:
            ShapeError: the mapping is not a layout.
        """
        try:
            axes = tuple(_axis_from_json(axis) for axis in data["axes"])
            return cls(table=str(data["table"]), axes=axes)
        except (KeyError, TypeError, ValueError) as err:
            raise ShapeError(f"not a cell layout: {err}.") from err


def _axis_from_json(data: Mapping[str, Any]) -> AxisLayout:
    kind = data["kind"]
    if kind not in ("categorical", "integer", "numeric", "date"):
        raise ValueError(f"unknown column kind {kind!r}")
    return AxisLayout(column=str(data["column"]), kind=kind, values=tuple(data["values"]),
                      boundaries=tuple(float(b) for b in data["boundaries"]), closed_top=bool(data["closed_top"]),
                      clamp=bool(data["clamp"]), cell_of_base=tuple(int(c) for c in data["cell_of_base"]))


def _present(value: object) -> bool:
    return value is not None and not (isinstance(value, float) and math.isnan(value))


def _category_key(value: object) -> str:
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (float, np.floating)) and float(value).is_integer():
        return str(int(value))
    return str(value)
