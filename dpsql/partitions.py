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
  then the identity is optimal and no other strategy need be scored; otherwise :class:`Parts`.

Everything here is O(cells + non-zero entries), factor by factor for Kronecker products.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from dpsql.kronvec import kron_vectors
from dpsql.workloads import (
    MAX_DENSE_ENTRIES,
    Explicit,
    FloatArray,
    Identity,
    Kron,
    VStack,
    Weighted,
    Workload,
    check_dense_size,
)

IntArray = npt.NDArray[np.int64]


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


def part_of_cell(W: Workload) -> IntArray:
    """For a workload :func:`partition_form` reads, the row holding each cell (−1: none)."""
    if isinstance(W, Identity):
        return np.arange(W.n, dtype=np.int64)
    if isinstance(W, Weighted):
        return part_of_cell(W.base)
    if isinstance(W, Explicit):
        matrix = sp.csr_array(W.matrix)
        matrix.eliminate_zeros()
        owner = np.full(matrix.shape[1], -1, dtype=np.int64)
        owner[matrix.indices] = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
        return owner
    if isinstance(W, Kron):
        owners = np.meshgrid(*[part_of_cell(f) for f in W.factors], indexing="ij")
        rows = [f.shape[0] for f in W.factors]
        inside = np.logical_and.reduce([o >= 0 for o in owners])
        flat = np.ravel_multi_index(tuple(np.where(inside, o, 0) for o in owners), rows)
        return np.where(inside, flat, -1).ravel().astype(np.int64)
    assert isinstance(W, VStack)
    owner = np.full(W.shape[1], -1, dtype=np.int64)
    offset = 0
    for block in W.blocks:
        found = part_of_cell(block)
        owner[found >= 0] = found[found >= 0] + offset
        offset += block.shape[0]
    return owner


class Parts(Explicit):
    """A = R: one 0/1 row per part of a partition of (some of) the cells, each part's total
    measured once — optimal for a weighted partition workload diag(c)·R (module docstring).

    Δ₁ = Δ₂ = 1: a cell is in one row at most, so one row added or removed moves one answer by
    one, as for the identity. AᵀA = Σ_r 1_r 1_rᵀ, so (AᵀA)⁺ = Rᵀ diag(1/s²) R and A⁺A = Rᵀ diag(1/s) R
    (the mean over each part), both :class:`Averaging`: O(cells) to apply, never n × n.
    """

    def __init__(self, owner: IntArray, parts: int) -> None:
        cells = np.flatnonzero(owner >= 0)
        self.rows = sp.csr_array((np.ones(cells.size), (owner[cells], cells)), shape=(parts, owner.size))
        super().__init__(self.rows)
        self.sizes = np.bincount(owner[cells], minlength=parts).astype(np.float64)

    def profile(self) -> Averaging:
        """(AᵀA)⁺ = Rᵀ diag(1/s²) R."""
        return Averaging(self, 2)

    def projector(self) -> Averaging:
        """A⁺A = Rᵀ diag(1/s) R."""
        return Averaging(self, 1)

    def __repr__(self) -> str:
        return f"Parts({self.shape[0]} parts of {self.shape[1]} cells)"


class Averaging(Workload):
    """Rᵀ diag(s^−power) R for a :class:`Parts` R (empty parts weigh 0): symmetric, n × n, applied in O(n)."""

    def __init__(self, parts: Parts, power: int) -> None:
        self.parts = parts
        sizes = parts.sizes
        self.scale = np.divide(1.0, sizes**power, out=np.zeros_like(sizes), where=sizes > 0)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.parts.shape[1], self.parts.shape[1])

    def _matmat(self, X: FloatArray) -> FloatArray:
        R = self.parts.rows
        return np.asarray(R.T @ (np.asarray(R @ X) * self.scale[:, None]))

    def _rmatmat(self, Y: FloatArray) -> FloatArray:
        return self._matmat(Y)

    @property
    def T(self) -> Workload:
        return self

    def trace(self) -> float:
        return float(np.sum(self.scale * self.parts.sizes))

    def _on_parts(self, U: Workload) -> sp.csr_array:
        """U Rᵀ: U applied to every part's indicator vector (sparse products for an explicit U or a
        Kronecker product of explicit factors with few entries)."""
        indicators = sp.csr_array(self.parts.rows.T)
        if (matrix := _sparse(U)) is not None:
            return sp.csr_array(matrix @ indicators)
        cells, parts = indicators.shape
        check_dense_size(cells, parts, "the parts' indicator vectors")
        return sp.csr_array(U @ indicators.toarray())

    def bilinear_diag(self, U: Workload, V: Workload) -> FloatArray:
        """diag(U M Vᵀ) = Σ_r scale_r (U 1_r)(V 1_r)."""
        left = self._on_parts(U)
        right = left if V is U else self._on_parts(V)
        return np.asarray(left.multiply(right) @ self.scale, dtype=np.float64).ravel()

    def trace_against(self, G: Workload) -> float:
        """trace(G M) = Σ_r scale_r 1_rᵀ G 1_r for a square G."""
        return float(np.sum((self.parts.rows @ self._on_parts(G)).diagonal() * self.scale))


def _sparse(U: Workload) -> sp.csr_array | None:
    """U as a sparse matrix when it is explicit, a weight of one, or a Kronecker product of explicit
    factors whose product has at most MAX_DENSE_ENTRIES non-zero entries; else None."""
    if isinstance(U, Explicit):
        return sp.csr_array(U.matrix)
    if isinstance(U, Weighted) and (base := _sparse(U.base)) is not None:
        return sp.csr_array(U.weight * base)
    if isinstance(U, Kron) and all(isinstance(f, Explicit) for f in U.factors):
        factors = [sp.csr_array(f.matrix) for f in U.factors]  # type: ignore[attr-defined]
        if np.prod([f.nnz for f in factors], dtype=np.float64) <= MAX_DENSE_ENTRIES:
            product = factors[0]
            for factor in factors[1:]:
                product = sp.kron(product, factor, format="csr")
            return sp.csr_array(product)
    return None
