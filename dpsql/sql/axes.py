"""An axis of a batch's cells: one grouped or filtered column, and how its base cells map onto batch cells.

Built by :mod:`dpsql.sql.compile`; read by :mod:`dpsql.sql.value_cells` (a measure column's weights on
its axis) and by the engine (which measurements a kept release can serve).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpsql import schema as sch


@dataclass(frozen=True, slots=True, kw_only=True)
class Axis:
    """One grouped or filtered column: its batch cells and how base cells map onto them."""

    column: sch.Column
    cell_of_base: npt.NDArray[np.int64]  # base cell (outside = domain.size) → batch cell (outside last, or -1: none)

    @property
    def size(self) -> int:
        return int(self.cell_of_base.max()) + 1

    @property
    def has_outside(self) -> bool:
        """Whether the last batch cell is the outside cell. A column declared ``out_of_domain =
        "exclude"`` has none (its outside rows are filtered out of every scan, so the cell would
        always be empty and only cost noise), unless it would be the axis's second cell."""
        return bool(self.cell_of_base[-1] >= 0)
