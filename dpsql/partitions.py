"""Workloads whose queries partition the cells: W = diag(c)·R, R a 0/1 matrix with at most one 1
per column (each cell in one query at most), c the rows' weights.

A plain GROUP BY (under any WHERE on other columns, and its weighted copies) is such a workload;
so is a single COUNT with any WHERE. Its exact errors need no n × n matrix:

- identity (measure every cell, Δ₁ = Δ₂ = 1): query r has variance v·c_r²·s_r (s_r = |cells of
  row r|, v the unit noise variance), the total v·Σ_r c_r² s_r = v·trace(WᵀW);
- SVD bound (Li & Miklau): W's singular values are |c_r|·√s_r (its rows are orthogonal), so
  svdb = (Σ_r |c_r| √s_r)² / Σ_{r: c_r ≠ 0} s_r;
- optimality: for any strategy with X = AᵀA/Δ₂² (diagonal ≤ 1, so |X_ij| ≤ 1 and 1_rᵀX1_r ≤ s_r²),
  query r's variance c_r² 1_rᵀX⁺1_r ≥ c_r² s_r²/1_rᵀX1_r ≥ c_r² (Cauchy–Schwarz). Measuring each
  part's total once attains it, and where every part is one cell (s_r ≤ 1) that is the identity:
  then the identity is optimal and no other strategy need be scored.

Everything here is O(cells + non-zero entries), factor by factor for Kronecker products.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from dpsql.kronvec import kron_vectors
from dpsql.workloads import Explicit, FloatArray, Identity, Kron, VStack, Weighted, Workload


@dataclass(frozen=True, slots=True)
class Partition:
    """W = diag(c)·R: each row's weight c_r and cell count s_r, and which cells some row holds
    (as Kronecker factors of a 0/1 vector, so a product domain is not formed until needed)."""

    weights: FloatArray
    sizes: FloatArray
    support: tuple[FloatArray, ...]

    @property
    def single_cells(self) -> bool:
        """Whether every non-zero row reads one cell (then the identity is the optimal strategy)."""
        return bool(np.all(self.sizes[self.weights != 0] <= 1))

    def identity_variances(self) -> FloatArray:
        """diag(W Wᵀ) = c_r² s_r: each answer's variance under the identity at unit noise."""
        return np.asarray(self.weights**2 * self.sizes, dtype=np.float64)

    def identity_error(self) -> float:
        """trace(WᵀW) = Σ_r c_r² s_r: the identity's total squared error at unit noise."""
        return float(self.identity_variances().sum())

    def root_trace(self) -> float:
        """trace((WᵀW)^{1/2}) = Σ_r |c_r| √s_r (W's rows are orthogonal)."""
        return float(np.sum(np.abs(self.weights) * np.sqrt(self.sizes)))


def partition_form(W: Workload) -> Partition | None:
    """W as a weighted partition of its cells, or None when some cell is in two queries or some
    query weighs its cells unequally (or W's structure is not one read here)."""
    if isinstance(W, Identity):
        ones = np.ones(W.n)
        return Partition(weights=ones, sizes=ones.copy(), support=(ones.copy(),))
    if isinstance(W, Weighted):
        inner = partition_form(W.base)
        return None if inner is None else Partition(W.weight * inner.weights, inner.sizes, inner.support)
    if isinstance(W, Explicit):
        return _explicit_form(W)
    if isinstance(W, Kron):
        forms = [partition_form(f) for f in W.factors]
        if any(f is None for f in forms):
            return None
        parts = [f for f in forms if f is not None]
        return Partition(weights=kron_vectors([f.weights for f in parts]),
                         sizes=kron_vectors([f.sizes for f in parts]),
                         support=tuple(v for f in parts for v in f.support))
    if isinstance(W, VStack):
        return _stacked_form(W)
    return None


def _explicit_form(W: Explicit) -> Partition | None:
    matrix = sp.csr_array(W.matrix)
    matrix.eliminate_zeros()
    rows, cells = matrix.shape
    per_cell = np.bincount(matrix.indices, minlength=cells)
    if per_cell.max(initial=0) > 1:
        return None
    sizes = np.diff(matrix.indptr).astype(np.float64)
    row_of_entry = np.repeat(np.arange(rows), np.diff(matrix.indptr))
    first = np.zeros(rows)
    first[row_of_entry] = matrix.data  # any entry of each row (the last one written)
    if not np.array_equal(matrix.data, first[row_of_entry]):
        return None  # a row weighs its cells unequally
    return Partition(weights=first, sizes=sizes, support=((per_cell > 0).astype(np.float64),))


def _stacked_form(W: VStack) -> Partition | None:
    forms = [partition_form(block) for block in W.blocks]
    if any(f is None for f in forms):
        return None
    parts = [f for f in forms if f is not None]
    if len(parts) == 1:
        return parts[0]
    covered = np.sum([kron_vectors(f.support) for f in parts], axis=0)
    if covered.max(initial=0.0) > 1:
        return None  # two blocks read one cell
    return Partition(weights=np.concatenate([f.weights for f in parts]),
                     sizes=np.concatenate([f.sizes for f in parts]), support=(covered,))
