"""Value cells: a measure column read as cells of its own value (truncation-aware answering, TaMM).

Each of the column's base cells is worth one representative value r (the cell's midpoint, clamped
to the possibly truncated measure bounds [lo, hi]); SUM(col) is then a count workload weighted by
r/s on that axis, with s = max(|lo|, |hi|), and COUNT(col) a count workload on its non-NULL cells,
so COUNT, SUM and AVG share one data vector of sensitivity one per row (the cells themselves are
built by :mod:`dpsql.sql.compile`). The weights are rounded to WEIGHT_BITS binary places; a cell
holding more than one clamped value moves a row's value by at most :meth:`ValueCells.rounding`,
which :meth:`ValueCells.bias` reports as the per-row bias bound.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpsql import schema as sch
from dpsql.sql.axes import Axis

#: Value-cell weights r/s are rounded to this many binary places (a value moves by at most s·2^-(bits+1)).
WEIGHT_BITS = 24


@dataclass(frozen=True, slots=True, kw_only=True)
class ValueCells:
    """A measure column read as cells of its value (TaMM): the bounds its values are clamped to."""

    low: float
    high: float

    @property
    def scale(self) -> float:
        """The unit of the weighted SUM rows: the largest |value|, so every weight is in [-1, 1]."""
        return max(abs(self.low), abs(self.high)) or 1.0

    def representatives(self, domain: sch.Ordered) -> npt.NDArray[np.float64]:
        """Each base cell's value: its midpoint, clamped to [low, high] (integers: whole values)."""
        left, right = domain.value_bounds()
        return np.asarray(np.clip((left + right) / 2, self.low, self.high), dtype=np.float64)

    def weights(self, axis: Axis) -> npt.NDArray[np.float64]:
        """Each batch cell's weight r/s on a value-cell axis, in whole multiples of 2^-WEIGHT_BITS
        (so integer strategies can hold the weights exactly); its base cells share r; outside: 0."""
        weight = np.zeros(axis.size)
        weight[axis.cell_of_base[:-1]] = self._base_weights(axis.column.domain)  # type: ignore[arg-type]
        return weight

    def _base_weights(self, domain: sch.Ordered) -> npt.NDArray[np.float64]:
        return np.asarray(np.round(self.representatives(domain) / self.scale * 2**WEIGHT_BITS) / 2**WEIGHT_BITS)

    def rounding(self, domain: sch.Ordered) -> float:
        """The most a row's clamped value can differ from the value its cell's weight gives it."""
        left, right = domain.value_bounds()
        r = self._base_weights(domain) * self.scale
        low, high = np.clip(left, self.low, self.high), np.clip(right, self.low, self.high)
        return float(np.max(np.maximum(np.abs(r - low), np.abs(high - r))))

    def bias(self, domain: sch.Ordered) -> float:
        """The per-row bias bound h of SUM read from these cells: 0 where every cell holds one
        clamped value (whole values, or everything beyond a truncation threshold; only the
        weights' binary rounding, at most s·2^-WEIGHT_BITS, remains), else :meth:`rounding`.
        A SUM over n rows is then off by at most n·h, an AVG by at most h."""
        most = self.rounding(domain)
        return 0.0 if most <= self.scale * 2.0**-WEIGHT_BITS else most


def value_cells_problem(column: sch.Column, touched: bool) -> str | None:
    """Why ``column`` cannot be read as value cells (None if it can).

    Its domain must cover its measure bounds (so clamping happens inside the cells), and when
    statements also filter or group on it, out-of-range rows must already sit in the edge cells
    (``out_of_domain = "clamp"`` or ``"exclude"``): with the default they are UNKNOWN to predicates
    but count in SUM, which one cell per value cannot express.
    """
    domain = column.domain
    if not isinstance(domain, sch.Ordered) or column.measure_bounds is None:
        return f"{column.key} is not a numeric measure"
    low, high = column.measure_bounds
    top = domain.upper - (1 if domain.discrete and not domain.closed_top else 0)
    if low < domain.lower or high > top:
        return f"the measure bounds of {column.key} reach beyond its domain's cells"
    if touched and not (domain.clamp or column.outside_excluded):
        return (f"statements also filter or group on {column.name}, whose out-of-range values are outside its cells; "
                f'declare out_of_domain = "clamp" or "exclude" for {column.key} to allow it')
    return None
