"""Batch-cell totals: sparse base-cell values summed into a statement group's batch cells, exactly
(moved from :mod:`dpsql.sql.compile`, which re-exports it)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

#: Integer sums below this bound are exact in int64 (with a margin for the final additions).
_INT64_SUMS = 2**62


def batch_cell_totals(cell_maps: Sequence[npt.ArrayLike], base_index: npt.NDArray[np.int64],
                      base_shape: tuple[int, ...],
                      values: npt.ArrayLike) -> npt.NDArray[np.int64] | npt.NDArray[np.object_]:
    """Sparse base-cell values (flat ``base_index`` over ``base_shape``) summed into batch cells,
    each axis mapping its base cells by ``cell_of_base``; no axes: one total.

    Exact for integers of any size: int64 addition when Σ|values| < 2^62 (no partial sum can
    overflow), else Python integers (an object array, int64 again if every total fits)."""
    array = np.asarray(values)
    if array.dtype != object and array.size and int(np.abs(array).max()) < _INT64_SUMS // array.size:
        array = array.astype(np.int64)
        wide = False
    else:
        array = np.array([int(v) for v in array.tolist()], dtype=object).reshape(array.shape)
        wide = True
    if not cell_maps:
        total = sum(array.tolist(), 0)
        return np.array([total], dtype=object if abs(total) >= 2**63 else np.int64)
    maps = [np.asarray(m) for m in cell_maps]
    sizes = [int(m.max()) + 1 for m in maps]
    cells = tuple(m[b] for m, b in zip(maps, np.unravel_index(base_index, base_shape)))
    flat = np.ravel_multi_index(cells, sizes)
    totals = np.zeros(int(np.prod(sizes)), dtype=object if wide else np.int64)
    np.add.at(totals, flat, array)
    if wide and all(abs(v) < 2**63 for v in totals.tolist()):
        return totals.astype(np.int64)
    return totals
