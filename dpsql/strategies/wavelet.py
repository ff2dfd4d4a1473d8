"""The Haar wavelet strategy Y_n (Xiao et al.'s Privelet; Li's thesis §3.3)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from dpsql.matrix.workloads import Explicit, positive_int
from dpsql.strategies.hierarchical import tree_intervals


class Wavelet(Explicit):
    """Y_n: the total, then for every internal node of a binary tree (left half) − (right half).

    n rows, square and invertible; Δ₁ = 1 + log₂ n and Δ₂ = √(1 + log₂ n) for n = 2^k (a cell is
    in the total and in one detail row per level, with coefficient ±1). For other n the tree
    splits nodes into halves differing by at most one cell.

    >>> Wavelet(4).dense().astype(int).tolist()
    [[1, 1, 1, 1], [1, 1, -1, -1], [1, -1, 0, 0], [0, 0, 1, -1]]
    """

    def __init__(self, n: int) -> None:
        n = positive_int(n, "n")
        internal = [(lo, hi) for lo, hi in tree_intervals(n, 2).tolist() if hi > lo]
        rows, cols, values = [np.zeros(n, dtype=np.int64)], [np.arange(n)], [np.ones(n)]
        for r, (lo, hi) in enumerate(internal, start=1):
            middle = lo + (hi - lo + 2) // 2
            rows.append(np.full(hi - lo + 1, r))
            cols.append(np.arange(lo, hi + 1))
            values.append(np.where(np.arange(lo, hi + 1) < middle, 1.0, -1.0))
        matrix = sp.csr_array((np.concatenate(values), (np.concatenate(rows), np.concatenate(cols))), shape=(n, n))
        super().__init__(matrix)
        self.n = n

    def __repr__(self) -> str:
        return f"Wavelet({self.n})"


def wavelet(n: int) -> Wavelet:
    """The Haar wavelet strategy over n ordered cells (see :class:`Wavelet`)."""
    return Wavelet(n)
