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
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

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
class Grid:
    """A uniform grid as declared: base boundaries lower + k·step for k = 0..cells, the last one
    capped at ``top``, and GROUP BY bins of ``per_bin`` base cells. A handful of numbers fixes the
    whole grid, so it is what keys the domain (:meth:`Ordered.declaration`), however many cells."""

    lower: float
    step: float
    cells: int
    top: float
    per_bin: int = 1
    _built: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def boundaries(self) -> tuple[float, ...]:
        """lower + k·step for k = 0..cells, capped at top, computed in decimal so that 0.1-steps land
        on the numbers users write (0.3, not 0.30000000000000004); built once per grid."""
        if "boundaries" not in self._built:
            if self.lower.is_integer() and self.step.is_integer():
                built = tuple(np.minimum(self.lower + self.step * np.arange(self.cells + 1), self.top).tolist())
            else:
                start, width, cap = Decimal(repr(self.lower)), Decimal(repr(self.step)), Decimal(repr(self.top))
                built = tuple(float(min(start + k * width, cap)) for k in range(self.cells + 1))
            self._built["boundaries"] = built
        return self._built["boundaries"]

    def bin_starts(self) -> tuple[int, ...]:
        if "bin_starts" not in self._built:
            self._built["bin_starts"] = tuple(range(0, self.cells, self.per_bin))
        return self._built["bin_starts"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Ordered:
    """Base cells [b_k, b_{k+1}) over numbers (dates as day numbers), grouped into bins.

    ``boundaries`` has K+1 entries for K base cells; ``bin_starts`` are the base indices where the
    GROUP BY bins begin. ``uniform_step`` is the grid step when the grid is uniform (None for
    explicit edges or month/year dates), which lets the backend bin with arithmetic.

    A domain declared as a uniform grid is built from its ``grid`` (``Ordered(kind=..., grid=Grid(...))``):
    boundaries, bins and step are then computed from it, never passed, so the grid alone keys the
    domain (:meth:`declaration`). ``grid`` takes no part in equality: the same cells declared as
    explicit boundaries are the same domain.
    """

    kind: OrderedKind
    boundaries: tuple[float, ...] = ()
    bin_starts: tuple[int, ...] = ()
    uniform_step: float | None = None
    unit: DateUnit | None = None
    clamp: bool = False
    grid: Grid | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.grid is not None:  # the grid's own boundaries, bins and step (as dataclasses.replace passes them)
            built = {"boundaries": self.grid.boundaries(), "bin_starts": self.grid.bin_starts(),
                     "uniform_step": self.grid.step}
            for name, value in built.items():
                given = getattr(self, name)
                if given is not value and given not in ((), None) and given != value:
                    raise ValueError(f"a domain on a grid takes its {name} from the grid; pass only grid")
                object.__setattr__(self, name, value)
        elif len(self.boundaries) < 2 or not self.bin_starts:
            raise ValueError("an ordered domain needs at least two boundaries and one bin, or a grid")

    def declaration(self) -> tuple[object, ...] | None:
        """What fixes this domain exactly, in a few scalars, for keys (``dpsql.planning.plan_cache``):
        kind, unit, clamp and the grid it was built from; None when it was built from its boundaries
        (then they are its declaration). Equal declarations build equal domains (boundaries, bins and
        step are computed from the grid), so a key made from it never confuses two domains."""
        if self.grid is None:
            return None
        grid = self.grid
        return ("grid", self.kind, self.unit, self.clamp, float(grid.lower), float(grid.step), int(grid.cells),
                float(grid.top), int(grid.per_bin))

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
