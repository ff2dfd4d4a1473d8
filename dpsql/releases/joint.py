"""The common refinement of several measurements' cells, and each measurement lifted onto it.

Every participant (a kept measurement, or a statement group asking) has cells per axis that are
unions of the column's base cells. Over the union U of their axes, the *joint cells* are, per axis,
the classes of base cells that no participant tells apart (the meet of the partitions), and their
product over U. Each joint cell lies inside exactly one cell of each participant (an axis the
participant lacks is summed over), so a participant's matrix D over its own cells is D·Lᵀ over the
joint cells, where L is the 0/1 map joint cell → participant cell: in index form, D[:, index].
A base cell some participant maps to -1 (rows no scan reads: ``out_of_domain = "exclude"``) is
left out; it holds no rows in any data vector.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
Axes = Sequence[tuple[str, IntArray]]


@dataclass(frozen=True, slots=True, kw_only=True)
class JointDomain:
    """Joint cells over ``keys``: per axis, base cell → joint class (-1: left out)."""

    keys: tuple[str, ...]
    classes: tuple[IntArray, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(int(c.max()) + 1 if c.size and c.max() >= 0 else 0 for c in self.classes)

    @property
    def cells(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def index(self, axes: Axes) -> IntArray:
        """For each joint cell (row-major over ``keys``), the flat index of the participant's cell holding it."""
        if not self.keys:  # no axes at all: one joint cell, the total
            return np.zeros(1, dtype=np.int64)
        sizes = [int(cells.max()) + 1 for _, cells in axes]
        grid = np.indices(self.shape, dtype=np.int64).reshape(len(self.keys), -1)
        per_axis = []
        for key, cells in axes:
            position = self.keys.index(key)
            classes = self.classes[position]
            of_class = np.empty(self.shape[position], dtype=np.int64)
            of_class[classes[classes >= 0]] = cells[classes >= 0]
            per_axis.append(of_class[grid[position]])
        if not per_axis:
            return np.zeros(self.cells, dtype=np.int64)
        return np.asarray(np.ravel_multi_index(tuple(per_axis), tuple(sizes)), dtype=np.int64)


def joint_domain(participants: Sequence[Axes]) -> JointDomain:
    """The meet of the participants' partitions over the union of their axes (keys sorted)."""
    maps: dict[str, list[IntArray]] = {}
    for axes in participants:
        for key, cells in axes:
            maps.setdefault(key, []).append(np.asarray(cells, dtype=np.int64))
    keys = tuple(sorted(maps))
    classes = []
    for key in keys:
        stacked = np.stack(maps[key], axis=1)
        dropped = np.any(stacked < 0, axis=1)
        ids = np.full(stacked.shape[0], -1, dtype=np.int64)
        if not np.all(dropped):
            ids[~dropped] = np.unique(stacked[~dropped], axis=0, return_inverse=True)[1].ravel()
        classes.append(ids)
    return JointDomain(keys=keys, classes=tuple(classes))


def joint_cells(participants: Sequence[Axes]) -> int:
    """How many joint cells the participants would have."""
    return joint_domain(participants).cells
