"""Hierarchical strategies H_b (Hay et al.; Li's thesis §3.3): every node of a b-ary interval tree."""

from __future__ import annotations

from collections import deque

import numpy as np
import numpy.typing as npt

from dpsql.errors import ShapeError
from dpsql.matrix.workloads import Ranges


def tree_intervals(n: int, branching: int) -> npt.NDArray[np.int64]:
    """The nodes of a balanced b-ary tree over cells 0..n-1, root first, level by level.

    A node of s > 1 cells splits into min(b, s) contiguous children whose sizes differ by at most
    one (larger ones first), so any n works; for n = b^k this is exactly the thesis's H_n.

    >>> tree_intervals(4, 2).tolist()
    [[0, 3], [0, 1], [2, 3], [0, 0], [1, 1], [2, 2], [3, 3]]
    """
    nodes: list[tuple[int, int]] = []
    queue = deque([(0, n - 1)])
    while queue:
        lo, hi = queue.popleft()
        nodes.append((lo, hi))
        size = hi - lo + 1
        if size == 1:
            continue
        parts = min(branching, size)
        start = lo
        for k in range(parts):
            width = size // parts + (1 if k < size % parts else 0)
            queue.append((start, start + width - 1))
            start += width
    return np.asarray(nodes, dtype=np.int64)


class Hierarchical(Ranges):
    """H_b over n cells: 0/1 interval queries of the full tree, root to leaves.

    Δ₁ = depth (1 + log_b n for n = b^k) and Δ₂ = √depth: each cell lies in one node per level.
    """

    def __init__(self, n: int, branching: int = 2) -> None:
        if isinstance(branching, bool) or not isinstance(branching, (int, np.integer)) or branching < 2:
            raise ShapeError(f"branching must be an integer >= 2; got {branching!r}.")
        self.branching = int(branching)
        super().__init__(n, tree_intervals(int(n), self.branching) if isinstance(n, (int, np.integer)) and n >= 1
                         else [])

    def __repr__(self) -> str:
        return f"H{self.branching}({self.n})"


def hierarchical(n: int, branching: int = 2) -> Hierarchical:
    """The hierarchical strategy H_b over n ordered cells (see :class:`Hierarchical`)."""
    return Hierarchical(n, branching)
