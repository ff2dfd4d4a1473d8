"""The information of kept measurements, kept with their release store across batches and stages.

A pool (:mod:`dpsql.releases.gls`) over a group's target cells T is the sum, over its classes of
measurements (those over the same cells, summed before the reduction), of each class's reduction
(S_i, r_i) onto T (:mod:`dpsql.releases.reduce`: a dense Schur complement), factored once:
M = Σ S_i = V_r λ_r V_rᵀ, giving x̂ = M⁺ b and the exact variance w M⁺ wᵀ = |w V_r λ_r^(-1/2)|².
Everything there depends only on which measurements join (their identities in the store, in
admission order) and on T, never on the batch that asks, so a store keeps:

- each class's reduction, by its members and its meet with T;
- per group's cells and the cells of the classes that join, the target cells T, each class's meet
  with T and the lift of T onto the group's cells (:func:`KeptInformation.layout`);
- per *layout* (table, data vector, T), the classes summed so far with their sums Σ S_i, Σ r_i and
  the factorisation. The same classes again (a later stage of the same batch, a repeated batch)
  give the same factorisation, with no work. Classes that *extend* them (the contract admits the
  oldest cells first, so a release over new cells comes last) add only their own reductions to the
  kept sums, in order, which are the same floating-point sums as adding every part afresh, so
  every answer and variance is bit for bit what rebuilding gives; the sum is then factored once.
  Any other change (a member joining an earlier class, a work bound leaving one out) sums the
  cached reductions again (n² per class) and factors once.

Only kept releases' measurements are remembered: a class with a planned (not yet measured)
measurement is reduced and summed onto the kept prefix, but neither it nor the pool is kept.
Post-processing of released values; numpy only.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
import numpy.typing as npt

from dpsql.releases.gls import Part, Pool, Sums, combined
from dpsql.releases.kept import KeptMeasurement
from dpsql.releases.reduce import Axes, Meet, Reduced, cell_map, meet, refinement

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
#: A class of measurements over the same cells: their (release, index) identities, in order.
Members = tuple[tuple[int, int], ...]
#: What a store remembers of a class: its reduction onto a target (a Part) or onto its meet's classes.
Held = TypeVar("Held", Part, Reduced)

#: Bytes of reductions a store remembers (then it forgets them all and starts again).
REDUCTION_BYTES = 2**28
#: Bytes of summed information and factorisations a store remembers (likewise).
POOL_BYTES = 2**28
#: Layouts (target cells, meets, lifts) a store remembers (likewise).
LAYOUTS = 4096


@dataclass(frozen=True, slots=True)
class Layout:
    """A pool's target cells T (refining the group's columns by the classes' cells), each class's meet
    with T, and per T cell the group cell holding it (-1: a cell no row can fall in)."""

    target: tuple[tuple[str, IntArray], ...]
    meets: tuple[Meet, ...]
    lift: IntArray

    @property
    def key(self) -> tuple[tuple[str, bytes], ...]:
        return cells_key(self.target)


def cells_key(axes: Axes) -> tuple[tuple[str, bytes], ...]:
    """Cells as a key: per axis, its key and map from base cells."""
    return tuple((name, np.asarray(cells, dtype=np.int64).tobytes()) for name, cells in axes)


@dataclass(slots=True)
class _Summed:
    """One layout's classes summed so far, their sums and their pool (None: M could not be factored)."""

    classes: tuple[Members, ...]
    sums: Sums
    pool: Pool | None

    @property
    def nbytes(self) -> int:
        return self.sums.nbytes + (self.pool.nbytes if self.pool is not None else 0)


@dataclass(slots=True)
class KeptInformation:
    """A release store's reductions and pools (module docstring); an empty one is a per-batch memo."""

    reduction_bytes: int = REDUCTION_BYTES
    pool_bytes: int = POOL_BYTES
    reductions: dict[tuple[Members, bytes], Part] = field(default_factory=dict)
    #: Reductions onto a meet's classes (:func:`dpsql.releases.reduce.on_classes`), by members and classes,
    #: shared by every target that meets the members in the same classes.
    on_classes: dict[tuple[Members, bytes], Reduced] = field(default_factory=dict)
    _held: int = 0  # bytes of ``reductions`` and ``on_classes``
    _layouts: dict[Hashable, _Summed] = field(default_factory=dict)
    _geometry: dict[Hashable, Layout] = field(default_factory=dict)
    _planned: dict[Hashable, Pool | None] = field(default_factory=dict)

    def layout(self, group: Axes, measured: Sequence[Axes], limit: int) -> Layout:
        """The layout of a pool over ``group``'s cells whose classes are over ``measured`` cells (in
        admission order; the target has at most ``limit`` cells: :func:`dpsql.releases.reduce.refinement`)."""
        name = (cells_key(group), tuple(cells_key(axes) for axes in measured), limit)
        found = self._geometry.get(name)
        if found is None:
            target = refinement(group, measured, limit)
            lift = cell_map(target, group)
            meets = tuple(meet(axes, target) for axes in measured)
            for each in meets:
                lift = np.where(each.of_group < 0, -1, lift)
            found = Layout(target=target, meets=meets, lift=lift)
            if len(self._geometry) >= LAYOUTS:
                self._geometry.clear()
            self._geometry[name] = found
        return found

    def reduction(self, members: Members, meet: bytes, compute: Callable[[], Part], keep: bool) -> Part:
        """A class's reduction onto the target (``meet``: its meet with the target, as bytes),
        computed once while ``keep`` (its members are all of kept releases)."""
        return self._remembered(self.reductions, (members, meet), compute, keep)

    def classes(self, members: Members, classes: bytes, compute: Callable[[], Reduced], keep: bool) -> Reduced:
        """A class's reduction onto its meet's classes (``classes``: the meet's map of its cells and
        count, as bytes), computed once while ``keep``."""
        return self._remembered(self.on_classes, (members, classes), compute, keep)

    def _remembered(self, memo: dict[tuple[Members, bytes], Held], name: tuple[Members, bytes],
                    compute: Callable[[], Held], keep: bool) -> Held:
        if keep and name in memo:
            return memo[name]
        found = compute()
        size = sum(array.nbytes for array in found if array is not None)
        if keep and size <= self.reduction_bytes:
            if self._held + size > self.reduction_bytes:
                self.reductions.clear()
                self.on_classes.clear()
                self._held = 0
            memo[name] = found
            self._held += size
        return found

    def pool(self, layout: Hashable, classes: Sequence[Members], kept: Sequence[bool],
             members: Sequence[KeptMeasurement], lift: IntArray, part: Callable[[int], Part]) -> Pool | None:
        """The pool of ``classes`` (in admission order; ``kept``: per class, whether its members are
        all of kept releases) over ``layout``'s target cells: ``part(i)`` reduces class i, called
        only for the classes the layout's kept sums do not hold."""
        classes = tuple(classes)
        earlier = self._layouts.get(layout)
        common = 0
        if earlier is not None:
            while common < min(len(earlier.classes), len(classes)) and earlier.classes[common] == classes[common]:
                common += 1
        if earlier is not None and common == len(earlier.classes) == len(classes):
            return _with(earlier.pool, members, lift)
        if earlier is not None and common == len(earlier.classes):  # extended: add the new classes' parts
            found, sums = combined(members, [part(i) for i in range(common, len(classes))], lift, earlier.sums)
        else:
            found, sums = combined(members, [part(i) for i in range(len(classes))], lift)
        entry = _Summed(classes=classes, sums=sums, pool=found)
        if all(kept) and entry.nbytes <= self.pool_bytes:
            self._layouts.pop(layout, None)
            if sum(e.nbytes for e in self._layouts.values()) + entry.nbytes > self.pool_bytes:
                self._layouts.clear()
            self._layouts[layout] = entry
        return found


    def planned(self, key: Hashable, build: Callable[[], Pool | None], members: Sequence[KeptMeasurement],
                lift: IntArray) -> Pool | None:
        """A pool holding planned (not yet measured) measurements, remembered by ``key``: what its
        information depends on (each planned measurement's strategy, noise variance and cells, the
        kept ones' identities, the layout), so a plan predicted again factors nothing."""
        if key not in self._planned:
            found = build()
            held = _held(found)
            if held > self.pool_bytes:
                return found
            if sum(_held(p) for p in self._planned.values()) + held > self.pool_bytes or len(self._planned) >= LAYOUTS:
                self._planned.clear()
            self._planned[key] = found
        return _with(self._planned[key], members, lift)


def _held(found: Pool | None) -> int:
    """Bytes a remembered pool holds."""
    return 0 if found is None else found.nbytes


def _with(found: Pool | None, members: Sequence[KeptMeasurement], lift: IntArray) -> Pool | None:
    """A kept factorisation as the pool of these members and this lift onto the group's cells."""
    if found is None:
        return None
    return Pool(members=tuple(members), lift=lift, basis=found.basis, cells=found.cells, whitened=found.whitened,
                estimate=found.estimate)
