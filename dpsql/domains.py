"""Attribute domains: the base cells a column's values fall into, and the bins GROUP BY reports.

A categorical domain has one base cell (and one bin) per declared value; an ordered domain (integer,
numeric or date) has half-open intervals between increasing boundaries (dates as day numbers since
``EPOCH``), grouped into bins. The schema (:mod:`dpsql.schema`) reads them from its declarations;
nothing here is read from the data.
"""

from __future__ import annotations

import datetime as dt
import itertools
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

EPOCH = dt.date(1970, 1, 1)
DateUnit = Literal["day", "month", "year"]
OrderedKind = Literal["integer", "numeric", "date"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Categorical:
    """A finite list of values; one base cell and one bin per value."""

    values: tuple[str | int, ...]

    @property
    def size(self) -> int:
        return len(self.values)

    def bin_of_base(self) -> npt.NDArray[np.int64]:
        return np.arange(self.size)

    def bin_labels(self) -> list[object]:
        return list(self.values)


@dataclass(frozen=True, slots=True, kw_only=True)
class Ordered:
    """Base cells [b_k, b_{k+1}) over numbers (dates as day numbers), grouped into bins.

    ``boundaries`` has K+1 entries for K base cells; ``bin_starts`` are the base indices where the
    GROUP BY bins begin. ``uniform_step`` is the grid step when the grid is uniform (None for
    explicit edges or month/year dates), which lets the backend bin with arithmetic.
    """

    kind: OrderedKind
    boundaries: tuple[float, ...]
    bin_starts: tuple[int, ...]
    uniform_step: float | None
    unit: DateUnit | None = None
    clamp: bool = False

    @property
    def size(self) -> int:
        return len(self.boundaries) - 1

    @property
    def lower(self) -> float:
        return self.boundaries[0]

    @property
    def upper(self) -> float:
        return self.boundaries[-1]

    def bin_of_base(self) -> npt.NDArray[np.int64]:
        """Bin index of every base cell."""
        return np.searchsorted(np.asarray(self.bin_starts), np.arange(self.size), side="right") - 1

    def bin_labels(self) -> list[object]:
        """Each bin as its (low, high) bounds in the column's type (high exclusive, last inclusive)."""
        edges = list(self.bin_starts) + [self.size]
        return [(self.to_value(self.boundaries[a]), self.to_value(self.boundaries[b]))
                for a, b in itertools.pairwise(edges)]

    def to_value(self, number: float) -> object:
        """A boundary back in the column's type."""
        if self.kind == "date":
            return EPOCH + dt.timedelta(days=int(number))
        if self.kind == "integer":
            return int(number)
        return float(number)

    def to_number(self, value: object) -> float:
        """A literal as a number on this domain's axis (dates as day numbers); ValueError if it is not one."""
        if self.kind == "date":
            day = value if isinstance(value, dt.date) else dt.date.fromisoformat(str(value))
            return float((day - EPOCH).days)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{value!r} is not a number")
        return float(value)

    def boundary_index(self, number: float, edges: npt.NDArray[np.float64] | None = None) -> int | None:
        """The base boundary equal to ``number`` (to rounding), or None when it falls inside a cell
        (``edges``: the boundaries as an array, when the caller holds them)."""
        edges = np.asarray(self.boundaries) if edges is None else edges
        position = int(np.searchsorted(edges, number - 1e-9 * max(1.0, abs(number))))
        if position < len(edges) and math.isclose(edges[position], number, rel_tol=1e-9, abs_tol=1e-9):
            return position
        return None

    def neighbours(self, number: float) -> tuple[object, object]:
        """The base boundaries just below and above ``number`` (for error messages)."""
        position = int(np.searchsorted(np.asarray(self.boundaries), number))
        below = self.boundaries[max(position - 1, 0)]
        above = self.boundaries[min(position, len(self.boundaries) - 1)]
        return self.to_value(below), self.to_value(above)

    def value_bounds(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        """Per base cell, its lowest value and its highest value (integers and dates: the last
        whole value, so b_{k+1} − 1, or b_K on a closed top) or supremum (numbers: b_{k+1})."""
        low = np.asarray(self.boundaries[:-1], dtype=np.float64)
        high = np.asarray(self.boundaries[1:], dtype=np.float64)
        if self.discrete:
            high = high - 1.0
            if self.closed_top:
                high[-1] += 1.0
        return low, high

    @property
    def discrete(self) -> bool:
        """Integer and date values: ``x <= c`` is ``x < c + 1``."""
        return self.kind in ("integer", "date")

    @property
    def closed_top(self) -> bool:
        """Whether the last cell includes its upper boundary: numeric domains and explicit integer
        edges end at ``upper`` inclusive; integer grids end with [upper, upper + 1) and dates
        before the next unit's start, so their last boundary is never a value in the domain."""
        return self.kind == "numeric" or (self.kind == "integer" and self.uniform_step is None)

    @property
    def reports_upper(self) -> bool:
        """Whether GROUP BY output needs ``<name>_upper``: a bin holds more than one value."""
        if self.kind == "numeric":
            return True
        edges = list(self.bin_starts) + [self.size]
        if self.kind == "integer":
            return any(self.boundaries[b] - self.boundaries[a] > 1 for a, b in itertools.pairwise(edges))
        return len(self.bin_starts) != self.size or self.unit != "day"


Domain = Categorical | Ordered
