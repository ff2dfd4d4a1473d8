"""Workloads whose queries partition the cells: W = diag(c)·R, R a 0/1 matrix whose rows are
pairwise disjoint or equal (each cell in one part at most, a part read by one or more queries), c
the rows' weights.

A plain GROUP BY (under any WHERE on other columns, and its weighted copies) is such a workload;
so are a single COUNT with any WHERE, an IN list, and several aggregates over the same groups (a
SUM and an AVG of one column read its sums twice); so are a single marginal as a Kronecker
product of identities and totals, and any Kronecker product of such factors (ranges that are
pairwise equal or disjoint, explicit rows, stacks of them). Its exact errors need no n × n matrix:

- identity (measure every cell, Δ₁ = Δ₂ = 1): query r has variance v·c_r²·s_r (s_r = |cells of
  row r|, v the unit noise variance), the total v·Σ_r c_r² s_r = v·trace(WᵀW);
- SVD bound (Li & Miklau): WᵀW = Σ_parts (Σ_{r in p} c_r²)·1_p 1_pᵀ, so W's singular values are
  √(Σ_{r in p} c_r²)·√s_p, one per part, and svdb = (Σ_p √(Σ_{r in p} c_r²·s_p))² / Σ_p s_p (parts read
  with a non-zero weight);
- optimality: for any strategy with X = AᵀA/Δ₂² (diagonal ≤ 1, so |X_ij| ≤ 1 and 1_pᵀX1_p ≤ s_p²),
  query r's variance c_r² 1_pᵀX⁺1_p ≥ c_r² s_p²/1_pᵀX1_p ≥ c_r² (Cauchy–Schwarz). Measuring each
  part's total once attains it for every query, and where every part is one cell (s ≤ 1) that is
  the identity: then the identity is optimal and no other strategy need be scored; otherwise
  :class:`Parts`. Under Laplace noise (scaled to Δ₁ ≥ Δ₂) every strategy's error is at least its
  Gaussian-normalised one, and the identity and Parts have Δ₁ = Δ₂ = 1, so the same holds; the
  bound is per query, so it holds for any weighting of the queries (the planner's objective).

Everything here is O(cells + non-zero entries), factor by factor for Kronecker products.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from dpsql.matrix.kronvec import kron_vectors
from dpsql.matrix.workloads import (
    MAX_DENSE_ENTRIES,
    AllRange,
    Explicit,
    FloatArray,
    Identity,
    Kron,
    Prefix,
    Ranges,
    VStack,
    Weighted,
    Workload,
    check_dense_size,
)

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Factor:
    """One Kronecker factor of a partition, W_f = diag(c)·R: each row's weight c_r, cell count s_r
    and part (−1 for an empty row), of ``parts`` parts."""

    weights: FloatArray
    sizes: FloatArray
    part: IntArray
    parts: int

    def part_sums(self) -> tuple[FloatArray, FloatArray]:
        """(Σ_{r in p} c_r², s_p) for every part p."""
        read = self.part >= 0
        energy = np.bincount(self.part[read], weights=self.weights[read] ** 2, minlength=self.parts)
        sizes = np.zeros(self.parts)
        sizes[self.part[read]] = self.sizes[read]
        return np.asarray(energy, dtype=np.float64), sizes


@dataclass(frozen=True, slots=True)
class Partition:
    """W = ⊗_f diag(c_f)·R_f (one factor unless W is a Kronecker product): every quantity below is
    a product over the factors, so the product domain is never formed."""

    factors: tuple[Factor, ...]

    @property
    def parts(self) -> int:
        return int(np.prod([f.parts for f in self.factors], dtype=np.int64))

    @property
    def single_cells(self) -> bool:
        """Whether every non-zero row reads one cell (then the identity is the optimal strategy)."""
        if not all(np.any(f.weights) for f in self.factors):
            return True  # every row is zero
        return all(bool(np.all(f.sizes[f.weights != 0] <= 1)) for f in self.factors)

    def identity_variances(self) -> FloatArray:
        """diag(W Wᵀ) = c_r² s_r: each answer's variance under the identity at unit noise."""
        return kron_vectors([f.weights**2 * f.sizes for f in self.factors])

    def identity_error(self) -> float:
        """trace(WᵀW) = Σ_r c_r² s_r: the identity's total squared error at unit noise."""
        return float(np.prod([np.sum(f.weights**2 * f.sizes) for f in self.factors]))

    def parts_error(self) -> float:
        """Σ_r c_r²: the total squared error of measuring each part once, at unit noise."""
        return float(np.prod([np.sum(f.weights**2) for f in self.factors]))

    def root_trace(self) -> float:
        """trace((WᵀW)^{1/2}) = Σ_p √(Σ_{r in p} c_r²·s_p)."""
        return float(np.prod([np.sum(np.sqrt(np.multiply(*f.part_sums()))) for f in self.factors]))

    def read_cells(self) -> float:
        """How many cells some query reads with a non-zero weight (W's non-zero columns)."""
        return float(np.prod([sizes[energy > 0].sum() for energy, sizes in (f.part_sums() for f in self.factors)]))

    def flat(self) -> Factor:
        """The partition as one factor over the product domain (rows in W's order)."""
        if len(self.factors) == 1:
            return self.factors[0]
        parts = [f.parts for f in self.factors]
        return Factor(weights=kron_vectors([f.weights for f in self.factors]),
                      sizes=kron_vectors([f.sizes for f in self.factors]),
                      part=_ravel([f.part for f in self.factors], parts), parts=self.parts)


def partition_form(W: Workload) -> Partition | None:
    """W as a weighted partition of its cells, or None when two queries share some cells but not
    all, or some query weighs its cells unequally (or W's structure is not one read here)."""
    found = _form(W, owners=False)
    return None if found is None else found[0]


def part_of_cell(W: Workload) -> tuple[IntArray, int]:
    """(the part holding each cell, −1 for none; how many parts) of a workload :func:`partition_form` reads."""
    found = _form(W, owners=True)
    assert found is not None and found[1] is not None, "part_of_cell needs a partition"
    return found[1], found[0].parts


Form = tuple[Partition, IntArray | None]


def _form(W: Workload, *, owners: bool) -> Form | None:
    """W's partition and, when ``owners`` (or needed to match a stack's blocks), each cell's part."""
    if isinstance(W, Identity):
        cells = np.arange(W.n, dtype=np.int64)
        return Partition((Factor(np.ones(W.n), np.ones(W.n), cells, W.n),)), (cells if owners else None)
    if isinstance(W, Weighted):
        inner = _form(W.base, owners=owners)
        if inner is None:
            return None
        first, *rest = inner[0].factors
        return Partition((Factor(W.weight * first.weights, first.sizes, first.part, first.parts), *rest)), inner[1]
    if isinstance(W, Explicit):
        return _kept(W, owners, lambda: _explicit_form(W, owners))
    if isinstance(W, Ranges):
        return _ranges_form(W, owners)
    if isinstance(W, Kron):
        return _kept(W, owners, lambda: _kron_form(W, owners))
    if isinstance(W, VStack):
        return _kept(W, owners, lambda: _stacked_form(W, owners))
    return None


def _kron_form(W: Kron, owners: bool) -> Form | None:
    """The factors' partitions side by side; each cell's part by row-major index over theirs."""
    forms = [_form(f, owners=owners) for f in W.factors]
    if any(f is None for f in forms):
        return None
    found = [f for f in forms if f is not None]
    owner = _ravel([f[1] for f in found if f[1] is not None], [f[0].parts for f in found]) if owners else None
    return Partition(tuple(factor for f in found for factor in f[0].factors)), owner


_kept_forms: weakref.WeakKeyDictionary[Workload, dict[bool, Form | None]] = weakref.WeakKeyDictionary()


def _kept(W: Workload, owners: bool, compute: Callable[[], Form | None]) -> Form | None:
    """``compute()``, W's form, kept per workload object while it lives (its arrays read-only): a block and
    its factors are read again by every stack holding them (a planning search scores many candidate groups
    of the same compiled blocks), and a stack by the planning-size check and then by the planner."""
    kept = _kept_forms.setdefault(W, {})
    if owners not in kept:
        found = compute()
        if found is not None:
            _read_only(*(a for f in found[0].factors for a in (f.weights, f.sizes, f.part)), found[1])
        kept[owners] = found
    return kept[owners]


def _read_only(*arrays: npt.NDArray[np.generic] | None) -> None:
    """Mark kept arrays read-only, so that no caller can change what later readers get."""
    for array in arrays:
        if array is not None:
            array.flags.writeable = False


def _explicit_form(W: Explicit, owners: bool) -> Form | None:
    """Each covered cell's part is the first row reading it; every row must read exactly the cells
    of its first cell's part, with one weight."""
    matrix = sp.csr_array(W.matrix)
    matrix.eliminate_zeros()
    rows, cells = matrix.shape
    counts = np.diff(matrix.indptr)
    row_of_entry = np.repeat(np.arange(rows), counts)
    weights = np.zeros(rows)
    weights[row_of_entry] = matrix.data  # any entry of each row (the last one written)
    if not np.array_equal(matrix.data, weights[row_of_entry]):
        return None  # a row weighs its cells unequally
    first = np.full(cells, rows, dtype=np.int64)
    np.minimum.at(first, matrix.indices, row_of_entry)
    read = counts > 0
    head = np.full(rows, -1, dtype=np.int64)
    head[read] = first[matrix.indices[matrix.indptr[:-1][read]]]
    covered = first < rows
    if not np.array_equal(first[matrix.indices], head[row_of_entry]) or \
            not np.array_equal(counts[read], np.bincount(first[covered], minlength=rows)[head[read]]):
        return None  # two rows share some cells but not all
    ids, compact = np.unique(head[read], return_inverse=True)
    part = np.full(rows, -1, dtype=np.int64)
    part[read] = compact.ravel()
    owner = None
    if owners:
        owner = np.full(cells, -1, dtype=np.int64)
        owner[covered] = np.searchsorted(ids, first[covered])
    return Partition((Factor(weights, counts.astype(np.float64), part, len(ids)),)), owner


def _ranges_form(W: Ranges, owners: bool) -> Form | None:
    """Intervals that are pairwise equal or disjoint (a total, a split of the axis): one part per
    distinct interval, in order. Prefix and all-range workloads over more than one cell overlap, so
    they are refused before their rows are listed."""
    if isinstance(W, (Prefix, AllRange)) and W.n > 1:
        return None
    distinct, part = np.unique(np.stack([W.lo, W.hi], axis=1), axis=0, return_inverse=True)
    lo, hi = distinct[:, 0], distinct[:, 1]
    if np.any(lo[1:] <= hi[:-1]):
        return None  # two distinct intervals overlap
    part = part.ravel().astype(np.int64)
    sizes = (hi - lo + 1).astype(np.float64)
    owner = None
    if owners:  # each cell's interval: the last one starting at or before it, if it reaches the cell
        cells = np.arange(W.n)
        owner = np.searchsorted(lo, cells, side="right").astype(np.int64) - 1
        reaches = cells <= hi[np.maximum(owner, 0)] if len(hi) else np.zeros(W.n, dtype=bool)
        owner[(owner < 0) | ~reaches] = -1
    return Partition((Factor(np.ones(W.shape[0]), sizes[part], part, len(distinct)),)), owner


def _ravel(indices: list[IntArray], sizes: list[int]) -> IntArray:
    """The row-major index of every combination of ``indices`` (−1 where any is −1)."""
    flat = np.zeros(1, dtype=np.int64)
    for index, size in zip(indices, sizes):
        flat = np.where((flat[:, None] >= 0) & (index[None, :] >= 0), flat[:, None] * size + index[None, :], -1).ravel()
    return flat


def _stacked_form(W: VStack, owners: bool) -> Form | None:
    """Blocks' partitions whose parts are pairwise equal or disjoint: a block's part matching an
    earlier one (the same cells exactly) keeps its index, the others are new parts. Blocks are read
    one at a time and the first that breaks the partition ends the search, so a stack that is not
    a partition (ranges beside a GROUP BY) costs the blocks up to that one, not all of them."""
    found = _form(W.blocks[0], owners=len(W.blocks) > 1 or owners)
    if found is None or len(W.blocks) == 1:
        return found
    first, owner = found
    assert owner is not None
    head = first.flat()
    owner, parts = owner.copy(), head.parts
    weights, sizes, part = [head.weights], [head.sizes], [head.part]
    for later in W.blocks[1:]:
        step = _flat_block(later)
        if step is None:
            return None
        block, cells = step
        mapping = _matched(owner, parts, cells, block.parts)
        if mapping is None:
            return None
        fresh = mapping < 0
        mapping[fresh] = parts + np.arange(int(fresh.sum()))
        parts += int(fresh.sum())
        alone = (cells >= 0) & (owner < 0)
        owner[alone] = mapping[cells[alone]]
        weights.append(block.weights)
        sizes.append(block.sizes)
        rows = np.full(block.part.size, -1, dtype=np.int64)
        rows[block.part >= 0] = mapping[block.part[block.part >= 0]]
        part.append(rows)
    return Partition((Factor(np.concatenate(weights), np.concatenate(sizes), np.concatenate(part), parts),)), owner


_flat_blocks: weakref.WeakKeyDictionary[Workload, tuple[Factor, IntArray] | None] = weakref.WeakKeyDictionary()


def _flat_block(W: Workload) -> tuple[Factor, IntArray] | None:
    """(W's partition as one factor, each cell's part) for a stack's later block; kept per object for the
    blocks whose forms are kept (:func:`_kept`), its arrays read-only."""
    if not isinstance(W, (Explicit, Kron)):
        return _flattened(W)
    if W not in _flat_blocks:
        found = _flattened(W)
        if found is not None:
            _read_only(found[0].weights, found[0].sizes, found[0].part, found[1])
        _flat_blocks[W] = found
    return _flat_blocks[W]


def _flattened(W: Workload) -> tuple[Factor, IntArray] | None:
    """:func:`_flat_block` computed."""
    step = _form(W, owners=True)
    if step is None:
        return None
    form, cells = step
    assert cells is not None
    return form.flat(), cells


def _matched(owner: IntArray, parts: int, cells: IntArray, new: int) -> IntArray | None:
    """For each of a block's ``new`` parts (``cells``: each cell's), the earlier part with the same
    cells, or −1 for a part that shares none; None when some part shares some cells but not all."""
    both = (owner >= 0) & (cells >= 0)
    mapping = np.full(new, -1, dtype=np.int64)
    if not both.any():
        return mapping
    keys, shared = np.unique(owner[both] * new + cells[both], return_counts=True)
    earlier, later = keys // new, keys % new
    earlier_size = np.bincount(owner[owner >= 0], minlength=parts)
    new_size = np.bincount(cells[cells >= 0], minlength=new)
    if len(np.unique(earlier)) != keys.size or len(np.unique(later)) != keys.size or \
            np.any(shared != earlier_size[earlier]) or np.any(shared != new_size[later]):
        return None
    mapping[later] = earlier
    return mapping


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
        if indicators.shape[1] == 0:
            return sp.csr_array((U.shape[0], 0))
        cells, parts = indicators.shape
        if not _applied_cheaper(U, parts) and (matrix := _sparse(U)) is not None:
            return sp.csr_array(matrix @ indicators)
        check_dense_size(cells, parts, "the parts' indicator vectors")
        return sp.csr_array(U @ indicators.toarray())

    def bilinear_diag(self, U: Workload, V: Workload) -> FloatArray:
        """diag(U M Vᵀ) = Σ_r scale_r (U 1_r)(V 1_r)."""
        left = self._on_parts(U)
        right = left if V is U else self._on_parts(V)
        return np.asarray(left.multiply(right) @ self.scale, dtype=np.float64).ravel()

    def trace_against(self, G: Workload) -> float:
        """trace(G M) = Σ_r scale_r 1_rᵀ G 1_r for a square G."""
        diagonal = self.parts.rows.multiply(self._on_parts(G).T).sum(axis=1)  # (R G Rᵀ)_rr, no parts × parts matrix
        return float(np.asarray(diagonal, dtype=np.float64).ravel() @ self.scale)


def _applied_cheaper(U: Workload, columns: int) -> bool:
    """Whether applying a Kronecker U factor by factor to ``columns`` dense vectors (about
    N·columns·Σ rows of the factors operations) costs less than forming U as a sparse product
    (Π nnz of the factors entries): e.g. dense factor Grams against a few parts' indicators."""
    if not isinstance(U, Kron) or (entries := _kron_entries(U)) is None:
        return False
    return bool(float(U.shape[1]) * columns * sum(f.shape[0] for f in U.factors) < entries)


def _kron_entries(U: Kron) -> float | None:
    """Π nnz of U's factors (the non-zero entries of their Kronecker product) when every factor is
    explicit, else None."""
    factors = [f.matrix for f in U.factors if isinstance(f, Explicit)]
    if len(factors) != len(U.factors):
        return None
    return float(np.prod([sp.csr_array(m).nnz if sp.issparse(m) else np.count_nonzero(m) for m in factors],
                         dtype=np.float64))


def _sparse(U: Workload) -> sp.csr_array | None:
    """U as a sparse matrix when it is explicit, a weight of one, or a Kronecker product of explicit
    factors whose product has at most MAX_DENSE_ENTRIES non-zero entries; else None."""
    if isinstance(U, Explicit):
        return sp.csr_array(U.matrix)
    if isinstance(U, Weighted) and (base := _sparse(U.base)) is not None:
        return sp.csr_array(U.weight * base)
    if isinstance(U, Kron) and (entries := _kron_entries(U)) is not None and entries <= MAX_DENSE_ENTRIES:
        factors = [sp.csr_array(f.matrix) for f in U.factors if isinstance(f, Explicit)]
        product = factors[0]
        for factor in factors[1:]:
            product = sp.kron(product, factor, format="csr")
        return sp.csr_array(product)
    return None
