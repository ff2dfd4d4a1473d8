"""The box algebra of WHERE clauses: a predicate's TRUE (and FALSE) set as a disjoint union of
Kronecker *boxes* — one mask per axis over the axis's batch cells — so a block is Σ_boxes ⊗_axes.

Intersections of disjoint unions stay disjoint; a union is the left boxes plus the pieces of the right
ones outside them (each box minus a box peels one axis at a time); boxes that differ on one axis
are merged. The work and the number of boxes are bounded (:class:`BoxBudget`) so a WHERE clause of
many ORs across columns is refused, not planned for minutes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from dpsql.errors import UnsupportedQueryError
from dpsql.sql import ir

__all__ = ["MAX_PREDICATE_BOXES", "MAX_PREDICATE_WORK", "Box", "BoxBudget", "intersect", "merge", "union"]

BoolArray = npt.NDArray[np.bool_]
Box = tuple[BoolArray, ...]  # one mask per axis over the axis's batch cells (outside cell last)

#: A WHERE clause's TRUE and FALSE sets are each held as at most this many disjoint Kronecker
#: boxes, at every step of the box algebra (a block's Gram has boxes² Kronecker cross terms).
MAX_PREDICATE_BOXES = 64
#: Box pairs the box algebra may visit for one WHERE clause (each intersection of m and n boxes
#: visits m·n pairs; each union subtracts every left box from every remaining right piece).
MAX_PREDICATE_WORK = 2**16


@dataclass(slots=True)
class BoxBudget:
    """The box algebra's work for one WHERE clause: box pairs visited and boxes held (limits above)."""

    span: ir.Span
    work: int = 0

    def spend(self, pairs: int) -> None:
        self.work += pairs
        if self.work > MAX_PREDICATE_WORK:
            self._refuse(f"needs more than MAX_PREDICATE_WORK = {MAX_PREDICATE_WORK:,} box operations")

    def hold(self, boxes: list[Box]) -> list[Box]:
        if len(boxes) > MAX_PREDICATE_BOXES:
            self._refuse(f"splits the cells into more than MAX_PREDICATE_BOXES = {MAX_PREDICATE_BOXES} disjoint boxes")
        return boxes

    def _refuse(self, problem: str) -> None:
        raise UnsupportedQueryError(
            f"the WHERE clause at {self.span.describe()} {problem} (ORs across different columns multiply). "
            "Split the statement into several, or write conditions on one column as IN lists or ranges."
        )


def intersect(left: Sequence[Box], right: Sequence[Box], budget: BoxBudget) -> list[Box]:
    """Pairwise intersections of two disjoint unions: still disjoint; empty boxes dropped."""
    budget.spend(len(left) * len(right))
    boxes = [tuple(a & b for a, b in zip(x, y)) for x in left for y in right]
    return budget.hold([box for box in boxes if all(mask.any() for mask in box)])


def _subtract(box: Box, cut: Box) -> list[Box]:
    """box \\ cut as disjoint boxes: peel one axis at a time."""
    pieces, kept = [], list(box)
    for axis, (mask, other) in enumerate(zip(box, cut)):
        outside = mask & ~other
        if outside.any():
            pieces.append(tuple(kept[:axis]) + (outside,) + tuple(box[axis + 1:]))
        kept[axis] = mask & other
        if not kept[axis].any():
            return pieces
    return pieces


def union(left: Sequence[Box], right: Sequence[Box], budget: BoxBudget) -> list[Box]:
    """left ∪ right as a disjoint union: left plus the parts of right outside left."""
    extra = list(right)
    for box in left:
        budget.spend(len(extra))
        extra = budget.hold([piece for candidate in extra for piece in _subtract(candidate, box)])
    return budget.hold(list(left) + extra)


def merge(boxes: list[Box]) -> list[Box]:
    """Join disjoint boxes that differ on a single axis (their masks there are disjoint)."""
    merged = list(boxes)
    changed = True
    while changed and len(merged) > 1:
        changed = False
        for i in range(len(merged)):
            for j in range(i + 1, len(merged)):
                differ = [k for k, (a, b) in enumerate(zip(merged[i], merged[j])) if not np.array_equal(a, b)]
                if len(differ) == 1:
                    k = differ[0]
                    joined = tuple(m | n if axis == k else m for axis, (m, n) in enumerate(zip(merged[i], merged[j])))
                    merged = [b for index, b in enumerate(merged) if index not in (i, j)] + [joined]
                    changed = True
                    break
            if changed:
                break
    return merged
