"""The cell query's result read back exactly: GROUP BY rows into sorted flat cell indices and aligned
read-only count and sum arrays (:class:`~dpsql.backends.base.CellData`), a GROUPING SETS result into
dense marginal tables. Exact integers throughout: int64 where every value fits, else Python integers
(a wide sum arrives as DuckDB's HUGEINT, Spark's DECIMAL(38, 0) or PostgreSQL's NUMERIC text)."""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

import numpy as np
import pyarrow as pa

from dpsql.backends.base import CellData, IntArray, Squared
from dpsql.errors import InternalError
from dpsql.schema import Column


def decode_cell_data(result: pa.Table, shape: tuple[int, ...], measures: Sequence[Column | Squared],
                     count_names: Sequence[str], *, units: bool = False) -> CellData:
    """Turn the GROUP BY result into sorted flat indices and aligned read-only arrays (``dpsql_sum_i``
    holds the i-th of ``measures``: a column's sums, or a :class:`Squared` column's sums of squares)."""
    counts = _int_column(result, "dpsql_rows")
    keep = counts > 0  # only a query without GROUP BY over zero rows yields an empty cell
    cells = tuple(_int_column(result, f"dpsql_cell_{i}")[keep] for i in range(len(shape)))
    try:
        index = np.ravel_multi_index(cells, shape) if shape else np.zeros(int(keep.sum()), dtype=np.int64)
    except ValueError:
        raise InternalError("The cell query returned a cell index outside the declared domain.") from None
    order = np.argsort(index)

    def aligned(array: IntArray, *, kept: bool = False) -> IntArray:
        out = np.ascontiguousarray((array if kept else array[keep])[order])  # int64, or Python integers (wide sums)
        out.setflags(write=False)
        return out

    return CellData(
        shape=shape,
        index=aligned(np.asarray(index, dtype=np.int64), kept=True),
        counts=aligned(counts),
        sums=MappingProxyType({m.name: aligned(_int_column(result, f"dpsql_sum_{i}"))
                               for i, m in enumerate(measures) if not isinstance(m, Squared)}),
        nonnull=MappingProxyType({name: aligned(_int_column(result, f"dpsql_nonnull_{i}"))
                                  for i, name in enumerate(count_names)}),
        squares=MappingProxyType({m.name: aligned(_int_column(result, f"dpsql_sum_{i}"))
                                  for i, m in enumerate(measures) if isinstance(m, Squared)}),
        units=aligned(_int_column(result, "dpsql_units")) if units else None,
    )


def decode_marginal_tables(result: pa.Table, shapes: Sequence[int], marginals: Sequence[tuple[int, ...]]
                     ) -> dict[tuple[int, ...], IntArray]:
    """Split a GROUPING SETS result by each row's non-NULL cell columns into dense marginal tables."""
    counts = _int_column(result, "dpsql_rows")
    present = np.stack([~np.asarray(result.column(f"dpsql_cell_{i}").is_null()) for i in range(len(shapes))], axis=1) \
        if shapes else np.zeros((len(counts), 0), dtype=bool)
    tables = {}
    for marginal in marginals:
        pattern = np.zeros(len(shapes), dtype=bool)
        pattern[list(marginal)] = True
        mine = np.all(present == pattern, axis=1)
        table = np.zeros(tuple(shapes[i] for i in marginal), dtype=np.int64)
        index = tuple(np.asarray(result.column(f"dpsql_cell_{i}").filter(pa.array(mine)).to_numpy(), dtype=np.int64)
                      for i in marginal)
        if not marginal:
            table.fill(counts[mine].sum())
        else:
            try:
                np.add.at(table, index, counts[mine])
            except IndexError:
                raise InternalError("The marginal query returned a cell index outside the declared domain.") from None
        table.setflags(write=False)
        tables[marginal] = table
    return tables


def _int_column(result: pa.Table, name: str) -> IntArray:
    """An integer result column exactly: int64 when every value fits, else Python integers. Exact sums
    arrive as int64, as decimal128(38, 0) (DuckDB's HUGEINT, Spark's DECIMAL) or as decimal text
    (PostgreSQL's NUMERIC through ADBC, an extension type stored as strings)."""
    column = result.column(name)
    if column.null_count:
        raise InternalError(f"The cell query returned NULL in '{name}'.")
    if isinstance(column.type, pa.BaseExtensionType):
        column = pa.chunked_array([chunk.storage for chunk in column.chunks], type=column.type.storage_type)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        return _fitted([int(v) for v in column.to_pylist()])
    if not pa.types.is_decimal(column.type):
        return np.asarray(column.to_numpy(), dtype=np.int64)
    try:  # Arrow's safe cast is exact and refuses any value outside int64
        return np.asarray(column.cast(pa.int64()).to_numpy(), dtype=np.int64)
    except pa.ArrowInvalid:
        return _fitted([int(v) for v in column.to_pylist()])


def _fitted(values: Sequence[int]) -> IntArray:
    """int64 when every value fits, else an object array of Python integers."""
    if all(-(2**63) <= v < 2**63 for v in values):
        return np.array(values, dtype=np.int64).reshape(len(values))
    return np.array(values, dtype=object).reshape(len(values))
